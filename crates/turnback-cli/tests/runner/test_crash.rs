//! Crash consistency (DESIGN §2.4): a real `turnback` process is killed with SIGKILL at
//! every step of a mutation, and the next command must find the workspace file wholly old
//! or wholly new, the store clean, and any incomplete checkpoint `unreachable` +
//! `recovery-locked` and hidden from the default listing.

use serde_json::Value;

use crate::common::{Env, files_under, str_at};

const OLD: &[u8] = b"first line\nthe OLD value\nlast line\n";
const NEW: &[u8] = b"first line\nthe NEW value\nlast line\n";
const FILE: &str = "f.txt";
const NEW_FILE: &str = "made/by/write/n.txt";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    /// `fs edit f.txt --old OLD --new NEW`.
    Edit,
    /// `fs delete f.txt`.
    Delete,
    /// `fs write made/by/write/n.txt` (a new file in new directories).
    WriteNew,
}

/// What the workspace must hold after the crash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Disk {
    Old,
    New,
}

/// What the killed operation must have left in the store after reconcile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Left {
    /// Killed before staging: no record at all.
    NoRecord,
    /// Staged but not dispatched: `unreachable`, commitState `abandoned`.
    Abandoned,
    /// Dispatched, not committed: `unreachable`, commitState `unknown-outcome`.
    UnknownOutcome,
    /// Committed before the kill: a normal checkpoint.
    Committed,
}

impl Op {
    fn path(self) -> &'static str {
        match self {
            Op::Edit | Op::Delete => FILE,
            Op::WriteNew => NEW_FILE,
        }
    }

    fn args(self) -> Vec<&'static str> {
        match self {
            Op::Edit => vec!["fs", "edit", FILE, "--old", "OLD", "--new", "NEW"],
            Op::Delete => vec!["fs", "delete", FILE],
            Op::WriteNew => vec!["fs", "write", NEW_FILE],
        }
    }

    fn stdin(self) -> Option<&'static [u8]> {
        match self {
            Op::WriteNew => Some(NEW),
            Op::Edit | Op::Delete => None,
        }
    }

    fn before(self) -> Option<&'static [u8]> {
        match self {
            Op::Edit | Op::Delete => Some(OLD),
            Op::WriteNew => None,
        }
    }

    fn after(self) -> Option<&'static [u8]> {
        match self {
            Op::Edit | Op::WriteNew => Some(NEW),
            Op::Delete => None,
        }
    }
}

/// Temporary files of interrupted writes anywhere in the workspace.
fn temp_files(env: &Env) -> Vec<String> {
    files_under(&env.ws)
        .iter()
        .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .filter(|n| n.contains(".turnback-") && n.ends_with(".tmp"))
        .collect()
}

/// A store with one committed checkpoint (the file `f.txt` holding OLD) and a session.
fn prepared() -> (Env, String) {
    let env = Env::new();
    let done = env.json_with(&["fs", "write", FILE], Some(OLD));
    (env, str_at(&done, "/checkpointId").to_string())
}

fn crash_case(op: Op, failpoint: &str, disk: Disk, left: Left) {
    let (env, setup_id) = prepared();
    env.kill_at_failpoint(&op.args(), op.stdin(), failpoint);

    if failpoint == "write-temp-synced" {
        // The kill really interrupted a write: its temporary file is still there.
        assert_eq!(temp_files(&env).len(), 1, "a temporary file before reconcile at {failpoint}");
    }

    // The next command runs reconcile first.
    let all = env.all_checkpoints();
    let expected = match disk {
        Disk::Old => op.before(),
        Disk::New => op.after(),
    };
    assert_eq!(
        env.read(op.path()).as_deref(),
        expected,
        "{op:?} killed at {failpoint}: the file must be wholly {disk:?}"
    );
    assert_eq!(temp_files(&env), Vec::<String>::new(), "temporary files left after reconcile at {failpoint}");

    for r in &all {
        if r["stageState"] != "committed" {
            assert_eq!(r["stageState"], "unreachable", "an incomplete record after reconcile: {r:#}");
            assert_eq!(r["integrityState"], "recovery-locked", "an incomplete record after reconcile: {r:#}");
        }
    }
    let killed: Vec<&Value> = all.iter().filter(|r| r["checkpointId"] != setup_id.as_str()).collect();
    let listed: Vec<String> = env.checkpoints().iter().map(|r| str_at(r, "/checkpointId").to_string()).collect();
    assert!(listed.contains(&setup_id), "the earlier checkpoint stays listed: {listed:?}");

    match left {
        Left::NoRecord => assert!(killed.is_empty(), "killed at {failpoint} before staging: {killed:#?}"),
        Left::Committed => {
            assert_eq!(killed.len(), 1, "one checkpoint for the killed operation: {all:#?}");
            let r = killed[0];
            assert_eq!(r["stageState"], "committed", "{r:#}");
            assert_eq!(r["integrityState"], "verified", "{r:#}");
            assert_eq!(r["mutation"]["commitState"], "succeeded", "{r:#}");
            assert!(listed.contains(&str_at(r, "/checkpointId").to_string()), "a committed checkpoint is listed");
        }
        Left::Abandoned | Left::UnknownOutcome => {
            assert_eq!(killed.len(), 1, "one record for the killed operation: {all:#?}");
            let r = killed[0];
            let id = str_at(r, "/checkpointId");
            let want = if left == Left::Abandoned { "abandoned" } else { "unknown-outcome" };
            assert_eq!(r["stageState"], "unreachable", "{r:#}");
            assert_eq!(r["integrityState"], "recovery-locked", "{r:#}");
            assert_eq!(r["mutation"]["commitState"], want, "killed at {failpoint}: {r:#}");
            assert!(!listed.contains(&id.to_string()), "an incomplete record is never listed by default");

            let inspected = env.json(&["inspect", id]);
            assert_eq!(inspected["usable"], false, "{inspected:#}");
            assert_eq!(inspected["problem"]["code"], "recovery-locked", "{inspected:#}");

            let opid = str_at(r, "/mutation/operationId");
            let refused = env.fail(&["commit", opid], None);
            assert_eq!((refused.exit, refused.code.as_str()), (1, "recovery-locked"), "{refused:?}");
            assert_eq!(env.read(op.path()).as_deref(), expected, "a refused commit changes nothing");
            let again = env.all_checkpoints();
            let still = again.iter().find(|c| c["checkpointId"] == id).expect("record still there");
            assert_eq!(still["stageState"], "unreachable", "a refused commit leaves the record alone: {still:#}");
        }
    }

    let report = env.assert_verify_clean();
    let locked = u64::from(matches!(left, Left::Abandoned | Left::UnknownOutcome));
    assert_eq!(report["counts"]["recoveryLocked"], locked, "{report:#}");
    assert_eq!(report["counts"]["pending"], 0, "{report:#}");

    // Reconcile is idempotent: nothing is left for a second run.
    let second = env.json(&["reconcile"]);
    assert_eq!(second["reconciled"], serde_json::json!([]), "{second:#}");
    assert_eq!(second["tempFilesRemoved"], 0, "{second:#}");
}

macro_rules! crash_tests {
    ($($name:ident: $op:ident at $fp:literal => $disk:ident, $left:ident;)*) => {
        $(
            #[test]
            fn $name() {
                crash_case(Op::$op, $fp, Disk::$disk, Left::$left);
            }
        )*
    };
}

crash_tests! {
    edit_killed_at_resolved_leaves_old_content_and_no_record: Edit at "resolved" => Old, NoRecord;
    edit_killed_at_preflighted_leaves_old_content_and_no_record: Edit at "preflighted" => Old, NoRecord;
    edit_killed_at_staged_leaves_old_content_and_abandoned_record: Edit at "staged" => Old, Abandoned;
    edit_killed_at_dispatched_leaves_old_content_and_unknown_outcome: Edit at "dispatched" => Old, UnknownOutcome;
    edit_killed_at_write_temp_synced_leaves_old_content_and_no_temp_file: Edit at "write-temp-synced" => Old, UnknownOutcome;
    edit_killed_at_write_renamed_leaves_new_content_and_unknown_outcome: Edit at "write-renamed" => New, UnknownOutcome;
    edit_killed_at_mutated_leaves_new_content_and_unknown_outcome: Edit at "mutated" => New, UnknownOutcome;
    edit_killed_at_committed_leaves_new_content_and_committed_checkpoint: Edit at "committed" => New, Committed;

    delete_killed_at_resolved_leaves_file_and_no_record: Delete at "resolved" => Old, NoRecord;
    delete_killed_at_preflighted_leaves_file_and_no_record: Delete at "preflighted" => Old, NoRecord;
    delete_killed_at_staged_leaves_file_and_abandoned_record: Delete at "staged" => Old, Abandoned;
    delete_killed_at_dispatched_leaves_file_and_unknown_outcome: Delete at "dispatched" => Old, UnknownOutcome;
    delete_killed_at_remove_unlinked_leaves_no_file_and_unknown_outcome: Delete at "remove-unlinked" => New, UnknownOutcome;
    delete_killed_at_mutated_leaves_no_file_and_unknown_outcome: Delete at "mutated" => New, UnknownOutcome;
    delete_killed_at_committed_leaves_no_file_and_committed_checkpoint: Delete at "committed" => New, Committed;

    write_new_file_killed_at_staged_leaves_no_file: WriteNew at "staged" => Old, Abandoned;
    write_new_file_killed_at_dispatched_leaves_no_file: WriteNew at "dispatched" => Old, UnknownOutcome;
    write_new_file_killed_at_write_temp_synced_leaves_no_file_and_no_temp_file: WriteNew at "write-temp-synced" => Old, UnknownOutcome;
    write_new_file_killed_at_write_renamed_leaves_whole_new_file: WriteNew at "write-renamed" => New, UnknownOutcome;
    write_new_file_killed_at_committed_leaves_committed_checkpoint: WriteNew at "committed" => New, Committed;
}

#[test]
fn reconcile_leaves_a_running_operation_alone_until_its_process_dies() {
    let (env, setup_id) = prepared();
    let mut running = env.spawn_at_failpoint(&Op::Edit.args(), None, "dispatched");

    let report = env.json(&["reconcile"]);
    assert_eq!(report["reconciled"], serde_json::json!([]), "a live owner's stage is not reconciled: {report:#}");
    assert_eq!(report["inProgress"], 1, "{report:#}");
    let all = env.all_checkpoints();
    let live: Vec<&Value> = all.iter().filter(|r| r["checkpointId"] != setup_id.as_str()).collect();
    assert_eq!(live.len(), 1, "{all:#?}");
    assert_eq!(live[0]["stageState"], "staged", "{:#}", live[0]);
    assert_eq!(live[0]["integrityState"], "verified", "{:#}", live[0]);
    assert_eq!(env.checkpoints().len(), 1, "a stage in progress is not listed as a checkpoint");

    running.kill();
    let report = env.json(&["reconcile"]);
    let reconciled = report["reconciled"].as_array().expect("reconciled array");
    assert_eq!(reconciled.len(), 1, "{report:#}");
    assert_eq!(reconciled[0]["checkpointId"], live[0]["checkpointId"], "{report:#}");
    assert_eq!(reconciled[0]["commitState"], "unknown-outcome", "{report:#}");
    assert_eq!(env.read(FILE).as_deref(), Some(OLD));
}

#[test]
fn commit_refuses_an_operation_another_process_is_still_running() {
    let (env, setup_id) = prepared();
    let _running = env.spawn_at_failpoint(&Op::Edit.args(), None, "dispatched");
    let all = env.all_checkpoints();
    let live = all.iter().find(|r| r["checkpointId"] != setup_id.as_str()).expect("the running operation's record");
    let opid = str_at(live, "/mutation/operationId");

    let out = env.run(&["--json", "commit", opid], None);
    assert_ne!(
        out.status.code(),
        Some(0),
        "committing a running `fs edit` from outside must be refused; it succeeded with {}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn a_killed_process_leaves_no_owner_lock_behind() {
    let (env, _) = prepared();
    env.kill_at_failpoint(&Op::Edit.args(), None, "committed");
    env.ok(&["reconcile"], None);
    env.ok(&["gc"], None);
    let locks = env.store.join("locks");
    let left: Vec<_> = if locks.exists() { files_under(&locks) } else { Vec::new() };
    // Per-workspace locks are long-lived by design; owner locks die with their process.
    let owners: Vec<_> = left.iter().filter(|p| p.to_string_lossy().contains("owner-")).collect();
    assert!(owners.is_empty(), "stale owner locks of dead processes: {owners:?}");
}

#[test]
fn write_into_new_directories_killed_mid_write_leaves_no_empty_directories() {
    let (env, _) = prepared();
    env.kill_at_failpoint(&Op::WriteNew.args(), Op::WriteNew.stdin(), "write-temp-synced");
    env.ok(&["reconcile"], None);
    assert_eq!(env.read(NEW_FILE), None);
    assert!(!env.ws.join("made").exists(), "directories made by the interrupted write are still there");
}

/// A path with what it held before a turn and after it (`None`: absent).
type BeforeAfter = (String, Option<Vec<u8>>, Option<Vec<u8>>);

/// A turn that adds, deletes and changes files across directories, for the batched writes
/// of a rewind: each path it touched with what it held before and after.
fn many_file_turn(env: &Env) -> Vec<BeforeAfter> {
    let mut paths = Vec::new();
    for i in 0..12 {
        let (kept, gone, changed) =
            (format!("k{}/kept{i}.txt", i % 3), format!("g/gone{i}.txt"), format!("c/c{i}.txt"));
        let old = format!("before {i}\n").into_bytes();
        env.write(&kept, &old);
        env.write(&gone, &old);
        env.write(&changed, &old);
        paths.push((gone, Some(old.clone()), None));
        paths.push((changed, Some(old), Some(format!("changed {i}\n").into_bytes())));
        paths.push((format!("new/n{}/made{i}.txt", i % 4), None, Some(format!("made {i}\n").into_bytes())));
    }
    env.ok(&["turn", "begin", "--prompt", "many files"], None);
    for (path, _, after) in &paths {
        match after {
            Some(bytes) => env.write(path, bytes),
            None => std::fs::remove_file(env.ws.join(path)).unwrap(),
        }
    }
    env.ok(&["turn", "end"], None);
    paths
}

/// A rewind killed inside its batched writes — with temporary files synced and some
/// swapped in, or with every write made and no directory synced yet — leaves each path
/// wholly as the turn left it or as the rewind puts it; reconcile removes every temporary
/// file, the store verifies clean, and running the rewind again finishes it.
#[test]
fn a_rewind_killed_in_its_batched_writes_is_settled_by_reconcile_and_finished_by_running_it_again() {
    for failpoint in ["write-temp-synced", "rewind-written"] {
        let env = Env::new();
        env.ok(&["init"], None);
        let paths = many_file_turn(&env);
        env.kill_at_failpoint(&["rewind", "--to", "1", "--apply"], None, failpoint);
        env.ok(&["reconcile"], None);
        let leftovers: Vec<_> =
            files_under(&env.ws).into_iter().filter(|p| p.to_string_lossy().contains(".turnback-")).collect();
        assert_eq!(leftovers, Vec::<std::path::PathBuf>::new(), "temporary files left after reconcile at {failpoint}");
        let mut rewound = 0;
        for (path, before, after) in &paths {
            let now = env.read(path);
            assert!(
                now == *before || now == *after,
                "killed at {failpoint}: {path} must be wholly before or after, holds {now:?}"
            );
            rewound += usize::from(now == *before);
        }
        if failpoint == "rewind-written" {
            assert_eq!(rewound, paths.len(), "every write was made before {failpoint}");
        }
        let killed = env.all_checkpoints();
        assert_eq!(killed.len(), 1, "the rewind's own checkpoint: {killed:#?}");
        // Committed with its pre-images before the first write: a complete checkpoint that
        // takes back whatever the killed rewind wrote.
        assert_eq!(str_at(&killed[0], "/stageState"), "committed", "{:#}", killed[0]);
        assert_eq!(str_at(&killed[0], "/coverageState"), "fully-protected", "{:#}", killed[0]);
        env.assert_verify_clean();

        let done = env.json(&["rewind", "--to", "1", "--apply"]);
        assert_eq!(done["plan"]["resultType"], "full", "{done:#}");
        for (path, before, _) in &paths {
            assert_eq!(env.read(path), *before, "{path} after the rewind ran again (killed at {failpoint})");
        }
        env.assert_verify_clean();
    }
}
