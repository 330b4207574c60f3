//! The rollback engine (DESIGN §2.6–§2.8, issue 3), end to end through the real binary:
//! every outcome and reason code created for real on disk, undo of a rollback, preview
//! and apply agreeing, races between preview / analysis and the write, the safe choices,
//! multi-step histories and the selection forms.
//!
//! Agent mutations go through `turnback fs …`; a "person" changes files directly with
//! `std::fs`. All mutations happen in prompt round 0, so `--turn 0` selects every
//! checkpoint of the session except rollbacks.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::{MetadataExt, symlink};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::{Env, chmod, flip_byte_in_rows, mode_of, parse_json, show_output, str_at, unique};

const FULL: i32 = 0;
const PARTIAL: i32 = 3;
const BLOCKED: i32 = 20;

const SAFE_CHOICES: [&str; 3] = ["skip-target", "export-sanitized-patch", "user-authored-resolution"];
const EXCLUDED: [&str; 7] =
    ["remote", "network", "process", "external", "outside-workspace", "excluded-path", "symlink-side"];

// ---------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------

/// `turnback fs write PATH` with `content`; returns the checkpoint id.
fn agent_write(env: &Env, path: &str, content: &[u8]) -> String {
    str_at(&env.json_with(&["fs", "write", path], Some(content)), "/checkpointId").to_string()
}

/// `turnback fs create PATH` with `content`; returns the checkpoint id.
fn agent_create(env: &Env, path: &str, content: &[u8]) -> String {
    str_at(&env.json_with(&["fs", "create", path], Some(content)), "/checkpointId").to_string()
}

/// `turnback fs edit PATH --old OLD --new NEW`; returns the checkpoint id.
fn agent_edit(env: &Env, path: &str, old: &str, new: &str) -> String {
    str_at(&env.json(&["fs", "edit", path, "--old", old, "--new", new]), "/checkpointId").to_string()
}

/// `turnback fs delete PATH`; returns the checkpoint id.
fn agent_delete(env: &Env, path: &str) -> String {
    str_at(&env.json(&["fs", "delete", path]), "/checkpointId").to_string()
}

/// Runs `turnback --json rollback ARGS`; returns the exit code and the document.
fn rollback(env: &Env, args: &[&str]) -> (i32, Value) {
    let mut full = vec!["--json", "rollback"];
    full.extend_from_slice(args);
    let out = env.run(&full, None);
    (out.status.code().expect("turnback exited normally"), parse_json(&out))
}

/// [`rollback`], asserting the exit code.
fn rollback_exit(env: &Env, args: &[&str], exit: i32) -> Value {
    let (code, doc) = rollback(env, args);
    assert_eq!(code, exit, "turnback rollback {} exit code; document: {doc:#}", args.join(" "));
    doc
}

/// The one target for `path` in a preview or apply document.
fn target<'a>(doc: &'a Value, path: &str) -> &'a Value {
    let found: Vec<&Value> = targets_for(doc, path);
    assert_eq!(found.len(), 1, "exactly one target for {path} in {doc:#}");
    found[0]
}

/// Every target for `path`, in the document's order (newest mutation first).
fn targets_for<'a>(doc: &'a Value, path: &str) -> Vec<&'a Value> {
    doc["targets"]
        .as_array()
        .unwrap_or_else(|| panic!("no targets in {doc:#}"))
        .iter()
        .filter(|t| t["path"] == path)
        .collect()
}

/// `(kind, code)` of a target's outcome; the code is the reason or cause code, or "".
fn outcome_of(t: &Value) -> (String, String) {
    let o = &t["outcome"];
    let kind = o["kind"].as_str().unwrap_or_else(|| panic!("no outcome kind in {t:#}")).to_string();
    let code = o["reasonCode"].as_str().or_else(|| o["causeCode"].as_str()).unwrap_or("").to_string();
    (kind, code)
}

/// Asserts the outcome (kind and code) of the one target for `path`.
fn assert_outcome(doc: &Value, path: &str, kind: &str, code: &str) {
    let t = target(doc, path);
    assert_eq!(outcome_of(t), (kind.to_string(), code.to_string()), "outcome of {path}: {t:#}");
    if kind == "conflict" {
        assert_eq!(t["outcome"]["safeChoices"], json!(SAFE_CHOICES), "a conflict offers the safe choices: {t:#}");
    }
}

/// Asserts the document lists every never-reversible effect as `never-protected`.
fn assert_excluded_effects(doc: &Value) {
    let want: Vec<Value> = EXCLUDED.iter().map(|e| json!({ "effect": e, "status": "never-protected" })).collect();
    assert_eq!(doc["excludedEffects"], json!(want), "excludedEffects: {doc:#}");
}

/// One entry of a workspace tree.
#[derive(Clone, PartialEq, Eq)]
enum Node {
    Dir { mode: u32 },
    File { bytes: Vec<u8>, mode: u32 },
    Symlink { target: PathBuf },
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Node::Dir { mode } => write!(f, "directory {mode:04o}"),
            Node::File { bytes, mode } => write!(f, "file {mode:04o} {:?}", String::from_utf8_lossy(bytes)),
            Node::Symlink { target } => write!(f, "symlink -> {}", target.display()),
        }
    }
}

/// Every entry under `root` (symlinks not followed): path → kind, bytes, mode.
fn tree(root: &Path) -> BTreeMap<String, Node> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("read_dir {}: {e}", dir.display())) {
            let path = entry.expect("directory entry").path();
            let rel = path.strip_prefix(root).expect("under root").to_string_lossy().into_owned();
            let meta = std::fs::symlink_metadata(&path).expect("lstat");
            let mode = meta.mode() & 0o7777;
            let node = if meta.file_type().is_symlink() {
                Node::Symlink { target: std::fs::read_link(&path).expect("readlink") }
            } else if meta.is_dir() {
                stack.push(path.clone());
                Node::Dir { mode }
            } else {
                Node::File { bytes: std::fs::read(&path).expect("read file"), mode }
            };
            out.insert(rel, node);
        }
    }
    out
}

/// Asserts two trees are identical, listing only the entries that differ.
fn assert_same_tree(got: &BTreeMap<String, Node>, want: &BTreeMap<String, Node>, what: &str) {
    let diff = tree_diff(got, want);
    assert!(diff.is_empty(), "{what}: the tree differs:\n{}", diff.join("\n"));
}

fn tree_diff(got: &BTreeMap<String, Node>, want: &BTreeMap<String, Node>) -> Vec<String> {
    let mut diff = Vec::new();
    for (path, node) in want {
        match got.get(path) {
            None => diff.push(format!("  missing {path}: expected {node:?}")),
            Some(g) if g != node => diff.push(format!("  changed {path}: {g:?}, expected {node:?}")),
            Some(_) => {}
        }
    }
    for (path, node) in got {
        if !want.contains_key(path) {
            diff.push(format!("  extra   {path}: {node:?}"));
        }
    }
    diff
}

/// Replaces a workspace file with a *new* file (a new inode) holding `bytes`, the way an
/// editor that saves atomically does: write a sibling, then rename it over.
fn replace_with_new_inode(env: &Env, rel: &str, bytes: &[u8]) {
    let path = env.ws.join(rel);
    let before = std::fs::symlink_metadata(&path).ok().map(|m| m.ino());
    let temp = env.ws.join(format!("{rel}.person-save"));
    std::fs::write(&temp, bytes).expect("write replacement");
    std::fs::rename(&temp, &path).expect("rename replacement over");
    let after = std::fs::metadata(&path).expect("stat replacement").ino();
    assert_ne!(before, Some(after), "the replacement must be a new inode");
}

fn inode(env: &Env, rel: &str) -> u64 {
    std::fs::symlink_metadata(env.ws.join(rel)).expect("stat").ino()
}

fn running_as_root() -> bool {
    let out = Command::new("id").arg("-u").output().expect("run id -u");
    String::from_utf8_lossy(&out.stdout).trim() == "0"
}

/// Runs `turnback --json ARGS` so that permission bits apply to it. As an ordinary user
/// that is just running it; as root (where `chmod 000` does not stop reading) it runs
/// under `setpriv` with CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH dropped from the
/// bounding set, so root reads like the owner of the files it is. `None` if root and
/// `setpriv` cannot do that here.
fn run_honouring_permissions(env: &Env, args: &[&str]) -> Option<Output> {
    let mut full = vec!["--json"];
    full.extend_from_slice(args);
    let inner = env.command(&full);
    if !running_as_root() {
        let mut cmd = inner;
        return Some(cmd.stdin(Stdio::null()).output().expect("run turnback"));
    }
    let drop_caps = "--bounding-set=-dac_override,-dac_read_search";
    let probe = Command::new("setpriv").args([drop_caps, "true"]).output();
    if !probe.is_ok_and(|o| o.status.success()) {
        return None;
    }
    let mut cmd = Command::new("setpriv");
    cmd.arg(drop_caps).arg("--").arg(inner.get_program()).args(inner.get_args());
    for (name, value) in inner.get_envs() {
        match value {
            Some(v) => cmd.env(name, v),
            None => cmd.env_remove(name),
        };
    }
    if let Some(dir) = inner.get_current_dir() {
        cmd.current_dir(dir);
    }
    Some(cmd.stdin(Stdio::null()).output().expect("run turnback under setpriv"))
}

/// A process (not turnback) holding a workspace file open; killed when dropped.
#[derive(Debug)]
struct Holder {
    child: Child,
}

impl Holder {
    /// Starts `sh -c 'exec 3<FILE; exec sleep 30'` and waits until it holds the file.
    fn open(path: &Path) -> Self {
        let child = Command::new("sh")
            .arg("-c")
            .arg("exec 3<\"$0\"; exec sleep 30")
            .arg(path)
            .stdin(Stdio::null())
            .spawn()
            .expect("spawn sh");
        let holder = Holder { child };
        let fd = PathBuf::from(format!("/proc/{}/fd/3", holder.child.id()));
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::fs::read_link(&fd).ok().as_deref() != Some(path) {
            assert!(Instant::now() < deadline, "the holder process never opened {}", path.display());
            std::thread::sleep(Duration::from_millis(5));
        }
        holder
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A `turnback --json ARGS` process paused at a `TURNBACK_PAUSE` failpoint.
#[derive(Debug)]
struct Paused {
    child: Child,
    flag: PathBuf,
    stdout: Option<JoinHandle<Vec<u8>>>,
    stderr: mpsc::Receiver<String>,
}

impl Paused {
    /// Spawns `turnback --json ARGS` with `TURNBACK_PAUSE=point=FLAG` and waits until it
    /// reports reaching `point`; it then waits there until [`release`](Self::release).
    fn spawn(env: &Env, args: &[&str], point: &str) -> Self {
        let flag = env.root.join(unique("release-"));
        let mut full = vec!["--json"];
        full.extend_from_slice(args);
        let mut cmd = env.command(&full);
        cmd.env("TURNBACK_PAUSE", format!("{point}={}", flag.display()))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn turnback");
        let mut out = child.stdout.take().expect("stdout pipe");
        let stdout = std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = out.read_to_end(&mut buf);
            buf
        });
        let err = child.stderr.take().expect("stderr pipe");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            // Keep draining to the end, so the process never writes into a closed pipe.
            for line in BufReader::new(err).lines() {
                let Ok(line) = line else { break };
                let _ = tx.send(line);
            }
        });
        let paused = Paused { child, flag, stdout: Some(stdout), stderr: rx };
        let expected = format!("turnback: failpoint {point} reached");
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut seen = Vec::new();
        loop {
            match paused.stderr.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(line) if line == expected => return paused,
                Ok(line) => seen.push(line),
                Err(_) => panic!("turnback did not reach the pause point {point}; stderr: {seen:?}"),
            }
        }
    }

    /// Lets the process carry on; returns its exit code and its JSON document.
    fn release(mut self) -> (i32, Value) {
        std::fs::write(&self.flag, b"go").expect("create the release flag");
        let status = self.child.wait().expect("wait for turnback");
        let stdout = self.stdout.take().expect("stdout reader").join().expect("stdout reader thread");
        let stderr: Vec<String> = self.stderr.try_iter().collect();
        let doc = serde_json::from_slice(&stdout).unwrap_or_else(|e| {
            panic!("stdout is not JSON ({e}): {}\nstderr: {stderr:?}", String::from_utf8_lossy(&stdout))
        });
        (status.code().expect("exited normally"), doc)
    }
}

impl Drop for Paused {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Flips a bit of the last byte of every stored object (artifact ciphertexts) in `store.db`.
fn corrupt_every_object(env: &Env) {
    let n = flip_byte_in_rows(env, "objects", |len| len - 1);
    assert!(n > 0, "no objects to tamper with");
}

/// The rollback checkpoints among every record of the session.
fn rollback_records(env: &Env) -> usize {
    env.all_checkpoints().iter().filter(|r| r["mutation"]["kind"] == "rollback").count()
}

// ---------------------------------------------------------------------------------------
// 1. Outcomes and reason codes
// ---------------------------------------------------------------------------------------

#[test]
fn eligible_edit_create_and_delete_are_restored_byte_for_byte_with_modes_and_directories() {
    let env = Env::new();
    env.write("run.sh", "#!/bin/sh\necho ORIGINAL\n");
    chmod(&env.ws.join("run.sh"), 0o751);
    env.write("keep/other.txt", "a person's file\n");
    env.write("gone/deeper/old.bin", b"\x00\x01binary\xff\xfe original\n");
    chmod(&env.ws.join("gone/deeper/old.bin"), 0o604);
    let before = tree(&env.ws);

    let edit = agent_edit(&env, "run.sh", "ORIGINAL", "AGENT");
    let create = agent_create(&env, "keep/made/by/agent.txt", b"made by the agent\n");
    let delete = agent_delete(&env, "gone/deeper/old.bin");
    // A person (or a shell command) removes the directories the delete emptied.
    std::fs::remove_dir(env.ws.join("gone/deeper")).unwrap();
    std::fs::remove_dir(env.ws.join("gone")).unwrap();

    let preview = rollback_exit(&env, &["--turn", "0"], FULL);
    assert_eq!(preview["resultType"], "full", "{preview:#}");
    assert_eq!(preview["counts"], json!({ "applied-eligible": 3 }), "{preview:#}");
    assert_eq!(preview["checkpointIds"], json!([delete, create, edit]), "newest first: {preview:#}");
    assert_excluded_effects(&preview);
    let plan = str_at(&preview, "/planId").to_string();

    let t = target(&preview, "run.sh");
    assert_eq!((t["effect"].as_str(), t["checkpointId"].as_str()), (Some("edit"), Some(edit.as_str())), "{t:#}");
    assert_eq!(t["outcome"]["kind"], "applied-eligible", "{t:#}");
    assert_eq!(t["outcome"]["noOp"], false, "{t:#}");
    assert_eq!(t["outcome"]["inverseOperation"]["kind"], "restore-pre-image", "{t:#}");
    assert_eq!(t["outcome"]["inverseOperation"]["preImageDigest"], t["preImage"]["digest"], "{t:#}");
    assert_eq!(t["outcome"]["expectedCurrent"], t["preImage"], "{t:#}");
    assert_eq!(t["currentState"]["digest"], t["postImage"]["digest"], "{t:#}");
    assert_ne!(t["preImage"]["digest"], t["postImage"]["digest"], "{t:#}");

    let t = target(&preview, "keep/made/by/agent.txt");
    assert_eq!(t["effect"], "create", "{t:#}");
    assert_eq!(t["preImage"], json!({ "kind": "absent" }), "{t:#}");
    assert_eq!(t["outcome"]["inverseOperation"], json!({ "kind": "delete-file" }), "{t:#}");
    assert_eq!(t["outcome"]["expectedCurrent"], json!({ "kind": "absent" }), "{t:#}");
    assert_eq!(t["currentState"]["digest"], t["postImage"]["digest"], "{t:#}");

    let t = target(&preview, "gone/deeper/old.bin");
    assert_eq!(t["effect"], "delete", "{t:#}");
    assert_eq!(t["postImage"], json!({ "kind": "absent" }), "{t:#}");
    assert_eq!(t["currentState"], json!({ "kind": "absent" }), "{t:#}");
    assert_eq!(t["outcome"]["inverseOperation"]["kind"], "restore-from-artifact", "{t:#}");
    assert!(t["outcome"]["inverseOperation"]["artifactId"].is_string(), "{t:#}");
    assert_eq!(t["outcome"]["expectedCurrent"]["digest"], t["preImage"]["digest"], "{t:#}");

    let applied = rollback_exit(&env, &["--turn", "0", "--apply", "--plan", &plan], FULL);
    assert_eq!(applied["resultType"], "full", "{applied:#}");
    assert_eq!(applied["planId"], plan.as_str(), "{applied:#}");
    assert_eq!(
        applied["appliedPaths"],
        json!(["gone/deeper/old.bin", "keep/made/by/agent.txt", "run.sh"]),
        "{applied:#}"
    );
    assert_eq!(applied["residualConflicts"], json!([]), "{applied:#}");
    assert_eq!(applied["choiceFiles"], json!([]), "{applied:#}");
    assert!(applied["rollbackCheckpointId"].is_string(), "{applied:#}");
    assert_excluded_effects(&applied);

    // Bytes, modes and directories: exactly the tree before the agent, with the deleted
    // file's parents recreated and the created file's new directories removed (but not
    // the directory that was already there).
    assert_same_tree(&tree(&env.ws), &before, "after rolling back the turn");
    assert_eq!(mode_of(&env.ws.join("run.sh")), 0o751);
    assert_eq!(mode_of(&env.ws.join("gone/deeper/old.bin")), 0o604);

    // Taking it back again finds everything already as before: every target a no-op.
    let again = rollback_exit(&env, &["--turn", "0"], FULL);
    assert_eq!(again["checkpointIds"], preview["checkpointIds"], "the rollback itself is not selected: {again:#}");
    for t in again["targets"].as_array().unwrap() {
        assert_eq!(
            (t["outcome"]["kind"].as_str(), t["outcome"]["noOp"].as_bool()),
            (Some("applied-eligible"), Some(true)),
            "{t:#}"
        );
    }
    let records = rollback_records(&env);
    let noop = rollback_exit(&env, &["--turn", "0", "--apply"], FULL);
    assert_eq!(noop["appliedPaths"], json!([]), "{noop:#}");
    assert_eq!(noop["rollbackCheckpointId"], Value::Null, "nothing written, no rollback checkpoint: {noop:#}");
    assert_eq!(rollback_records(&env), records);
    assert_same_tree(&tree(&env.ws), &before, "after a no-op rollback");
    env.assert_verify_clean();
}

#[test]
fn a_person_edit_after_the_agent_is_a_content_conflict_and_is_never_overwritten() {
    let env = Env::new();
    env.write("a.txt", "one\n");
    agent_edit(&env, "a.txt", "one", "two");
    let ino = inode(&env, "a.txt");
    env.write("a.txt", "the person's version\n");
    assert_eq!(inode(&env, "a.txt"), ino, "edited in place: the same file");

    let preview = rollback_exit(&env, &["--turn", "0"], BLOCKED);
    assert_eq!(preview["resultType"], "blocked", "{preview:#}");
    assert_outcome(&preview, "a.txt", "conflict", "content-conflict");
    let t = target(&preview, "a.txt");
    assert_eq!(t["currentState"]["kind"], "present", "{t:#}");
    assert_ne!(t["currentState"]["digest"], t["postImage"]["digest"], "{t:#}");
    assert_ne!(t["currentState"]["digest"], t["preImage"]["digest"], "{t:#}");
    assert_eq!(preview["counts"], json!({ "conflict": 1 }), "{preview:#}");

    let records = rollback_records(&env);
    let applied = rollback_exit(&env, &["--turn", "0", "--apply"], BLOCKED);
    assert_eq!(applied["resultType"], "blocked", "{applied:#}");
    assert_eq!(applied["appliedPaths"], json!([]), "{applied:#}");
    assert_eq!(applied["rollbackCheckpointId"], Value::Null, "{applied:#}");
    let residual = applied["residualConflicts"].as_array().expect("residualConflicts");
    assert_eq!(residual.len(), 1, "{applied:#}");
    assert_eq!(residual[0]["path"], "a.txt", "{applied:#}");
    assert_eq!(residual[0]["category"], "conflict", "{applied:#}");
    assert_eq!(residual[0]["safeChoices"], json!(SAFE_CHOICES), "{applied:#}");
    assert_eq!(env.read("a.txt").as_deref(), Some(&b"the person's version\n"[..]));
    assert_eq!(rollback_records(&env), records, "a blocked rollback records nothing");
}

#[test]
fn a_file_the_agent_edited_and_a_person_deleted_is_target_deleted_and_stays_deleted() {
    let env = Env::new();
    env.write("a.txt", "one\n");
    agent_edit(&env, "a.txt", "one", "two");
    std::fs::remove_file(env.ws.join("a.txt")).unwrap();

    let preview = rollback_exit(&env, &["--turn", "0"], BLOCKED);
    assert_outcome(&preview, "a.txt", "conflict", "target-deleted");
    assert_eq!(target(&preview, "a.txt")["currentState"], json!({ "kind": "absent" }));
    rollback_exit(&env, &["--turn", "0", "--apply"], BLOCKED);
    assert_eq!(env.read("a.txt"), None, "a file the person deleted is not brought back");
}

#[test]
fn a_file_the_agent_created_and_a_person_deleted_is_already_as_before() {
    // Not target-deleted: the contract (issue 3: "delete-file (create; idempotent if
    // already gone)", "current already equal to the pre-image is eligible as a no-op")
    // makes a created file that is gone again an eligible no-op.
    let env = Env::new();
    agent_create(&env, "n.txt", b"new\n");
    std::fs::remove_file(env.ws.join("n.txt")).unwrap();
    let preview = rollback_exit(&env, &["--turn", "0"], FULL);
    let t = target(&preview, "n.txt");
    assert_eq!(
        (t["outcome"]["kind"].as_str(), t["outcome"]["noOp"].as_bool()),
        (Some("applied-eligible"), Some(true)),
        "{t:#}"
    );
    let applied = rollback_exit(&env, &["--turn", "0", "--apply"], FULL);
    assert_eq!(applied["appliedPaths"], json!([]), "{applied:#}");
    assert_eq!(env.read("n.txt"), None);
}

#[test]
fn a_file_deleted_and_recreated_with_other_content_is_target_recreated() {
    let env = Env::new();
    env.write("a.txt", "one\n");
    env.write("d.txt", "deleted by the agent\n");
    agent_edit(&env, "a.txt", "one", "two");
    agent_delete(&env, "d.txt");
    replace_with_new_inode(&env, "a.txt", b"a new file by the person\n");
    env.write("d.txt", "created again by the person\n");

    let preview = rollback_exit(&env, &["--turn", "0"], BLOCKED);
    assert_outcome(&preview, "a.txt", "conflict", "target-recreated");
    assert_outcome(&preview, "d.txt", "conflict", "target-recreated");
    let before = tree(&env.ws);
    rollback_exit(&env, &["--turn", "0", "--apply"], BLOCKED);
    assert_same_tree(&tree(&env.ws), &before, "nothing is written over a recreated file");
}

#[test]
fn a_file_recreated_with_the_same_content_is_an_identity_mismatch() {
    let env = Env::new();
    env.write("a.txt", "one\n");
    agent_edit(&env, "a.txt", "one", "two");
    replace_with_new_inode(&env, "a.txt", b"two\n"); // the agent's bytes, another file
    let ino = inode(&env, "a.txt");

    let preview = rollback_exit(&env, &["--turn", "0"], BLOCKED);
    assert_outcome(&preview, "a.txt", "mismatch", "identity-changed");
    let t = target(&preview, "a.txt");
    assert_eq!(t["currentState"]["digest"], t["postImage"]["digest"], "same content: {t:#}");
    assert_ne!(t["currentState"]["version"], t["postImage"]["version"], "another file: {t:#}");
    rollback_exit(&env, &["--turn", "0", "--apply"], BLOCKED);
    assert_eq!(env.read("a.txt").as_deref(), Some(&b"two\n"[..]));
    assert_eq!(inode(&env, "a.txt"), ino, "the person's file is left alone");
}

#[test]
fn a_renamed_file_is_an_identity_mismatch_naming_where_it_went() {
    let env = Env::new();
    env.write("a.txt", "one\n");
    agent_edit(&env, "a.txt", "one", "two");
    std::fs::rename(env.ws.join("a.txt"), env.ws.join("moved.txt")).unwrap();

    let preview = rollback_exit(&env, &["--turn", "0"], BLOCKED);
    assert_outcome(&preview, "a.txt", "mismatch", "identity-changed");
    let detail = str_at(target(&preview, "a.txt"), "/outcome/detail");
    assert!(detail.contains("moved.txt"), "the detail names the new name: {detail}");
    let before = tree(&env.ws);
    rollback_exit(&env, &["--turn", "0", "--apply"], BLOCKED);
    assert_same_tree(&tree(&env.ws), &before, "a renamed file is neither restored nor recreated");
}

#[test]
fn a_case_change_of_the_name_is_an_identity_mismatch() {
    let env = Env::new();
    env.write("a.txt", "one\n");
    agent_edit(&env, "a.txt", "one", "two");
    std::fs::rename(env.ws.join("a.txt"), env.ws.join("A.txt")).unwrap();

    let preview = rollback_exit(&env, &["--turn", "0"], BLOCKED);
    assert_outcome(&preview, "a.txt", "mismatch", "identity-changed");
    let before = tree(&env.ws);
    rollback_exit(&env, &["--turn", "0", "--apply"], BLOCKED);
    assert_same_tree(&tree(&env.ws), &before, "after a case change");
}

#[test]
fn a_copy_under_another_unicode_form_or_case_is_an_identity_mismatch_too() {
    // Not the same inode: only the folded name (NFC, lower case) ties it to the target.
    let env = Env::new();
    let nfc = "caf\u{e9}.txt";
    let nfd = "cafe\u{301}.txt";
    env.write(nfc, "one\n");
    env.write("b.txt", "one\n");
    agent_edit(&env, nfc, "one", "two");
    agent_edit(&env, "b.txt", "one", "two");
    env.write(nfd, "two\n");
    std::fs::remove_file(env.ws.join(nfc)).unwrap();
    env.write("B.TXT", "two\n");
    std::fs::remove_file(env.ws.join("b.txt")).unwrap();

    let preview = rollback_exit(&env, &["--turn", "0"], BLOCKED);
    assert_outcome(&preview, nfc, "mismatch", "identity-changed");
    assert_outcome(&preview, "b.txt", "mismatch", "identity-changed");
}

#[test]
fn a_symlink_swapped_in_at_the_path_is_behind_symlink_and_nothing_is_written_through_it() {
    let env = Env::new();
    let outside = env.root.join("outside.txt");
    let outside_created = env.root.join("outside-created.txt");
    // The agent's own bytes, so a check that followed the link would find a match.
    std::fs::write(&outside, "two\n").unwrap();
    std::fs::write(&outside_created, "made by the agent\n").unwrap();
    env.write("a.txt", "one\n");
    agent_edit(&env, "a.txt", "one", "two");
    agent_create(&env, "n.txt", b"made by the agent\n");
    std::fs::remove_file(env.ws.join("a.txt")).unwrap();
    symlink(&outside, env.ws.join("a.txt")).unwrap();
    std::fs::remove_file(env.ws.join("n.txt")).unwrap();
    symlink(&outside_created, env.ws.join("n.txt")).unwrap();

    let preview = rollback_exit(&env, &["--turn", "0"], BLOCKED);
    assert_outcome(&preview, "a.txt", "conflict", "behind-symlink");
    assert_outcome(&preview, "n.txt", "conflict", "behind-symlink");
    assert_eq!(target(&preview, "a.txt")["currentState"], json!({ "kind": "unknown" }));

    let before = tree(&env.ws);
    rollback_exit(&env, &["--turn", "0", "--apply"], BLOCKED);
    assert_same_tree(&tree(&env.ws), &before, "the symlinks stay");
    assert_eq!(std::fs::read(&outside).unwrap(), b"two\n", "nothing written through the symlink");
    assert_eq!(std::fs::read(&outside_created).unwrap(), b"made by the agent\n");
}

#[test]
fn a_parent_directory_replaced_by_a_symlink_is_behind_symlink() {
    let env = Env::new();
    let outside = env.root.join("outside-dir");
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(outside.join("a.txt"), "two\n").unwrap(); // what the agent wrote
    let empty_outside = env.root.join("outside-empty");
    std::fs::create_dir(&empty_outside).unwrap();
    env.write("d/a.txt", "one\n");
    env.write("e/gone.txt", "deleted by the agent\n");
    agent_edit(&env, "d/a.txt", "one", "two");
    agent_delete(&env, "e/gone.txt");
    std::fs::rename(env.ws.join("d"), env.ws.join("d-real")).unwrap();
    symlink(&outside, env.ws.join("d")).unwrap();
    std::fs::remove_dir(env.ws.join("e")).unwrap();
    symlink(&empty_outside, env.ws.join("e")).unwrap();

    let preview = rollback_exit(&env, &["--turn", "0"], BLOCKED);
    assert_outcome(&preview, "d/a.txt", "conflict", "behind-symlink");
    assert_outcome(&preview, "e/gone.txt", "conflict", "behind-symlink");

    let before = tree(&env.ws);
    rollback_exit(&env, &["--turn", "0", "--apply"], BLOCKED);
    assert_same_tree(&tree(&env.ws), &before, "the workspace after apply");
    assert_eq!(std::fs::read(outside.join("a.txt")).unwrap(), b"two\n", "not written through the symlinked parent");
    assert_eq!(std::fs::read_dir(&empty_outside).unwrap().count(), 0, "nothing recreated through the symlinked parent");
}

#[test]
fn an_unreadable_file_is_inaccessible() {
    let env = Env::new();
    env.write("a.txt", "one\n");
    agent_edit(&env, "a.txt", "one", "two");
    chmod(&env.ws.join("a.txt"), 0o000);

    let Some(out) = run_honouring_permissions(&env, &["rollback", "--turn", "0"]) else {
        crate::common::tools::skipped("the unreadable-file rollback check (root without a working setpriv)");
        chmod(&env.ws.join("a.txt"), 0o644);
        return;
    };
    let preview = parse_json(&out);
    assert_eq!(out.status.code(), Some(BLOCKED), "{}", show_output(&out));
    assert_outcome(&preview, "a.txt", "inaccessible", "unreadable");
    assert_eq!(target(&preview, "a.txt")["currentState"], json!({ "kind": "unknown" }));

    let out = run_honouring_permissions(&env, &["rollback", "--turn", "0", "--apply"]).expect("as above");
    assert_eq!(out.status.code(), Some(BLOCKED), "{}", show_output(&out));
    assert_outcome(&parse_json(&out), "a.txt", "inaccessible", "unreadable");
    assert_eq!(mode_of(&env.ws.join("a.txt")), 0o000, "left as it is");
    chmod(&env.ws.join("a.txt"), 0o644);
    assert_eq!(env.read("a.txt").as_deref(), Some(&b"two\n"[..]));
}

#[test]
fn a_file_another_process_holds_open_is_an_unknown_outcome() {
    let env = Env::new();
    env.write("a.txt", "one\n");
    env.write("b.txt", "one\n");
    agent_edit(&env, "a.txt", "one", "two");
    agent_edit(&env, "b.txt", "one", "two");
    let holder = Holder::open(&env.ws.join("a.txt"));

    let preview = rollback_exit(&env, &["--turn", "0"], PARTIAL);
    assert_eq!(preview["openHandlesChecked"], true, "{preview:#}");
    assert_outcome(&preview, "a.txt", "unknown-outcome", "");
    let reason = str_at(target(&preview, "a.txt"), "/outcome/reason");
    assert!(reason.contains(&holder.child.id().to_string()), "the reason names the process: {reason}");
    assert_outcome(&preview, "b.txt", "applied-eligible", "");

    let applied = rollback_exit(&env, &["--turn", "0", "--apply"], PARTIAL);
    assert_eq!(applied["resultType"], "partial", "{applied:#}");
    assert_eq!(applied["appliedPaths"], json!(["b.txt"]), "{applied:#}");
    assert_eq!(env.read("a.txt").as_deref(), Some(&b"two\n"[..]), "a held file is not touched");
    assert_eq!(env.read("b.txt").as_deref(), Some(&b"one\n"[..]));

    drop(holder);
    let after = rollback_exit(&env, &["--turn", "0", "--apply"], FULL);
    assert_eq!(after["appliedPaths"], json!(["a.txt"]), "once released it can be taken back: {after:#}");
    assert_eq!(env.read("a.txt").as_deref(), Some(&b"one\n"[..]));
}

#[test]
fn a_corrupt_artifact_is_binary_corrupt_and_never_restored() {
    let env = Env::new();
    let original: &[u8] = b"\x89PNG\r\n\x1a\n\x00\x00ORIGINAL-PIXELS\x00\xff";
    let agents: &[u8] = b"\x89PNG\r\n\x1a\n\x00\x00AGENT-PIXELS\x00\xff";
    env.write("img.png", original);
    agent_write(&env, "img.png", agents);
    corrupt_every_object(&env);

    let preview = rollback_exit(&env, &["--turn", "0"], BLOCKED);
    assert_outcome(&preview, "img.png", "conflict", "binary-corrupt");
    let applied = rollback_exit(&env, &["--turn", "0", "--apply"], BLOCKED);
    assert_outcome(&applied, "img.png", "conflict", "binary-corrupt");
    assert_eq!(env.read("img.png").as_deref(), Some(agents), "nothing restored from a corrupt artifact");
    assert_eq!(applied["rollbackCheckpointId"], Value::Null, "{applied:#}");
}

#[test]
fn a_mutation_killed_after_dispatch_is_an_unknown_outcome() {
    let env = Env::new();
    env.write("a.txt", "one\n");
    env.kill_at_failpoint(&["fs", "edit", "a.txt", "--old", "one", "--new", "two"], None, "dispatched");

    let preview = rollback_exit(&env, &["--turn", "0"], BLOCKED);
    assert_outcome(&preview, "a.txt", "unknown-outcome", "");
    let reason = str_at(target(&preview, "a.txt"), "/outcome/reason");
    assert!(reason.contains("OperationUnknownOutcome"), "{reason}");
    rollback_exit(&env, &["--turn", "0", "--apply"], BLOCKED);
    assert_eq!(env.read("a.txt").as_deref(), Some(&b"one\n"[..]));
}

#[test]
fn a_mutation_killed_before_dispatch_is_skipped_as_not_covered() {
    let env = Env::new();
    env.write("a.txt", "one\n");
    env.kill_at_failpoint(&["fs", "edit", "a.txt", "--old", "one", "--new", "two"], None, "staged");

    let preview = rollback_exit(&env, &["--turn", "0"], FULL);
    assert_outcome(&preview, "a.txt", "skipped", "");
    let reason = str_at(target(&preview, "a.txt"), "/outcome/reason");
    assert!(reason.contains("never dispatched"), "{reason}");
    let applied = rollback_exit(&env, &["--turn", "0", "--apply"], FULL);
    assert_eq!(applied["appliedPaths"], json!([]), "{applied:#}");
    assert_eq!(env.read("a.txt").as_deref(), Some(&b"one\n"[..]));
}

#[test]
fn a_stage_awaiting_its_commit_is_inaccessible_recovery_locked() {
    let env = Env::new();
    env.write("a.txt", "one\n");
    env.json(&["stage", "a.txt", "--kind", "edit"]);
    env.write("a.txt", "two\n");

    let preview = rollback_exit(&env, &["--turn", "0"], BLOCKED);
    assert_outcome(&preview, "a.txt", "inaccessible", "recovery-locked");
    rollback_exit(&env, &["--turn", "0", "--apply"], BLOCKED);
    assert_eq!(env.read("a.txt").as_deref(), Some(&b"two\n"[..]));
}

#[test]
fn an_unprotected_checkpoint_is_inaccessible_missing_artifact() {
    let env = Env::new();
    env.write("a.txt", "one\n");
    let done = env.json(&[
        "--checkpoint-cap",
        "1",
        "fs",
        "edit",
        "a.txt",
        "--old",
        "one",
        "--new",
        "two",
        "--confirm-unprotected",
    ]);
    assert_eq!(done["coverageState"], "unprotected", "{done:#}");

    let preview = rollback_exit(&env, &["--turn", "0"], BLOCKED);
    assert_outcome(&preview, "a.txt", "inaccessible", "missing-artifact");
    rollback_exit(&env, &["--turn", "0", "--apply"], BLOCKED);
    assert_eq!(env.read("a.txt").as_deref(), Some(&b"two\n"[..]));
}

#[test]
fn every_category_at_once_is_counted_and_the_result_is_partial() {
    let env = Env::new();
    let files = ["eligible.txt", "skip.txt", "conflict.txt", "renamed.txt", "held.txt"];
    for f in files {
        env.write(f, "one\n");
    }
    for f in files {
        agent_edit(&env, f, "one", "two");
    }
    env.write("conflict.txt", "person\n");
    std::fs::rename(env.ws.join("renamed.txt"), env.ws.join("elsewhere.txt")).unwrap();
    env.write("staged.txt", "one\n");
    env.json(&["stage", "staged.txt", "--kind", "edit"]);
    let _holder = Holder::open(&env.ws.join("held.txt"));

    let args = ["--turn", "0", "--choose", "skip.txt=skip"];
    let preview = rollback_exit(&env, &args, PARTIAL);
    let want = json!({
        "applied-eligible": 1, "skipped": 1, "conflict": 1, "mismatch": 1, "unknown-outcome": 1, "inaccessible": 1
    });
    assert_eq!(preview["counts"], want, "{preview:#}");
    assert_eq!(preview["resultType"], "partial", "{preview:#}");

    let mut apply_args = args.to_vec();
    apply_args.push("--apply");
    let applied = rollback_exit(&env, &apply_args, PARTIAL);
    assert_eq!(applied["counts"], want, "{applied:#}");
    assert_eq!(applied["appliedPaths"], json!(["eligible.txt"]), "{applied:#}");
    let mut residual: Vec<(&str, &str)> = applied["residualConflicts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["path"].as_str().unwrap(), r["category"].as_str().unwrap()))
        .collect();
    residual.sort();
    assert_eq!(
        residual,
        [
            ("conflict.txt", "conflict"),
            ("held.txt", "unknown-outcome"),
            ("renamed.txt", "mismatch"),
            ("staged.txt", "inaccessible")
        ],
        "{applied:#}"
    );
    assert_eq!(env.read("eligible.txt").as_deref(), Some(&b"one\n"[..]));
    assert_eq!(env.read("skip.txt").as_deref(), Some(&b"two\n"[..]));
}

#[test]
fn a_persons_chmod_after_the_agent_is_not_silently_reverted() {
    let env = Env::new();
    env.write("a.sh", "one\n");
    chmod(&env.ws.join("a.sh"), 0o644);
    agent_edit(&env, "a.sh", "one", "two");
    assert_eq!(mode_of(&env.ws.join("a.sh")), 0o644, "the agent's edit keeps the mode");
    chmod(&env.ws.join("a.sh"), 0o755); // the person makes it executable

    let (_, applied) = rollback(&env, &["--turn", "0", "--apply"]);
    let (kind, _) = outcome_of(target(&applied, "a.sh"));
    let mode = mode_of(&env.ws.join("a.sh"));
    assert!(
        mode == 0o755 || (kind == "conflict" && env.read("a.sh").as_deref() == Some(&b"two\n"[..])),
        "the person's mode 0755 was replaced by {mode:04o} without a conflict: {applied:#}"
    );
}

// ---------------------------------------------------------------------------------------
// 2. Undo
// ---------------------------------------------------------------------------------------

#[test]
fn rolling_back_the_rollback_checkpoint_restores_the_tree_byte_for_byte() {
    let env = Env::new();
    env.write("e.txt", "edit me\n");
    chmod(&env.ws.join("e.txt"), 0o640);
    env.write("d.bin", b"\x00\x01\x02 deleted by the agent \xff");
    chmod(&env.ws.join("d.bin"), 0o600);
    env.write("p.txt", "one\n");
    agent_edit(&env, "e.txt", "edit me", "edited");
    agent_create(&env, "c/new/file.txt", b"created\n");
    agent_delete(&env, "d.bin");
    agent_edit(&env, "p.txt", "one", "two");
    env.write("p.txt", "the person's\n");
    let before_rollback = tree(&env.ws);

    let applied = rollback_exit(&env, &["--turn", "0", "--apply"], PARTIAL);
    assert_eq!(applied["appliedPaths"], json!(["c/new/file.txt", "d.bin", "e.txt"]), "{applied:#}");
    let undo_id = str_at(&applied, "/rollbackCheckpointId").to_string();
    assert!(!env.ws.join("c").exists(), "the created file's directories are gone");
    let after_rollback = tree(&env.ws);

    let inspected = env.json(&["inspect", &undo_id]);
    assert_eq!(inspected["checkpoint"]["mutation"]["kind"], "rollback", "{inspected:#}");
    assert_eq!(inspected["checkpoint"]["coverageState"], "fully-protected", "{inspected:#}");
    assert_eq!(inspected["usable"], true, "{inspected:#}");

    // A turn's rollback does not select earlier rollbacks.
    let again = rollback_exit(&env, &["--turn", "0"], PARTIAL);
    assert!(!again["checkpointIds"].as_array().unwrap().contains(&json!(undo_id)), "{again:#}");

    let preview = rollback_exit(&env, &[&undo_id], FULL);
    assert_eq!(preview["checkpointIds"], json!([undo_id]), "{preview:#}");
    let undone = rollback_exit(&env, &[&undo_id, "--apply", "--plan", str_at(&preview, "/planId")], FULL);
    assert_eq!(undone["appliedPaths"], json!(["c/new/file.txt", "d.bin", "e.txt"]), "{undone:#}");
    assert_same_tree(&tree(&env.ws), &before_rollback, "after undoing the rollback");
    assert_ne!(tree(&env.ws), after_rollback);
    env.assert_verify_clean();
}

#[test]
fn undoing_a_rollback_that_recreated_parent_directories_removes_them_again() {
    // Case 1: the rollback restores a deleted file whose directories were removed since.
    let env = Env::new();
    env.write("deep/er/f.txt", "deleted by the agent\n");
    agent_delete(&env, "deep/er/f.txt");
    std::fs::remove_dir_all(env.ws.join("deep")).unwrap();
    let before_rollback = tree(&env.ws);
    let applied = rollback_exit(&env, &["--turn", "0", "--apply"], FULL);
    assert!(env.ws.join("deep/er/f.txt").exists());
    let id = str_at(&applied, "/rollbackCheckpointId").to_string();
    rollback_exit(&env, &[&id, "--apply"], FULL);
    let first = tree_diff(&tree(&env.ws), &before_rollback);

    // Case 2: undoing the undo of a rollback of a create in new directories.
    let env = Env::new();
    agent_create(&env, "c/new/file.txt", b"created\n");
    let applied = rollback_exit(&env, &["--turn", "0", "--apply"], FULL);
    let after_rollback = tree(&env.ws);
    let undo = rollback_exit(&env, &[str_at(&applied, "/rollbackCheckpointId"), "--apply"], FULL);
    assert!(env.ws.join("c/new/file.txt").exists());
    rollback_exit(&env, &[str_at(&undo, "/rollbackCheckpointId"), "--apply"], FULL);
    let second = tree_diff(&tree(&env.ws), &after_rollback);

    assert!(
        first.is_empty() && second.is_empty(),
        "undo left the tree different:\ncase 1 (restored into removed directories):\n{}\ncase 2 (undo of an undo):\n{}",
        first.join("\n"),
        second.join("\n")
    );
}

// ---------------------------------------------------------------------------------------
// 3. Preview and apply agree
// ---------------------------------------------------------------------------------------

#[test]
fn preview_and_apply_agree_on_every_target_of_an_unchanged_workspace() {
    let env = Env::new();
    for f in ["edit.txt", "noop.txt", "conflict.txt", "renamed.txt", "deleted.txt", "gone.txt"] {
        env.write(f, "one\n");
    }
    env.write("recreated.txt", "one\n");
    agent_edit(&env, "edit.txt", "one", "two");
    agent_edit(&env, "noop.txt", "one", "two");
    agent_edit(&env, "conflict.txt", "one", "two");
    agent_edit(&env, "renamed.txt", "one", "two");
    agent_edit(&env, "deleted.txt", "one", "two");
    agent_delete(&env, "gone.txt");
    agent_edit(&env, "recreated.txt", "one", "two");
    agent_create(&env, "new/dir/created.txt", b"new\n");
    agent_write(&env, "twice.txt", b"first\n");
    agent_write(&env, "twice.txt", b"second\n");
    env.write("noop.txt", "one\n"); // the person put it back: already as before
    env.write("conflict.txt", "person\n");
    std::fs::rename(env.ws.join("renamed.txt"), env.ws.join("renamed-by-person.txt")).unwrap();
    std::fs::remove_file(env.ws.join("deleted.txt")).unwrap();
    replace_with_new_inode(&env, "recreated.txt", b"another\n");

    let (preview_exit, preview) = rollback(&env, &["--turn", "0"]);
    let plan = str_at(&preview, "/planId").to_string();
    let (apply_exit, applied) = rollback(&env, &["--turn", "0", "--apply", "--plan", &plan]);
    assert_eq!((preview_exit, apply_exit), (PARTIAL, PARTIAL), "preview {preview:#}\napply {applied:#}");
    assert_eq!(applied["planId"], preview["planId"]);
    assert_eq!(applied["resultType"], preview["resultType"]);
    assert_eq!(applied["counts"], preview["counts"]);
    let (p, a) = (preview["targets"].as_array().unwrap(), applied["targets"].as_array().unwrap());
    assert_eq!(p.len(), 10, "{preview:#}");
    assert_eq!(p.len(), a.len(), "same targets:\npreview {preview:#}\napply {applied:#}");
    for (p, a) in p.iter().zip(a) {
        assert_eq!(p, a, "preview and apply disagree on a target");
    }
    // And the outcomes are the ones the disk calls for.
    assert_outcome(&preview, "edit.txt", "applied-eligible", "");
    assert_eq!(target(&preview, "noop.txt")["outcome"]["noOp"], true);
    assert_outcome(&preview, "conflict.txt", "conflict", "content-conflict");
    assert_outcome(&preview, "renamed.txt", "mismatch", "identity-changed");
    assert_outcome(&preview, "deleted.txt", "conflict", "target-deleted");
    assert_outcome(&preview, "recreated.txt", "conflict", "target-recreated");
    assert_outcome(&preview, "gone.txt", "applied-eligible", "");
    assert_outcome(&preview, "new/dir/created.txt", "applied-eligible", "");
    assert_eq!(targets_for(&preview, "twice.txt").len(), 2);
    assert_eq!(
        applied["appliedPaths"],
        json!(["edit.txt", "gone.txt", "new/dir/created.txt", "twice.txt"]),
        "{applied:#}"
    );
}

// ---------------------------------------------------------------------------------------
// 4. Races
// ---------------------------------------------------------------------------------------

#[test]
fn a_file_changed_between_preview_and_apply_refuses_the_plan_and_then_conflicts() {
    let env = Env::new();
    env.write("a.txt", "one\n");
    env.write("b.txt", "one\n");
    agent_edit(&env, "a.txt", "one", "two");
    agent_edit(&env, "b.txt", "one", "two");
    let preview = rollback_exit(&env, &["--turn", "0"], FULL);
    let plan = str_at(&preview, "/planId").to_string();

    env.write("a.txt", "the person, after the preview\n");
    let before = tree(&env.ws);
    let records = env.all_checkpoints().len();
    let refused = env.fail(&["rollback", "--turn", "0", "--apply", "--plan", &plan], None);
    assert_eq!((refused.exit, refused.code.as_str()), (BLOCKED, "conflict"), "{refused:?}");
    assert_eq!(refused.details["expectedPlanId"], plan.as_str(), "{refused:?}");
    assert_ne!(refused.details["currentPlanId"], plan.as_str(), "{refused:?}");
    assert_same_tree(&tree(&env.ws), &before, "a refused plan changes nothing");
    assert_eq!(env.all_checkpoints().len(), records, "a refused plan records nothing");

    // Without --plan the apply re-analyses: the changed file is a conflict, left alone.
    let applied = rollback_exit(&env, &["--turn", "0", "--apply"], PARTIAL);
    assert_outcome(&applied, "a.txt", "conflict", "content-conflict");
    assert_eq!(applied["appliedPaths"], json!(["b.txt"]), "{applied:#}");
    assert_eq!(env.read("a.txt").as_deref(), Some(&b"the person, after the preview\n"[..]));
    assert_eq!(env.read("b.txt").as_deref(), Some(&b"one\n"[..]));
}

#[test]
fn files_changed_between_analysis_and_write_are_conflicts_left_as_the_person_left_them() {
    let env = Env::new();
    env.write("a.txt", "a one\n");
    env.write("b.txt", "b one\n");
    env.write("d.txt", "deleted by the agent\n");
    agent_edit(&env, "a.txt", "one", "two");
    agent_edit(&env, "b.txt", "one", "two");
    agent_create(&env, "c.txt", b"created by the agent\n");
    agent_delete(&env, "d.txt");
    rollback_exit(&env, &["--turn", "0"], FULL);

    // Paused after the analysis and the rollback's checkpoint, before the first write.
    let paused = Paused::spawn(&env, &["rollback", "--turn", "0", "--apply"], "rollback-before-swap");
    env.write("a.txt", "a: the person, mid-rollback\n"); // edited in place
    env.write("c.txt", "c: the person, mid-rollback\n"); // the file the rollback would delete
    env.write("d.txt", "d: the person, mid-rollback\n"); // where the rollback would recreate
    let (exit, applied) = paused.release();

    assert_eq!(exit, PARTIAL, "{applied:#}");
    assert_eq!(applied["resultType"], "partial", "{applied:#}");
    assert_eq!(applied["appliedPaths"], json!(["b.txt"]), "{applied:#}");
    for path in ["a.txt", "c.txt", "d.txt"] {
        assert_outcome(&applied, path, "conflict", "content-conflict");
    }
    assert_outcome(&applied, "b.txt", "applied-eligible", "");
    assert_eq!(env.read("a.txt").as_deref(), Some(&b"a: the person, mid-rollback\n"[..]));
    assert_eq!(env.read("b.txt").as_deref(), Some(&b"b one\n"[..]));
    assert_eq!(env.read("c.txt").as_deref(), Some(&b"c: the person, mid-rollback\n"[..]));
    assert_eq!(env.read("d.txt").as_deref(), Some(&b"d: the person, mid-rollback\n"[..]));
    let names: Vec<String> =
        std::fs::read_dir(&env.ws).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert!(names.iter().all(|n| !n.contains(".turnback-")), "no temporary files left: {names:?}");
    env.assert_verify_clean();
}

#[test]
fn a_parent_directory_swapped_for_a_symlink_mid_rollback_is_a_conflict_and_the_rest_is_applied() {
    let env = Env::new();
    let outside = env.root.join("outside-dir");
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(outside.join("b.txt"), "b two\n").unwrap(); // the agent's bytes
    env.write("a.txt", "a one\n");
    env.write("d/b.txt", "b one\n");
    env.write("z.txt", "z one\n");
    agent_edit(&env, "a.txt", "one", "two");
    agent_edit(&env, "d/b.txt", "one", "two");
    agent_edit(&env, "z.txt", "one", "two");

    let paused = Paused::spawn(&env, &["rollback", "--turn", "0", "--apply"], "rollback-before-swap");
    std::fs::rename(env.ws.join("d"), env.ws.join("d-real")).unwrap();
    symlink(&outside, env.ws.join("d")).unwrap();
    let (exit, applied) = paused.release();

    // Whatever else happens, nothing is written through the symlink.
    assert_eq!(std::fs::read(outside.join("b.txt")).unwrap(), b"b two\n", "written through the symlink");
    assert_eq!(exit, PARTIAL, "the other targets are still applied: {applied:#}");
    assert_eq!(applied["appliedPaths"], json!(["a.txt", "z.txt"]), "{applied:#}");
    assert_eq!(outcome_of(target(&applied, "d/b.txt")).0, "conflict", "{applied:#}");
    assert!(applied["rollbackCheckpointId"].is_string(), "{applied:#}");
    assert_eq!(env.read("z.txt").as_deref(), Some(&b"z one\n"[..]));
}

#[test]
fn a_parent_directory_deleted_mid_rollback_is_not_recreated() {
    let env = Env::new();
    env.write("a.txt", "a one\n");
    env.write("d/b.txt", "b one\n");
    agent_edit(&env, "a.txt", "one", "two");
    agent_edit(&env, "d/b.txt", "one", "two");

    let paused = Paused::spawn(&env, &["rollback", "--turn", "0", "--apply"], "rollback-before-swap");
    std::fs::remove_dir_all(env.ws.join("d")).unwrap();
    let (exit, applied) = paused.release();

    assert_eq!(exit, PARTIAL, "{applied:#}");
    assert_eq!(applied["appliedPaths"], json!(["a.txt"]), "{applied:#}");
    assert_outcome(&applied, "d/b.txt", "conflict", "content-conflict");
    assert!(!env.ws.join("d").exists(), "the directory the person deleted was recreated by the rollback");
}

// ---------------------------------------------------------------------------------------
// 5. Safe choices
// ---------------------------------------------------------------------------------------

#[test]
fn choose_skip_leaves_the_file_and_does_not_change_the_plan() {
    let env = Env::new();
    env.write("a.txt", "one\n");
    env.write("b.txt", "one\n");
    agent_edit(&env, "a.txt", "one", "two");
    agent_edit(&env, "b.txt", "one", "two");
    env.write("a.txt", "person\n");
    let preview = rollback_exit(&env, &["--turn", "0"], PARTIAL);
    let plan = str_at(&preview, "/planId").to_string();

    let chosen = rollback_exit(&env, &["--turn", "0", "--choose", "a.txt=skip"], FULL);
    assert_eq!(chosen["planId"], plan.as_str(), "a choice does not change the plan id: {chosen:#}");
    assert_outcome(&chosen, "a.txt", "skipped", "");

    let applied = rollback_exit(&env, &["--turn", "0", "--apply", "--plan", &plan, "--choose", "a.txt=skip"], FULL);
    assert_outcome(&applied, "a.txt", "skipped", "");
    assert_eq!(applied["appliedPaths"], json!(["b.txt"]), "{applied:#}");
    assert_eq!(applied["residualConflicts"], json!([]), "{applied:#}");
    assert_eq!(applied["choiceFiles"], json!([]), "{applied:#}");
    assert_eq!(env.read("a.txt").as_deref(), Some(&b"person\n"[..]));
    assert_eq!(env.read("b.txt").as_deref(), Some(&b"one\n"[..]));

    // Skip works on an eligible target too: it is left as the agent left it.
    let env = Env::new();
    env.write("e.txt", "one\n");
    agent_edit(&env, "e.txt", "one", "two");
    let applied = rollback_exit(&env, &["--turn", "0", "--apply", "--choose", "e.txt=skip"], FULL);
    assert_outcome(&applied, "e.txt", "skipped", "");
    assert_eq!(env.read("e.txt").as_deref(), Some(&b"two\n"[..]));
}

#[test]
fn choose_patch_writes_a_sanitized_owner_only_unified_diff_to_the_pre_image() {
    let env = Env::new();
    env.write("conf.ini", "name = demo\nAPI_KEY=abcdef123456\nport = 80\n");
    agent_write(&env, "conf.ini", b"name = demo\nAPI_KEY=zzzagentkey999\nport = 8080\n");
    env.write("conf.ini", "name = demo-person\nAPI_KEY=zzzagentkey999\nport = 8080\n");
    let person = env.read("conf.ini").unwrap();

    let applied = rollback_exit(&env, &["--turn", "0", "--apply", "--choose", "conf.ini=patch"], BLOCKED);
    assert_outcome(&applied, "conf.ini", "conflict", "content-conflict");
    assert_eq!(
        applied["choiceFiles"],
        json!([{ "path": "conf.ini", "choice": "patch", "file": "conf.ini.turnback.patch", "hasConflictMarkers": false }]),
        "{applied:#}"
    );
    assert_eq!(env.read("conf.ini"), Some(person), "the file itself is untouched");
    let patch_path = env.ws.join("conf.ini.turnback.patch");
    assert_eq!(mode_of(&patch_path), 0o600, "the patch is owner-only");
    let patch = String::from_utf8(std::fs::read(&patch_path).unwrap()).unwrap();
    assert!(patch.starts_with("--- a/conf.ini\n+++ b/conf.ini\n"), "{patch}");
    assert!(patch.contains("\n@@ "), "a unified diff hunk: {patch}");
    for line in ["-name = demo-person", "+name = demo", "-port = 8080", "+port = 80"] {
        assert!(patch.lines().any(|l| l == line), "missing {line:?} in\n{patch}");
    }
    assert!(!patch.contains("abcdef123456") && !patch.contains("zzzagentkey999"), "a secret leaked:\n{patch}");
    assert!(patch.contains("redacted"), "secret lines are marked as redacted:\n{patch}");
    assert!(!env.store.join("conf.ini.turnback.patch").exists());
}

#[test]
fn choose_patch_for_a_binary_file_describes_it_without_its_content() {
    let env = Env::new();
    env.write("img.bin", b"\x89PNG\x00\x00ORIGINAL-SECRET-PIXELS\x00");
    agent_write(&env, "img.bin", b"\x89PNG\x00\x00AGENT-PIXELS\x00");
    env.write("img.bin", b"\x89PNG\x00\x00PERSON-SECRET-PIXELS\x00");

    let applied = rollback_exit(&env, &["--turn", "0", "--apply", "--choose", "img.bin=patch"], BLOCKED);
    assert_eq!(applied["choiceFiles"][0]["file"], "img.bin.turnback.patch", "{applied:#}");
    let patch = std::fs::read(env.ws.join("img.bin.turnback.patch")).unwrap();
    let text = String::from_utf8_lossy(&patch);
    assert!(text.contains("binary"), "the patch describes a binary file: {text}");
    for secret in ["ORIGINAL-SECRET", "PERSON-SECRET", "AGENT-PIXELS"] {
        assert!(!text.contains(secret), "binary content {secret} included: {text}");
    }
    assert!(!patch.contains(&0), "no binary bytes in the patch");
}

#[test]
fn an_impossible_choice_refuses_the_rollback_before_any_side_file_or_write() {
    let env = Env::new();
    env.write("a.txt", "original\n");
    env.write("conf.ini", "port = 80\n");
    env.write("img.bin", b"\x89PNG\x00\x00ORIGINAL\x00");
    agent_write(&env, "a.txt", b"agent\n");
    agent_write(&env, "conf.ini", b"port = 8080\n");
    agent_write(&env, "img.bin", b"\x89PNG\x00\x00AGENT\x00");
    env.write("conf.ini", "port = 9090\n");
    env.write("img.bin", b"\x89PNG\x00\x00PERSON\x00");
    let before = env.json(&["checkpoints", "--all"])["checkpoints"].as_array().unwrap().len();

    // conf.ini's patch is possible and comes first; img.bin cannot be merged.
    let args = ["rollback", "--turn", "0", "--apply", "--choose", "conf.ini=patch", "--choose", "img.bin=resolve"];
    let refused = env.fail(&args, None);
    assert_eq!(refused.code, "invalid-argument", "{refused:?}");
    assert!(refused.message.contains("binary"), "{refused:?}");
    assert!(!env.ws.join("conf.ini.turnback.patch").exists(), "no side file before the choices all hold");
    assert!(!env.ws.join("img.bin.turnback-merge").exists());
    assert_eq!(env.read("a.txt").as_deref(), Some(&b"agent\n"[..]), "nothing taken back");
    let after = env.json(&["checkpoints", "--all"])["checkpoints"].as_array().unwrap().len();
    assert_eq!(after, before, "no undo checkpoint recorded");
}

#[test]
fn choose_resolve_writes_a_merge_and_resolve_applies_the_edited_version_undoably() {
    let env = Env::new();
    env.write("m.txt", "alpha\nbeta\ngamma\n");
    agent_edit(&env, "m.txt", "alpha", "alpha-agent");
    env.write("m.txt", "alpha-person\nbeta\ngamma\n");
    let person = env.read("m.txt").unwrap();

    let applied = rollback_exit(&env, &["--turn", "0", "--apply", "--choose", "m.txt=resolve"], BLOCKED);
    assert_eq!(
        applied["choiceFiles"],
        json!([{ "path": "m.txt", "choice": "resolve", "file": "m.txt.turnback-merge", "hasConflictMarkers": true }]),
        "{applied:#}"
    );
    assert_eq!(env.read("m.txt").as_ref(), Some(&person));
    let merge_path = env.ws.join("m.txt.turnback-merge");
    assert_eq!(mode_of(&merge_path), 0o600);
    let merge = String::from_utf8(std::fs::read(&merge_path).unwrap()).unwrap();
    assert!(merge.contains("<<<<<<<") && merge.contains(">>>>>>>"), "{merge}");
    assert!(merge.contains("alpha-person") && merge.contains("alpha\n"), "both sides are in the merge: {merge}");

    // Refused while the markers remain.
    let refused = env.fail(&["rollback", "resolve", "m.txt"], None);
    assert_eq!((refused.exit, refused.code.as_str()), (2, "invalid-argument"), "{refused:?}");
    assert!(refused.message.contains("conflict markers"), "{refused:?}");
    assert_eq!(env.read("m.txt").as_ref(), Some(&person));

    // The person edits the merge and resolves.
    std::fs::write(&merge_path, "alpha-resolved\nbeta\ngamma\n").unwrap();
    let resolved = env.json(&["rollback", "resolve", "m.txt"]);
    assert_eq!(resolved["path"], "m.txt", "{resolved:#}");
    assert_eq!(env.read("m.txt").as_deref(), Some(&b"alpha-resolved\nbeta\ngamma\n"[..]));
    assert!(!merge_path.exists(), "the merge file is removed once applied");
    let again = env.fail(&["rollback", "resolve", "m.txt"], None);
    assert_eq!(again.code, "not-found", "no pending resolution any more: {again:?}");

    // The resolution is undoable: its checkpoint rolled back gives the person's version.
    let id = str_at(&resolved, "/checkpointId");
    let undone = rollback_exit(&env, &[id, "--apply"], FULL);
    assert_eq!(undone["appliedPaths"], json!(["m.txt"]), "{undone:#}");
    assert_eq!(env.read("m.txt").as_ref(), Some(&person));
}

#[test]
fn resolve_refuses_when_the_file_changed_after_the_merge_was_written() {
    let env = Env::new();
    env.write("m.txt", "alpha\nbeta\n");
    agent_edit(&env, "m.txt", "alpha", "alpha-agent");
    env.write("m.txt", "alpha-person\nbeta\n");
    rollback_exit(&env, &["--turn", "0", "--apply", "--choose", "m.txt=resolve"], BLOCKED);
    std::fs::write(env.ws.join("m.txt.turnback-merge"), "alpha-resolved\nbeta\n").unwrap();
    env.write("m.txt", "alpha-person, edited again\nbeta\n");

    let refused = env.fail(&["rollback", "resolve", "m.txt"], None);
    assert_eq!((refused.exit, refused.code.as_str()), (BLOCKED, "conflict"), "{refused:?}");
    assert_eq!(env.read("m.txt").as_deref(), Some(&b"alpha-person, edited again\nbeta\n"[..]));
}

#[test]
fn choose_resolve_without_overlap_merges_both_sides_without_markers() {
    let env = Env::new();
    env.write("m.txt", "alpha\nbeta\ngamma\n");
    agent_edit(&env, "m.txt", "gamma", "gamma-agent");
    env.write("m.txt", "alpha-person\nbeta\ngamma-agent\n");

    let applied = rollback_exit(&env, &["--turn", "0", "--apply", "--choose", "m.txt=resolve"], BLOCKED);
    assert_eq!(applied["choiceFiles"][0]["hasConflictMarkers"], false, "{applied:#}");
    let merge = std::fs::read(env.ws.join("m.txt.turnback-merge")).unwrap();
    assert_eq!(merge, b"alpha-person\nbeta\ngamma\n", "the person's line kept, the agent's taken back");
    env.json(&["rollback", "resolve", "m.txt"]);
    assert_eq!(env.read("m.txt").as_deref(), Some(&b"alpha-person\nbeta\ngamma\n"[..]));
}

#[test]
fn a_choice_that_cannot_be_honoured_fails_before_anything_is_written() {
    let env = Env::new();
    env.write("img.bin", b"\x89PNG\x00original\x00");
    env.write("z.txt", "z one\n");
    agent_write(&env, "img.bin", b"\x89PNG\x00agent\x00");
    agent_edit(&env, "z.txt", "one", "two");
    env.write("img.bin", b"\x89PNG\x00person\x00");
    let before = tree(&env.ws);
    let records = rollback_records(&env);

    let (exit, doc) = rollback(&env, &["--turn", "0", "--apply", "--choose", "img.bin=resolve"]);
    if doc.get("error").is_some() {
        // Refusing is fine, but then nothing may have changed.
        assert_same_tree(&tree(&env.ws), &before, &format!("after a refused rollback (exit {exit}): {doc:#}"));
        assert_eq!(rollback_records(&env), records, "a refused rollback left a rollback checkpoint: {doc:#}");
    } else {
        // Or it applies, and reports what it did and the checkpoint to undo it.
        assert!(doc["rollbackCheckpointId"].is_string(), "{doc:#}");
        assert_eq!(doc["appliedPaths"], json!(["z.txt"]), "{doc:#}");
    }
}

// ---------------------------------------------------------------------------------------
// 6. Several steps on one path
// ---------------------------------------------------------------------------------------

#[test]
fn two_agent_edits_in_a_turn_are_taken_back_to_the_first_version() {
    let env = Env::new();
    env.write("s.txt", "version A\n");
    let first = agent_edit(&env, "s.txt", "A", "B");
    let second = agent_edit(&env, "s.txt", "B", "C");

    let preview = rollback_exit(&env, &["--turn", "0"], FULL);
    let steps = targets_for(&preview, "s.txt");
    assert_eq!(steps.len(), 2, "{preview:#}");
    assert_eq!(
        (steps[0]["checkpointId"].as_str(), steps[1]["checkpointId"].as_str()),
        (Some(second.as_str()), Some(first.as_str())),
        "newest first"
    );
    for s in &steps {
        assert_eq!(s["outcome"]["kind"], "applied-eligible", "{s:#}");
    }
    // The older step is judged against what the newer one leaves.
    assert_eq!(steps[1]["currentState"]["digest"], steps[0]["preImage"]["digest"], "{preview:#}");

    let applied = rollback_exit(&env, &["--turn", "0", "--apply"], FULL);
    assert_eq!(applied["appliedPaths"], json!(["s.txt"]), "one write for the path: {applied:#}");
    assert_eq!(env.read("s.txt").as_deref(), Some(&b"version A\n"[..]));
}

#[test]
fn a_person_edit_between_two_agent_edits_is_restored_never_the_agents_original() {
    let env = Env::new();
    env.write("s.txt", "version A\n");
    agent_edit(&env, "s.txt", "A", "B");
    env.write("s.txt", "version P\n");
    agent_edit(&env, "s.txt", "P", "Q");

    let preview = rollback_exit(&env, &["--turn", "0"], PARTIAL);
    let steps = targets_for(&preview, "s.txt");
    assert_eq!(steps.len(), 2, "{preview:#}");
    assert_eq!(outcome_of(steps[0]), ("applied-eligible".into(), String::new()), "{preview:#}");
    assert_eq!(outcome_of(steps[1]), ("conflict".into(), "content-conflict".into()), "{preview:#}");

    let applied = rollback_exit(&env, &["--turn", "0", "--apply"], PARTIAL);
    assert_eq!(applied["appliedPaths"], json!(["s.txt"]), "{applied:#}");
    assert_eq!(env.read("s.txt").as_deref(), Some(&b"version P\n"[..]), "the person's version, never A");
}

#[test]
fn create_then_delete_and_delete_then_create_in_one_turn() {
    let env = Env::new();
    env.write("d.txt", "the original\n");
    agent_create(&env, "n.txt", b"short-lived\n");
    agent_delete(&env, "n.txt");
    agent_delete(&env, "d.txt");
    agent_create(&env, "d.txt", b"the agent's replacement\n");
    let before_agent_d = b"the original\n";

    let preview = rollback_exit(&env, &["--turn", "0"], FULL);
    assert_eq!(targets_for(&preview, "n.txt").len(), 2, "{preview:#}");
    assert_eq!(targets_for(&preview, "d.txt").len(), 2, "{preview:#}");
    let applied = rollback_exit(&env, &["--turn", "0", "--apply"], FULL);
    assert_eq!(applied["appliedPaths"], json!(["d.txt"]), "n.txt needs no write: {applied:#}");
    assert_eq!(env.read("n.txt"), None);
    assert_eq!(env.read("d.txt").as_deref(), Some(&before_agent_d[..]));
}

// ---------------------------------------------------------------------------------------
// 7. Selection
// ---------------------------------------------------------------------------------------

#[test]
fn since_turn_and_explicit_ids_select_and_unknown_ids_are_not_found() {
    let env = Env::new();
    env.write("a.txt", "a1\n");
    env.write("b.txt", "b1\n");
    let a = agent_edit(&env, "a.txt", "a1", "a2");
    let b = agent_edit(&env, "b.txt", "b1", "b2");

    let since = rollback_exit(&env, &["--since-turn", "0"], FULL);
    assert_eq!(since["checkpointIds"], json!([b, a]), "{since:#}");
    let later = rollback_exit(&env, &["--since-turn", "1"], FULL);
    assert_eq!(later["targets"], json!([]), "nothing from round 1 on: {later:#}");
    let other_turn = rollback_exit(&env, &["--turn", "7"], FULL);
    assert_eq!(other_turn["checkpointIds"], json!([]), "{other_turn:#}");

    // One explicit id: only that checkpoint is taken back.
    let one = rollback_exit(&env, &[&a, "--apply"], FULL);
    assert_eq!(one["appliedPaths"], json!(["a.txt"]), "{one:#}");
    assert_eq!(env.read("a.txt").as_deref(), Some(&b"a1\n"[..]));
    assert_eq!(env.read("b.txt").as_deref(), Some(&b"b2\n"[..]));

    // Several explicit ids, in any order: newest first.
    let both = rollback_exit(&env, &[&a, &b], FULL);
    assert_eq!(both["checkpointIds"], json!([b, a]), "{both:#}");

    let applied = rollback_exit(&env, &["--since-turn", "0", "--apply"], FULL);
    assert_eq!(applied["appliedPaths"], json!(["b.txt"]), "a.txt was already back: {applied:#}");
    assert_eq!(env.read("b.txt").as_deref(), Some(&b"b1\n"[..]));

    let missing = env.fail(&["rollback", "01890a5d-ac96-774b-bcce-b302099a8057"], None);
    assert_eq!((missing.exit, missing.code.as_str()), (1, "not-found"), "{missing:?}");
    let garbage = env.fail(&["rollback", "no-such-checkpoint", "--apply"], None);
    assert_eq!((garbage.exit, garbage.code.as_str()), (1, "not-found"), "{garbage:?}");
    assert_eq!(env.read("b.txt").as_deref(), Some(&b"b1\n"[..]));
}
