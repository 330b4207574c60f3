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
//!   pass). A cache holds fewer than 2^31 entries (its plaintext is at most
//!   [`RECORD_MAX`](crate::storage::store::RECORD_MAX), whether sealed in one record or in
//!   pieces, and an entry takes over 90 bytes), so an index fits in 31 bits.
//! - A scan refers to one cache, the one it was matched against; everything that reads its
//!   indices asks the scan for it ([`Scan::cache`]).
//! - Memory: a file kept by reference costs a 16-byte slot; any other file (changed, new,
//!   every file of a first snapshot) a slot and a record of 52 bytes and its path in one
//!   buffer the scan holds (no allocation of its own: a million files' first snapshot held
//!   two each, about 110 MB with the allocator's overhead, where the records take 70 MB);
//!   anything else, and an entry walked before the cache was loaded until the scan is made,
//!   a slot and a boxed entry.

use std::path::Path;
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

/// One walked entry as a snapshot keeps it.
pub(super) enum Slot {
    /// A file with the stat of this cache entry.
    Cached(u32),
    /// Any other file (every file of a first snapshot): where its record starts in the
    /// scan's [`FileRecords`].
    File(u64),
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

/// The records of the files a scan holds itself ([`Slot::File`]), one after another: each
/// its stat (mode, size, mtime, ctime, device, inode), the index of its cache entry
/// (`u32::MAX`: none), its path's length and its path.
#[derive(Default)]
pub(super) struct FileRecords(Vec<u8>);

/// Bytes of a file record before its path.
const RECORD_HEAD: usize = 4 + 8 * 5 + 4 + 4;

impl FileRecords {
    /// Adds a record; where it starts.
    fn put(&mut self, stat: &Stat, cached: Option<u32>, path: &[u8]) -> u64 {
        let at = self.0.len() as u64;
        let len = u32::try_from(path.len()).expect("a path shorter than 4 GiB");
        self.0.reserve(RECORD_HEAD + path.len());
        self.0.extend_from_slice(&stat.mode.to_le_bytes());
        for field in [stat.size, stat.mtime_ns as u64, stat.ctime_ns as u64, stat.device, stat.inode] {
            self.0.extend_from_slice(&field.to_le_bytes());
        }
        self.0.extend_from_slice(&cached.unwrap_or(u32::MAX).to_le_bytes());
        self.0.extend_from_slice(&len.to_le_bytes());
        self.0.extend_from_slice(path);
        at
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
        let cached = Some(u32_at(44)).filter(|&c| c != u32::MAX).map(|c| c as usize);
        let len = u32_at(48) as usize;
        (&b[RECORD_HEAD..RECORD_HEAD + len], stat, cached)
    }
}

impl Slot {
    /// `entry` matched against `cache`, a file the cache does not vouch for recorded in
    /// `files`; `hint` is where the search starts, and is left just past what was found
    /// (entries come in component order).
    fn matched(cache: &StatCache, entry: Entry, hint: &mut usize, files: &mut FileRecords) -> Slot {
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
            Some(c) if entry.kind == Kind::File && *cache.entries.stat(c as usize) == entry.stat => {
                Slot::Cached(c)
            }
            _ if entry.kind == Kind::File => Slot::File(files.put(&entry.stat, cached, &entry.path)),
            _ => Slot::Own(Box::new(Own { entry, cached })),
        }
    }
}

/// What the walk of a [`Scan`] keeps, directory by directory: each file it finds as cached a
/// reference to its cache entry, once the cache is loaded; each other file a record in the
/// directory's own [`FileRecords`], moved into the walk's when the directory is closed.
struct Keeping<'a> {
    loading: &'a OnceLock<StatCache>,
    files: Mutex<FileRecords>,
}

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
        match self.loading.get() {
            Some(cache) => Slot::matched(cache, entry, &mut dir.hint, &mut dir.files),
            None => Slot::Unmatched(Box::new(entry)),
        }
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
    files: FileRecords,
    cache: &'c StatCache,
    /// Paths left out with a reason.
    pub(super) skipped: Vec<Skipped>,
    /// Paths removed by the unconditional exclusions.
    pub(super) excluded: u64,
}

const FILE: &Kind = &Kind::File;

fn view<'a>(cache: &'a StatCache, files: &'a FileRecords, slot: &'a Slot) -> Seen<'a> {
    match slot {
        Slot::Cached(c) => {
            let (path, stat) = (cache.entries.path(*c as usize), *cache.entries.stat(*c as usize));
            Seen { path, kind: FILE, stat, cached: Some(*c as usize) }
        }
        Slot::File(at) => {
            let (path, stat, cached) = files.get(*at);
            Seen { path, kind: FILE, stat, cached }
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
    pub(super) fn walk(root: &Path, skip_dirs: &[std::path::PathBuf], loading: &OnceLock<StatCache>) -> Result<Walked> {
        let keeping = Keeping { loading, files: Mutex::new(FileRecords::default()) };
        let walk = walk::walk_keeping(root, skip_dirs, None, &keeping)?;
        let files = keeping.files.into_inner().unwrap_or_else(|p| p.into_inner());
        Ok(Walked { walk, files })
    }

    /// The scan of `walked` against `cache` (the one it was walked with): the entries
    /// walked before it was loaded are matched now, in one pass.
    pub(super) fn new(walked: Walked, cache: &'c StatCache) -> Self {
        let Walked { walk: Walk { mut entries, skipped, excluded, .. }, mut files } = walked;
        let mut hint = 0;
        for slot in &mut entries {
            if let Slot::Unmatched(_) = slot {
                // The slot is matched in place (its placeholder is never read).
                let Slot::Unmatched(entry) = std::mem::replace(slot, Slot::Cached(u32::MAX)) else { unreachable!() };
                *slot = Slot::matched(cache, *entry, &mut hint, &mut files);
            } else if let Some(c) = view(cache, &files, slot).cached {
                hint = c + 1;
            }
        }
        // Grown by doubling while the walk went; what it holds now is all it will hold.
        files.0.shrink_to_fit();
        Scan { slots: entries, files, cache, skipped, excluded }
    }

    /// `entries` (in component order), matched against `cache` (an empty one: none is
    /// asked).
    pub(super) fn of_entries(entries: Vec<Entry>, cache: &'c StatCache) -> Self {
        let (mut hint, mut files) = (0, FileRecords::default());
        let slots = entries.into_iter().map(|entry| Slot::matched(cache, entry, &mut hint, &mut files)).collect();
        Scan { slots, files, cache, skipped: Vec::new(), excluded: 0 }
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
        view(self.cache, &self.files, &self.slots[i])
    }

    /// Every entry, in order.
    pub(super) fn iter(&self) -> impl Iterator<Item = Seen<'_>> + '_ {
        self.slots.iter().map(|s| view(self.cache, &self.files, s))
    }

    /// Keeps the entries `keep` accepts.
    pub(super) fn retain(&mut self, mut keep: impl FnMut(Seen<'_>) -> bool) {
        let (cache, files) = (self.cache, &self.files);
        self.slots.retain(|s| keep(view(cache, files, s)));
    }

    /// The index of the entry at `path`.
    pub(super) fn position(&self, path: &[u8]) -> Option<usize> {
        self.slots.binary_search_by(|s| walk::component_order(view(self.cache, &self.files, s).path, path)).ok()
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
            let (mut hint, mut files) = (0, FileRecords::default());
            let entries = walked()
                .into_iter()
                .enumerate()
                .map(|(k, e)| {
                    if k < loaded_at {
                        Slot::Unmatched(Box::new(e))
                    } else {
                        Slot::matched(&cache, e, &mut hint, &mut files)
                    }
                })
                .collect();
            let scan = Scan::new(Walked { walk: Walk { entries, ..Walk::default() }, files }, &cache);
            assert_eq!(seen(&scan), expected, "cache loaded after {loaded_at} entries");
            assert_eq!(scan.position(b"b.x"), Some(3));
            assert_eq!(scan.position(b"b/d"), None);
        }
    }

    #[test]
    fn file_records_kept_per_directory_read_back_as_walked() {
        // Files in many directories, walked in parallel: each directory's records are moved
        // into the scan's buffer at its own offset when it is closed.
        let dir = tempfile::tempdir().unwrap();
        for d in 0..40 {
            for f in 0..(d % 7 + 1) {
                let path = dir.path().join(format!("d{d}/s{}/f{f}.txt", d % 3));
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                std::fs::write(&path, format!("{d}-{f}").repeat(d + 1)).unwrap();
            }
        }
        std::os::unix::fs::symlink("d0", dir.path().join("link")).unwrap();
        let found = walk::walk(dir.path(), &[]).unwrap().entries;
        let seen = |scan: &Scan<'_>| -> Vec<(Vec<u8>, Kind, Stat)> {
            scan.iter().map(|e| (e.path.to_vec(), e.kind.clone(), e.stat)).collect()
        };
        let expected: Vec<(Vec<u8>, Kind, Stat)> =
            found.iter().map(|e| (e.path.clone(), e.kind.clone(), e.stat)).collect();
        // Every third file cached as walked: the rest are recorded.
        let cached = || -> Vec<(Vec<u8>, Cached)> {
            found
                .iter()
                .filter(|e| e.kind == Kind::File)
                .step_by(3)
                .map(|e| (e.path.clone(), Cached { stat: e.stat, id: ContentId([1; 32]) }))
                .collect()
        };
        let cache = StatCache::of_entries(cached());
        for loaded in [true, false] {
            // Loaded before the walk: matched as walked, so each directory holds references
            // to the cache and records both, moved into the scan's buffer when closed. Not
            // loaded: every file recorded, matched when the scan is made.
            let loading = OnceLock::new();
            if loaded {
                let _ = loading.set(StatCache::of_entries(cached()));
            }
            let walked = Scan::walk(dir.path(), &[], &loading).unwrap();
            let kinds = |slots: &[Slot]| {
                let count = |f: fn(&Slot) -> bool| slots.iter().filter(|s| f(s)).count();
                (count(|s| matches!(s, Slot::Cached(_))), count(|s| matches!(s, Slot::File(_))))
            };
            let files = expected.iter().filter(|e| e.1 == Kind::File).count();
            let (cached, recorded) = kinds(&walked.walk.entries);
            if loaded {
                assert_eq!((cached, recorded), (files.div_ceil(3), files - files.div_ceil(3)), "matched as walked");
            } else {
                assert_eq!(cached, 0, "nothing matched before the cache was there");
            }
            let scan = Scan::new(walked, loading.get().unwrap_or(&cache));
            assert_eq!(seen(&scan), expected, "cache loaded during the walk: {loaded}");
            assert_eq!(kinds(&scan.slots).0, files.div_ceil(3), "every cached file a reference once matched");
        }
    }
}
