//! The views of a session and of the workspace it works in.

use std::path::PathBuf;

use serde::Serialize;

/// One agent conversation in one workspace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Session {
    /// The session id.
    pub id: String,
    /// The workspace it works in.
    pub workspace_id: String,
    /// When it was created (RFC 3339).
    pub created_at: String,
    /// The current prompt round (0 before the first prompt).
    pub prompt_round: u64,
    /// The session it was forked from, if any.
    pub parent: Option<String>,
    /// The agent that works in it (`claude-code`, `codex`, `gemini`, `cursor`, `opencode`,
    /// `mcp`, `run`); none for a person's own session.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
}

impl From<&crate::session::Session> for Session {
    fn from(r: &crate::session::Session) -> Self {
        Session {
            id: r.id.clone(),
            workspace_id: r.workspace_id.clone(),
            created_at: r.created_at.clone(),
            prompt_round: r.prompt_round,
            parent: r.parent.clone(),
            agent: r.agent.clone(),
        }
    }
}

/// A registered workspace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Workspace {
    /// Opaque id (UUID).
    pub id: String,
    /// The canonical root directory.
    pub root: PathBuf,
    /// When it was first registered (ms since epoch).
    pub created_at: i64,
}

impl From<&crate::session::workspace::Workspace> for Workspace {
    fn from(r: &crate::session::workspace::Workspace) -> Self {
        Workspace { id: r.id.clone(), root: r.root.clone(), created_at: r.created_at }
    }
}

/// What a fork made.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Forked {
    /// The new session.
    pub session: Session,
    /// Turns carried.
    pub turns: u64,
    /// Snapshots carried.
    pub snapshots: u64,
    /// History entries carried (those of the carried turns).
    pub history_entries: u64,
    /// Where the files were written, with `--into`.
    pub into: Option<PathBuf>,
    /// Files written there.
    pub files_written: u64,
    /// Paths not written (nested repositories), with why.
    pub not_written: Vec<String>,
}

impl From<crate::session::fork::Forked> for Forked {
    fn from(f: crate::session::fork::Forked) -> Self {
        Forked {
            session: (&f.session).into(),
            turns: f.turns,
            snapshots: f.snapshots,
            history_entries: f.history_entries,
            into: f.into,
            files_written: f.files_written,
            not_written: f.not_written,
        }
    }
}
