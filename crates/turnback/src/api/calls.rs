//! Tool calls by the agent's own key (its tool-use id). An agent reports a call's "before"
//! and "after" in separate events (separate processes, for hooks), sometimes twice, late,
//! or never; the store remembers every call it has been told of.
//!
//! Invariants:
//! - A key is `seen` (reported, nothing staged), `pending` (its files staged: the
//!   operation id) or `done` (committed, or ended with nothing staged), and only ever
//!   moves forward. Seeing a key again
//!   changes nothing: a repeated event neither stages nor commits twice.
//! - A key becomes `pending` in the very transaction that stages its files, so a crash
//!   never leaves a stage its key cannot find, nor a key pointing at nothing; of two
//!   processes staging the same call at once, one stages and the other is given its stage.
//! - No call of the main agent stays `pending` past a turn boundary: an agent never
//!   reports the end of a call the person denied, so the boundary (and the next call on
//!   the same file) commits it as failed, with what the file holds then. A sub-agent's
//!   call is not the main agent's to close: a sub-agent working in the background goes
//!   on past the main agent's stop, so its call stays pending until its own "after"
//!   event, the next call on the same file, the sub-agent's stop, or the session's end.
//! - A call the agent gives no id is keyed by its name and paths (a keyed hash: stable
//!   across processes and releases, revealing nothing) and a counter: its start takes the
//!   key of a call of the same name and paths still pending (the same start delivered
//!   again), else a fresh one; its "after" event commits the oldest pending one. Two such
//!   calls one after another on the same file are two checkpoints.
//! - Keys live as long as their session.

use std::path::PathBuf;

use crate::api::Turnback;
use crate::api::external::{commit_external, stage_external};
use crate::api::mutation::{CheckpointSummary, Context};
use crate::checkpoint::{self, CheckpointRecord};
use crate::error::{Error, ErrorCode, Result};
use crate::fs::relpath::RelPath;
use crate::storage::kv::Txn;
use crate::storage::schema;
use crate::storage::store::Store;

/// What the key of a sub-agent's window begins with.
const SUBAGENT_KEY_PREFIX: &str = "subagent:";

/// The key a sub-agent (its start, its window) is kept under among the calls.
pub(crate) fn subagent_key(id: &str) -> String {
    format!("{SUBAGENT_KEY_PREFIX}{id}")
}

/// What the store knows of one call.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Call {
    /// Reported; nothing staged.
    Seen,
    /// Its files are staged under this operation.
    Pending(String),
    /// A shell call whose start was snapshotted (this snapshot): its window is open.
    Window(String),
    /// A shell call whose start took no snapshot, for this reason.
    NoWindow(String),
    /// Committed (this operation).
    Done(String),
}

impl Call {
    fn encode(&self) -> Vec<u8> {
        match self {
            Call::Seen => b"seen".to_vec(),
            Call::Pending(op) => format!("pending:{op}").into_bytes(),
            Call::Window(snapshot) => format!("window:{snapshot}").into_bytes(),
            Call::NoWindow(why) => format!("nowindow:{why}").into_bytes(),
            Call::Done(op) => format!("done:{op}").into_bytes(),
        }
    }

    /// The state `value` holds; anything else (the bare operation id of an unreleased
    /// build's store, a damaged row) is `corrupt`.
    fn decode(value: &[u8]) -> Result<Call> {
        let text = String::from_utf8_lossy(value);
        match text.split_once(':') {
            _ if text == "seen" => Ok(Call::Seen),
            Some(("pending", op)) => Ok(Call::Pending(op.to_string())),
            Some(("window", snapshot)) => Ok(Call::Window(snapshot.to_string())),
            Some(("nowindow", why)) => Ok(Call::NoWindow(why.to_string())),
            Some(("done", op)) => Ok(Call::Done(op.to_string())),
            _ => Err(Error::corrupt("a tool call's record", "not a call state")),
        }
    }
}

fn key_of(session: &str, key: &str) -> Vec<u8> {
    format!("{session}/{key}").into_bytes()
}

fn get(store: &Store, session: &str, key: &str) -> Result<Option<Call>> {
    store.kv().get(schema::EXTERNAL_OPERATIONS, &key_of(session, key))?.map(|v| Call::decode(&v)).transpose()
}

fn set(store: &Store, session: &str, key: &str, call: &Call) -> Result<()> {
    let mut txn = store.kv().begin()?;
    txn.put(schema::EXTERNAL_OPERATIONS, &key_of(session, key), &call.encode())?;
    txn.commit()
}

/// The keys of the calls without an id named `name` on `paths`, with their states, oldest
/// first.
fn anonymous(store: &Store, session: &str, name: &str, paths: &[PathBuf]) -> Result<(String, Vec<(String, Call)>)> {
    let mut named = name.as_bytes().to_vec();
    for p in paths {
        named.push(0);
        named.extend_from_slice(p.as_os_str().as_encoded_bytes());
    }
    let digest = store.keys().lookup_id("tool-call", &named);
    let base: String = digest[..12].iter().map(|b| format!("{b:02x}")).collect();
    let base = format!("anon-{base}#");
    let prefix = key_of(session, &base);
    let mut out = Vec::new();
    store.kv().scan(schema::EXTERNAL_OPERATIONS, &prefix, &mut |k, v| {
        let key = String::from_utf8_lossy(&k[session.len() + 1..]).into_owned();
        out.push((key, Call::decode(v)?));
        Ok(true)
    })?;
    Ok((base, out))
}

/// The key a call's start is kept under: its id, else (see the module docs) the key of a
/// pending call of the same name and paths, or a fresh one.
pub(crate) fn start_key(
    store: &Store,
    session: &str,
    id: Option<&str>,
    name: &str,
    paths: &[PathBuf],
) -> Result<String> {
    if let Some(id) = id {
        return Ok(id.to_string());
    }
    let (base, calls) = anonymous(store, session, name, paths)?;
    if let Some((key, _)) =
        calls.iter().find(|(_, c)| matches!(c, Call::Pending(_) | Call::Window(_) | Call::NoWindow(_) | Call::Seen))
    {
        return Ok(key.clone());
    }
    Ok(format!("{base}{:08}", calls.len() + 1))
}

/// The key a call's "after" event settles: its id, else the oldest pending call of the same
/// name and paths (`None`: nothing is pending, the event came twice or without its start).
pub(crate) fn end_key(
    store: &Store,
    session: &str,
    id: Option<&str>,
    name: &str,
    paths: &[PathBuf],
) -> Result<Option<String>> {
    if let Some(id) = id {
        return Ok(Some(id.to_string()));
    }
    let (_, calls) = anonymous(store, session, name, paths)?;
    Ok(calls
        .into_iter()
        .find(|(_, c)| matches!(c, Call::Pending(_) | Call::Window(_) | Call::NoWindow(_) | Call::Seen))
        .map(|(k, _)| k))
}

/// Records that call `key` was reported; `true` if it had not been before.
pub(crate) fn note(store: &Store, session: &str, key: &str) -> Result<bool> {
    let mut txn = store.kv().begin()?;
    let new = txn.put_if_absent(schema::EXTERNAL_OPERATIONS, &key_of(session, key), &Call::Seen.encode())?;
    txn.commit()?;
    Ok(new)
}

/// Stages the files call `key` is about to write, unless it staged them already (then its
/// checkpoint is returned as it is). An earlier call on one of the same files that never
/// got its "after" event is committed first, as failed: calls on one file run one after
/// another, so it is over, and the file still holds what it left.
/// `None`: the call already ended without staging anything (a start delivered again after
/// its end).
pub(crate) fn stage(ctx: Context<'_>, key: &str, paths: &[PathBuf]) -> Result<Option<CheckpointRecord>> {
    let session = &ctx.session.id;
    match get(ctx.store, session, key)? {
        Some(Call::Done(op)) if op.is_empty() => return Ok(None),
        Some(Call::Pending(op) | Call::Done(op)) => return staged(ctx.store, &op).map(Some),
        _ => {}
    }
    let rels = paths
        .iter()
        .map(|p| ctx.workspace.resolve(p, ctx.cwd, ctx.store.protected_paths()))
        .collect::<Result<Vec<_>>>()?;
    // Never this call itself: the same start delivered at once by another process may have
    // staged it between the look above and here, and its end is still to come.
    finish_abandoned(ctx.store, session, Closing::OnPaths { paths: &rels, starting: key })?;
    let record_key = key_of(session, key);
    let also = |txn: &mut dyn Txn, record: &CheckpointRecord| {
        // The same call delivered twice at once: the other stage won; this one goes.
        if let Some(Call::Pending(_) | Call::Done(_)) =
            txn.get(schema::EXTERNAL_OPERATIONS, &record_key)?.map(|v| Call::decode(&v)).transpose()?
        {
            return Err(Error::new(ErrorCode::ConcurrentUpdate, format!("tool call {key} was staged meanwhile")));
        }
        let pending = Call::Pending(record.mutation.operation_id.clone());
        txn.put(schema::EXTERNAL_OPERATIONS, &record_key, &pending.encode())
    };
    match stage_external(ctx, paths, None, Some(&also)) {
        Err(e) if e.code == ErrorCode::ConcurrentUpdate => match get(ctx.store, session, key)? {
            Some(Call::Pending(op) | Call::Done(op)) if !op.is_empty() => staged(ctx.store, &op).map(Some),
            _ => Err(e),
        },
        other => other.map(Some),
    }
}

/// The checkpoint operation `op` staged.
fn staged(store: &Store, op: &str) -> Result<CheckpointRecord> {
    checkpoint::load(store, &checkpoint::by_operation(store, op)?)
}

/// Commits call `key`'s staged files; `None` if nothing of it is pending (an "after" event
/// without its "before", one delivered twice, or a call that staged nothing — which is
/// then done).
pub(crate) fn commit(store: &Store, session: &str, key: &str, failed: bool) -> Result<Option<CheckpointRecord>> {
    match get(store, session, key)? {
        Some(Call::Pending(op)) => {
            let record = commit_external(store, &op, failed)?;
            set(store, session, key, &Call::Done(op))?;
            Ok(Some(record))
        }
        Some(Call::Seen | Call::NoWindow(_)) => set(store, session, key, &Call::Done(String::new())).map(|()| None),
        _ => Ok(None),
    }
}

/// Opens the window of shell call `key` at `snapshot` (its start), unless the call was
/// reported before (started twice, or ended): `true` if it opened.
pub(crate) fn open_window(store: &Store, session: &str, key: &str, snapshot: &str) -> Result<bool> {
    let mut txn = store.kv().begin()?;
    let record_key = key_of(session, key);
    let now = txn.get(schema::EXTERNAL_OPERATIONS, &record_key)?.map(|v| Call::decode(&v)).transpose()?;
    if !matches!(now, None | Some(Call::Seen)) {
        return Ok(false);
    }
    txn.put(schema::EXTERNAL_OPERATIONS, &record_key, &Call::Window(snapshot.to_string()).encode())?;
    txn.commit()?;
    Ok(true)
}

/// Records that shell call `key`'s start took no snapshot, and `why`, unless the call was
/// reported before (started twice, or ended).
pub(crate) fn refuse_window(store: &Store, session: &str, key: &str, why: &str) -> Result<()> {
    let mut txn = store.kv().begin()?;
    let record_key = key_of(session, key);
    let now = txn.get(schema::EXTERNAL_OPERATIONS, &record_key)?.map(|v| Call::decode(&v)).transpose()?;
    if matches!(now, None | Some(Call::Seen)) {
        txn.put(schema::EXTERNAL_OPERATIONS, &record_key, &Call::NoWindow(why.to_string()).encode())?;
        txn.commit()?;
    }
    Ok(())
}

/// Why shell call `key`'s start took no snapshot, if it took none for a reason.
pub(crate) fn no_window(store: &Store, session: &str, key: &str) -> Result<Option<String>> {
    Ok(match get(store, session, key)? {
        Some(Call::NoWindow(why)) => Some(why),
        _ => None,
    })
}

/// The snapshot shell call `key`'s window opened at, if it is open.
pub(crate) fn window(store: &Store, session: &str, key: &str) -> Result<Option<String>> {
    Ok(match get(store, session, key)? {
        Some(Call::Window(snapshot)) => Some(snapshot),
        _ => None,
    })
}

/// Closes shell call `key`: done, with the operation of its checkpoint (empty: none).
pub(crate) fn close_window(store: &Store, session: &str, key: &str, op: &str) -> Result<()> {
    set(store, session, key, &Call::Done(op.to_string()))
}

/// Which pending calls a boundary closes.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Closing<'a> {
    /// Every one (the session ends).
    All,
    /// Those on one of these files (a new call on them begins), except that call itself
    /// (key `starting`).
    OnPaths { paths: &'a [RelPath], starting: &'a str },
    /// The main agent's (a turn boundary: a stop, a new prompt).
    MainAgent,
    /// One sub-agent's (it stopped).
    Subagent(&'a str),
}

/// Commits, as failed and with what the files hold now, the pending calls of `session`
/// that `closing` closes. Returns how many.
pub(crate) fn finish_abandoned(store: &Store, session: &str, closing: Closing<'_>) -> Result<u64> {
    let prefix = format!("{session}/");
    let (mut pending, mut windows) = (Vec::new(), Vec::new());
    store.kv().scan(schema::EXTERNAL_OPERATIONS, prefix.as_bytes(), &mut |k, v| {
        let key = String::from_utf8_lossy(&k[prefix.len()..]).into_owned();
        match Call::decode(v)? {
            Call::Pending(op) => pending.push((key, op)),
            Call::Window(_) | Call::NoWindow(_) => windows.push(key),
            _ => {}
        }
        Ok(true)
    })?;
    // A shell call whose end never came (denied, interrupted) leaves its changes to the
    // turn's snapshots: its window closes at a turn boundary with no checkpoint. A
    // sub-agent's window is not the main agent's to close (it may work on in the
    // background): only the session's end, or its own stop, closes it.
    for key in windows {
        let of_subagent = key.starts_with(SUBAGENT_KEY_PREFIX);
        let closes = match closing {
            Closing::All => true,
            Closing::MainAgent => !of_subagent,
            Closing::OnPaths { .. } | Closing::Subagent(_) => false,
        };
        if closes {
            set(store, session, &key, &Call::Done(String::new()))?;
        }
    }
    let mut finished = 0;
    for (key, op) in pending {
        let record = || checkpoint::by_operation(store, &op).and_then(|id| checkpoint::load(store, &id));
        // A record that cannot be read is closed whatever the boundary: it stays no one's.
        let closes = match closing {
            Closing::All => true,
            Closing::OnPaths { starting, .. } if key == starting => false,
            Closing::OnPaths { paths, .. } => {
                record().map(|r| r.targets.iter().any(|t| paths.contains(&t.path))).unwrap_or(true)
            }
            Closing::MainAgent => record().map(|r| r.subagent.is_none()).unwrap_or(true),
            Closing::Subagent(id) => record().map(|r| r.subagent.as_deref() == Some(id)).unwrap_or(true),
        };
        if !closes {
            continue;
        }
        match commit_external(store, &op, true) {
            Ok(_) => finished += 1,
            // Reconciled away meanwhile (recovery-locked) or gone: only the key is left.
            Err(e) if matches!(e.code, ErrorCode::RecoveryLocked | ErrorCode::NotFound) => {}
            Err(e) => return Err(e),
        }
        set(store, session, &key, &Call::Done(op))?;
    }
    Ok(finished)
}

/// Forgets a session's calls inside `txn` (its checkpoints go with it).
pub(crate) fn delete_session_in(txn: &mut dyn Txn, session: &str) -> Result<()> {
    for key in txn.keys(schema::EXTERNAL_OPERATIONS, format!("{session}/").as_bytes())? {
        txn.delete(schema::EXTERNAL_OPERATIONS, &key)?;
    }
    Ok(())
}

impl Turnback {
    /// The key tool call `id` (or, without one, `name` on `paths`) starts under.
    pub(crate) fn tool_call_start_key(&self, id: Option<&str>, name: &str, paths: &[PathBuf]) -> Result<String> {
        start_key(&self.store, &self.session_record()?.id, id, name, paths)
    }

    /// The key tool call `id`'s (or, without one, `name` on `paths`) "after" event settles.
    pub(crate) fn tool_call_end_key(&self, id: Option<&str>, name: &str, paths: &[PathBuf]) -> Result<Option<String>> {
        end_key(&self.store, &self.session_record()?.id, id, name, paths)
    }

    /// Records that the agent reported tool call `key`; `true` if it had not before.
    pub(crate) fn note_tool_call(&self, key: &str) -> Result<bool> {
        note(&self.store, &self.session_record()?.id, key)
    }

    /// Stages the files tool call `key` is about to write (see [`stage`]); `subagent`
    /// names the sub-agent making the call.
    pub(crate) fn stage_tool_call(
        &self,
        key: &str,
        paths: &[PathBuf],
        subagent: Option<&str>,
    ) -> Result<Option<CheckpointSummary>> {
        let (ctx, cwd) = self.mutation_context(true)?;
        let ctx = Context { cwd: &cwd, subagent, ..ctx };
        Ok(stage(ctx, key, paths)?.map(|r| CheckpointSummary::from(&r)))
    }

    /// Commits tool call `key` (`None`: nothing of it was pending).
    pub(crate) fn commit_tool_call(&self, key: &str, failed: bool) -> Result<Option<CheckpointSummary>> {
        Ok(commit(&self.store, &self.session_record()?.id, key, failed)?.map(|r| CheckpointSummary::from(&r)))
    }

    /// Closes, as failed, every tool call of the session still waiting for its "after"
    /// event. Returns how many.
    pub(crate) fn finish_abandoned_tool_calls(&self, closing: Closing<'_>) -> Result<u64> {
        finish_abandoned(&self.store, &self.session_record()?.id, closing)
    }
}

#[cfg(test)]
mod tests {
    use super::{Call, Closing, finish_abandoned, get};
    use crate::fs::relpath::RelPath;
    use crate::{AgentEvent, BeginRequest, KeyConfig, Options, ToolCall, ToolEffect, Turnback};

    fn write_call(id: &str) -> ToolCall {
        ToolCall {
            id: Some(id.into()),
            name: "Write".into(),
            effect: ToolEffect::WritesFiles,
            paths: vec!["a.txt".into()],
            ..ToolCall::default()
        }
    }

    /// The interleaving of one start delivered by two processes at once, made step by step:
    /// one stages the call; the other, which looked before that, then closes the calls left
    /// pending on the same file. It must not close the call itself, whose end is to come;
    /// another call's start on the file still closes it.
    #[test]
    fn a_calls_start_closes_earlier_calls_on_its_files_but_never_itself() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir(&ws).unwrap();
        std::fs::write(ws.join("a.txt"), "before\n").unwrap();
        let options = Options {
            store: Some(dir.path().join("store")),
            keys: KeyConfig::with_key(crate::tests::common::KEY.to_string()),
            create: true,
            ..Options::new(&ws)
        };
        let tb = Turnback::open(&options).unwrap();
        tb.begin_turn(&BeginRequest { prompt: Some("race".into()), ..Default::default() }, None).unwrap();
        let session = tb.session().unwrap().id.clone();
        let paths = [RelPath::new("a.txt").unwrap()];
        let call = write_call("toolu_1");
        tb.record_event(&AgentEvent::ToolStarted { call: call.clone() }, None).unwrap();
        let key = tb.tool_call_start_key(call.id.as_deref(), &call.name, &call.paths).unwrap();
        let closed = finish_abandoned(&tb.store, &session, Closing::OnPaths { paths: &paths, starting: &key }).unwrap();
        assert_eq!(closed, 0);
        assert!(matches!(get(&tb.store, &session, &key).unwrap(), Some(Call::Pending(_))));
        std::fs::write(ws.join("a.txt"), "after\n").unwrap();
        let done = tb.record_event(&AgentEvent::ToolFinished { call }, None).unwrap();
        assert!(done.checkpoint.is_some(), "the call's end commits what its start staged");

        // A later call on the same file whose end never came is closed by the next one's start.
        let abandoned = write_call("toolu_2");
        tb.record_event(&AgentEvent::ToolStarted { call: abandoned.clone() }, None).unwrap();
        let key_2 = tb.tool_call_start_key(abandoned.id.as_deref(), &abandoned.name, &abandoned.paths).unwrap();
        let closed =
            finish_abandoned(&tb.store, &session, Closing::OnPaths { paths: &paths, starting: "another" }).unwrap();
        assert_eq!(closed, 1);
        assert!(matches!(get(&tb.store, &session, &key_2).unwrap(), Some(Call::Done(op)) if !op.is_empty()));
    }

    #[test]
    fn call_states_round_trip_and_anything_else_is_corrupt() {
        for call in [
            Call::Seen,
            Call::Pending("0193-a".into()),
            Call::Window("0193-w".into()),
            Call::NoWindow("a walk takes 200 ms: over 150 ms".into()),
            Call::Done("0193-b".into()),
        ] {
            assert_eq!(Call::decode(&call.encode()).unwrap(), call);
        }
        let bare = Call::decode(b"0193a0b2-0000-7000-8000-000000000000").unwrap_err();
        assert_eq!(bare.code, crate::error::ErrorCode::Corrupt);
    }
}
