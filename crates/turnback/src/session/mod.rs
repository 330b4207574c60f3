//! Sessions: one agent conversation in one workspace.
//!
//! Invariants:
//! - A session id matches `^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$` and names one workspace for
//!   its whole life.
//! - The session's prompt round only grows; checkpoints record the round they were made in
//!   and retention counts rounds, not wall-clock time.
//! - The agent that works in a session (`claude-code`, `codex`, …, `mcp`, `run`) is the one
//!   that created it, or the first to name itself on a session that had none; once set it
//!   never changes. A record written before agents were kept reads with none.

pub(crate) mod begin;
pub(crate) mod fork;
pub(crate) mod history;
pub(crate) mod import;
pub(crate) mod turn;
pub(crate) mod workspace;

use serde::{Deserialize, Serialize};

use crate::base::time::{format_ms, now_ms};
use crate::error::{Error, Result};
use crate::session::workspace::Workspace;
use crate::storage::kv::Txn;
use crate::storage::schema;
use crate::storage::store::Store;

const SESSION_SCHEMA: u16 = 1;

/// One agent conversation in one workspace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Session {
    /// The session id.
    pub(crate) id: String,
    /// The workspace it works in.
    pub(crate) workspace_id: String,
    /// When it was created (RFC 3339).
    pub(crate) created_at: String,
    /// The current prompt round (0 before the first prompt).
    pub(crate) prompt_round: u64,
    /// The session it was forked from, if any.
    pub(crate) parent: Option<String>,
    /// The agent that works in it (`claude-code`, `codex`, `gemini`, `cursor`, `opencode`,
    /// `mcp`, `run`); none for a person's own session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) agent: Option<String>,
}

/// Checks a session id against `^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$`.
///
/// # Errors
/// `invalid-argument` saying what is allowed.
pub(crate) fn validate_id(id: &str) -> Result<()> {
    let b = id.as_bytes();
    let ok = !b.is_empty()
        && b.len() <= 128
        && b[0].is_ascii_alphanumeric()
        && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'_' || *c == b'-');
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "session id {id:?} must be 1-128 letters, digits, '_' or '-', starting with a letter or digit"
        )))
    }
}

impl Session {
    /// The session `id`, if it exists.
    pub(crate) fn get(store: &Store, id: &str) -> Result<Option<Session>> {
        validate_id(id)?;
        store.get_record(schema::SESSIONS, id.as_bytes())
    }

    /// The most recently created session of `workspace`, if any.
    pub(crate) fn latest(store: &Store, workspace: &Workspace) -> Result<Option<Session>> {
        let mut last = None;
        store.kv().scan_keys(schema::WORKSPACE_SESSIONS, format!("{}/", workspace.id).as_bytes(), &mut |k| {
            last = Some(k.to_vec());
            Ok(true)
        })?;
        match last {
            Some(k) => {
                let k = String::from_utf8_lossy(&k).into_owned();
                let id = k.rsplit('/').next().unwrap_or_default();
                Session::get(store, id)
            }
            None => Ok(None),
        }
    }

    /// Creates a session in `workspace` (with `id`, or a fresh UUID v7).
    ///
    /// # Errors
    /// `already-exists` if `id` is taken; `invalid-argument` if it is malformed.
    pub(crate) fn create(store: &Store, workspace: &Workspace, id: Option<&str>) -> Result<Session> {
        Self::create_for(store, workspace, id, None)
    }

    /// [`create`](Self::create), recording the `agent` that works in it.
    ///
    /// # Errors
    /// As [`create`](Self::create).
    pub(crate) fn create_for(
        store: &Store,
        workspace: &Workspace,
        id: Option<&str>,
        agent: Option<&str>,
    ) -> Result<Session> {
        let mut txn = store.kv().begin()?;
        let session = Self::create_in(store, &mut *txn, workspace, id, agent)?;
        txn.commit()?;
        Ok(session)
    }

    fn create_in(
        store: &Store,
        txn: &mut dyn Txn,
        workspace: &Workspace,
        id: Option<&str>,
        agent: Option<&str>,
    ) -> Result<Session> {
        let id = match id {
            Some(id) => id.to_string(),
            None => uuid::Uuid::now_v7().to_string(),
        };
        validate_id(&id)?;
        let now = now_ms();
        let session = Session {
            id: id.clone(),
            workspace_id: workspace.id.clone(),
            created_at: format_ms(now),
            prompt_round: 0,
            parent: None,
            agent: agent.map(str::to_string),
        };
        let sealed = store.seal_record(schema::SESSIONS, id.as_bytes(), SESSION_SCHEMA, &session)?;
        if !txn.put_if_absent(schema::SESSIONS, id.as_bytes(), &sealed)? {
            return Err(Error::new(crate::ErrorCode::AlreadyExists, format!("session {id} already exists")));
        }
        let index = format!("{}/{now:016}/{id}", workspace.id);
        txn.put(schema::WORKSPACE_SESSIONS, index.as_bytes(), b"")?;
        Ok(session)
    }

    /// The workspace's latest session, or a new one; decided under the write lock, so
    /// concurrent first commands in a workspace all land in the same session.
    fn latest_or_create(store: &Store, workspace: &Workspace, agent: Option<&str>) -> Result<Session> {
        if let Some(s) = Session::latest(store, workspace)? {
            return Ok(s);
        }
        let mut txn = store.kv().begin()?;
        let prefix = format!("{}/", workspace.id);
        let latest = txn.keys(schema::WORKSPACE_SESSIONS, prefix.as_bytes())?.pop();
        if let Some(key) = latest {
            drop(txn);
            let key = String::from_utf8_lossy(&key).into_owned();
            let id = key.rsplit('/').next().unwrap_or_default();
            return Session::get(store, id)?.ok_or_else(|| Error::not_found(format!("session {id}")));
        }
        let session = Self::create_in(store, &mut *txn, workspace, None, agent)?;
        txn.commit()?;
        Ok(session)
    }

    /// The session to use: `requested` (created if new), else the workspace's latest, else
    /// a new one.
    ///
    /// # Errors
    /// `invalid-argument` if `requested` belongs to another workspace or is malformed.
    #[cfg(test)]
    pub(crate) fn resolve(store: &Store, workspace: &Workspace, requested: Option<&str>) -> Result<Session> {
        Self::resolve_for(store, workspace, requested, None)
    }

    /// [`resolve`](Self::resolve) for `agent`: a session it creates records the agent, and
    /// so does one it finds without an agent yet (never one that names another).
    ///
    /// # Errors
    /// As [`resolve`](Self::resolve).
    pub(crate) fn resolve_for(
        store: &Store,
        workspace: &Workspace,
        requested: Option<&str>,
        agent: Option<&str>,
    ) -> Result<Session> {
        let session = match requested {
            Some(id) => match Session::get(store, id)? {
                Some(s) if s.workspace_id == workspace.id => s,
                Some(_) => return Err(Error::invalid(format!("session {id} belongs to another workspace"))),
                None => match Session::create_for(store, workspace, Some(id), agent) {
                    Err(e) if e.code == crate::ErrorCode::AlreadyExists => {
                        Session::get(store, id)?.ok_or_else(|| Error::not_found(format!("session {id}")))?
                    }
                    other => other?,
                },
            },
            None => Session::latest_or_create(store, workspace, agent)?,
        };
        match agent {
            Some(agent) if session.agent.is_none() => Session::note_agent(store, &session.id, agent),
            _ => Ok(session),
        }
    }

    /// Records `agent` on session `id` if it has none yet (decided under the write lock);
    /// returns the session as stored.
    fn note_agent(store: &Store, id: &str, agent: &str) -> Result<Session> {
        let mut txn = store.kv().begin()?;
        let value =
            txn.get(schema::SESSIONS, id.as_bytes())?.ok_or_else(|| Error::not_found(format!("session {id}")))?;
        let mut session: Session = store.open_record(schema::SESSIONS, id.as_bytes(), &value)?;
        if session.agent.is_none() {
            session.agent = Some(agent.to_string());
            let sealed = store.seal_record(schema::SESSIONS, id.as_bytes(), SESSION_SCHEMA, &session)?;
            txn.put(schema::SESSIONS, id.as_bytes(), &sealed)?;
            txn.commit()?;
        }
        Ok(session)
    }

    /// The current prompt round of session `id` (`None` if there is no such session).
    pub(crate) fn round_of(store: &Store, id: &str) -> Result<Option<u64>> {
        Ok(Session::get(store, id)?.map(|s| s.prompt_round))
    }

    /// Moves the session to its next prompt round and returns it (tests and tools; turns
    /// set the round themselves).
    #[cfg(test)]
    pub(crate) fn advance_round(store: &Store, id: &str) -> Result<u64> {
        let mut txn = store.kv().begin()?;
        let value =
            txn.get(schema::SESSIONS, id.as_bytes())?.ok_or_else(|| Error::not_found(format!("session {id}")))?;
        let mut session: Session = store.open_record(schema::SESSIONS, id.as_bytes(), &value)?;
        session.prompt_round += 1;
        txn.put(
            schema::SESSIONS,
            id.as_bytes(),
            &store.seal_record(schema::SESSIONS, id.as_bytes(), SESSION_SCHEMA, &session)?,
        )?;
        txn.commit()?;
        Ok(session.prompt_round)
    }
}

impl Session {
    /// The sessions of `workspace`, oldest first.
    pub(crate) fn list(store: &Store, workspace: &Workspace) -> Result<Vec<Session>> {
        let mut ids = Vec::new();
        store.kv().scan_keys(schema::WORKSPACE_SESSIONS, format!("{}/", workspace.id).as_bytes(), &mut |k| {
            ids.push(String::from_utf8_lossy(k).rsplit('/').next().unwrap_or_default().to_string());
            Ok(true)
        })?;
        let mut out = Vec::new();
        for id in ids {
            if let Some(s) = Session::get(store, &id)? {
                out.push(s);
            }
        }
        Ok(out)
    }
}

impl Session {
    /// Every session in the store, by id (a push of them all).
    #[cfg(feature = "remote")]
    pub(crate) fn all(store: &Store) -> Result<Vec<Session>> {
        let mut out = Vec::new();
        store.kv().scan(schema::SESSIONS, b"", &mut |k, v| {
            out.push(store.open_record(schema::SESSIONS, k, v)?);
            Ok(true)
        })?;
        Ok(out)
    }
}

impl Session {
    /// Removes the record of session `id` and its place in its workspace's list, inside
    /// `txn` (the rest of a session goes with [`Turnback::delete_session`]
    /// (crate::Turnback::delete_session), which calls every owner).
    pub(crate) fn delete_in(txn: &mut dyn Txn, session: &Session) -> Result<()> {
        txn.delete(schema::SESSIONS, session.id.as_bytes())?;
        let suffix = format!("/{}", session.id);
        for key in txn.keys(schema::WORKSPACE_SESSIONS, format!("{}/", session.workspace_id).as_bytes())? {
            if key.ends_with(suffix.as_bytes()) {
                txn.delete(schema::WORKSPACE_SESSIONS, &key)?;
            }
        }
        Ok(())
    }

    /// The current prompt round of session `id`, read inside `txn`.
    ///
    /// # Errors
    /// `not-found` if there is no such session.
    pub(crate) fn round_in(store: &Store, txn: &mut dyn Txn, id: &str) -> Result<u64> {
        let v = txn.get(schema::SESSIONS, id.as_bytes())?.ok_or_else(|| Error::not_found(format!("session {id}")))?;
        Ok(store.open_record::<Session>(schema::SESSIONS, id.as_bytes(), &v)?.prompt_round)
    }

    /// Sets the prompt round of session `id` inside `txn` (turns do, as each begins).
    pub(crate) fn set_round_in(store: &Store, txn: &mut dyn Txn, id: &str, round: u64) -> Result<()> {
        let Some(v) = txn.get(schema::SESSIONS, id.as_bytes())? else { return Ok(()) };
        let mut session: Session = store.open_record(schema::SESSIONS, id.as_bytes(), &v)?;
        session.prompt_round = round;
        put_in(store, txn, &session)
    }
}

/// Writes, inside `txn`, a session that arrived from another store (a pull) with its place
/// in its workspace's list, as the workspace's newest.
#[cfg(feature = "remote")]
pub(crate) fn adopt_in(store: &Store, txn: &mut dyn Txn, session: &Session) -> Result<()> {
    put_in(store, txn, session)?;
    let index = format!("{}/{:016}/{}", session.workspace_id, now_ms(), session.id);
    txn.put(schema::WORKSPACE_SESSIONS, index.as_bytes(), b"")
}

/// Writes `session` inside `txn`.
pub(crate) fn put_in(store: &Store, txn: &mut dyn Txn, session: &Session) -> Result<()> {
    let key = session.id.as_bytes();
    txn.put(schema::SESSIONS, key, &store.seal_record(schema::SESSIONS, key, SESSION_SCHEMA, session)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_ids_follow_the_pattern() {
        for ok in ["a", "A9", "claude-code_1", &"x".repeat(128)] {
            assert!(validate_id(ok).is_ok(), "{ok}");
        }
        for bad in ["", "-a", "_a", "a b", "a/b", &"x".repeat(129), "é"] {
            assert!(validate_id(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_session_recorded_before_agents_were_kept_reads_with_none() {
        let old =
            r#"{"id":"s","workspaceId":"w","createdAt":"2026-01-01T00:00:00.000Z","promptRound":3,"parent":null}"#;
        let s: Session = serde_json::from_str(old).unwrap();
        assert_eq!((s.prompt_round, s.agent.as_deref()), (3, None));
        let none = serde_json::to_value(&s).unwrap();
        assert!(none.get("agent").is_none(), "no agent, no field: {none}");
    }
}
