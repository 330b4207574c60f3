//! Two sessions that share a fork point, side by side: the same prompt given to two agents
//! or two models, each result against the other and against the state they started from.
//!
//! Invariants: the fork point is the last turn the two sessions carry in common (a fork
//! copies its parent's turns with their index, kind, preview and start time, so a carried
//! turn is recognised by those, whichever of the two is the parent or whether both are
//! forks of a third); sessions with no turn in common have no fork point and are refused.
//! Only snapshots already taken are compared: nothing is snapshotted, nothing written.
//! The diffs are the snapshot layer's own (`snapshot::diff`), so `compare` and `diff` count
//! lines the same way.

use serde::Serialize;

use crate::api::Turnback;
use crate::api::turns::root;
use crate::error::{Error, Result};
use crate::session::Session;
use crate::session::fork;
use crate::session::turn::{self, Turn};
use crate::snapshot::SnapshotRecord;
use crate::snapshot::diff::{self, NumStat};
use crate::storage::store::Store;

/// Which two sessions to compare, and where.
#[derive(Debug, Clone, Default)]
pub struct CompareRequest {
    /// One session.
    pub a: String,
    /// The other.
    pub b: String,
    /// The turn whose end to compare in both (default: each session's newest turn).
    pub turn: Option<u64>,
    /// Include the unified diffs of text files.
    pub patch: bool,
}

/// Two sessions' results, against each other and against their fork point.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Comparison {
    /// The state both started from.
    pub fork_point: ForkPoint,
    /// The first session's result.
    pub a: CompareSide,
    /// The second session's result.
    pub b: CompareSide,
    /// Every path whose content differs between the two results, counted from `a` to `b`.
    pub differences: Vec<NumStat>,
    /// The unified diff from `a`'s result to `b`'s, when asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub patch: Option<String>,
}

/// The last turn two sessions share.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ForkPoint {
    /// Its 1-based index.
    pub turn: u64,
    /// Its prompt's first line.
    pub preview: String,
    /// The snapshot of the state right after it (in session `a`).
    pub snapshot_id: String,
}

/// One session's result.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct CompareSide {
    /// The session.
    pub session_id: String,
    /// The turn whose end is its result.
    pub turn: u64,
    /// That turn's prompt's first line.
    pub preview: String,
    /// The snapshot of its result.
    pub snapshot_id: String,
    /// What it changed since the fork point.
    pub changes: Vec<NumStat>,
    /// That as a unified diff, when asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub patch: Option<String>,
}

impl Turnback {
    /// Compares the results of sessions `req.a` and `req.b` (the end of turn `req.turn` in
    /// each, default each one's newest turn): where they differ, and what each changed
    /// since the last turn they share.
    ///
    /// # Errors
    /// `not-found` for an unknown session or turn, or a state not snapshotted (a turn still
    /// running); `invalid-argument` if the sessions share no turn, or a snapshot was
    /// skipped.
    pub fn compare(&self, req: &CompareRequest) -> Result<Comparison> {
        compare(&self.store, req)
    }
}

fn compare(store: &Store, req: &CompareRequest) -> Result<Comparison> {
    let turns_of = |id: &str| -> Result<Vec<Turn>> {
        Session::get(store, id)?.ok_or_else(|| Error::not_found(format!("session {id}")))?;
        turn::list(store, id)
    };
    let (ta, tb) = (turns_of(&req.a)?, turns_of(&req.b)?);
    let common = ta.iter().zip(&tb).take_while(|(x, y)| carried(x, y)).count() as u64;
    if common == 0 {
        return Err(Error::invalid(format!("sessions {} and {} share no turn: they have no fork point", req.a, req.b)));
    }
    let base = fork::state_after(store, &ta, common)?;
    let (end_a, end_b) = (result_of(&req.a, &ta, req.turn)?, result_of(&req.b, &tb, req.turn)?);
    let (state_a, state_b) = (fork::state_after(store, &ta, end_a.index)?, fork::state_after(store, &tb, end_b.index)?);
    let side = |session: &str, end: &Turn, state: &SnapshotRecord| -> Result<CompareSide> {
        let (changes, patch) = changes(store, &base, state, req.patch)?;
        Ok(CompareSide {
            session_id: session.to_string(),
            turn: end.index,
            preview: end.preview.clone(),
            snapshot_id: state.snapshot_id.clone(),
            changes,
            patch,
        })
    };
    let (differences, patch) = changes(store, &state_a, &state_b, req.patch)?;
    let fork_turn = &ta[common as usize - 1];
    Ok(Comparison {
        fork_point: ForkPoint {
            turn: common,
            preview: fork_turn.preview.clone(),
            snapshot_id: base.snapshot_id.clone(),
        },
        a: side(&req.a, end_a, &state_a)?,
        b: side(&req.b, end_b, &state_b)?,
        differences,
        patch,
    })
}

/// Whether turn `y` is turn `x` carried into a fork (or the other way round): a fork copies
/// a turn's index, kind, preview and start time, and gives it a new id.
fn carried(x: &Turn, y: &Turn) -> bool {
    x.index == y.index && x.kind == y.kind && x.preview == y.preview && x.started_at == y.started_at
}

/// The turn whose end is `session`'s result: turn `index`, or its newest.
fn result_of<'t>(session: &str, turns: &'t [Turn], index: Option<u64>) -> Result<&'t Turn> {
    match index {
        Some(i) => turns.iter().find(|t| t.index == i),
        None => turns.last(),
    }
    .ok_or_else(|| {
        Error::not_found(format!("turn {} of session {session}", index.map_or("?".into(), |i| i.to_string())))
    })
}

/// What changed from `a` to `b`, counted, and as a patch when asked for.
fn changes(
    store: &Store,
    a: &SnapshotRecord,
    b: &SnapshotRecord,
    patch: bool,
) -> Result<(Vec<NumStat>, Option<String>)> {
    let changed = diff::trees(store, &root(a)?, &root(b)?)?;
    let (counts, text) = diff::report(store, &changed, patch)?;
    Ok((counts, patch.then_some(text)))
}
