//! Checkpoints: self-sufficient records of single file mutations, and their lifecycle.
//!
//! Invariants:
//! - A checkpoint record is sealed as a whole (paths included) under its own id; the
//!   only plain traces are index keys made of ids.
//! - The record, its pre-image artifacts, its indexes and the usage counter are written in
//!   **one** transaction (`stage`); there is no separate staging marker to lose. The
//!   record's `stageState` goes `staging` (pre-images durable, nothing dispatched) →
//!   `staged` (journal dispatch written: the mutation may have happened) → `committed`
//!   (post-images captured, terminal journal event written, same transaction).
//! - A record that is not `committed` is never returned as a checkpoint by [`get`] or
//!   [`read_image`]: `recovery-locked`.
//! - [`reconcile`] turns a non-committed record whose owner process is gone into
//!   `unreachable` + `recovery-locked` (with `OperationUnknownOutcome` if it was
//!   dispatched) and removes the temporary file the crash may have left. It never touches
//!   a committed record, a record whose owner still runs, or an external stage waiting for
//!   its `commit`.
//! - Every target carries its path, effect, and pre-/post-image digest, size, class,
//!   artifact and file identity: rollback needs nothing else.

pub mod artifact;
pub mod journal;
pub mod retention;

use std::collections::HashMap;
use std::os::unix::ffi::OsStringExt;

use serde::{Deserialize, Serialize};

use crate::checkpoint::artifact::{ContentMetadata, Expected, ImageRole};
use crate::checkpoint::journal::JournalEvent;
use crate::checkpoint::retention::RetentionVerdict;
use crate::error::{Error, ErrorCode, Result};
use crate::fs::files::{self, Current, FileIdentity};
use crate::fs::lock;
use crate::session::Session;
use crate::session::workspace::{RelPath, Workspace};
use crate::storage::kv::{Ns, Txn};
use crate::storage::object::ContentClass;
use crate::storage::store::{Store, format_ms, now_ms};

pub(crate) const NS_CHECKPOINTS: Ns = "checkpoints";
const NS_BY_SESSION: Ns = "checkpoints-by-session";
const NS_BY_OPERATION: Ns = "checkpoints-by-operation";
const NS_PENDING: Ns = "checkpoints-pending";
const NS_USAGE: Ns = "usage";
const USAGE_ARTIFACT_BYTES: &[u8] = b"artifact-bytes";
const CHECKPOINT_SCHEMA: u16 = 1;

/// Effects no checkpoint can take back; listed with every checkpoint and rollback.
pub const EXCLUDED_EFFECTS: [&str; 6] = ["shell", "remote", "permission", "process", "symlink-side", "external"];

macro_rules! state_enum {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $variant:ident = $text:literal),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
        pub enum $name { $($(#[$vm])* #[serde(rename = $text)] $variant),+ }
        impl $name {
            /// The stable string form.
            pub fn as_str(self) -> &'static str { match self { $($name::$variant => $text),+ } }
        }
    };
}

state_enum!(
    /// Where a checkpoint is in its lifecycle.
    StageState {
        /// Pre-images are durable; the mutation has not been dispatched.
        Staging = "staging",
        /// The dispatch is journaled; the mutation may have happened.
        Staged = "staged",
        /// Post-images captured and the outcome journaled.
        Committed = "committed",
        /// An incomplete stage whose owner died; never shown as a checkpoint.
        Unreachable = "unreachable",
    }
);

state_enum!(
    /// What the journal says about the mutation.
    CommitState {
        /// Not finished yet.
        Pending = "pending",
        /// The mutation completed.
        Succeeded = "succeeded",
        /// The mutation reported failure (the post-image still says what is on disk).
        Failed = "failed",
        /// Dispatched, then the process died: nobody knows whether it happened.
        UnknownOutcome = "unknown-outcome",
        /// The process died before dispatching: the mutation never happened.
        Abandoned = "abandoned",
    }
);

state_enum!(
    /// How much of the mutation can be taken back.
    CoverageState {
        /// Every pre- and post-image is stored.
        FullyProtected = "fully-protected",
        /// Some image could not be stored (over a cap); see the targets.
        PartiallyProtected = "partially-protected",
        /// No image is stored: recorded, not reversible.
        Unprotected = "unprotected",
    }
);

state_enum!(
    /// Whether the content is still kept.
    RetentionState {
        /// Within its retention window.
        Retained = "retained",
        /// Past its window; its content may be evicted to make room.
        EligibleForEviction = "eligible-for-eviction",
        /// Content removed; the record remains for history.
        Evicted = "evicted",
    }
);

state_enum!(
    /// Whether the record can be trusted.
    IntegrityState {
        /// Verified on every read.
        Verified = "verified",
        /// Found altered.
        Corrupt = "corrupt",
        /// An incomplete stage: inspect, then run recovery.
        RecoveryLocked = "recovery-locked",
    }
);

/// The kind of operation a checkpoint records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OperationKind {
    /// `fs create`.
    CreateFile,
    /// `fs edit`.
    EditFile,
    /// `fs write`.
    WriteFile,
    /// `fs delete`.
    DeleteFile,
    /// `stage` + `commit`: a mutation made by someone else (an agent's own tool).
    External,
    /// A rollback (or a resolution) written by turnback; itself undoable.
    Rollback,
}

impl OperationKind {
    /// The stable string form (`create_file`, …, `external`).
    pub fn as_str(self) -> &'static str {
        match self {
            OperationKind::CreateFile => "create_file",
            OperationKind::EditFile => "edit_file",
            OperationKind::WriteFile => "write_file",
            OperationKind::DeleteFile => "delete_file",
            OperationKind::External => "external",
            OperationKind::Rollback => "rollback",
        }
    }
}

/// The effect of a mutation on one target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EffectKind {
    /// The file did not exist before.
    Create,
    /// The file's content changed.
    Edit,
    /// The file was removed.
    Delete,
}

impl EffectKind {
    /// Parses `create`, `edit`, `delete`.
    pub fn parse(text: &str) -> Result<Self> {
        match text {
            "create" => Ok(EffectKind::Create),
            "edit" => Ok(EffectKind::Edit),
            "delete" => Ok(EffectKind::Delete),
            other => Err(Error::invalid(format!("unknown kind {other:?}; use create, edit or delete"))),
        }
    }

    fn infer(pre_present: bool, post_present: bool) -> Self {
        match (pre_present, post_present) {
            (false, _) => EffectKind::Create,
            (true, false) => EffectKind::Delete,
            (true, true) => EffectKind::Edit,
        }
    }
}

/// One side (pre or post) of a target.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ImageRecord {
    /// Whether a file was there.
    pub present: bool,
    /// Keyed digest of its content, hex (absent file: none).
    pub digest: Option<String>,
    /// Its size in bytes.
    pub size: u64,
    /// Its content class.
    pub content_class: Option<ContentClass>,
    /// The artifact holding its bytes (none: absent file, or not protected).
    pub artifact_id: Option<String>,
    /// Device, inode, mode, size and times of the file.
    pub identity: Option<FileIdentity>,
}

impl ImageRecord {
    fn absent() -> Self {
        ImageRecord { present: false, digest: None, size: 0, content_class: None, artifact_id: None, identity: None }
    }

    /// Whether restoring this image needs stored bytes that are not there.
    pub fn protected(&self) -> bool {
        !self.present || self.artifact_id.is_some()
    }
}

/// One file a checkpoint covers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TargetRecord {
    /// The path, relative to the workspace root.
    pub path: RelPath,
    /// What the mutation did to it.
    pub effect: EffectKind,
    /// Before.
    pub pre_image: ImageRecord,
    /// After (none until committed).
    pub post_image: Option<ImageRecord>,
    /// Parent directories the mutation created.
    #[serde(default)]
    pub created_dirs: Vec<RelPath>,
    /// The digest of the content the mutation meant to write, recorded with the dispatch
    /// (so reconcile can tell its temporary file from someone else's content).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intended_digest: Option<String>,
}

/// The seed's mutation metadata.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MutationMetadata {
    /// The journal's operation id.
    pub operation_id: String,
    /// Incremented on every change of the record.
    pub aggregate_version: u64,
    /// What the journal says.
    pub commit_state: CommitState,
    /// Which operation.
    pub kind: OperationKind,
}

/// A checkpoint: everything needed to take one mutation back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckpointRecord {
    /// Its id (UUID v7).
    pub checkpoint_id: String,
    /// The mutation it records.
    pub mutation: MutationMetadata,
    /// Every artifact it holds.
    pub artifact_ids: Vec<String>,
    /// The session's previous checkpoint.
    pub parent_checkpoint_ids: Vec<String>,
    /// How much is protected.
    pub coverage_state: CoverageState,
    /// Retention as stored (`retained` or `evicted`; eligibility is computed).
    pub retention_state: RetentionState,
    /// Integrity.
    pub integrity_state: IntegrityState,
    /// Lifecycle.
    pub stage_state: StageState,
    /// When it was staged (RFC 3339).
    pub created_at: String,
    /// When it was committed (RFC 3339).
    pub committed_at: Option<String>,
    /// The prompt round it was made in.
    pub prompt_round: Option<u64>,
    /// The session.
    pub session_id: String,
    /// The workspace.
    pub workspace_id: String,
    /// The files it covers.
    pub targets: Vec<TargetRecord>,
    /// The live process working on it (none: an external stage waiting for `commit`).
    pub owner: Option<String>,
}

impl CheckpointRecord {
    /// Plaintext bytes of the artifacts it holds.
    pub fn artifact_bytes(&self) -> u64 {
        self.targets
            .iter()
            .flat_map(|t| std::iter::once(&t.pre_image).chain(t.post_image.as_ref()))
            .filter(|i| i.artifact_id.is_some())
            .map(|i| i.size)
            .sum()
    }

    /// Retention verdict at the session's current round under `window`.
    pub fn retention(&self, current_round: u64, window: u32) -> RetentionVerdict {
        retention::evaluate(self.prompt_round.unwrap_or(0), current_round, window)
    }

    /// The retention state to show: stored `evicted`, else computed from the verdict.
    pub fn effective_retention(&self, verdict: &RetentionVerdict) -> RetentionState {
        match self.retention_state {
            RetentionState::Evicted => RetentionState::Evicted,
            _ if !verdict.retained => RetentionState::EligibleForEviction,
            other => other,
        }
    }

    fn save(&self, store: &Store, txn: &mut dyn Txn) -> Result<()> {
        let key = self.checkpoint_id.as_bytes();
        txn.put(NS_CHECKPOINTS, key, &store.seal_record(NS_CHECKPOINTS, key, CHECKPOINT_SCHEMA, self)?)
    }

    fn bump(&mut self) {
        self.mutation.aggregate_version += 1;
    }
}

/// A target as seen just before staging.
#[derive(Debug)]
pub(crate) struct PreparedTarget {
    pub path: RelPath,
    pub effect: EffectKind,
    pub current: Current,
    /// Parent directories the mutation will create (recorded before it creates them, so
    /// reconcile can remove them again if the mutation is interrupted).
    pub planned_dirs: Vec<RelPath>,
}

/// Everything `stage` needs.
#[derive(Debug)]
pub(crate) struct StageRequest<'a> {
    pub session: &'a Session,
    pub workspace: &'a Workspace,
    pub kind: OperationKind,
    pub targets: Vec<PreparedTarget>,
    /// Whether to store pre-images (false: over cap, confirmed unprotected).
    pub protect: bool,
    /// The owning process (none for an external stage, which is dispatched at once).
    pub owner: Option<String>,
}

fn load_in(store: &Store, txn: &mut dyn Txn, id: &str) -> Result<CheckpointRecord> {
    let value = txn.get(NS_CHECKPOINTS, id.as_bytes())?.ok_or_else(|| Error::not_found(format!("checkpoint {id}")))?;
    let record: CheckpointRecord = store.open_record(NS_CHECKPOINTS, id.as_bytes(), &value)?;
    check_identity(id, &record)?;
    Ok(record)
}

fn check_identity(id: &str, record: &CheckpointRecord) -> Result<()> {
    if record.checkpoint_id != id {
        return Err(Error::corrupt(format!("checkpoint {id}"), "record id does not match the requested id"));
    }
    if record.mutation.operation_id.is_empty() {
        return Err(Error::corrupt(format!("checkpoint {id}"), "no operation id"));
    }
    Ok(())
}

fn add_usage(txn: &mut dyn Txn, delta: i128) -> Result<()> {
    let now = usage_in(txn)?;
    let next = (i128::from(now) + delta).max(0) as u64;
    txn.put(NS_USAGE, USAGE_ARTIFACT_BYTES, &next.to_be_bytes())
}

fn usage_in(txn: &mut dyn Txn) -> Result<u64> {
    Ok(match txn.get(NS_USAGE, USAGE_ARTIFACT_BYTES)? {
        Some(v) => u64::from_be_bytes(v.as_slice().try_into().map_err(|_| Error::corrupt("usage", "bad counter"))?),
        None => 0,
    })
}

/// Bytes all retained checkpoint artifacts use now.
pub fn usage(store: &Store) -> Result<u64> {
    Ok(match store.kv().get(NS_USAGE, USAGE_ARTIFACT_BYTES)? {
        Some(v) => u64::from_be_bytes(v.as_slice().try_into().map_err(|_| Error::corrupt("usage", "bad counter"))?),
        None => 0,
    })
}

/// Where the images of one checkpoint go, and whether their bytes are kept.
struct ImageSink<'a> {
    checkpoint_id: &'a str,
    protect: bool,
    artifact_ids: &'a mut Vec<String>,
}

fn image_from(
    store: &Store,
    txn: &mut dyn Txn,
    sink: &mut ImageSink<'_>,
    role: ImageRole,
    index: u32,
    current: &Current,
) -> Result<ImageRecord> {
    match current {
        Current::Absent => Ok(ImageRecord::absent()),
        Current::File { bytes, identity } => {
            let (digest, class, artifact_id) = if sink.protect {
                let a = artifact::stage(store.keys(), txn, sink.checkpoint_id, role, index, bytes)?;
                sink.artifact_ids.push(a.artifact_id.clone());
                (a.digest, a.content_class, Some(a.artifact_id))
            } else {
                (crate::storage::crypto::hex(&store.keys().content_id(bytes)), ContentClass::of(bytes), None)
            };
            Ok(ImageRecord {
                present: true,
                digest: Some(digest),
                size: bytes.len() as u64,
                content_class: Some(class),
                artifact_id,
                identity: Some(*identity),
            })
        }
    }
}

/// Stages a checkpoint: record, pre-images, indexes and usage in one transaction.
/// An external stage (no owner) is dispatched in the same transaction.
pub(crate) fn stage(store: &Store, req: StageRequest<'_>) -> Result<CheckpointRecord> {
    let checkpoint_id = uuid::Uuid::now_v7().to_string();
    let operation_id = uuid::Uuid::now_v7().to_string();
    let now = format_ms(now_ms());
    let external = req.owner.is_none();
    let mut txn = store.kv().begin()?;
    let mut artifact_ids = Vec::new();
    let mut targets = Vec::with_capacity(req.targets.len());
    let mut sink = ImageSink { checkpoint_id: &checkpoint_id, protect: req.protect, artifact_ids: &mut artifact_ids };
    for (i, t) in req.targets.iter().enumerate() {
        let pre = image_from(store, &mut *txn, &mut sink, ImageRole::Pre, i as u32, &t.current)?;
        targets.push(TargetRecord {
            path: t.path.clone(),
            effect: t.effect,
            pre_image: pre,
            post_image: None,
            created_dirs: t.planned_dirs.clone(),
            intended_digest: None,
        });
    }
    // The round is read inside the transaction: a caller's `Session` value may be stale.
    let prompt_round = match txn.get(crate::session::NS_SESSIONS, req.session.id.as_bytes())? {
        Some(v) => {
            store.open_record::<Session>(crate::session::NS_SESSIONS, req.session.id.as_bytes(), &v)?.prompt_round
        }
        None => return Err(Error::not_found(format!("session {}", req.session.id))),
    };
    let session_prefix = format!("{}/", req.session.id);
    let parent = txn
        .keys(NS_BY_SESSION, session_prefix.as_bytes())?
        .last()
        .map(|k| String::from_utf8_lossy(&k[session_prefix.len()..]).into_owned());
    let mut record = CheckpointRecord {
        checkpoint_id: checkpoint_id.clone(),
        mutation: MutationMetadata {
            operation_id: operation_id.clone(),
            aggregate_version: 1,
            commit_state: CommitState::Pending,
            kind: req.kind,
        },
        artifact_ids,
        parent_checkpoint_ids: parent.into_iter().collect(),
        coverage_state: if req.protect { CoverageState::FullyProtected } else { CoverageState::Unprotected },
        retention_state: RetentionState::Retained,
        integrity_state: IntegrityState::Verified,
        stage_state: StageState::Staging,
        created_at: now.clone(),
        committed_at: None,
        prompt_round: Some(prompt_round),
        session_id: req.session.id.clone(),
        workspace_id: req.workspace.id.clone(),
        targets,
        owner: req.owner.clone(),
    };
    let pre_bytes = record.artifact_bytes();
    let verdict = retention::evaluate_capacity(store.settings(), usage_in(&mut *txn)?, pre_bytes);
    if req.protect && !verdict.fits() {
        // Another process used the room between our preflight and this transaction.
        return Err(over_cap_error(&verdict, record.targets.iter().map(|t| &t.path)));
    }
    add_usage(&mut *txn, i128::from(pre_bytes))?;
    if external {
        journal::dispatch(&mut *txn, &operation_id, &checkpoint_id, &now)?;
        record.stage_state = StageState::Staged;
    }
    record.save(store, &mut *txn)?;
    txn.put(NS_BY_SESSION, format!("{session_prefix}{checkpoint_id}").as_bytes(), b"")?;
    txn.put(NS_BY_OPERATION, operation_id.as_bytes(), checkpoint_id.as_bytes())?;
    txn.put(NS_PENDING, checkpoint_id.as_bytes(), req.owner.as_deref().unwrap_or("").as_bytes())?;
    txn.commit()?;
    Ok(record)
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
    let mut txn = store.kv().begin()?;
    let mut record = load_in(store, &mut *txn, checkpoint_id)?;
    let expected = match mode {
        CommitMode::AfterMutation { .. } => StageState::Staged,
        CommitMode::BeforeMutation => StageState::Staging,
    };
    match record.stage_state {
        StageState::Committed => return Ok(record),
        s if s == expected => {}
        other => {
            return Err(Error::new(
                ErrorCode::RecoveryLocked,
                format!(
                    "checkpoint {checkpoint_id} is {}; it cannot be committed (run `turnback inspect {checkpoint_id}`)",
                    other.as_str()
                ),
            ));
        }
    }
    if posts.len() != record.targets.len() {
        return Err(Error::invalid("post-images do not match the staged targets"));
    }
    let now = format_ms(now_ms());
    let protect_pre = record.coverage_state != CoverageState::Unprotected;
    let post_bytes: u64 = posts
        .iter()
        .map(|p| match &p.current {
            Current::File { bytes, .. } => bytes.len() as u64,
            Current::Absent => 0,
        })
        .sum();
    let total = record.artifact_bytes() + post_bytes;
    // The post-image joins the checkpoint's bytes; if that would break a cap now, keep
    // the digests (so rollback can still tell what changed) but not the bytes.
    let room = retention::evaluate_capacity(store.settings(), usage_in(&mut *txn)?, post_bytes).fits()
        && total <= store.settings().checkpoint_cap;
    let protect_post = protect_pre && room;
    let mut artifact_ids = std::mem::take(&mut record.artifact_ids);
    let mut sink = ImageSink { checkpoint_id, protect: protect_post, artifact_ids: &mut artifact_ids };
    for (i, post) in posts.into_iter().enumerate() {
        let mut image = image_from(store, &mut *txn, &mut sink, ImageRole::Post, i as u32, &post.current)?;
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
    record.artifact_ids = artifact_ids;
    if protect_pre && !protect_post && record.targets.iter().any(|t| t.post_image.as_ref().is_some_and(|p| p.present)) {
        record.coverage_state = CoverageState::PartiallyProtected;
    }
    add_usage(&mut *txn, i128::from(if protect_post { post_bytes } else { 0 }))?;
    for id in &record.artifact_ids {
        artifact::commit(&mut *txn, id)?;
    }
    match mode {
        CommitMode::AfterMutation { failed } => {
            let event = if failed { JournalEvent::OperationFailed } else { JournalEvent::OperationSucceeded };
            journal::finish(&mut *txn, &record.mutation.operation_id, checkpoint_id, event, &now)?;
            record.mutation.commit_state = if failed { CommitState::Failed } else { CommitState::Succeeded };
            record.owner = None;
            txn.delete(NS_PENDING, checkpoint_id.as_bytes())?;
        }
        CommitMode::BeforeMutation => {
            // Stays in the pending index (with its owner) until `finish`.
            journal::dispatch(&mut *txn, &record.mutation.operation_id, checkpoint_id, &now)?;
        }
    }
    record.stage_state = StageState::Committed;
    record.committed_at = Some(now);
    record.bump();
    record.save(store, &mut *txn)?;
    txn.commit()?;
    Ok(record)
}

/// One path a write-back operation (rollback, resolution, rewind) is about to change:
/// what is there now (its real bytes) and what it will hold (`None`: removed).
#[derive(Debug, Clone)]
pub(crate) struct PlannedWrite {
    pub path: RelPath,
    pub current: Current,
    pub intended: Option<Vec<u8>>,
}

/// Commits the checkpoint of a write-back operation before anything is written: the real
/// bytes of everything it will overwrite or delete, the intended results, and the journal
/// dispatch, in one transaction ([`CommitMode::BeforeMutation`]). Rolling it back undoes
/// the operation whatever happens next; [`finish`] closes it after the writes.
///
/// # Errors
/// `over-cap` if it would break a cap (such a checkpoint is never unprotected).
pub(crate) fn record_before_writes(
    store: &Store,
    session: &Session,
    workspace: &Workspace,
    writes: Vec<PlannedWrite>,
) -> Result<CheckpointRecord> {
    let bytes: u64 = writes
        .iter()
        .map(|w| {
            let now = match &w.current {
                Current::File { bytes, .. } => bytes.len() as u64,
                Current::Absent => 0,
            };
            now + w.intended.as_ref().map_or(0, |b| b.len() as u64)
        })
        .sum();
    let verdict = retention::evaluate_capacity(store.settings(), usage(store)?, bytes);
    if !verdict.fits() {
        return Err(over_cap_error(&verdict, writes.iter().map(|w| &w.path)));
    }
    // The identity of a file not written yet is unknown; `identity_known: false` drops it.
    let unknown = FileIdentity { device: 0, inode: 0, mode: 0, size: 0, mtime_ns: 0, ctime_ns: 0 };
    let mut targets = Vec::with_capacity(writes.len());
    let mut posts = Vec::with_capacity(writes.len());
    for w in writes {
        let effect = EffectKind::infer(matches!(w.current, Current::File { .. }), w.intended.is_some());
        let planned_dirs = match &w.intended {
            Some(_) => files::missing_parents(&workspace.root, &w.path).unwrap_or_default(),
            None => Vec::new(),
        };
        posts.push(PostState {
            current: match w.intended {
                Some(bytes) => Current::File { bytes, identity: unknown },
                None => Current::Absent,
            },
            created_dirs: Vec::new(),
            identity_known: false,
        });
        targets.push(PreparedTarget { path: w.path, effect, current: w.current, planned_dirs });
    }
    let owner = store.owner()?.id().to_string();
    let request =
        StageRequest { session, workspace, kind: OperationKind::Rollback, targets, protect: true, owner: Some(owner) };
    let staged = stage(store, request)?;
    commit_with(store, &staged.checkpoint_id, posts, CommitMode::BeforeMutation)
}

/// Writes the terminal journal event of a checkpoint committed with
/// [`CommitMode::BeforeMutation`] once its writes are done.
pub(crate) fn finish(store: &Store, checkpoint_id: &str, failed: bool) -> Result<CheckpointRecord> {
    let mut txn = store.kv().begin()?;
    let mut record = load_in(store, &mut *txn, checkpoint_id)?;
    if record.mutation.commit_state != CommitState::Pending {
        return Ok(record);
    }
    let event = if failed { JournalEvent::OperationFailed } else { JournalEvent::OperationSucceeded };
    journal::finish(&mut *txn, &record.mutation.operation_id, checkpoint_id, event, &format_ms(now_ms()))?;
    record.mutation.commit_state = if failed { CommitState::Failed } else { CommitState::Succeeded };
    record.owner = None;
    record.bump();
    record.save(store, &mut *txn)?;
    txn.delete(NS_PENDING, checkpoint_id.as_bytes())?;
    txn.commit()?;
    Ok(record)
}

/// The checkpoint recording operation `operation_id`.
pub fn by_operation(store: &Store, operation_id: &str) -> Result<String> {
    let id = store
        .kv()
        .get(NS_BY_OPERATION, operation_id.as_bytes())?
        .ok_or_else(|| Error::not_found(format!("operation {operation_id}")))?;
    String::from_utf8(id).map_err(|_| Error::corrupt("operation index", "bad checkpoint id"))
}

/// Decrypts and checks the record `id` whatever its state (for `inspect` and `verify`).
///
/// # Errors
/// `not-found`, or `corrupt` if it was altered.
pub fn load(store: &Store, id: &str) -> Result<CheckpointRecord> {
    let value =
        store.kv().get(NS_CHECKPOINTS, id.as_bytes())?.ok_or_else(|| Error::not_found(format!("checkpoint {id}")))?;
    let record: CheckpointRecord = store.open_record(NS_CHECKPOINTS, id.as_bytes(), &value)?;
    check_identity(id, &record)?;
    Ok(record)
}

/// The verified checkpoint `id`: complete and trustworthy, or an error.
///
/// # Errors
/// `not-found`; `corrupt` if altered or marked corrupt; `recovery-locked` if it is not
/// committed (an incomplete or unreachable stage).
pub fn get(store: &Store, id: &str) -> Result<CheckpointRecord> {
    let record = load(store, id)?;
    verify_usable(&record)?;
    Ok(record)
}

fn verify_usable(record: &CheckpointRecord) -> Result<()> {
    let id = &record.checkpoint_id;
    match record.integrity_state {
        IntegrityState::Corrupt => return Err(Error::corrupt(format!("checkpoint {id}"), "marked corrupt")),
        IntegrityState::RecoveryLocked => {
            return Err(Error::new(
                ErrorCode::RecoveryLocked,
                format!("checkpoint {id} is an incomplete stage (recovery-locked)"),
            ));
        }
        IntegrityState::Verified => {}
    }
    match record.stage_state {
        StageState::Committed => Ok(()),
        StageState::Unreachable => {
            Err(Error::new(ErrorCode::RecoveryLocked, format!("checkpoint {id} is unreachable")))
        }
        other => Err(Error::new(
            ErrorCode::RecoveryLocked,
            format!("checkpoint {id} is {} and has not been committed", other.as_str()),
        )),
    }
}

/// Reads the bytes of one image of a verified checkpoint (`None`: the file was absent).
///
/// # Errors
/// `recovery-locked` if the checkpoint is not committed; `not-found` if the content was
/// evicted or never stored; `corrupt` if anything does not verify. No bytes on failure.
pub fn read_image(
    store: &Store,
    record: &CheckpointRecord,
    target: usize,
    role: ImageRole,
) -> Result<Option<(ContentMetadata, Vec<u8>)>> {
    verify_usable(record)?;
    let t = record.targets.get(target).ok_or_else(|| Error::not_found(format!("target {target}")))?;
    let image = match role {
        ImageRole::Pre => &t.pre_image,
        ImageRole::Post => {
            t.post_image.as_ref().ok_or_else(|| Error::corrupt("checkpoint", "committed without a post-image"))?
        }
    };
    if !image.present {
        return Ok(None);
    }
    if record.retention_state == RetentionState::Evicted {
        return Err(Error::not_found(format!("content of checkpoint {} (evicted)", record.checkpoint_id)));
    }
    let artifact_id = image
        .artifact_id
        .as_deref()
        .ok_or_else(|| Error::not_found(format!("content of {} (not protected: over a cap)", t.path.display())))?;
    let digest = image.digest.as_deref().ok_or_else(|| Error::corrupt("checkpoint", "image without digest"))?;
    let expected = Expected { checkpoint_id: &record.checkpoint_id, digest, size: image.size };
    artifact::read(store.keys(), store.kv(), artifact_id, expected).map(Some)
}

/// Which checkpoints to list.
#[derive(Debug, Clone, Copy, Default)]
pub struct ListFilter {
    /// Only those made in this prompt round.
    pub prompt_round: Option<u64>,
    /// Include incomplete, unreachable and evicted records.
    pub all: bool,
}

/// The checkpoints of `session`, oldest first. Without `all`, only complete checkpoints
/// whose content is still kept.
pub fn list(store: &Store, session: &Session, filter: ListFilter) -> Result<Vec<CheckpointRecord>> {
    let prefix = format!("{}/", session.id);
    let mut ids = Vec::new();
    store.kv().scan_keys(NS_BY_SESSION, prefix.as_bytes(), &mut |k| {
        ids.push(String::from_utf8_lossy(&k[prefix.len()..]).into_owned());
        Ok(true)
    })?;
    let mut out = Vec::new();
    for id in ids {
        // One altered record must not hide every other checkpoint; `verify` reports it.
        let record = match load(store, &id) {
            Ok(r) => r,
            Err(e) if e.code == ErrorCode::Corrupt => continue,
            Err(e) => return Err(e),
        };
        if filter.prompt_round.is_some_and(|r| record.prompt_round != Some(r)) {
            continue;
        }
        let shown = filter.all
            || (record.stage_state == StageState::Committed
                && record.integrity_state == IntegrityState::Verified
                && record.retention_state != RetentionState::Evicted);
        if shown {
            out.push(record);
        }
    }
    Ok(out)
}

/// Every checkpoint id in the store, in session order.
pub fn all_ids(store: &Store) -> Result<Vec<String>> {
    let mut ids = Vec::new();
    store.kv().scan_keys(NS_CHECKPOINTS, b"", &mut |k| {
        ids.push(String::from_utf8_lossy(k).into_owned());
        Ok(true)
    })?;
    Ok(ids)
}

/// What a reconcile run found and did.
#[derive(Debug, Clone, Default, Serialize)]
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
/// temporary file whose content is neither the target's original nor the intended result
/// is not deleted: it is renamed `NAME.turnback-recovered` and reported. A record that
/// does not verify is reported and left for `verify`, never a reason to stop.
pub fn reconcile(store: &Store) -> Result<ReconcileReport> {
    let mut pending = Vec::new();
    store.kv().scan(NS_PENDING, b"", &mut |k, v| {
        pending.push((String::from_utf8_lossy(k).into_owned(), String::from_utf8_lossy(v).into_owned()));
        Ok(true)
    })?;
    let mut report = ReconcileReport::default();
    let mut workspaces: HashMap<String, Option<Workspace>> = HashMap::new();
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
                txn.delete(NS_PENDING, id.as_bytes())?;
                txn.commit()?;
                continue;
            }
            Err(e) => {
                report.unreadable.push(format!("checkpoint {id}: {e}"));
                continue;
            }
        };
        let dispatched = store.kv().get(journal::NS_JOURNAL_OPEN, record.mutation.operation_id.as_bytes())?.is_some();
        if dispatched {
            let ws = workspaces
                .entry(record.workspace_id.clone())
                .or_insert_with(|| Workspace::by_id(store, &record.workspace_id).ok());
            if let Some(ws) = ws {
                clean_workspace(store, ws, &record, &mut report);
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
    txn.delete(NS_PENDING, id.as_bytes())?;
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

/// Removes what an interrupted write left in the workspace: its temporary file (only if
/// it holds the original or the intended result) and directories it created (if empty).
fn clean_workspace(store: &Store, ws: &Workspace, record: &CheckpointRecord, report: &mut ReconcileReport) {
    for t in &record.targets {
        if let Ok(parent) = files::open_parent(&ws.root, &t.path, false) {
            let temp = files::temp_name(&t.path, &record.checkpoint_id);
            let known = [
                t.pre_image.digest.as_deref(),
                t.intended_digest.as_deref(),
                t.post_image.as_ref().and_then(|p| p.digest.as_deref()),
            ];
            match parent.read_sibling(&temp) {
                Ok(Current::File { bytes, .. }) => {
                    let digest = crate::storage::crypto::hex(&store.keys().content_id(&bytes));
                    if known.contains(&Some(digest.as_str())) {
                        if parent.remove_temp(&temp).unwrap_or(false) {
                            report.temp_files_removed += 1;
                        }
                    } else {
                        let mut kept = t.path.as_bytes().rsplit(|b| *b == b'/').next().unwrap_or_default().to_vec();
                        kept.extend_from_slice(b".turnback-recovered");
                        let kept = std::ffi::OsString::from_vec(kept);
                        if parent.rename_sibling(&temp, &kept).is_ok() {
                            report.recovered_files.push(t.path.display() + ".turnback-recovered");
                        }
                    }
                }
                Ok(Current::Absent) => {}
                Err(_) => {
                    if parent.remove_temp(&temp).unwrap_or(false) {
                        report.temp_files_removed += 1;
                    }
                }
            }
        }
        for dir in t.created_dirs.iter().rev() {
            if files::remove_empty_dir(&ws.root, dir).unwrap_or(false) {
                report.dirs_removed += 1;
            }
        }
    }
}

/// Deletes every checkpoint of `session` (records, artifacts, indexes) inside `txn`.
///
/// # Errors
/// `conflict` if one of them is still being written by a live process.
pub(crate) fn delete_session_in(store: &Store, txn: &mut dyn Txn, session: &str) -> Result<u64> {
    let prefix = format!("{session}/");
    let mut deleted = 0;
    for key in txn.keys(NS_BY_SESSION, prefix.as_bytes())? {
        let id = String::from_utf8_lossy(&key[prefix.len()..]).into_owned();
        if let Some(owner) = txn.get(NS_PENDING, id.as_bytes())?
            && !owner.is_empty()
            && lock::owner_alive(&store.locks_dir(), &String::from_utf8_lossy(&owner))?
        {
            return Err(Error::new(ErrorCode::Conflict, format!("checkpoint {id} is being written right now")));
        }
        if let Ok(record) = load_in(store, txn, &id) {
            let mut freed = 0;
            for a in &record.artifact_ids {
                if let Some(size) = artifact::remove(txn, a)?
                    && artifact_counted(&record, a)
                    && record.retention_state != RetentionState::Evicted
                {
                    freed += size;
                }
            }
            add_usage(txn, -i128::from(freed))?;
            txn.delete(NS_BY_OPERATION, record.mutation.operation_id.as_bytes())?;
        }
        txn.delete(NS_CHECKPOINTS, id.as_bytes())?;
        txn.delete(NS_PENDING, id.as_bytes())?;
        txn.delete(NS_BY_SESSION, &key)?;
        deleted += 1;
    }
    Ok(deleted)
}

/// What an eviction pass did.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EvictionReport {
    /// Checkpoints whose content was removed.
    pub evicted: u64,
    /// Artifact bytes freed.
    pub bytes_freed: u64,
}

/// Removes the content of every checkpoint past its retention window (oldest first),
/// stopping once `enough` bytes are freed (`None`: evict every eligible one).
pub fn evict_expired(store: &Store, enough: Option<u64>) -> Result<EvictionReport> {
    let mut report = EvictionReport::default();
    let mut rounds: HashMap<String, u64> = HashMap::new();
    let window = store.settings().retention_prompt_rounds;
    for id in all_ids(store)? {
        if enough.is_some_and(|n| report.bytes_freed >= n) {
            break;
        }
        let record = match load(store, &id) {
            Ok(r) => r,
            Err(e) if e.code == ErrorCode::Corrupt => continue,
            Err(e) => return Err(e),
        };
        // An external stage whose commit never came (the tool was denied or crashed) is
        // evicted like the rest once its window has passed, instead of holding room forever.
        let orphaned_stage = record.stage_state == StageState::Staged && record.owner.is_none();
        if record.retention_state == RetentionState::Evicted
            || !(orphaned_stage || matches!(record.stage_state, StageState::Committed | StageState::Unreachable))
        {
            continue;
        }
        let current = match rounds.get(&record.session_id) {
            Some(r) => *r,
            None => {
                let r = Session::get(store, &record.session_id)?.map(|s| s.prompt_round).unwrap_or(u64::MAX);
                rounds.insert(record.session_id.clone(), r);
                r
            }
        };
        if record.retention(current, window).retained {
            continue;
        }
        let mut txn = store.kv().begin()?;
        let mut record = load_in(store, &mut *txn, &id)?;
        if record.retention_state == RetentionState::Evicted {
            continue;
        }
        if record.stage_state == StageState::Staged && record.owner.is_none() {
            let opid = record.mutation.operation_id.clone();
            journal::finish(&mut *txn, &opid, &id, JournalEvent::OperationUnknownOutcome, &format_ms(now_ms()))?;
            record.mutation.commit_state = CommitState::UnknownOutcome;
            record.stage_state = StageState::Unreachable;
            record.integrity_state = IntegrityState::RecoveryLocked;
            txn.delete(NS_PENDING, id.as_bytes())?;
        }
        let mut freed = 0;
        for a in &record.artifact_ids {
            if let Some(size) = artifact::remove(&mut *txn, a)?
                && artifact_counted(&record, a)
            {
                freed += size;
            }
        }
        add_usage(&mut *txn, -i128::from(freed))?;
        record.retention_state = RetentionState::Evicted;
        record.bump();
        record.save(store, &mut *txn)?;
        txn.commit()?;
        report.evicted += 1;
        report.bytes_freed += freed;
    }
    Ok(report)
}

fn artifact_counted(record: &CheckpointRecord, artifact_id: &str) -> bool {
    record.targets.iter().any(|t| {
        t.pre_image.artifact_id.as_deref() == Some(artifact_id)
            || t.post_image.as_ref().and_then(|p| p.artifact_id.as_deref()) == Some(artifact_id)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::crypto::SecretKey;
    use crate::storage::kv::MemoryKv;
    use crate::storage::settings::Settings;

    struct Fixture {
        _dir: tempfile::TempDir,
        store: Store,
        ws: Workspace,
        session: Session,
    }

    fn fixture() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("ws")).unwrap();
        let store = Store::with_backend(
            dir.path().join("store"),
            Box::new(MemoryKv::new()),
            SecretKey([3u8; 32]),
            Settings::default(),
        )
        .unwrap();
        let ws = Workspace::ensure(&store, &dir.path().join("ws")).unwrap();
        let session = Session::create(&store, &ws, Some("s1")).unwrap();
        Fixture { _dir: dir, store, ws, session }
    }

    fn stage_one(f: &Fixture, owner: Option<String>) -> CheckpointRecord {
        let current = Current::File { bytes: b"before".to_vec(), identity: identity() };
        let target = PreparedTarget {
            path: RelPath::new("a.txt").unwrap(),
            effect: EffectKind::Edit,
            current,
            planned_dirs: vec![],
        };
        let req = StageRequest {
            session: &f.session,
            workspace: &f.ws,
            kind: OperationKind::EditFile,
            targets: vec![target],
            protect: true,
            owner,
        };
        stage(&f.store, req).unwrap()
    }

    fn identity() -> FileIdentity {
        FileIdentity { device: 1, inode: 2, mode: 0o100644, size: 6, mtime_ns: 0, ctime_ns: 0 }
    }

    fn post(bytes: &[u8]) -> Vec<PostState> {
        vec![PostState {
            current: Current::File { bytes: bytes.to_vec(), identity: identity() },
            created_dirs: vec![],
            identity_known: true,
        }]
    }

    #[test]
    fn stage_writes_record_and_pending_marker_together_in_staging_state() {
        let f = fixture();
        let owner = f.store.owner().unwrap().id().to_string();
        let r = stage_one(&f, Some(owner));
        let loaded = load(&f.store, &r.checkpoint_id).unwrap();
        assert_eq!(loaded.stage_state, StageState::Staging);
        assert!(f.store.kv().get(NS_PENDING, r.checkpoint_id.as_bytes()).unwrap().is_some());
        assert_eq!(get(&f.store, &r.checkpoint_id).unwrap_err().code, ErrorCode::RecoveryLocked);
    }

    #[test]
    fn reconcile_leaves_live_owners_and_external_stages_alone() {
        let f = fixture();
        let owner = f.store.owner().unwrap().id().to_string();
        let live = stage_one(&f, Some(owner));
        let external = stage_one(&f, None);
        let report = reconcile(&f.store).unwrap();
        assert_eq!((report.in_progress, report.awaiting_commit, report.reconciled.len()), (1, 1, 0));
        assert_eq!(load(&f.store, &live.checkpoint_id).unwrap().stage_state, StageState::Staging);
        assert_eq!(load(&f.store, &external.checkpoint_id).unwrap().stage_state, StageState::Staged);
    }

    #[test]
    fn reconcile_locks_dead_owners_stages_and_records_unknown_outcome_after_dispatch() {
        let f = fixture();
        let never_dispatched = stage_one(&f, Some("deadbeef".into()));
        let dispatched = stage_one(&f, Some("deadbeef".into()));
        dispatch(&f.store, &dispatched.checkpoint_id, &[None]).unwrap();
        let report = reconcile(&f.store).unwrap();
        assert_eq!(report.reconciled.len(), 2);
        let a = load(&f.store, &never_dispatched.checkpoint_id).unwrap();
        assert_eq!((a.stage_state, a.integrity_state), (StageState::Unreachable, IntegrityState::RecoveryLocked));
        assert_eq!(a.mutation.commit_state, CommitState::Abandoned);
        let b = load(&f.store, &dispatched.checkpoint_id).unwrap();
        assert_eq!(b.mutation.commit_state, CommitState::UnknownOutcome);
        let events: Vec<_> =
            journal::events(f.store.kv(), &b.mutation.operation_id).unwrap().into_iter().map(|e| e.event).collect();
        assert_eq!(events, [JournalEvent::EffectDispatchCommitted, JournalEvent::OperationUnknownOutcome]);
        // An unreachable record can never be committed afterwards.
        let err = commit(&f.store, &b.checkpoint_id, post(b"after"), false).unwrap_err();
        assert_eq!(err.code, ErrorCode::RecoveryLocked);
        assert!(list(&f.store, &f.session, ListFilter::default()).unwrap().is_empty());
    }

    #[test]
    fn reconcile_never_touches_committed_records_and_commit_is_idempotent() {
        let f = fixture();
        let r = stage_one(&f, None);
        let committed = commit(&f.store, &r.checkpoint_id, post(b"after"), false).unwrap();
        assert_eq!(committed.stage_state, StageState::Committed);
        let again = commit(&f.store, &r.checkpoint_id, post(b"something else"), false).unwrap();
        assert_eq!(again, committed);
        let events = journal::events(f.store.kv(), &r.mutation.operation_id).unwrap();
        assert_eq!(events.len(), 2);
        reconcile(&f.store).unwrap();
        assert_eq!(load(&f.store, &r.checkpoint_id).unwrap(), committed);
        let (meta, bytes) = read_image(&f.store, &committed, 0, ImageRole::Post).unwrap().unwrap();
        assert_eq!(bytes, b"after");
        assert_eq!(meta.key_version, 1);
    }

    #[test]
    fn an_external_stage_never_committed_is_evicted_after_its_window() {
        let f = fixture();
        let r = stage_one(&f, None);
        assert_eq!(usage(&f.store).unwrap(), 6);
        for _ in 0..5 {
            Session::advance_round(&f.store, "s1").unwrap();
        }
        assert_eq!(evict_expired(&f.store, None).unwrap().evicted, 1);
        assert_eq!(usage(&f.store).unwrap(), 0);
        let gone = load(&f.store, &r.checkpoint_id).unwrap();
        assert_eq!(
            (gone.stage_state, gone.mutation.commit_state),
            (StageState::Unreachable, CommitState::UnknownOutcome)
        );
        assert_eq!(reconcile(&f.store).unwrap().awaiting_commit, 0);
    }

    #[test]
    fn usage_counts_stored_bytes_and_eviction_frees_them() {
        let f = fixture();
        let r = stage_one(&f, None);
        commit(&f.store, &r.checkpoint_id, post(b"after!"), false).unwrap();
        assert_eq!(usage(&f.store).unwrap(), 12);
        for _ in 0..4 {
            Session::advance_round(&f.store, "s1").unwrap();
        }
        assert_eq!(evict_expired(&f.store, None).unwrap().evicted, 0, "round 4 is inside a 5-round window");
        Session::advance_round(&f.store, "s1").unwrap();
        let report = evict_expired(&f.store, None).unwrap();
        assert_eq!((report.evicted, report.bytes_freed), (1, 12));
        assert_eq!(usage(&f.store).unwrap(), 0);
        let evicted = load(&f.store, &r.checkpoint_id).unwrap();
        assert_eq!(evicted.retention_state, RetentionState::Evicted);
        assert_eq!(read_image(&f.store, &evicted, 0, ImageRole::Pre).unwrap_err().code, ErrorCode::NotFound);
    }
}
