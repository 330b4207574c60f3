//! Recovery of what a crash left: stages whose process died, their journal operations,
//! and the temporary files and directories of interrupted writes.
//!
//! Invariants: a record is marked only after its workspace was cleaned, so a crash during
//! reconcile leaves work for the next run, never a lost temporary file; a temporary file is
//! deleted only when it cannot hold anyone's content ([`temp_verdict`]), otherwise it is
//! kept, visible, as `NAME.turnback-recovered`. A file is one of turnback's temporary
//! files only while a pending checkpoint accounts for its name ([`own_temp`]), never for
//! its name alone: what a person names like one is theirs, recorded and never removed.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::base::time::{format_ms, now_ms};
use crate::checkpoint::artifact::ImageRole;
use crate::checkpoint::journal::{self, JournalEvent};
use crate::checkpoint::*;
use crate::error::{ErrorCode, Result};
use crate::fs::body::{Body, Source};
use crate::fs::files::{self, Current, TempPhase};
use crate::fs::lock;
use crate::fs::relpath::RelPath;
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
    /// Temporary files of interrupted writes removed from workspaces (and, on request, a
    /// sync cookie a killed watcher left).
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
pub(crate) fn reconcile(store: &Store, workspace_root: &dyn Fn(&str) -> Option<PathBuf>) -> Result<ReconcileReport> {
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
/// [`temp_verdict`]) and directories it created (if empty). Only the names the record
/// accounts for ([`temp_names`]) are looked at: nothing is removed for its name alone.
fn clean_workspace(store: &Store, root: &Path, record: &CheckpointRecord, report: &mut ReconcileReport) {
    for (index, t) in record.targets.iter().enumerate() {
        if let Ok(parent) = files::open_parent(root, &t.path, false) {
            for (temp, phase) in temp_names(&t.path, &record.checkpoint_id) {
                settle(store, &parent, &temp, phase, &t.path, (record, index), report);
            }
        }
        for dir in t.created_dirs.iter().rev() {
            if files::remove_empty_dir(root, dir).unwrap_or(false) {
                report.dirs_removed += 1;
            }
        }
    }
}

/// The temporary names a write of `path` for the checkpoint `checkpoint_id` uses (in
/// `path`'s directory), each with its phase: the writing name first, then the swapping
/// one ([`files::temp_name`], [`files::writing_name`]).
fn temp_names(path: &RelPath, checkpoint_id: &str) -> [(OsString, TempPhase); 2] {
    let swapping = files::temp_name(path, checkpoint_id);
    [(files::writing_name(&swapping), TempPhase::Writing), (swapping, TempPhase::Swapping)]
}

/// The one decision whether the file at `rel` (relative to the root of the workspace
/// `workspace_id`) is one of turnback's own temporary files, and in which phase.
///
/// A name alone never makes a file turnback's: a person may name a file anything. The
/// record does. A write's temporary files are named after its checkpoint
/// ([`files::temp_name`]), and that checkpoint is pending from before the first of them
/// exists until after the last is gone: its stage commits before the write begins, and it
/// stops being pending only once its write is over (the temporary files removed) or, after
/// a crash, once [`reconcile`] has removed them. So the file is turnback's exactly when
/// its name is the temporary name, for one of its targets, of a checkpoint of this
/// workspace that is still pending. Every other file — one named like a temporary file
/// by a person, one copied from a real temporary name, one left after its checkpoint was
/// forgotten — is anyone's: recorded by snapshots, never removed.
///
/// Asked after the file was seen (listed), the answer is safe against a write running
/// meanwhile: if its checkpoint is no longer pending, its temporary file was gone before
/// the question, so a look at the file after it finds nothing.
///
/// # Errors
/// Store errors (a record that cannot be read: `corrupt`).
pub(crate) fn own_temp(store: &Store, workspace_id: &str, rel: &[u8]) -> Result<Option<TempPhase>> {
    let name = rel.rsplit(|b| *b == b'/').next().unwrap_or(rel);
    let (Some(phase), Some(checkpoint_id)) = (files::temp_phase(name), checkpoint_of_temp(name)) else {
        return Ok(None);
    };
    if !store.kv().contains(schema::CHECKPOINTS_PENDING, checkpoint_id.as_bytes())? {
        return Ok(None);
    }
    let record = match load(store, &checkpoint_id) {
        Ok(record) => record,
        Err(e) if e.code == ErrorCode::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let dir = &rel[..rel.len() - name.len()];
    let own = record.workspace_id == workspace_id
        && record.targets.iter().any(|t| {
            let path = t.path.as_bytes();
            let target_dir = path.iter().rposition(|b| *b == b'/').map_or(&path[..0], |at| &path[..=at]);
            target_dir == dir && temp_names(&t.path, &checkpoint_id).iter().any(|(n, _)| n.as_bytes() == name)
        });
    Ok(own.then_some(phase))
}

/// Settles one leftover temporary file `temp` beside `path` (in `parent`): removes it or
/// keeps it as `NAME.turnback-recovered`, as [`temp_verdict`] says. `written_by` is the
/// checkpoint whose write it is and the index of `path` among its targets.
fn settle(
    store: &Store,
    parent: &files::Parent,
    temp: &OsStr,
    phase: TempPhase,
    path: &RelPath,
    (record, index): (&CheckpointRecord, usize),
    report: &mut ReconcileReport,
) {
    let found = match parent.read_sibling(temp) {
        Ok(Current::Absent) => return,
        Ok(Current::File { body, .. }) => compare(store, record, index, &body),
        Err(_) => Found::Unreadable,
    };
    match temp_verdict(phase, found) {
        Verdict::Remove => {
            if parent.remove_temp(temp).unwrap_or(false) {
                report.temp_files_removed += 1;
            }
        }
        Verdict::KeepAsRecovered => {
            let mut kept = parent.name().as_bytes().to_vec();
            kept.extend_from_slice(RECOVERED.as_bytes());
            if parent.rename_sibling(temp, &OsString::from_vec(kept)).is_ok() {
                report.recovered_files.push(path.display() + RECOVERED);
            }
        }
    }
}

const RECOVERED: &str = ".turnback-recovered";

/// What `body`, found in a temporary file of `record`'s target `index`, is to it.
fn compare(store: &Store, record: &CheckpointRecord, index: usize, body: &Body) -> Found {
    let t = &record.targets[index];
    let Ok(digest) = crate::storage::body::id(store.keys(), body).map(|id| id.to_hex()) else {
        return Found::Unreadable;
    };
    let known = [
        t.pre_image.digest.as_deref(),
        t.intended_digest.as_deref(),
        t.post_image.as_ref().and_then(|p| p.digest.as_deref()),
    ];
    if known.contains(&Some(digest.as_str())) {
        return Found::Known;
    }
    // An undo records the bytes it means to write as its post-image, before writing; a
    // mutation's post-image is the intended content when its write went through (then its
    // digest is the intended one). A write of them cut short holds a prefix of them.
    let post_digest = t.post_image.as_ref().and_then(|p| p.digest.as_deref());
    let post_is_intended = t.intended_digest.as_deref().is_none_or(|d| Some(d) == post_digest);
    if post_is_intended && is_prefix_of_post(store, record, index, body) {
        return Found::PrefixOfIntended;
    }
    Found::Other
}

/// Whether `body` is a prefix of target `index`'s post-image: the post-image is poured
/// piece by piece and the found file read alongside (neither is held whole); the pour is
/// cut short once the found file's length is reached.
fn is_prefix_of_post(store: &Store, record: &CheckpointRecord, index: usize, body: &Body) -> bool {
    let Ok(Some(post)) = super::image_body(store, record, index, ImageRole::Post) else { return false };
    let len = body.size();
    if len > post.size() {
        return false;
    }
    let (mut at, mut same, mut found) = (0u64, true, Vec::new());
    let expected = crate::storage::body::Pour { keys: store.keys(), kv: store.kv(), body: &post };
    let _ = expected.pour(&mut |piece| {
        let want = (len - at).min(piece.len() as u64) as usize;
        same = read_range(body, at, want, &mut found).is_ok() && found[..] == piece[..want];
        at += want as u64;
        if same && at < len { Ok(()) } else { Err(crate::error::Error::invalid("compared")) }
    });
    same && at == len
}

/// Reads `len` bytes of `body` from offset `at` into `out` (replacing what it held).
fn read_range(body: &Body, at: u64, len: usize, out: &mut Vec<u8>) -> std::io::Result<()> {
    out.resize(len, 0);
    match body {
        Body::Held(bytes) => {
            let from = usize::try_from(at).unwrap_or(usize::MAX);
            let slice = bytes.get(from..from.saturating_add(len)).ok_or(std::io::ErrorKind::UnexpectedEof)?;
            out.copy_from_slice(slice);
            Ok(())
        }
        Body::Open { file, .. } => std::os::unix::fs::FileExt::read_exact_at(&**file, out, at),
        Body::Stored { .. } => Err(std::io::ErrorKind::Unsupported.into()),
    }
}

/// The checkpoint id a temporary name ([`files::temp_name`]) carries, hyphenated as ids
/// are (`None` if `name` is not shaped like one).
fn checkpoint_of_temp(name: &[u8]) -> Option<String> {
    files::temp_phase(name)?;
    let stem = name.strip_suffix(b".tmp").or_else(|| name.strip_suffix(b".part"))?;
    let id = std::str::from_utf8(&stem[stem.len() - 32..]).ok()?;
    Some(format!("{}-{}-{}-{}-{}", &id[..8], &id[8..12], &id[12..16], &id[16..20], &id[20..]))
}

/// What was found under a temporary name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Found {
    /// The target's original, the intended result or the recorded result.
    Known,
    /// The start of the intended result (a write cut short).
    PrefixOfIntended,
    /// Anything else: possibly someone else's content.
    Other,
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
/// turnback's own, whatever it holds: a write stopped midway, and no swap had begun, so
/// nobody's content can be in it. Under a swapping name it held turnback's complete bytes
/// before the swap and the displaced file after: it goes if it is the original, the
/// intended or the recorded content, or the start of the intended content (a write cut
/// short by an earlier version, which wrote under this name), and is kept otherwise —
/// that may be someone else's work, displaced mid-swap.
fn temp_verdict(phase: TempPhase, found: Found) -> Verdict {
    match (phase, found) {
        (TempPhase::Writing, _) => Verdict::Remove,
        (TempPhase::Swapping, Found::Known | Found::PrefixOfIntended | Found::Unreadable) => Verdict::Remove,
        (TempPhase::Swapping, Found::Other) => Verdict::KeepAsRecovered,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_temp_file_is_kept_only_if_it_may_hold_someone_elses_content() {
        for found in [Found::Known, Found::PrefixOfIntended, Found::Other, Found::Unreadable] {
            assert_eq!(temp_verdict(TempPhase::Writing, found), Verdict::Remove, "{found:?}");
        }
        assert_eq!(temp_verdict(TempPhase::Swapping, Found::Known), Verdict::Remove);
        assert_eq!(temp_verdict(TempPhase::Swapping, Found::PrefixOfIntended), Verdict::Remove);
        assert_eq!(temp_verdict(TempPhase::Swapping, Found::Other), Verdict::KeepAsRecovered);
        assert_eq!(temp_verdict(TempPhase::Swapping, Found::Unreadable), Verdict::Remove, "nobody's file");
    }

    #[test]
    fn a_temporary_name_names_its_checkpoint() {
        let rel = RelPath::new("src/main.rs").unwrap();
        let id = "01a2318f-0d4b-7c2e-9a5f-3b6d8e1c2a47";
        for (name, _) in temp_names(&rel, id) {
            assert_eq!(checkpoint_of_temp(name.as_bytes()).as_deref(), Some(id));
        }
        assert_eq!(checkpoint_of_temp(b".main.rs.turnback-recovered"), None);
    }
}
