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
//! - A selection by turn or sub-agent that meets a checkpoint whose record cannot be opened
//!   (altered, or gone from under the session's index) names it in
//!   `unreadableCheckpoints` and counts it as left alone: such a rollback is `partial` or
//!   `blocked`, never `full`.
//! - Patches and merge files (the safe choices) are plaintext, so they are written only
//!   into the workspace, beside their file — never into the store.

mod analysis;
mod apply;
mod choice;
mod decision;

pub use analysis::Analysis;
pub(crate) use analysis::analyze;
pub(crate) use apply::apply;
pub(crate) use choice::resolve;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::checkpoint::{EXCLUDED_EFFECTS, EffectKind};
use crate::error::{Error, Result};
use crate::fs::relpath::RelPath;
use crate::session::Session;
use crate::session::workspace::Workspace;
use crate::storage::store::Store;

/// Which checkpoints to take back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selection {
    /// These checkpoints.
    Checkpoints(Vec<String>),
    /// Every checkpoint of one prompt round of the session.
    Turn(u64),
    /// Every checkpoint from this prompt round on.
    SinceTurn(u64),
    /// Every checkpoint a sub-agent made (by the agent's id for it), in any turn.
    Subagent(String),
}

impl Selection {
    /// The selection a caller's parts make — checkpoint ids, a turn, "since a turn", a
    /// sub-agent — for every door alike: at most one of the last three, and then no ids.
    /// With none of them, the ids (an empty list selects nothing).
    ///
    /// # Errors
    /// `invalid-argument` when more than one kind of selection is given.
    pub fn from_parts(
        checkpoints: Vec<String>,
        turn: Option<u64>,
        since_turn: Option<u64>,
        subagent: Option<String>,
    ) -> Result<Selection> {
        let kinds = usize::from(!checkpoints.is_empty())
            + usize::from(turn.is_some())
            + usize::from(since_turn.is_some())
            + usize::from(subagent.is_some());
        if kinds > 1 {
            return Err(Error::invalid("select one kind of checkpoints: ids, a turn, since a turn, or a sub-agent's"));
        }
        Ok(match (turn, since_turn, subagent) {
            (Some(t), _, _) => Selection::Turn(t),
            (_, Some(t), _) => Selection::SinceTurn(t),
            (_, _, Some(id)) => Selection::Subagent(id),
            _ => Selection::Checkpoints(checkpoints),
        })
    }
}

/// A state in the three-way comparison.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
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
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
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
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
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
pub(crate) const SAFE_CHOICES: [SafeChoice; 3] =
    [SafeChoice::SkipTarget, SafeChoice::ExportSanitizedPatch, SafeChoice::UserAuthoredResolution];

/// Why a target conflicts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
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
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
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

    pub(super) fn eligible(&self) -> bool {
        matches!(self, Outcome::AppliedEligible { .. })
    }

    pub(super) fn residual(&self) -> bool {
        !matches!(self, Outcome::AppliedEligible { .. } | Outcome::Skipped { .. })
    }
}

/// The analysis of one target.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
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

/// What the caller chose for a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
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
    ///
    /// # Errors
    /// `invalid-argument` for anything else.
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
pub(crate) struct Context<'a> {
    /// The store.
    pub store: &'a Store,
    /// The workspace.
    pub workspace: &'a Workspace,
    /// The session.
    pub session: &'a Session,
}

/// A side file written for a safe choice.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
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
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
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
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
pub struct ExcludedEffect {
    /// The category.
    pub effect: &'static str,
    /// Always `never-protected`.
    pub status: &'static str,
}

/// The result of applying a rollback.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
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
    /// Checkpoints of the selection whose records cannot be opened (altered or gone),
    /// newest first: nothing of them was taken back, so the result is never `full`.
    pub unreadable_checkpoints: Vec<crate::checkpoint::Unreadable>,
    /// Side files written for the caller's choices.
    pub choice_files: Vec<ChoiceFile>,
    /// Effects never reversible.
    pub excluded_effects: Vec<ExcludedEffect>,
    /// The checkpoint recording this rollback (roll it back to undo the rollback).
    pub rollback_checkpoint_id: Option<String>,
}

pub(crate) use crate::undo::guarded::ResultType;

/// Effects no rollback can take back, with status `never-protected`.
pub(crate) fn excluded_effects() -> Vec<ExcludedEffect> {
    EXCLUDED_EFFECTS.iter().map(|e| ExcludedEffect { effect: e, status: "never-protected" }).collect()
}

/// The result of `rollback resolve`.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ResolveResult {
    /// The path written.
    pub path: RelPath,
    /// The checkpoint recording the write (roll it back to undo it).
    pub checkpoint_id: String,
    /// Effects never reversible.
    pub excluded_effects: Vec<ExcludedEffect>,
}

#[cfg(test)]
mod selection_tests {
    use super::Selection;

    #[test]
    fn a_selection_is_one_kind_of_parts_for_every_door() {
        let ids = || vec!["c1".to_string()];
        assert_eq!(Selection::from_parts(ids(), None, None, None).unwrap(), Selection::Checkpoints(ids()));
        assert_eq!(Selection::from_parts(vec![], Some(2), None, None).unwrap(), Selection::Turn(2));
        assert_eq!(Selection::from_parts(vec![], None, Some(3), None).unwrap(), Selection::SinceTurn(3));
        assert_eq!(
            Selection::from_parts(vec![], None, None, Some("a".into())).unwrap(),
            Selection::Subagent("a".into())
        );
        assert_eq!(Selection::from_parts(vec![], None, None, None).unwrap(), Selection::Checkpoints(vec![]));
        for (c, t, s, a) in [
            (ids(), Some(1), None, None),
            (vec![], Some(1), Some(2), None),
            (vec![], Some(1), None, Some("x".to_string())),
        ] {
            let e = Selection::from_parts(c, t, s, a).unwrap_err();
            assert_eq!(e.code, crate::error::ErrorCode::InvalidArgument);
        }
    }
}
