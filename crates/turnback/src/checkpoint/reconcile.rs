//! Recovery of what a crash left: stages whose process died, their journal operations,
//! and the temporary files and directories of interrupted writes.
//!
//! Invariants: a record is marked only after its workspace was cleaned, so a crash during
//! reconcile leaves work for the next run, never a lost temporary file; a temporary file is
//! deleted only when it cannot hold anyone's content ([`temp_verdict`]), otherwise it is
//! kept, visible, as `NAME.turnback-recovered`.

use std::collections::HashMap;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::base::hex::hex;
use crate::base::time::{format_ms, now_ms};
use crate::checkpoint::journal::{self, JournalEvent};
use crate::checkpoint::*;
use crate::error::{ErrorCode, Result};
use crate::fs::files::{self, Current, TempPhase};
use crate::fs::lock;
use crate::storage::schema;
use crate::storage::store::Store;

/// What a reconcile run found and did.
#[derive(Debug, Clone, Default, Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ReconcileReport {
    /// Incomplete stages of dead processes, now `unreachable` + `recovery-locked`.
    pub reconciled: Vec<ReconciledCheckpoint>,
    /// Stages of processes that are still running (left alone).
    pub in_progress: u64,
    /// External stages waiting for their `commit` (left alone).
    pub awaiting_commit: u64,
    /// Temporary files of interrupted writes removed from workspaces.
    pub temp_files_removed: u64,
    /// Directories an interrupted write had created, removed again (only if empty).
    pub dirs_removed: u64,
    /// Liveness lock files of processes that are gone, removed.
    pub stale_locks_removed: u64,
    /// Temporary files holding something other than the original or the intended result
    /// (someone else's content, displaced mid-swap), kept as `NAME.turnback-recovered`.
    pub recovered_files: Vec<String>,
    /// Pending records that could not be read (left for `verify` to report).
    pub unreadable: Vec<String>,
    /// Turns whose late start snapshot's process died, told so.
    pub late_snapshots_failed: u64,
}

/// One reconciled checkpoint.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ReconciledCheckpoint {
    /// The checkpoint.
    pub checkpoint_id: String,
    /// Its operation.
    pub operation_id: String,
    /// `unknown-outcome` if the mutation may have happened, `abandoned` if it never began.
    pub commit_state: CommitState,
}

/// Marks incomplete stages of dead processes `unreachable` + `recovery-locked`, closes
/// their open journal operations with `OperationUnknownOutcome`, and removes temporary
/// files their crash left. Runs at every store open.
///
/// Workspace clean-up happens before the record is marked, so a crash during reconcile
/// leaves the record pending and the next run does it again (it is idempotent). A
/// temporary file a swap may have displaced someone's content into, holding neither the
/// target's original nor the intended result, is not deleted: it is renamed
/// `NAME.turnback-recovered` and reported. One still being written is removed. A record that
/// does not verify is reported and left for `verify`, never a reason to stop.
///
/// `workspace_root` finds a workspace's directory by id (`None`: it is not registered any
/// more), so the temporary file an interrupted write left can be looked at.
pub fn reconcile(store: &Store, workspace_root: &dyn Fn(&str) -> Option<PathBuf>) -> Result<ReconcileReport> {
    let mut pending = Vec::new();
    store.kv().scan(schema::CHECKPOINTS_PENDING, b"", &mut |k, v| {
        pending.push((String::from_utf8_lossy(k).into_owned(), String::from_utf8_lossy(v).into_owned()));
        Ok(true)
    })?;
    let mut report = ReconcileReport::default();
    let mut workspaces: HashMap<String, Option<PathBuf>> = HashMap::new();
    for (id, owner) in pending {
        if owner.is_empty() {
            report.awaiting_commit += 1;
            continue;
        }
        if lock::owner_alive(&store.locks_dir(), &owner)? {
            report.in_progress += 1;
            continue;
        }
        let record = match load(store, &id) {
            Ok(r) => r,
            Err(e) if e.code == ErrorCode::NotFound => {
                let mut txn = store.kv().begin()?;
                txn.delete(schema::CHECKPOINTS_PENDING, id.as_bytes())?;
                txn.commit()?;
                continue;
            }
            Err(e) => {
                report.unreadable.push(format!("checkpoint {id}: {e}"));
                continue;
            }
        };
        if journal::is_open_now(store.kv(), &record.mutation.operation_id)? {
            let root =
                workspaces.entry(record.workspace_id.clone()).or_insert_with(|| workspace_root(&record.workspace_id));
            if let Some(root) = root {
                clean_workspace(store, root, &record, &mut report);
            }
        }
        if let Some(done) = mark_interrupted(store, &id)? {
            report.reconciled.push(done);
        }
    }
    report.stale_locks_removed = lock::sweep(&store.locks_dir())?;
    Ok(report)
}

/// In one transaction: closes the journal of an interrupted operation and, unless the
/// record is committed (a rollback that had recorded its result before writing), marks
/// it `unreachable` + `recovery-locked`. A committed record is never modified.
fn mark_interrupted(store: &Store, id: &str) -> Result<Option<ReconciledCheckpoint>> {
    let mut txn = store.kv().begin()?;
    let mut record = load_in(store, &mut *txn, id)?;
    let opid = record.mutation.operation_id.clone();
    let dispatched = journal::is_open(&mut *txn, &opid)?;
    if dispatched {
        journal::finish(&mut *txn, &opid, id, JournalEvent::OperationUnknownOutcome, &format_ms(now_ms()))?;
    }
    txn.delete(schema::CHECKPOINTS_PENDING, id.as_bytes())?;
    let outcome = match record.stage_state {
        StageState::Committed => dispatched.then_some(CommitState::UnknownOutcome),
        StageState::Staging | StageState::Staged => {
            record.mutation.commit_state =
                if dispatched { CommitState::UnknownOutcome } else { CommitState::Abandoned };
            record.stage_state = StageState::Unreachable;
            record.integrity_state = IntegrityState::RecoveryLocked;
            record.owner = None;
            record.bump();
            record.save(store, &mut *txn)?;
            Some(record.mutation.commit_state)
        }
        StageState::Unreachable => None,
    };
    txn.commit()?;
    Ok(outcome.map(|commit_state| ReconciledCheckpoint {
        checkpoint_id: id.to_string(),
        operation_id: opid,
        commit_state,
    }))
}

/// Removes what an interrupted write left in the workspace: its temporary files (see
/// [`temp_verdict`]) and directories it created (if empty).
fn clean_workspace(store: &Store, root: &Path, record: &CheckpointRecord, report: &mut ReconcileReport) {
    for t in &record.targets {
        if let Ok(parent) = files::open_parent(root, &t.path, false) {
            let swapping = files::temp_name(&t.path, &record.checkpoint_id);
            let known = [
                t.pre_image.digest.as_deref(),
                t.intended_digest.as_deref(),
                t.post_image.as_ref().and_then(|p| p.digest.as_deref()),
            ];
            for (temp, phase) in [(files::writing_name(&swapping), TempPhase::Writing), (swapping, TempPhase::Swapping)]
            {
                let found = match parent.read_sibling(&temp) {
                    Ok(Current::Absent) => continue,
                    Ok(Current::File { bytes, .. }) => {
                        Found::Bytes(known.contains(&Some(hex(&store.keys().content_id(&bytes)).as_str())))
                    }
                    Err(_) => Found::Unreadable,
                };
                match temp_verdict(phase, found) {
                    Verdict::Remove => {
                        if parent.remove_temp(&temp).unwrap_or(false) {
                            report.temp_files_removed += 1;
                        }
                    }
                    Verdict::KeepAsRecovered => {
                        let mut kept = t.path.as_bytes().rsplit(|b| *b == b'/').next().unwrap_or_default().to_vec();
                        kept.extend_from_slice(b".turnback-recovered");
                        let kept = std::ffi::OsString::from_vec(kept);
                        if parent.rename_sibling(&temp, &kept).is_ok() {
                            report.recovered_files.push(t.path.display() + ".turnback-recovered");
                        }
                    }
                }
            }
        }
        for dir in t.created_dirs.iter().rev() {
            if files::remove_empty_dir(root, dir).unwrap_or(false) {
                report.dirs_removed += 1;
            }
        }
    }
}

/// What was found under a temporary name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Found {
    /// A file; true if its content is the target's original, the intended result or the
    /// recorded result.
    Bytes(bool),
    /// Something that is not a readable regular file.
    Unreadable,
}

/// What becomes of a temporary file an interrupted write left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    /// turnback's own garbage.
    Remove,
    /// Possibly someone else's content: renamed `NAME.turnback-recovered` and reported.
    KeepAsRecovered,
}

/// The one decision about a leftover temporary file. Under a writing name it is
/// turnback's own, whatever it holds: a write stopped midway (a prefix of the intended
/// bytes), and no swap had begun, so nobody's content can be in it. Under a swapping name
/// it held turnback's complete bytes before the swap and the displaced file after: it goes
/// only if it is the original, the intended or the recorded content, and is kept
/// otherwise — that is someone else's work, displaced mid-swap.
fn temp_verdict(phase: TempPhase, found: Found) -> Verdict {
    match (phase, found) {
        (TempPhase::Writing, _) => Verdict::Remove,
        (TempPhase::Swapping, Found::Bytes(true) | Found::Unreadable) => Verdict::Remove,
        (TempPhase::Swapping, Found::Bytes(false)) => Verdict::KeepAsRecovered,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_temp_file_is_kept_only_if_it_may_hold_someone_elses_content() {
        for found in [Found::Bytes(true), Found::Bytes(false), Found::Unreadable] {
            assert_eq!(temp_verdict(TempPhase::Writing, found), Verdict::Remove, "{found:?}");
        }
        assert_eq!(temp_verdict(TempPhase::Swapping, Found::Bytes(true)), Verdict::Remove);
        assert_eq!(temp_verdict(TempPhase::Swapping, Found::Bytes(false)), Verdict::KeepAsRecovered);
        assert_eq!(temp_verdict(TempPhase::Swapping, Found::Unreadable), Verdict::Remove, "nobody's file");
    }
}
