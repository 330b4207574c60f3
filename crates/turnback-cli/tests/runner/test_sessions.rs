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
    let full = env.root.join("full");
    std::fs::create_dir(&full).unwrap();
    std::fs::write(full.join("mine.txt"), "mine\n").unwrap();
    let f = env.fail(&["session", "fork", "--from", "child", "--into", full.to_str().unwrap()], None);
    assert_eq!(f.code, "already-exists", "never materialises into a non-empty directory");
    assert_eq!(std::fs::read_dir(&full).unwrap().count(), 1);
}

/// `fork --into` makes the directories first and then writes the files in parallel: every
/// file of a deep tree arrives byte for byte with its mode, symlinks as links (one to a
/// directory among them, made while files are written beside it), and the count agrees.
#[test]
fn a_fork_into_writes_every_file_of_a_deep_tree_with_its_bytes_modes_and_links() {
    use std::os::unix::fs::PermissionsExt;
    let env = Env::new();
    let mut files = Vec::new();
    for i in 0..300 {
        let path = format!("d{}/e{}/f{}/file{i}.txt", i % 3, i % 7, i % 11);
        let bytes = format!("file {i}\n").repeat(1 + i * 37 % 500);
        env.write(&path, &bytes);
        files.push((path, bytes));
    }
    env.write("bin/run.sh", "#!/bin/sh\necho run\n");
    std::fs::set_permissions(env.ws.join("bin/run.sh"), std::fs::Permissions::from_mode(0o751)).unwrap();
    std::os::unix::fs::symlink("d1/e1", env.ws.join("a-link-to-a-dir")).unwrap();
    std::os::unix::fs::symlink("../bin/run.sh", env.ws.join("d0/run")).unwrap();
    env.ok(&["session", "new", "--id", "deep"], None);
    env.ok(&["--session", "deep", "turn", "begin", "--prompt", "a deep tree"], None);
    env.ok(&["--session", "deep", "turn", "end"], None);

    let into = env.root.join("deep-fork");
    let forked = env.json(&["session", "fork", "--from", "deep", "--into", into.to_str().unwrap()]);
    assert_eq!(forked["filesWritten"], 300 + 3, "300 files, the script and two links: {forked}");
    for (path, bytes) in &files {
        assert_eq!(std::fs::read_to_string(into.join(path)).unwrap(), *bytes, "{path}");
    }
    let script = into.join("bin/run.sh");
    assert_eq!(std::fs::read_to_string(&script).unwrap(), "#!/bin/sh\necho run\n");
    assert_eq!(std::fs::metadata(&script).unwrap().permissions().mode() & 0o7777, 0o751);
    assert_eq!(std::fs::read_link(into.join("a-link-to-a-dir")).unwrap(), std::path::Path::new("d1/e1"));
    assert_eq!(std::fs::read_link(into.join("d0/run")).unwrap(), std::path::Path::new("../bin/run.sh"));
    assert!(std::fs::symlink_metadata(into.join("a-link-to-a-dir")).unwrap().file_type().is_symlink());
}

/// A session of one turn that wrote `a.txt`, to fork.
fn one_turn(env: &Env) {
    env.ok(&["session", "new", "--id", "parent"], None);
    env.ok(&["--session", "parent", "turn", "begin", "--prompt", "p"], None);
    env.write("a.txt", "a\n");
    env.ok(&["--session", "parent", "turn", "end"], None);
}

/// Files and directories under `dir`, for asserting a refused fork wrote nothing there.
fn entries(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let path = e.unwrap().path();
            if path.is_dir() && !path.is_symlink() {
                stack.push(path.clone());
            }
            found.push(path);
        }
    }
    found.sort();
    found
}

#[test]
fn fork_into_refuses_git_the_workspace_and_a_symlinked_path() {
    let env = Env::new();
    std::fs::create_dir_all(env.ws.join(".git/refs")).unwrap();
    env.write("src/main.rs", "fn main() {}\n");
    one_turn(&env);
    std::fs::create_dir(env.root.join("real")).unwrap();
    std::os::unix::fs::symlink(env.root.join("real"), env.root.join("link")).unwrap();
    std::os::unix::fs::symlink(&env.ws, env.root.join("ws-link")).unwrap();
    let (ws_before, real_before) = (entries(&env.ws), entries(&env.root.join("real")));

    let root = env.root.to_str().unwrap();
    let ws = env.ws.to_str().unwrap();
    for into in [
        format!("{ws}/.git"),
        format!("{ws}/.git/forked"),
        format!("{root}/elsewhere/.git/forked"),
        ws.to_string(),
        format!("{ws}/src"),
        format!("{ws}/inner"),
        "inner".to_string(),
        "./src/../inner".to_string(),
        format!("{root}/link"),
        format!("{root}/link/fork"),
        format!("{root}/ws-link/fork"),
        format!("{root}/store/fork"),
    ] {
        let f = env.fail(&["session", "fork", "--from", "parent", "--into", &into], None);
        assert_eq!((f.exit, f.code.as_str()), (1, "path-rejected"), "--into {into}: {:#}", f.doc);
        assert!(f.message.contains("cannot fork into"), "{into}: {}", f.message);
    }
    assert_eq!(entries(&env.ws), ws_before, "nothing was written in the workspace or its .git");
    assert_eq!(entries(&env.root.join("real")), real_before, "nothing was written through the symlink");
    assert!(!env.root.join("elsewhere").exists());
    let sessions = env.json(&["session", "list"]);
    assert_eq!(sessions["sessions"].as_array().unwrap().len(), 1, "no session was made: {sessions}");

    // A new directory beside the workspace, given relative to it, is where a fork goes.
    let forked = env.json(&["session", "fork", "--from", "parent", "--into", "../beside"]);
    assert_eq!(forked["into"], env.root.join("beside").to_str().unwrap());
    assert_eq!(std::fs::read_to_string(env.root.join("beside/a.txt")).unwrap(), "a\n");
}

#[test]
fn fork_into_a_directory_holding_the_workspace_or_into_a_file_says_why() {
    let env = Env::new();
    one_turn(&env);
    let f = env.fail(&["session", "fork", "--from", "parent", "--into", env.root.to_str().unwrap()], None);
    assert_eq!((f.exit, f.code.as_str()), (1, "path-rejected"), "{:#}", f.doc);
    assert!(f.message.contains("holds the workspace"), "{}", f.message);
    let f = env.fail(&["session", "fork", "--from", "parent", "--into", ".."], None);
    assert_eq!(f.code, "path-rejected", "{:#}", f.doc);

    std::fs::write(env.root.join("a-file"), "mine\n").unwrap();
    let f = env.fail(&["session", "fork", "--from", "parent", "--into", "../a-file"], None);
    assert_eq!((f.exit, f.code.as_str()), (1, "already-exists"), "{:#}", f.doc);
    assert!(f.message.contains("is not a directory"), "{}", f.message);
    assert_eq!(std::fs::read_to_string(env.root.join("a-file")).unwrap(), "mine\n");
}
