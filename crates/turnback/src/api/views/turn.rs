//! The view of a turn: what `turns --json`, `turn show` and the MCP server give of it.

use serde::Serialize;

use crate::session::turn::TurnKind;
use crate::snapshot::LeftOut;

/// One turn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Turn {
    /// Stable id (UUID v7).
    pub turn_id: String,
    /// The session.
    pub session_id: String,
    /// 1-based position in the session.
    pub index: u64,
    /// Prompt or background.
    pub kind: TurnKind,
    /// The prompt's first line, at most 120 characters.
    pub preview: String,
    /// When it started.
    pub started_at: String,
    /// When it ended.
    pub ended_at: Option<String>,
    /// The snapshot at its start.
    pub snapshot: SnapshotRef,
    /// The snapshot at its end.
    pub end_snapshot: Option<SnapshotRef>,
    /// Shell commands the agent ran in the turn (secrets redacted): never reversible, kept
    /// so a rewind can say exactly what it cannot take back.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub shell_effects: Vec<ShellEffect>,
    /// Times the agent carried on after it had stopped (the turn was reopened).
    #[serde(skip_serializing_if = "is_zero")]
    pub continuations: u32,
    /// Sub-agents the agent ran in the turn.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub subagents: Vec<Subagent>,
    /// Set when a rewind took the turn back (to its start or an earlier turn's): its
    /// history is cut, and an import of the agent's transcript leaves it out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rewound: Option<RewoundBy>,
}

impl From<&crate::session::turn::Turn> for Turn {
    fn from(r: &crate::session::turn::Turn) -> Self {
        Turn {
            turn_id: r.turn_id.clone(),
            session_id: r.session_id.clone(),
            index: r.index,
            kind: r.kind,
            preview: r.preview.clone(),
            started_at: r.started_at.clone(),
            ended_at: r.ended_at.clone(),
            snapshot: (&r.snapshot).into(),
            end_snapshot: r.end_snapshot.as_ref().map(Into::into),
            shell_effects: r.shell_effects.iter().map(Into::into).collect(),
            continuations: r.continuations,
            subagents: r.subagents.iter().map(Into::into).collect(),
            rewound: r.rewound.as_ref().map(Into::into),
        }
    }
}

/// A turn's snapshot reference.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct SnapshotRef {
    /// The snapshot (none while a late one is still being taken).
    pub id: Option<String>,
    /// Taken after the turn had already started.
    pub late: bool,
    /// Why it was skipped, if it was.
    pub skipped: Option<String>,
    /// Files it left out for their size, with the reason (a rewind never deletes or
    /// restores them).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub left_out: Vec<LeftOut>,
    /// Set when the session's stat cache did not verify as this snapshot was taken: it
    /// was dropped and every file read in full (said once, here).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stat_cache_dropped: Option<String>,
}

impl From<&crate::session::turn::SnapshotRef> for SnapshotRef {
    fn from(r: &crate::session::turn::SnapshotRef) -> Self {
        SnapshotRef {
            id: r.id.clone(),
            late: r.late,
            skipped: r.skipped.clone(),
            left_out: r.left_out.clone(),
            stat_cache_dropped: r.stat_cache_dropped.clone(),
        }
    }
}

/// The rewind that took a turn back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct RewoundBy {
    /// When (RFC 3339).
    pub at: String,
    /// The rewind's undo checkpoint (rolling it back gives the turn back), when it made one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<String>,
}

impl From<&crate::session::turn::RewoundBy> for RewoundBy {
    fn from(r: &crate::session::turn::RewoundBy) -> Self {
        RewoundBy { at: r.at.clone(), checkpoint: r.checkpoint.clone() }
    }
}

/// A sub-agent run during a turn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Subagent {
    /// The agent's id for it.
    pub id: String,
    /// What kind of sub-agent (the agent's own name for it), when told.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// When it started.
    pub started_at: String,
    /// When it stopped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stopped_at: Option<String>,
}

impl From<&crate::session::turn::Subagent> for Subagent {
    fn from(r: &crate::session::turn::Subagent) -> Self {
        Subagent {
            id: r.id.clone(),
            kind: r.kind.clone(),
            started_at: r.started_at.clone(),
            stopped_at: r.stopped_at.clone(),
        }
    }
}

/// A shell command run during a turn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ShellEffect {
    /// The command, secrets redacted.
    pub command: String,
    /// When it was recorded.
    pub at: String,
    /// The caller's id for it (a tool-use id), so a repeated report is recorded once.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Its exit status, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_status: Option<i32>,
    /// It failed (a non-zero exit, or the agent reported the call failed).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub failed: bool,
    /// Its own `shell` checkpoint, when its window saw files change.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checkpoint_id: Option<String>,
    /// Why no window was taken around it, when none was: its file effects are then in the
    /// turn's snapshots only (a rewind takes them back, a rollback cannot).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub no_window: Option<String>,
}

impl From<&crate::session::turn::ShellEffect> for ShellEffect {
    fn from(r: &crate::session::turn::ShellEffect) -> Self {
        ShellEffect {
            command: r.command.clone(),
            at: r.at.clone(),
            id: r.id.clone(),
            exit_status: r.exit_status,
            failed: r.failed,
            checkpoint_id: r.checkpoint_id.clone(),
            no_window: r.no_window.clone(),
        }
    }
}

/// A begun turn.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Begun {
    /// A running turn was joined rather than a new one begun.
    pub joined: bool,
    /// The turn.
    pub turn: Turn,
    /// Tool calls closed as failed first, because their "after" event never came.
    #[serde(skip_serializing_if = "is_zero")]
    pub abandoned_calls_closed: u64,
}

impl Turn {
    /// Whether the turn is still running.
    pub fn running(&self) -> bool {
        self.ended_at.is_none()
    }
}

fn is_zero<T: Default + PartialEq>(n: &T) -> bool {
    *n == T::default()
}
