//! `turnback compare`: two forks of one session, each given the next prompt, side by side.

use crate::common::*;

/// Paths and their change in a list of counted changes.
fn paths(changes: &serde_json::Value) -> Vec<(String, String)> {
    changes
        .as_array()
        .expect("a list of changes")
        .iter()
        .map(|c| (c["path"].as_str().unwrap().to_string(), c["change"].as_str().unwrap().to_string()))
        .collect()
}

/// A session of one turn, forked twice after it into two working trees, each fork then
/// running its own turn 2 that changes one file the same way, one file differently and one
/// file of its own.
fn two_forks(env: &Env) -> (std::path::PathBuf, std::path::PathBuf) {
    env.write("shared.txt", "base\n");
    env.write("same.txt", "one\n");
    env.ok(&["session", "new", "--id", "parent"], None);
    env.ok(&["--session", "parent", "turn", "begin", "--prompt", "set up"], None);
    env.write("setup.txt", "made by turn 1\n");
    env.ok(&["--session", "parent", "turn", "end"], None);
    let mut dirs = Vec::new();
    for (id, word) in [("agent-a", "alpha"), ("agent-b", "beta")] {
        let dir = env.root.join(id);
        let d = dir.to_str().unwrap();
        env.ok(&["session", "fork", "--from", "parent", "--after-turn", "1", "--into", d, "--id", id], None);
        env.ok_in(&dir, &["--session", id, "turn", "begin", "--prompt", "make it better"]);
        std::fs::write(dir.join("same.txt"), "one\ntwo\n").unwrap();
        std::fs::write(dir.join("shared.txt"), format!("base\n{word}\n{word}\n")).unwrap();
        std::fs::write(dir.join(format!("only-{word}.txt")), "mine\n").unwrap();
        env.ok_in(&dir, &["--session", id, "turn", "end"]);
        dirs.push(dir);
    }
    (dirs.remove(0), dirs.remove(0))
}

#[test]
fn compare_shows_where_two_forks_results_differ_and_each_ones_changes_since_the_fork_point() {
    let env = Env::new();
    two_forks(&env);
    let c = env.json(&["compare", "agent-a", "agent-b", "--patch"]);
    assert_eq!(c["forkPoint"]["turn"], 1, "{c:#}");
    assert_eq!(c["forkPoint"]["preview"], "set up");
    assert_eq!((c["a"]["turn"].as_u64(), c["b"]["turn"].as_u64()), (Some(2), Some(2)));
    let owned = |v: &[(&str, &str)]| v.iter().map(|(p, c)| (p.to_string(), c.to_string())).collect::<Vec<_>>();
    assert_eq!(
        paths(&c["a"]["changes"]),
        owned(&[("only-alpha.txt", "added"), ("same.txt", "modified"), ("shared.txt", "modified")])
    );
    assert_eq!(
        paths(&c["b"]["changes"]),
        owned(&[("only-beta.txt", "added"), ("same.txt", "modified"), ("shared.txt", "modified")])
    );
    // The file both changed the same way is not a difference; the one they changed
    // differently is, and so is each one's own file.
    assert_eq!(
        paths(&c["differences"]),
        owned(&[("only-alpha.txt", "deleted"), ("only-beta.txt", "added"), ("shared.txt", "modified")])
    );
    let shared = c["differences"].as_array().unwrap().iter().find(|d| d["path"] == "shared.txt").unwrap();
    assert_eq!((shared["added"].as_u64(), shared["deleted"].as_u64()), (Some(2), Some(2)));
    let patch = c["patch"].as_str().unwrap();
    assert!(patch.contains("-alpha\n") && patch.contains("+beta\n"), "{patch}");
    assert!(c["a"]["patch"].as_str().unwrap().contains("+two\n"));

    let text = String::from_utf8(env.ok(&["compare", "agent-a", "agent-b"], None).stdout).unwrap();
    assert!(text.contains("fork point: turn 1 \"set up\""), "{text}");
    assert!(text.contains("A and B differ in 3 file(s)"), "{text}");
    assert!(text.lines().any(|l| l.contains("shared.txt") && l.contains("+2 -2")), "{text}");
}

#[test]
fn compare_at_the_fork_point_finds_no_difference_and_unrelated_sessions_are_refused() {
    let env = Env::new();
    two_forks(&env);
    let c = env.json(&["compare", "agent-a", "agent-b", "--turn", "1"]);
    assert_eq!(c["differences"], serde_json::json!([]), "{c:#}");
    assert_eq!(c["a"]["changes"], serde_json::json!([]));
    // A fork against its parent: the parent's turn 1 is the fork point.
    let c = env.json(&["compare", "parent", "agent-b"]);
    assert_eq!(c["forkPoint"]["turn"], 1);
    assert_eq!(paths(&c["differences"]).len(), 3);

    env.ok(&["session", "new", "--id", "stranger"], None);
    env.ok(&["--session", "stranger", "turn", "begin", "--prompt", "other work"], None);
    env.ok(&["--session", "stranger", "turn", "end"], None);
    let f = env.fail(&["compare", "agent-a", "stranger"], None);
    assert_eq!(f.code, "invalid-argument", "no fork point");
    let f = env.fail(&["compare", "agent-a", "nobody"], None);
    assert_eq!(f.code, "not-found");
    let f = env.fail(&["compare", "agent-a", "agent-b", "--turn", "7"], None);
    assert_eq!(f.code, "not-found");
}
