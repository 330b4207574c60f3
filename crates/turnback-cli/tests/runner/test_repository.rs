//! Snapshots in a real git repository: nothing of git runs, nothing in `.git` changes,
//! and what git tracks or ignores cannot bring secrets into a snapshot.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use crate::common::Env;

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@localhost")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@localhost")
        .output()
        .expect("git");
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Every file under `.git` with its bytes and mtime.
fn git_dir_state(ws: &Path) -> BTreeMap<String, (Vec<u8>, i64)> {
    use std::os::unix::fs::MetadataExt;
    let mut out = BTreeMap::new();
    let mut stack = vec![ws.join(".git")];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            if m.is_dir() {
                stack.push(p);
            } else {
                out.insert(
                    p.display().to_string(),
                    (std::fs::read(&p).unwrap(), m.mtime_nsec() + m.mtime() * 1_000_000_000),
                );
            }
        }
    }
    out
}

fn snapshot_paths(env: &Env) -> Vec<String> {
    let snap = env.json(&["snapshot"]);
    let id = snap["snapshotId"].as_str().unwrap().to_string();
    // Everything the snapshot holds, from a diff against the first, empty-workspace one.
    let diff = env.json(&["diff", &env.first_snapshot(), &id, "--numstat"]);
    diff["changes"].as_array().unwrap().iter().map(|c| c["path"].as_str().unwrap().to_string()).collect()
}

trait FirstSnapshot {
    fn first_snapshot(&self) -> String;
}

impl FirstSnapshot for Env {
    fn first_snapshot(&self) -> String {
        std::fs::read_to_string(self.root.join("empty-snapshot-id")).unwrap()
    }
}

/// A repository with a malicious config, hooks and planted index flags, and an empty
/// snapshot taken before it had files (so later snapshots can be listed by diff).
fn hostile_repo(env: &Env) -> std::path::PathBuf {
    let empty = env.json(&["snapshot"]);
    std::fs::write(env.root.join("empty-snapshot-id"), empty["snapshotId"].as_str().unwrap()).unwrap();
    let ws = env.ws.clone();
    git(&ws, &["init", "-q"]);
    let marker = env.root.join("git-code-ran");
    let cmd = format!("touch {}", marker.display());
    git(&ws, &["config", "core.fsmonitor", &cmd]);
    git(&ws, &["config", "filter.evil.clean", &cmd]);
    git(&ws, &["config", "filter.evil.smudge", &cmd]);
    git(&ws, &["config", "core.hooksPath", ".githooks"]);
    env.write(".gitattributes", "* filter=evil\n");
    env.write(".githooks/pre-commit", format!("#!/bin/sh\n{cmd}\n"));
    env.write(".git/hooks/post-checkout", format!("#!/bin/sh\n{cmd}\n"));
    env.write("src/main.rs", "fn main() {}\n");
    env.write(".env", "SECRET=1\n");
    env.write("deploy.key", "KEY\n");
    env.write(".gitignore", "!.env\n!*.key\nbuild/\n");
    env.write("build/out.o", "binary\n");
    git(&ws, &["-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null", "add", "-A"]);
    git(&ws, &["-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null", "add", "-f", ".env", "deploy.key"]);
    git(
        &ws,
        &["-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null", "commit", "-q", "--no-verify", "-m", "c"],
    );
    git(&ws, &["-c", "core.fsmonitor=false", "update-index", "--skip-worktree", "src/main.rs"]);
    let _ = std::fs::remove_file(&marker);
    ws
}

#[test]
fn the_users_repository_is_left_exactly_as_it_was_and_none_of_its_code_runs() {
    let mut env = Env::new();
    let ws = hostile_repo(&env);
    let marker = env.root.join("git-code-ran");
    // Decoys in the environment change nothing either.
    env.set_var("GIT_DIR", "/nonexistent/git-dir");
    env.set_var("GIT_INDEX_FILE", "/nonexistent/index");
    env.set_var("GIT_WORK_TREE", "/nonexistent/tree");
    let before = git_dir_state(&ws);
    let head = git(&ws, &["rev-parse", "HEAD"]);
    env.write("src/main.rs", "fn main() { println!(\"changed\"); }\n");
    env.ok(&["turn", "begin", "--prompt", "p"], None);
    env.ok(&["fs", "write", "src/lib.rs"], Some(b"pub fn f() {}\n"));
    env.ok(&["turn", "end"], None);
    let paths = snapshot_paths(&env);
    assert_eq!(git_dir_state(&ws), before, "no byte or mtime under .git changed");
    assert_eq!(git(&ws, &["rev-parse", "HEAD"]), head);
    assert!(!marker.exists(), "a repository hook, filter or fsmonitor ran");
    // Tracked or negated, secrets stay out; ignored build output too; skip-worktree is moot.
    assert!(!paths.iter().any(|p| p == ".env" || p == "deploy.key" || p.starts_with("build/")), "{paths:?}");
    assert!(paths.contains(&"src/main.rs".to_string()) && paths.contains(&"src/lib.rs".to_string()), "{paths:?}");
    // The user deletes .git: snapshots go on, and no .git is created.
    std::fs::remove_dir_all(ws.join(".git")).unwrap();
    let paths = snapshot_paths(&env);
    assert!(paths.contains(&"src/main.rs".to_string()));
    assert!(!ws.join(".git").exists());
}

#[test]
fn a_workspace_inside_a_repository_follows_the_repositorys_ignore_rules() {
    let env = Env::new();
    let empty = env.json(&["snapshot"]);
    std::fs::write(env.root.join("empty-snapshot-id"), empty["snapshotId"].as_str().unwrap()).unwrap();
    // The repository is the workspace's parent.
    git(&env.root, &["init", "-q"]);
    std::fs::write(env.root.join(".gitignore"), "*.tmp\n").unwrap();
    env.write("keep.rs", "x\n");
    env.write("scratch.tmp", "x\n");
    let paths = snapshot_paths(&env);
    assert_eq!(paths, ["keep.rs"]);
}

#[test]
fn two_processes_snapshotting_one_session_take_turns_and_neither_is_skipped() {
    let env = Env::new();
    for i in 0..200 {
        env.write(&format!("d{}/f{i}.txt", i % 10), format!("{i}\n"));
    }
    env.ok(&["session", "new", "--id", "s"], None);
    let children: Vec<_> = (0..4)
        .map(|_| {
            let mut cmd = env.command(&["--json", "--session", "s", "snapshot"]);
            cmd.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped());
            cmd.spawn().unwrap()
        })
        .collect();
    for c in children {
        let out = c.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", crate::common::show_output(&out));
        let r = crate::common::parse_json(&out);
        assert!(r["skipped"].is_null(), "{r}");
    }
    let du = env.json(&["du"]);
    let s = du["sessions"].as_array().unwrap().iter().find(|s| s["sessionId"] == "s").unwrap().clone();
    assert_eq!(s["snapshots"], 4);
    env.assert_verify_clean();
}

#[test]
fn du_shows_skipped_snapshots_with_their_reasons() {
    let env = Env::new();
    env.ok(&["init"], None);
    std::fs::write(env.store.join("settings.toml"), "[snapshots]\nfirst-max-files = 1\n").unwrap();
    env.write("a.txt", "a");
    env.write("b.txt", "b");
    let r = env.json(&["snapshot"]);
    assert_eq!(r["skipped"], "too many files (2 > 1)");
    let du = env.json(&["du"]);
    let skipped = du["sessions"][0]["skipped"][0].as_str().unwrap();
    assert!(skipped.ends_with("too many files (2 > 1)"), "{skipped}");
}
