//! Benchmark: workspace snapshots, turnback against jj (Jujutsu) and the shadow-git
//! approach of today's agents (`../shared/bench/shadow-git-snapshot.sh`), side by side in
//! one run.
//!
//! Run: `cargo bench -p turnback-cli --bench snapshot` (a generated tree of `FILES` small
//! files in directories of 100, default 100,000; `FILES=1000000` is the monorepo row), or
//! `BENCH_TREE=/path/to/linux-source-6.1 cargo bench …` for a real tree
//! (`../shared/bench/get-linux-tree.sh DEST` fetches the Linux one).
//!
//! jj runs when a `jj` binary is on PATH (or `JJ=/path/to/jj`; `cargo install jj-cli
//! --version 0.45.1 --locked`, or `../shared/bench/get-jj.sh DEST`), in a non-colocated
//! repository of a copy of the tree (`jj util snapshot`, big files allowed); otherwise its
//! column says why it is missing. `SKIP_GIT=1` leaves out shadow git (minutes on a million
//! files). turnback runs twice: walking the tree (`snapshot --full`, no watcher) and with
//! its watcher running (`turnback watch start`), each in its own store.
//!
//! `RUNS` (default 5) sets the repetitions of the no-change and one-change rows, and
//! `FIRST_RUNS` (default `RUNS`) those of the first snapshot, each into a new store (jj: a
//! new `.jj` beside the kept one; shadow git: a new repository) deleted after it; each row
//! reports the median, and peak memory the largest. Every run is a fresh process; peak memory is its max RSS. Before
//! each, `sync` writes back what the previous tool left dirty (shadow git writes a new index
//! and objects every time), so no tool pays for another's writes; the tools take turns
//! going first, round by round.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

const KEY: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

struct Run {
    seconds: f64,
    max_rss_kib: u64,
}

fn timed(mut cmd: Command, rss_file: &Path) -> Run {
    // Untimed: the previous tool's dirty pages written back before this one starts.
    Command::new("sync").status().expect("sync");
    let start = Instant::now();
    let out = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).output().expect("run");
    let seconds = start.elapsed().as_secs_f64();
    assert!(out.status.success(), "{:?}: {}", cmd, String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains("skipped:"), "the snapshot was skipped: {stdout}");
    let max_rss_kib = std::fs::read_to_string(rss_file).ok().and_then(|s| s.trim().parse().ok()).unwrap_or(0);
    Run { seconds, max_rss_kib }
}

fn with_time(rss_file: &Path, program: &Path) -> Command {
    let mut cmd = Command::new("/usr/bin/time");
    cmd.arg("-f").arg("%M").arg("-o").arg(rss_file).arg(program);
    cmd
}

/// One turnback store snapshotting the tree: by walking it, or with its watcher.
struct Turnback {
    home: PathBuf,
    work: PathBuf,
    watched: bool,
}

impl Turnback {
    fn new(dir: &Path, work: &Path, watched: bool) -> Self {
        Self::at(dir.join(if watched { "store-watched" } else { "store" }), work, watched)
    }

    fn at(home: PathBuf, work: &Path, watched: bool) -> Self {
        std::fs::create_dir_all(&home).unwrap();
        // The real tree is over the default first-snapshot limit (1 GiB): raise it, as a
        // user snapshotting such a tree would (the limits are settings).
        std::fs::write(
            home.join("settings.toml"),
            format!(
                "[snapshots]\nfirst-max-size = \"8 GiB\"\nfirst-max-files = 2000000\nlater-max-size = \"1 GiB\"\n\
                 later-max-files = 200000\nwatch = \"{}\"\n",
                if watched { "auto" } else { "off" }
            ),
        )
        .unwrap();
        Turnback { home, work: work.to_path_buf(), watched }
    }

    fn command(&self, program: Command) -> Command {
        let mut cmd = program;
        cmd.current_dir(&self.work)
            .env("TURNBACK_HOME", &self.home)
            .env("TURNBACK_KEY", KEY)
            .env("TURNBACK_SESSION", "bench")
            .env("HOME", self.home.parent().unwrap())
            .env_remove("TURNBACK_KEY_FILE");
        cmd
    }

    fn snapshot(&self) -> Run {
        let rss = self.home.join("rss");
        let mut cmd = self.command(with_time(&rss, Path::new(env!("CARGO_BIN_EXE_turnback"))));
        cmd.arg("snapshot");
        if !self.watched {
            cmd.arg("--full");
        }
        timed(cmd, &rss)
    }

    /// A first snapshot into a store of its own, deleted after it.
    fn first_again(dir: &Path, work: &Path, round: usize) -> Run {
        let scratch = Self::at(dir.join(format!("store-first-{round}")), work, false);
        let run = scratch.snapshot();
        std::fs::remove_dir_all(&scratch.home).unwrap();
        run
    }

    /// A snapshot in session `session` (not the bench's own).
    fn snapshot_in(&self, session: &str) -> Run {
        let rss = self.home.join("rss");
        let mut cmd = self.command(with_time(&rss, Path::new(env!("CARGO_BIN_EXE_turnback"))));
        cmd.env("TURNBACK_SESSION", session).arg("snapshot");
        timed(cmd, &rss)
    }

    /// Runs `turnback hook claude-code` with `event` on stdin; returns its seconds.
    fn hook(&self, event: &serde_json::Value) -> f64 {
        use std::io::Write;
        let mut cmd = self.command(Command::new(env!("CARGO_BIN_EXE_turnback")));
        cmd.args(["hook", "claude-code"]).stdin(Stdio::piped()).stdout(Stdio::null()).stderr(Stdio::null());
        let start = Instant::now();
        let mut child = cmd.spawn().expect("run the hook");
        child.stdin.take().unwrap().write_all(event.to_string().as_bytes()).unwrap();
        assert!(child.wait().unwrap().success());
        start.elapsed().as_secs_f64()
    }

    /// What a shell call's window adds: the median time of a Claude Code `Bash` call's
    /// PreToolUse + PostToolUse hooks (one file changed between them) in a running turn,
    /// less that of a `Read` call's (the same hooks, nothing recorded); and whether the
    /// window opened (the Bash calls left shell checkpoints).
    fn shell_window(&self, changed: &Path, original: &[u8], runs: usize) -> (f64, bool) {
        let session = format!("bench-shell-{}", if self.watched { "watched" } else { "walked" });
        let event = |name: &str, extra: serde_json::Value| {
            let mut e = serde_json::json!({
                "session_id": session, "transcript_path": self.home.join("none.jsonl"),
                "cwd": self.work, "hook_event_name": name,
            });
            for (k, v) in extra.as_object().unwrap() {
                e[k] = v.clone();
            }
            e
        };
        self.hook(&event("UserPromptSubmit", serde_json::json!({ "prompt": "bench the shell" })));
        let (mut shell, mut read) = (Vec::new(), Vec::new());
        for i in 0..runs {
            for tool in ["Bash", "Read"] {
                let call = serde_json::json!({
                    "tool_name": tool, "tool_input": { "command": "touch it", "file_path": changed },
                    "tool_use_id": format!("toolu_{tool}_{i}"),
                });
                let mut seconds = self.hook(&event("PreToolUse", call.clone()));
                let mut bytes = original.to_vec();
                bytes.extend_from_slice(format!("// {tool} {i}\n").as_bytes());
                std::fs::write(changed, &bytes).unwrap();
                seconds += self.hook(&event("PostToolUse", call));
                if tool == "Bash" { shell.push(seconds) } else { read.push(seconds) }
            }
        }
        self.hook(&event("Stop", serde_json::json!({ "stop_hook_active": false })));
        std::fs::write(changed, original).unwrap();
        let out = self
            .command(Command::new(env!("CARGO_BIN_EXE_turnback")))
            .args(["--session", &session, "--json", "checkpoints"])
            .output()
            .unwrap();
        let opened = String::from_utf8_lossy(&out.stdout).contains("\"shell\"");
        ((median(shell) - median(read)).max(0.0), opened)
    }

    fn run(&self, args: &[&str]) {
        let mut cmd = self.command(Command::new(env!("CARGO_BIN_EXE_turnback")));
        let out = cmd.args(args).output().expect("run turnback");
        assert!(out.status.success(), "turnback {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
}

/// jj in a non-colocated repository of its own copy of the tree.
struct Jj {
    program: PathBuf,
    work: PathBuf,
}

impl Jj {
    fn find() -> Result<PathBuf, String> {
        if let Some(p) = std::env::var_os("JJ") {
            return Ok(PathBuf::from(p));
        }
        let path = std::env::var_os("PATH").unwrap_or_default();
        std::env::split_paths(&path)
            .map(|d| d.join("jj"))
            .find(|p| p.is_file())
            .ok_or_else(|| "no jj on PATH (cargo install jj-cli --version 0.45.1 --locked)".to_string())
    }

    fn new(program: PathBuf, dir: &Path, tree: &Path) -> Self {
        let work = dir.join("jj-work");
        let status = Command::new("cp").arg("-a").arg(tree).arg(&work).status().unwrap();
        assert!(status.success(), "copy the tree for jj");
        let jj = Jj { program, work };
        jj.init();
        jj
    }

    fn command(&self, program: Command) -> Command {
        let mut cmd = program;
        cmd.current_dir(&self.work)
            .env("JJ_CONFIG", "/dev/null")
            .env("JJ_USER", "bench")
            .env("JJ_EMAIL", "bench@example.invalid")
            .env("HOME", self.work.parent().unwrap());
        cmd
    }

    fn snapshot(&self) -> Run {
        let rss = self.work.parent().unwrap().join("rss-jj");
        let mut cmd = self.command(with_time(&rss, &self.program));
        cmd.args(["util", "snapshot", "--config", "snapshot.max-new-file-size=\"8GiB\""]);
        timed(cmd, &rss)
    }

    /// A first snapshot into a new repository (the kept one's `.jj` set aside meanwhile),
    /// deleted after it.
    fn first_again(&self) -> Run {
        let (repo, kept) = (self.work.join(".jj"), self.work.parent().unwrap().join("jj-kept"));
        std::fs::rename(&repo, &kept).unwrap();
        self.init();
        let run = self.snapshot();
        std::fs::remove_dir_all(&repo).unwrap();
        std::fs::rename(&kept, &repo).unwrap();
        run
    }

    fn init(&self) {
        let out = self.command(Command::new(&self.program)).args(["git", "init", "--no-colocate"]).output().unwrap();
        assert!(out.status.success(), "jj git init: {}", String::from_utf8_lossy(&out.stderr));
    }
}

fn shadow_git(dir: &Path, work: &Path, script: &Path) -> Run {
    shadow_git_in(&dir.join("shadow.git"), dir, work, script)
}

/// A first shadow-git snapshot into a repository of its own, deleted after it.
fn shadow_git_again(dir: &Path, work: &Path, script: &Path, round: usize) -> Run {
    let repo = dir.join(format!("shadow-first-{round}.git"));
    let run = shadow_git_in(&repo, dir, work, script);
    std::fs::remove_dir_all(&repo).unwrap();
    run
}

fn shadow_git_in(repo: &Path, dir: &Path, work: &Path, script: &Path) -> Run {
    let rss = dir.join("rss-git");
    let mut cmd = with_time(&rss, Path::new("bash"));
    cmd.arg(script).arg(repo).arg(work);
    timed(cmd, &rss)
}

fn du(path: &Path) -> u64 {
    let out = Command::new("du").arg("-sb").arg(path).output().expect("du");
    String::from_utf8_lossy(&out.stdout).split_whitespace().next().and_then(|s| s.parse().ok()).unwrap_or(0)
}

fn generate(root: &Path, files: usize) {
    let words = ["alpha", "beta", "gamma", "delta", "kernel", "driver", "struct", "return", "static", "void"];
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for i in 0..files {
        let dir = root.join(format!("d{:03}/s{:02}", i / 10_000, (i / 100) % 100));
        if i % 100 == 0 {
            std::fs::create_dir_all(&dir).unwrap();
        }
        // Small files, as a monorepo has many of (and `../shared/bench/make-tree.sh`
        // writes): 80–140 bytes.
        let len = 80 + (next() % 60) as usize;
        let mut text = String::with_capacity(len + 16);
        while text.len() < len {
            text.push_str(words[(next() % words.len() as u64) as usize]);
            text.push(if next() % 8 == 0 { '\n' } else { ' ' });
        }
        std::fs::write(dir.join(format!("f{i:07}.c")), text).unwrap();
    }
}

/// Reads every regular file under `dir` once (never following symlinks).
fn warm(dir: &Path) {
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for e in entries.flatten() {
            match e.file_type() {
                Ok(t) if t.is_dir() => stack.push(e.path()),
                Ok(t) if t.is_file() => {
                    let _ = std::io::copy(&mut std::fs::File::open(e.path()).unwrap(), &mut std::io::sink());
                }
                _ => {}
            }
        }
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// One tool's column: its rows, or why it did not run.
#[derive(Default)]
struct Column {
    first: Vec<f64>,
    same: Vec<f64>,
    one: Vec<f64>,
    store: Option<u64>,
    peak_first_kib: u64,
    peak_incremental_kib: u64,
    missing: Option<String>,
}

impl Column {
    fn first(&mut self, r: Run) {
        self.first.push(r.seconds);
        self.peak_first_kib = self.peak_first_kib.max(r.max_rss_kib);
    }

    fn incremental(&mut self, r: Run, changed: bool) {
        self.peak_incremental_kib = self.peak_incremental_kib.max(r.max_rss_kib);
        if changed { self.one.push(r.seconds) } else { self.same.push(r.seconds) }
    }
}

fn main() {
    let runs: usize = std::env::var("RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(5);
    let first_runs: usize = std::env::var("FIRST_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(runs).max(1);
    let script = std::env::var_os("SHADOW_GIT_SCRIPT")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/bench/shadow-git-snapshot.sh"));
    let skip_git = std::env::var_os("SKIP_GIT").is_some();
    assert!(skip_git || script.exists(), "shadow-git script not found at {} (set SHADOW_GIT_SCRIPT)", script.display());
    let base = std::env::var_os("BENCH_DIR").map(PathBuf::from).unwrap_or_else(|| env!("CARGO_TARGET_TMPDIR").into());
    let dir = tempfile::tempdir_in(&base).unwrap();
    let (work, label) = match std::env::var_os("BENCH_TREE") {
        Some(tree) => (PathBuf::from(&tree), format!("tree {}", Path::new(&tree).display())),
        None => {
            let files: usize = std::env::var("FILES").ok().and_then(|v| v.parse().ok()).unwrap_or(100_000);
            let work = dir.path().join("work");
            generate(&work, files);
            (work, format!("generated tree of {files} files in directories of 100"))
        }
    };
    let jj = Jj::find().map(|program| Jj::new(program, dir.path(), &work));
    // Warm the page cache once (metadata and contents) so no tool pays for the first read
    // from disk alone: whichever ran first would otherwise.
    for tree in std::iter::once(&work).chain(jj.as_ref().ok().map(|j| &j.work)) {
        Command::new("du").arg("-s").arg(tree).stdout(Stdio::null()).status().unwrap();
        warm(tree);
    }

    let walked = Turnback::new(dir.path(), &work, false);
    let watched = Turnback::new(dir.path(), &work, true);
    let (mut tb, mut tbw, mut jjc, mut git) =
        (Column::default(), Column::default(), Column::default(), Column::default());
    // The first round's stores are the ones the later rows use; every other round's first
    // snapshot goes into a store of its own. The tools take turns going first, and each
    // reads a tree warmed just before (untimed): a shared machine may reclaim page cache
    // within a minute, and a tool that ran after a slow one would read part of the tree from
    // disk (by hand on the Linux tree: 3.5 s warm, 5.5 s a minute after warming).
    for round in 0..first_runs {
        for turn in 0..3 {
            let tool = (turn + round) % 3;
            match (tool, &jj) {
                (1, Ok(j)) => warm(&j.work),
                (1, Err(_)) => {}
                (2, _) if skip_git => {}
                _ => warm(&work),
            }
            match tool {
                0 if round == 0 => {
                    tb.first(walked.snapshot());
                    tb.store = Some(du(&walked.home));
                }
                0 => tb.first(Turnback::first_again(dir.path(), &work, round)),
                1 => match &jj {
                    Ok(j) if round == 0 => {
                        jjc.first(j.snapshot());
                        jjc.store = Some(du(&j.work.join(".jj")));
                    }
                    Ok(j) => jjc.first(j.first_again()),
                    Err(why) => jjc.missing = Some(why.clone()),
                },
                _ if skip_git => git.missing = Some("SKIP_GIT set".into()),
                _ if round == 0 => git.first(shadow_git(dir.path(), &work, &script)),
                _ => git.first(shadow_git_again(dir.path(), &work, &script, round)),
            }
        }
    }
    // The watched store's first snapshot is not a row (it is the same walk); the watcher
    // then covers everything after it.
    watched.run(&["watch", "start"]);
    watched.snapshot();

    let changed = find_a_file(&work);
    let original = std::fs::read(&changed).unwrap();
    let jj_changed = jj.as_ref().ok().map(|j| j.work.join(changed.strip_prefix(&work).unwrap()));
    for i in 0..runs {
        for changed_now in [false, true] {
            if changed_now {
                let mut bytes = original.clone();
                bytes.extend_from_slice(format!("// change {i}\n").as_bytes());
                std::fs::write(&changed, &bytes).unwrap();
                if let Some(c) = &jj_changed {
                    std::fs::write(c, &bytes).unwrap();
                }
            }
            for turn in 0..4 {
                match (turn + i) % 4 {
                    0 => tb.incremental(walked.snapshot(), changed_now),
                    1 => tbw.incremental(watched.snapshot(), changed_now),
                    2 => {
                        if let Ok(j) = &jj {
                            jjc.incremental(j.snapshot(), changed_now);
                        }
                    }
                    _ => {
                        if !skip_git {
                            git.incremental(shadow_git(dir.path(), &work, &script), changed_now);
                        }
                    }
                }
            }
        }
    }
    // A new session's first snapshot in the watched workspace, one file changed: it starts
    // from the newest snapshot any session took, so it costs what changed (a walk before).
    let mut new_session = Vec::new();
    for i in 0..runs {
        let mut bytes = original.clone();
        bytes.extend_from_slice(format!("// session {i}\n").as_bytes());
        std::fs::write(&changed, &bytes).unwrap();
        let session = format!("bench-new-{i}");
        watched.run(&["session", "new", "--id", &session]);
        new_session.push(watched.snapshot_in(&session).seconds);
    }
    std::fs::write(&changed, &original).unwrap();
    // Rewind preview of the last turn: a turn that changes one file, then the preview.
    let mut rewind = Vec::new();
    for i in 0..runs {
        walked.run(&["turn", "begin", "--new", "--prompt", "bench"]);
        let mut bytes = original.clone();
        bytes.extend_from_slice(format!("// turn {i}\n").as_bytes());
        std::fs::write(&changed, &bytes).unwrap();
        walked.run(&["turn", "end"]);
        let start = Instant::now();
        walked.run(&["rewind", "--to", &(i + 1).to_string()]);
        rewind.push(start.elapsed().as_secs_f64());
    }
    std::fs::write(&changed, &original).unwrap();
    // What a shell call's window adds to its hooks, with the watcher and without.
    let shell_watched = watched.shell_window(&changed, &original, runs);
    let shell_walked = walked.shell_window(&changed, &original, runs);
    watched.run(&["watch", "stop"]);
    if !skip_git {
        let repack = Command::new("git")
            .arg(format!("--git-dir={}", dir.path().join("shadow.git").display()))
            .args(["repack", "-a", "-d", "-q"])
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .status()
            .unwrap();
        assert!(repack.success());
        git.store = Some(du(&dir.path().join("shadow.git")));
    }

    report(&label, runs, first_runs, &[("turnback", &tb), ("tb watcher", &tbw), ("jj", &jjc), ("shadow git", &git)]);
    println!("{:<30} {:>11.3}s  (target <= 1 s)", "rewind preview, last turn", median(rewind));
    println!("{:<30} {:>11.3}s  (target <= 0.015 s)", "new session's first, watched", median(new_session));
    for (name, (added, opened)) in
        [("shell window added, watched", shell_watched), ("shell window added, walked", shell_walked)]
    {
        let how = if opened { "window taken" } else { "no window: over the cost rule" };
        println!("{name:<30} {added:>11.3}s  ({how}; target <= 0.3 s)");
    }
}

/// Prints the table: one column per tool, then turnback's ratios to jj and shadow git.
fn report(label: &str, runs: usize, first_runs: usize, columns: &[(&str, &Column)]) {
    println!(
        "snapshot benchmark, {label}, {runs} runs per repeated row, {first_runs} of the first (medians; fresh process each)"
    );
    for (name, c) in columns {
        if let Some(why) = &c.missing {
            println!("  {name}: not run ({why})");
        }
    }
    print!("{:<30}", "");
    columns.iter().for_each(|(name, _)| print!(" {name:>11}"));
    println!(" {:>9} {:>9} {:>9}", "tb/jj", "watch/jj", "tb/git");
    let [tb, tbw, jj, git] = [0, 1, 2, 3].map(|i| columns[i].1);
    let seconds = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |s| format!("{s:.3}s"));
    let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}", a / b),
        _ => "-".to_string(),
    };
    let med = |v: &Vec<f64>| (!v.is_empty()).then(|| median(v.clone()));
    let line = |name: &str, get: &dyn Fn(&Column) -> Option<f64>, fmt: &dyn Fn(Option<f64>) -> String| {
        print!("{name:<30}");
        columns.iter().for_each(|(_, c)| print!(" {:>11}", fmt(get(c))));
        println!(" {:>9} {:>9} {:>9}", ratio(get(tb), get(jj)), ratio(get(tbw), get(jj)), ratio(get(tb), get(git)));
    };
    line("first snapshot", &|c| med(&c.first), &seconds);
    line("no-change snapshot", &|c| med(&c.same), &seconds);
    line("one changed file", &|c| med(&c.one), &seconds);
    let mb = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |b| format!("{:.1}MB", b / 1e6));
    line("store after (git repacked)", &|c| c.store.map(|b| b as f64), &mb);
    let mib = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |k| format!("{:.1}MiB", k / 1024.0));
    line("peak memory, first", &|c| (c.peak_first_kib > 0).then_some(c.peak_first_kib as f64), &mib);
    line("peak memory, incremental", &|c| (c.peak_incremental_kib > 0).then_some(c.peak_incremental_kib as f64), &mib);
}

fn find_a_file(root: &Path) -> PathBuf {
    let mut dir = root.to_path_buf();
    loop {
        let mut entries: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
        entries.sort();
        if let Some(f) =
            entries.iter().find(|p| p.is_file() && !p.file_name().unwrap().to_string_lossy().starts_with('.'))
        {
            return f.clone();
        }
        dir = entries.into_iter().find(|p| p.is_dir() && !p.ends_with(".git")).expect("a file somewhere");
    }
}
