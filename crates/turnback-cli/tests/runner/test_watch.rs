//! The file watcher: `watch start|stop|status`, the start `turn begin` makes, snapshots
//! taken from its changes agreeing with `snapshot --full`, a watcher killed with SIGKILL,
//! idle exit, exit when the workspace (with or without its store) or the socket is
//! deleted, no cookie in a snapshot, and no path in plaintext under the store.

use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{Env, files_under, unique};

fn watched_env() -> Env {
    let mut env = Env::new();
    env.set_var("TURNBACK_WATCH", "auto");
    env.ok(&["init"], None);
    env
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if done() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("timed out waiting for {what}");
}

fn running(env: &Env) -> bool {
    env.json(&["watch", "status"])["running"] == true
}

fn alive(pid: u64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z "))
}

/// Takes a snapshot from the watcher's changes and one with `--full`: the same tree.
fn both(env: &Env) -> (Value, Value) {
    let watched = env.json(&["snapshot"]);
    let full = env.json(&["snapshot", "--full"]);
    assert_eq!(watched["root"], full["root"], "watched {watched}\nfull {full}");
    assert!(full.get("watched").is_none(), "--full walks: {full}");
    (watched, full)
}

#[test]
fn start_status_stop_and_the_start_a_turn_begin_makes() {
    let env = watched_env();
    let status = env.json(&["watch", "status"]);
    assert_eq!(status["running"], false, "{status}");
    let human = env.ok(&["watch", "status"], None);
    assert!(String::from_utf8_lossy(&human.stdout).contains("no watcher is running"));
    let started = env.json(&["watch", "start"]);
    assert_eq!(started["running"], true, "{started}");
    let pid = started["pid"].as_u64().expect("a pid");
    assert!(alive(pid));
    let again = env.json(&["watch", "start"]);
    assert_eq!(again["pid"].as_u64(), Some(pid), "one watcher per workspace");
    let human = String::from_utf8_lossy(&env.ok(&["watch", "status"], None).stdout).into_owned();
    assert!(human.contains(&format!("watcher running (pid {pid})")), "{human}");
    let stopped = env.json(&["watch", "stop"]);
    assert_eq!(stopped["running"], true, "the state it stopped in: {stopped}");
    wait_for("the watcher to exit", || !alive(pid));
    assert_eq!(env.json(&["watch", "status"])["running"], false);
    assert_eq!(env.json(&["watch", "stop"])["running"], false, "stopping none is no error");

    // `turn begin` starts one (watch = "auto")…
    env.ok(&["turn", "begin", "--prompt", "go"], None);
    wait_for("turn begin to start a watcher", || running(&env));
    env.ok(&["turn", "end"], None);
    env.ok(&["watch", "stop"], None);
    // …and not with watch = "off".
    let mut off = Env::new();
    off.set_var("TURNBACK_WATCH", "off");
    off.ok(&["init"], None);
    off.ok(&["turn", "begin", "--prompt", "go"], None);
    std::thread::sleep(Duration::from_millis(500));
    assert!(!running(&off), "watch = off starts nothing");
}

#[test]
fn a_turn_begun_right_after_watch_stop_starts_a_new_watcher() {
    let env = watched_env();
    for round in 0..3 {
        let started = env.json(&["watch", "start"]);
        let pid = started["pid"].as_u64().expect("a pid");
        env.ok(&["watch", "stop"], None);
        // At once: the stopping watcher may not have exited yet.
        env.ok(&["turn", "begin", "--prompt", &format!("round {round}")], None);
        wait_for("turn begin to start a new watcher", || {
            let status = env.json(&["watch", "status"]);
            status["running"] == true && status["pid"].as_u64() != Some(pid)
        });
        env.ok(&["turn", "end"], None);
    }
    env.ok(&["watch", "stop"], None);
}

#[test]
fn a_stopped_watcher_makes_a_snapshot_walk_after_a_short_wait() {
    let env = watched_env();
    env.write("a.txt", "one\n");
    let pid = env.json(&["watch", "start"])["pid"].as_u64().expect("a pid");
    env.json(&["snapshot"]);
    // Stopped as a debugger, a suspended machine or an overloaded one leaves it.
    let signal = |sig: &str| std::process::Command::new("kill").args([sig, &pid.to_string()]).status().unwrap();
    assert!(signal("-STOP").success());
    env.write("a.txt", "two\n");
    let started = Instant::now();
    let out = env.run(&["--json", "snapshot"], None);
    let took = started.elapsed();
    assert!(signal("-CONT").success());
    assert!(out.status.success(), "{}", crate::common::show_output(&out));
    assert!(took < Duration::from_secs(5), "the snapshot did not wait out the stuck watcher: {took:?}");
    let snapshot: Value = serde_json::from_slice(&out.stdout).unwrap();
    let full = env.json(&["snapshot", "--full"]);
    assert_eq!(snapshot["root"], full["root"], "it walked and saw the change: {snapshot}");
    env.ok(&["watch", "stop"], None);
}

#[test]
fn a_stopped_watcher_is_replaced_at_the_next_turn_and_the_replacement_logged() {
    let env = watched_env();
    env.write("a.txt", "one\n");
    let old = env.json(&["watch", "start"])["pid"].as_u64().expect("a pid");
    let signal = |sig: &str, pid: u64| std::process::Command::new("kill").args([sig, &pid.to_string()]).status();
    assert!(signal("-STOP", old).unwrap().success());
    let started = Instant::now();
    env.ok(&["turn", "begin", "--prompt", "go on"], None);
    assert!(started.elapsed() < Duration::from_secs(5), "the turn did not wait out the stuck watcher");
    // The new watcher ends the stuck one and takes its place.
    let deadline = Instant::now() + Duration::from_secs(20);
    let new = loop {
        // While the old one is ended, a status request may find its connection reset.
        let out = env.run(&["--json", "watch", "status"], None);
        let status: Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        if let Some(pid) = status["pid"].as_u64().filter(|p| *p != old) {
            break pid;
        }
        assert!(Instant::now() < deadline, "no new watcher answered: {status}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_ne!(new, old);
    let state = std::fs::read_to_string(format!("/proc/{old}/status")).unwrap_or_default();
    assert!(state.is_empty() || state.contains("State:\tZ"), "the stuck watcher is gone: {state}");
    let log = std::fs::read_to_string(env.store.join("watch/watch.log")).unwrap_or_default();
    assert!(log.contains(&format!("replaced watcher {old}")), "{log}");
    env.ok(&["snapshot"], None); // the new watcher's first mark: a walk
    env.write("a.txt", "two\n");
    let (watched, _) = both(&env);
    assert_eq!(watched["watched"], true, "the new watcher vouches for the snapshot: {watched}");
    env.ok(&["watch", "stop"], None);
}

#[test]
fn a_new_sessions_first_snapshot_starts_from_the_workspaces_newest_and_reads_what_changed() {
    let env = watched_env();
    for i in 0..40 {
        env.write(&format!("src/f{i}.txt"), format!("file {i}\n"));
    }
    env.ok(&["watch", "start"], None);
    env.ok(&["session", "new", "--id", "first"], None);
    env.ok(&["--session", "first", "snapshot"], None); // the watcher's first mark: a walk
    env.write("src/f3.txt", "changed\n");
    env.ok(&["session", "new", "--id", "second"], None);
    let second = env.json(&["--session", "second", "snapshot"]);
    assert_eq!(second["watched"], true, "the new session starts from the other's snapshot: {second}");
    assert_eq!(second["readFiles"], 1, "only the changed file is read: {second}");
    assert_eq!(second["files"], 40, "{second}");
    let full = env.json(&["--session", "second", "snapshot", "--full"]);
    assert_eq!(second["root"], full["root"], "and it is right");
    // The first session, older now, starts from the second's newer snapshot too.
    env.write("src/f4.txt", "changed too\n");
    let first = env.json(&["--session", "first", "snapshot"]);
    assert_eq!(first["watched"], true, "{first}");
    assert_eq!(first["readFiles"], 1, "{first}");
    let full = env.json(&["--session", "first", "snapshot", "--full"]);
    assert_eq!(first["root"], full["root"]);
    env.ok(&["watch", "stop"], None);
}

#[test]
fn watched_snapshots_agree_with_full_walks_and_leave_no_trace() {
    let env = watched_env();
    let canary = unique("canaryw");
    std::fs::create_dir_all(env.ws.join(format!("dir-{canary}"))).unwrap();
    std::fs::write(env.ws.join(format!("dir-{canary}/file-{canary}.txt")), "one").unwrap();
    std::fs::write(env.ws.join("plain.txt"), "plain").unwrap();
    env.ok(&["watch", "start"], None);
    env.ok(&["snapshot"], None); // the first one with a mark walks everything
    let (watched, _) = both(&env);
    assert_eq!(watched["watched"], true, "{watched}");
    std::fs::write(env.ws.join(format!("dir-{canary}/file-{canary}.txt")), "two").unwrap();
    std::fs::rename(env.ws.join("plain.txt"), env.ws.join(format!("moved-{canary}.txt"))).unwrap();
    env.ok(&["snapshot", "--full"], None); // --full still records a mark for the next one
    std::fs::write(env.ws.join("late.txt"), "late").unwrap();
    let (watched, _) = both(&env);
    assert_eq!(watched["watched"], true, "{watched}");
    assert_eq!(watched["readFiles"], 1, "only the changed file is read: {watched}");
    // The cookie never stays, and never shows in a snapshot.
    let names: Vec<String> =
        std::fs::read_dir(&env.ws).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert!(names.iter().all(|n| !n.contains(".watch.turnback-")), "{names:?}");
    let diff = env.json(&["diff", watched["snapshotId"].as_str().unwrap(), "live"]);
    assert_eq!(diff["changes"].as_array().map(Vec::len), Some(0), "{diff}");
    // Paths travel over the socket only: nothing under the store holds the canary.
    for file in files_under(&env.store).into_iter().filter(|f| f.is_file()) {
        let bytes = std::fs::read(&file).unwrap();
        assert!(!bytes.windows(canary.len()).any(|w| w == canary.as_bytes()), "{} holds the canary", file.display());
    }
    env.ok(&["watch", "stop"], None);
}

#[test]
fn a_killed_watcher_means_full_walks_until_a_new_one_has_a_mark() {
    let env = watched_env();
    std::fs::write(env.ws.join("a.txt"), "a").unwrap();
    let pid = env.json(&["watch", "start"])["pid"].as_u64().unwrap();
    env.ok(&["snapshot"], None);
    assert_eq!(both(&env).0["watched"], true);
    let killed = std::process::Command::new("kill").args(["-KILL", &pid.to_string()]).status().unwrap();
    assert!(killed.success());
    wait_for("the watcher to die", || !alive(pid));
    std::fs::write(env.ws.join("a.txt"), "changed while no watcher ran").unwrap();
    let (after, _) = both(&env);
    assert!(after.get("watched").is_none(), "no watcher, no watched snapshot: {after}");
    let again = env.json(&["watch", "start"]);
    assert_ne!(again["pid"].as_u64(), Some(pid), "a new watcher (the old socket was stale)");
    let (first, _) = both(&env);
    assert!(first.get("watched").is_none(), "a new epoch: walked first: {first}");
    std::fs::write(env.ws.join("b.txt"), "b").unwrap();
    let (next, _) = both(&env);
    assert_eq!(next["watched"], true, "{next}");
    env.ok(&["watch", "stop"], None);
}

#[test]
fn the_watcher_exits_when_idle_and_when_its_workspace_is_deleted() {
    let env = watched_env();
    let settings = env.store.join("settings.toml");
    let text =
        std::fs::read_to_string(&settings).unwrap().replace("watch-idle-seconds = 1800", "watch-idle-seconds = 1");
    std::fs::write(&settings, text).unwrap();
    let pid = env.json(&["watch", "start"])["pid"].as_u64().unwrap();
    assert_eq!(env.json(&["watch", "status"])["idleExitSecs"], 1);
    wait_for("the idle watcher to exit", || !alive(pid));
    assert!(!running(&env));

    let other = env.root.join("doomed");
    std::fs::create_dir(&other).unwrap();
    let dir: &Path = &other;
    std::fs::write(env.store.join("settings.toml"), "").unwrap(); // idle exit back to 30 min
    let start = env.json(&["--workspace", dir.to_str().unwrap(), "watch", "start"]);
    assert_eq!(start["idleExitSecs"], 1800);
    let pid = start["pid"].as_u64().unwrap();
    std::fs::remove_dir_all(&other).unwrap();
    wait_for("the watcher of a deleted workspace to exit", || !alive(pid));
}

#[test]
fn a_watcher_flooded_past_its_bound_forgets_and_the_next_snapshot_walks() {
    let mut env = watched_env();
    env.set_var("TURNBACK_WATCH_MAX_DIRTY", "3");
    env.ok(&["watch", "start"], None);
    env.ok(&["snapshot"], None);
    for i in 0..10 {
        std::fs::write(env.ws.join(format!("flood-{i}.txt")), format!("{i}")).unwrap();
    }
    let (flooded, _) = both(&env);
    assert!(flooded.get("watched").is_none(), "past the bound: a full walk: {flooded}");
    assert!(env.json(&["watch", "status"])["overflows"].as_u64().unwrap() >= 1);
    std::fs::write(env.ws.join("flood-0.txt"), "after").unwrap();
    let (next, _) = both(&env);
    assert_eq!(next["watched"], true, "the walk's mark is after the overflow: {next}");
    env.ok(&["watch", "stop"], None);
}

/// A test harness's temporary directory, or a user's `rm -rf` of a project that keeps its
/// store inside: the socket goes with the workspace, so nothing can connect to wake the
/// watcher; it must still notice and exit. Likewise when only its socket is removed.
#[test]
fn the_watcher_exits_when_its_store_goes_with_its_workspace_or_its_socket_is_removed() {
    let env = watched_env();
    let doomed = env.root.join("doomed-with-store");
    let (work, store) = (doomed.join("work"), doomed.join("store"));
    std::fs::create_dir_all(&work).unwrap();
    let at = |args: &[&str]| {
        let mut all = vec!["--store", store.to_str().unwrap(), "--workspace", work.to_str().unwrap()];
        all.extend_from_slice(args);
        env.json(&all)
    };
    at(&["init"]);
    let pid = at(&["watch", "start"])["pid"].as_u64().unwrap();
    assert!(alive(pid));
    assert_eq!(sockets_under(&store).len(), 1, "the socket lives in the store, so it goes with it");
    std::fs::remove_dir_all(&doomed).unwrap();
    wait_for("the watcher whose store went with its workspace to exit", || !alive(pid));

    let pid = env.json(&["watch", "start"])["pid"].as_u64().unwrap();
    let sockets = sockets_under(&env.store);
    assert_eq!(sockets.len(), 1, "one watcher, one socket: {sockets:?}");
    std::fs::remove_file(&sockets[0]).unwrap();
    wait_for("the watcher whose socket was removed to exit", || !alive(pid));
}

/// The Unix sockets under `dir` (a watcher's, when its store's path is short enough).
fn sockets_under(dir: &Path) -> Vec<PathBuf> {
    files_under(dir).into_iter().filter(|f| f.symlink_metadata().is_ok_and(|m| m.file_type().is_socket())).collect()
}
