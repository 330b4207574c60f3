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
