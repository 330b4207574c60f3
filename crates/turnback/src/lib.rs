//! turnback: undo for AI coding agents.
//!
//! turnback records what an agent does to a workspace, turn by turn and edit by edit,
//! keeps it encrypted and crash-safe outside the workspace, and takes any of it back
//! without overwriting work that a person (or another session) did since. Everything goes
//! through one facade, [`Turnback`]; the `turnback` command line, the agent hooks and the
//! MCP server are thin layers over it.
//!
//! A turn, an edit, and the turn rewound:
//!
//! ```
//! use turnback::{BeginRequest, KeyConfig, Mutation, Options, Turnback};
//! # fn main() -> turnback::Result<()> {
//! let dir = tempfile::tempdir().expect("a temp dir");
//! let workspace = dir.path().join("project");
//! std::fs::create_dir(&workspace).expect("a workspace");
//! std::fs::write(workspace.join("notes.txt"), "hello\n").expect("a file");
//!
//! let options = Options {
//!     store: Some(dir.path().join("store")),
//!     keys: KeyConfig::with_key(turnback::new_master_key()?),
//!     create: true,
//!     ..Options::new(&workspace)
//! };
//! let tb = Turnback::open(&options)?;
//!
//! // The agent's turn: a start snapshot, a checkpointed edit, an end snapshot.
//! tb.begin_turn(&BeginRequest { prompt: Some("shout".into()), ..Default::default() }, None)?;
//! let edit = Mutation::Edit { path: "notes.txt".into(), old: "hello".into(), new: "HELLO".into(), all: false };
//! tb.mutate(edit, false)?;
//! tb.end_turn(None)?;
//! assert_eq!(std::fs::read_to_string(workspace.join("notes.txt")).unwrap(), "HELLO\n");
//!
//! // The whole workspace back to the start of turn 1: preview, then apply that plan.
//! let plan = tb.rewind_preview(1, &[])?;
//! let rewound = tb.rewind_apply(1, &[], Some(&plan.plan_id))?;
//! assert_eq!(std::fs::read_to_string(workspace.join("notes.txt")).unwrap(), "hello\n");
//! assert_eq!(rewound.restored_prompt.as_deref(), Some("shout"));
//! # Ok(()) }
//! ```
//!
//! The library's layers, bottom first (each imports only those below it): `base`, `fs`,
//! `watch`, `storage`, `checkpoint`, `snapshot`, `session`, `undo`, `remote`, `api` and `agent`;
//! `docs/architecture.md` describes each and the way a hook event travels through them.
#![deny(missing_docs)]
#![warn(unreachable_pub, unnameable_types)]

mod agent;
mod api;
mod base;
mod checkpoint;
mod error;
mod fs;
#[cfg(feature = "remote")]
mod remote;
mod session;
mod snapshot;
mod storage;
mod undo;
mod watch;

pub use agent::{AgentEvent, Recorded, ToolCall, ToolEffect};
#[cfg(feature = "remote")]
pub use api::views::Remote;
pub use api::views::{
    Begun, Checkpoint, Forked, Image, JournalEntry, MutationMetadata, RewoundBy, Session, ShellCall, ShellEffect,
    Snapshot, SnapshotRef, Subagent, SubagentWindow, Target, Turn, Workspace,
};
pub use api::{
    Actor, Appended, ArtifactView, BoundedInput, CheckpointList, CheckpointSummary, CheckpointView, CompareRequest,
    CompareSide, Comparison, Deleted, DiffReport, DiffRequest, DuReport, Encryption, FileText, ForkPoint, GcReport,
    InitReport, InitSettings, Inspection, InspectionProblem, KeyImport, KeyStatus, KeyVersion, Mutation,
    MutationReport, ObjectUsage, Options, Problem, Progress, Push, Runtime, SessionInfo, SessionList, SessionUsage,
    ShellRecorded, TurnList, TurnSummary, Turnback, VerifyCounts, VerifyReport, read_at_most, read_json_input,
};
#[cfg(feature = "remote")]
pub use api::{PullReports, PushReports, REMOTE_GC_GRACE, RemoteList, RemoteSessionList, SessionChoice};
pub use base::quote::{escape_controls, escape_lines, quote_name};
pub use base::time::{format_ms, now_ms};
pub use checkpoint::artifact::ImageRole;
pub use checkpoint::journal::JournalEvent;
pub use checkpoint::retention::{Breach, CapacityVerdict, RetentionVerdict};
pub use checkpoint::{
    CommitState, CoverageState, EffectKind, EvictionReport, IntegrityState, OperationKind, ReconcileReport,
    ReconciledCheckpoint, RetentionState, StageState, Unreadable as UnreadableCheckpoint,
};
pub use error::{Error, ErrorCode, Hint, Result};
pub use fs::files::FileIdentity;
pub use fs::relpath::RelPath;
pub use fs::walk::Skipped;
#[cfg(feature = "remote")]
pub use remote::gc::{RemoteGcReport, RemoteSession};
#[cfg(feature = "remote")]
pub use remote::pull::{PullProgress, PullReport};
#[cfg(feature = "remote")]
pub use remote::push::{PushProgress, PushReport};
pub use session::begin::{BeginRequest, RunningSnapshot, StartSnapshot};
pub use session::history::{
    Entry as HistoryEntry, Message, NewEntry as NewHistoryEntry, Role, Selection as HistorySelection,
    ToolCall as HistoryToolCall, View as HistoryView,
};
pub use session::import::{Format as TranscriptFormat, Imported, Scope as ImportScope};
pub use session::turn::{Shell, TurnKind};
pub use snapshot::diff::{Change, NumStat};
pub use snapshot::{LeftOut, NestedRepo, SnapshotKind};
pub use storage::content::ContentClass;
pub use storage::keys::{KeyConfig, KeySource, new_master_key};
pub use storage::settings::{Settings, SettingsOverrides, SnapshotLimits, WatchMode, format_size, parse_size};
pub use storage::store::{RotationReport, default_dir as default_store_dir};
pub use undo::guarded::ResultType;
pub use undo::rewind::{
    Action as RewindAction, PathPlan as RewindPath, Plan as RewindPlan, Reason as RewindReason, Rewound,
};
pub use undo::rollback::{
    Analysis, Choice, ChoiceFile, ConflictReason, ExcludedEffect, InverseOperation, Outcome as TargetOutcome, Residual,
    ResolveResult, RollbackResult, SafeChoice, Selection as RollbackSelection, TargetAnalysis, ThreeWayState,
};
pub use watch::{StartWatcher, WatchStatus};

#[cfg(test)]
mod layering_tests;

#[cfg(test)]
mod tests;
