//! The view of a checkpoint (its targets with their images, its mutation, the shell call
//! or sub-agent window it stands for) and of its journal's entries.

use serde::Serialize;

use crate::checkpoint::journal::JournalEvent;
use crate::checkpoint::{
    CommitState, CoverageState, EffectKind, IntegrityState, OperationKind, RetentionState, StageState,
};
use crate::fs::files::FileIdentity;
use crate::fs::relpath::RelPath;
use crate::storage::content::ContentClass;

/// A checkpoint: everything needed to take one mutation back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Checkpoint {
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
    pub targets: Vec<Target>,
    /// The live process working on it (none: an external stage waiting for `commit`).
    pub owner: Option<String>,
    /// The sub-agent whose tool call made it (none: the agent itself, or a person).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subagent: Option<String>,
    /// For a `shell` checkpoint: the command whose window it covers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shell: Option<ShellCall>,
    /// For a `subagent` checkpoint: the sub-agent's window.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subagent_window: Option<SubagentWindow>,
}

impl From<&crate::checkpoint::CheckpointRecord> for Checkpoint {
    fn from(r: &crate::checkpoint::CheckpointRecord) -> Self {
        Checkpoint {
            checkpoint_id: r.checkpoint_id.clone(),
            mutation: (&r.mutation).into(),
            artifact_ids: r.artifact_ids.clone(),
            parent_checkpoint_ids: r.parent_checkpoint_ids.clone(),
            coverage_state: r.coverage_state,
            retention_state: r.retention_state,
            integrity_state: r.integrity_state,
            stage_state: r.stage_state,
            created_at: r.created_at.clone(),
            committed_at: r.committed_at.clone(),
            prompt_round: r.prompt_round,
            session_id: r.session_id.clone(),
            workspace_id: r.workspace_id.clone(),
            targets: r.targets.iter().map(Into::into).collect(),
            owner: r.owner.clone(),
            subagent: r.subagent.clone(),
            shell: r.shell.as_ref().map(Into::into),
            subagent_window: r.subagent_window.as_ref().map(Into::into),
        }
    }
}

/// The seed's mutation metadata.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
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

impl From<&crate::checkpoint::MutationMetadata> for MutationMetadata {
    fn from(r: &crate::checkpoint::MutationMetadata) -> Self {
        MutationMetadata {
            operation_id: r.operation_id.clone(),
            aggregate_version: r.aggregate_version,
            commit_state: r.commit_state,
            kind: r.kind,
        }
    }
}

/// One file a checkpoint covers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Target {
    /// The path, relative to the workspace root.
    pub path: RelPath,
    /// What the mutation did to it.
    pub effect: EffectKind,
    /// Before.
    pub pre_image: Image,
    /// After (none until committed).
    pub post_image: Option<Image>,
    /// Parent directories the mutation created.
    pub created_dirs: Vec<RelPath>,
    /// The digest of the content the mutation meant to write, recorded with the dispatch
    /// (so reconcile can tell its temporary file from someone else's content).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub intended_digest: Option<String>,
}

impl From<&crate::checkpoint::TargetRecord> for Target {
    fn from(r: &crate::checkpoint::TargetRecord) -> Self {
        Target {
            path: r.path.clone(),
            effect: r.effect,
            pre_image: (&r.pre_image).into(),
            post_image: r.post_image.as_ref().map(Into::into),
            created_dirs: r.created_dirs.clone(),
            intended_digest: r.intended_digest.clone(),
        }
    }
}

/// One side (pre or post) of a target.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Image {
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

impl From<&crate::checkpoint::ImageRecord> for Image {
    fn from(r: &crate::checkpoint::ImageRecord) -> Self {
        Image {
            present: r.present,
            digest: r.digest.clone(),
            size: r.size,
            content_class: r.content_class,
            artifact_id: r.artifact_id.clone(),
            identity: r.identity,
        }
    }
}

/// The shell command a `shell` checkpoint covers. Whatever changed in the workspace between
/// the snapshots taken as it started and as it finished is in its window: a person's edit
/// or a background sub-agent's made meanwhile too (the watcher cannot tell writers apart).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ShellCall {
    /// The command line, as the agent reported it.
    pub command: String,
    /// Its exit status, when the agent said.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_status: Option<i32>,
    /// The agent's id for the call.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    /// The snapshot taken as it started.
    pub before_snapshot: String,
    /// The snapshot taken as it finished.
    pub after_snapshot: String,
    /// Its paths that an edit tool call (the agent's, a sub-agent's) also changed inside
    /// the window: the window cannot tell which wrote what, so a rollback of it takes
    /// those edits back too.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub also_by_tool_calls: Vec<String>,
}

impl From<&crate::checkpoint::ShellCall> for ShellCall {
    fn from(r: &crate::checkpoint::ShellCall) -> Self {
        ShellCall {
            command: r.command.clone(),
            exit_status: r.exit_status,
            call_id: r.call_id.clone(),
            before_snapshot: r.before_snapshot.clone(),
            after_snapshot: r.after_snapshot.clone(),
            also_by_tool_calls: r.also_by_tool_calls.clone(),
        }
    }
}

/// The window a `subagent` checkpoint covers: from the sub-agent's start to its stop.
/// Whatever changed in it is the sub-agent's unless a checkpoint made inside it covers the
/// path (the sub-agent's own edits and commands, the main agent's, a rollback): those
/// paths are left to their checkpoints, so each change is taken back by one checkpoint
/// only. A background sub-agent shares its window with whoever else worked meanwhile.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct SubagentWindow {
    /// The snapshot taken as it started.
    pub before_snapshot: String,
    /// The snapshot taken as it stopped.
    pub after_snapshot: String,
    /// Paths that changed in the window but are left to the checkpoints made inside it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub left_to_checkpoints: Vec<String>,
}

impl From<&crate::checkpoint::SubagentWindow> for SubagentWindow {
    fn from(r: &crate::checkpoint::SubagentWindow) -> Self {
        SubagentWindow {
            before_snapshot: r.before_snapshot.clone(),
            after_snapshot: r.after_snapshot.clone(),
            left_to_checkpoints: r.left_to_checkpoints.clone(),
        }
    }
}

/// One journal entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct JournalEntry {
    /// The operation.
    pub operation_id: String,
    /// The checkpoint recording the operation.
    pub checkpoint_id: String,
    /// What happened.
    pub event: JournalEvent,
    /// When (RFC 3339).
    pub at: String,
}

impl From<&crate::checkpoint::journal::JournalEntry> for JournalEntry {
    fn from(r: &crate::checkpoint::journal::JournalEntry) -> Self {
        JournalEntry {
            operation_id: r.operation_id.clone(),
            checkpoint_id: r.checkpoint_id.clone(),
            event: r.event,
            at: r.at.clone(),
        }
    }
}
