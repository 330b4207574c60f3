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
//! - Begin ([`begin`](crate::session::begin)) records nothing until its snapshot is done
//!   or its wait is over; a cancelled begin leaves no turn and no snapshot.
//! - An ended turn can be reopened ([`reopen`]) while it is the newest: an agent that
//!   carries on after its stop (another hook blocked the stop) is still in the same turn,
//!   and its later end snapshot replaces the earlier one.
//! - The turn index keeps the newest [`MAX_TURNS`] turns of a session.
//! - A rewind marks every turn it took back ([`RewoundBy`]) in the transaction that cuts
//!   their history; a turn keeps the mark of the first rewind that took it back, and
//!   loses it only when that rewind is undone.

use serde::{Deserialize, Serialize};

use crate::base::time::{format_ms, now_ms};
use crate::error::{Error, ErrorCode, Result};
use crate::session::Session;
use crate::session::workspace::Workspace;
use crate::snapshot::{self, LeftOut, SnapshotKind, SnapshotRecord, Source, TakeOptions};
use crate::storage::digest;
use crate::storage::kv::Txn;
use crate::storage::schema;
use crate::storage::store::Store;

const TURN_SCHEMA: u16 = 1;
/// How many turns a session's index keeps.
pub(crate) const MAX_TURNS: usize = 1000;
/// How long a preview may be, in characters.
pub(crate) const PREVIEW_CHARS: usize = 120;

/// What started a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
pub enum TurnKind {
    /// A user prompt.
    Prompt,
    /// Work the agent started on its own.
    Background,
}

/// A turn's snapshot reference.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SnapshotRef {
    /// The snapshot (none while a late one is still being taken).
    pub(crate) id: Option<String>,
    /// Taken after the turn had already started.
    pub(crate) late: bool,
    /// Why it was skipped, if it was.
    pub(crate) skipped: Option<String>,
    /// Files it left out for their size, with the reason (a rewind never deletes or
    /// restores them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) left_out: Vec<LeftOut>,
    /// Set when the session's stat cache did not verify as this snapshot was taken: it
    /// was dropped and every file read in full (said once, here).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) stat_cache_dropped: Option<String>,
}

impl SnapshotRef {
    /// A reference to `record`, taken late or not.
    fn of(record: &SnapshotRecord, late: bool) -> Self {
        SnapshotRef {
            id: Some(record.snapshot_id.clone()),
            late,
            skipped: record.skipped.clone(),
            left_out: record.left_out.clone(),
            stat_cache_dropped: record.stat_cache_dropped.clone(),
        }
    }
}

/// One turn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Turn {
    /// Stable id (UUID v7).
    pub(crate) turn_id: String,
    /// The session.
    pub(crate) session_id: String,
    /// 1-based position in the session.
    pub(crate) index: u64,
    /// Prompt or background.
    pub(crate) kind: TurnKind,
    /// The prompt's first line, at most 120 characters.
    pub(crate) preview: String,
    /// When it started.
    pub(crate) started_at: String,
    /// When it ended.
    pub(crate) ended_at: Option<String>,
    /// The snapshot at its start.
    pub(crate) snapshot: SnapshotRef,
    /// The snapshot at its end.
    pub(crate) end_snapshot: Option<SnapshotRef>,
    /// Shell commands the agent ran in the turn (secrets redacted): never reversible, kept
    /// so a rewind can say exactly what it cannot take back.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) shell_effects: Vec<ShellEffect>,
    /// Times the agent carried on after it had stopped (the turn was reopened).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub(crate) continuations: u32,
    /// Sub-agents the agent ran in the turn.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) subagents: Vec<Subagent>,
    /// Set when a rewind took the turn back (to its start or an earlier turn's): its
    /// history is cut, and an import of the agent's transcript leaves it out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) rewound: Option<RewoundBy>,
}

/// The rewind that took a turn back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RewoundBy {
    /// When (RFC 3339).
    pub(crate) at: String,
    /// The rewind's undo checkpoint (rolling it back gives the turn back), when it made one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) checkpoint: Option<String>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// A sub-agent run during a turn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Subagent {
    /// The agent's id for it.
    pub(crate) id: String,
    /// What kind of sub-agent (the agent's own name for it), when told.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) kind: Option<String>,
    /// When it started.
    pub(crate) started_at: String,
    /// When it stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) stopped_at: Option<String>,
}

/// A shell command run during a turn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ShellEffect {
    /// The command, secrets redacted.
    pub(crate) command: String,
    /// When it was recorded.
    pub(crate) at: String,
    /// The caller's id for it (a tool-use id), so a repeated report is recorded once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) id: Option<String>,
    /// Its exit status, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) exit_status: Option<i32>,
    /// It failed (a non-zero exit, or the agent reported the call failed).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) failed: bool,
    /// Its own `shell` checkpoint, when its window saw files change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) checkpoint_id: Option<String>,
    /// Why no window was taken around it, when none was: its file effects are then in the
    /// turn's snapshots only (a rewind takes them back, a rollback cannot).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) no_window: Option<String>,
}

impl Turn {
    /// Whether the turn is still running.
    pub(crate) fn running(&self) -> bool {
        self.ended_at.is_none()
    }
}

/// The first line of `prompt`, cut to [`PREVIEW_CHARS`] characters.
pub(crate) fn preview(prompt: &str) -> String {
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
    txn.put(schema::TURNS, key, &store.seal_record(schema::TURNS, key, TURN_SCHEMA, turn)?)?;
    let index_key = format!("{}/{:010}", turn.session_id, turn.index);
    digest::put(store.keys(), txn, schema::TURNS_BY_SESSION, index_key.as_bytes(), key)
}

/// Removes, inside `txn`, the index row that places a turn of `session` at `index` (a
/// pull moving a turn up to make room for another machine's turn; [`put`] places it anew).
#[cfg(feature = "remote")]
pub(crate) fn unindex_in(store: &Store, txn: &mut dyn Txn, session: &str, index: u64) -> Result<()> {
    let index_key = format!("{session}/{index:010}");
    digest::delete(store.keys(), txn, schema::TURNS_BY_SESSION, index_key.as_bytes()).map(drop)
}

fn get_in(store: &Store, txn: &mut dyn Txn, id: &str) -> Result<Option<Turn>> {
    match txn.get(schema::TURNS, id.as_bytes())? {
        Some(v) => store.open_record(schema::TURNS, id.as_bytes(), &v).map(Some),
        None => Ok(None),
    }
}

/// The turn `id`.
pub(crate) fn get(store: &Store, id: &str) -> Result<Turn> {
    store.get_record(schema::TURNS, id.as_bytes())?.ok_or_else(|| Error::not_found(format!("turn {id}")))
}

/// The turns of `session`, oldest first.
pub(crate) fn list(store: &Store, session: &str) -> Result<Vec<Turn>> {
    let prefix = format!("{session}/");
    let mut ids = Vec::new();
    store.kv().scan(schema::TURNS_BY_SESSION, prefix.as_bytes(), &mut |_, v| {
        ids.push(String::from_utf8_lossy(v).into_owned());
        Ok(true)
    })?;
    ids.iter().map(|id| get(store, id)).collect()
}

/// The session's running turn, if any (a prompt turn before a background one).
pub(crate) fn running(store: &Store, session: &str) -> Result<Option<Turn>> {
    let turns = list(store, session)?;
    let prompt = turns.iter().rev().find(|t| t.running() && t.kind == TurnKind::Prompt);
    Ok(prompt.or_else(|| turns.iter().rev().find(|t| t.running())).cloned())
}

/// The turn with 1-based `index` in `session`.
pub(crate) fn by_index(store: &Store, session: &str, index: u64) -> Result<Turn> {
    let key = format!("{session}/{index:010}");
    let id = store
        .kv()
        .get(schema::TURNS_BY_SESSION, key.as_bytes())?
        .ok_or_else(|| Error::not_found(format!("turn {index}")))?;
    get(store, &String::from_utf8_lossy(&id))
}

/// How a begin meets the running turn.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Joining {
    /// A new turn begins.
    New,
    /// The running prompt turn is joined by a message sent while it runs (it goes into
    /// the turn's history).
    Message(Turn),
    /// The running prompt turn is joined by the prompt that began it, delivered again.
    Repeat(Turn),
}

/// Decides, before anything is snapshotted, how a begin meets the running turn. Background
/// work is always a turn of its own, and a background turn is never joined. The same
/// prompt delivered again within a minute of its turn's start (an agent's hook firing
/// twice) joins that turn. Otherwise a message sent while a prompt turn runs joins it —
/// unless the begin asks for a `new` turn (an agent starting its reply to a prompt: the
/// turn that runs was interrupted, and ends where the new one begins).
pub(crate) fn joins(
    store: &Store,
    session: &Session,
    background: bool,
    new: bool,
    prompt: Option<&str>,
) -> Result<Joining> {
    if background {
        return Ok(Joining::New);
    }
    let Some(running) = running(store, &session.id)?.filter(|t| t.kind == TurnKind::Prompt) else {
        return Ok(Joining::New);
    };
    Ok(match prompt {
        Some(p) if repeats(&running, p) => Joining::Repeat(running),
        _ if new => Joining::New,
        Some(_) => Joining::Message(running),
        None => Joining::Repeat(running),
    })
}

/// Whether `prompt`, arriving while `running` runs, is the same prompt delivered again:
/// the same preview, within a minute of the turn's start.
fn repeats(running: &Turn, prompt: &str) -> bool {
    let started = running.started_at.parse::<jiff::Timestamp>().ok();
    let recent = started.is_some_and(|t| jiff::Timestamp::now().duration_since(t).as_secs() < 60);
    recent && running.preview == preview(prompt)
}

/// A fresh turn id for a turn about to begin (its snapshot is taken under this id).
pub(crate) fn new_id() -> String {
    uuid::Uuid::now_v7().to_string()
}

/// What a new turn is: its prompt (for the preview) and whether it is background work.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NewTurn<'a> {
    pub prompt: Option<&'a str>,
    pub background: bool,
}

/// Records the new turn `turn_id`, with its start snapshot if it is done (`late` if it
/// was not done within the wait; it is attached when it commits, see [`Hooks`]);
/// `failure` says why there is none when the snapshot process failed.
/// Ends a running turn it supersedes. Advances the session's prompt round. `also` writes
/// what goes with the turn (its prompt's history entry) in the same transaction.
pub(crate) fn record(
    store: &Store,
    session: &Session,
    turn_id: &str,
    new: NewTurn<'_>,
    late: bool,
    failure: Option<String>,
    also: &dyn Fn(&mut dyn Txn, &Turn) -> Result<()>,
) -> Result<Turn> {
    let mut txn = store.kv().begin()?;
    let prefix = format!("{}/", session.id);
    let keys = txn.keys(schema::TURNS_BY_SESSION, prefix.as_bytes())?;
    let index =
        keys.last().and_then(|k| std::str::from_utf8(&k[prefix.len()..]).ok()?.parse::<u64>().ok()).unwrap_or(0) + 1;
    let now = format_ms(now_ms());
    let snapshot_id = snapshot::of_turn(&mut *txn, turn_id, SnapshotKind::TurnStart)?;
    let start = match &snapshot_id {
        Some(id) => snapshot::get_in(store, &mut *txn, id)?,
        None => None,
    };
    // A new prompt supersedes a running prompt turn: it ends where the new one starts, so
    // its end is the new turn's start snapshot (when that is already taken).
    for key in &keys {
        if let Some(id) = txn.get(schema::TURNS_BY_SESSION, key)?
            && let Some(mut t) = get_in(store, &mut *txn, &String::from_utf8_lossy(&id))?
            && t.running()
            && t.kind == TurnKind::Prompt
            && !new.background
        {
            t.ended_at = Some(now.clone());
            if snapshot_id.is_some() {
                t.end_snapshot = Some(match &start {
                    Some(r) => SnapshotRef { skipped: None, ..SnapshotRef::of(r, late) },
                    None => SnapshotRef { id: snapshot_id.clone(), late, ..SnapshotRef::default() },
                });
            }
            put(store, &mut *txn, &t)?;
        }
    }
    let snapshot = match (&start, &snapshot_id) {
        (Some(r), _) => SnapshotRef::of(r, late),
        (None, Some(_)) => SnapshotRef { id: snapshot_id, late, ..SnapshotRef::default() },
        (None, None) => SnapshotRef { late, skipped: failure, ..SnapshotRef::default() },
    };
    let turn = Turn {
        turn_id: turn_id.to_string(),
        session_id: session.id.clone(),
        index,
        kind: if new.background { TurnKind::Background } else { TurnKind::Prompt },
        preview: new.prompt.map(preview).unwrap_or_default(),
        started_at: now,
        ended_at: None,
        snapshot,
        end_snapshot: None,
        shell_effects: Vec::new(),
        continuations: 0,
        subagents: Vec::new(),
        rewound: None,
    };
    put(store, &mut *txn, &turn)?;
    also(&mut *txn, &turn)?;
    // The session's round is the newest turn's index.
    Session::set_round_in(store, &mut *txn, &session.id, index)?;
    // Keep the newest MAX_TURNS (index entries and records).
    if keys.len() + 1 > MAX_TURNS {
        for key in &keys[..keys.len() + 1 - MAX_TURNS] {
            if let Some(id) = txn.get(schema::TURNS_BY_SESSION, key)? {
                txn.delete(schema::TURNS, &id)?;
            }
            digest::delete(store.keys(), &mut *txn, schema::TURNS_BY_SESSION, key)?;
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
    let keys = txn.keys(schema::TURNS_BY_SESSION, prefix.as_bytes())?;
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
        snapshot: SnapshotRef { skipped: Some(why.to_string()), ..SnapshotRef::default() },
        end_snapshot: None,
        shell_effects: Vec::new(),
        continuations: 0,
        subagents: Vec::new(),
        rewound: None,
    };
    put(store, txn, &turn)?;
    Session::set_round_in(store, txn, session, index)?;
    Ok(turn)
}

/// Marks, inside `txn`, each of `turns` (the session's, read beforehand) from index `from`
/// on as taken back by a rewind at `at` whose undo checkpoint is `checkpoint`. A turn an
/// earlier rewind took back keeps that rewind's mark. Returns how many were marked.
pub(crate) fn mark_rewound_in(
    store: &Store,
    txn: &mut dyn Txn,
    turns: &[Turn],
    from: u64,
    at: &str,
    checkpoint: Option<&str>,
) -> Result<u64> {
    let mut marked = 0;
    for t in turns.iter().filter(|t| t.index >= from && t.rewound.is_none()) {
        let rewound = RewoundBy { at: at.to_string(), checkpoint: checkpoint.map(str::to_string) };
        put(store, txn, &Turn { rewound: Some(rewound), ..t.clone() })?;
        marked += 1;
    }
    Ok(marked)
}

/// Clears, inside `txn`, the marks of the rewind whose undo checkpoint is `checkpoint`
/// from each of `turns` (that undo was applied: the turns are back). Returns how many.
pub(crate) fn unmark_rewound_in(store: &Store, txn: &mut dyn Txn, turns: &[Turn], checkpoint: &str) -> Result<u64> {
    let mut cleared = 0;
    for t in turns.iter().filter(|t| t.rewound.as_ref().is_some_and(|r| r.checkpoint.as_deref() == Some(checkpoint))) {
        put(store, txn, &Turn { rewound: None, ..t.clone() })?;
        cleared += 1;
    }
    Ok(cleared)
}

/// What the turns are told by the snapshots that belong to them (see [`snapshot::Hooks`]).
pub(crate) struct Hooks<'a> {
    store: &'a Store,
    /// The turn whose start snapshot this process took note it is taking.
    taking: Option<&'a str>,
}

impl<'a> Hooks<'a> {
    /// The hooks every snapshot of a session runs.
    pub(crate) fn new(store: &'a Store) -> Self {
        Hooks { store, taking: None }
    }
}

impl snapshot::Hooks for Hooks<'_> {
    /// If the turn is already recorded (its snapshot was late), the snapshot is attached to
    /// it here, in the transaction that commits the snapshot.
    fn committed(&self, txn: &mut dyn Txn, record: &SnapshotRecord) -> Result<()> {
        if let Some(turn_id) = self.taking {
            txn.delete(schema::TURNS_TAKING_SNAPSHOT, turn_id.as_bytes())?;
        }
        let Some(turn_id) = &record.turn_id else { return Ok(()) };
        let Some(mut turn) = get_in(self.store, txn, turn_id)? else { return Ok(()) };
        let slot = match record.kind {
            SnapshotKind::TurnEnd => {
                turn.end_snapshot.get_or_insert(SnapshotRef { late: true, ..SnapshotRef::default() })
            }
            _ => &mut turn.snapshot,
        };
        if slot.id.is_none() {
            *slot = SnapshotRef::of(record, slot.late);
            put(self.store, txn, &turn)?;
        }
        Ok(())
    }

    /// The turn's start or end snapshot is marked pruned, if it is still this one (a
    /// reopened turn's earlier end snapshot is not its end any more).
    fn pruned(&self, txn: &mut dyn Txn, record: &SnapshotRecord) -> Result<()> {
        let Some(turn_id) = &record.turn_id else { return Ok(()) };
        let Some(mut turn) = get_in(self.store, txn, turn_id)? else { return Ok(()) };
        let slot = match record.kind {
            SnapshotKind::TurnEnd => turn.end_snapshot.as_mut(),
            _ => Some(&mut turn.snapshot),
        };
        if let Some(slot) = slot.filter(|s| s.id.as_deref() == Some(record.snapshot_id.as_str())) {
            slot.id = None;
            slot.skipped = Some("pruned (the session's snapshot budget)".into());
            put(self.store, txn, &turn)?;
        }
        Ok(())
    }
}

/// Deletes every turn of `session` inside `txn`; returns how many.
pub(crate) fn delete_session_in(store: &Store, txn: &mut dyn Txn, session: &str) -> Result<u64> {
    let prefix = format!("{session}/");
    let mut deleted = 0;
    for key in txn.keys(schema::TURNS_BY_SESSION, prefix.as_bytes())? {
        if let Some(id) = txn.get(schema::TURNS_BY_SESSION, &key)? {
            txn.delete(schema::TURNS, &id)?;
        }
        digest::delete(store.keys(), txn, schema::TURNS_BY_SESSION, &key)?;
        deleted += 1;
    }
    Ok(deleted)
}

/// A shell command to record: the command as run, the caller's id for it, and how it
/// ended when that is known.
#[derive(Debug, Clone, Copy, Default)]
pub struct Shell<'a> {
    /// The command line.
    pub command: &'a str,
    /// The caller's id for it (a tool-use id): a repeated report is recorded once.
    pub id: Option<&'a str>,
    /// Its exit status.
    pub exit_status: Option<i32>,
    /// The agent reported that it failed.
    pub failed: bool,
    /// Its own checkpoint, if its window made one.
    pub checkpoint_id: Option<&'a str>,
    /// Why it had no window, if it had none.
    pub no_window: Option<&'a str>,
}

/// Records a shell command (redacted here) as an effect of the session's running turn, once
/// per id. Returns the turn, or `None` when no turn is running.
pub(crate) fn record_shell(store: &Store, session: &str, shell: Shell<'_>) -> Result<Option<Turn>> {
    let (command, id) = (shell.command, shell.id);
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
        exit_status: shell.exit_status,
        failed: shell.failed || shell.exit_status.is_some_and(|s| s != 0),
        checkpoint_id: shell.checkpoint_id.map(str::to_string),
        no_window: shell.no_window.map(str::to_string),
    });
    put(store, &mut *txn, &turn)?;
    txn.commit()?;
    Ok(Some(turn))
}

/// Ends the running turn of `session` with its end snapshot, telling `progress` how the
/// snapshot's reading goes (bytes read, to read).
///
/// # Errors
/// `not-found` if no turn is running.
pub(crate) fn end(
    store: &Store,
    workspace: &Workspace,
    session: &Session,
    progress: Option<&(dyn Fn(u64, u64) + Sync)>,
) -> Result<Turn> {
    let turn = running(store, &session.id)?
        .ok_or_else(|| Error::new(ErrorCode::NotFound, format!("no turn is running in session {}", session.id)))?;
    let opts = TakeOptions {
        kind: Some(SnapshotKind::TurnEnd),
        turn_id: Some(&turn.turn_id),
        cancel: None,
        progress,
        full: false,
    };
    let snap = snapshot::take(store, source(workspace, session), &opts, &Hooks::new(store))?;
    let mut txn = store.kv().begin()?;
    let mut turn = get_in(store, &mut *txn, &turn.turn_id)?.ok_or_else(|| Error::not_found("turn"))?;
    turn.ended_at = Some(format_ms(now_ms()));
    turn.end_snapshot = Some(SnapshotRef::of(&snap, false));
    put(store, &mut *txn, &turn)?;
    txn.commit()?;
    Ok(turn)
}

/// What a snapshot of `workspace` for `session` is of.
pub(crate) fn source<'a>(workspace: &'a Workspace, session: &'a Session) -> Source<'a> {
    Source { workspace_id: &workspace.id, root: &workspace.root, session_id: &session.id }
}

/// Reopens the session's newest turn if it has ended and no turn is running: the agent
/// carried on after its stop. Returns the reopened turn (`None`: a turn is running, or
/// there is none).
pub(crate) fn reopen(store: &Store, session: &str) -> Result<Option<Turn>> {
    let mut txn = store.kv().begin()?;
    let prefix = format!("{session}/");
    let Some(newest) = txn.keys(schema::TURNS_BY_SESSION, prefix.as_bytes())?.pop() else { return Ok(None) };
    let Some(id) = txn.get(schema::TURNS_BY_SESSION, &newest)? else { return Ok(None) };
    let Some(mut turn) = get_in(store, &mut *txn, &String::from_utf8_lossy(&id))? else { return Ok(None) };
    if turn.running() {
        return Ok(None);
    }
    turn.ended_at = None;
    // The earlier end snapshot stays a snapshot of this turn (pruned with it), but is no
    // longer its end: the next end snapshot will be.
    turn.end_snapshot = None;
    turn.continuations += 1;
    put(store, &mut *txn, &turn)?;
    txn.commit()?;
    Ok(Some(turn))
}

/// Records that a sub-agent started (`stopped`: stopped) in the session's running turn,
/// once per id. Returns the turn, or `None` when no turn is running.
pub(crate) fn record_subagent(
    store: &Store,
    session: &str,
    id: &str,
    kind: Option<&str>,
    stopped: bool,
) -> Result<Option<Turn>> {
    let Some(running) = running(store, session)? else { return Ok(None) };
    let mut txn = store.kv().begin()?;
    let Some(mut turn) = get_in(store, &mut *txn, &running.turn_id)? else { return Ok(None) };
    let now = format_ms(now_ms());
    let at = match turn.subagents.iter().position(|a| a.id == id) {
        Some(i) => i,
        None => {
            turn.subagents.push(Subagent {
                id: id.to_string(),
                kind: kind.map(str::to_string),
                started_at: now.clone(),
                stopped_at: None,
            });
            turn.subagents.len() - 1
        }
    };
    if stopped {
        turn.subagents[at].stopped_at.get_or_insert(now);
    }
    put(store, &mut *txn, &turn)?;
    txn.commit()?;
    Ok(Some(turn))
}

/// Takes the start snapshot of turn `turn_id` (in this process or a detached one).
pub(crate) fn take_start_snapshot(
    store: &Store,
    workspace: &Workspace,
    session: &Session,
    turn_id: &str,
    cancel: Option<&std::sync::atomic::AtomicBool>,
) -> Result<SnapshotRecord> {
    // Say who is taking it, so that if this process dies before it commits, reconcile can
    // tell the turn its snapshot will never come.
    let owner = store.owner()?.id().to_string();
    let mut txn = store.kv().begin()?;
    txn.put(schema::TURNS_TAKING_SNAPSHOT, turn_id.as_bytes(), owner.as_bytes())?;
    txn.commit()?;
    let hooks = Hooks { store, taking: Some(turn_id) };
    let opts = TakeOptions {
        kind: Some(SnapshotKind::TurnStart),
        turn_id: Some(turn_id),
        cancel,
        progress: None,
        full: false,
    };
    let taken = snapshot::take(store, source(workspace, session), &opts, &hooks);
    if taken.is_err() {
        let mut txn = store.kv().begin()?;
        txn.delete(schema::TURNS_TAKING_SNAPSHOT, turn_id.as_bytes())?;
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
pub(crate) fn reconcile(store: &Store) -> Result<u64> {
    let mut taking = Vec::new();
    store.kv().scan(schema::TURNS_TAKING_SNAPSHOT, b"", &mut |k, v| {
        taking.push((String::from_utf8_lossy(k).into_owned(), String::from_utf8_lossy(v).into_owned()));
        Ok(true)
    })?;
    let mut fixed = 0;
    for (turn_id, owner) in taking {
        if crate::fs::lock::owner_alive(&store.locks_dir(), &owner)? {
            continue;
        }
        let mut txn = store.kv().begin()?;
        if txn.get(schema::TURNS_TAKING_SNAPSHOT, turn_id.as_bytes())?.is_some() {
            txn.delete(schema::TURNS_TAKING_SNAPSHOT, turn_id.as_bytes())?;
            mark_start_failed(store, &mut *txn, &turn_id, "the process taking the late start snapshot died")?;
            fixed += 1;
        }
        txn.commit()?;
    }
    Ok(fixed)
}

/// Removes the start snapshot of a turn that was cancelled before it was recorded.
pub(crate) fn discard_start_snapshot(store: &Store, turn_id: &str) -> Result<()> {
    let mut txn = store.kv().begin()?;
    if let Some(id) = snapshot::of_turn(&mut *txn, turn_id, SnapshotKind::TurnStart)?
        && let Some(record) = snapshot::get_in(store, &mut *txn, &id)?
    {
        snapshot::discard(&mut *txn, &record)?;
    }
    txn.commit()
}

/// Cross-checks turns against their index, for `verify`: each row `session/index` names
/// a turn record of that session at that index, and each turn record is at its own row.
pub(crate) fn cross_check(store: &Store) -> Result<Vec<(String, Error)>> {
    let mut problems = Vec::new();
    let mut rows = Vec::new();
    store.kv().scan(schema::TURNS_BY_SESSION, b"", &mut |k, v| {
        rows.push((String::from_utf8_lossy(k).into_owned(), String::from_utf8_lossy(v).into_owned()));
        Ok(true)
    })?;
    for (key, id) in &rows {
        let what = format!("turns-by-session row {key}");
        let Some((session, index)) = key.split_once('/') else { continue };
        match store.get_record::<Turn>(schema::TURNS, id.as_bytes()) {
            Ok(Some(t)) if t.session_id != session || Some(t.index) != index.parse().ok() => problems.push((
                what,
                Error::corrupt(
                    "turns-by-session",
                    format!("names turn {id}, which is turn {} of session {}", t.index, t.session_id),
                ),
            )),
            Ok(Some(_)) => {}
            Ok(None) => {
                problems.push((what, Error::new(ErrorCode::NotFound, format!("names turn {id}, whose record is gone"))))
            }
            // An altered record is reported where every sealed record is opened.
            Err(_) => {}
        }
    }
    let indexed: std::collections::HashSet<(&str, &[u8])> =
        rows.iter().map(|(key, id)| (key.as_str(), id.as_bytes())).collect();
    let mut records = Vec::new();
    store.kv().scan(schema::TURNS, b"", &mut |k, v| {
        records.push((k.to_vec(), v.to_vec()));
        Ok(true)
    })?;
    for (k, v) in records {
        let Ok(t) = store.open_record::<Turn>(schema::TURNS, &k, &v) else { continue };
        let key = format!("{}/{:010}", t.session_id, t.index);
        if !indexed.contains(&(key.as_str(), k.as_slice())) {
            problems.push((
                format!("turn {}", t.turn_id),
                Error::new(
                    ErrorCode::NotFound,
                    format!("turn {} of session {} is missing from its index", t.index, t.session_id),
                ),
            ));
        }
    }
    Ok(problems)
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
