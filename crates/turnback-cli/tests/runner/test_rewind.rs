//! Rewind: the workspace back to the start of a turn, hand edits protected, undoable.

use std::collections::BTreeMap;
use std::process::Stdio;

use crate::common::{Env, parse_json, show_output};

fn tree(env: &Env) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![env.ws.clone()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            let rel = p.strip_prefix(&env.ws).unwrap().to_string_lossy().into_owned();
            if m.is_dir() {
                stack.push(p);
                out.insert(format!("{rel}/"), Vec::new());
            } else {
                out.insert(rel, std::fs::read(&p).unwrap_or_default());
            }
        }
    }
    out
}

fn turn(env: &Env, prompt: &str, work: impl FnOnce(&Env)) {
    env.ok(&["turn", "begin", "--prompt", prompt], None);
    work(env);
    env.ok(&["turn", "end"], None);
}

/// The preview's JSON, whatever its exit code (3 partial, 20 blocked are answers too).
fn preview(env: &Env, to: &str) -> serde_json::Value {
    parse_json(&env.run(&["--json", "rewind", "--to", to], None))
}

fn plan_id(env: &Env, to: &str) -> String {
    let out = env.run(&["--json", "rewind", "--to", to], None);
    parse_json(&out)["planId"].as_str().unwrap().to_string()
}

fn actions(plan: &serde_json::Value) -> BTreeMap<String, String> {
    plan["paths"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["path"].as_str().unwrap().to_string(), p["action"].as_str().unwrap().to_string()))
        .collect()
}

#[test]
fn rewinding_the_last_turn_restores_changed_deleted_and_created_paths_and_is_undoable() {
    let env = Env::new();
    env.write("edit.txt", "original\n");
    env.write("gone.txt", "keep me\n");
    env.write("ignored.log", "not in any snapshot\n");
    env.write(".gitignore", "*.log\n");
    turn(&env, "first", |_| {});
    let before_turn_2 = tree(&env);
    turn(&env, "second", |env| {
        env.write("edit.txt", "agent changed this\n");
        std::fs::remove_file(env.ws.join("gone.txt")).unwrap();
        env.write("new/dir/created.txt", "agent created\n");
        env.write("ignored.log", "still ignored\n");
    });
    let before_rewind = tree(&env);
    let preview = preview(&env, "2");
    let a = actions(&preview);
    assert_eq!(a["edit.txt"], "restore");
    assert_eq!(a["gone.txt"], "restore");
    assert_eq!(a["new/dir/created.txt"], "delete");
    assert!(!a.contains_key("ignored.log"), "ignored files are never touched");
    let plan = plan_id(&env, "2");
    let done = env.json(&["rewind", "--to", "2", "--apply", "--plan", &plan]);
    let mut expected = before_turn_2.clone();
    expected.insert("ignored.log".into(), b"still ignored\n".to_vec());
    // Directories emptied by the rewind stay: snapshots do not record empty directories,
    // so one that existed before the turn could not be told from one the agent made.
    expected.insert("new/".into(), Vec::new());
    expected.insert("new/dir/".into(), Vec::new());
    assert_eq!(tree(&env), expected, "back to the start of turn 2, ignored file untouched");
    // Undo the rewind through its checkpoint: exactly the tree before it.
    let id = done["checkpointId"].as_str().unwrap();
    env.ok(&["rollback", id, "--apply"], None);
    assert_eq!(tree(&env), before_rewind);
    env.assert_verify_clean();
}

#[test]
fn hand_edits_between_turns_and_after_the_last_are_left_alone_unless_forced() {
    let env = Env::new();
    env.write("a.txt", "a0\n");
    env.write("b.txt", "b0\n");
    turn(&env, "one", |env| {
        env.write("a.txt", "a1 by agent\n");
        env.write("b.txt", "b1 by agent\n");
    });
    env.write("a.txt", "a by hand between turns\n");
    turn(&env, "two", |env| env.write("c.txt", "c by agent\n"));
    env.write("b.txt", "b by hand after the last turn\n");
    let preview = preview(&env, "1");
    let paths = preview["paths"].as_array().unwrap();
    let reason = |p: &str| paths.iter().find(|x| x["path"] == p).unwrap()["reason"].as_str().unwrap_or("").to_string();
    assert_eq!(reason("a.txt"), "hand-edit-between-turns");
    assert_eq!(reason("b.txt"), "hand-edit-after-last-turn");
    let out = env.run(&["rewind", "--to", "1", "--apply"], None);
    assert_eq!(out.status.code(), Some(3), "partial: {}", show_output(&out));
    assert_eq!(env.read("a.txt").unwrap(), b"a by hand between turns\n");
    assert_eq!(env.read("b.txt").unwrap(), b"b by hand after the last turn\n");
    assert!(env.read("c.txt").is_none(), "the agent's own file went");
    let out = env.run(&["rewind", "--to", "1", "--apply", "--force", "b.txt"], None);
    assert_eq!(out.status.code(), Some(3), "a.txt is still left alone: {}", show_output(&out));
    assert_eq!(env.read("b.txt").unwrap(), b"b0\n", "forced");
    assert_eq!(env.read("a.txt").unwrap(), b"a by hand between turns\n");
}

#[test]
fn a_missing_end_snapshot_makes_changed_paths_unverified() {
    let env = Env::new();
    env.write("a.txt", "a0\n");
    env.ok(&["init"], None);
    // Every later snapshot is over its limit, so turn 1's end snapshot is skipped.
    std::fs::write(env.store.join("settings.toml"), "[snapshots]\nlater-max-files = 0\n").unwrap();
    env.ok(&["turn", "begin", "--prompt", "one"], None);
    env.write("a.txt", "a1\n");
    let out = env.ok(&["turn", "end"], None);
    assert!(String::from_utf8_lossy(&out.stderr).contains("without an end snapshot"), "the skip is shown");
    let preview = preview(&env, "1");
    let a = preview["paths"].as_array().unwrap().iter().find(|p| p["path"] == "a.txt").unwrap().clone();
    assert_eq!(a["reason"], "unverified");
    assert_eq!(a["action"], "leave-alone");
}

#[test]
fn a_stale_plan_is_refused_and_nothing_changes() {
    let env = Env::new();
    env.write("a.txt", "a0\n");
    turn(&env, "one", |env| env.write("a.txt", "a1\n"));
    let plan = plan_id(&env, "1");
    env.write("other.txt", "someone added this\n");
    let f = env.fail(&["rewind", "--to", "1", "--apply", "--plan", &plan], None);
    assert_eq!((f.exit, f.code.as_str()), (20, "conflict"));
    assert_eq!(env.read("a.txt").unwrap(), b"a1\n");
}

#[test]
fn nested_repositories_are_never_changed() {
    let env = Env::new();
    env.write("lib/.git/HEAD", "0123456789abcdef0123456789abcdef01234567\n");
    turn(&env, "one", |env| env.write("lib/.git/HEAD", "89abcdef0123456789abcdef0123456789abcdef\n"));
    let preview = preview(&env, "1");
    let lib = preview["paths"].as_array().unwrap().iter().find(|p| p["path"] == "lib").unwrap().clone();
    assert_eq!((lib["action"].as_str(), lib["reason"].as_str()), (Some("leave-alone"), Some("nested-repository")));
}

#[test]
fn a_file_swapped_for_a_symlink_mid_rewind_is_not_written_through() {
    let env = Env::new();
    env.write("a.txt", "a0\n");
    turn(&env, "one", |env| env.write("a.txt", "a1\n"));
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("victim"), "outside\n").unwrap();
    let flag = env.root.join("go");
    let mut cmd = env.command(&["--json", "rewind", "--to", "1", "--apply"]);
    cmd.env("TURNBACK_PAUSE", format!("rewind-before-swap={}", flag.display()))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let mut err = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut err, &mut line).unwrap();
    assert!(line.contains("rewind-before-swap"), "{line}");
    std::fs::remove_file(env.ws.join("a.txt")).unwrap();
    std::os::unix::fs::symlink(outside.path().join("victim"), env.ws.join("a.txt")).unwrap();
    std::fs::write(&flag, "").unwrap();
    let out = child.wait_with_output().unwrap();
    let done = parse_json(&out);
    let a = done["plan"]["paths"].as_array().unwrap().iter().find(|p| p["path"] == "a.txt").unwrap().clone();
    assert_eq!(a["action"], "leave-alone", "{done}");
    assert_eq!(std::fs::read_to_string(outside.path().join("victim")).unwrap(), "outside\n");
    assert!(std::fs::symlink_metadata(env.ws.join("a.txt")).unwrap().file_type().is_symlink());
}

#[test]
fn files_hidden_from_the_target_snapshot_are_never_deleted() {
    let env = Env::new();
    env.write(".gitignore", "data/\n");
    env.write("data/user.db", "precious\n");
    env.write("lib/.git/HEAD", "0123456789abcdef0123456789abcdef01234567\n");
    env.write("lib/work.c", "person's code\n");
    turn(&env, "one", |env| {
        env.write(".gitignore", "# the agent dropped the rule\n");
        std::fs::remove_dir_all(env.ws.join("lib/.git")).unwrap();
    });
    let plan = preview(&env, "1");
    let reason = |p: &str| {
        plan["paths"].as_array().unwrap().iter().find(|x| x["path"] == p).map(|x| x["reason"].clone()).unwrap()
    };
    assert_eq!(reason("data/user.db"), "not-snapshotted");
    assert_eq!(reason("lib/work.c"), "not-snapshotted");
    let _ = env.run(&["rewind", "--to", "1", "--apply", "--force", "data/user.db"], None);
    assert_eq!(env.read("data/user.db").unwrap(), b"precious\n", "never deleted, even when forced");
    assert_eq!(env.read("lib/work.c").unwrap(), b"person's code\n");
    assert_eq!(env.read(".gitignore").unwrap(), b"data/\n", "the agent's own change is rewound");
}

#[test]
fn another_sessions_work_during_the_turn_is_left_alone() {
    let env = Env::new();
    env.write("shared.txt", "v0\n");
    env.ok(&["session", "new", "--id", "a"], None);
    env.ok(&["session", "new", "--id", "b"], None);
    env.ok(&["--session", "a", "turn", "begin", "--prompt", "a1"], None);
    env.ok(&["--session", "b", "fs", "create", "b_feature.txt"], Some(b"b's work\n"));
    env.ok(&["--session", "b", "fs", "write", "shared.txt"], Some(b"b changed it\n"));
    env.write("a_only.txt", "a's agent\n");
    env.ok(&["--session", "a", "turn", "end"], None);
    let plan = parse_json(&env.run(&["--json", "--session", "a", "rewind", "--to", "1"], None));
    let get = |p: &str| plan["paths"].as_array().unwrap().iter().find(|x| x["path"] == p).unwrap().clone();
    assert_eq!(get("b_feature.txt")["reason"], "other-session");
    assert_eq!(get("shared.txt")["reason"], "other-session");
    assert_eq!(get("a_only.txt")["action"], "delete");
    let _ = env.run(&["--session", "a", "rewind", "--to", "1", "--apply"], None);
    assert_eq!(env.read("b_feature.txt").unwrap(), b"b's work\n");
    assert_eq!(env.read("shared.txt").unwrap(), b"b changed it\n");
    assert!(env.read("a_only.txt").is_none());
}

#[test]
fn a_directory_that_replaced_a_file_is_rewound_to_the_file() {
    let env = Env::new();
    env.write("a", "a file\n");
    turn(&env, "one", |env| {
        std::fs::remove_file(env.ws.join("a")).unwrap();
        env.write("a/b", "now a dir\n");
    });
    let out = env.run(&["rewind", "--to", "1", "--apply"], None);
    assert_eq!(out.status.code(), Some(0), "{}", show_output(&out));
    assert_eq!(env.read("a").unwrap(), b"a file\n");
}

#[test]
fn a_file_ignored_at_the_target_is_not_deleted_even_when_forced_over_a_hand_edit() {
    let env = Env::new();
    env.write(".gitignore", "data/\n");
    env.write("data/user.db", "precious\n");
    turn(&env, "one", |env| env.write(".gitignore", "# dropped\n"));
    env.write("data/user.db", "precious, edited by hand\n");
    let plan = preview(&env, "1");
    assert_eq!(actions(&plan)["data/user.db"], "leave-alone", "{plan:#}");
    let _ = env.run(&["rewind", "--to", "1", "--apply", "--force", "data/user.db"], None);
    assert_eq!(env.read("data/user.db").unwrap(), b"precious, edited by hand\n");
}

#[test]
fn rules_of_a_symlinked_ignore_file_or_of_parent_directories_still_protect() {
    // A symlinked .gitignore: the walk followed it; the snapshot holds only the link.
    let env = Env::new();
    env.write("shared.ignore", "data/\n");
    std::os::unix::fs::symlink("shared.ignore", env.ws.join(".gitignore")).unwrap();
    env.write("data/user.db", "precious\n");
    turn(&env, "one", |env| {
        std::fs::remove_file(env.ws.join(".gitignore")).unwrap();
        env.write(".gitignore", "#\n");
    });
    let _ = env.run(&["rewind", "--to", "1", "--apply"], None);
    assert_eq!(env.read("data/user.db").unwrap(), b"precious\n");

    // A rule in a directory above the workspace.
    let env = Env::new();
    std::fs::write(env.root.join(".gitignore"), "*.local\n").unwrap();
    env.write("dev.local", "precious\n");
    env.write("src.txt", "code\n");
    turn(&env, "one", |env| env.write(".gitignore", "!dev.local\n"));
    let plan = preview(&env, "1");
    assert_eq!(actions(&plan).get("dev.local").map(String::as_str), Some("leave-alone"), "{plan:#}");
    let _ = env.run(&["rewind", "--to", "1", "--apply"], None);
    assert_eq!(env.read("dev.local").unwrap(), b"precious\n");
}

#[test]
fn a_rewind_brings_back_what_its_snapshot_holds_whatever_the_checkpoint_cap() {
    let env = Env::new();
    let big = vec![b'b'; 64 * 1024];
    env.write("big.bin", &big);
    turn(&env, "first", |e| {
        std::fs::remove_file(e.ws.join("big.bin")).unwrap();
        e.write("new.bin", vec![b'n'; 64 * 1024]);
    });
    // The cap limits what turnback keeps anew for an undo, never what a snapshot holds.
    fn capped<'a>(args: &[&'a str]) -> Vec<&'a str> {
        [&["--json", "--checkpoint-cap", "1000"], args].concat()
    }
    let preview = parse_json(&env.run(&capped(&["rewind", "--to", "1"]), None));
    assert_eq!(preview["resultType"], "full", "{preview:#}");
    let out = env.run(&capped(&["rewind", "--to", "1", "--apply"]), None);
    assert!(out.status.success(), "the preview said full, so the apply is: {}", show_output(&out));
    assert_eq!(std::fs::read(env.ws.join("big.bin")).unwrap(), big, "the 64 KiB file is back");
    assert!(!env.ws.join("new.bin").exists());
    // Its undo, under the same cap: what it replaces is held by the rewind's checkpoint.
    let undo_id = parse_json(&out)["checkpointId"].as_str().unwrap().to_string();
    let undone = env.run(&capped(&["rollback", &undo_id, "--apply"]), None);
    assert!(undone.status.success(), "{}", show_output(&undone));
    assert_eq!(std::fs::read(env.ws.join("new.bin")).unwrap(), vec![b'n'; 64 * 1024]);
    assert!(!env.ws.join("big.bin").exists());
}

#[test]
fn a_rewind_across_file_and_directory_type_changes_restores_the_start_and_its_undo_the_end() {
    let env = Env::new();
    env.write("x", "x was a file\n");
    env.write("y/z/w", "y was a directory\n");
    env.write("keep.txt", "untouched\n");
    turn(&env, "first", |_| {});
    let start = tree(&env);
    turn(&env, "types", |e| {
        std::fs::remove_file(e.ws.join("x")).unwrap();
        e.write("x/sub/file", "x is a directory now\n");
        std::fs::remove_dir_all(e.ws.join("y")).unwrap();
        e.write("y", "y is a file now\n");
    });
    let end = tree(&env);
    let plan = preview(&env, "2");
    let acts = actions(&plan);
    assert_eq!(acts["y/z/w"], "restore", "a file this rewind deletes is no obstacle: {plan:#}");
    assert_eq!(plan["resultType"], "full", "{plan:#}");
    let out = env.run(&["--json", "rewind", "--to", "2", "--apply"], None);
    assert!(out.status.success(), "{}", show_output(&out));
    assert_eq!(tree(&env), start, "the workspace is the turn's start, directories included");
    // The undo takes the type changes back the other way.
    let undo = parse_json(&out)["checkpointId"].as_str().unwrap().to_string();
    let undone = env.run(&["--json", "rollback", &undo, "--apply"], None);
    assert!(undone.status.success(), "{}", show_output(&undone));
    assert_eq!(parse_json(&undone)["resultType"], "full", "{}", show_output(&undone));
    assert_eq!(tree(&env), end, "the undo gives back the turn's end");
}

#[test]
fn a_rewind_names_the_real_obstacle_when_a_persons_file_stands_where_a_directory_was() {
    let env = Env::new();
    env.write("d/inner.txt", "in a directory\n");
    turn(&env, "first", |_| {});
    turn(&env, "remove", |e| std::fs::remove_dir_all(e.ws.join("d")).unwrap());
    // A person puts a file named like the directory after the turn.
    env.write("d", "a person's file\n");
    let plan = preview(&env, "2");
    let inner = plan["paths"].as_array().unwrap().iter().find(|p| p["path"] == "d/inner.txt").unwrap();
    assert_eq!(inner["action"], "leave-alone", "{plan:#}");
    let detail = inner["detail"].as_str().unwrap();
    assert!(!detail.contains("symlink") && detail.contains("is a file now"), "names the real cause: {detail}");
    assert_eq!(env.read("d").unwrap(), b"a person's file\n");
}

#[test]
fn the_undo_of_a_rewind_that_took_back_a_chmod_says_it_writes_the_mode_and_does() {
    use std::os::unix::fs::PermissionsExt;
    let env = Env::new();
    env.write("run.sh", "#!/bin/sh\n");
    std::fs::set_permissions(env.ws.join("run.sh"), std::fs::Permissions::from_mode(0o644)).unwrap();
    turn(&env, "first", |_| {});
    turn(&env, "chmod", |e| {
        std::fs::set_permissions(e.ws.join("run.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    });
    let out = env.run(&["--json", "rewind", "--to", "2", "--apply"], None);
    assert!(out.status.success(), "{}", show_output(&out));
    let mode = || std::fs::metadata(env.ws.join("run.sh")).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(), 0o644);
    let undo = parse_json(&out)["checkpointId"].as_str().unwrap().to_string();
    let preview = parse_json(&env.run(&["--json", "rollback", &undo], None));
    let target = &preview["targets"][0];
    assert_eq!(target["outcome"]["noOp"], false, "the preview says the mode is written: {preview:#}");
    let applied = env.run(&["--json", "rollback", &undo, "--apply"], None);
    assert!(applied.status.success(), "{}", show_output(&applied));
    assert_eq!(mode(), 0o755, "the undo gives the mode back");
}
