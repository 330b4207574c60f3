//! Beginning a turn: the one protocol every entry point uses.
//!
//! 1. One begin at a time per session (a named lock): two prompts arriving at once never
//!    make two turns out of one, nor one out of two.
//! 2. A message sent while a prompt turn runs joins it and goes into its history, unless
//!    the request asks for a new turn; the same prompt delivered again joins its turn and
//!    records nothing ([`turn::joins`] decides).
//! 3. The start snapshot is taken by a [`StartSnapshot`]: in a process that can finish it
//!    after this one stopped waiting (the command line spawns a detached one), or, without
//!    one, right here.
//! 4. The wait is bounded: past it the turn is recorded without its snapshot, marked
//!    `late`, and the snapshot attaches itself to the turn when it commits.
//! 5. A cancel while waiting (the caller's SIGINT/SIGTERM flag) stops the snapshot,
//!    discards whatever of it committed and records no turn: `cancelled`.
//!
//! Invariants: a cancelled begin leaves no turn and no snapshot; a begin that returns has
//! recorded exactly one turn, or joined one; a new turn's prompt is in the history from
//! the transaction that records the turn.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::error::{Error, ErrorCode, Result};
use crate::fs::lock::NamedLock;
use crate::session::Session;
use crate::session::history::{self, NewEntry};
use crate::session::turn::{self, Joining, NewTurn, Turn};
use crate::session::workspace::Workspace;
use crate::storage::kv::Txn;
use crate::storage::store::Store;

/// What to begin.
#[derive(Debug, Clone, Default)]
pub struct BeginRequest {
    /// The prompt (the preview, and an entry in the history).
    pub prompt: Option<String>,
    /// Work the agent started on its own: always a turn of its own.
    pub background: bool,
    /// A new turn even if a prompt turn is running (which then ends where this one
    /// begins); otherwise a message sent while it runs joins it. An agent starting its
    /// reply to a prompt asks for this.
    pub new: bool,
}

/// A begun turn (the facade's view of it is [`Begun`](crate::Begun)).
#[derive(Debug, Clone)]
pub(crate) struct Begun {
    /// A running turn was joined rather than a new one begun.
    pub(crate) joined: bool,
    /// The turn.
    pub(crate) turn: Turn,
}

/// How a turn's start snapshot is taken while a turn's begin waits for it.
pub trait StartSnapshot {
    /// Starts taking the start snapshot of turn `turn_id` of session `session_id`, of the
    /// workspace at `workspace`, somewhere it can finish after the begin stopped waiting
    /// (it must record it against that turn id: `Turnback::take_turn_start_snapshot`).
    ///
    /// # Errors
    /// When it cannot be started at all.
    fn start(&self, turn_id: &str, workspace: &Path, session_id: &str) -> Result<Box<dyn RunningSnapshot>>;
}

/// A start snapshot being taken elsewhere.
pub trait RunningSnapshot {
    /// `None` while it runs; `Some(Ok(()))` once it committed; `Some(Err(why))` if it
    /// ended without committing.
    ///
    /// # Errors
    /// When its state cannot be learned.
    fn poll(&mut self) -> Result<Option<std::result::Result<(), String>>>;
    /// Stops it and waits until it has stopped.
    fn stop(&mut self);
}

/// Begins a turn in `session` (see the module docs for the protocol).
///
/// # Errors
/// `cancelled` if `cancel` was set while waiting (nothing recorded); store errors.
pub(crate) fn begin(
    store: &Store,
    ws: &Workspace,
    session: &Session,
    req: &BeginRequest,
    starter: Option<(&dyn StartSnapshot, Duration)>,
    cancel: &AtomicBool,
) -> Result<Begun> {
    let prompt = req.prompt.as_deref().filter(|p| !p.is_empty());
    let _one_at_a_time = NamedLock::exclusive(&store.locks_dir(), &format!("turn-begin-{}", session.id))?;
    match turn::joins(store, session, req.background, req.new, prompt)? {
        Joining::New => {}
        Joining::Repeat(turn) => return Ok(Begun { joined: true, turn }),
        Joining::Message(turn) => {
            let text = prompt.unwrap_or_default().to_string();
            history::append(store, session, NewEntry::prompt(&turn.turn_id, text))?;
            return Ok(Begun { joined: true, turn });
        }
    }
    let turn_id = turn::new_id();
    let (late, failure) = match starter {
        Some((starter, wait)) => {
            let running = starter.start(&turn_id, &ws.root, &session.id)?;
            wait_for(store, running, &turn_id, wait, cancel)?
        }
        None => match turn::take_start_snapshot(store, ws, session, &turn_id, Some(cancel)) {
            Ok(_) => (false, None),
            Err(e) if e.code == ErrorCode::Cancelled => return Err(cancelled(store, &turn_id)),
            Err(e) => (false, Some(format!("the start snapshot failed ({}: {})", e.code, e.message))),
        },
    };
    let new = NewTurn { prompt, background: req.background };
    // The prompt goes into the history with its turn: a turn is never without its prompt.
    let prompt_entry = |txn: &mut dyn Txn, turn: &Turn| match prompt {
        Some(p) => {
            let entry = history::entry_of(turn.turn_id.clone(), NewEntry::prompt(&turn.turn_id, p.to_string()));
            history::append_in(store, txn, &session.id, &[entry]).map(drop)
        }
        None => Ok(()),
    };
    let turn = turn::record(store, session, &turn_id, new, late, failure, &prompt_entry)?;
    history::enforce_budget(store, &session.id)?;
    Ok(Begun { joined: false, turn })
}

/// Waits at most `wait` for the start snapshot `running` elsewhere: `(late, failure)`.
fn wait_for(
    store: &Store,
    mut running: Box<dyn RunningSnapshot>,
    turn_id: &str,
    wait: Duration,
    cancel: &AtomicBool,
) -> Result<(bool, Option<String>)> {
    let started = Instant::now();
    loop {
        if cancel.load(Ordering::SeqCst) {
            running.stop();
            return Err(cancelled(store, turn_id));
        }
        match running.poll()? {
            Some(Ok(())) => return Ok((false, None)),
            Some(Err(why)) => {
                return Ok((false, Some(format!("the start snapshot failed ({why}); see turnback snapshot"))));
            }
            None if started.elapsed() >= wait => return Ok((true, None)),
            None => std::thread::sleep(Duration::from_millis(5)),
        }
    }
}

/// Discards what a cancelled begin's snapshot committed, and says so.
fn cancelled(store: &Store, turn_id: &str) -> Error {
    match turn::discard_start_snapshot(store, turn_id) {
        Ok(()) => Error::new(ErrorCode::Cancelled, "turn begin cancelled; no turn was recorded"),
        Err(e) => e,
    }
}
