//! Remotes through the facade: configuring them, push, pull, listing and `gc` on a remote
//! (the master key's way between machines is [`keys`](super::keys)). Built with the
//! `remote` feature only.

use serde::Serialize;

use crate::api::Turnback;
use crate::api::views;
use crate::error::{Error, Result};
use crate::remote;
use crate::remote::gc::{RemoteGcReport, RemoteSession};
use crate::remote::pull::{PullProgress, PullReport};
use crate::remote::push::{PushProgress, PushReport};
use crate::session::Session;

/// The configured remotes.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
pub struct RemoteList {
    /// By name.
    pub remotes: Vec<views::Remote>,
}

/// The sessions a remote holds.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
pub struct RemoteSessionList {
    /// The remote.
    pub remote: String,
    /// Its sessions, oldest push first.
    pub sessions: Vec<RemoteSession>,
}

/// What `push` did, per session.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
pub struct PushReports {
    /// One per session pushed.
    pub pushed: Vec<PushReport>,
}

/// What `pull` did, per session.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
pub struct PullReports {
    /// One per session pulled.
    pub pulled: Vec<PullReport>,
}

/// Which sessions a push or pull moves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionChoice {
    /// The session the handle was opened on (`--session`), else the workspace's latest.
    Current,
    /// This one.
    One(String),
    /// Every session (of the store for a push, of the remote for a pull).
    All,
}

/// The grace period of `gc --remote` unless one is given: one hour.
pub const REMOTE_GC_GRACE: std::time::Duration = std::time::Duration::from_secs(3600);

impl Turnback {
    /// Adds remote `name` for `s3://BUCKET/PREFIX`.
    ///
    /// # Errors
    /// `invalid-argument` for a bad name, URL or endpoint; `already-exists`.
    pub fn remote_add(
        &self,
        name: &str,
        url: &str,
        endpoint: Option<&str>,
        region: Option<&str>,
    ) -> Result<views::Remote> {
        remote::add(&self.store, name, url, endpoint, region).map(|r| (&r).into())
    }

    /// The configured remotes.
    ///
    /// # Errors
    /// Store errors.
    pub fn remotes(&self) -> Result<RemoteList> {
        Ok(RemoteList { remotes: remote::list(&self.store)?.iter().map(Into::into).collect() })
    }

    /// Removes remote `name` from the configuration (the bucket is not touched).
    ///
    /// # Errors
    /// `not-found`.
    pub fn remote_remove(&self, name: &str) -> Result<views::Remote> {
        remote::remove(&self.store, name).map(|r| (&r).into())
    }

    fn current_session_id(&self) -> Result<String> {
        if let Some(id) = &self.requested_session {
            return Ok(id.clone());
        }
        let ws = self.registered_workspace_record()?.ok_or_else(|| Error::not_found("a session in this workspace"))?;
        Session::list(&self.store, &ws)?
            .pop()
            .map(|s| s.id)
            .ok_or_else(|| Error::not_found("a session in this workspace"))
    }

    /// Pushes sessions to remote `name` (none: the only one), uploading only what it
    /// lacks; `progress` is told the content bytes processed and to process.
    ///
    /// # Errors
    /// `not-found` for an unknown session; `key-mismatch`, `corrupt`,
    /// `concurrent-update` (run it again), `io`.
    pub fn push(&self, name: Option<&str>, which: &SessionChoice, progress: &PushProgress<'_>) -> Result<PushReports> {
        let config = remote::get(&self.store, name)?;
        let ids = match which {
            SessionChoice::Current => vec![self.current_session_id()?],
            SessionChoice::One(id) => vec![id.clone()],
            SessionChoice::All => Session::all(&self.store)?.into_iter().map(|s| s.id).collect(),
        };
        let mut pushed = Vec::new();
        for id in ids {
            pushed.push(remote::push::push(&self.store, &config, &id, progress)?);
        }
        Ok(PushReports { pushed })
    }

    /// Pulls sessions from remote `name` into the store; a session new here joins this
    /// handle's workspace. Never writes into a workspace.
    ///
    /// # Errors
    /// `not-found` (no such session there, or an object it needs is gone), `corrupt`, `key-mismatch`,
    /// `io`.
    pub fn pull(&self, name: Option<&str>, which: &SessionChoice, progress: &PullProgress<'_>) -> Result<PullReports> {
        let config = remote::get(&self.store, name)?;
        let ids =
            match which {
                SessionChoice::Current => vec![self.requested_session.clone().ok_or_else(|| {
                    Error::invalid("name the session to pull (--session ID) or pull them all (--all)")
                })?],
                SessionChoice::One(id) => vec![id.clone()],
                SessionChoice::All => remote::gc::sessions(&self.store, &config)?.into_iter().map(|s| s.id).collect(),
            };
        let workspace = self.workspace_record()?.clone();
        let mut pulled = Vec::new();
        for id in ids {
            pulled.push(remote::pull::pull(&self.store, &config, &id, &workspace, progress)?);
        }
        Ok(PullReports { pulled })
    }

    /// The sessions remote `name` holds.
    ///
    /// # Errors
    /// `key-mismatch`, `corrupt`, `io`.
    pub fn remote_sessions(&self, name: Option<&str>) -> Result<RemoteSessionList> {
        let config = remote::get(&self.store, name)?;
        Ok(RemoteSessionList { remote: config.name.clone(), sessions: remote::gc::sessions(&self.store, &config)? })
    }

    /// Removes from remote `name` every object no manifest names and older than `grace`
    /// (default [`REMOTE_GC_GRACE`]).
    ///
    /// # Errors
    /// `corrupt` if a manifest does not open (nothing is deleted); `key-mismatch`; `io`.
    pub fn gc_remote(&self, name: Option<&str>, grace: Option<std::time::Duration>) -> Result<RemoteGcReport> {
        let config = remote::get(&self.store, name)?;
        let grace = grace.unwrap_or(REMOTE_GC_GRACE);
        remote::gc::gc(&self.store, &config, i64::try_from(grace.as_millis()).unwrap_or(i64::MAX))
    }
}
