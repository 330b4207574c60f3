//! Benchmark: `turnback stage` and `turnback commit` of a 10 KiB file, each a fresh
//! process, against the way agents checkpoint a file today (a shadow git repository:
//! `git add`, `write-tree`, `commit-tree`, `update-ref`), side by side in one run.
//!
//! Run: `cargo bench -p turnback-cli --bench stage_commit` (set `ROUNDS`, default 40).
//! Target (DESIGN.md §5): median ≤ 15 ms for each of stage and commit, and for each of
//! every agent's file hooks (its before event stages, its after event commits) around the
//! same edit.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const KEY: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

/// Each agent's "before" and "after" hook events around a write of `file.txt`, in its
/// documented shape (see `commands/hook/*.rs`); `{ws}` and `{round}` are filled in.
const AGENT_EVENTS: [(&str, &str, &str); 5] = [
    (
        "claude-code",
        r#"{"session_id":"bench-cc","cwd":"{ws}","hook_event_name":"PreToolUse","tool_name":"Write","tool_use_id":"toolu_{round}","tool_input":{"file_path":"{ws}/file.txt","content":"…"}}"#,
        r#"{"session_id":"bench-cc","cwd":"{ws}","hook_event_name":"PostToolUse","tool_name":"Write","tool_use_id":"toolu_{round}","tool_input":{"file_path":"{ws}/file.txt","content":"…"}}"#,
    ),
    (
        "codex",
        r#"{"session_id":"bench-codex","cwd":"{ws}","hook_event_name":"PreToolUse","turn_id":"1","tool_name":"apply_patch","tool_use_id":"call_{round}","tool_input":{"command":"*** Begin Patch\n*** Update File: file.txt\n@@\n-a\n+b\n*** End Patch\n"}}"#,
        r#"{"session_id":"bench-codex","cwd":"{ws}","hook_event_name":"PostToolUse","turn_id":"1","tool_name":"apply_patch","tool_use_id":"call_{round}","tool_input":{"command":"*** Begin Patch\n*** Update File: file.txt\n@@\n-a\n+b\n*** End Patch\n"},"tool_response":"Success. Updated files."}"#,
    ),
    (
        "gemini",
        r#"{"session_id":"bench-gemini","cwd":"{ws}","hook_event_name":"BeforeTool","timestamp":"2026-12-01T00:00:00Z","tool_name":"write_file","tool_input":{"file_path":"{ws}/file.txt","content":"…"}}"#,
        r#"{"session_id":"bench-gemini","cwd":"{ws}","hook_event_name":"AfterTool","timestamp":"2026-12-01T00:00:01Z","tool_name":"write_file","tool_input":{"file_path":"{ws}/file.txt","content":"…"},"tool_response":{"llmContent":"ok","returnDisplay":"ok"}}"#,
    ),
    (
        "cursor",
        r#"{"conversation_id":"bench-cursor","generation_id":"g","hook_event_name":"preToolUse","workspace_roots":["{ws}"],"tool_name":"Write","tool_use_id":"tool_{round}","tool_input":{"file_path":"{ws}/file.txt","content":"…"}}"#,
        r#"{"conversation_id":"bench-cursor","generation_id":"g","hook_event_name":"postToolUse","workspace_roots":["{ws}"],"tool_name":"Write","tool_use_id":"tool_{round}","tool_input":{"file_path":"{ws}/file.txt","content":"…"},"tool_output":"{}"}"#,
    ),
    (
        "opencode",
        r#"{"event":"tool-before","sessionID":"ses_bench","directory":"{ws}","tool":"write","callID":"call_{round}","args":{"filePath":"{ws}/file.txt","content":"…"}}"#,
        r#"{"event":"tool-after","sessionID":"ses_bench","directory":"{ws}","tool":"write","callID":"call_{round}","args":{"filePath":"{ws}/file.txt","content":"…"}}"#,
    ),
];

fn turnback(dir: &Path, args: &[&str]) -> (Duration, String) {
    turnback_with(dir, args, None)
}

fn turnback_with(dir: &Path, args: &[&str], stdin: Option<&[u8]>) -> (Duration, String) {
    use std::io::Write;
    let start = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_turnback"))
        .args(args)
        .current_dir(dir.join("ws"))
        .env("TURNBACK_HOME", dir.join("store"))
        .env("TURNBACK_KEY", KEY)
        .env("XDG_CONFIG_HOME", dir.join("conf"))
        .env("HOME", dir.join("home"))
        .env_remove("TURNBACK_SESSION")
        .env_remove("CLAUDE_PROJECT_DIR")
        .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run turnback");
    if let (Some(bytes), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(bytes).expect("write stdin");
    }
    let out = child.wait_with_output().expect("run turnback");
    let elapsed = start.elapsed();
    assert!(out.status.success(), "turnback {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    (elapsed, String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn git(shadow: &Path, work: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg(format!("--git-dir={}", shadow.display()))
        .arg(format!("--work-tree={}", work.display()))
        .args(["-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false"])
        .args(args)
        .current_dir(work)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "bench")
        .env("GIT_AUTHOR_EMAIL", "bench@localhost")
        .env("GIT_COMMITTER_NAME", "bench")
        .env("GIT_COMMITTER_EMAIL", "bench@localhost")
        .stdin(Stdio::null())
        .output()
        .expect("run git");
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn shadow_checkpoint(shadow: &Path, work: &Path, round: usize) -> Duration {
    let start = Instant::now();
    git(shadow, work, &["add", "--", "file.txt"]);
    let tree = git(shadow, work, &["write-tree"]);
    let commit = git(shadow, work, &["commit-tree", "-m", "checkpoint", &tree]);
    git(shadow, work, &["update-ref", &format!("refs/checkpoints/{round}"), &commit]);
    start.elapsed()
}

fn content(round: usize) -> Vec<u8> {
    let line = format!("round {round}: the quick brown fox jumps over the lazy dog 0123456789\n");
    line.as_bytes().iter().copied().cycle().take(10 * 1024).collect()
}

struct Stats {
    median: f64,
    p90: f64,
    min: f64,
}

fn stats(mut samples: Vec<Duration>) -> Stats {
    samples.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    Stats { median: ms(samples[samples.len() / 2]), p90: ms(samples[samples.len() * 9 / 10]), min: ms(samples[0]) }
}

fn main() {
    let rounds: usize = std::env::var("ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(40);
    // On the disk the store would live on (not tmpfs), so fsync costs what it really costs.
    let base = std::env::var_os("BENCH_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| env!("CARGO_TARGET_TMPDIR").into());
    let dir = tempfile::tempdir_in(base).expect("temp dir");
    for d in ["ws", "conf", "home"] {
        std::fs::create_dir(dir.path().join(d)).unwrap();
    }
    let work = dir.path().join("ws");
    let file = work.join("file.txt");
    std::fs::write(&file, content(0)).unwrap();
    turnback(dir.path(), &["init"]);
    let shadow = dir.path().join("shadow.git");
    let init = Command::new("git").args(["init", "-q", "--bare"]).arg(&shadow).status().expect("git init");
    assert!(init.success());

    let (mut stage, mut commit, mut pair, mut baseline) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for round in 1..=rounds {
        let (t_stage, op) = turnback(dir.path(), &["stage", "file.txt"]);
        std::fs::write(&file, content(round)).unwrap();
        let (t_commit, _) = turnback(dir.path(), &["commit", &op]);
        stage.push(t_stage);
        commit.push(t_commit);
        pair.push(t_stage + t_commit);
        // The shadow-git baseline checkpoints the same change of the same file.
        std::fs::write(&file, content(round + 1_000_000)).unwrap();
        baseline.push(shadow_checkpoint(&shadow, &work, round));
    }
    // Every agent's file hooks around the same edit: its "before" event stages, its
    // "after" event commits; each is a fresh process on the agent's critical path.
    let ws = work.display().to_string();
    let mut hooks: Vec<(&str, &str, Vec<Duration>)> = Vec::new();
    for (agent, before, after) in AGENT_EVENTS {
        let (mut pre, mut post) = (Vec::new(), Vec::new());
        for round in 1..=rounds {
            let event = |template: &str| template.replace("{ws}", &ws).replace("{round}", &round.to_string());
            let (t_pre, _) = turnback_with(dir.path(), &["hook", agent], Some(event(before).as_bytes()));
            std::fs::write(&file, content(round + 2_000_000)).unwrap();
            let (t_post, _) = turnback_with(dir.path(), &["hook", agent], Some(event(after).as_bytes()));
            pre.push(t_pre);
            post.push(t_post);
        }
        hooks.push((agent, "before", pre));
        hooks.push((agent, "after", post));
    }
    assert!(!dir.path().join("store/hooks.log").exists(), "a hook failed: see hooks.log");
    let (s, c, p, b) = (stats(stage), stats(commit), stats(pair), stats(baseline));
    println!("stage + commit of a 10 KiB file, each a fresh process, {rounds} rounds (ms)");
    println!("{:<36} {:>8} {:>8} {:>8}", "", "median", "p90", "min");
    println!("{:<36} {:>8.2} {:>8.2} {:>8.2}", "turnback stage", s.median, s.p90, s.min);
    println!("{:<36} {:>8.2} {:>8.2} {:>8.2}", "turnback commit", c.median, c.p90, c.min);
    println!("{:<36} {:>8.2} {:>8.2} {:>8.2}", "turnback stage + commit", p.median, p.p90, p.min);
    println!("{:<36} {:>8.2} {:>8.2} {:>8.2}", "shadow git add+write-tree+commit", b.median, b.p90, b.min);
    let mut worst: f64 = 0.0;
    for (agent, side, times) in hooks {
        let h = stats(times);
        worst = worst.max(h.median);
        println!("{:<36} {:>8.2} {:>8.2} {:>8.2}", format!("hook {agent} {side} a write"), h.median, h.p90, h.min);
    }
    println!("ratio turnback (stage + commit) / shadow git: {:.2}", p.median / b.median);
    let verdict = |m: f64| if m <= 15.0 { "meets" } else { "MISSES" };
    println!(
        "target median <= 15 ms each: stage {}, commit {}, every hook {}",
        verdict(s.median),
        verdict(c.median),
        verdict(worst)
    );
}
