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

// The crate root exports, by what a caller does with them (every item documented where it
// is defined; `unreachable_pub` and `unnameable_types` keep the list whole: nothing else is
// public, and every type a public method returns is named here).

// The facade, how it is opened, and what a door installs in it.
pub use api::{Options, Progress, Push, Runtime, Turnback};
pub use session::begin::{RunningSnapshot, StartSnapshot};
pub use storage::keys::{KeyConfig, KeySource, new_master_key};
pub use storage::settings::{Settings, SettingsOverrides, SnapshotLimits, WatchMode};
pub use storage::store::default_dir as default_store_dir;
pub use watch::StartWatcher;

// Errors, with their stable codes and the structured hint each door words its own way.
pub use error::{Error, ErrorCode, Hint, Result};

// Views: what the facade returns of the store's records (`api/views`), and the closed
// vocabularies (kinds and states) they share with them.
#[cfg(feature = "remote")]
pub use api::views::Remote;
pub use api::views::{
    Begun, Checkpoint, Forked, Image, JournalEntry, MutationMetadata, RewoundBy, Session, ShellCall, ShellEffect,
    Snapshot, SnapshotRef, Subagent, SubagentWindow, Target, Turn, Workspace,
};
pub use checkpoint::artifact::ImageRole;
pub use checkpoint::journal::JournalEvent;
pub use checkpoint::{
    CommitState, CoverageState, EffectKind, IntegrityState, OperationKind, RetentionState, StageState,
};
pub use fs::files::FileIdentity;
pub use fs::relpath::RelPath;
pub use fs::walk::Skipped;
pub use session::turn::TurnKind;
pub use snapshot::{LeftOut, NestedRepo, SnapshotKind};
pub use storage::content::ContentClass;

// What a caller asks: an agent's events, edits, turns, history, comparisons, undo.
pub use agent::{AgentEvent, ToolCall, ToolEffect};
#[cfg(feature = "remote")]
pub use api::SessionChoice;
pub use api::{Actor, CompareRequest, CompareSide, DiffRequest, Mutation};
pub use session::begin::BeginRequest;
pub use session::history::{
    NewEntry as NewHistoryEntry, Role, Selection as HistorySelection, ToolCall as HistoryToolCall,
};
pub use session::import::{Format as TranscriptFormat, Scope as ImportScope};
pub use session::turn::Shell;
pub use undo::rollback::{Choice, Selection as RollbackSelection};

// What a call did or found.
pub use agent::Recorded;
pub use api::{
    Appended, ArtifactView, CheckpointList, CheckpointSummary, CheckpointView, Comparison, Deleted, DiffReport,
    DuReport, Encryption, FileText, ForkPoint, GcReport, InitReport, InitSettings, Inspection, InspectionProblem,
    KeyImport, KeyStatus, KeyVersion, MutationReport, ObjectUsage, Problem, SessionInfo, SessionList, SessionUsage,
    ShellRecorded, TurnList, TurnSummary, VerifyCounts, VerifyReport,
};
#[cfg(feature = "remote")]
pub use api::{PullReports, PushReports, REMOTE_GC_GRACE, RemoteList, RemoteSessionList};
pub use checkpoint::retention::{Breach, CapacityVerdict, RetentionVerdict};
pub use checkpoint::{EvictionReport, ReconcileReport, ReconciledCheckpoint, Unreadable as UnreadableCheckpoint};
#[cfg(feature = "remote")]
pub use remote::gc::{RemoteGcReport, RemoteSession};
#[cfg(feature = "remote")]
pub use remote::pull::{PullProgress, PullReport};
#[cfg(feature = "remote")]
pub use remote::push::{PushProgress, PushReport};
pub use session::history::{Entry as HistoryEntry, Message, View as HistoryView};
pub use session::import::Imported;
pub use snapshot::diff::{Change, NumStat};
pub use storage::store::RotationReport;
pub use undo::guarded::ResultType;
pub use undo::rewind::{
    Action as RewindAction, PathPlan as RewindPath, Plan as RewindPlan, Reason as RewindReason, Rewound,
};
pub use undo::rollback::{
    Analysis, ChoiceFile, ConflictReason, ExcludedEffect, InverseOperation, Outcome as TargetOutcome, Residual,
    ResolveResult, RollbackResult, SafeChoice, TargetAnalysis, ThreeWayState,
};
pub use watch::WatchStatus;

// What every door needs to show what the library gives, and to read what it is given:
// names and text escaped for a terminal, times, sizes, input read within a bound.
pub use api::{BoundedInput, read_at_most, read_json_input};
pub use base::quote::{escape_controls, escape_lines, quote_name};
pub use base::time::{format_ms, now_ms};
pub use storage::settings::{format_size, parse_size};

#[cfg(test)]
mod layering_tests;

#[cfg(test)]
mod tests;
