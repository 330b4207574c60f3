//! Rollback, rewind and the checkpoints they work from, through the facade.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::api::Turnback;
use crate::api::views;
use crate::checkpoint::artifact::{self, ImageRole};
use crate::checkpoint::journal;
use crate::checkpoint::retention::RetentionVerdict;
use crate::checkpoint::{self, ImageRecord, ListFilter, RetentionState, Unreadable};
use crate::error::Result;
use crate::fs::relpath::RelPath;
use crate::session::Session;
use crate::undo::rewind::{self, Plan, Rewound};
use crate::undo::rollback::{self, Analysis, Choice, ExcludedEffect, ResolveResult, RollbackResult, Selection};

/// A session's checkpoints, as `checkpoints` lists them.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct CheckpointList {
    /// The session.
    pub session_id: String,
    /// Its current prompt round.
    pub prompt_round: u64,
    /// The checkpoints, oldest first.
    pub checkpoints: Vec<CheckpointView>,
    /// Checkpoints the session's index names whose records cannot be opened (altered or
    /// gone), oldest first: listed whatever the filter says of states, never hidden.
    pub corrupt: Vec<Unreadable>,
}

/// One checkpoint with its retention, computed now.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct CheckpointView {
    /// The record.
    #[serde(flatten)]
    pub record: views::Checkpoint,
    /// Its retention state now (`eligible-for-eviction` once past its window).
    pub effective_retention: RetentionState,
    /// The verdict it comes from.
    pub retention: RetentionVerdict,
}

/// Everything about one checkpoint, as `inspect` shows it.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Inspection {
    /// The record, whatever its state.
    pub checkpoint: views::Checkpoint,
    /// Whether it is complete and verified (a rollback can use it).
    pub usable: bool,
    /// Why not, with its stable code.
    pub problem: Option<InspectionProblem>,
    /// Its retention verdict now.
    pub retention: RetentionVerdict,
    /// Its retention state now.
    pub effective_retention: RetentionState,
    /// How its content is encrypted.
    pub encryption: Encryption,
    /// Its artifacts, each checked against the store.
    pub artifacts: Vec<ArtifactView>,
    /// Plaintext bytes of its artifacts.
    pub bytes: u64,
    /// What the journal says happened to its operation, in order.
    pub journal: Vec<views::JournalEntry>,
    /// Effects no checkpoint takes back.
    pub excluded_effects: Vec<ExcludedEffect>,
}

/// Why a checkpoint is not usable.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
pub struct InspectionProblem {
    /// The stable code.
    pub code: &'static str,
    /// For people.
    pub message: String,
}

/// How a store encrypts content.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Encryption {
    /// Always `AES-256-GCM`.
    pub algorithm: &'static str,
    /// Always `zstd` (before encryption).
    pub compression: &'static str,
    /// How nonces are made.
    pub nonce: &'static str,
    /// The data-key version new writes use.
    pub current_key_version: u32,
    /// Every data-key version the store holds.
    pub key_versions: Vec<u32>,
}

/// One artifact of an inspected checkpoint.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ArtifactView {
    /// Its target's index.
    pub target: usize,
    /// Pre- or post-image.
    pub role: ImageRole,
    /// Its id.
    pub artifact_id: String,
    /// Its record, when it reads.
    pub metadata: Option<serde_json::Value>,
    /// The stable code of what is wrong with it, if anything.
    pub problem: Option<&'static str>,
}

impl Turnback {
    fn rollback_context(&self) -> Result<rollback::Context<'_>> {
        Ok(rollback::Context {
            store: &self.store,
            workspace: self.workspace_record()?,
            session: self.session_record()?,
        })
    }

    fn choices(&self, choices: &[(PathBuf, Choice)]) -> Result<BTreeMap<RelPath, Choice>> {
        choices.iter().map(|(path, choice)| Ok((self.resolve(path)?, *choice))).collect()
    }

    /// Previews taking checkpointed mutations back: every target's outcome through the one
    /// decision function, and the plan id an apply can be held to. Changes nothing.
    ///
    /// # Errors
    /// `not-found` for an unknown checkpoint; `corrupt` if a selected record was altered;
    /// `invalid-argument` for a choice on a path that is not a target.
    pub fn rollback_preview(&self, selection: &Selection, choices: &[(PathBuf, Choice)]) -> Result<Analysis> {
        rollback::analyze(self.rollback_context()?, selection, &self.choices(choices)?)
    }

    /// Applies a rollback: re-plans under the workspace lock, writes only targets that are
    /// exactly the agent's result, carries out the safe choices for conflicts, and records
    /// its own checkpoint first (roll it back to undo the rollback). The plan-id rule of
    /// [`Actor`](crate::Actor) applies.
    ///
    /// # Errors
    /// `invalid-argument` when an agent names no plan; `conflict` for a stale plan
    /// (nothing changed); `over-cap` if the rollback's checkpoint would break a cap.
    pub fn rollback_apply(
        &self,
        selection: &Selection,
        choices: &[(PathBuf, Choice)],
        plan: Option<&str>,
    ) -> Result<RollbackResult> {
        self.check_plan(plan, "rollback_preview")?;
        rollback::apply(self.rollback_context()?, selection, &self.choices(choices)?, plan)
    }

    /// Applies the person's edited three-way merge for `path` (written by a `resolve`
    /// choice), if the file is still as it was when the merge was written.
    ///
    /// # Errors
    /// `not-found` without a pending resolution; `invalid-argument` if conflict markers
    /// are left; `conflict` if the file changed.
    pub fn rollback_resolve(&self, path: &Path) -> Result<ResolveResult> {
        let rel = self.resolve(path)?;
        rollback::resolve(self.rollback_context()?, &rel)
    }

    fn forced(&self, force: &[PathBuf]) -> Result<BTreeSet<String>> {
        force.iter().map(|f| Ok(self.resolve(f)?.display())).collect()
    }

    /// Previews taking the workspace back to the start of turn `to`: what is restored,
    /// deleted and left alone (and why), from a snapshot of the workspace taken now.
    ///
    /// # Errors
    /// `not-found` if the turn or its start snapshot does not exist.
    pub fn rewind_preview(&self, to: u64, force: &[PathBuf]) -> Result<Plan> {
        rewind::plan(&self.store, self.workspace_record()?, self.session_record()?, to, &self.forced(force)?)
    }

    /// Applies a rewind to the start of turn `to`: re-plans under the workspace lock,
    /// changes only what the agents did (hand edits are left alone unless forced), records
    /// a checkpoint of everything it replaces first, and cuts the history before turn
    /// `to`. The plan-id rule of [`Actor`](crate::Actor) applies.
    ///
    /// # Errors
    /// `invalid-argument` when an agent names no plan; `conflict` for a stale plan
    /// (nothing changed); `over-cap` if its checkpoint would break a cap.
    pub fn rewind_apply(&self, to: u64, force: &[PathBuf], plan: Option<&str>) -> Result<Rewound> {
        self.check_plan(plan, "rewind_preview")?;
        rewind::apply(&self.store, self.workspace_record()?, self.session_record()?, to, &self.forced(force)?, plan)
    }

    /// The session's checkpoints (of one prompt round, with `turn`); with `all`, also
    /// incomplete, recovery-locked and evicted ones. Records that cannot be opened are
    /// always listed, as `corrupt`.
    ///
    /// # Errors
    /// Store errors.
    pub fn checkpoints(&self, turn: Option<u64>, all: bool) -> Result<CheckpointList> {
        let session = self.session_record()?;
        let round = Session::round_of(&self.store, &session.id)?.unwrap_or(session.prompt_round);
        let window = self.store.settings().retention_prompt_rounds;
        let listing = checkpoint::list(&self.store, &session.id, ListFilter { prompt_round: turn, all })?;
        let checkpoints = listing
            .records
            .into_iter()
            .map(|record| {
                let retention = record.retention(round, window);
                CheckpointView {
                    effective_retention: record.effective_retention(&retention),
                    retention,
                    record: (&record).into(),
                }
            })
            .collect();
        Ok(CheckpointList {
            session_id: session.id.clone(),
            prompt_round: round,
            checkpoints,
            corrupt: listing.unreadable,
        })
    }

    /// One checkpoint, whatever its state: targets, digests, coverage, integrity,
    /// encryption, retention, excluded effects.
    ///
    /// # Errors
    /// `not-found`; `corrupt` if the record itself was altered.
    pub fn inspect(&self, id: &str) -> Result<Inspection> {
        let store = &self.store;
        let record = checkpoint::load(store, id)?;
        let problem =
            checkpoint::get(store, id).err().map(|e| InspectionProblem { code: e.code.as_str(), message: e.message });
        let round = Session::round_of(store, &record.session_id)?.unwrap_or(0);
        let retention = record.retention(round, store.settings().retention_prompt_rounds);
        let mut artifacts = Vec::new();
        for (i, t) in record.targets.iter().enumerate() {
            for (role, image) in [(ImageRole::Pre, Some(&t.pre_image)), (ImageRole::Post, t.post_image.as_ref())] {
                let Some(ImageRecord { artifact_id: Some(aid), .. }) = image else { continue };
                let meta = artifact::record(store.kv(), aid).map(|a| {
                    serde_json::json!({"state": a.state, "digest": a.digest, "size": a.size, "contentClass": a.content_class})
                });
                artifacts.push(ArtifactView {
                    target: i,
                    role,
                    artifact_id: aid.clone(),
                    problem: meta.as_ref().err().map(|e| e.code.as_str()),
                    metadata: meta.ok(),
                });
            }
        }
        let key_versions = store.key_usage().map(|u| u.keys().copied().collect()).unwrap_or_default();
        Ok(Inspection {
            usable: problem.is_none(),
            problem,
            effective_retention: record.effective_retention(&retention),
            retention,
            encryption: Encryption {
                algorithm: "AES-256-GCM",
                compression: "zstd",
                nonce: "random 96-bit per object",
                current_key_version: store.keys().current_version(),
                key_versions,
            },
            artifacts,
            bytes: record.artifact_bytes(),
            journal: journal::events(store.kv(), &record.mutation.operation_id)?.iter().map(Into::into).collect(),
            excluded_effects: rollback::excluded_effects(),
            checkpoint: (&record).into(),
        })
    }
}
