//! Turns: one user prompt (or background task) and everything the agent does in reply.
//!
//! Invariants:
//! - A turn has a stable id (UUID v7), a 1-based index in its session and a kind; its
//!   preview (the prompt's first line, at most 120 characters) is stored sealed.
//! - A `begin` while a turn is running joins it (same id) unless a new one is asked for;
//!   background turns always get their own. The session's prompt round is the index of
//!   its newest turn, so checkpoint retention counts turns.
//! - A turn's start snapshot is attached in the same transaction that commits whichever
//!   comes second, the turn record or the snapshot record: a snapshot finished late by a
//!   detached process is never lost, and never attached twice.
//! - Begin records nothing until its snapshot is done or its wait is over; a cancelled
//!   begin leaves no turn and no snapshot.
//! - The turn index keeps the newest [`MAX_TURNS`] turns of a session.

use serde::{Deserialize, Serialize};

use crate::error::{Error, ErrorCode, Result};
use crate::session::{NS_SESSIONS, Session};
use crate::snapshot::{self, SnapshotKind, SnapshotRecord};
use crate::storage::kv::{Ns, Txn};
use crate::storage::store::{Store, format_ms, now_ms};

pub(crate) const NS_TURNS: Ns = "turns";
const NS_BY_SESSION: Ns = "turns-by-session";
/// Start snapshots being taken, by turn id, with the owner id of the process taking them.
const NS_TAKING: Ns = "turns-taking-snapshot";
const TURN_SCHEMA: u16 = 1;
/// How many turns a session's index keeps.
pub const MAX_TURNS: usize = 1000;
/// How long a preview may be, in characters.
pub const PREVIEW_CHARS: usize = 120;

/// What started a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TurnKind {
    /// A user prompt.
    Prompt,
    /// Work the agent started on its own.
    Background,
}

/// A turn's snapshot reference.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotRef {
    /// The snapshot (none while a late one is still being taken).
    pub id: Option<String>,
    /// Taken after the turn had already started.
    pub late: bool,
    /// Why it was skipped, if it was.
    pub skipped: Option<String>,
}

/// One turn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shell_effects: Vec<ShellEffect>,
}

/// A shell command run during a turn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ShellEffect {
    /// The command, secrets redacted.
    pub command: String,
    /// When it was recorded.
    pub at: String,
    /// The caller's id for it (a tool-use id), so a repeated report is recorded once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
}

impl Turn {
    /// Whether the turn is still running.
    pub fn running(&self) -> bool {
        self.ended_at.is_none()
    }
}

/// The first line of `prompt`, cut to [`PREVIEW_CHARS`] characters.
pub fn preview(prompt: &str) -> String {
    let line = prompt.lines().find(|l| !l.trim().is_empty()).unwrap_or("").trim();
    let mut out: String = line.chars().take(PREVIEW_CHARS).collect();
    if line.chars().count() > PREVIEW_CHARS {
        out.pop();
        out.push('…');
    }
    out
}

pub(crate) fn put(store: &Store, txn: &mut dyn Txn, turn: &Turn) -> Result<()> {
    let key = turn.turn_id.as_bytes();
    txn.put(NS_TURNS, key, &store.seal_record(NS_TURNS, key, TURN_SCHEMA, turn)?)?;
    txn.put(NS_BY_SESSION, format!("{}/{:010}", turn.session_id, turn.index).as_bytes(), key)
}

fn get_in(store: &Store, txn: &mut dyn Txn, id: &str) -> Result<Option<Turn>> {
    match txn.get(NS_TURNS, id.as_bytes())? {
        Some(v) => store.open_record(NS_TURNS, id.as_bytes(), &v).map(Some),
        None => Ok(None),
    }
}

/// The turn `id`.
pub fn get(store: &Store, id: &str) -> Result<Turn> {
    store.get_record(NS_TURNS, id.as_bytes())?.ok_or_else(|| Error::not_found(format!("turn {id}")))
}

/// The turns of `session`, oldest first.
pub fn list(store: &Store, session: &str) -> Result<Vec<Turn>> {
    let prefix = format!("{session}/");
    let mut ids = Vec::new();
    store.kv().scan(NS_BY_SESSION, prefix.as_bytes(), &mut |_, v| {
        ids.push(String::from_utf8_lossy(v).into_owned());
        Ok(true)
    })?;
    ids.iter().map(|id| get(store, id)).collect()
}

/// The session's running turn, if any (a prompt turn before a background one).
pub fn running(store: &Store, session: &str) -> Result<Option<Turn>> {
    let turns = list(store, session)?;
    let prompt = turns.iter().rev().find(|t| t.running() && t.kind == TurnKind::Prompt);
    Ok(prompt.or_else(|| turns.iter().rev().find(|t| t.running())).cloned())
}

/// The turn with 1-based `index` in `session`.
pub fn by_index(store: &Store, session: &str, index: u64) -> Result<Turn> {
    let key = format!("{session}/{index:010}");
    let id = store.kv().get(NS_BY_SESSION, key.as_bytes())?.ok_or_else(|| Error::not_found(format!("turn {index}")))?;
    get(store, &String::from_utf8_lossy(&id))
}

/// What to begin.
#[derive(Debug, Clone, Default)]
pub struct BeginRequest {
    /// The prompt (for the preview).
    pub prompt: Option<String>,
    /// A background turn (always a new one).
    pub background: bool,
    /// A new turn even if one is running.
    pub new: bool,
}

/// Decides, before anything is snapshotted, whether `begin` joins the running turn.
pub fn joins(store: &Store, session: &Session, req: &BeginRequest) -> Result<Option<Turn>> {
    if req.background || req.new {
        return Ok(None);
    }
    // Only a running prompt turn is joined; a background one never captures a prompt.
    Ok(running(store, &session.id)?.filter(|t| t.kind == TurnKind::Prompt))
}

/// Whether a prompt arriving while `running` runs is the same prompt delivered again (an
/// agent's hook firing twice) rather than a new prompt: the same preview, within a minute
/// of the turn's start. A new prompt starts a new turn even if the last one never ended
/// (an agent interrupted without its stop event).
pub fn repeats(running: &Turn, prompt: &str) -> bool {
    let started = running.started_at.parse::<jiff::Timestamp>().ok();
    let recent = started.is_some_and(|t| jiff::Timestamp::now().duration_since(t).as_secs() < 60);
    recent && running.preview == preview(prompt)
}

/// A fresh turn id for a turn about to begin (its snapshot is taken under this id).
pub fn new_id() -> String {
    uuid::Uuid::now_v7().to_string()
}

/// Records the new turn `turn_id`, with its start snapshot if it is done (`late` if it
/// was not done within the wait; it is attached when it commits, see [`attach_hook`]);
/// `failure` says why there is none when the snapshot process failed.
/// Ends a running turn it supersedes. Advances the session's prompt round.
pub fn record(
    store: &Store,
    session: &Session,
    turn_id: &str,
    req: &BeginRequest,
    late: bool,
    failure: Option<String>,
) -> Result<Turn> {
    let mut txn = store.kv().begin()?;
    let prefix = format!("{}/", session.id);
    let keys = txn.keys(NS_BY_SESSION, prefix.as_bytes())?;
    let index =
        keys.last().and_then(|k| std::str::from_utf8(&k[prefix.len()..]).ok()?.parse::<u64>().ok()).unwrap_or(0) + 1;
    let now = format_ms(now_ms());
    let snapshot_id = snapshot::of_turn(&mut *txn, turn_id, SnapshotKind::TurnStart)?;
    // A new prompt supersedes a running prompt turn: it ends where the new one starts, so
    // its end is the new turn's start snapshot (when that is already taken).
    for key in &keys {
        if let Some(id) = txn.get(NS_BY_SESSION, key)?
            && let Some(mut t) = get_in(store, &mut *txn, &String::from_utf8_lossy(&id))?
            && t.running()
            && t.kind == TurnKind::Prompt
            && !req.background
        {
            t.ended_at = Some(now.clone());
            if snapshot_id.is_some() {
                t.end_snapshot = Some(SnapshotRef { id: snapshot_id.clone(), late, skipped: None });
            }
            put(store, &mut *txn, &t)?;
        }
    }
    let skipped = match &snapshot_id {
        Some(id) => snapshot_skip_reason(store, &mut *txn, id)?,
        None => failure,
    };
    let turn = Turn {
        turn_id: turn_id.to_string(),
        session_id: session.id.clone(),
        index,
        kind: if req.background { TurnKind::Background } else { TurnKind::Prompt },
        preview: req.prompt.as_deref().map(preview).unwrap_or_default(),
        started_at: now,
        ended_at: None,
        snapshot: SnapshotRef { id: snapshot_id, late, skipped },
        end_snapshot: None,
        shell_effects: Vec::new(),
    };
    put(store, &mut *txn, &turn)?;
    // The session's round is the newest turn's index.
    if let Some(v) = txn.get(NS_SESSIONS, session.id.as_bytes())? {
        let mut s: Session = store.open_record(NS_SESSIONS, session.id.as_bytes(), &v)?;
        s.prompt_round = index;
        crate::session::put_in(store, &mut *txn, &s)?;
    }
    // Keep the newest MAX_TURNS (index entries and records).
    if keys.len() + 1 > MAX_TURNS {
        for key in &keys[..keys.len() + 1 - MAX_TURNS] {
            if let Some(id) = txn.get(NS_BY_SESSION, key)? {
                txn.delete(NS_TURNS, &id)?;
            }
            txn.delete(NS_BY_SESSION, key)?;
        }
    }
    txn.commit()?;
    Ok(turn)
}

/// Records a finished turn rebuilt from elsewhere (an imported transcript) inside `txn`:
/// the next index, the given times, no snapshot (with `why`). Advances the session's round.
pub(crate) fn insert_finished_in(
    store: &Store,
    txn: &mut dyn Txn,
    session: &str,
    prompt: &str,
    started_at: &str,
    ended_at: &str,
    why: &str,
) -> Result<Turn> {
    let prefix = format!("{session}/");
    let keys = txn.keys(NS_BY_SESSION, prefix.as_bytes())?;
    let index =
        keys.last().and_then(|k| std::str::from_utf8(&k[prefix.len()..]).ok()?.parse::<u64>().ok()).unwrap_or(0) + 1;
    let turn = Turn {
        turn_id: new_id(),
        session_id: session.to_string(),
        index,
        kind: TurnKind::Prompt,
        preview: preview(prompt),
        started_at: started_at.to_string(),
        ended_at: Some(ended_at.to_string()),
        snapshot: SnapshotRef { id: None, late: false, skipped: Some(why.to_string()) },
        end_snapshot: None,
        shell_effects: Vec::new(),
    };
    put(store, txn, &turn)?;
    if let Some(v) = txn.get(NS_SESSIONS, session.as_bytes())? {
        let mut s: Session = store.open_record(NS_SESSIONS, session.as_bytes(), &v)?;
        s.prompt_round = index;
        crate::session::put_in(store, txn, &s)?;
    }
    Ok(turn)
}

fn snapshot_skip_reason(store: &Store, txn: &mut dyn Txn, id: &str) -> Result<Option<String>> {
    Ok(match txn.get(snapshot::NS_SNAPSHOTS, id.as_bytes())? {
        Some(v) => store.open_record::<SnapshotRecord>(snapshot::NS_SNAPSHOTS, id.as_bytes(), &v)?.skipped,
        None => None,
    })
}

/// The hook a turn's snapshot runs inside its committing transaction: if the turn is
/// already recorded (its snapshot was late), the snapshot is attached to it there.
pub fn attach_hook<'a>(store: &'a Store) -> impl Fn(&mut dyn Txn, &SnapshotRecord) -> Result<()> + 'a {
    move |txn, record| {
        let Some(turn_id) = &record.turn_id else { return Ok(()) };
        let Some(mut turn) = get_in(store, txn, turn_id)? else { return Ok(()) };
        let slot = match record.kind {
            SnapshotKind::TurnEnd => {
                turn.end_snapshot.get_or_insert(SnapshotRef { id: None, late: true, skipped: None })
            }
            _ => &mut turn.snapshot,
        };
        if slot.id.is_none() {
            slot.id = Some(record.snapshot_id.clone());
            slot.skipped = record.skipped.clone();
            put(store, txn, &turn)?;
        }
        Ok(())
    }
}

/// Deletes every turn of `session` inside `txn`; returns how many.
pub(crate) fn delete_session_in(txn: &mut dyn Txn, session: &str) -> Result<u64> {
    let prefix = format!("{session}/");
    let mut deleted = 0;
    for key in txn.keys(NS_BY_SESSION, prefix.as_bytes())? {
        if let Some(id) = txn.get(NS_BY_SESSION, &key)? {
            txn.delete(NS_TURNS, &id)?;
        }
        txn.delete(NS_BY_SESSION, &key)?;
        deleted += 1;
    }
    Ok(deleted)
}

/// Marks turn `turn_id`'s start or end snapshot as pruned, inside `txn`.
pub(crate) fn mark_pruned(store: &Store, txn: &mut dyn Txn, turn_id: &str, kind: SnapshotKind) -> Result<()> {
    let Some(mut turn) = get_in(store, txn, turn_id)? else { return Ok(()) };
    let slot = match kind {
        SnapshotKind::TurnEnd => turn.end_snapshot.as_mut(),
        _ => Some(&mut turn.snapshot),
    };
    if let Some(slot) = slot {
        slot.id = None;
        slot.skipped = Some("pruned (the session's snapshot budget)".into());
        put(store, txn, &turn)?;
    }
    Ok(())
}

/// Records a shell command (redacted here) as an effect of the session's running turn, once
/// per `id`. Returns the turn, or `None` when no turn is running.
pub fn record_shell(store: &Store, session: &str, command: &str, id: Option<&str>) -> Result<Option<Turn>> {
    let Some(running) = running(store, session)? else { return Ok(None) };
    let mut txn = store.kv().begin()?;
    let Some(mut turn) = get_in(store, &mut *txn, &running.turn_id)? else { return Ok(None) };
    if id.is_some() && turn.shell_effects.iter().any(|e| e.id.as_deref() == id) {
        return Ok(Some(turn));
    }
    turn.shell_effects.push(ShellEffect {
        command: crate::base::redact::redact(command),
        at: format_ms(now_ms()),
        id: id.map(str::to_string),
    });
    put(store, &mut *txn, &turn)?;
    txn.commit()?;
    Ok(Some(turn))
}

/// Ends the running turn of `session`, with its end snapshot.
///
/// # Errors
/// `not-found` if no turn is running.
pub fn end(store: &Store, workspace: &crate::Workspace, session: &Session) -> Result<Turn> {
    end_with(store, workspace, session, None)
}

/// [`end`], telling `progress` how the end snapshot's reading goes (bytes read, to read).
///
/// # Errors
/// As [`end`].
pub fn end_with(
    store: &Store,
    workspace: &crate::Workspace,
    session: &Session,
    progress: Option<&(dyn Fn(u64, u64) + Sync)>,
) -> Result<Turn> {
    let turn = running(store, &session.id)?
        .ok_or_else(|| Error::new(ErrorCode::NotFound, format!("no turn is running in session {}", session.id)))?;
    let hook = attach_hook(store);
    let opts = snapshot::TakeOptions {
        kind: Some(SnapshotKind::TurnEnd),
        turn_id: Some(&turn.turn_id),
        cancel: None,
        in_commit: Some(&hook),
        progress,
    };
    let snap = snapshot::take_with(store, workspace, session, &opts)?;
    let mut txn = store.kv().begin()?;
    let mut turn = get_in(store, &mut *txn, &turn.turn_id)?.ok_or_else(|| Error::not_found("turn"))?;
    turn.ended_at = Some(format_ms(now_ms()));
    turn.end_snapshot = Some(SnapshotRef { id: Some(snap.snapshot_id), late: false, skipped: snap.skipped });
    put(store, &mut *txn, &turn)?;
    txn.commit()?;
    Ok(turn)
}

/// Takes the start snapshot of turn `turn_id` (in this process or a detached one).
pub fn take_start_snapshot(
    store: &Store,
    workspace: &crate::Workspace,
    session: &Session,
    turn_id: &str,
    cancel: Option<&std::sync::atomic::AtomicBool>,
) -> Result<SnapshotRecord> {
    // Say who is taking it, so that if this process dies before it commits, reconcile can
    // tell the turn its snapshot will never come.
    let owner = store.owner()?.id().to_string();
    let mut txn = store.kv().begin()?;
    txn.put(NS_TAKING, turn_id.as_bytes(), owner.as_bytes())?;
    txn.commit()?;
    let attach = attach_hook(store);
    let hook = |txn: &mut dyn Txn, record: &SnapshotRecord| {
        txn.delete(NS_TAKING, turn_id.as_bytes())?;
        attach(txn, record)
    };
    let opts = snapshot::TakeOptions {
        kind: Some(SnapshotKind::TurnStart),
        turn_id: Some(turn_id),
        cancel,
        in_commit: Some(&hook),
        progress: None,
    };
    let taken = snapshot::take_with(store, workspace, session, &opts);
    if taken.is_err() {
        let mut txn = store.kv().begin()?;
        txn.delete(NS_TAKING, turn_id.as_bytes())?;
        mark_start_failed(store, &mut *txn, turn_id, "the start snapshot failed")?;
        txn.commit()?;
    }
    taken
}

fn mark_start_failed(store: &Store, txn: &mut dyn Txn, turn_id: &str, why: &str) -> Result<()> {
    if let Some(mut turn) = get_in(store, txn, turn_id)?
        && turn.snapshot.id.is_none()
        && turn.snapshot.skipped.is_none()
    {
        turn.snapshot.skipped = Some(why.to_string());
        put(store, txn, &turn)?;
    }
    Ok(())
}

/// Tells turns whose late start snapshot's process died that it will never come (their
/// snapshot is marked skipped with the reason). Runs at every store open.
pub fn reconcile(store: &Store) -> Result<u64> {
    let mut taking = Vec::new();
    store.kv().scan(NS_TAKING, b"", &mut |k, v| {
        taking.push((String::from_utf8_lossy(k).into_owned(), String::from_utf8_lossy(v).into_owned()));
        Ok(true)
    })?;
    let mut fixed = 0;
    for (turn_id, owner) in taking {
        if crate::fs::lock::owner_alive(&store.locks_dir(), &owner)? {
            continue;
        }
        let mut txn = store.kv().begin()?;
        if txn.get(NS_TAKING, turn_id.as_bytes())?.is_some() {
            txn.delete(NS_TAKING, turn_id.as_bytes())?;
            mark_start_failed(store, &mut *txn, &turn_id, "the process taking the late start snapshot died")?;
            fixed += 1;
        }
        txn.commit()?;
    }
    Ok(fixed)
}

/// Removes the start snapshot of a turn that was cancelled before it was recorded.
pub fn discard_start_snapshot(store: &Store, turn_id: &str) -> Result<()> {
    let mut txn = store.kv().begin()?;
    if let Some(id) = snapshot::of_turn(&mut *txn, turn_id, SnapshotKind::TurnStart)?
        && let Some(v) = txn.get(snapshot::NS_SNAPSHOTS, id.as_bytes())?
    {
        let record: SnapshotRecord = store.open_record(snapshot::NS_SNAPSHOTS, id.as_bytes(), &v)?;
        snapshot::discard(&mut *txn, &record)?;
    }
    txn.commit()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn previews_are_the_first_line_cut_at_120_characters() {
        assert_eq!(preview("\n  fix the bug\nin main.rs"), "fix the bug");
        let long = "ก".repeat(200);
        let p = preview(&long);
        assert_eq!(p.chars().count(), 120);
        assert!(p.ends_with('…'));
        assert_eq!(preview(&"x".repeat(120)), "x".repeat(120));
    }
}
