//! The lifecycle of a checkpoint: stage (record, pre-images, indexes and usage in one
//! transaction), dispatch (the journal says the mutation may now happen), commit
//! (post-images and the outcome in one transaction), and, for write-back operations whose
//! result is committed before they write, finish.
//!
//! Invariants: each step is one transaction; a record only ever moves forward
//! (`staging` → `staged` → `committed`); committing a committed record changes nothing.

use std::collections::HashMap;

use crate::base::time::{format_ms, now_ms};
use crate::checkpoint::artifact::{self, ImageRole};
use crate::checkpoint::journal::{self, JournalEvent};
use crate::checkpoint::retention::{self};
use crate::checkpoint::*;
use crate::error::{Error, ErrorCode, Hint, Result};
use crate::fs::body::Body;
use crate::fs::files::{self, Current, FileIdentity};
use crate::fs::lock;
use crate::fs::relpath::RelPath;
use crate::storage::body::{self as storage_body, Kept};
use crate::storage::content::ContentClass;
use crate::storage::digest;
use crate::storage::kv::Txn;
use crate::storage::schema;
use crate::storage::store::Store;

/// Where the images of one checkpoint go, and whether their bytes are kept.
struct ImageSink<'a> {
    checkpoint_id: &'a str,
    protect: bool,
    artifact_ids: &'a mut Vec<String>,
}

/// `read` is what [`read_large`] found of a body that is not held.
fn image_from(
    store: &Store,
    txn: &mut dyn Txn,
    sink: &mut ImageSink<'_>,
    role: ImageRole,
    index: u32,
    current: &Current,
    read: Option<Kept>,
) -> Result<ImageRecord> {
    match current {
        Current::Absent => Ok(ImageRecord::absent()),
        Current::File { body, identity } => {
            let (digest, class, artifact_id) = match (sink.protect, read, body) {
                (true, Some(kept), _) => {
                    let a = artifact::stage_kept(txn, sink.checkpoint_id, role, index, kept)?;
                    sink.artifact_ids.push(a.artifact_id.clone());
                    (a.digest, a.content_class, Some(a.artifact_id))
                }
                (true, None, Body::Held(bytes)) => {
                    let a = artifact::stage(store.keys(), txn, sink.checkpoint_id, role, index, bytes)?;
                    sink.artifact_ids.push(a.artifact_id.clone());
                    (a.digest, a.content_class, Some(a.artifact_id))
                }
                (false, Some(kept), _) => (kept.id.to_hex(), kept.class, None),
                (false, None, Body::Held(bytes)) => {
                    (crate::base::hex::hex(&store.keys().content_id(bytes)), ContentClass::of(bytes), None)
                }
                (_, None, _) => return Err(Error::invalid("a large image was not read before its transaction")),
            };
            Ok(ImageRecord {
                present: true,
                digest: Some(digest),
                size: body.size(),
                content_class: Some(class),
                artifact_id,
                identity: Some(*identity),
            })
        }
    }
}

/// Reads each image in `currents` whose body is not held, before the transaction that
/// records them: kept in the store (packed as it is read) when `protect`, else read for its
/// id and class alone. The objects lock, taken shared when anything is kept, keeps `gc`
/// from sweeping it until the caller's transaction names it; hold it until then.
fn read_large<'a>(
    store: &Store,
    currents: impl Iterator<Item = &'a Current>,
    protect: bool,
) -> Result<(Vec<Option<Kept>>, Option<lock::NamedLock>)> {
    let mut guard = None;
    let mut out = Vec::new();
    for current in currents {
        out.push(match current {
            Current::File { body, .. } if body.held().is_none() => Some(if protect {
                if guard.is_none() {
                    guard = Some(lock::objects(&store.locks_dir(), false)?);
                }
                storage_body::keep(store.keys(), store.kv(), body)?
            } else {
                let id = storage_body::id(store.keys(), body)?;
                Kept { id, size: body.size(), class: storage_body::class(store.kv(), body)? }
            }),
            _ => None,
        });
    }
    Ok((out, guard))
}

/// Stages a checkpoint: record, pre-images, indexes and usage in one transaction.
/// An external stage (no owner) is dispatched in the same transaction.
pub(crate) fn stage(store: &Store, req: StageRequest<'_>) -> Result<CheckpointRecord> {
    let mut record = new_record(&req);
    let (large, _objects) = read_large(store, req.targets.iter().map(|t| &t.current), req.protect)?;
    let mut txn = store.kv().begin()?;
    pre_images_in(store, &mut *txn, &req, &large, &mut record)?;
    // The round is read inside this transaction: a turn that began a moment ago counts.
    let prompt_round = (req.origin.prompt_round)(&mut *txn)?;
    record.prompt_round = Some(prompt_round);
    record.parent_checkpoint_ids = newest_in(&mut *txn, &record.session_id)?.into_iter().collect();
    let pre_bytes = room_in(store, &mut *txn, &req, &record)?;
    add_usage(&mut *txn, i128::from(pre_bytes))?;
    if req.owner.is_none() {
        journal::dispatch(&mut *txn, &record.mutation.operation_id, &record.checkpoint_id, &record.created_at)?;
        record.stage_state = StageState::Staged;
    }
    record.save(store, &mut *txn)?;
    index_in(store, &mut *txn, &record, prompt_round)?;
    if let Some(also) = req.also {
        also(&mut *txn, &record)?;
    }
    txn.commit()?;
    Ok(record)
}

/// The record `req` stages, `staging` and made now, with new ids; [`stage`] fills in its
/// targets and artifacts, its round and its parent inside its transaction.
fn new_record(req: &StageRequest<'_>) -> CheckpointRecord {
    let checkpoint_id = uuid::Uuid::now_v7().to_string();
    let operation_id = uuid::Uuid::now_v7().to_string();
    let now = format_ms(now_ms());
    CheckpointRecord {
        checkpoint_id,
        mutation: MutationMetadata {
            operation_id,
            aggregate_version: 1,
            commit_state: CommitState::Pending,
            kind: req.kind,
        },
        artifact_ids: Vec::new(),
        parent_checkpoint_ids: Vec::new(),
        coverage_state: if req.protect { CoverageState::FullyProtected } else { CoverageState::Unprotected },
        retention_state: RetentionState::Retained,
        integrity_state: IntegrityState::Verified,
        stage_state: StageState::Staging,
        created_at: now,
        committed_at: None,
        prompt_round: None,
        session_id: req.origin.session_id.to_string(),
        workspace_id: req.origin.workspace_id.to_string(),
        targets: Vec::with_capacity(req.targets.len()),
        owner: req.owner.clone(),
        subagent: req.origin.subagent.map(str::to_string),
        shell: req.shell.clone(),
        subagent_window: req.subagent_window.clone(),
    }
}

/// Stages the pre-image of each of `req`'s targets (`large`: those read before the
/// transaction) as `record`'s targets and artifacts.
fn pre_images_in(
    store: &Store,
    txn: &mut dyn Txn,
    req: &StageRequest<'_>,
    large: &[Option<Kept>],
    record: &mut CheckpointRecord,
) -> Result<()> {
    let mut sink = ImageSink {
        checkpoint_id: &record.checkpoint_id,
        protect: req.protect,
        artifact_ids: &mut record.artifact_ids,
    };
    for (i, t) in req.targets.iter().enumerate() {
        let pre = image_from(store, txn, &mut sink, ImageRole::Pre, i as u32, &t.current, large[i])?;
        record.targets.push(TargetRecord {
            path: t.path.clone(),
            effect: t.effect,
            pre_image: pre,
            post_image: None,
            created_dirs: t.planned_dirs.clone(),
            intended_digest: None,
        });
    }
    Ok(())
}

/// The newest checkpoint of session `session_id` (the next one's parent).
fn newest_in(txn: &mut dyn Txn, session_id: &str) -> Result<Option<String>> {
    let session_prefix = format!("{session_id}/");
    Ok(txn
        .keys(schema::CHECKPOINTS_BY_SESSION, session_prefix.as_bytes())?
        .last()
        .map(|k| String::from_utf8_lossy(&k[session_prefix.len()..]).into_owned()))
}

/// The bytes `record`'s pre-images add to the store's usage, once sure that the caps
/// still hold them (or `req`'s cap bytes) if they are protected.
fn room_in(store: &Store, txn: &mut dyn Txn, req: &StageRequest<'_>, record: &CheckpointRecord) -> Result<u64> {
    let pre_bytes = record.artifact_bytes();
    let counted = req.cap_bytes.unwrap_or(pre_bytes);
    let verdict = retention::evaluate_capacity(store.settings(), usage_in(txn)?, counted);
    if req.protect && !verdict.fits() {
        // Another process used the room between our preflight and this transaction.
        return Err(match req.cap_bytes {
            Some(_) => undo_over_cap_error(&verdict),
            None => over_cap_error(&verdict, record.targets.iter().map(|t| &t.path)),
        });
    }
    Ok(pre_bytes)
}

/// Indexes a staged record: in its session's index, by its operation, and as pending
/// (with its owner).
fn index_in(store: &Store, txn: &mut dyn Txn, record: &CheckpointRecord, prompt_round: u64) -> Result<()> {
    let checkpoint_id = &record.checkpoint_id;
    // The round is kept in the index too, so a record that no longer opens is still
    // known to belong to its turn.
    digest::put(
        store.keys(),
        txn,
        schema::CHECKPOINTS_BY_SESSION,
        format!("{}/{checkpoint_id}", record.session_id).as_bytes(),
        &query::index_value(prompt_round),
    )?;
    txn.put(schema::CHECKPOINTS_BY_OPERATION, record.mutation.operation_id.as_bytes(), checkpoint_id.as_bytes())?;
    txn.put(schema::CHECKPOINTS_PENDING, checkpoint_id.as_bytes(), record.owner.as_deref().unwrap_or("").as_bytes())
}

/// The over-cap refusal, with the exact usage and the unprotected scope.
pub(crate) fn over_cap_error<'a>(
    verdict: &retention::CapacityVerdict,
    paths: impl IntoIterator<Item = &'a RelPath>,
) -> Error {
    let scope: Vec<String> = paths.into_iter().map(RelPath::display).collect();
    Error::new(
        ErrorCode::OverCap,
        format!(
            "{}; without --confirm-unprotected nothing was changed. Unprotected scope if confirmed: {} (not reversible by rollback)",
            verdict.disclosure(),
            scope.join(", ")
        ),
    )
    .with_details(serde_json::json!({
        "capacity": verdict,
        "unprotectedScope": scope,
        "excludedEffects": EXCLUDED_EFFECTS,
    }))
}

/// The refusal of an undo whose own checkpoint would break a cap. An undo always keeps
/// what it replaces (that is what makes it undoable and crash-safe), so there is no
/// unprotected way on: the advice is to make room.
fn undo_over_cap_error(verdict: &retention::CapacityVerdict) -> Error {
    Error::new(
        ErrorCode::OverCap,
        format!(
            "{}: the undo keeps every file it replaces so that it can itself be undone; nothing was changed",
            verdict.disclosure()
        ),
    )
    .with_details(serde_json::json!({ "capacity": verdict }))
    .with_advice(crate::error::Advice::MakeRoomForUndo)
}

/// Journals the dispatch of a staged in-process mutation (`staging` → `staged`), with the
/// digest of each target's intended content (`None`: a delete).
pub(crate) fn dispatch(store: &Store, checkpoint_id: &str, intended: &[Option<String>]) -> Result<CheckpointRecord> {
    let mut txn = store.kv().begin()?;
    let mut record = load_in(store, &mut *txn, checkpoint_id)?;
    if record.stage_state != StageState::Staging {
        return Err(Error::new(
            ErrorCode::RecoveryLocked,
            format!("checkpoint {checkpoint_id} is {}", record.stage_state.as_str()),
        ));
    }
    journal::dispatch(&mut *txn, &record.mutation.operation_id, checkpoint_id, &format_ms(now_ms()))?;
    for (t, digest) in record.targets.iter_mut().zip(intended) {
        t.intended_digest = digest.clone();
    }
    record.stage_state = StageState::Staged;
    record.bump();
    record.save(store, &mut *txn)?;
    txn.commit()?;
    Ok(record)
}

/// The state of one target after the mutation, for [`commit`].
#[derive(Debug)]
pub(crate) struct PostState {
    pub current: Current,
    pub created_dirs: Vec<RelPath>,
    /// False for a post-image recorded before it is written (a rollback's intended
    /// result): its identity is not known yet and is left out.
    pub identity_known: bool,
}

/// Commits a staged checkpoint: post-images, `committed`, terminal journal event — one
/// transaction. Committing a committed checkpoint returns it unchanged.
///
/// # Errors
/// `recovery-locked` if the record was reconciled as unreachable (or never dispatched).
pub(crate) fn commit(
    store: &Store,
    checkpoint_id: &str,
    posts: Vec<PostState>,
    failed: bool,
) -> Result<CheckpointRecord> {
    commit_with(store, checkpoint_id, posts, CommitMode::AfterMutation { failed })
}

/// When a checkpoint's post-images are committed relative to its mutation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CommitMode {
    /// The mutation happened: post-images observed, terminal journal event written.
    AfterMutation { failed: bool },
    /// A rollback: the intended post-images are committed and the dispatch journaled in
    /// one transaction *before* anything is written, so the rollback is undoable whatever
    /// happens next; [`finish`] writes the terminal event afterwards.
    BeforeMutation,
}

/// Commits a checkpoint's post-images (see [`CommitMode`]).
pub(crate) fn commit_with(
    store: &Store,
    checkpoint_id: &str,
    posts: Vec<PostState>,
    mode: CommitMode,
) -> Result<CheckpointRecord> {
    let large = read_large_posts(store, checkpoint_id, &posts)?;
    let mut txn = store.kv().begin()?;
    let mut record = load_committable_in(store, &mut *txn, checkpoint_id, mode)?;
    if record.stage_state == StageState::Committed {
        return Ok(record);
    }
    if posts.len() != record.targets.len() {
        return Err(Error::invalid("post-images do not match the staged targets"));
    }
    let now = format_ms(now_ms());
    let added = post_images_in(store, &mut *txn, &mut record, posts, &large, mode)?;
    add_usage(&mut *txn, i128::from(added))?;
    mark_committed_in(store, &mut *txn, &mut record, mode, now)?;
    txn.commit()?;
    Ok(record)
}

/// The bytes of `posts`' files.
fn post_size(posts: &[PostState]) -> u64 {
    posts
        .iter()
        .map(|p| match &p.current {
            Current::File { body, .. } => body.size(),
            Current::Absent => 0,
        })
        .sum()
}

/// A commit's large post-images, read before its transaction.
struct LargePosts {
    /// Each post-image's, if it is large.
    read: Vec<Option<Kept>>,
    /// Whether they were kept in the store (they would be protected, as things stood).
    kept: bool,
    /// The objects lock, held while what was kept is named by nothing yet.
    _objects: Option<lock::NamedLock>,
}

/// Reads the large post-images of checkpoint `checkpoint_id` before the transaction,
/// keeping them only if they will be protected as things stand now (the transaction
/// decides again).
fn read_large_posts(store: &Store, checkpoint_id: &str, posts: &[PostState]) -> Result<LargePosts> {
    // Only when there is a large one: every agent edit commits here, and a record and the
    // usage read again outside the transaction are work a small file never needs.
    let any_large = posts.iter().any(|p| matches!(&p.current, Current::File { body, .. } if body.held().is_none()));
    let kept = any_large
        && load(store, checkpoint_id).is_ok_and(|r| {
            r.coverage_state != CoverageState::Unprotected
                && fits_post(store, &r, post_size(posts), usage(store).unwrap_or(u64::MAX))
        });
    let (read, objects) = read_large(store, posts.iter().map(|p| &p.current), kept)?;
    Ok(LargePosts { read, kept, _objects: objects })
}

/// Checkpoint `checkpoint_id`, if `mode` may commit it: in the state it expects, or
/// committed already (then it is left unchanged).
fn load_committable_in(
    store: &Store,
    txn: &mut dyn Txn,
    checkpoint_id: &str,
    mode: CommitMode,
) -> Result<CheckpointRecord> {
    let record = load_in(store, txn, checkpoint_id)?;
    let expected = match mode {
        CommitMode::AfterMutation { .. } => StageState::Staged,
        CommitMode::BeforeMutation => StageState::Staging,
    };
    match record.stage_state {
        StageState::Committed => Ok(record),
        s if s == expected => Ok(record),
        other => Err(Error::new(
            ErrorCode::RecoveryLocked,
            format!("checkpoint {checkpoint_id} is {}; it cannot be committed", other.as_str()),
        )
        .with_hint(Hint::Inspect { checkpoint_id: checkpoint_id.to_string() })),
    }
}

/// Records `posts` as `record`'s post-images; returns the bytes they add to the store's
/// usage.
fn post_images_in(
    store: &Store,
    txn: &mut dyn Txn,
    record: &mut CheckpointRecord,
    posts: Vec<PostState>,
    large: &LargePosts,
    mode: CommitMode,
) -> Result<u64> {
    let protect_pre = record.coverage_state != CoverageState::Unprotected;
    let post_bytes = post_size(&posts);
    // The post-image joins the checkpoint's bytes; if that would break a cap now, keep
    // the digests (so rollback can still tell what changed) but not the bytes. A large one
    // not kept above (no room then) stays unkept even if room was made since.
    let room = fits_post(store, record, post_bytes, usage_in(txn)?);
    let protect_post = protect_pre && room && (large.kept || large.read.iter().all(Option::is_none));
    let mut sink = ImageSink {
        checkpoint_id: &record.checkpoint_id,
        protect: protect_post,
        artifact_ids: &mut record.artifact_ids,
    };
    for (i, post) in posts.into_iter().enumerate() {
        let mut image = image_from(store, txn, &mut sink, ImageRole::Post, i as u32, &post.current, large.read[i])?;
        if !post.identity_known {
            image.identity = None;
        }
        let target = &mut record.targets[i];
        if record.mutation.kind == OperationKind::External {
            target.effect = EffectKind::infer(target.pre_image.present, image.present);
        }
        target.post_image = Some(image);
        if mode != CommitMode::BeforeMutation {
            // Before the write, the directories it will make were planned at stage time.
            target.created_dirs = post.created_dirs;
        }
    }
    if protect_pre && !protect_post && record.targets.iter().any(|t| t.post_image.as_ref().is_some_and(|p| p.present)) {
        record.coverage_state = CoverageState::PartiallyProtected;
    }
    Ok(if protect_post { post_bytes } else { 0 })
}

/// Commits `record`'s artifacts and journals what `mode` says (the outcome after the
/// mutation; the dispatch before it), and saves it `committed` at `now`.
fn mark_committed_in(
    store: &Store,
    txn: &mut dyn Txn,
    record: &mut CheckpointRecord,
    mode: CommitMode,
    now: String,
) -> Result<()> {
    for id in &record.artifact_ids {
        artifact::commit(txn, id)?;
    }
    let (operation_id, checkpoint_id) = (&record.mutation.operation_id, record.checkpoint_id.as_str());
    match mode {
        CommitMode::AfterMutation { failed } => {
            let event = if failed { JournalEvent::OperationFailed } else { JournalEvent::OperationSucceeded };
            journal::finish(txn, operation_id, checkpoint_id, event, &now)?;
            record.mutation.commit_state = if failed { CommitState::Failed } else { CommitState::Succeeded };
            record.owner = None;
            txn.delete(schema::CHECKPOINTS_PENDING, checkpoint_id.as_bytes())?;
        }
        CommitMode::BeforeMutation => {
            // Stays in the pending index (with its owner) until `finish`.
            journal::dispatch(txn, operation_id, checkpoint_id, &now)?;
        }
    }
    record.stage_state = StageState::Committed;
    record.committed_at = Some(now);
    record.bump();
    record.save(store, txn)
}

/// Whether post-images of `post_bytes` fit beside `record`'s images at store usage `usage`.
fn fits_post(store: &Store, record: &CheckpointRecord, post_bytes: u64, usage: u64) -> bool {
    retention::evaluate_capacity(store.settings(), usage, post_bytes).fits()
        && record.artifact_bytes() + post_bytes <= store.settings().checkpoint_cap
}

/// One path a write-back operation (rollback, resolution, rewind) is about to change:
/// what is there now (its real bytes) and what it will hold (`None`: removed).
#[derive(Debug, Clone)]
pub(crate) struct PlannedWrite {
    pub path: RelPath,
    pub current: Current,
    pub intended: Option<Body>,
}

/// Commits the checkpoint of a write-back operation before anything is written: the real
/// bytes of everything it will overwrite or delete, the intended results, and the journal
/// dispatch, in one transaction ([`CommitMode::BeforeMutation`]). Rolling it back undoes
/// the operation whatever happens next; [`finish`] closes it after the writes.
///
/// `kept` is what the caps are held to: the bytes this checkpoint must keep that the store
/// does not already hold (a rewind's images are all in its snapshots: 0; a rollback keeps
/// the files it overwrites, its intended images being checkpoint images already).
///
/// # Errors
/// `over-cap` if `kept` would break a cap (such a checkpoint is never unprotected, so the
/// advice is to make room, not to go on without it).
pub(crate) fn record_before_writes(
    store: &Store,
    origin: Origin<'_>,
    root: &std::path::Path,
    writes: Vec<PlannedWrite>,
    kept: u64,
) -> Result<CheckpointRecord> {
    let verdict = retention::evaluate_capacity(store.settings(), usage(store)?, kept);
    if !verdict.fits() {
        return Err(undo_over_cap_error(&verdict));
    }
    // The identity of a file not written yet is unknown; `identity_known: false` drops it.
    let unknown = FileIdentity { device: 0, inode: 0, mode: 0, size: 0, mtime_ns: 0, ctime_ns: 0 };
    let mut targets = Vec::with_capacity(writes.len());
    let mut posts = Vec::with_capacity(writes.len());
    // Asked once per directory: a restore of thousands of files has a few hundred.
    let mut missing: HashMap<Vec<u8>, Vec<RelPath>> = HashMap::new();
    for w in writes {
        let effect = EffectKind::infer(matches!(w.current, Current::File { .. }), w.intended.is_some());
        let planned_dirs = match &w.intended {
            Some(_) => missing
                .entry(w.path.dir().to_vec())
                .or_insert_with(|| files::missing_parents(root, &w.path).unwrap_or_default())
                .clone(),
            None => Vec::new(),
        };
        posts.push(PostState {
            current: match w.intended {
                Some(body) => Current::File { body, identity: unknown },
                None => Current::Absent,
            },
            created_dirs: Vec::new(),
            identity_known: false,
        });
        targets.push(PreparedTarget { path: w.path, effect, current: w.current, planned_dirs });
    }
    let owner = store.owner()?.id().to_string();
    let request = StageRequest {
        origin,
        kind: OperationKind::Rollback,
        targets,
        protect: true,
        cap_bytes: Some(kept),
        owner: Some(owner),
        also: None,
        shell: None,
        subagent_window: None,
    };
    let staged = stage(store, request)?;
    commit_with(store, &staged.checkpoint_id, posts, CommitMode::BeforeMutation)
}

/// Writes the terminal journal event of a checkpoint committed with
/// [`CommitMode::BeforeMutation`] once its writes are done.
pub(crate) fn finish(store: &Store, checkpoint_id: &str, failed: bool) -> Result<CheckpointRecord> {
    finish_written(store, checkpoint_id, failed, &[])
}

/// [`finish`], also recording the identity (device, inode, times) of each file the
/// operation wrote as its target's post-image identity, unknown until the writes were made.
pub(crate) fn finish_written(
    store: &Store,
    checkpoint_id: &str,
    failed: bool,
    written: &[(RelPath, FileIdentity)],
) -> Result<CheckpointRecord> {
    let mut txn = store.kv().begin()?;
    let mut record = load_in(store, &mut *txn, checkpoint_id)?;
    if record.mutation.commit_state != CommitState::Pending {
        return Ok(record);
    }
    for (path, identity) in written {
        let post = record.targets.iter_mut().find(|t| &t.path == path).and_then(|t| t.post_image.as_mut());
        if let Some(post) = post.filter(|p| p.present) {
            post.identity = Some(*identity);
        }
    }
    let event = if failed { JournalEvent::OperationFailed } else { JournalEvent::OperationSucceeded };
    journal::finish(&mut *txn, &record.mutation.operation_id, checkpoint_id, event, &format_ms(now_ms()))?;
    record.mutation.commit_state = if failed { CommitState::Failed } else { CommitState::Succeeded };
    record.owner = None;
    record.bump();
    record.save(store, &mut *txn)?;
    txn.delete(schema::CHECKPOINTS_PENDING, checkpoint_id.as_bytes())?;
    txn.commit()?;
    Ok(record)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::settings::Settings;

    #[test]
    fn an_undo_over_a_cap_advises_making_room_never_a_flag_it_lacks() {
        let settings = Settings { checkpoint_cap: 10, ..Settings::default() };
        let e = undo_over_cap_error(&retention::evaluate_capacity(&settings, 0, 11));
        assert_eq!(e.code, ErrorCode::OverCap);
        let advice = e.recovery_actions().join("\n") + &e.message;
        assert!(!advice.contains("--confirm-unprotected"), "{advice}");
        assert!(advice.contains("turnback gc") && advice.contains("checkpoint_cap"), "{advice}");
        assert_eq!(e.report(crate::error::Hint::describe)["error"]["recoveryActions"][0], e.recovery_actions()[0]);
    }
}
