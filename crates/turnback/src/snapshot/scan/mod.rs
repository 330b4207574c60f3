//! What a snapshot's walk found, merged with the session's stat cache as it is found: a
//! file whose stat the cache holds unchanged is kept as the index of its cache entry, not
//! as a copy of its path and stat. A walk of a large tree that changed little holds little
//! more than its cache, never the tree's every path twice.
//!
//! Invariants:
//! - Slots are in component order, the walk's; each stands for one entry it recorded but a
//!   [`Slot::Cached`] run, which stands for as many files as it counts, the consecutive
//!   entries of the cache from its first (no walk in order finds those otherwise).
//!   [`Scan::get`] gives each entry back as found (a cached file's path and stat are its
//!   cache entry's, which equal what was walked).
//! - Once a [`Scan`] is made, every entry knows the index of its cache entry if the cache
//!   has its path (the entries walked before the cache was loaded are matched then, in one
//!   pass). A cache holds fewer than 2^31 entries (its plaintext is at most
//!   [`RECORD_MAX`](crate::storage::store::RECORD_MAX), whether sealed in one record or in
//!   pieces, and an entry takes over 90 bytes), so an index fits in 31 bits.
//! - A scan refers to one cache, the one it was matched against; everything that reads its
//!   indices asks the scan for it ([`Scan::cache`]).
//! - Memory: a run of files kept by reference costs one 16-byte slot (a tree that changed
//!   little is a few slots per directory, not one per file); any other file (changed, new,
//!   every file of a first snapshot) a slot and a record of 52 bytes and its path in one
//!   buffer the scan holds (no allocation of its own: a million files' first snapshot held
//!   two each, about 110 MB with the allocator's overhead, where the records take 70 MB);
//!   once any slot is a run, each slot also knows where its first entry is (8 bytes); a
//!   file walked before the cache was loaded is such a record until the scan is made,
//!   which gives back the records of those the cache vouches for; anything else (a
//!   symlink, a nested repository) a slot and a boxed entry.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

use crate::error::Result;
use crate::fs::walk::{self, Entry, Keeper, Kind, Skipped, Stat, Walk};
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

/// One walked entry as a snapshot keeps it, or a run of them.
pub(super) enum Slot {
    /// `len` files (at least one), with the stats of as many cache entries from `start` on.
    Cached { start: u32, len: u32 },
    /// Any other file (every file of a first snapshot, and every file walked before the
    /// cache was loaded until the scan is made): where its record starts in the scan's
    /// [`FileRecords`].
    File(u64),
    /// Anything else (a symlink, a nested repository), with its cache entry as a record
    /// holds it (walked before the cache was loaded: [`NOT_MATCHED`] until the scan is
    /// made).
    Own(Box<Own>),
}

pub(super) struct Own {
    entry: Entry,
    cached: u32,
}

/// The records of the files a scan holds itself ([`Slot::File`]), one after another: each
/// its stat (mode, size, mtime, ctime, device, inode), the index of its cache entry
/// ([`NO_ENTRY`]: none; [`NOT_MATCHED`]: not asked yet), its path's length and its path.
#[derive(Default)]
pub(super) struct FileRecords(Vec<u8>);

/// Where a file record's cache entry is: after its stat (mode, then five 8-byte fields).
const CACHED_AT: usize = 4 + 8 * 5;
/// Where its path's length is.
const LEN_AT: usize = CACHED_AT + 4;
/// Bytes of a file record before its path.
const RECORD_HEAD: usize = LEN_AT + 4;
/// Where a record's cache entry is: the cache has none for its path.
const NO_ENTRY: u32 = u32::MAX;
/// … the cache was not asked yet (no cache holds 2^32 - 2 entries).
const NOT_MATCHED: u32 = u32::MAX - 1;

/// The cache entry a record's (or an [`Own`] entry's) field names, if it names one.
fn cache_entry(field: u32) -> Option<usize> {
    Some(field).filter(|&c| c < NOT_MATCHED).map(|c| c as usize)
}

impl FileRecords {
    /// Adds a record (`cached`: the index of its cache entry, [`NO_ENTRY`] or
    /// [`NOT_MATCHED`]); where it starts.
    fn put(&mut self, stat: &Stat, cached: u32, path: &[u8]) -> u64 {
        let at = self.0.len() as u64;
        let len = u32::try_from(path.len()).expect("a path shorter than 4 GiB");
        self.0.reserve(RECORD_HEAD + path.len());
        self.0.extend_from_slice(&stat.mode.to_le_bytes());
        for field in [stat.size, stat.mtime_ns as u64, stat.ctime_ns as u64, stat.device, stat.inode] {
            self.0.extend_from_slice(&field.to_le_bytes());
        }
        self.0.extend_from_slice(&cached.to_le_bytes());
        self.0.extend_from_slice(&len.to_le_bytes());
        self.0.extend_from_slice(path);
        at
    }

    /// The cache entry field of the record at `at`.
    fn cached_field(&self, at: u64) -> u32 {
        let at = at as usize + CACHED_AT;
        u32::from_le_bytes(self.0[at..at + 4].try_into().expect("4 bytes"))
    }

    /// Sets the cache entry of the record at `at`.
    fn set_cached(&mut self, at: u64, cached: Option<u32>) {
        let at = at as usize + CACHED_AT;
        self.0[at..at + 4].copy_from_slice(&cached.unwrap_or(NO_ENTRY).to_le_bytes());
    }

    /// Bytes of the record at `at`.
    fn record_len(&self, at: u64) -> usize {
        let at = at as usize + LEN_AT;
        RECORD_HEAD + u32::from_le_bytes(self.0[at..at + 4].try_into().expect("4 bytes")) as usize
    }

    /// Keeps only the records `slots` refer to, moved down in place (and their slots with
    /// them), and gives back the room of the others.
    fn keep_only(&mut self, slots: &mut [Slot]) {
        let mut live: Vec<(u64, usize)> = slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| match s {
                Slot::File(at) => Some((*at, i)),
                _ => None,
            })
            .collect();
        live.sort_unstable();
        let mut write = 0;
        for (at, i) in live {
            let len = self.record_len(at);
            self.0.copy_within(at as usize..at as usize + len, write);
            slots[i] = Slot::File(write as u64);
            write += len;
        }
        self.0.truncate(write);
        self.0.shrink_to_fit();
    }

    /// Appends `other`'s records; where they now start.
    fn append(&mut self, other: &FileRecords) -> u64 {
        let base = self.0.len() as u64;
        self.0.extend_from_slice(&other.0);
        base
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The record that starts at `at`: its path, stat and cache entry.
    fn get(&self, at: u64) -> (&[u8], Stat, Option<usize>) {
        let b = &self.0[at as usize..];
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        let stat = Stat {
            mode: u32_at(0),
            size: u64_at(4),
            mtime_ns: u64_at(12) as i64,
            ctime_ns: u64_at(20) as i64,
            device: u64_at(28),
            inode: u64_at(36),
        };
        let (cached, len) = (cache_entry(u32_at(CACHED_AT)), u32_at(LEN_AT) as usize);
        (&b[RECORD_HEAD..RECORD_HEAD + len], stat, cached)
    }
}

impl Slot {
    /// How many entries it stands for.
    fn len(&self) -> usize {
        match self {
            Slot::Cached { len, .. } => *len as usize,
            _ => 1,
        }
    }

    /// Takes `next` into it if both are runs of the cache and `next`'s follows on.
    fn absorb(&mut self, next: &Slot) -> bool {
        match (self, next) {
            (Slot::Cached { start, len }, Slot::Cached { start: next_start, len: next_len })
                if start.checked_add(*len) == Some(*next_start) && len.checked_add(*next_len).is_some() =>
            {
                *len += next_len;
                true
            }
            _ => false,
        }
    }

    /// The index of `path`'s entry in `cache`, if it has one; `hint` is where the search
    /// starts, and is left just past what was found (entries come in component order).
    fn find(cache: &StatCache, path: &[u8], hint: &mut usize) -> Option<u32> {
        match cache.entries.find_from(*hint, path) {
            Ok(c) => {
                *hint = c + 1;
                Some(u32::try_from(c).expect("a cache holds fewer than 2^31 entries (RECORD_MAX)"))
            }
            Err(c) => {
                *hint = c;
                None
            }
        }
    }

    /// `entry` matched against `cache`, a file the cache does not vouch for recorded in
    /// `files` ([`Slot::find`] for `hint`).
    fn matched(cache: &StatCache, entry: Entry, hint: &mut usize, files: &mut FileRecords) -> Slot {
        let cached = Slot::find(cache, &entry.path, hint);
        match cached {
            Some(c) if entry.kind == Kind::File && cache.entries.stat(c as usize) == entry.stat => {
                Slot::Cached { start: c, len: 1 }
            }
            _ if entry.kind == Kind::File => {
                Slot::File(files.put(&entry.stat, cached.unwrap_or(NO_ENTRY), &entry.path))
            }
            _ => Slot::Own(Box::new(Own { entry, cached: cached.unwrap_or(NO_ENTRY) })),
        }
    }

    /// The file recorded at `at` in `files` before the cache was loaded, matched against
    /// `cache` now ([`Slot::find`] for `hint`): a reference to the cache if it vouches for
    /// it (its record is then left unused), else the record with its cache entry set.
    fn matched_record(cache: &StatCache, at: u64, hint: &mut usize, files: &mut FileRecords) -> Slot {
        let (path, stat, _) = files.get(at);
        let cached = Slot::find(cache, path, hint);
        match cached {
            Some(c) if cache.entries.stat(c as usize) == stat => Slot::Cached { start: c, len: 1 },
            _ => {
                files.set_cached(at, cached);
                Slot::File(at)
            }
        }
    }
}

/// What the walk of a [`Scan`] keeps, directory by directory: each file it finds as cached a
/// reference to its cache entry, once the cache is loaded; each other file a record in the
/// directory's own [`FileRecords`], moved into the walk's when the directory is closed.
struct Keeping<'a> {
    loading: &'a OnceLock<StatCache>,
    files: Mutex<FileRecords>,
    /// Entries walked before the cache was there.
    before_loaded: AtomicUsize,
}

/// Entries a walk keeps before the stat cache is there, at most: past them it waits for
/// the cache (whose loader always sets it), so that what they cost until they are matched
/// is bounded (about 9 MB of records), however slowly it loads.
const KEPT_BEFORE_LOADED: usize = if cfg!(test) { 64 } else { 128 * 1024 };

/// One directory's state in [`Keeping`]: where its search of the cache is, and its files'
/// records (their slots hold offsets in these until it is closed).
#[derive(Default)]
struct DirKept {
    hint: usize,
    files: FileRecords,
}

impl Keeper<Slot> for Keeping<'_> {
    type Dir = DirKept;

    fn keep(&self, dir: &mut DirKept, entry: Entry) -> Slot {
        let cache = match self.loading.get() {
            Some(cache) => Some(cache),
            None if self.before_loaded.fetch_add(1, Ordering::Relaxed) >= KEPT_BEFORE_LOADED => {
                Some(self.loading.wait())
            }
            None => None,
        };
        match cache {
            Some(cache) => Slot::matched(cache, entry, &mut dir.hint, &mut dir.files),
            None if entry.kind == Kind::File => Slot::File(dir.files.put(&entry.stat, NOT_MATCHED, &entry.path)),
            None => Slot::Own(Box::new(Own { entry, cached: NOT_MATCHED })),
        }
    }

    fn join(&self, last: &mut Slot, next: &Slot) -> bool {
        last.absorb(next)
    }

    fn close(&self, dir: DirKept, kept: &mut [Slot]) {
        if dir.files.is_empty() {
            return;
        }
        let base = self.files.lock().unwrap_or_else(|p| p.into_inner()).append(&dir.files);
        for slot in kept {
            if let Slot::File(at) = slot {
                *at += base;
            }
        }
    }
}

/// A walk of a [`Scan`] before it is matched whole: its slots and its files' records.
pub(super) struct Walked {
    walk: Walk<Slot>,
    files: FileRecords,
}

/// A walk merged with the stat cache ([the module](self)).
pub(super) struct Scan<'c> {
    slots: Vec<Slot>,
    /// Where each slot's first entry is, if any slot is a run of more than one (empty:
    /// slot `i` is entry `i`).
    starts: Vec<usize>,
    /// How many entries.
    len: usize,
    files: FileRecords,
    cache: &'c StatCache,
    /// Paths left out with a reason.
    pub(super) skipped: Vec<Skipped>,
    /// Paths removed by the unconditional exclusions.
    pub(super) excluded: u64,
}

const FILE: &Kind = &Kind::File;

/// Entry `k` of `slot` (0 but in a run).
fn view<'a>(cache: &'a StatCache, files: &'a FileRecords, slot: &'a Slot, k: usize) -> Seen<'a> {
    match slot {
        Slot::Cached { start, .. } => {
            let c = *start as usize + k;
            Seen { path: cache.entries.path(c), kind: FILE, stat: cache.entries.stat(c), cached: Some(c) }
        }
        Slot::File(at) => {
            let (path, stat, cached) = files.get(*at);
            Seen { path, kind: FILE, stat, cached }
        }
        Slot::Own(own) => Seen { cached: cache_entry(own.cached), ..Seen::of(&own.entry) },
    }
}

impl<'c> Scan<'c> {
    /// Walks `root` (leaving out `skip_dirs` and turnback's `own_temps`) while the stat
    /// cache is `loading` (which whoever loads it must set, even when loading fails: past
    /// [`KEPT_BEFORE_LOADED`] entries the walk waits for it): each entry
    /// found once the cache is there is matched against it at once, on the walk's threads;
    /// [`Scan::new`] matches the others (and makes the scan of these slots).
    ///
    /// # Errors
    /// `io` if `root` cannot be read.
    pub(super) fn walk(
        root: &Path,
        skip_dirs: &[std::path::PathBuf],
        own_temps: walk::OwnTemps<'_>,
        loading: &OnceLock<StatCache>,
    ) -> Result<Walked> {
        let keeping =
            Keeping { loading, files: Mutex::new(FileRecords::default()), before_loaded: AtomicUsize::new(0) };
        let walk = walk::walk_keeping(root, skip_dirs, None, own_temps, &keeping)?;
        let files = keeping.files.into_inner().unwrap_or_else(|p| p.into_inner());
        Ok(Walked { walk, files })
    }

    /// The scan of `walked` against `cache` (the one it was walked with): the entries
    /// walked before it was loaded are matched now, in one pass, and joined into runs.
    pub(super) fn new(walked: Walked, cache: &'c StatCache) -> Self {
        let Walked { walk: Walk { mut entries, skipped, excluded, .. }, mut files } = walked;
        let (mut hint, mut unused) = (0, false);
        for slot in &mut entries {
            match slot {
                Slot::Own(own) if own.cached == NOT_MATCHED => {
                    own.cached = Slot::find(cache, &own.entry.path, &mut hint).unwrap_or(NO_ENTRY);
                }
                Slot::File(at) if files.cached_field(*at) == NOT_MATCHED => {
                    *slot = Slot::matched_record(cache, *at, &mut hint, &mut files);
                    unused |= matches!(slot, Slot::Cached { .. });
                }
                _ => {
                    if let Some(c) = view(cache, &files, slot, slot.len() - 1).cached {
                        hint = c + 1;
                    }
                }
            }
        }
        if unused {
            files.keep_only(&mut entries);
        } else {
            // Grown by doubling while the walk went; what it holds now is all it will hold.
            files.0.shrink_to_fit();
        }
        Scan::of_slots(entries, files, cache, skipped, excluded)
    }

    /// `entries` (in component order), matched against `cache` (an empty one: none is
    /// asked).
    pub(super) fn of_entries(entries: Vec<Entry>, cache: &'c StatCache) -> Self {
        let (mut hint, mut files) = (0, FileRecords::default());
        let slots = entries.into_iter().map(|entry| Slot::matched(cache, entry, &mut hint, &mut files)).collect();
        Scan::of_slots(slots, files, cache, Vec::new(), 0)
    }

    /// The scan of `slots`, each run joined to the one before it where it follows on.
    fn of_slots(
        slots: Vec<Slot>,
        files: FileRecords,
        cache: &'c StatCache,
        skipped: Vec<Skipped>,
        excluded: u64,
    ) -> Self {
        let mut scan = Scan { slots: Vec::new(), starts: Vec::new(), len: 0, files, cache, skipped, excluded };
        let mut slots = slots;
        slots.dedup_by(|next, last| last.absorb(next));
        scan.set_slots(slots);
        scan
    }

    /// Takes `slots` (each run joined to the one before it where it follows on) and knows
    /// where each starts.
    fn set_slots(&mut self, mut slots: Vec<Slot>) {
        slots.shrink_to_fit();
        self.len = slots.iter().map(Slot::len).sum();
        self.starts.clear();
        if self.len != slots.len() {
            let mut at = 0;
            self.starts = slots
                .iter()
                .map(|s| {
                    at += s.len();
                    at - s.len()
                })
                .collect();
        }
        self.slots = slots;
    }

    /// The stat cache it was matched against.
    pub(super) fn cache(&self) -> &'c StatCache {
        self.cache
    }

    /// How many entries.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Entry `i`.
    pub(super) fn get(&self, i: usize) -> Seen<'_> {
        let (slot, k) = self.slot_of(i);
        view(self.cache, &self.files, slot, k)
    }

    /// The slot of entry `i`, and which of its entries it is.
    fn slot_of(&self, i: usize) -> (&Slot, usize) {
        assert!(i < self.len, "entry {i} of a scan of {}", self.len);
        if self.starts.is_empty() {
            return (&self.slots[i], 0);
        }
        let slot = self.starts.partition_point(|&start| start <= i) - 1;
        (&self.slots[slot], i - self.starts[slot])
    }

    /// Every entry, in order.
    pub(super) fn iter(&self) -> impl Iterator<Item = Seen<'_>> + '_ {
        let (cache, files) = (self.cache, &self.files);
        self.slots.iter().flat_map(move |s| (0..s.len()).map(move |k| view(cache, files, s, k)))
    }

    /// Keeps the entries `keep` accepts.
    pub(super) fn retain(&mut self, mut keep: impl FnMut(Seen<'_>) -> bool) {
        let (cache, files) = (self.cache, &self.files);
        let mut kept: Vec<Slot> = Vec::with_capacity(self.slots.len());
        // Each slot kept is joined to the one before if it follows on: a run keeps the files
        // it keeps, without a slot for each.
        let mut push = |slot: Slot| {
            if !kept.last_mut().is_some_and(|last| last.absorb(&slot)) {
                kept.push(slot);
            }
        };
        for slot in std::mem::take(&mut self.slots) {
            match slot {
                Slot::Cached { start, len } => (start..start + len)
                    .map(|c| Slot::Cached { start: c, len: 1 })
                    .filter(|one| keep(view(cache, files, one, 0)))
                    .for_each(&mut push),
                other => {
                    if keep(view(cache, files, &other, 0)) {
                        push(other);
                    }
                }
            }
        }
        self.set_slots(kept);
    }

    /// The index of the entry at `path`.
    pub(super) fn position(&self, path: &[u8]) -> Option<usize> {
        let (mut lo, mut hi) = (0, self.len);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match walk::component_order(self.get(mid).path, path) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return Some(mid),
            }
        }
        None
    }
}

#[cfg(test)]
mod tests;
