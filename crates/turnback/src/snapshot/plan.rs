//! Phase 3 of taking a snapshot: the read plan — per walked file, whether its stat cache
//! entry vouches for its content id or it must be read, and, once read, the id read.
//!
//! Invariants: an entry's id is known one way only (its cache entry's, or read by this
//! snapshot), in four bytes an entry; a file read with a stat other than the walk's keeps
//! the read's stat apart, for its cache entry.

use std::collections::HashMap;

use crate::fs::walk::{self, Kind};
use crate::snapshot::scan::{Scan, Seen};
use crate::storage::content::ContentId;

/// What the walk found, and what the stat cache cannot vouch for.
pub(super) struct ReadPlan {
    ids: Ids,
    /// By walked entry, the stat of a file read that differs from the walk's (it changed
    /// between the walk and the read): rare, so kept apart. Every other file read had the
    /// walk's stat.
    stat_after: HashMap<usize, walk::Stat>,
    /// Entries (indices) to read (taken by phase 5).
    pub(super) to_read: Vec<usize>,
    /// Files kept, and their bytes.
    pub(super) files: u64,
    pub(super) bytes: u64,
    pub(super) read_bytes: u64,
}

impl ReadPlan {
    /// How walked entry `i`'s content id is known, if it is.
    pub(super) fn known(&self, i: usize) -> Option<Known> {
        self.ids.get(i)
    }

    /// Walked entry `i`'s content id, if this snapshot read it.
    pub(super) fn read_id(&self, i: usize) -> Option<ContentId> {
        match self.ids.get(i) {
            Some(Known::Read(id)) => Some(id),
            _ => None,
        }
    }

    /// Walked entry `i`'s content id, once known, given `cache_ids`, every cache entry's
    /// ([`StatCache::all_ids`](crate::snapshot::statcache::StatCache::all_ids)).
    pub(super) fn id_in(&self, i: usize, cache_ids: &[ContentId]) -> Option<ContentId> {
        match self.ids.get(i)? {
            // One id per cache entry ([`StatCache::all_ids`](crate::snapshot::statcache::StatCache::all_ids)).
            Known::Cached(c) => Some(cache_ids[c]),
            Known::Read(id) => Some(id),
        }
    }

    /// Whether the cache vouches for any walked entry (whose id a whole build then asks of
    /// it).
    pub(super) fn vouches(&self) -> bool {
        (0..self.ids.at.len()).any(|i| matches!(self.known(i), Some(Known::Cached(_))))
    }

    /// Whether walked entry `i` was read (and hashed) by this snapshot.
    pub(super) fn was_read(&self, i: usize) -> bool {
        self.ids.was_read(i)
    }

    /// The stat to cache for walked entry `i` (`e`): as read, if it was read; as walked
    /// otherwise.
    pub(super) fn stat_of(&self, i: usize, e: &Seen<'_>) -> walk::Stat {
        self.stat_after.get(&i).copied().unwrap_or(e.stat)
    }

    /// Records that walked entry `i`, walked with `walked`, was read as `id` with `stat`.
    pub(super) fn set_read(&mut self, i: usize, id: ContentId, stat: walk::Stat, walked: walk::Stat) {
        self.ids.set_read(i, id);
        if stat != walked {
            self.stat_after.insert(i, stat);
        }
    }

    /// Whether every file read had the stat the walk found (so its node, made from the
    /// walk's stat, and its cache entry, from the read's, agree).
    pub(super) fn read_as_walked(&self) -> bool {
        self.stat_after.is_empty()
    }
}

/// Per walked entry, how its content id is known: its cache entry vouches for it, or it
/// was read. Four bytes an entry, not a copy of each id (a million files' ids are in the
/// cache's pieces already, and a snapshot that builds no tree whole never asks for them).
struct Ids {
    /// Per entry: [`Ids::UNKNOWN`], its cache entry's index, or [`Ids::READ`] and the
    /// index in `read`.
    at: Vec<u32>,
    read: Vec<ContentId>,
}

/// How an entry's content id is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Known {
    /// It is this cache entry's.
    Cached(usize),
    /// It was read.
    Read(ContentId),
}

impl Ids {
    const UNKNOWN: u32 = u32::MAX;
    const READ: u32 = 1 << 31;

    fn new(entries: usize) -> Self {
        Ids { at: Vec::with_capacity(entries), read: Vec::new() }
    }

    /// The next entry's: cache entry `c`'s id, if given (an index of 2^31 or more, which no
    /// cache holds, is left unknown: the file is read).
    fn push(&mut self, c: Option<usize>) {
        self.at.push(c.and_then(|c| u32::try_from(c).ok()).filter(|&c| c < Self::READ).unwrap_or(Self::UNKNOWN));
    }

    fn set_read(&mut self, i: usize, id: ContentId) {
        // Below `READ - 1`, so that the flag and the index are never `UNKNOWN`.
        let at =
            u32::try_from(self.read.len()).ok().filter(|&k| k < Self::READ - 1).expect("fewer files than 2^31 - 1");
        self.read.push(id);
        self.at[i] = Self::READ | at;
    }

    fn get(&self, i: usize) -> Option<Known> {
        match self.at[i] {
            Self::UNKNOWN => None,
            at if at & Self::READ != 0 => Some(Known::Read(self.read[(at & !Self::READ) as usize])),
            c => Some(Known::Cached(c as usize)),
        }
    }

    pub(super) fn was_read(&self, i: usize) -> bool {
        matches!(self.get(i), Some(Known::Read(_)))
    }
}

/// Phase 3: which of the files kept must be read — everything the stat cache cannot vouch
/// for.
pub(super) fn classify(walked: &Scan<'_>) -> ReadPlan {
    let cache = walked.cache();
    let mut plan = ReadPlan {
        ids: Ids::new(walked.len()),
        stat_after: HashMap::new(),
        to_read: Vec::new(),
        files: 0,
        bytes: 0,
        read_bytes: 0,
    };
    for (i, e) in walked.iter().enumerate() {
        let vouched = match e.kind {
            Kind::File => {
                plan.files += 1;
                plan.bytes += e.stat.size;
                e.cached.filter(|&c| cache.clean(c, &e.stat))
            }
            _ => None,
        };
        plan.ids.push(vouched);
        if plan.known(i).is_none() && *e.kind == Kind::File {
            plan.to_read.push(i);
            plan.read_bytes += e.stat.size;
        }
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_has_its_cache_entrys_id_until_it_is_read_and_then_the_id_read() {
        let mut ids = Ids::new(5);
        // Vouched for by cache entries 2 and 0; unknown; an index past the flag's room.
        for c in [Some(2), Some(0), None, Some(Ids::READ as usize), Some(usize::MAX)] {
            ids.push(c);
        }
        let got = |ids: &Ids| (0..5).map(|i| (ids.get(i), ids.was_read(i))).collect::<Vec<_>>();
        let read = |n: u8| Some(Known::Read(ContentId([n; 32])));
        let cached = |c: usize| Some(Known::Cached(c));
        assert_eq!(got(&ids), [(cached(2), false), (cached(0), false), (None, false), (None, false), (None, false)]);
        ids.set_read(2, ContentId([7; 32]));
        ids.set_read(0, ContentId([8; 32]));
        ids.set_read(4, ContentId([9; 32]));
        assert_eq!(got(&ids), [(read(8), true), (cached(0), false), (read(7), true), (None, false), (read(9), true)]);
    }
}
