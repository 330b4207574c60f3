//! Plaintext never enters the store (DESIGN §2.2): a canary written into file contents,
//! file names and directory names must not appear in any byte under the store directory,
//! after any command.

use std::path::{Path, PathBuf};

use crate::common::{Env, files_under, str_at, unique};

/// Every file under `dir` whose bytes contain `needle`.
fn files_containing(dir: &Path, needle: &[u8]) -> Vec<PathBuf> {
    files_under(dir)
        .into_iter()
        .filter(|file| {
            let bytes = std::fs::read(file).unwrap_or_else(|e| panic!("read {}: {e}", file.display()));
            bytes.windows(needle.len()).any(|w| w == needle)
        })
        .collect()
}

/// Panics if `needle` occurs in any file under `store` (database, WAL, shared memory,
/// locks, settings, anything).
fn assert_absent_from_store(store: &Path, needle: &[u8], after: &str) {
    let files = files_under(store);
    assert!(files.iter().any(|f| f.ends_with("store.db")), "no store.db under {}: {files:?}", store.display());
    let leaks = files_containing(store, needle);
    assert!(
        leaks.is_empty(),
        "after `{after}`: the canary {:?} appears in plaintext in {leaks:?}",
        String::from_utf8_lossy(needle)
    );
}

/// Runs every command that writes to the store over files named after and holding the
/// canary, checking the whole store after each one.
fn exercise(env: &Env, canary: &str) {
    let check = |after: &str| assert_absent_from_store(&env.store, canary.as_bytes(), after);
    let dir = format!("dir-{canary}");
    let created = format!("{dir}/created-{canary}.txt");
    let written = format!("written-{canary}.md");
    let staged = format!("{dir}/staged-{canary}.rs");
    let content = format!("header\nsecret {canary} in the middle\nfooter\n");

    env.ok(&["init"], None);
    check("init");
    env.ok(&["fs", "create", &created], Some(content.as_bytes()));
    check("fs create");
    env.ok(&["fs", "edit", &created, "--old", "middle", "--new", &format!("middle, again {canary}")], None);
    check("fs edit");
    env.ok(&["fs", "write", &written], Some(format!("{canary}\n{canary}\n").as_bytes()));
    check("fs write (new)");
    env.ok(&["fs", "write", &written], Some(format!("rewritten {canary}\n").as_bytes()));
    check("fs write (over)");

    env.write(&staged, format!("fn {canary}() {{}}\n"));
    let stage = env.json(&["stage", &staged, "--kind", "edit"]);
    check("stage");
    env.write(&staged, format!("fn {canary}() {{ println!(\"staged\") }}\n"));
    env.ok(&["commit", str_at(&stage, "/operationId")], None);
    check("commit");

    env.ok(&["fs", "delete", &written], None);
    check("fs delete");
    assert_eq!(env.read(&written), None);

    let listed = env.checkpoints();
    assert_eq!(listed.len(), 6, "{listed:#?}");
    for c in &listed {
        env.ok(&["inspect", str_at(c, "/checkpointId")], None);
    }
    check("checkpoints and inspect");

    env.ok(&["key", "rotate", "--reencrypt"], None);
    check("key rotate --reencrypt");
    env.assert_verify_clean();
    check("verify --deep");
    env.ok(&["gc"], None);
    check("gc");
    env.ok(&["du"], None);
    env.ok(&["reconcile"], None);
    check("du and reconcile");

    // The scan itself works: the canary is right there in the workspace.
    assert!(!files_containing(&env.ws, canary.as_bytes()).is_empty(), "control: canary not found in the workspace");
}

#[test]
fn canary_in_contents_and_names_never_reaches_the_store() {
    let env = Env::new();
    let canary = unique("CanaryX");
    exercise(&env, &canary);
    // The checkpoints still hold the canary: it is in the store, only encrypted.
    let listed = env.checkpoints();
    let paths: Vec<&str> = listed.iter().map(|c| str_at(c, "/targets/0/path")).collect();
    assert!(paths.iter().all(|p| p.contains(&canary)), "{paths:?}");
}

#[test]
fn thai_canary_in_contents_and_names_never_reaches_the_store() {
    let env = Env::new();
    let canary = format!("ความลับ{}ภาษาไทย", unique("ก"));
    exercise(&env, &canary);
}

#[test]
fn canary_in_the_workspace_path_never_reaches_the_store() {
    let env = Env::new();
    let canary = unique("WorkspaceCanary");
    let ws = env.ws.join(format!("project-{canary}"));
    std::fs::create_dir(&ws).expect("create workspace");
    let out = env.run_in(&ws, &["fs", "write", "notes.txt"], Some(b"plain\n"));
    assert!(out.status.success(), "{}", crate::common::show_output(&out));
    let out = env.run_in(&ws, &["--json", "checkpoints"], None);
    assert_eq!(crate::common::parse_json(&out)["checkpoints"].as_array().map(Vec::len), Some(1));
    env.ok(&["key", "rotate", "--reencrypt"], None);
    env.ok(&["gc"], None);
    assert_absent_from_store(&env.store, canary.as_bytes(), "commands in a workspace named after the canary");
}
