//! Checkpointed mutations and their records: the stage → commit lifecycle, exact-string
//! edits, path safety, file modes, capacity caps, settings, and several processes at once.

use std::os::unix::fs::symlink;

use serde_json::{Value, json};

use crate::common::{Env, chmod, mode_of, str_at};

fn journal_entries(env: &Env) -> u64 {
    env.json(&["du"])["journalEntries"].as_u64().expect("journalEntries")
}

fn artifact_bytes(env: &Env) -> u64 {
    env.json(&["du"])["checkpointArtifactBytes"].as_u64().expect("checkpointArtifactBytes")
}

#[test]
fn stage_then_commit_records_a_complete_fully_protected_checkpoint() {
    let env = Env::new();
    env.write("a.txt", "before\n");
    let staged = env.json(&["stage", "a.txt", "--kind", "edit"]);
    assert_eq!(staged["stageState"], "staged", "{staged:#}");
    assert_eq!(staged["commitState"], "pending", "{staged:#}");
    let id = str_at(&staged, "/checkpointId").to_string();
    let opid = str_at(&staged, "/operationId").to_string();

    let pending = env.json(&["inspect", &id]);
    assert_eq!(pending["checkpoint"]["stageState"], "staged", "{pending:#}");
    assert_eq!(pending["usable"], false, "a staged checkpoint is not usable: {pending:#}");
    assert_eq!(pending["problem"]["code"], "recovery-locked", "{pending:#}");
    assert!(env.checkpoints().is_empty(), "a stage awaiting commit is not listed by default");
    assert_eq!(env.all_checkpoints().len(), 1);

    env.write("a.txt", "after\n");
    let committed = env.json(&["commit", &opid]);
    assert_eq!(committed["checkpointId"], id.as_str(), "{committed:#}");
    assert_eq!(committed["stageState"], "committed", "{committed:#}");
    assert_eq!(committed["commitState"], "succeeded", "{committed:#}");

    let done = env.json(&["inspect", &id]);
    let c = &done["checkpoint"];
    assert_eq!(done["usable"], true, "{done:#}");
    assert_eq!(done["problem"], Value::Null, "{done:#}");
    assert_eq!(c["stageState"], "committed", "{done:#}");
    assert_eq!(c["mutation"]["commitState"], "succeeded", "{done:#}");
    assert_eq!(c["mutation"]["operationId"], opid.as_str(), "{done:#}");
    assert_eq!(c["coverageState"], "fully-protected", "{done:#}");
    assert_eq!(c["integrityState"], "verified", "{done:#}");
    assert_eq!(done["effectiveRetention"], "retained", "{done:#}");
    assert_eq!(c["promptRound"], 0, "{done:#}");
    let target = &c["targets"][0];
    assert_eq!(target["path"], "a.txt", "{done:#}");
    assert_eq!(target["effect"], "edit", "{done:#}");
    let pre = str_at(target, "/preImage/digest");
    let post = str_at(target, "/postImage/digest");
    assert_ne!(pre, post, "pre- and post-image digests differ for different contents");
    assert_eq!((target["preImage"]["size"].as_u64(), target["postImage"]["size"].as_u64()), (Some(7), Some(6)));
    assert!(target["preImage"]["artifactId"].is_string() && target["postImage"]["artifactId"].is_string());

    let listed = env.checkpoints();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["checkpointId"], id.as_str());
    env.assert_verify_clean();
}

#[test]
fn commit_is_idempotent() {
    let env = Env::new();
    env.write("a.txt", "one\n");
    let opid = String::from_utf8(env.ok(&["stage", "a.txt"], None).stdout).unwrap().trim().to_string();
    assert!(!opid.is_empty(), "stage prints the operation id");
    env.write("a.txt", "two\n");
    let first = env.json(&["commit", &opid]);
    let entries = journal_entries(&env);
    let first_inspect = env.json(&["inspect", str_at(&first, "/checkpointId")]);

    env.write("a.txt", "three\n");
    let second = env.json(&["commit", &opid]);
    assert_eq!(second["checkpointId"], first["checkpointId"]);
    assert_eq!(second["commitState"], "succeeded");
    assert_eq!(second["targets"], first["targets"], "a second commit captures nothing new");
    assert_eq!(journal_entries(&env), entries, "a second commit journals nothing");
    let second_inspect = env.json(&["inspect", str_at(&first, "/checkpointId")]);
    assert_eq!(second_inspect["checkpoint"], first_inspect["checkpoint"], "the record is unchanged");
    assert_eq!(env.checkpoints().len(), 1);

    let unknown = env.fail(&["commit", "00000000-0000-7000-8000-000000000000"], None);
    assert_eq!((unknown.exit, unknown.code.as_str()), (1, "not-found"), "{unknown:?}");
}

#[test]
fn commit_failed_records_a_failed_outcome_with_the_post_image() {
    let env = Env::new();
    env.write("a.txt", "one\n");
    let staged = env.json(&["stage", "a.txt"]);
    env.write("a.txt", "half written");
    let committed = env.json(&["commit", str_at(&staged, "/operationId"), "--failed"]);
    assert_eq!(committed["stageState"], "committed", "{committed:#}");
    assert_eq!(committed["commitState"], "failed", "{committed:#}");
    assert_eq!(committed["targets"][0]["postImage"]["size"], 12, "{committed:#}");
    let c = &env.json(&["inspect", str_at(&staged, "/checkpointId")])["checkpoint"];
    assert_eq!(c["mutation"]["commitState"], "failed", "{c:#}");
    env.assert_verify_clean();
}

#[test]
fn stage_infers_each_target_effect_from_the_files_at_commit() {
    let env = Env::new();
    env.write("kept.txt", "k\n");
    env.write("gone.txt", "g\n");
    let staged = env.json(&["stage", "kept.txt", "gone.txt", "born.txt"]);
    env.write("kept.txt", "k2\n");
    std::fs::remove_file(env.ws.join("gone.txt")).unwrap();
    env.write("born.txt", "b\n");
    let committed = env.json(&["commit", str_at(&staged, "/operationId")]);
    let effects: Vec<(&str, &str)> =
        committed["targets"].as_array().unwrap().iter().map(|t| (str_at(t, "/path"), str_at(t, "/effect"))).collect();
    assert_eq!(effects, [("kept.txt", "edit"), ("gone.txt", "delete"), ("born.txt", "create")]);
    env.assert_verify_clean();

    // --kind is checked against the files now.
    let exists = env.fail(&["stage", "kept.txt", "--kind", "create"], None);
    assert_eq!((exists.exit, exists.code.as_str()), (1, "already-exists"), "{exists:?}");
    let missing = env.fail(&["stage", "gone.txt", "--kind", "edit"], None);
    assert_eq!((missing.exit, missing.code.as_str()), (1, "not-found"), "{missing:?}");
}

#[test]
fn thai_and_binary_contents_are_checkpointed_intact() {
    let env = Env::new();
    let thai = "สวัสดีครับ โลก\nบรรทัดที่สอง\n";
    env.ok(&["fs", "write", "ไทย.txt"], Some(thai.as_bytes()));
    let edited = env.json(&["fs", "edit", "ไทย.txt", "--old", "สวัสดี", "--new", "ลาก่อน"]);
    assert_eq!(edited["replacements"], 1, "{edited:#}");
    assert_eq!(env.read("ไทย.txt").unwrap(), thai.replace("สวัสดี", "ลาก่อน").as_bytes());
    let target = &edited["targets"][0];
    assert_eq!(target["path"], "ไทย.txt");
    assert_eq!(target["preImage"]["size"], thai.len(), "sizes are bytes, not characters");
    assert_eq!(target["postImage"]["contentClass"], "file-content");

    let binary: Vec<u8> = (0u8..=255).chain([0, 0, 0xff, 0]).collect();
    let written = env.json_with(&["fs", "write", "blob.bin"], Some(&binary));
    assert_eq!(env.read("blob.bin").unwrap(), binary);
    assert_eq!(written["targets"][0]["postImage"]["contentClass"], "binary-blob", "{written:#}");
    assert_eq!(written["targets"][0]["postImage"]["size"], binary.len());
    let staged = env.json(&["stage", "blob.bin"]);
    let mut changed = binary.clone();
    changed[0] = 7;
    std::fs::write(env.ws.join("blob.bin"), &changed).unwrap();
    let committed = env.json(&["commit", str_at(&staged, "/operationId")]);
    let t = &committed["targets"][0];
    assert_eq!(
        (t["preImage"]["contentClass"].as_str(), t["postImage"]["contentClass"].as_str()),
        (Some("binary-blob"), Some("binary-blob"))
    );

    assert_eq!(env.checkpoints().len(), 4);
    let report = env.assert_verify_clean();
    assert_eq!(report["counts"]["committed"], 4, "{report:#}");
}

#[test]
fn edit_replaces_exactly_one_occurrence_unless_all() {
    let env = Env::new();
    env.ok(&["fs", "write", "e.txt"], Some(b"cat dog cat\n"));

    let missing = env.fail(&["fs", "edit", "e.txt", "--old", "bird", "--new", "fish"], None);
    assert_eq!((missing.exit, missing.code.as_str()), (1, "edit-no-match"), "{missing:?}");
    let twice = env.fail(&["fs", "edit", "e.txt", "--old", "cat", "--new", "cow"], None);
    assert_eq!((twice.exit, twice.code.as_str()), (1, "edit-not-unique"), "{twice:?}");
    assert!(twice.message.contains('2'), "says how many: {}", twice.message);
    assert_eq!(env.read("e.txt").unwrap(), b"cat dog cat\n", "refused edits change nothing");
    assert_eq!(env.all_checkpoints().len(), 1, "refused edits record nothing");

    let all = env.json(&["fs", "edit", "e.txt", "--old", "cat", "--new", "cow", "--all"]);
    assert_eq!(all["replacements"], 2, "{all:#}");
    assert_eq!(env.read("e.txt").unwrap(), b"cow dog cow\n");
    let one = env.json(&["fs", "edit", "e.txt", "--old", "dog", "--new", "-dog-"]);
    assert_eq!(one["replacements"], 1, "{one:#}");
    assert_eq!(env.read("e.txt").unwrap(), b"cow -dog- cow\n");

    let same = env.fail(&["fs", "edit", "e.txt", "--old", "cow", "--new", "cow", "--all"], None);
    assert_eq!((same.exit, same.code.as_str()), (2, "invalid-argument"), "an edit that changes nothing: {same:?}");
    let empty = env.fail(&["fs", "edit", "e.txt", "--old", "", "--new", "x"], None);
    assert_eq!((empty.exit, empty.code.as_str()), (2, "invalid-argument"), "an empty --old: {empty:?}");
    assert_eq!(env.read("e.txt").unwrap(), b"cow -dog- cow\n");

    let absent = env.fail(&["fs", "edit", "nope.txt", "--old", "a", "--new", "b"], None);
    assert_eq!((absent.exit, absent.code.as_str()), (1, "not-found"), "{absent:?}");
    assert_eq!(env.read("nope.txt"), None);
}

#[test]
fn empty_files_are_checkpointed_like_any_other() {
    let env = Env::new();
    let created = env.json(&["fs", "write", "empty.txt"]);
    assert_eq!(env.read("empty.txt").unwrap(), b"");
    assert_eq!(created["targets"][0]["postImage"]["present"], true, "{created:#}");
    assert_eq!(created["targets"][0]["postImage"]["size"], 0, "{created:#}");
    env.ok(&["fs", "write", "empty.txt"], Some(b"now with content\n"));
    let emptied = env.json(&["fs", "write", "empty.txt"]);
    assert_eq!(emptied["targets"][0]["effect"], "edit", "{emptied:#}");
    assert_eq!(emptied["coverageState"], "fully-protected", "{emptied:#}");
    env.ok(&["fs", "delete", "empty.txt"], None);
    assert_eq!(env.read("empty.txt"), None);
    assert_eq!(env.checkpoints().len(), 4);
    env.assert_verify_clean();
}

#[test]
fn create_refuses_an_existing_file() {
    let env = Env::new();
    env.ok(&["fs", "create", "c.txt"], Some(b"first\n"));
    let again = env.fail(&["fs", "create", "c.txt"], Some(b"second\n"));
    assert_eq!((again.exit, again.code.as_str()), (1, "already-exists"), "{again:?}");
    assert_eq!(env.read("c.txt").unwrap(), b"first\n");
    assert_eq!(env.all_checkpoints().len(), 1);
}

fn assert_rejected(env: &Env, args: &[&str], stdin: Option<&[u8]>) {
    let failure = env.fail(args, stdin);
    assert_eq!((failure.exit, failure.code.as_str()), (1, "path-rejected"), "turnback {args:?}: {failure:?}");
}

#[test]
fn paths_outside_the_workspace_are_rejected() {
    let env = Env::new();
    let outside = env.root.join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(outside.join("there.txt"), "theirs\n").unwrap();
    let abs_new = outside.join("abs.txt").to_string_lossy().into_owned();
    let abs_there = outside.join("there.txt").to_string_lossy().into_owned();

    assert_rejected(&env, &["fs", "write", "../outside/new.txt"], Some(b"x"));
    assert_rejected(&env, &["fs", "create", &abs_new], Some(b"x"));
    assert_rejected(&env, &["fs", "write", &abs_there], Some(b"x"));
    assert_rejected(&env, &["fs", "edit", "../outside/there.txt", "--old", "theirs", "--new", "mine"], None);
    assert_rejected(&env, &["fs", "delete", &abs_there], None);
    assert_rejected(&env, &["stage", "../outside/there.txt"], None);
    assert_rejected(&env, &["fs", "write", "sub/../../outside/new.txt"], Some(b"x"));

    let names: Vec<_> = std::fs::read_dir(&outside).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names, ["there.txt"], "nothing was written outside the workspace");
    assert_eq!(std::fs::read(outside.join("there.txt")).unwrap(), b"theirs\n");
    assert!(env.all_checkpoints().is_empty(), "rejected paths record nothing");
}

#[test]
fn paths_inside_git_are_rejected_and_the_repository_is_untouched() {
    let env = Env::new();
    env.write(".git/HEAD", "ref: refs/heads/main\n");
    env.write(".git/config", "[core]\n");
    env.write("sub/.git/HEAD", "ref: refs/heads/dev\n");
    let before = crate::common::files_under(&env.ws.join(".git"));

    assert_rejected(&env, &["fs", "write", ".git/config"], Some(b"[core]\n\tfsmonitor = evil\n"));
    assert_rejected(&env, &["fs", "create", ".git/hooks/pre-commit"], Some(b"#!/bin/sh\n"));
    assert_rejected(&env, &["fs", "edit", ".git/HEAD", "--old", "main", "--new", "evil"], None);
    assert_rejected(&env, &["fs", "delete", "sub/.git/HEAD"], None);
    assert_rejected(&env, &["stage", ".git/config"], None);

    assert_eq!(crate::common::files_under(&env.ws.join(".git")), before);
    assert_eq!(env.read(".git/config").unwrap(), b"[core]\n");
    assert_eq!(env.read(".git/HEAD").unwrap(), b"ref: refs/heads/main\n");
    assert_eq!(env.read("sub/.git/HEAD").unwrap(), b"ref: refs/heads/dev\n");
    assert!(env.all_checkpoints().is_empty());
}

/// `ARGS` with the store inside the workspace, at `ws/.turnback-store`.
fn with_store<'a>(args: &[&'a str]) -> Vec<&'a str> {
    ["--store", ".turnback-store"].into_iter().chain(args.iter().copied()).collect()
}

#[test]
fn paths_inside_the_store_are_rejected() {
    let env = Env::new();
    let init = env.run(&with_store(&["init"]), None);
    assert!(init.status.success(), "{}", crate::common::show_output(&init));
    let settings = env.read(".turnback-store/settings.toml").expect("the store's settings");

    for (args, stdin) in [
        (vec!["fs", "write", ".turnback-store/settings.toml"], Some(&b"[checkpoints]\n"[..])),
        (vec!["fs", "delete", ".turnback-store/store.db"], None),
        (vec!["fs", "create", ".turnback-store/locks/x"], Some(&b"x"[..])),
        (vec!["stage", ".turnback-store/store.db"], None),
    ] {
        let failure = env.fail(&with_store(&args), stdin);
        assert_eq!((failure.exit, failure.code.as_str()), (1, "path-rejected"), "turnback {args:?}: {failure:?}");
    }
    assert_eq!(env.read(".turnback-store/settings.toml").unwrap(), settings);
    assert!(env.ws.join(".turnback-store/store.db").exists());
    let verify = env.run(&with_store(&["verify", "--deep"]), None);
    assert!(verify.status.success(), "{}", crate::common::show_output(&verify));
}

#[test]
fn writes_through_a_symlinked_directory_are_rejected() {
    let env = Env::new();
    let elsewhere = env.root.join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    std::fs::write(elsewhere.join("existing.txt"), "outside data\n").unwrap();
    symlink(&elsewhere, env.ws.join("link")).unwrap();

    assert_rejected(&env, &["fs", "write", "link/new.txt"], Some(b"x"));
    assert_rejected(&env, &["fs", "create", "link/sub/deep.txt"], Some(b"x"));
    assert_rejected(&env, &["fs", "write", "link/existing.txt"], Some(b"x"));
    assert_rejected(&env, &["fs", "edit", "link/existing.txt", "--old", "outside", "--new", "inside"], None);
    assert_rejected(&env, &["fs", "delete", "link/existing.txt"], None);
    assert_rejected(&env, &["stage", "link/existing.txt"], None);

    let names: Vec<_> = std::fs::read_dir(&elsewhere).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names, ["existing.txt"], "nothing was written through the symlink");
    assert_eq!(std::fs::read(elsewhere.join("existing.txt")).unwrap(), b"outside data\n");
    assert!(env.ws.join("link").symlink_metadata().unwrap().file_type().is_symlink());
    assert!(env.all_checkpoints().is_empty());
}

#[test]
fn a_target_that_is_a_symlink_is_refused() {
    let env = Env::new();
    let elsewhere = env.root.join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    std::fs::write(elsewhere.join("target.txt"), "outside data\n").unwrap();
    symlink(elsewhere.join("target.txt"), env.ws.join("t.txt")).unwrap();
    symlink(elsewhere.join("missing.txt"), env.ws.join("dangling.txt")).unwrap();

    assert_rejected(&env, &["fs", "write", "t.txt"], Some(b"x"));
    assert_rejected(&env, &["fs", "create", "t.txt"], Some(b"x"));
    assert_rejected(&env, &["fs", "edit", "t.txt", "--old", "outside", "--new", "inside"], None);
    assert_rejected(&env, &["fs", "delete", "t.txt"], None);
    assert_rejected(&env, &["stage", "t.txt"], None);
    assert_rejected(&env, &["fs", "write", "dangling.txt"], Some(b"x"));
    assert_rejected(&env, &["fs", "create", "dangling.txt"], Some(b"x"));

    assert_eq!(std::fs::read(elsewhere.join("target.txt")).unwrap(), b"outside data\n");
    assert!(!elsewhere.join("missing.txt").exists(), "a dangling symlink was written through");
    for link in ["t.txt", "dangling.txt"] {
        assert!(env.ws.join(link).symlink_metadata().unwrap().file_type().is_symlink(), "{link} is still a symlink");
    }
    assert!(env.all_checkpoints().is_empty());
}

#[test]
fn edit_and_write_preserve_the_file_mode() {
    let env = Env::new();
    env.write("run.sh", "#!/bin/sh\necho old\n");
    chmod(&env.ws.join("run.sh"), 0o755);
    env.write("secret.txt", "private old\n");
    chmod(&env.ws.join("secret.txt"), 0o600);

    env.ok(&["fs", "edit", "run.sh", "--old", "old", "--new", "new"], None);
    assert_eq!(env.read("run.sh").unwrap(), b"#!/bin/sh\necho new\n");
    assert_eq!(mode_of(&env.ws.join("run.sh")), 0o755, "fs edit keeps the mode");
    env.ok(&["fs", "write", "run.sh"], Some(b"#!/bin/sh\necho newer\n"));
    assert_eq!(mode_of(&env.ws.join("run.sh")), 0o755, "fs write keeps the mode");
    env.ok(&["fs", "edit", "secret.txt", "--old", "old", "--new", "new"], None);
    assert_eq!(mode_of(&env.ws.join("secret.txt")), 0o600, "fs edit keeps a private mode");
}

#[test]
fn checkpoint_cap_is_inclusive_and_a_refusal_states_exact_bytes_and_scope() {
    let env = Env::new();
    env.write("f.txt", "0123456789");
    let at_cap = env.json_with(&["--checkpoint-cap", "20", "fs", "write", "f.txt"], Some(b"abcdefghij"));
    assert_eq!(at_cap["coverageState"], "fully-protected", "pre 10 + post 10 = cap 20 fits: {at_cap:#}");
    assert_eq!(env.read("f.txt").unwrap(), b"abcdefghij");
    let used = artifact_bytes(&env);
    assert_eq!(used, 20);

    let over = env.fail(&["--checkpoint-cap", "20", "fs", "write", "f.txt"], Some(b"ABCDEFGHIJK"));
    assert_eq!((over.exit, over.code.as_str()), (20, "over-cap"), "{over:?}");
    assert!(over.message.contains("21 bytes"), "states the exact bytes: {}", over.message);
    assert!(over.message.contains("f.txt"), "states the unprotected scope: {}", over.message);
    assert_eq!(over.details["capacity"]["checkpointBytes"], 21, "{:#}", over.details);
    assert_eq!(over.details["capacity"]["checkpointCap"], 20, "{:#}", over.details);
    assert_eq!(over.details["capacity"]["breach"], "checkpoint", "{:#}", over.details);
    assert_eq!(over.details["unprotectedScope"], json!(["f.txt"]), "{:#}", over.details);
    assert_eq!(env.read("f.txt").unwrap(), b"abcdefghij", "a refused write changes nothing");
    assert_eq!(env.all_checkpoints().len(), 1, "a refused write records nothing");

    // Without --json the disclosure goes to stderr, and the exit code is the same.
    let text = env.run(&["--checkpoint-cap", "20", "fs", "write", "f.txt"], Some(b"ABCDEFGHIJK"));
    assert_eq!(text.status.code(), Some(20));
    let stderr = String::from_utf8_lossy(&text.stderr);
    assert!(stderr.contains("over-cap") && stderr.contains("21 bytes") && stderr.contains("f.txt"), "{stderr}");

    // A stage assumes the post-image is as large as the pre-image: 10 + 10 > 19.
    let staged = env.fail(&["--checkpoint-cap", "19", "stage", "f.txt"], None);
    assert_eq!((staged.exit, staged.code.as_str()), (20, "over-cap"), "{staged:?}");
    assert_eq!(staged.details["capacity"]["checkpointBytes"], 20, "{:#}", staged.details);

    let confirmed = env
        .json_with(&["--checkpoint-cap", "20", "fs", "write", "f.txt", "--confirm-unprotected"], Some(b"ABCDEFGHIJK"));
    assert_eq!(confirmed["coverageState"], "unprotected", "{confirmed:#}");
    assert_eq!(confirmed["stageState"], "committed", "{confirmed:#}");
    assert_eq!(env.read("f.txt").unwrap(), b"ABCDEFGHIJK");
    let t = &confirmed["targets"][0];
    assert!(t["preImage"]["artifactId"].is_null() && t["postImage"]["artifactId"].is_null(), "{t:#}");
    assert!(t["preImage"]["digest"].is_string() && t["postImage"]["digest"].is_string(), "digests are kept: {t:#}");
    assert_eq!(artifact_bytes(&env), used, "an unprotected checkpoint stores no content");
    env.assert_verify_clean();
}

#[test]
fn store_cap_is_inclusive_and_a_refusal_states_exact_usage_and_scope() {
    let env = Env::new();
    env.ok(&["fs", "write", "a.txt"], Some(b"0123456789"));
    assert_eq!(artifact_bytes(&env), 10);
    let at_cap = env.json_with(&["--store-cap", "30", "fs", "write", "b.txt"], Some(b"01234567890123456789"));
    assert_eq!(at_cap["coverageState"], "fully-protected", "10 used + 20 = cap 30 fits: {at_cap:#}");
    assert_eq!(artifact_bytes(&env), 30);

    let over = env.fail(&["--store-cap", "30", "fs", "write", "c.txt"], Some(b"x"));
    assert_eq!((over.exit, over.code.as_str()), (20, "over-cap"), "{over:?}");
    assert!(over.message.contains("30 of 30 bytes"), "states the exact usage: {}", over.message);
    assert!(over.message.contains("1 bytes"), "states the checkpoint's bytes: {}", over.message);
    assert!(over.message.contains("c.txt"), "states the unprotected scope: {}", over.message);
    assert_eq!(over.details["capacity"]["storeUsage"], 30, "{:#}", over.details);
    assert_eq!(over.details["capacity"]["storeCap"], 30, "{:#}", over.details);
    assert_eq!(over.details["capacity"]["checkpointBytes"], 1, "{:#}", over.details);
    assert_eq!(over.details["capacity"]["breach"], "store", "{:#}", over.details);
    assert_eq!(over.details["unprotectedScope"], json!(["c.txt"]), "{:#}", over.details);
    assert_eq!(env.read("c.txt"), None, "a refused write creates nothing");

    let confirmed = env.json_with(&["--store-cap", "30", "fs", "write", "c.txt", "--confirm-unprotected"], Some(b"x"));
    assert_eq!(confirmed["coverageState"], "unprotected", "{confirmed:#}");
    assert_eq!(env.read("c.txt").unwrap(), b"x");
    assert_eq!(artifact_bytes(&env), 30, "the store cap still holds");
    env.assert_verify_clean();
}

#[test]
fn sizes_are_binary_units_and_megabytes_are_refused() {
    let env = Env::new();
    let init = env.json(&["--checkpoint-cap", "100 MiB", "--store-cap", "524288000", "init"]);
    assert_eq!(init["settings"]["checkpointCap"], 100 * 1024 * 1024, "{init:#}");
    assert_eq!(init["settings"]["storeCap"], 500 * 1024 * 1024, "{init:#}");
    let mb = env.fail(&["--checkpoint-cap", "100 MB", "checkpoints"], None);
    assert_eq!((mb.exit, mb.code.as_str()), (2, "invalid-argument"), "{mb:?}");
    assert!(mb.message.contains("MiB"), "says which units it takes: {}", mb.message);
}

#[test]
fn retention_rounds_must_be_between_1_and_100() {
    let env = Env::new();
    env.ok(&["init"], None);
    let zero = env.fail(&["--retention-rounds", "0", "checkpoints"], None);
    assert_eq!((zero.exit, zero.code.as_str()), (2, "invalid-argument"), "{zero:?}");
    assert!(zero.message.contains("between 1 and 100"), "{}", zero.message);

    let text = env.run(&["--retention-rounds", "101", "fs", "write", "r.txt"], Some(b"x"));
    assert_eq!(text.status.code(), Some(2), "{}", crate::common::show_output(&text));
    assert!(String::from_utf8_lossy(&text.stderr).contains("between 1 and 100"));
    assert_eq!(env.read("r.txt"), None, "a usage error changes nothing");

    let negative = env.run(&["--retention-rounds", "-1", "checkpoints"], None);
    assert_eq!(negative.status.code(), Some(2), "{}", crate::common::show_output(&negative));

    for ok in ["1", "100"] {
        let init = env.json(&["--retention-rounds", ok, "init"]);
        assert_eq!(init["settings"]["retentionPromptRounds"].to_string(), ok, "{init:#}");
        let written = env.json_with(&["--retention-rounds", ok, "fs", "write", "r.txt"], Some(ok.as_bytes()));
        assert_eq!(written["stageState"], "committed", "{written:#}");
    }
}

/// Spawns `count` concurrent `fs write` processes on distinct files and waits for all.
fn concurrent_writes(env: &Env, count: usize) {
    let children: Vec<_> = (0..count)
        .map(|i| {
            let mut cmd = env.command(&["fs", "write", &format!("f{i}.txt")]);
            cmd.stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped());
            let mut child = cmd.spawn().expect("spawn turnback");
            use std::io::Write;
            child.stdin.take().unwrap().write_all(format!("content {i}\n").as_bytes()).unwrap();
            child
        })
        .collect();
    for (i, child) in children.into_iter().enumerate() {
        let out = child.wait_with_output().expect("wait for turnback");
        assert!(out.status.success(), "writer {i}: {}", crate::common::show_output(&out));
    }
}

#[test]
fn concurrent_writers_in_one_session_all_commit() {
    let env = Env::new();
    env.ok(&["init"], None);
    env.ok(&["checkpoints"], None); // the workspace's session exists before the writers start
    concurrent_writes(&env, 8);

    let listed = env.checkpoints();
    let mut paths: Vec<&str> = listed.iter().map(|c| str_at(c, "/targets/0/path")).collect();
    paths.sort();
    let expected: Vec<String> = (0..8).map(|i| format!("f{i}.txt")).collect();
    assert_eq!(paths, expected, "every writer's checkpoint is listed");
    for i in 0..8 {
        assert_eq!(env.read(&format!("f{i}.txt")).unwrap(), format!("content {i}\n").as_bytes());
    }
    let report = env.assert_verify_clean();
    assert_eq!(report["counts"]["committed"], 8, "{report:#}");
    assert_eq!(report["counts"]["pending"], 0, "{report:#}");
}

#[test]
fn concurrent_first_writers_share_one_session() {
    for _ in 0..4 {
        let env = Env::new();
        env.ok(&["init"], None);
        concurrent_writes(&env, 8);
        let listed = env.checkpoints();
        assert_eq!(listed.len(), 8, "checkpoints of concurrent first writers are hidden: {listed:#?}");
    }
}

#[test]
fn checkpoints_filter_by_prompt_round() {
    let env = Env::new();
    env.ok(&["fs", "write", "a.txt"], Some(b"a"));
    env.ok(&["fs", "write", "b.txt"], Some(b"b"));
    let round0 = env.json(&["checkpoints", "--turn", "0"]);
    assert_eq!(round0["checkpoints"].as_array().map(Vec::len), Some(2), "{round0:#}");
    let round1 = env.json(&["checkpoints", "--turn", "1"]);
    assert_eq!(round1["checkpoints"], json!([]), "{round1:#}");
    assert_eq!(round0["sessionId"], round1["sessionId"]);
}

#[test]
fn usage_errors_with_json_print_a_json_error() {
    let env = Env::new();
    env.ok(&["init"], None);
    for args in [
        vec!["--json", "fs", "edit", "a.txt", "--new", "x"],
        vec!["--json", "--retention-rounds", "-1", "checkpoints"],
        vec!["--json", "stage", "a.txt", "--kind", "rename"],
    ] {
        let out = env.run(&args, None);
        assert_eq!(out.status.code(), Some(2), "turnback {args:?}: {}", crate::common::show_output(&out));
        let doc: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!("turnback {args:?}: stdout is not JSON ({e}): {}", crate::common::show_output(&out))
        });
        assert!(doc["error"]["code"].is_string(), "{doc:#}");
    }
}

#[test]
fn concurrent_edits_of_one_file_are_all_applied_none_lost() {
    let env = Env::new();
    let tokens: Vec<String> = (0..12).map(|i| format!("w{i:02}")).collect();
    env.write("f.txt", tokens.join("\n") + "\n");
    env.ok(&["init"], None);
    let children: Vec<_> = tokens
        .iter()
        .map(|t| {
            let new = t.replace('w', "X");
            let mut cmd = env.command(&["fs", "edit", "f.txt", "--old", t.as_str(), "--new", new.as_str()]);
            cmd.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped());
            cmd.spawn().expect("spawn turnback")
        })
        .collect();
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", crate::common::show_output(&out));
    }
    let text = String::from_utf8(env.read("f.txt").unwrap()).unwrap();
    for t in &tokens {
        assert!(text.contains(&t.replace('w', "X")), "edit of {t} was lost: {text}");
    }
    assert_eq!(env.checkpoints().len(), 12);
    env.assert_verify_clean();
}

#[test]
fn a_file_changed_during_the_write_is_refused_and_left_as_found() {
    let env = Env::new();
    env.write("f.txt", "agent sees this\n");
    let flag = env.root.join("go");
    let mut cmd = env.command(&["--json", "fs", "write", "f.txt"]);
    cmd.env("TURNBACK_PAUSE", format!("dispatched={}", flag.display()))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    {
        use std::io::Write;
        child.stdin.take().unwrap().write_all(b"agent writes this\n").unwrap();
    }
    let stderr = child.stderr.take().unwrap();
    let mut reader = std::io::BufReader::new(stderr);
    let mut line = String::new();
    std::io::BufRead::read_line(&mut reader, &mut line).unwrap();
    assert!(line.contains("failpoint dispatched reached"), "{line}");
    env.write("f.txt", "a person saved this meanwhile\n");
    std::fs::write(&flag, "").unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(20), "{}", crate::common::show_output(&out));
    let err = crate::common::parse_json(&out);
    assert_eq!(err["error"]["code"], "conflict");
    assert_eq!(env.read("f.txt").unwrap(), b"a person saved this meanwhile\n");
    let all = env.all_checkpoints();
    assert_eq!(all.len(), 1);
    assert_eq!(str_at(&all[0], "/mutation/commitState"), "failed");
    env.assert_verify_clean();
}

#[test]
fn the_key_file_and_the_store_cannot_be_touched_through_a_workspace() {
    let mut env = Env::without_key();
    env.set_var("XDG_CONFIG_HOME", &env.ws.join(".config").display().to_string());
    env.ok(&["fs", "write", "a.txt"], Some(b"x"));
    let key = env.ws.join(".config/turnback/master.key");
    assert!(key.exists());
    for args in [
        vec!["fs", "delete", ".config/turnback/master.key"],
        vec!["fs", "write", ".config/turnback/other"],
        vec!["stage", ".config/turnback/master.key"],
    ] {
        let f = env.fail(&args, Some(b"evil"));
        assert_eq!(f.code, "path-rejected", "{args:?}: {}", f.message);
    }
    assert!(key.exists());
    env.ok(&["verify", "--deep"], None);
}

#[test]
fn a_file_whose_bytes_equal_a_snapshotted_symlink_target_stays_restorable() {
    let env = Env::new();
    std::os::unix::fs::symlink("hello", env.ws.join("link")).unwrap();
    env.write("a.txt", "hello");
    env.ok(&["snapshot"], None); // stores the link's target "hello" first, as a symlink target
    env.ok(&["fs", "write", "a.txt"], Some(b"bye"));
    env.assert_verify_clean();
    let id = env.checkpoints()[0]["checkpointId"].as_str().unwrap().to_string();
    env.ok(&["rollback", &id, "--apply"], None);
    assert_eq!(env.read("a.txt").unwrap(), b"hello");
}

#[test]
fn fs_write_refuses_content_over_the_checkpoint_cap_as_soon_as_it_passes_it() {
    use std::io::Write;
    let env = Env::new();
    let mut child = env
        .command(&["--checkpoint-cap", "1048576", "fs", "write", "huge.bin"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut pipe = child.stdin.take().unwrap();
    // 300 MB offered; the process must stop reading one byte past the 1 MiB cap.
    let writer = std::thread::spawn(move || {
        let block = vec![b'x'; 1 << 20];
        (0..300).take_while(|_| pipe.write_all(&block).is_ok()).count()
    });
    let mut peak_kib = 0u64;
    while child.try_wait().unwrap().is_none() {
        peak_kib = peak_kib.max(crate::common::peak_rss_kib(child.id()));
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let out = child.wait_with_output().unwrap();
    let sent = writer.join().unwrap();
    assert_eq!(out.status.code(), Some(20), "{}", crate::common::show_output(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("over-cap") && stderr.contains("--confirm-unprotected"), "{stderr}");
    assert!(sent < 300, "the refusal came before the input ended ({sent} MiB sent)");
    assert!(peak_kib < 64 * 1024, "refused within 64 MiB, peaked at {peak_kib} KiB");
    assert!(!env.ws.join("huge.bin").exists(), "nothing was written");
    assert!(env.all_checkpoints().is_empty(), "nothing was recorded");
}
