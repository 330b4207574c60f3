//! Manifests: what a session on a remote is, and how the manifests of two pushers merge.
//!
//! Invariants:
//! - A manifest is written once, under a name no other push can choose
//!   (`s/SESSIONKEY/PUSHID`, a random UUID v7, with a conditional create), after every
//!   object it names is in the bucket: a reader never sees a manifest naming an object
//!   not yet uploaded. No manifest is ever overwritten, so two machines pushing the same
//!   session can never erase each other's turns.
//! - A session on a remote is the merge of all its manifests ([`merge`]): the union of
//!   their turns (one version per turn id, [`merge_turns`]) and of their packs. A push
//!   writes the merge of what it read and what it has, and names the manifests it read in
//!   `replaces`; `gc --remote` deletes a replaced manifest only once the one replacing it
//!   is there and the grace period has passed.
//! - [`merge_turns`] is the one decision on turn order: turns are ordered by index, then
//!   start time, then id; an index already taken moves the later turn up by one, so turns
//!   numbered apart on two machines all survive, in the order they started.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::session::Session;

/// Manifest format version.
pub(crate) const FORMAT: u32 = 1;

/// One turn as a manifest lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TurnEntry {
    pub turn_id: String,
    pub index: u64,
    pub started_at: String,
    pub ended: bool,
    /// The turn record's keyed id (`t/ID`).
    pub record: String,
}

/// One push's view of a session.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Manifest {
    pub format: u32,
    pub session: Session,
    pub turns: Vec<TurnEntry>,
    /// Packs holding the content the turns' snapshots reach.
    pub packs: Vec<String>,
    /// Manifests (names) this one includes.
    pub replaces: Vec<String>,
    pub pushed_at: i64,
}

/// The bucket folder of session `key`'s manifests.
pub(crate) fn folder(session_key: &str) -> String {
    format!("s/{session_key}/")
}

/// A new manifest name in `folder`.
pub(crate) fn new_name(folder: &str) -> String {
    format!("{folder}{}", uuid::Uuid::now_v7().simple())
}

/// A session as all its manifests say.
#[derive(Debug, Clone)]
pub(crate) struct Merged {
    pub session: Session,
    pub turns: Vec<TurnEntry>,
    pub packs: BTreeSet<String>,
    /// The manifests merged.
    pub names: Vec<String>,
}

/// Merges a session's manifests.
///
/// # Errors
/// `not-found` if there are none.
pub(crate) fn merge(manifests: Vec<(String, Manifest)>) -> Result<Merged> {
    let newest = manifests
        .iter()
        .max_by(|a, b| (a.1.pushed_at, &a.0).cmp(&(b.1.pushed_at, &b.0)))
        .map(|(_, m)| m.session.clone())
        .ok_or_else(|| Error::not_found("the session on the remote"))?;
    let mut candidates = Vec::new();
    let mut packs = BTreeSet::new();
    let mut names = Vec::new();
    for (name, m) in manifests {
        names.push(name);
        packs.extend(m.packs);
        candidates.extend(m.turns.into_iter().map(Candidate::of));
    }
    let turns: Vec<TurnEntry> =
        merge_turns(candidates).into_iter().map(|(index, t)| TurnEntry { index, ..t }).collect();
    let session = Session { prompt_round: turns.last().map_or(newest.prompt_round, |t| t.index), ..newest };
    Ok(Merged { session, turns, packs, names })
}

/// A version of a turn offered to [`merge_turns`].
#[derive(Debug, Clone)]
pub(crate) struct Candidate<T> {
    pub turn_id: String,
    pub index: u64,
    pub started_at: String,
    /// Of two versions of one turn, the greater rank is kept (an ended turn over a running
    /// one; the local store's own over a remote's).
    pub rank: (u8, String),
    pub item: T,
}

impl Candidate<TurnEntry> {
    /// A manifest's turn, ranked: an ended version over a running one.
    pub(crate) fn of(t: TurnEntry) -> Self {
        Candidate {
            turn_id: t.turn_id.clone(),
            index: t.index,
            started_at: t.started_at.clone(),
            rank: (u8::from(t.ended), t.record.clone()),
            item: t,
        }
    }
}

/// The one decision on turn order: one version per turn id (the greatest rank), ordered
/// by index, start time and id, each given its index or, when that is taken, the next
/// free one. Returns the final index with each kept item.
pub(crate) fn merge_turns<T>(candidates: Vec<Candidate<T>>) -> Vec<(u64, T)> {
    let mut best: BTreeMap<String, Candidate<T>> = BTreeMap::new();
    for c in candidates {
        match best.get(&c.turn_id) {
            Some(kept) if kept.rank >= c.rank => {}
            _ => {
                best.insert(c.turn_id.clone(), c);
            }
        }
    }
    let mut kept: Vec<Candidate<T>> = best.into_values().collect();
    kept.sort_by(|a, b| (a.index, &a.started_at, &a.turn_id).cmp(&(b.index, &b.started_at, &b.turn_id)));
    let mut last = 0;
    kept.into_iter()
        .map(|c| {
            let index = c.index.max(last + 1);
            last = index;
            (index, c.item)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(id: &str, index: u64, started: &str, rank: u8) -> Candidate<String> {
        Candidate {
            turn_id: id.into(),
            index,
            started_at: started.into(),
            rank: (rank, String::new()),
            item: format!("{id}@{rank}"),
        }
    }

    #[test]
    fn two_machines_turn_three_both_survive_in_start_order() {
        let merged = merge_turns(vec![
            c("a1", 1, "t1", 1),
            c("a2", 2, "t2", 1),
            c("b3", 3, "t4", 1),
            c("a3", 3, "t3", 1),
            c("a1", 1, "t1", 1),
        ]);
        let got: Vec<(u64, &str)> = merged.iter().map(|(i, s)| (*i, s.as_str())).collect();
        assert_eq!(got, vec![(1, "a1@1"), (2, "a2@1"), (3, "a3@1"), (4, "b3@1")]);
    }

    #[test]
    fn the_greater_rank_wins_and_gaps_are_kept() {
        let merged = merge_turns(vec![c("x", 6, "t6", 0), c("x", 6, "t6", 1), c("y", 8, "t8", 0)]);
        assert_eq!(merged, vec![(6, "x@1".to_string()), (8, "y@0".to_string())]);
    }
}
