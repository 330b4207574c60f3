//! What a snapshot's walk found, merged with the session's stat cache as it is found: a
//! file whose stat the cache holds unchanged is kept as the index of its cache entry, not
//! as a copy of its path and stat. A walk of a large tree that changed little holds little
//! more than its cache, never the tree's every path twice.
//!
//! Invariants:
//! - Slots are in component order, the walk's, one per entry it recorded; [`Scan::get`]
//!   gives each back as found (a [`Slot::Cached`] file's path and stat are its cache
//!   entry's, which equal what was walked).
//! - Once a [`Scan`] is made, every entry knows the index of its cache entry if the cache
//!   has its path (the entries walked before the cache was loaded are matched then, in one
//!   pass). A cache holds fewer than 2^31 entries (its record is at most
//!   [`RECORD_MAX`](crate::storage::store::RECORD_MAX), and an entry takes over 90 bytes),
//!   so an index fits in 31 bits.
//! - A scan refers to one cache, the one it was matched against; everything that reads its
//!   indices asks the scan for it ([`Scan::cache`]).
//! - Memory: a file kept by reference costs a 16-byte slot; any other file (changed, new,
//!   every file of a first snapshot) a slot, 72 bytes and its path; anything else, and an
//!   entry walked before the cache was loaded until the scan is made, a slot and a boxed
//!   entry.

use std::path::Path;
use std::sync::OnceLock;

use crate::error::Result;
use crate::fs::walk::{self, Entry, Kind, Skipped, Stat, Walk};
use crate::snapshot::statcache::StatCache;

/// One walked entry, as the walk found it, with its cache entry if the cache has its path.
#[derive(Clone, Copy)]
pub(super) struct Seen<'a> {
    pub(super) path: &'a [u8],
    pub(super) kind: &'a Kind,
    pub(super) stat: Stat,
    pub(super) cached: Option<usize>,
}

impl<'a> Seen<'a> {
    /// An entry the cache was not asked about.
    pub(super) fn of(e: &'a Entry) -> Self {
        Seen { path: &e.path, kind: &e.kind, stat: e.stat, cached: None }
    }
}

/// One walked entry as a snapshot keeps it.
pub(super) enum Slot {
    /// A file with the stat of this cache entry.
    Cached(u32),
    /// Any other file (every file of a first snapshot).
    File(Box<OwnFile>),
    /// Anything else (a symlink, a nested repository), with the index of its cache entry
    /// if the cache has its path.
    Own(Box<Own>),
    /// Walked before the cache was loaded: matched when the [`Scan`] is made.
    Unmatched(Box<Entry>),
}

pub(super) struct Own {
    entry: Entry,
    cached: Option<u32>,
}

/// A file the cache does not vouch for, with the index of its cache entry if the cache
/// has its path: what an [`Own`] holds of it, without a kind (72 bytes and its path, not
/// 112 and its path: a first snapshot holds one for every file).
pub(super) struct OwnFile {
    stat: Stat,
    cached: Option<u32>,
    path: Box<[u8]>,
}

impl Slot {
    /// `entry` matched against `cache`; `hint` is where the search starts, and is left just
    /// past what was found (entries come in component order).
    fn matched(cache: &StatCache, entry: Entry, hint: &mut usize) -> Slot {
        let cached = match cache.entries.find_from(*hint, &entry.path) {
            Ok(c) => {
                *hint = c + 1;
                Some(u32::try_from(c).expect("a cache holds fewer than 2^31 entries (RECORD_MAX)"))
            }
            Err(c) => {
                *hint = c;
                None
            }
        };
        match cached {
            Some(c) if entry.kind == Kind::File && cache.entries.cached(c as usize).stat == entry.stat => {
                Slot::Cached(c)
            }
            _ if entry.kind == Kind::File => {
                Slot::File(Box::new(OwnFile { stat: entry.stat, cached, path: entry.path.into_boxed_slice() }))
            }
            _ => Slot::Own(Box::new(Own { entry, cached })),
        }
    }
}

/// A walk merged with the stat cache ([the module](self)).
pub(super) struct Scan<'c> {
    slots: Vec<Slot>,
    cache: &'c StatCache,
    /// Paths left out with a reason.
    pub(super) skipped: Vec<Skipped>,
    /// Paths removed by the unconditional exclusions.
    pub(super) excluded: u64,
}

const FILE: &Kind = &Kind::File;

fn view<'a>(cache: &'a StatCache, slot: &'a Slot) -> Seen<'a> {
    match slot {
        Slot::Cached(c) => {
            let (path, cached) = (cache.entries.path(*c as usize), cache.entries.cached(*c as usize));
            Seen { path, kind: FILE, stat: cached.stat, cached: Some(*c as usize) }
        }
        Slot::File(file) => {
            Seen { path: &file.path, kind: FILE, stat: file.stat, cached: file.cached.map(|c| c as usize) }
        }
        Slot::Own(own) => Seen { cached: own.cached.map(|c| c as usize), ..Seen::of(&own.entry) },
        Slot::Unmatched(entry) => Seen::of(entry),
    }
}

impl<'c> Scan<'c> {
    /// Walks `root` (leaving out `skip_dirs`) while the stat cache is `loading`: each entry
    /// found once the cache is there is matched against it at once, on the walk's threads;
    /// [`Scan::new`] matches the others (and makes the scan of these slots).
    ///
    /// # Errors
    /// `io` if `root` cannot be read.
    pub(super) fn walk(
        root: &Path,
        skip_dirs: &[std::path::PathBuf],
        loading: &OnceLock<StatCache>,
    ) -> Result<Walk<Slot>> {
        let keep = |entry: Entry, hint: &mut usize| match loading.get() {
            Some(cache) => Slot::matched(cache, entry, hint),
            None => Slot::Unmatched(Box::new(entry)),
        };
        walk::walk_keeping(root, skip_dirs, None, &keep)
    }

    /// The scan of `walked` against `cache` (the one it was walked with): the entries
    /// walked before it was loaded are matched now, in one pass.
    pub(super) fn new(walked: Walk<Slot>, cache: &'c StatCache) -> Self {
        let Walk { mut entries, skipped, excluded, .. } = walked;
        let mut hint = 0;
        for slot in &mut entries {
            if let Slot::Unmatched(_) = slot {
                // The slot is matched in place (its placeholder is never read).
                let Slot::Unmatched(entry) = std::mem::replace(slot, Slot::Cached(u32::MAX)) else { unreachable!() };
                *slot = Slot::matched(cache, *entry, &mut hint);
            } else if let Some(c) = view(cache, slot).cached {
                hint = c + 1;
            }
        }
        Scan { slots: entries, cache, skipped, excluded }
    }

    /// `entries` (in component order), matched against `cache` (an empty one: none is
    /// asked).
    pub(super) fn of_entries(entries: Vec<Entry>, cache: &'c StatCache) -> Self {
        let mut hint = 0;
        let slots = entries.into_iter().map(|entry| Slot::matched(cache, entry, &mut hint)).collect();
        Scan { slots, cache, skipped: Vec::new(), excluded: 0 }
    }

    /// The stat cache it was matched against.
    pub(super) fn cache(&self) -> &'c StatCache {
        self.cache
    }

    /// How many entries.
    pub(super) fn len(&self) -> usize {
        self.slots.len()
    }

    /// Entry `i`.
    pub(super) fn get(&self, i: usize) -> Seen<'_> {
        view(self.cache, &self.slots[i])
    }

    /// Every entry, in order.
    pub(super) fn iter(&self) -> impl Iterator<Item = Seen<'_>> + '_ {
        self.slots.iter().map(|s| view(self.cache, s))
    }

    /// Keeps the entries `keep` accepts.
    pub(super) fn retain(&mut self, mut keep: impl FnMut(Seen<'_>) -> bool) {
        let cache = self.cache;
        self.slots.retain(|s| keep(view(cache, s)));
    }

    /// The index of the entry at `path`.
    pub(super) fn position(&self, path: &[u8]) -> Option<usize> {
        self.slots.binary_search_by(|s| walk::component_order(view(self.cache, s).path, path)).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::statcache::Cached;
    use crate::storage::content::ContentId;

    fn stat(n: u64) -> Stat {
        Stat { mode: 0o100644, size: n, mtime_ns: 1, ctime_ns: 1, device: 1, inode: n }
    }

    fn entry(path: &str, kind: Kind, n: u64) -> Entry {
        Entry { path: path.as_bytes().to_vec(), kind, stat: stat(n) }
    }

    /// One entry as a scan holds it: path, kind, stat, cache index, and how it is kept
    /// (`c`: a reference to the cache, `f`: an own file, `o`: another own entry, `u`: not
    /// matched).
    type Kept = (Vec<u8>, Kind, Stat, Option<usize>, char);

    fn seen(scan: &Scan<'_>) -> Vec<Kept> {
        (0..scan.len())
            .map(|i| {
                let f = scan.get(i);
                let kept = match scan.slots[i] {
                    Slot::Cached(_) => 'c',
                    Slot::File(_) => 'f',
                    Slot::Own(_) => 'o',
                    Slot::Unmatched(_) => 'u',
                };
                (f.path.to_vec(), f.kind.clone(), f.stat, f.cached, kept)
            })
            .collect()
    }

    #[test]
    fn entries_walked_before_the_cache_was_loaded_are_matched_as_if_it_had_been_there() {
        let cached = ["a", "b/c", "b/d", "b.x", "e", "f"];
        let cache = StatCache::of_entries(
            cached
                .iter()
                .enumerate()
                .map(|(n, p)| (p.as_bytes().to_vec(), Cached { stat: stat(n as u64), id: ContentId([n as u8; 32]) }))
                .collect(),
        );
        // As cached; changed; new; a symlink where a file was; as cached; new.
        let walked = || {
            vec![
                entry("a", Kind::File, 0),
                entry("b/c", Kind::File, 9),
                entry("b/cc", Kind::File, 2),
                entry("b.x", Kind::Symlink(b"t".to_vec()), 3),
                entry("e", Kind::File, 4),
                entry("g", Kind::File, 5),
            ]
        };
        let expected = vec![
            (b"a".to_vec(), Kind::File, stat(0), Some(0), 'c'),
            (b"b/c".to_vec(), Kind::File, stat(9), Some(1), 'f'),
            (b"b/cc".to_vec(), Kind::File, stat(2), None, 'f'),
            (b"b.x".to_vec(), Kind::Symlink(b"t".to_vec()), stat(3), Some(3), 'o'),
            (b"e".to_vec(), Kind::File, stat(4), Some(4), 'c'),
            (b"g".to_vec(), Kind::File, stat(5), None, 'f'),
        ];
        // Every split between entries walked before the cache was there and after.
        for loaded_at in 0..=walked().len() {
            let mut hint = 0;
            let entries = walked()
                .into_iter()
                .enumerate()
                .map(
                    |(k, e)| {
                        if k < loaded_at { Slot::Unmatched(Box::new(e)) } else { Slot::matched(&cache, e, &mut hint) }
                    },
                )
                .collect();
            let scan = Scan::new(Walk { entries, ..Walk::default() }, &cache);
            assert_eq!(seen(&scan), expected, "cache loaded after {loaded_at} entries");
            assert_eq!(scan.position(b"b.x"), Some(3));
            assert_eq!(scan.position(b"b/d"), None);
        }
    }
}
