//! Sessions: new, list, show, delete.

use crate::common::Env;

#[test]
fn sessions_are_created_listed_shown_and_deleted_with_everything_they_hold() {
    let env = Env::new();
    env.ok(&["init"], None);
    let first = String::from_utf8(env.ok(&["session", "new", "--id", "task-a"], None).stdout).unwrap();
    assert_eq!(first.trim(), "task-a");
    env.ok(&["--session", "task-a", "turn", "begin", "--prompt", "p"], None);
    env.ok(&["--session", "task-a", "fs", "write", "a.txt"], Some(b"a"));
    env.ok(&["--session", "task-a", "turn", "end"], None);
    env.ok(&["session", "new", "--id", "task-b"], None);
    let listed = env.json(&["session", "list"]);
    let ids: Vec<&str> = listed["sessions"].as_array().unwrap().iter().map(|s| s["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["task-a", "task-b"]);
    // The latest session is the default.
    let shown = env.json(&["session", "show"]);
    assert_eq!(shown["session"]["id"], "task-b");
    let a = env.json(&["session", "show", "task-a"]);
    assert_eq!((a["turns"].as_u64(), a["snapshots"].as_u64(), a["checkpoints"].as_u64()), (Some(1), Some(2), Some(1)));
    let f = env.fail(&["session", "new", "--id", "task-a"], None);
    assert_eq!(f.code, "already-exists");
    let f = env.fail(&["session", "new", "--id", "-bad"], None);
    assert_eq!(f.code, "invalid-argument");

    let deleted = env.json(&["session", "delete", "task-a"]);
    assert_eq!(
        (deleted["turns"].as_u64(), deleted["snapshots"].as_u64(), deleted["checkpoints"].as_u64()),
        (Some(1), Some(2), Some(1))
    );
    let listed = env.json(&["session", "list"]);
    assert_eq!(listed["sessions"].as_array().unwrap().len(), 1);
    env.ok(&["gc"], None);
    let du = env.json(&["du"]);
    assert_eq!(du["checkpointArtifactBytes"], 0, "{du}");
    env.assert_verify_clean();
}

#[test]
fn a_session_with_a_running_turn_is_not_deleted() {
    let env = Env::new();
    env.ok(&["session", "new", "--id", "busy"], None);
    env.ok(&["--session", "busy", "turn", "begin"], None);
    let f = env.fail(&["session", "delete", "busy"], None);
    assert_eq!(f.code, "conflict");
}

#[test]
fn a_fork_carries_turns_through_t_materialises_files_and_outlives_its_parent() {
    let env = Env::new();
    env.write("a.txt", "a0\n");
    env.ok(&["session", "new", "--id", "parent"], None);
    for (i, content) in ["a1\n", "a2\n", "a3\n"].iter().enumerate() {
        env.ok(&["--session", "parent", "turn", "begin", "--prompt", &format!("turn {}", i + 1)], None);
        env.write("a.txt", content);
        env.write(&format!("t{}.txt", i + 1), "made in this turn\n");
        env.ok(&["--session", "parent", "turn", "end"], None);
    }
    std::os::unix::fs::symlink("a.txt", env.ws.join("link")).unwrap();
    let into = env.root.join("fork-tree");
    let forked = env.json(&[
        "session",
        "fork",
        "--from",
        "parent",
        "--after-turn",
        "2",
        "--into",
        into.to_str().unwrap(),
        "--id",
        "child",
    ]);
    assert_eq!((forked["turns"].as_u64(), forked["snapshots"].as_u64()), (Some(2), Some(4)));
    assert_eq!(
        std::fs::read_to_string(into.join("a.txt")).unwrap(),
        "a2\n",
        "the files as they were right after turn 2"
    );
    assert!(into.join("t2.txt").exists() && !into.join("t3.txt").exists());
    // The fork lives in its own workspace and outlives its parent.
    env.ok(&["session", "delete", "parent"], None);
    env.ok(&["gc"], None);
    let turns = env.json_in(&into, &["--session", "child", "turns"]);
    assert_eq!(turns["turns"].as_array().unwrap().len(), 2);
    let diff = env.json_in(&into, &["--session", "child", "diff", "--turn", "2", "--numstat"]);
    let paths: Vec<&str> = diff["changes"].as_array().unwrap().iter().map(|c| c["path"].as_str().unwrap()).collect();
    assert_eq!(paths, ["a.txt", "t2.txt"]);
    env.assert_verify_clean();
    let f = env.fail(&["session", "fork", "--from", "child", "--into", into.to_str().unwrap()], None);
    assert_eq!(f.code, "already-exists", "never materialises into a non-empty directory");
}
