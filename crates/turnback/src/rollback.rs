//! Rollback: three-way analysis and safe apply of checkpointed mutations.
//!
//! Invariants:
//! - One decision function, [`decide`], classifies every target from its pre-image, its
//!   post-image and what is at the path now. Preview and apply both call it, and apply
//!   calls it again on what it finds immediately before writing, so a preview and an apply
//!   of an unchanged workspace agree exactly and a change in between re-classifies the
//!   target instead of applying a stale inverse.
//! - Only a target whose current state equals the recorded post-image (with its identity
//!   unchanged), or already equals the pre-image, is ever written. Everything else is a
//!   conflict, a mismatch, inaccessible, unknown or skipped — never overwritten.
//! - Several checkpoints touching one path are taken back newest first, each against the
//!   state the newer ones would leave; the path is then written once.
//! - Before any write, a checkpoint of the rollback itself is committed holding the real
//!   bytes of everything it will overwrite or delete, and the dispatch is journaled; each
//!   write is a compare-and-swap ([`files::Parent::swap_in`], [`files::Parent::remove_if`]).
//!   Rolling back that checkpoint restores the state before the rollback byte for byte.
//! - Patches and merge files (the safe choices) are plaintext, so they are written only
//!   into the workspace, beside their file — never into the store.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

use serde::{Deserialize, Serialize};
use unicode_normalization::UnicodeNormalization;

use crate::artifact::ImageRole;
use crate::checkpoint::{
    self, CheckpointRecord, CommitMode, CommitState, EXCLUDED_EFFECTS, EffectKind, ImageRecord, ListFilter,
    OperationKind, PostState, PreparedTarget, RetentionState, StageRequest, StageState,
};
use crate::crypto::hex;
use crate::error::{Error, ErrorCode, Result};
use crate::failpoint;
use crate::files::{self, Current, Expect, FileIdentity, Observed, Swap};
use crate::handles;
use crate::kv::Ns;
use crate::patch;
use crate::retention;
use crate::session::Session;
use crate::store::{Store, format_ms, now_ms};
use crate::workspace::{RelPath, Workspace};

pub(crate) const NS_RESOLUTIONS: Ns = "resolutions";
const RESOLUTION_SCHEMA: u16 = 1;

/// Which checkpoints to take back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selection {
    /// These checkpoints.
    Checkpoints(Vec<String>),
    /// Every checkpoint of one prompt round of the session.
    Turn(u64),
    /// Every checkpoint from this prompt round on.
    SinceTurn(u64),
}

/// A state in the three-way comparison.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum ThreeWayState {
    /// A file with this keyed digest; `version` is `device:inode:mtime-ns` when known.
    Present {
        /// Keyed digest, hex.
        digest: String,
        /// File version, when known.
        version: Option<String>,
    },
    /// No file.
    Absent,
    /// Cannot be told (a symlink, an unreadable file, an image without a digest).
    Unknown,
}

/// The concrete inverse of one mutation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum InverseOperation {
    /// Undo an edit: write the pre-image back.
    #[serde(rename_all = "camelCase")]
    RestorePreImage {
        /// Its keyed digest.
        pre_image_digest: String,
    },
    /// Undo a create: remove the file (already gone is fine).
    DeleteFile,
    /// Undo a delete: recreate the file from its artifact.
    #[serde(rename_all = "camelCase")]
    RestoreFromArtifact {
        /// The artifact holding the original.
        artifact_id: String,
    },
}

/// What a person may choose for a conflicting target. Never overwrite, retry or continue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SafeChoice {
    /// Leave the file as it is.
    SkipTarget,
    /// Write a sanitized unified diff that would take the file to its pre-image.
    ExportSanitizedPatch,
    /// Write a three-way merge for the person to edit, then `rollback resolve` applies it.
    UserAuthoredResolution,
}

/// The safe choices every conflict offers.
pub const SAFE_CHOICES: [SafeChoice; 3] =
    [SafeChoice::SkipTarget, SafeChoice::ExportSanitizedPatch, SafeChoice::UserAuthoredResolution];

/// Why a target conflicts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ConflictReason {
    /// The path is a symlink now, or lies behind one.
    BehindSymlink,
    /// The agent's file was deleted since.
    TargetDeleted,
    /// A different file (another inode, or something that is not a file) is there now.
    TargetRecreated,
    /// The file was changed since.
    ContentConflict,
    /// The stored original failed verification.
    BinaryCorrupt,
    /// The pre-image has no digest to restore or compare with.
    NoPreImageDigest,
}

/// The decision for one target.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Outcome {
    /// Safe to take back.
    #[serde(rename_all = "camelCase")]
    AppliedEligible {
        /// What to do.
        inverse_operation: InverseOperation,
        /// What must be at the path when it is done.
        expected_current: ThreeWayState,
        /// The file is already as it was before the mutation.
        no_op: bool,
    },
    /// Someone else's work is in the way.
    #[serde(rename_all = "camelCase")]
    Conflict {
        /// Why.
        reason_code: ConflictReason,
        /// What the person may do.
        safe_choices: Vec<SafeChoice>,
        /// For people.
        detail: String,
    },
    /// Excluded by the caller or not covered.
    Skipped {
        /// Why.
        reason: String,
    },
    /// The current file or the stored original cannot be read.
    #[serde(rename_all = "camelCase")]
    Inaccessible {
        /// `unreadable`, `missing-artifact`, `evicted`, `recovery-locked`.
        cause_code: String,
    },
    /// The file's identity changed (renamed, recreated with the same content, case or
    /// Unicode form of its name changed).
    #[serde(rename_all = "camelCase")]
    Mismatch {
        /// `identity-changed`.
        reason_code: String,
        /// For people.
        detail: String,
    },
    /// Nobody can tell what is safe: open handles, or an operation whose outcome is unknown.
    UnknownOutcome {
        /// Why.
        reason: String,
    },
}

impl Outcome {
    /// The stable category name (`applied-eligible`, `conflict`, …).
    pub fn category(&self) -> &'static str {
        match self {
            Outcome::AppliedEligible { .. } => "applied-eligible",
            Outcome::Conflict { .. } => "conflict",
            Outcome::Skipped { .. } => "skipped",
            Outcome::Inaccessible { .. } => "inaccessible",
            Outcome::Mismatch { .. } => "mismatch",
            Outcome::UnknownOutcome { .. } => "unknown-outcome",
        }
    }

    fn eligible(&self) -> bool {
        matches!(self, Outcome::AppliedEligible { .. })
    }

    fn residual(&self) -> bool {
        !matches!(self, Outcome::AppliedEligible { .. } | Outcome::Skipped { .. })
    }
}

fn conflict(reason_code: ConflictReason, detail: impl Into<String>) -> Outcome {
    Outcome::Conflict { reason_code, safe_choices: SAFE_CHOICES.to_vec(), detail: detail.into() }
}

fn mismatch(detail: impl Into<String>) -> Outcome {
    Outcome::Mismatch { reason_code: "identity-changed".into(), detail: detail.into() }
}

fn inaccessible(cause: &str) -> Outcome {
    Outcome::Inaccessible { cause_code: cause.into() }
}

/// What can be said about a checkpoint record as a whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RecordStatus {
    /// Committed and verified.
    Usable,
    /// Its process died before the mutation was dispatched: nothing happened.
    Abandoned,
    /// Its process died after dispatch: the journal ends in `OperationUnknownOutcome`.
    UnknownOutcome,
    /// Not committed (an incomplete stage, or an external stage awaiting commit).
    RecoveryLocked,
    /// Its content was evicted by retention.
    Evicted,
}

fn record_status(r: &CheckpointRecord) -> RecordStatus {
    match r.stage_state {
        StageState::Committed if r.retention_state == RetentionState::Evicted => RecordStatus::Evicted,
        StageState::Committed => RecordStatus::Usable,
        StageState::Unreachable => match r.mutation.commit_state {
            CommitState::Abandoned => RecordStatus::Abandoned,
            CommitState::UnknownOutcome => RecordStatus::UnknownOutcome,
            _ => RecordStatus::RecoveryLocked,
        },
        StageState::Staging | StageState::Staged => RecordStatus::RecoveryLocked,
    }
}

/// Whether the stored pre-image bytes can be had.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PreBytes {
    /// Read and verified (or not needed: the file did not exist).
    Available,
    /// Not stored (unprotected) or gone.
    Missing,
    /// Evicted by retention.
    Evicted,
    /// Failed verification.
    Corrupt,
    /// Belongs to an incomplete stage.
    Locked,
}

/// What is at the path, as the decision sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Seen {
    /// Nothing; `moved` names a sibling that is the same file renamed, or a name equal
    /// but for case or Unicode form.
    Absent { moved: Option<String> },
    /// A regular file.
    File { digest: String, identity: Option<FileIdentity>, held_by: Vec<u32> },
    /// A symlink at the path or one of its parents.
    BehindSymlink,
    /// A directory or special file.
    Other,
    /// Exists but cannot be read.
    Unreadable,
}

impl Seen {
    fn state(&self) -> ThreeWayState {
        match self {
            Seen::Absent { .. } => ThreeWayState::Absent,
            Seen::File { digest, identity, .. } => {
                ThreeWayState::Present { digest: digest.clone(), version: identity.as_ref().map(version_of) }
            }
            _ => ThreeWayState::Unknown,
        }
    }

    fn digest(&self) -> Option<&str> {
        match self {
            Seen::File { digest, .. } => Some(digest),
            _ => None,
        }
    }
}

fn version_of(id: &FileIdentity) -> String {
    format!("{}:{}:{}", id.device, id.inode, id.mtime_ns)
}

fn image_state(image: Option<&ImageRecord>) -> ThreeWayState {
    match image {
        Some(i) if !i.present => ThreeWayState::Absent,
        Some(ImageRecord { digest: Some(d), identity, .. }) => {
            ThreeWayState::Present { digest: d.clone(), version: identity.as_ref().map(version_of) }
        }
        _ => ThreeWayState::Unknown,
    }
}

/// Everything [`decide`] looks at for one target.
#[derive(Debug, Clone)]
pub(crate) struct Inputs<'a> {
    pub status: RecordStatus,
    pub pre: &'a ImageRecord,
    pub post: Option<&'a ImageRecord>,
    pub seen: &'a Seen,
    /// Whether `seen` is a state an earlier (newer) step of this rollback would leave,
    /// rather than what is on disk: then there is no identity to compare.
    pub virtual_state: bool,
    pub pre_bytes: PreBytes,
    pub excluded: bool,
    /// A newer mutation of this path could not be taken back by this rollback (or was
    /// already taken back by someone else): an older one must not be built on top.
    pub later_not_taken_back: bool,
}

/// The one decision: what to do with one target. Used by preview and apply alike.
pub(crate) fn decide(i: &Inputs<'_>) -> Outcome {
    if i.excluded {
        return Outcome::Skipped { reason: "excluded by the caller (skip-target)".into() };
    }
    match i.status {
        RecordStatus::Usable => {}
        RecordStatus::Abandoned => {
            return Outcome::Skipped { reason: "not covered: the mutation was never dispatched".into() };
        }
        RecordStatus::UnknownOutcome => {
            return Outcome::UnknownOutcome {
                reason: "the operation's journal ends in OperationUnknownOutcome".into(),
            };
        }
        RecordStatus::RecoveryLocked => return inaccessible("recovery-locked"),
        RecordStatus::Evicted => return inaccessible("evicted"),
    }
    let Some(post) = i.post else { return inaccessible("recovery-locked") };
    if i.later_not_taken_back {
        return conflict(
            ConflictReason::ContentConflict,
            "a later mutation of this file cannot be taken back (or someone else already changed it back), so this one cannot either",
        );
    }
    match i.seen {
        Seen::BehindSymlink => return conflict(ConflictReason::BehindSymlink, "the path is a symlink or behind one"),
        Seen::Unreadable => return inaccessible("unreadable"),
        Seen::Other => return conflict(ConflictReason::TargetRecreated, "something other than a file is there now"),
        Seen::File { held_by, .. } if !held_by.is_empty() => {
            return Outcome::UnknownOutcome { reason: format!("the file is open in process(es) {held_by:?}") };
        }
        _ => {}
    }
    if i.pre.present && i.pre.digest.is_none() {
        return conflict(ConflictReason::NoPreImageDigest, "the checkpoint has no digest of the original");
    }
    let inverse = match (i.pre.present, post.present) {
        (false, _) => InverseOperation::DeleteFile,
        (true, false) => {
            InverseOperation::RestoreFromArtifact { artifact_id: i.pre.artifact_id.clone().unwrap_or_default() }
        }
        (true, true) => {
            InverseOperation::RestorePreImage { pre_image_digest: i.pre.digest.clone().unwrap_or_default() }
        }
    };
    let expected = image_state(Some(i.pre));
    let eligible = |no_op: bool| Outcome::AppliedEligible {
        inverse_operation: inverse.clone(),
        expected_current: expected.clone(),
        no_op,
    };
    // Already as it was before the mutation: nothing to write.
    let at_pre = match i.seen {
        Seen::Absent { .. } => !i.pre.present,
        Seen::File { digest, .. } => i.pre.digest.as_deref() == Some(digest.as_str()),
        _ => false,
    };
    let at_post = match i.seen {
        Seen::Absent { .. } => !post.present,
        Seen::File { digest, .. } => post.digest.as_deref() == Some(digest.as_str()),
        _ => false,
    };
    if i.virtual_state && !at_post {
        // The newer mutation started from something other than this one's result:
        // someone else changed the file in between, and that version is theirs.
        return conflict(
            ConflictReason::ContentConflict,
            "someone else changed the file between this mutation and a later one",
        );
    }
    if at_pre {
        return eligible(true);
    }
    let outcome = match (post.present, i.seen) {
        (true, Seen::Absent { moved: Some(name) }) => mismatch(format!("the file is now at {name:?}")),
        (true, Seen::Absent { moved: None }) => {
            conflict(ConflictReason::TargetDeleted, "the file the agent wrote was deleted since")
        }
        (true, Seen::File { digest, identity, .. }) => {
            let same_content = post.digest.as_deref() == Some(digest.as_str());
            let same_file = i.virtual_state
                || match (identity, post.identity) {
                    (Some(now), Some(then)) => (now.device, now.inode) == (then.device, then.inode),
                    _ => true,
                };
            match (same_content, same_file) {
                (true, true) => eligible(false),
                (true, false) => mismatch("the same content is there, but as a different file (recreated)"),
                (false, true) => conflict(ConflictReason::ContentConflict, "the file was changed since"),
                (false, false) => conflict(ConflictReason::TargetRecreated, "a different file is there now"),
            }
        }
        (false, Seen::Absent { .. }) => eligible(false),
        (false, Seen::File { .. }) => {
            conflict(ConflictReason::TargetRecreated, "a file was created where the agent deleted one")
        }
        _ => unreachable!("symlinks, others and unreadable files were decided above"),
    };
    if !outcome.eligible() || !i.pre.present {
        return outcome;
    }
    match i.pre_bytes {
        PreBytes::Available => outcome,
        PreBytes::Missing => inaccessible("missing-artifact"),
        PreBytes::Evicted => inaccessible("evicted"),
        PreBytes::Locked => inaccessible("recovery-locked"),
        PreBytes::Corrupt => conflict(ConflictReason::BinaryCorrupt, "the stored original failed verification"),
    }
}

/// The analysis of one target.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TargetAnalysis {
    /// The checkpoint.
    pub checkpoint_id: String,
    /// The target's index in it.
    pub target_index: usize,
    /// The path.
    pub path: RelPath,
    /// What the mutation did.
    pub effect: EffectKind,
    /// Before the mutation.
    pub pre_image: ThreeWayState,
    /// After the mutation.
    pub post_image: ThreeWayState,
    /// Now (or as newer steps of this rollback would leave it).
    pub current_state: ThreeWayState,
    /// The decision.
    pub outcome: Outcome,
}

/// What one path will become.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Final {
    File { bytes: Vec<u8>, mode: Option<u32> },
    Absent,
}

/// One path: its real current state, the steps on it (newest first), and the write.
#[derive(Debug, Clone)]
struct PathPlan {
    path: RelPath,
    real: Seen,
    real_bytes: Option<Vec<u8>>,
    steps: Vec<TargetAnalysis>,
    write: Option<Final>,
}

/// A preview: every target's decision and the plan id apply must match.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Analysis {
    /// Digest of everything the plan depends on.
    pub plan_id: String,
    /// The checkpoints taken back, newest first.
    pub checkpoint_ids: Vec<String>,
    /// Every target, newest mutation first per path.
    pub targets: Vec<TargetAnalysis>,
    /// Counts by outcome category.
    pub counts: BTreeMap<String, u64>,
    /// `full`, `partial` or `blocked` if applied now.
    pub result_type: ResultType,
    /// Whether open handles could be checked on this system.
    pub open_handles_checked: bool,
    #[serde(skip)]
    paths: Vec<PathPlan>,
}

/// The aggregate result of a rollback.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ResultType {
    /// Every target was taken back (or was already back).
    Full,
    /// Some were, some were not.
    Partial,
    /// None could be.
    Blocked,
}

/// What the caller chose for a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Choice {
    /// Leave it.
    Skip,
    /// Write a sanitized patch beside it.
    Patch,
    /// Write a three-way merge beside it for `rollback resolve`.
    Resolve,
}

impl Choice {
    /// Parses `skip`, `patch`, `resolve`.
    pub fn parse(text: &str) -> Result<Self> {
        match text {
            "skip" => Ok(Choice::Skip),
            "patch" => Ok(Choice::Patch),
            "resolve" => Ok(Choice::Resolve),
            other => Err(Error::invalid(format!("unknown choice {other:?}; use skip, patch or resolve"))),
        }
    }
}

/// Where a rollback happens.
#[derive(Debug, Clone, Copy)]
pub struct Context<'a> {
    /// The store.
    pub store: &'a Store,
    /// The workspace.
    pub workspace: &'a Workspace,
    /// The session.
    pub session: &'a Session,
}

fn select(ctx: Context<'_>, selection: &Selection) -> Result<Vec<CheckpointRecord>> {
    let mut records = match selection {
        Selection::Checkpoints(ids) => {
            if ids.is_empty() {
                return Err(Error::invalid("name at least one checkpoint, or use --turn / --since-turn"));
            }
            let mut out = Vec::new();
            for id in ids {
                let r = checkpoint::load(ctx.store, id)?;
                if r.workspace_id != ctx.workspace.id {
                    return Err(Error::invalid(format!("checkpoint {id} belongs to another workspace")));
                }
                out.push(r);
            }
            out
        }
        Selection::Turn(t) | Selection::SinceTurn(t) => {
            let all = checkpoint::list(ctx.store, ctx.session, ListFilter { prompt_round: None, all: true })?;
            let since = matches!(selection, Selection::SinceTurn(_));
            // A turn's own mutations; earlier rollbacks are taken back only when named.
            all.into_iter()
                .filter(|r| r.mutation.kind != OperationKind::Rollback)
                .filter(|r| r.prompt_round.is_some_and(|p| if since { p >= *t } else { p == *t }))
                .collect()
        }
    };
    // UUID v7 ids sort by creation time: newest first.
    records.sort_by(|a, b| b.checkpoint_id.cmp(&a.checkpoint_id));
    records.dedup_by(|a, b| a.checkpoint_id == b.checkpoint_id);
    Ok(records)
}

/// Looks at what is at `path` now, without following symlinks.
fn observe(
    store: &Store,
    ws: &Workspace,
    path: &RelPath,
    recorded: Option<&FileIdentity>,
) -> Result<(Seen, Option<Vec<u8>>)> {
    let parent = match files::open_parent(&ws.root, path, false) {
        Ok(p) => p,
        Err(e) if e.code == ErrorCode::PathRejected => return Ok((Seen::BehindSymlink, None)),
        Err(e) if e.code == ErrorCode::NotFound => return Ok((Seen::Absent { moved: None }, None)),
        Err(e) => return Err(e),
    };
    Ok(match parent.observe()? {
        Observed::Absent => (Seen::Absent { moved: moved_to(&parent, recorded) }, None),
        Observed::File { bytes, identity } => {
            let digest = hex(&store.keys().content_id(&bytes));
            (Seen::File { digest, identity: Some(identity), held_by: Vec::new() }, Some(bytes))
        }
        Observed::Symlink => (Seen::BehindSymlink, None),
        Observed::Other => (Seen::Other, None),
        Observed::Unreadable => (Seen::Unreadable, None),
    })
}

/// A sibling that is the recorded file under another name, or a name equal to the
/// target's but for case or Unicode normalisation.
fn moved_to(parent: &files::Parent, recorded: Option<&FileIdentity>) -> Option<String> {
    let siblings = parent.siblings().ok()?;
    let fold = |n: &OsStr| String::from_utf8_lossy(n.as_bytes()).nfc().collect::<String>().to_lowercase();
    let target = fold(parent.name());
    siblings
        .iter()
        .find(|(name, ino)| recorded.is_some_and(|r| r.inode == *ino) || fold(name) == target)
        .map(|(name, _)| String::from_utf8_lossy(name.as_bytes()).into_owned())
}

/// Reads (and verifies) a step's pre-image bytes.
fn pre_bytes(store: &Store, r: &CheckpointRecord, index: usize) -> (PreBytes, Option<Vec<u8>>) {
    let pre = &r.targets[index].pre_image;
    if !pre.present {
        return (PreBytes::Available, None);
    }
    if r.retention_state == RetentionState::Evicted {
        return (PreBytes::Evicted, None);
    }
    match checkpoint::read_image(store, r, index, ImageRole::Pre) {
        Ok(Some((_, bytes))) => (PreBytes::Available, Some(bytes)),
        Ok(None) => (PreBytes::Available, None),
        Err(e) => match e.code {
            ErrorCode::Corrupt => (PreBytes::Corrupt, None),
            ErrorCode::RecoveryLocked => (PreBytes::Locked, None),
            _ => (PreBytes::Missing, None),
        },
    }
}

/// Runs the decision over the steps of one path, newest first, each against the state
/// the newer ones would leave; returns the analyses and the write (if any).
fn decide_path(
    records: &[&CheckpointRecord],
    steps: &[(usize, usize)],
    real: &Seen,
    excluded: bool,
    pre_cache: &HashMap<(usize, usize), (PreBytes, Option<Vec<u8>>)>,
) -> (Vec<TargetAnalysis>, Option<Final>) {
    let mut seen = real.clone();
    let mut virtual_state = false;
    let mut later_not_taken_back = false;
    let mut final_state: Option<Final> = None;
    let mut out = Vec::with_capacity(steps.len());
    for &(ri, ti) in steps {
        let r = records[ri];
        let t = &r.targets[ti];
        let (pb, bytes) = pre_cache.get(&(ri, ti)).cloned().unwrap_or((PreBytes::Missing, None));
        let status = record_status(r);
        let inputs = Inputs {
            status,
            pre: &t.pre_image,
            post: t.post_image.as_ref(),
            seen: &seen,
            virtual_state,
            pre_bytes: pb,
            excluded,
            later_not_taken_back,
        };
        let outcome = decide(&inputs);
        out.push(TargetAnalysis {
            checkpoint_id: r.checkpoint_id.clone(),
            target_index: ti,
            path: t.path.clone(),
            effect: t.effect,
            pre_image: image_state(Some(&t.pre_image)),
            post_image: image_state(t.post_image.as_ref()),
            current_state: seen.state(),
            outcome: outcome.clone(),
        });
        let never_happened = status == RecordStatus::Abandoned;
        if !outcome.eligible() && !never_happened {
            later_not_taken_back = true;
        }
        if let Outcome::AppliedEligible { no_op, .. } = outcome {
            if no_op && !virtual_state && seen.state() != image_state(t.post_image.as_ref()) {
                // On disk it is already back at this mutation's pre-image, but not because
                // of this rollback: older mutations must not build on someone else's state.
                later_not_taken_back = true;
            }
            if !no_op {
                final_state = Some(match bytes {
                    Some(bytes) => Final::File { bytes, mode: t.pre_image.identity.map(|i| i.permissions()) },
                    None => Final::Absent,
                });
            }
            seen = match &t.pre_image {
                ImageRecord { present: true, digest: Some(d), .. } => {
                    Seen::File { digest: d.clone(), identity: None, held_by: Vec::new() }
                }
                _ => Seen::Absent { moved: None },
            };
            virtual_state = true;
        }
    }
    // Nothing to write if the path already is what the steps would make it.
    let write = final_state.filter(|f| match (f, real) {
        (Final::Absent, Seen::Absent { .. }) => false,
        (Final::File { .. }, Seen::File { digest, .. }) => Some(digest.as_str()) != seen.digest(),
        _ => true,
    });
    (out, write)
}

fn plan_id(store: &Store, checkpoint_ids: &[String], paths: &[(RelPath, ThreeWayState, Vec<Outcome>)]) -> String {
    let material = serde_json::json!({ "checkpoints": checkpoint_ids, "paths": paths });
    let bytes = serde_json::to_vec(&material).expect("plan material serializes");
    hex(&store.keys().lookup_id("rollback-plan", &bytes)[..16])
}

/// Analyses taking back `selection` (the preview). Changes nothing.
///
/// # Errors
/// `not-found` for an unknown checkpoint id; `corrupt` if a selected record was altered.
pub fn analyze(ctx: Context<'_>, selection: &Selection, choices: &BTreeMap<RelPath, Choice>) -> Result<Analysis> {
    let records = select(ctx, selection)?;
    let refs: Vec<&CheckpointRecord> = records.iter().collect();
    let mut by_path: BTreeMap<RelPath, Vec<(usize, usize)>> = BTreeMap::new();
    for (ri, r) in refs.iter().enumerate() {
        for (ti, t) in r.targets.iter().enumerate() {
            by_path.entry(t.path.clone()).or_default().push((ri, ti));
        }
    }
    let mut pre_cache = HashMap::new();
    for steps in by_path.values() {
        for &(ri, ti) in steps {
            if record_status(refs[ri]) == RecordStatus::Usable {
                pre_cache.insert((ri, ti), pre_bytes(ctx.store, refs[ri], ti));
            }
        }
    }
    let mut observed = Vec::with_capacity(by_path.len());
    for (path, steps) in &by_path {
        let (ri, ti) = steps[0];
        let recorded = refs[ri].targets[ti].post_image.as_ref().and_then(|p| p.identity);
        let (seen, bytes) = observe(ctx.store, ctx.workspace, path, recorded.as_ref())?;
        observed.push((path.clone(), steps.clone(), seen, bytes));
    }
    mark_open_handles(&mut observed);
    let mut paths = Vec::with_capacity(observed.len());
    let mut plan_material = Vec::with_capacity(observed.len());
    for (path, steps, seen, bytes) in observed {
        let excluded = choices.get(&path) == Some(&Choice::Skip);
        let (analyses, write) = decide_path(&refs, &steps, &seen, excluded, &pre_cache);
        // The plan id covers what the workspace and the checkpoints say, not the caller's
        // choices: choosing to skip or export a conflict after the preview is the point.
        let unchosen = if excluded { decide_path(&refs, &steps, &seen, false, &pre_cache).0 } else { analyses.clone() };
        plan_material.push((path.clone(), seen.state(), unchosen.into_iter().map(|a| a.outcome).collect()));
        paths.push(PathPlan { path, real: seen, real_bytes: bytes, steps: analyses, write });
    }
    let checkpoint_ids: Vec<String> = records.iter().map(|r| r.checkpoint_id.clone()).collect();
    let plan_id = plan_id(ctx.store, &checkpoint_ids, &plan_material);
    Ok(summarize(plan_id, checkpoint_ids, paths))
}

fn summarize(plan_id: String, checkpoint_ids: Vec<String>, paths: Vec<PathPlan>) -> Analysis {
    let targets: Vec<TargetAnalysis> = paths.iter().flat_map(|p| p.steps.iter().cloned()).collect();
    let mut counts = BTreeMap::new();
    for t in &targets {
        *counts.entry(t.outcome.category().to_string()).or_insert(0) += 1;
    }
    let result_type = result_type(&targets);
    Analysis {
        plan_id,
        checkpoint_ids,
        targets,
        counts,
        result_type,
        open_handles_checked: handles::available(),
        paths,
    }
}

fn result_type(targets: &[TargetAnalysis]) -> ResultType {
    let residual = targets.iter().filter(|t| t.outcome.residual()).count();
    let eligible = targets.iter().filter(|t| t.outcome.eligible()).count();
    match (residual, eligible) {
        (0, _) => ResultType::Full,
        (_, 0) => ResultType::Blocked,
        _ => ResultType::Partial,
    }
}

fn mark_open_handles(observed: &mut [(RelPath, Vec<(usize, usize)>, Seen, Option<Vec<u8>>)]) {
    let keys: HashSet<(u64, u64)> = observed
        .iter()
        .filter_map(|(_, _, s, _)| match s {
            Seen::File { identity: Some(id), .. } => Some((id.device, id.inode)),
            _ => None,
        })
        .collect();
    let held = handles::holders(&keys);
    for (_, _, seen, _) in observed.iter_mut() {
        if let Seen::File { identity: Some(id), held_by, .. } = seen
            && let Some(pids) = held.get(&(id.device, id.inode))
        {
            *held_by = pids.clone();
        }
    }
}

/// A side file written for a safe choice.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ChoiceFile {
    /// The conflicting path.
    pub path: RelPath,
    /// `patch` or `resolve`.
    pub choice: Choice,
    /// The file written, relative to the workspace.
    pub file: RelPath,
    /// For a merge: whether it still has conflict markers to edit.
    pub has_conflict_markers: bool,
}

/// A residual conflict and what the person may do about it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Residual {
    /// The path.
    pub path: RelPath,
    /// The checkpoint.
    pub checkpoint_id: String,
    /// The outcome category.
    pub category: String,
    /// The decision.
    pub outcome: Outcome,
    /// The safe choices.
    pub safe_choices: Vec<SafeChoice>,
}

/// An effect no rollback can take back.
#[derive(Debug, Clone, Serialize)]
pub struct ExcludedEffect {
    /// The category.
    pub effect: &'static str,
    /// Always `never-protected`.
    pub status: &'static str,
}

/// The result of applying a rollback.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RollbackResult {
    /// `full`, `partial` or `blocked`.
    pub result_type: ResultType,
    /// The plan that was applied.
    pub plan_id: String,
    /// Per-target outcomes after apply (re-classified where something changed).
    pub targets: Vec<TargetAnalysis>,
    /// Paths actually written.
    pub applied_paths: Vec<RelPath>,
    /// Counts by category.
    pub counts: BTreeMap<String, u64>,
    /// What still stands in the way, with the safe choices.
    pub residual_conflicts: Vec<Residual>,
    /// Side files written for the caller's choices.
    pub choice_files: Vec<ChoiceFile>,
    /// Effects never reversible.
    pub excluded_effects: Vec<ExcludedEffect>,
    /// The checkpoint recording this rollback (roll it back to undo the rollback).
    pub rollback_checkpoint_id: Option<String>,
}

/// Effects no rollback can take back, with status `never-protected`.
pub fn excluded_effects() -> Vec<ExcludedEffect> {
    EXCLUDED_EFFECTS.iter().map(|e| ExcludedEffect { effect: e, status: "never-protected" }).collect()
}

/// Applies the rollback of `selection`. With `plan`, refuses (changing nothing) unless the
/// analysis made now has that plan id.
///
/// # Errors
/// `conflict` if `plan` no longer matches; `over-cap` if the rollback's own checkpoint
/// would break a cap; I/O errors.
pub fn apply(
    ctx: Context<'_>,
    selection: &Selection,
    choices: &BTreeMap<RelPath, Choice>,
    plan: Option<&str>,
) -> Result<RollbackResult> {
    let analysis = analyze(ctx, selection, choices)?;
    if let Some(plan) = plan
        && plan != analysis.plan_id
    {
        return Err(Error::new(
            ErrorCode::Conflict,
            format!(
                "the workspace or the checkpoints changed since plan {plan} was made (it is now {}); nothing was changed — preview again",
                analysis.plan_id
            ),
        )
        .with_details(serde_json::json!({ "expectedPlanId": plan, "currentPlanId": analysis.plan_id })));
    }
    let records = select(ctx, selection)?;
    let refs: Vec<&CheckpointRecord> = records.iter().collect();
    let mut paths = analysis.paths;

    // Steps 1-3: re-resolve, capture, re-validate (re-classify through the same decision).
    for plan in paths.iter_mut().filter(|p| p.write.is_some()) {
        let first = &plan.steps[0];
        let recorded = refs
            .iter()
            .find(|r| r.checkpoint_id == first.checkpoint_id)
            .and_then(|r| r.targets[first.target_index].post_image.as_ref().and_then(|p| p.identity));
        let (mut seen, bytes) = observe(ctx.store, ctx.workspace, &plan.path, recorded.as_ref())?;
        let mut one = [(plan.path.clone(), Vec::new(), seen.clone(), None)];
        mark_open_handles(&mut one);
        seen = one[0].2.clone();
        if seen != plan.real {
            let steps = step_indices(&refs, &plan.steps);
            let excluded = choices.get(&plan.path) == Some(&Choice::Skip);
            let mut cache = HashMap::new();
            for &(ri, ti) in &steps {
                if record_status(refs[ri]) == RecordStatus::Usable {
                    cache.insert((ri, ti), pre_bytes(ctx.store, refs[ri], ti));
                }
            }
            let (analyses, write) = decide_path(&refs, &steps, &seen, excluded, &cache);
            plan.steps = analyses;
            plan.write = write;
            plan.real = seen;
            plan.real_bytes = bytes;
        }
    }

    let writes: Vec<usize> = (0..paths.len()).filter(|i| paths[*i].write.is_some()).collect();
    let mut applied_paths = Vec::new();
    let mut rollback_checkpoint_id = None;
    if !writes.is_empty() {
        // Step 4: the rollback's own checkpoint, with the real pre-images, committed first.
        let targets: Vec<PreparedTarget> = writes
            .iter()
            .map(|&i| {
                let p = &paths[i];
                let current = match (&p.real, &p.real_bytes) {
                    (Seen::File { identity: Some(identity), .. }, Some(bytes)) => {
                        Current::File { bytes: bytes.clone(), identity: *identity }
                    }
                    _ => Current::Absent,
                };
                let final_present = matches!(p.write, Some(Final::File { .. }));
                let effect = match (matches!(current, Current::File { .. }), final_present) {
                    (false, _) => EffectKind::Create,
                    (true, false) => EffectKind::Delete,
                    (true, true) => EffectKind::Edit,
                };
                let planned_dirs = if final_present {
                    files::missing_parents(&ctx.workspace.root, &p.path).unwrap_or_default()
                } else {
                    Vec::new()
                };
                PreparedTarget { path: p.path.clone(), effect, current, planned_dirs }
            })
            .collect();
        let bytes: u64 = writes
            .iter()
            .map(|&i| {
                paths[i].real_bytes.as_ref().map_or(0, |b| b.len() as u64)
                    + match &paths[i].write {
                        Some(Final::File { bytes, .. }) => bytes.len() as u64,
                        _ => 0,
                    }
            })
            .sum();
        let verdict = retention::evaluate_capacity(ctx.store.settings(), checkpoint::usage(ctx.store)?, bytes);
        if !verdict.fits() {
            return Err(checkpoint::over_cap_error(&verdict, targets.iter().map(|t| &t.path)));
        }
        let owner = ctx.store.owner()?.id().to_string();
        let staged = checkpoint::stage(
            ctx.store,
            StageRequest {
                session: ctx.session,
                workspace: ctx.workspace,
                kind: OperationKind::Rollback,
                targets,
                protect: true,
                owner: Some(owner),
            },
        )?;
        let posts: Vec<PostState> = writes
            .iter()
            .map(|&i| PostState {
                current: match &paths[i].write {
                    Some(Final::File { bytes, .. }) => Current::File {
                        bytes: bytes.clone(),
                        identity: FileIdentity { device: 0, inode: 0, mode: 0, size: 0, mtime_ns: 0, ctime_ns: 0 },
                    },
                    _ => Current::Absent,
                },
                created_dirs: Vec::new(),
                identity_known: false,
            })
            .collect();
        // Step 5 is inside: the dispatch is journaled in the same transaction.
        let committed = checkpoint::commit_with(ctx.store, &staged.checkpoint_id, posts, CommitMode::BeforeMutation)?;
        let id = committed.checkpoint_id.clone();
        failpoint::hit("rollback-committed");

        // Step 6: each write a compare-and-swap against what was captured.
        for &i in &writes {
            failpoint::hit("rollback-before-swap");
            let p = &paths[i];
            let swapped = write_one(ctx, p, &id)?;
            if swapped == Swap::Done {
                applied_paths.push(p.path.clone());
                if p.write == Some(Final::Absent) {
                    remove_created_dirs(ctx, &refs, p);
                }
            } else {
                // Changed between capture and write: left exactly as the person left it.
                let plan = &mut paths[i];
                for step in plan.steps.iter_mut().filter(|s| s.outcome.eligible()) {
                    step.outcome = conflict(
                        ConflictReason::ContentConflict,
                        "the file changed between the analysis and the write; it was left as it is",
                    );
                }
                plan.write = None;
            }
        }
        // Step 7: the terminal event.
        checkpoint::finish(ctx.store, &id, applied_paths.is_empty())?;
        rollback_checkpoint_id = Some(id);
    }

    let summary = summarize(analysis.plan_id.clone(), analysis.checkpoint_ids.clone(), paths.clone());
    let mut choice_files = Vec::new();
    for p in &paths {
        let Some(choice) = choices.get(&p.path) else { continue };
        if *choice == Choice::Skip || !p.steps.iter().any(|s| s.outcome.residual()) {
            continue;
        }
        if let Some(file) = write_choice_file(ctx, &refs, p, *choice)? {
            choice_files.push(file);
        }
    }
    let residual_conflicts = summary
        .targets
        .iter()
        .filter(|t| t.outcome.residual())
        .map(|t| Residual {
            path: t.path.clone(),
            checkpoint_id: t.checkpoint_id.clone(),
            category: t.outcome.category().to_string(),
            outcome: t.outcome.clone(),
            safe_choices: SAFE_CHOICES.to_vec(),
        })
        .collect();
    Ok(RollbackResult {
        result_type: summary.result_type,
        plan_id: analysis.plan_id,
        targets: summary.targets,
        applied_paths,
        counts: summary.counts,
        residual_conflicts,
        choice_files,
        excluded_effects: excluded_effects(),
        rollback_checkpoint_id,
    })
}

/// After taking back a create, removes the directories that create made, if empty.
fn remove_created_dirs(ctx: Context<'_>, refs: &[&CheckpointRecord], p: &PathPlan) {
    for (ri, ti) in step_indices(refs, &p.steps) {
        for dir in refs[ri].targets[ti].created_dirs.iter().rev() {
            let _ = files::remove_empty_dir(&ctx.workspace.root, dir);
        }
    }
}

fn step_indices(refs: &[&CheckpointRecord], steps: &[TargetAnalysis]) -> Vec<(usize, usize)> {
    steps
        .iter()
        .filter_map(|s| refs.iter().position(|r| r.checkpoint_id == s.checkpoint_id).map(|ri| (ri, s.target_index)))
        .collect()
}

/// Writes one path's final state with a compare-and-swap against its captured state.
fn write_one(ctx: Context<'_>, p: &PathPlan, checkpoint_id: &str) -> Result<Swap> {
    let store = ctx.store;
    let temp = files::temp_name(&p.path, checkpoint_id);
    let (expected_digest, expected_inode) = match &p.real {
        Seen::File { digest, identity, .. } => (Some(digest.clone()), identity.map(|i| i.inode)),
        _ => (None, None),
    };
    let matcher = move |bytes: &[u8], identity: &FileIdentity| {
        expected_digest.as_deref() == Some(hex(&store.keys().content_id(bytes)).as_str())
            && expected_inode.is_none_or(|ino| ino == identity.inode)
    };
    match p.write.as_ref().expect("only paths with a write") {
        Final::File { bytes, mode } => {
            let parent = files::open_parent(&ctx.workspace.root, &p.path, true)?;
            let expect = match p.real {
                Seen::Absent { .. } => Expect::Absent,
                _ => Expect::File(&matcher),
            };
            parent.swap_in(&temp, bytes, *mode, &expect)
        }
        Final::Absent => match files::open_parent(&ctx.workspace.root, &p.path, false) {
            Ok(parent) => parent.remove_if(&temp, &matcher),
            Err(e) if e.code == ErrorCode::NotFound => Ok(Swap::Done),
            Err(e) => Err(e),
        },
    }
}

/// The content a path had before the oldest selected step, and the agent's newest result.
fn endpoints(refs: &[&CheckpointRecord], store: &Store, p: &PathPlan) -> (Option<Vec<u8>>, Option<Vec<u8>>) {
    let steps = step_indices(refs, &p.steps);
    let oldest = steps.last().and_then(|&(ri, ti)| pre_bytes(store, refs[ri], ti).1);
    let newest = steps
        .first()
        .and_then(|&(ri, ti)| checkpoint::read_image(store, refs[ri], ti, ImageRole::Post).ok().flatten())
        .map(|(_, b)| b);
    (oldest, newest)
}

fn side_path(path: &RelPath, suffix: &str) -> Result<RelPath> {
    let mut bytes = path.as_bytes().to_vec();
    bytes.extend_from_slice(suffix.as_bytes());
    RelPath::new(bytes)
}

fn write_side_file(ctx: Context<'_>, rel: &RelPath, content: &[u8]) -> Result<()> {
    let parent = files::open_parent(&ctx.workspace.root, rel, true)?;
    let temp = files::temp_name(rel, &uuid::Uuid::now_v7().to_string());
    match parent.observe()? {
        Observed::Absent | Observed::File { .. } => {}
        _ => return Err(Error::new(ErrorCode::PathRejected, format!("{}: not a regular file", rel.display()))),
    }
    parent.replace(&temp, content, Some(0o600))?;
    Ok(())
}

/// A pending user-authored resolution (sealed in the store: it names a path).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Resolution {
    workspace_id: String,
    path: RelPath,
    merge_file: RelPath,
    expected: ThreeWayState,
    checkpoint_ids: Vec<String>,
    created_at: String,
}

fn resolution_key(store: &Store, ws: &Workspace, path: &RelPath) -> Vec<u8> {
    let mut name = ws.id.as_bytes().to_vec();
    name.push(0);
    name.extend_from_slice(path.as_bytes());
    hex(&store.keys().lookup_id("resolution", &name)).into_bytes()
}

fn write_choice_file(
    ctx: Context<'_>,
    refs: &[&CheckpointRecord],
    p: &PathPlan,
    choice: Choice,
) -> Result<Option<ChoiceFile>> {
    let (original, agent) = endpoints(refs, ctx.store, p);
    let name = p.path.display();
    match choice {
        Choice::Skip => Ok(None),
        Choice::Patch => {
            let text = patch::sanitized_patch(&name, p.real_bytes.as_deref(), original.as_deref());
            let file = side_path(&p.path, ".turnback.patch")?;
            write_side_file(ctx, &file, text.as_bytes())?;
            Ok(Some(ChoiceFile { path: p.path.clone(), choice, file, has_conflict_markers: false }))
        }
        Choice::Resolve => {
            let (Some(current), Some(original), Some(agent)) =
                (p.real_bytes.as_deref(), original.as_deref(), agent.as_deref())
            else {
                return Err(Error::invalid(format!(
                    "{name}: a three-way merge needs the file now, the original and the agent's version; use patch or skip"
                )));
            };
            let Some((merged, markers)) = patch::three_way_merge(agent, current, original) else {
                return Err(Error::invalid(format!("{name}: binary files cannot be merged; use patch or skip")));
            };
            let file = side_path(&p.path, ".turnback-merge")?;
            write_side_file(ctx, &file, merged.as_bytes())?;
            let resolution = Resolution {
                workspace_id: ctx.workspace.id.clone(),
                path: p.path.clone(),
                merge_file: file.clone(),
                expected: p.real.state(),
                checkpoint_ids: p.steps.iter().map(|s| s.checkpoint_id.clone()).collect(),
                created_at: format_ms(now_ms()),
            };
            let key = resolution_key(ctx.store, ctx.workspace, &p.path);
            let sealed = ctx.store.seal_record(NS_RESOLUTIONS, &key, RESOLUTION_SCHEMA, &resolution)?;
            let mut txn = ctx.store.kv().begin()?;
            txn.put(NS_RESOLUTIONS, &key, &sealed)?;
            txn.commit()?;
            Ok(Some(ChoiceFile { path: p.path.clone(), choice, file, has_conflict_markers: markers }))
        }
    }
}

/// The result of `rollback resolve`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ResolveResult {
    /// The path written.
    pub path: RelPath,
    /// The checkpoint recording the write (roll it back to undo it).
    pub checkpoint_id: String,
}

/// Applies the person's edited merge file for `path` through the checked path: only if
/// the file is still as it was when the merge was written, with a checkpoint first.
///
/// # Errors
/// `not-found` without a pending resolution; `invalid-argument` if conflict markers are
/// left; `conflict` if the file changed since the merge was written.
pub fn resolve(ctx: Context<'_>, path: &RelPath) -> Result<ResolveResult> {
    let key = resolution_key(ctx.store, ctx.workspace, path);
    let resolution: Resolution = ctx
        .store
        .get_record(NS_RESOLUTIONS, &key)?
        .ok_or_else(|| Error::not_found(format!("a pending resolution for {}", path.display())))?;
    let merge_parent = files::open_parent(&ctx.workspace.root, &resolution.merge_file, false)?;
    let Current::File { bytes: merged, .. } = merge_parent.read()? else {
        return Err(Error::not_found(format!("the merge file {}", resolution.merge_file.display())));
    };
    let text = String::from_utf8_lossy(&merged);
    if text.lines().any(|l| l.starts_with("<<<<<<<") || l.starts_with(">>>>>>>")) {
        return Err(Error::invalid(format!(
            "{} still has conflict markers; edit it, then run resolve again",
            resolution.merge_file.display()
        )));
    }
    let (seen, bytes) = observe(ctx.store, ctx.workspace, path, None)?;
    if seen.state() != resolution.expected {
        return Err(Error::new(
            ErrorCode::Conflict,
            format!("{} changed since the merge was written; nothing was changed", path.display()),
        ));
    }
    let current = match (&seen, bytes) {
        (Seen::File { identity: Some(identity), .. }, Some(bytes)) => Current::File { bytes, identity: *identity },
        _ => Current::Absent,
    };
    let mode = match &current {
        Current::File { identity, .. } => Some(identity.permissions()),
        Current::Absent => None,
    };
    let effect = if matches!(current, Current::File { .. }) { EffectKind::Edit } else { EffectKind::Create };
    let owner = ctx.store.owner()?.id().to_string();
    let staged = checkpoint::stage(
        ctx.store,
        StageRequest {
            session: ctx.session,
            workspace: ctx.workspace,
            kind: OperationKind::Rollback,
            targets: vec![PreparedTarget { path: path.clone(), effect, current, planned_dirs: Vec::new() }],
            protect: true,
            owner: Some(owner),
        },
    )?;
    let post = PostState {
        current: Current::File {
            bytes: merged.clone(),
            identity: FileIdentity { device: 0, inode: 0, mode: 0, size: 0, mtime_ns: 0, ctime_ns: 0 },
        },
        created_dirs: Vec::new(),
        identity_known: false,
    };
    let committed = checkpoint::commit_with(ctx.store, &staged.checkpoint_id, vec![post], CommitMode::BeforeMutation)?;
    let plan = PathPlan {
        path: path.clone(),
        real: seen,
        real_bytes: None,
        steps: Vec::new(),
        write: Some(Final::File { bytes: merged.to_vec(), mode }),
    };
    let swapped = write_one(ctx, &plan, &committed.checkpoint_id)?;
    checkpoint::finish(ctx.store, &committed.checkpoint_id, swapped != Swap::Done)?;
    if swapped != Swap::Done {
        return Err(Error::new(
            ErrorCode::Conflict,
            format!("{} changed while it was being written; it was left as it is", path.display()),
        ));
    }
    let _ = merge_parent.remove_temp(merge_parent.name());
    let mut txn = ctx.store.kv().begin()?;
    txn.delete(NS_RESOLUTIONS, &key)?;
    txn.commit()?;
    Ok(ResolveResult { path: path.clone(), checkpoint_id: committed.checkpoint_id })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(present: bool, digest: &str, inode: u64, artifact: bool) -> ImageRecord {
        ImageRecord {
            present,
            digest: present.then(|| digest.to_string()),
            size: 1,
            content_class: None,
            artifact_id: (present && artifact).then(|| "a".to_string()),
            identity: present.then_some(FileIdentity {
                device: 1,
                inode,
                mode: 0o100644,
                size: 1,
                mtime_ns: 0,
                ctime_ns: 0,
            }),
        }
    }

    fn file(digest: &str, inode: u64) -> Seen {
        Seen::File {
            digest: digest.into(),
            identity: Some(FileIdentity { device: 1, inode, mode: 0o100644, size: 1, mtime_ns: 0, ctime_ns: 0 }),
            held_by: vec![],
        }
    }

    fn run(pre: &ImageRecord, post: &ImageRecord, seen: &Seen) -> Outcome {
        decide(&Inputs {
            status: RecordStatus::Usable,
            pre,
            post: Some(post),
            seen,
            virtual_state: false,
            pre_bytes: PreBytes::Available,
            excluded: false,
            later_not_taken_back: false,
        })
    }

    fn reason(o: &Outcome) -> String {
        match o {
            Outcome::Conflict { reason_code, .. } => {
                serde_json::to_value(reason_code).unwrap().as_str().unwrap().to_string()
            }
            Outcome::Mismatch { reason_code, .. } => reason_code.clone(),
            other => other.category().to_string(),
        }
    }

    #[test]
    fn edit_rolls_back_only_when_current_is_the_agents_version() {
        let (pre, post) = (image(true, "A", 7, true), image(true, "B", 7, true));
        assert!(matches!(run(&pre, &post, &file("B", 7)), Outcome::AppliedEligible { no_op: false, .. }));
        assert!(matches!(run(&pre, &post, &file("A", 7)), Outcome::AppliedEligible { no_op: true, .. }));
        assert_eq!(reason(&run(&pre, &post, &file("P", 7))), "content-conflict");
        assert_eq!(reason(&run(&pre, &post, &file("P", 9))), "target-recreated");
        assert_eq!(reason(&run(&pre, &post, &file("B", 9))), "identity-changed");
        assert_eq!(reason(&run(&pre, &post, &Seen::Absent { moved: None })), "target-deleted");
        assert_eq!(reason(&run(&pre, &post, &Seen::Absent { moved: Some("b".into()) })), "identity-changed");
        assert_eq!(reason(&run(&pre, &post, &Seen::BehindSymlink)), "behind-symlink");
        assert_eq!(reason(&run(&pre, &post, &Seen::Unreadable)), "inaccessible");
    }

    #[test]
    fn create_and_delete_have_their_inverses() {
        let absent = image(false, "", 0, false);
        let created = image(true, "B", 7, true);
        match run(&absent, &created, &file("B", 7)) {
            Outcome::AppliedEligible { inverse_operation: InverseOperation::DeleteFile, .. } => {}
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            run(&absent, &created, &Seen::Absent { moved: None }),
            Outcome::AppliedEligible { no_op: true, .. }
        ));
        let original = image(true, "A", 7, true);
        match run(&original, &absent, &Seen::Absent { moved: None }) {
            Outcome::AppliedEligible { inverse_operation: InverseOperation::RestoreFromArtifact { .. }, .. } => {}
            other => panic!("{other:?}"),
        }
        assert_eq!(reason(&run(&original, &absent, &file("P", 3))), "target-recreated");
    }

    #[test]
    fn stored_original_problems_block_the_inverse() {
        let (pre, post) = (image(true, "A", 7, true), image(true, "B", 7, true));
        let mut i = Inputs {
            status: RecordStatus::Usable,
            pre: &pre,
            post: Some(&post),
            seen: &file("B", 7),
            virtual_state: false,
            pre_bytes: PreBytes::Corrupt,
            excluded: false,
            later_not_taken_back: false,
        };
        assert_eq!(reason(&decide(&i)), "binary-corrupt");
        i.pre_bytes = PreBytes::Missing;
        assert_eq!(decide(&i), inaccessible("missing-artifact"));
        let no_digest = ImageRecord { digest: None, ..pre.clone() };
        i.pre = &no_digest;
        assert_eq!(reason(&decide(&i)), "no-pre-image-digest");
        i.pre = &pre;
        i.status = RecordStatus::UnknownOutcome;
        assert_eq!(decide(&i).category(), "unknown-outcome");
        i.status = RecordStatus::Usable;
        let Seen::File { digest, identity, .. } = file("B", 7) else { unreachable!() };
        let held = Seen::File { digest, identity, held_by: vec![42] };
        i.seen = &held;
        assert_eq!(decide(&i).category(), "unknown-outcome");
        i.excluded = true;
        assert_eq!(decide(&i).category(), "skipped");
    }
}
