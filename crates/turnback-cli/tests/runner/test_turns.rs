//! Turns: begin/join/background/end, late start snapshots, and cancelling a begin.

use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::common::{Env, str_at};

fn turns(env: &Env) -> Vec<serde_json::Value> {
    env.json(&["turns"])["turns"].as_array().unwrap().clone()
}

fn begin(env: &Env, args: &[&str]) -> String {
    let mut all = vec!["turn", "begin"];
    all.extend_from_slice(args);
    let out = env.ok(&all, None);
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

#[test]
fn turns_have_stable_ids_join_while_running_and_count_prompt_rounds() {
    let env = Env::new();
    env.write("a.txt", "a");
    let first = begin(&env, &["--prompt", "fix the bug\nwith details below"]);
    assert_eq!(begin(&env, &["--prompt", "also this"]), first, "a message mid-turn joins the running turn");
    env.ok(&["fs", "write", "b.txt"], Some(b"b"));
    env.ok(&["turn", "end"], None);
    let second = begin(&env, &["--prompt", "second"]);
    assert_ne!(second, first);
    let background = begin(&env, &["--background"]);
    assert_ne!(background, second, "background turns get their own id");
    let listed = turns(&env);
    assert_eq!(listed.len(), 3);
    assert_eq!(listed[0]["index"], 1);
    assert_eq!(str_at(&listed[0], "/preview"), "fix the bug");
    assert_eq!(str_at(&listed[2], "/kind"), "background");
    assert!(listed[0]["snapshot"]["id"].is_string());
    assert!(listed[0]["endSnapshot"]["id"].is_string());
    // The checkpoint made during turn 1 is in prompt round 1.
    let cps = env.json(&["checkpoints", "--turn", "1"])["checkpoints"].as_array().unwrap().clone();
    assert_eq!(cps.len(), 1);
    assert!(uuid_v7(&first), "{first}");
}

fn uuid_v7(s: &str) -> bool {
    s.len() == 36 && s.as_bytes()[14] == b'7'
}

fn spawn_begin(
    env: &Env,
    flag: &std::path::Path,
    wait_ms: &str,
) -> (std::process::Child, std::io::BufReader<std::process::ChildStderr>) {
    let mut cmd = env.command(&["turn", "begin", "--prompt", "slow", "--wait-ms", wait_ms]);
    cmd.env("TURNBACK_PAUSE", format!("snapshot-walked={}", flag.display()))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    (child, stderr)
}

#[test]
fn a_slow_start_snapshot_lets_the_turn_start_late_and_is_attached_when_done() {
    let env = Env::new();
    env.write("a.txt", "a");
    env.ok(&["init"], None);
    let flag = env.root.join("go");
    let (child, _stderr) = spawn_begin(&env, &flag, "200");
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", crate::common::show_output(&out));
    let listed = turns(&env);
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["snapshot"]["late"], true);
    assert!(listed[0]["snapshot"]["id"].is_null(), "still being taken");
    std::fs::write(&flag, "").unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while turns(&env)[0]["snapshot"]["id"].is_null() {
        assert!(Instant::now() < deadline, "the detached snapshot never attached");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn interrupting_turn_begin_records_nothing_and_exits_130() {
    for signal in ["INT", "TERM"] {
        let env = Env::new();
        env.write("a.txt", "a");
        env.ok(&["init"], None);
        let flag = env.root.join("go");
        let (mut child, _stderr) = spawn_begin(&env, &flag, "60000");
        // Wait until the detached snapshot is under way, then interrupt the begin.
        std::thread::sleep(Duration::from_millis(300));
        let status = std::process::Command::new("kill").arg(format!("-{signal}")).arg(child.id().to_string()).status();
        assert!(status.unwrap().success());
        let code = child.wait().unwrap().code();
        assert_eq!(code, Some(130), "SIG{signal}");
        std::fs::write(&flag, "").unwrap();
        std::thread::sleep(Duration::from_millis(300));
        assert!(turns(&env).is_empty(), "no turn recorded after SIG{signal}");
        env.assert_verify_clean();
        // No snapshot record survives either: the next snapshot reads every file again.
        let snap = env.json(&["snapshot"]);
        assert_eq!(snap["readFiles"], 1, "{snap}");
    }
}

#[test]
fn turn_end_without_a_running_turn_is_not_found() {
    let env = Env::new();
    env.ok(&["init"], None);
    let f = env.fail(&["turn", "end"], None);
    assert_eq!(f.code, "not-found");
}

#[test]
fn a_late_start_snapshot_whose_process_dies_is_reported_not_left_pending() {
    let env = Env::new();
    env.write("a.txt", "a");
    env.ok(&["init"], None);
    let flag = env.root.join("never");
    let (child, _stderr) = spawn_begin(&env, &flag, "200");
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", crate::common::show_output(&out));
    let turn_id = String::from_utf8(out.stdout).unwrap().trim().to_string();
    // Kill the detached process that is (still, paused) taking the start snapshot.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let killed = std::process::Command::new("pkill")
            .args(["-9", "-f", &format!("__turn-snapshot --turn {turn_id}")])
            .status()
            .unwrap();
        if killed.success() {
            break;
        }
        assert!(Instant::now() < deadline, "the detached snapshot process was never seen");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(200));
    let listed = turns(&env);
    assert!(listed[0]["snapshot"]["id"].is_null());
    let reason = listed[0]["snapshot"]["skipped"].as_str().unwrap_or_default().to_string();
    assert!(reason.contains("died"), "{}", listed[0]);
}

#[test]
fn a_prompt_file_is_read_within_its_limit_whatever_it_names() {
    let env = Env::new();
    let started = Instant::now();
    let endless = env.fail(&["turn", "begin", "--prompt-file", "/dev/zero"], None);
    assert_eq!((endless.exit, endless.code.as_str()), (2, "invalid-argument"), "{endless:?}");
    assert!(endless.message.contains("4 MiB"), "names the limit: {}", endless.message);
    assert!(started.elapsed() < Duration::from_secs(10), "an endless file ends at the limit");
    let big = env.root.join("big-prompt.txt");
    std::fs::write(&big, "y".repeat((4 << 20) + 1)).unwrap();
    let over = env.fail(&["turn", "begin", "--prompt-file", big.to_str().unwrap()], None);
    assert_eq!(over.code, "invalid-argument", "{over:?}");
    let ok = env.root.join("prompt.txt");
    std::fs::write(&ok, "fix the lexer\n").unwrap();
    env.ok(&["turn", "begin", "--prompt-file", ok.to_str().unwrap()], None);
    let turns = env.json(&["turns"]);
    assert_eq!(turns["turns"].as_array().map(Vec::len), Some(1), "no turn was begun by a refused file: {turns:#}");
    assert_eq!(str_at(&turns, "/turns/0/preview"), "fix the lexer", "{turns:#}");
}
