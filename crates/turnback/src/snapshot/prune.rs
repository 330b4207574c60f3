//! Pruning: a session keeps at most so many snapshots and so many stored bytes of them.
//!
//! Invariants: whole turns go together (a turn's start and end snapshots), cheapest loss
//! first, oldest first; the newest snapshot that was not skipped is never pruned (the stat
//! cache describes it). Each unit goes in one transaction that also tells the turns
//! ([`Hooks::pruned`]), so a turn never points at a pruned snapshot. Space comes back with
//! `gc`.

use serde::Serialize;

use crate::error::Result;
use crate::snapshot::{Hooks, SnapshotRecord, list, remove};
use crate::storage::store::Store;

/// What pruning removed.
#[derive(Debug, Clone, Default, Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub(super) struct PruneReport {
    /// Snapshots removed.
    pub snapshots: u64,
    /// Turns whose snapshots were removed.
    pub turns: Vec<String>,
}

/// Keeps `session` within its snapshot budget (count and stored bytes): removes the oldest
/// whole turns — a turn's start and end snapshots together — and oldest ad hoc snapshots,
/// never the newest snapshot (the stat cache describes it). The turns keep their records,
/// with their snapshots marked pruned. Space comes back with `gc`.
pub(crate) fn prune(store: &Store, session: &str, hooks: &dyn Hooks) -> Result<PruneReport> {
    let limits = store.settings().snapshots;
    let snaps = list(store, session)?;
    let mut count = snaps.len() as u64;
    let mut bytes: u64 = snaps.iter().map(|s| s.stored_bytes).sum();
    let mut report = PruneReport::default();
    if count <= limits.max_per_session && bytes <= limits.max_session_bytes {
        return Ok(report);
    }
    // The stat cache describes the newest snapshot that was not skipped: it is never pruned.
    let newest = snaps.iter().rev().find(|s| s.root.is_some()).map(|s| s.snapshot_id.clone());
    // Units, cheapest loss first: skipped records (they hold nothing), then snapshots that
    // belong to no turn (ad hoc, pre-rewind, previews), then whole turns; oldest first in
    // each group.
    let mut units: Vec<Vec<&SnapshotRecord>> = Vec::new();
    for s in &snaps {
        match s.turn_id.as_deref().and_then(|t| units.iter().position(|u| u[0].turn_id.as_deref() == Some(t))) {
            Some(i) => units[i].push(s),
            None => units.push(vec![s]),
        }
    }
    let rank = |u: &Vec<&SnapshotRecord>| match (u.iter().all(|s| s.root.is_none()), u[0].turn_id.is_some()) {
        (true, _) => 0,
        (false, false) => 1,
        (false, true) => 2,
    };
    units.sort_by_key(rank);
    for unit in units {
        if count <= limits.max_per_session && bytes <= limits.max_session_bytes {
            break;
        }
        if unit.iter().any(|s| Some(&s.snapshot_id) == newest.as_ref()) {
            continue;
        }
        let mut txn = store.kv().begin()?;
        for s in &unit {
            remove(&mut *txn, s)?;
            hooks.pruned(&mut *txn, s)?;
        }
        txn.commit()?;
        count -= unit.len() as u64;
        bytes = bytes.saturating_sub(unit.iter().map(|s| s.stored_bytes).sum());
        report.snapshots += unit.len() as u64;
        if let Some(turn) = &unit[0].turn_id {
            report.turns.push(turn.clone());
        }
    }
    Ok(report)
}
