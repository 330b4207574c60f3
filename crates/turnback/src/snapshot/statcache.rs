//! The per-session stat cache: what each file looked like when its content was last read.
//!
//! Invariants:
//! - It is stored sealed (paths are secret); the row that names it is written in the same
//!   transaction as the snapshot it describes (a whole cache's pieces just before). A
//!   watched snapshot (see [`watched`](crate::snapshot)) does not rewrite it, so it may describe an older snapshot
//!   of the session, even one pruned since: every content and tree id it names is therefore
//!   a root of `gc` ([`named_ids`], used by [`live_objects`](crate::snapshot::live_objects)),
//!   and a full walk after watched snapshots measures what it adds against the latest
//!   snapshot's tree, not against an older cache.
//! - It is kept in two parts: the *whole* cache, rewritten only now and then, and a small
//!   *delta* of what changed since (entries given or removed, the tree nodes made since,
//!   the new [`Shape`]), rewritten at each snapshot that changes something: a change costs
//!   what changed, not the size of the tree. The delta names the generation (a random value
//!   drawn each time the whole cache is written) of the whole cache it applies to; one that
//!   names another, or has no whole cache under it, does not verify. Past
//!   [`delta_fits`] the next snapshot writes the whole cache again, and no delta.
//! - A file is taken as unchanged only if every stat field (type and mode, size, mtime,
//!   ctime, device, inode) matches **and** its mtime is older than the moment the walk that
//!   recorded it began by more than [`RACY_MARGIN_NS`] (the whole cache's walk, or the
//!   delta's for the entries it gives). A file written in the same instant as the walk (the
//!   "racily clean" case of git and jj) could change again without its mtime moving on a
//!   coarse clock, so it is read again. The margin covers file systems that keep whole
//!   seconds. (An entry carried into a later delta without being read again was settled
//!   at its own walk, so it is settled at the later one too.)
//! - Its [`Shape`], when it has one, is the root of the tree that its files and the walk's
//!   other entries (symlinks, nested repositories) made, written from the very build that
//!   made it: a walk that finds every file as cached and the same other entries has that
//!   tree again, without building it, and one that finds a few files changed patches it.
//! - The whole cache is stored in [`pieces`](crate::snapshot::pieces) of 1 MiB, written
//!   ahead of the snapshot's commit; its own row holds only which pieces make it (a
//!   manifest: the generation, their number and the plaintext's size), written in the
//!   snapshot's transaction. A row of any other layout (an unreleased build's, which held
//!   the whole sealed cache) is not read: the next snapshot reads every file once.
//! - Loaded from its pieces, a cache holds its paths and stats in memory and leaves its
//!   content ids where they are ([`StatCache::ids_of`] reads them again, at their place,
//!   each piece authenticated again): a snapshot asks for the ids of what changed, and only
//!   a whole build for them all. They are asked before the snapshot commits: until then
//!   it holds the session's lock and the objects lock shared, so nothing else removes the
//!   pieces it loaded, and its own commit (which may store a new whole cache) is what
//!   removes them.
//! - It is derived data: everything in it can be found again by reading the files. A cache
//!   that does not verify (altered, or malformed) is never a reason to stop taking
//!   snapshots: [`StatCache::load_or_drop`] deletes it, says so once, and the snapshot reads
//!   every file in full (one altered while a snapshot reads ids from it fails that snapshot
//!   as `corrupt`, and the next drops it).

use std::io::{self, BufRead, Read};

use crate::base::varint;
use crate::error::{Error, ErrorCode, Result};
use crate::fs::walk::{Stat, component_order};
use crate::snapshot::pieces;
use crate::storage::content::ContentId;
use crate::storage::kv::Txn;
use crate::storage::schema;
use crate::storage::store::Store;

const SCHEMA: u16 = 1;
/// Encoded bytes of one entry's content id (the last column).
const ID_BYTES: usize = 32;
/// Encoded bytes of one entry's columns: mode, size, mtime, ctime, device, inode, id.
const ENTRY_COLUMNS: usize = 4 + 8 + 16 + 16 + 8 + 8 + ID_BYTES;
/// Entries in component order (the walk's), then the tree ids, the shape and the
/// generation.
/// A cache of any other layout (the unreleased ones before it) is not read: the cache is
/// derived, so the next snapshot reads every file once and writes it anew.
const MAGIC: &[u8; 4] = b"TBS6";
/// A whole cache's row that names its pieces: the generation, the number of pieces and the
/// plaintext's size follow.
const PIECES_MAGIC: &[u8; 4] = b"TBSP";
/// A delta: the generation it applies to, its walk's moment, its entries (each given or
/// removed), its tree ids and shape.
const DELTA_MAGIC: &[u8; 4] = b"TBD1";
/// How much older than the walk a file's mtime must be to be trusted unread.
pub(crate) const RACY_MARGIN_NS: i128 = 2_000_000_000;
/// A delta may hold this many entries whatever the size of the whole cache …
const DELTA_MIN_ENTRIES: usize = 1024;
/// … or a sixteenth of the whole cache's entries, if more …
const DELTA_SHARE: usize = 16;
/// … and at most this many tree ids (a few per snapshot that changed something).
const DELTA_MAX_TREES: usize = 4096;

/// Whether a file last modified at `stat`'s mtime was settled when the snapshot stamped
/// `taken_at_ns` began: modified more than [`RACY_MARGIN_NS`] before it, so a cached stat
/// can vouch for its content.
pub(crate) fn settled(stat: &Stat, taken_at_ns: i128) -> bool {
    i128::from(stat.mtime_ns) + RACY_MARGIN_NS < taken_at_ns
}

/// Whether a delta of `entries` entries and `trees` tree ids may go with a whole cache of
/// `whole` entries; past it the whole cache is written again.
pub(crate) fn delta_fits(entries: usize, trees: usize, whole: usize) -> bool {
    entries <= delta_max_entries(whole) && trees <= DELTA_MAX_TREES
}

/// The most entries a delta over a whole cache of `whole` entries may hold.
pub(crate) fn delta_max_entries(whole: usize) -> usize {
    DELTA_MIN_ENTRIES.max(whole / DELTA_SHARE)
}

/// One cached file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Cached {
    /// Its stat when read.
    pub stat: Stat,
    /// Its content id.
    pub id: ContentId,
}

/// The tree a cache's files made, with the walk's other entries as they were then.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Shape {
    /// The root of the tree built from the cached files and those entries.
    pub root: ContentId,
    /// The digest of every entry of that walk that is not a file ([`others_digest`]).
    pub others: [u8; 32],
}

/// The cached files in component order (kept by whoever adds them): each one's path, in
/// one buffer shared by all (not an allocation each: a million files' paths cost their
/// bytes), and its stat when read, packed ([`PackedFile`]). Their content ids are kept apart
/// ([`StatCache`]): a snapshot that finds most files unchanged never asks for them. The
/// buffer holds at most 4 GiB of paths, and the files are on at most 2^16 devices (a
/// cache with more does not load: [`TOO_LONG`]); it may also hold paths no file refers to
/// any more (removed by a delta), until the next whole cache.
#[derive(Default, Clone)]
pub(crate) struct Files {
    paths: Vec<u8>,
    items: Vec<PackedFile>,
    /// The devices the files are on (an item holds the index of its own) …
    devices: Vec<u64>,
    /// … and the index of each.
    device_at: std::collections::HashMap<u64, u16>,
}

/// One file of [`Files`]: where its path lies in the buffer, and its stat with the device
/// as an index in [`Files::devices`] (a tree's files are on a few). Packed: 46 bytes, not
/// the 56 of a span and a [`Stat`] (10 MB on a million files).
#[derive(Debug, Clone, Copy)]
#[repr(C, packed(2))]
struct PackedFile {
    start: u32,
    len: u32,
    size: u64,
    mtime_ns: i64,
    ctime_ns: i64,
    inode: u64,
    mode: u32,
    device: u16,
}

impl Files {
    /// How many.
    pub(crate) fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether there are none.
    pub(crate) fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// File `i`'s path.
    pub(crate) fn path(&self, i: usize) -> &[u8] {
        self.path_of(&self.items[i])
    }

    /// File `i`'s stat when it was read.
    pub(crate) fn stat(&self, i: usize) -> Stat {
        let item = self.items[i];
        Stat {
            mode: item.mode,
            size: item.size,
            mtime_ns: item.mtime_ns,
            ctime_ns: item.ctime_ns,
            device: self.devices[usize::from(item.device)],
            inode: item.inode,
        }
    }

    /// Each path and its stat, in order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&[u8], Stat)> + '_ {
        (0..self.len()).map(|i| (self.path(i), self.stat(i)))
    }

    fn path_of(&self, item: &PackedFile) -> &[u8] {
        let (start, len) = (item.start, item.len);
        &self.paths[start as usize..][..len as usize]
    }

    /// The index of `device` in [`Files::devices`], added if new; `None` past 2^16.
    fn device(&mut self, device: u64) -> Option<u16> {
        // The first few looked at in place, without hashing: most trees are on one or two.
        if let Some(k) = self.devices.iter().take(4).position(|d| *d == device) {
            return Some(k as u16);
        }
        if let Some(&k) = self.device_at.get(&device) {
            return Some(k);
        }
        let k = u16::try_from(self.devices.len()).ok()?;
        self.devices.push(device);
        self.device_at.insert(device, k);
        Some(k)
    }

    /// The packed file of the path at `start`, `len` long, with `stat`; `None` past 2^16
    /// devices.
    fn pack(&mut self, start: u32, len: u32, stat: Stat) -> Option<PackedFile> {
        Some(PackedFile {
            start,
            len,
            size: stat.size,
            mtime_ns: stat.mtime_ns,
            ctime_ns: stat.ctime_ns,
            inode: stat.inode,
            mode: stat.mode,
            device: self.device(stat.device)?,
        })
    }

    /// Sets one stat field of file `i` from its encoding `v` in `column`; `None` for a
    /// value it cannot hold.
    fn set_column(&mut self, i: usize, column: Column, v: &[u8]) -> Option<()> {
        let x = column.decode(v)?;
        match column {
            Column::Mode => self.items[i].mode = x as u32,
            Column::Size => self.items[i].size = x,
            Column::Mtime => self.items[i].mtime_ns = x as i64,
            Column::Ctime => self.items[i].ctime_ns = x as i64,
            Column::Device => self.items[i].device = self.device(x)?,
            Column::Inode => self.items[i].inode = x,
        }
        Some(())
    }

    /// Sets file `i`'s stat; `None` past 2^16 devices.
    fn set_stat(&mut self, i: usize, stat: Stat) -> Option<()> {
        let PackedFile { start, len, .. } = self.items[i];
        self.items[i] = self.pack(start, len, stat)?;
        Some(())
    }

    /// Adds `path` to the buffer, packed with `stat`; `None` past 4 GiB of paths or
    /// 2^16 devices (no real cache has them).
    fn pack_new(&mut self, path: &[u8], stat: Stat) -> Option<PackedFile> {
        let (start, len) = self.intern(path)?;
        self.pack(start, len, stat)
    }

    /// Adds `path` to the buffer: where it starts, and its length; `None` past 4 GiB of
    /// paths.
    fn intern(&mut self, path: &[u8]) -> Option<(u32, u32)> {
        let start = u32::try_from(self.paths.len()).ok()?;
        let len = u32::try_from(path.len()).ok()?;
        start.checked_add(len)?;
        self.paths.extend_from_slice(path);
        Some((start, len))
    }

    /// Adds a file at the end with a blank stat, each field to be set before it is read
    /// ([`Files::set_column`]; its device index is no device's yet); `None` past 4 GiB of
    /// paths.
    fn push_blank(&mut self, path: &[u8]) -> Option<()> {
        let (start, len) = self.intern(path)?;
        let item = PackedFile { start, len, size: 0, mtime_ns: 0, ctime_ns: 0, inode: 0, mode: 0, device: 0 };
        self.items.push(item);
        Some(())
    }

    /// Where `path` is (`Ok`) or would go (`Err`), searched from `from` on when the file
    /// before `from` comes before `path` (galloping: a walk asks in order, so the answer is
    /// usually at `from` or just past it), else among them all.
    pub(crate) fn find_from(&self, from: usize, path: &[u8]) -> std::result::Result<usize, usize> {
        let before = |i: usize| component_order(self.path(i), path).is_lt();
        let n = self.len();
        let from = from.min(n);
        if from > 0 && !before(from - 1) {
            return self.search(0, n, path);
        }
        // Grow the step until the file there is not before `path`, then search the last step.
        let (mut lo, mut step) = (from, 1);
        while lo + step <= n && before(lo + step - 1) {
            lo += step;
            step *= 2;
        }
        self.search(lo, (lo + step).min(n), path)
    }

    /// Where `path` is (`Ok`) or would go (`Err`) among `lo..hi`.
    fn search(&self, lo: usize, hi: usize, path: &[u8]) -> std::result::Result<usize, usize> {
        match self.items[lo..hi].binary_search_by(|item| component_order(self.path_of(item), path)) {
            Ok(i) => Ok(lo + i),
            Err(i) => Err(lo + i),
        }
    }

    /// Whether every path comes after the one before.
    pub(crate) fn in_order(&self) -> bool {
        self.items.windows(2).all(|w| component_order(self.path_of(&w[0]), self.path_of(&w[1])).is_lt())
    }
}

/// Why a cache with more than 4 GiB of paths, or on more than 2^16 devices, does not load.
const TOO_LONG: &str = "its paths are longer than 4 GiB in all, or its files are on more than 65,536 devices";

impl PartialEq for Files {
    fn eq(&self, other: &Self) -> bool {
        self.iter().eq(other.iter())
    }
}

impl std::fmt::Debug for Files {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter().map(|(p, s)| (String::from_utf8_lossy(p), s))).finish()
    }
}

/// A session's stat cache: the whole cache with its delta laid over it.
#[derive(Debug, Default)]
pub(crate) struct StatCache {
    /// When the walk that wrote the whole cache began (ns since epoch).
    pub taken_at_ns: i128,
    /// Each path and its stat, in component order ([`component_order`], the order of a
    /// walk), so that a walk in order finds each path where the last one was found or just
    /// past it ([`Files::find_from`]). A snapshot's scan and read plan hold
    /// indices into it: it does not change once loaded.
    pub entries: Files,
    /// The whole cache's content ids, in its own order (before the delta).
    whole_ids: WholeIds,
    /// The directory node ids of the snapshot the whole cache describes.
    pub tree_ids: Vec<ContentId>,
    /// The tree its files made, if it was written with one (the delta's, if it has one).
    pub shape: Option<Shape>,
    /// The whole cache's generation, which its delta names.
    pub generation: [u8; 16],
    /// What the delta laid over it.
    pub delta: Delta,
    /// Every tree id it names, whole cache and delta, for [`names_tree`](Self::names_tree)
    /// (made at its first call: the ids do not change once the cache is loaded).
    named_trees: std::sync::OnceLock<std::collections::HashSet<ContentId>>,
}

/// Where the whole cache's content ids are.
#[derive(Debug)]
enum WholeIds {
    /// In memory, one per entry of the whole cache: read for `gc`'s roots, or a test's
    /// cache.
    Resident(Vec<ContentId>),
    /// Left in the pieces they were read from: `count` ids, 32 bytes each, from byte `at`
    /// of the plaintext the manifest names (a million files' ids are 32 MB, which a
    /// snapshot that finds most files unchanged never needs).
    InPieces { session: String, manifest: pieces::Manifest, at: u64, count: usize },
}

impl Default for WholeIds {
    fn default() -> Self {
        WholeIds::Resident(Vec::new())
    }
}

/// What a delta laid over the whole cache.
#[derive(Debug, Default)]
pub(crate) struct Delta {
    /// When the walk that wrote it began.
    pub taken_at_ns: i128,
    /// The entries it gave (replaced or joined), in order: the `k`-th one's content id is
    /// `ids[k]` (the delta's entries and the cache's are both in component order).
    given: Vec<u32>,
    /// The entries it joined to the whole cache's, in order.
    joined: Vec<u32>,
    /// The whole cache's entries it removed (their indices there), in order.
    removed_at: Vec<u32>,
    /// The content ids of the entries it gave, in order.
    ids: Vec<ContentId>,
    /// The paths of the whole cache it removes.
    pub removed: Vec<Vec<u8>>,
    /// The directory node ids made since the whole cache (its trees and these name every
    /// node of the shape's tree).
    pub tree_ids: Vec<ContentId>,
}

/// The `n`-th (from 0) of the numbers not in `set` (in order, each once).
fn nth_outside(set: &[u32], n: usize) -> usize {
    // Set member `k` has `set[k] - k` numbers outside the set below it: those members with
    // at most `n` below come before the answer.
    let (mut lo, mut hi) = (0, set.len());
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if set[mid] as usize - mid <= n {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    n + lo
}

/// Where an entry's content id is.
enum Origin {
    Whole(usize),
    Delta(usize),
}

impl StatCache {
    /// Whether entry `i` was given by the delta (and was stat-ed at its walk).
    pub(crate) fn given(&self, i: usize) -> bool {
        self.delta.given.binary_search_by_key(&i, |&entry| entry as usize).is_ok()
    }

    /// Where entry `i`'s content id is: the delta's, if it gave it; else the whole
    /// cache's entry it is, counted past the entries the delta joined before it and
    /// those it removed (the inverse of the places [`lay`](Self::lay) gives them).
    fn origin(&self, i: usize) -> Origin {
        let delta = &self.delta;
        if let Ok(k) = delta.given.binary_search_by_key(&i, |&entry| entry as usize) {
            return Origin::Delta(k);
        }
        let kept = i - delta.joined.partition_point(|&entry| (entry as usize) < i);
        Origin::Whole(nth_outside(&delta.removed_at, kept))
    }

    /// Whether `stat` proves file entry `i` unchanged since it was read.
    pub(crate) fn clean(&self, i: usize, stat: &Stat) -> bool {
        let walked_at = if self.given(i) { self.delta.taken_at_ns } else { self.taken_at_ns };
        self.entries.stat(i) == *stat && settled(stat, walked_at)
    }

    /// The content ids of entries `wanted`, in their order: those the whole cache left in
    /// its pieces are read from them again, each piece at most once if `wanted` is in
    /// order.
    ///
    /// # Errors
    /// The store's; `corrupt` if a piece no longer opens as it did when the cache loaded.
    pub(crate) fn ids_of(&self, store: &Store, wanted: impl IntoIterator<Item = usize>) -> Result<Vec<ContentId>> {
        let wanted = wanted.into_iter();
        let mut out = Vec::with_capacity(wanted.size_hint().0);
        let mut reader = match &self.whole_ids {
            WholeIds::Resident(_) => None,
            WholeIds::InPieces { session, manifest, .. } => Some(pieces::Cursor::new(store, session, *manifest)),
        };
        for i in wanted {
            out.push(match (self.origin(i), &self.whole_ids, &mut reader) {
                (Origin::Delta(k), ..) => *self.delta.ids.get(k).ok_or_else(malformed)?,
                (Origin::Whole(w), WholeIds::Resident(ids), _) => *ids.get(w).ok_or_else(malformed)?,
                (Origin::Whole(w), WholeIds::InPieces { at, count, .. }, Some(reader)) if w < *count => {
                    let mut id = [0u8; ID_BYTES];
                    reader.read_at(at + (ID_BYTES * w) as u64, &mut id)?;
                    ContentId(id)
                }
                (Origin::Whole(_), ..) => return Err(malformed()),
            });
        }
        Ok(out)
    }

    /// Every entry's content id, in order (32 bytes each, read from the pieces if they are
    /// there: for a whole build, which writes them all).
    ///
    /// # Errors
    /// As [`ids_of`](Self::ids_of).
    pub(crate) fn all_ids(&self, store: &Store) -> Result<Vec<ContentId>> {
        self.ids_of(store, 0..self.entries.len())
    }

    /// Whether `id` is a node of a tree this cache describes (the whole cache's or one
    /// made since).
    pub(crate) fn names_tree(&self, id: &ContentId) -> bool {
        let named =
            self.named_trees.get_or_init(|| self.tree_ids.iter().chain(&self.delta.tree_ids).copied().collect());
        named.contains(id)
    }

    /// A cache of `entries` (in component order) and nothing else, its ids in memory.
    #[cfg(test)]
    pub(crate) fn of_entries(entries: Vec<(Vec<u8>, Cached)>) -> Self {
        let mut cache = StatCache::default();
        entries.into_iter().for_each(|(p, c)| cache.push(&p, c));
        cache
    }

    /// Adds an entry at the end of a whole cache whose ids are in memory.
    #[cfg(test)]
    pub(crate) fn push(&mut self, path: &[u8], cached: Cached) {
        let file = self.entries.pack_new(path, cached.stat).expect("small");
        self.entries.items.push(file);
        let WholeIds::Resident(ids) = &mut self.whole_ids else { panic!("ids in memory") };
        ids.push(cached.id);
    }

    /// Entry `i`'s content id, from a cache whose ids are in memory.
    #[cfg(test)]
    pub(crate) fn id(&self, i: usize) -> ContentId {
        match (self.origin(i), &self.whole_ids) {
            (Origin::Delta(k), _) => self.delta.ids[k],
            (Origin::Whole(w), WholeIds::Resident(ids)) => ids[w],
            (Origin::Whole(_), WholeIds::InPieces { .. }) => panic!("ids in memory"),
        }
    }

    /// The content id of `path` if its stat proves it unchanged since it was read.
    #[cfg(test)]
    fn clean_id(&self, path: &[u8], stat: &Stat) -> Option<ContentId> {
        let i = self.entries.search(0, self.entries.len(), path).ok()?;
        self.clean(i, stat).then(|| self.id(i))
    }

    /// Loads the cache of `session` (empty if none).
    ///
    /// # Errors
    /// `corrupt` if it does not verify.
    pub(crate) fn load(store: &Store, session: &str) -> Result<Self> {
        let key = session.as_bytes();
        let mut cache = match store.kv().get(schema::STATCACHE, key)? {
            Some(v) => open_whole(store, session, v, IdsIn::Pieces)?,
            None => StatCache::default(),
        };
        if let Some(v) = store.kv().get(schema::STATCACHE_DELTA, key)? {
            let delta = decode_delta(&store.open_bytes(schema::STATCACHE_DELTA, key, &v)?)?;
            if delta.generation != cache.generation || cache.entries.is_empty() && cache.tree_ids.is_empty() {
                return Err(Error::corrupt("stat cache", "its delta belongs to another cache"));
            }
            cache.lay(delta).ok_or_else(|| Error::corrupt("stat cache", TOO_LONG))?;
        }
        Ok(cache)
    }

    /// Loads the cache of `session`; one that does not verify is deleted (in its own
    /// transaction, so it is reported once however the snapshot ends) and an empty cache
    /// is returned with the reason, so that every file is read in full.
    ///
    /// # Errors
    /// Store errors other than the cache's own corruption.
    pub(crate) fn load_or_drop(store: &Store, session: &str) -> Result<(Self, Option<String>)> {
        match Self::load(store, session) {
            Ok(cache) => Ok((cache, None)),
            Err(e) if e.code == ErrorCode::Corrupt => {
                let mut txn = store.kv().begin()?;
                // The snapshot that loads it holds the session's lock.
                delete_all_in(&mut *txn, session)?;
                txn.commit()?;
                let why = format!(
                    "the session's stat cache did not verify ({}); it was dropped and every file read in full",
                    e.message
                );
                Ok((StatCache::default(), Some(why)))
            }
            Err(e) => Err(e),
        }
    }

    /// Lays `delta` over the whole cache, in place: entries it gives replace or join the
    /// whole cache's, those it removes go (a removal of a path the whole cache lacks is
    /// dropped). `None` past 4 GiB of paths or 2^16 devices, the cache then half changed:
    /// thrown away.
    fn lay(&mut self, delta: DecodedDelta) -> Option<()> {
        let files = &mut self.entries;
        // Entry indices fit in 32 bits (fewer than 2^31 entries: [`RECORD_MAX`] bounds the
        // cache's plaintext and an entry takes over 90 bytes).
        let index = |i: usize| u32::try_from(i).ok();
        let mut ids = Vec::new();
        // The whole cache's entries replaced, the entries joining, those removed; the ids
        // of the first two in the delta's order, which is the cache's.
        let (mut replaced, mut joining, mut removed_at) = (Vec::new(), Vec::new(), Vec::new());
        for (path, value) in delta.entries {
            match (files.search(0, files.len(), &path), value) {
                (Ok(i), Some(c)) => {
                    files.set_stat(i, c.stat)?;
                    replaced.push(i);
                    ids.push(c.id);
                }
                (Ok(i), None) => removed_at.push(index(i)?),
                // Its path joins the buffer now; its place among the files is found below.
                (Err(_), Some(c)) => {
                    joining.push(files.pack_new(&path, c.stat)?);
                    ids.push(c.id);
                }
                (Err(_), None) => {}
            }
        }
        // The removed paths are copied out (their files go below; their bytes stay in the
        // buffer, unreferenced).
        let removed = removed_at.iter().map(|&i| files.path(i as usize).to_vec()).collect();
        if !removed_at.is_empty() {
            // In order (the delta's paths are): compact around them.
            let mut k = 0;
            let mut write = 0;
            for read in 0..files.len() {
                if k < removed_at.len() && removed_at[k] as usize == read {
                    k += 1;
                    continue;
                }
                files.items.swap(write, read);
                write += 1;
            }
            files.items.truncate(write);
        }
        let mut joined = Vec::with_capacity(joining.len());
        if !joining.is_empty() {
            // Merge from the back into the room made at the end (both lists are in order).
            let (old, n) = (files.len(), joining.len());
            // Filled from the back below (the first joining item stands in meanwhile).
            files.items.resize(old + n, joining[0]);
            let (mut i, mut w) = (old, old + n);
            while let Some(last) = joining.last() {
                w -= 1;
                if i > 0 && component_order(files.path(i - 1), files.path_of(last)).is_gt() {
                    i -= 1;
                    files.items.swap(i, w);
                } else {
                    files.items[w] = joining.pop().expect("non-empty");
                    joined.push(index(w)?);
                }
            }
            joined.reverse();
        }
        // A replaced entry's place: among the whole cache's that stay, past those joined.
        let mut given = joined.clone();
        for i in replaced {
            let kept = i - removed_at.partition_point(|&g| (g as usize) < i);
            given.push(index(nth_outside(&joined, kept))?);
        }
        given.sort_unstable();
        if let Some(shape) = delta.shape {
            self.shape = Some(shape);
        }
        let taken_at_ns = delta.taken_at_ns;
        self.delta = Delta { taken_at_ns, given, joined, removed_at, ids, removed, tree_ids: delta.tree_ids };
        Some(())
    }

    /// Its encoding as a whole cache ([`encode`]), from a cache whose ids are in memory.
    #[cfg(test)]
    fn encode(&self) -> Vec<u8> {
        let entries = || self.entries.iter().enumerate().map(|(i, (p, stat))| (p, Cached { stat, id: self.id(i) }));
        let mut out = Vec::new();
        encode(&mut out, self.taken_at_ns, &entries, &self.tree_ids, self.shape, self.generation).expect("in memory");
        out
    }
}

/// The entries of a cache to write, in component order, as often as they are asked for:
/// borrowed from the walk, so a cache is written without copying its paths.
pub(crate) type Entries<'e, I> = dyn Fn() -> I + 'e;

/// What a snapshot writes of the stat cache.
pub(crate) enum Write {
    /// The whole cache, in place of the old one and its delta: the sealed row naming its
    /// pieces (stored already), and their generation.
    Whole { row: Vec<u8>, generation: [u8; 16] },
    /// A delta (sealed) over the whole cache as stored.
    Delta(Vec<u8>),
}

/// Stores the pieces of a whole cache for `session` (in transactions of their own, ahead
/// of the snapshot's commit) and returns the row that names them ([`put_in`]): a cache of
/// `entries` taken at `taken_at_ns`, describing a snapshot of the directory nodes
/// `tree_ids` (whose root and other entries are `shape`, when they are known to go with
/// these entries), of a new generation. Sealed piece by piece as it is encoded: its
/// plaintext is never whole in memory, nor its sealed bytes.
pub(crate) fn store_whole<'p, I: Iterator<Item = (&'p [u8], Cached)>>(
    store: &Store,
    session: &str,
    taken_at_ns: i128,
    entries: &Entries<'_, I>,
    tree_ids: &[ContentId],
    shape: Option<Shape>,
) -> Result<Write> {
    let mut generation = [0u8; 16];
    getrandom::fill(&mut generation).map_err(|e| Error::new(ErrorCode::Io, format!("random generation: {e}")))?;
    let mut encoded = |w: &mut dyn io::Write| encode(w, taken_at_ns, entries, tree_ids, shape, generation);
    let manifest = pieces::write(store, session, generation, &mut encoded)?;
    crate::base::failpoint::hit("statcache-pieces-stored");
    let mut row = PIECES_MAGIC.to_vec();
    row.extend_from_slice(&manifest.to_bytes());
    let row = store.seal_bytes_at_level(schema::STATCACHE, session.as_bytes(), SCHEMA, &row, 1)?;
    Ok(Write::Whole { row, generation })
}

/// Opens the row `value` of `session`'s whole cache: the manifest of the pieces that make
/// it, or `None` for a row of another layout (not read).
///
/// # Errors
/// `corrupt` if it does not open or its manifest is malformed.
fn open_row(store: &Store, session: &str, value: Vec<u8>) -> Result<Option<pieces::Manifest>> {
    let (mut plain, _) = store.open_bytes_reader(schema::STATCACHE, session.as_bytes(), value)?;
    let mut magic = [0u8; 4];
    plain.read_exact(&mut magic).map_err(|_| malformed())?;
    if &magic != PIECES_MAGIC {
        return Ok(None);
    }
    let mut manifest = [0u8; pieces::MANIFEST_BYTES];
    plain.read_exact(&mut manifest).map_err(|_| malformed())?;
    if plain.read(&mut [0u8; 1]).map_err(|_| malformed())? != 0 {
        return Err(malformed());
    }
    let manifest = pieces::Manifest::from_bytes(&manifest)
        .ok_or_else(|| Error::corrupt("stat cache", "its manifest counts other than its pieces hold"))?;
    Ok(Some(manifest))
}

/// The whole cache of `session` from its row `value`, read from the pieces it names (none,
/// for a row of another layout). Its content ids are left in its pieces unless `ids` asks
/// for them in memory.
fn open_whole(store: &Store, session: &str, value: Vec<u8>, ids: IdsIn) -> Result<StatCache> {
    let Some(manifest) = open_row(store, session, value)? else { return Ok(StatCache::default()) };
    let left = (ids == IdsIn::Pieces).then_some((session, manifest));
    let cache = pieces::read(store, session, manifest, |plain| decode_from(plain, Some(manifest.size), left))?;
    if cache.generation != manifest.generation {
        return Err(Error::corrupt("stat cache", "its pieces belong to another cache"));
    }
    Ok(cache)
}

/// Whether a whole cache's content ids are read into memory or left in its pieces.
#[derive(Clone, Copy, PartialEq, Eq)]
enum IdsIn {
    Memory,
    Pieces,
}

/// The generation of the pieces the whole cache of `session` names, read in `txn`; `None`
/// if it names none (no cache, a row of another layout, or a row that does not verify).
///
/// # Errors
/// The store's other than a row's corruption (then no piece of the session is swept).
fn named_generation(store: &Store, txn: &mut dyn Txn, session: &str) -> Result<Option<[u8; 16]>> {
    let Some(value) = txn.get(schema::STATCACHE, session.as_bytes())? else { return Ok(None) };
    match open_row(store, session, value) {
        Ok(manifest) => Ok(manifest.map(|m| m.generation)),
        Err(e) if e.code == ErrorCode::Corrupt => Ok(None),
        Err(e) => Err(e),
    }
}

/// Deletes every stored piece that no session's whole cache names (left by a snapshot that
/// failed or was cancelled after storing them). The caller holds the objects lock
/// exclusively, so no snapshot is storing pieces meanwhile.
///
/// # Errors
/// The store's.
pub(crate) fn sweep_pieces(store: &Store) -> Result<()> {
    let mut txn = store.kv().begin()?;
    pieces::sweep(&mut *txn, &|txn, session| named_generation(store, txn, session))?;
    txn.commit()
}

/// The sealed delta to store for `session` over the whole cache of `generation`: `entries`
/// (in component order; `None` removes the whole cache's entry) stat-ed by the walk that
/// began at `taken_at_ns`, the tree ids made since the whole cache, and the new shape.
pub(crate) fn seal_delta(
    store: &Store,
    session: &str,
    generation: [u8; 16],
    taken_at_ns: i128,
    entries: &[(&[u8], Option<Cached>)],
    tree_ids: &[ContentId],
    shape: Shape,
) -> Result<Write> {
    let mut out = Vec::with_capacity(64 + entries.len() * (32 + ENTRY_COLUMNS) + tree_ids.len() * 32);
    encode_delta(&mut out, generation, taken_at_ns, entries, tree_ids, shape).expect("writing to memory");
    Ok(Write::Delta(store.seal_bytes_at_level(schema::STATCACHE_DELTA, session.as_bytes(), SCHEMA, &out, 1)?))
}

fn encode_delta(
    out: &mut dyn io::Write,
    generation: [u8; 16],
    taken_at_ns: i128,
    entries: &[(&[u8], Option<Cached>)],
    tree_ids: &[ContentId],
    shape: Shape,
) -> io::Result<()> {
    out.write_all(DELTA_MAGIC)?;
    out.write_all(&generation)?;
    out.write_all(&taken_at_ns.to_le_bytes())?;
    put_varint(out, entries.len() as u64)?;
    put_paths(out, entries.iter().map(|(p, _)| *p))?;
    out.write_all(&entries.iter().map(|(_, c)| u8::from(c.is_some())).collect::<Vec<u8>>())?;
    put_columns(out, &|| entries.iter().filter_map(|(_, c)| *c))?;
    put_trees_and_shape(out, tree_ids, Some(shape))
}

/// In component order, then column by column (each path as the length it shares with the
/// previous one plus the rest; then every mode, size, mtime, ctime, device, inode, id), so
/// that similar bytes sit together and compress: about a third of the row layout. Then the
/// tree ids, the shape (a byte 0, or 1 and its root and digest) and the generation.
fn encode<'p, I: Iterator<Item = (&'p [u8], Cached)>>(
    out: &mut dyn io::Write,
    taken_at_ns: i128,
    sorted: &Entries<'_, I>,
    tree_ids: &[ContentId],
    shape: Option<Shape>,
    generation: [u8; 16],
) -> io::Result<()> {
    out.write_all(MAGIC)?;
    out.write_all(&taken_at_ns.to_le_bytes())?;
    put_varint(out, sorted().count() as u64)?;
    put_paths(out, sorted().map(|(p, _)| p))?;
    put_columns(out, &|| sorted().map(|(_, c)| c))?;
    put_trees_and_shape(out, tree_ids, shape)?;
    out.write_all(&generation)
}

fn put_varint(out: &mut dyn io::Write, v: u64) -> io::Result<()> {
    let mut buf = Vec::with_capacity(10);
    varint::put(&mut buf, v);
    out.write_all(&buf)
}

/// Each path as the length it shares with the previous one, the length of the rest, the
/// rest.
fn put_paths<'p>(out: &mut dyn io::Write, paths: impl Iterator<Item = &'p [u8]>) -> io::Result<()> {
    let mut previous: &[u8] = &[];
    for path in paths {
        let shared = path.iter().zip(previous).take_while(|(a, b)| a == b).count();
        put_varint(out, shared as u64)?;
        put_varint(out, (path.len() - shared) as u64)?;
        out.write_all(&path[shared..])?;
        previous = path;
    }
    Ok(())
}

/// One column of the entries' stats, in [`COLUMNS`] order: the writer and the reader
/// share this one table, so their layouts cannot drift apart. The ids' column follows
/// them, [`ID_BYTES`] an entry (written by [`put_columns`], read by [`Input::ids`], and read
/// past or at an entry's place by [`decode_from`] and [`StatCache::ids_of`]).
#[derive(Clone, Copy)]
enum Column {
    Mode,
    Size,
    Mtime,
    Ctime,
    Device,
    Inode,
}

/// Every mode, then every size, mtime, ctime, device and inode (then every id).
const COLUMNS: [Column; 6] = [Column::Mode, Column::Size, Column::Mtime, Column::Ctime, Column::Device, Column::Inode];

impl Column {
    /// Bytes per entry. Times are kept as 16 bytes (the layout predates the 8-byte fields
    /// in memory).
    fn width(self) -> usize {
        match self {
            Column::Mode => 4,
            Column::Size | Column::Device | Column::Inode => 8,
            Column::Mtime | Column::Ctime => 16,
        }
    }

    fn put(self, out: &mut dyn io::Write, s: &Stat) -> io::Result<()> {
        match self {
            Column::Mode => out.write_all(&s.mode.to_le_bytes()),
            Column::Size => out.write_all(&s.size.to_le_bytes()),
            Column::Mtime => out.write_all(&i128::from(s.mtime_ns).to_le_bytes()),
            Column::Ctime => out.write_all(&i128::from(s.ctime_ns).to_le_bytes()),
            Column::Device => out.write_all(&s.device.to_le_bytes()),
            Column::Inode => out.write_all(&s.inode.to_le_bytes()),
        }
    }

    /// The field its [`width`](Self::width) bytes `v` hold, as 64 bits (a time's two's
    /// complement); `None` for a time past what 8 bytes hold.
    fn decode(self, v: &[u8]) -> Option<u64> {
        match self {
            Column::Mode => Some(u64::from(u32::from_le_bytes(v.try_into().expect("4 bytes")))),
            Column::Size | Column::Device | Column::Inode => Some(u64::from_le_bytes(v.try_into().expect("8 bytes"))),
            Column::Mtime | Column::Ctime => {
                i64::try_from(i128::from_le_bytes(v.try_into().expect("16 bytes"))).ok().map(|t| t as u64)
            }
        }
    }

    /// Sets this field of `s` from its encoding `v` ([`decode`](Self::decode)).
    fn set(self, s: &mut Stat, v: &[u8]) -> Option<()> {
        let x = self.decode(v)?;
        match self {
            Column::Mode => s.mode = x as u32,
            Column::Size => s.size = x,
            Column::Mtime => s.mtime_ns = x as i64,
            Column::Ctime => s.ctime_ns = x as i64,
            Column::Device => s.device = x,
            Column::Inode => s.inode = x,
        }
        Some(())
    }
}

/// The stat columns, then the ids.
fn put_columns<I: Iterator<Item = Cached>>(out: &mut dyn io::Write, cached: &dyn Fn() -> I) -> io::Result<()> {
    COLUMNS.iter().try_for_each(|column| cached().try_for_each(|c| column.put(out, &c.stat)))?;
    cached().try_for_each(|c| out.write_all(&c.id.0))
}

fn put_trees_and_shape(out: &mut dyn io::Write, tree_ids: &[ContentId], shape: Option<Shape>) -> io::Result<()> {
    put_varint(out, tree_ids.len() as u64)?;
    tree_ids.iter().try_for_each(|id| out.write_all(&id.0))?;
    match shape {
        Some(shape) => {
            out.write_all(&[1])?;
            out.write_all(&shape.root.0)?;
            out.write_all(&shape.others)
        }
        None => out.write_all(&[0]),
    }
}

/// The digest of every one of a walk's `entries` (path, kind, mode) that is not a file —
/// symlinks with their mode and target, nested repositories with their commit — in walk
/// order: what, besides the files, a tree is made of (directories are recorded only through
/// what they hold).
pub(crate) fn others_digest<'a>(entries: impl Iterator<Item = (&'a [u8], &'a crate::fs::walk::Kind, u32)>) -> [u8; 32] {
    use crate::fs::walk::Kind;
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    for (path, kind, mode) in entries {
        let (tag, bytes): (u8, &[u8]) = match kind {
            Kind::File => continue,
            Kind::Symlink(target) => (b'l', target),
            Kind::Gitlink(commit) => (b'g', commit.as_bytes()),
        };
        for part in [path, bytes] {
            h.update((part.len() as u64).to_le_bytes());
            h.update(part);
        }
        h.update([tag]);
        h.update(mode.to_le_bytes());
    }
    h.finalize().into()
}

/// The content and tree ids every session's stat cache names, whole cache and delta (a
/// cache that does not verify names nothing: it is dropped before it is ever used). They
/// are a root of `gc`: a watched snapshot does not rewrite the cache, so it may describe a
/// snapshot pruned since, and the next full walk still takes its ids as stored.
pub(crate) fn named_ids(store: &Store) -> Result<(Vec<ContentId>, Vec<ContentId>)> {
    let (mut files, mut trees) = (Vec::new(), Vec::new());
    // Each row read after the keys are listed.
    for session in cached_sessions(store)? {
        let Some(value) = store.kv().get(schema::STATCACHE, session.as_bytes())? else { continue };
        // A cache that does not verify names nothing; an error reading one that may (its
        // pieces are read one by one) stops gc, which must not sweep what it names.
        match open_whole(store, &session, value, IdsIn::Memory) {
            Ok(cache) => {
                let WholeIds::Resident(ids) = cache.whole_ids else { unreachable!("asked in memory") };
                files.extend(ids);
                trees.extend(cache.tree_ids);
            }
            Err(e) if e.code == ErrorCode::Corrupt => {}
            Err(e) => return Err(e),
        }
    }
    store.kv().scan(schema::STATCACHE_DELTA, b"", &mut |k, v| {
        if let Ok(delta) = store.open_bytes(schema::STATCACHE_DELTA, k, v).and_then(|b| decode_delta(&b)) {
            files.extend(delta.entries.iter().filter_map(|(_, c)| c.map(|c| c.id)));
            trees.extend(delta.tree_ids);
            trees.extend(delta.shape.map(|s| s.root));
        }
        Ok(true)
    })?;
    Ok((files, trees))
}

/// Every session whose stat cache does not load as a snapshot would load it (a piece
/// missing, altered or of another length, a delta that does not lie over it), with why.
///
/// # Errors
/// The store's, listing the caches.
pub(crate) fn failing_to_load(store: &Store) -> Result<Vec<(String, Error)>> {
    let sessions = cached_sessions(store)?;
    Ok(sessions.into_iter().filter_map(|s| StatCache::load(store, &s).err().map(|e| (s, e))).collect())
}

/// The sessions with a whole cache, listed first and read after: a cache's pieces are read
/// while it is decoded, which a scan's callback may not do.
fn cached_sessions(store: &Store) -> Result<Vec<String>> {
    store.kv().text_keys(schema::STATCACHE)
}

/// Stores what a snapshot writes of the cache of `session` inside `txn`: a whole cache
/// replaces the old one and its delta; a delta replaces the old delta.
pub(crate) fn put_in(txn: &mut dyn Txn, session: &str, write: &Write) -> Result<()> {
    match write {
        Write::Whole { row, generation } => {
            txn.put(schema::STATCACHE, session.as_bytes(), row)?;
            txn.delete(schema::STATCACHE_DELTA, session.as_bytes())?;
            pieces::delete_in(txn, session, Some(generation))
        }
        Write::Delta(value) => txn.put(schema::STATCACHE_DELTA, session.as_bytes(), value),
    }
}

/// Removes the cache of `session`, whole and delta, inside `txn` (the next snapshot reads
/// everything). Its pieces, named by nothing now, are left to the session's next whole
/// cache or `gc`: a caller without the session's lock must not delete the pieces another
/// process is storing for the snapshot it is taking ([`delete_all_in`] does, with it).
pub(crate) fn delete_in(txn: &mut dyn Txn, session: &str) -> Result<()> {
    txn.delete(schema::STATCACHE, session.as_bytes())?;
    txn.delete(schema::STATCACHE_DELTA, session.as_bytes()).map(|_| ())
}

/// [`delete_in`], and every piece of the session's, for a caller that holds its lock (no
/// snapshot of it is storing pieces meanwhile).
pub(crate) fn delete_all_in(txn: &mut dyn Txn, session: &str) -> Result<()> {
    delete_in(txn, session)?;
    pieces::delete_in(txn, session, None)
}

#[cfg(test)]
fn decode(bytes: &[u8]) -> Result<StatCache> {
    decode_from(bytes, Some(bytes.len() as u64), None)
}

/// Decodes a whole cache from `plain` as it is read (the decompressed plaintext is never
/// held whole); `size`, the plaintext's size if known, bounds what is allocated for it.
/// With `left` (the session and manifest of the pieces `plain` is read from), the content
/// ids are read past and left in the pieces ([`WholeIds::InPieces`]).
fn decode_from(plain: impl Read, size: Option<u64>, left: Option<(&str, pieces::Manifest)>) -> Result<StatCache> {
    let mut input = Input::new(plain, size);
    let magic: [u8; 4] = input.array()?;
    if &magic != MAGIC {
        // Another layout is not an error: the next snapshot reads everything again.
        return Ok(StatCache::default());
    }
    let taken_at_ns = i128::from_le_bytes(input.array()?);
    let count = input.count(2 + ENTRY_COLUMNS)?;
    let mut entries = Files { items: Vec::with_capacity(count), ..Files::default() };
    input.paths(count, &mut |path| entries.push_blank(path).ok_or_else(|| Error::corrupt("stat cache", TOO_LONG)))?;
    input.stats(count, &mut |i, column, value| match entries.set_column(i, column, value) {
        Some(()) => Ok(()),
        // Every value a column holds fits but a device past the table's room.
        None if matches!(column, Column::Device) => Err(Error::corrupt("stat cache", TOO_LONG)),
        None => Err(malformed()),
    })?;
    if !entries.in_order() {
        return Err(malformed());
    }
    let whole_ids = match left {
        Some((session, manifest)) => {
            let at = input.position();
            input.skip((ID_BYTES * count) as u64)?;
            WholeIds::InPieces { session: session.to_string(), manifest, at, count }
        }
        None => {
            let mut ids = vec![ContentId([0; ID_BYTES]); count];
            input.ids(&mut ids, |id| id)?;
            WholeIds::Resident(ids)
        }
    };
    let (tree_ids, shape) = input.trees_and_shape()?;
    let generation = input.array()?;
    if !input.at_end() {
        return Err(malformed());
    }
    Ok(StatCache { taken_at_ns, entries, whole_ids, tree_ids, shape, generation, ..Default::default() })
}

/// A cache entry before its columns are read.
const BLANK: Cached =
    Cached { stat: Stat { mode: 0, size: 0, mtime_ns: 0, ctime_ns: 0, device: 0, inode: 0 }, id: ContentId([0; 32]) };

/// A delta as stored.
struct DecodedDelta {
    generation: [u8; 16],
    taken_at_ns: i128,
    entries: Vec<(Vec<u8>, Option<Cached>)>,
    tree_ids: Vec<ContentId>,
    shape: Option<Shape>,
}

fn decode_delta(bytes: &[u8]) -> Result<DecodedDelta> {
    let bad = || Error::corrupt("stat cache", "malformed delta");
    let mut input = Input::new(bytes, Some(bytes.len() as u64));
    if &input.array::<4>()? != DELTA_MAGIC {
        return Err(bad());
    }
    let generation = input.array()?;
    let taken_at_ns = i128::from_le_bytes(input.array()?);
    let count = input.count(3)?;
    let mut paths = Vec::with_capacity(count);
    input.paths(count, &mut |path| {
        paths.push(path.to_vec());
        Ok(())
    })?;
    let mut given = vec![0u8; count];
    input.exact(&mut given)?;
    if given.iter().any(|g| *g > 1) {
        return Err(bad());
    }
    let mut cached = vec![BLANK; given.iter().filter(|g| **g == 1).count()];
    input.stats(cached.len(), &mut |i, column, value| column.set(&mut cached[i].stat, value).ok_or_else(malformed))?;
    input.ids(&mut cached, |c| &mut c.id)?;
    let mut cached = cached.into_iter();
    let entries: Vec<(Vec<u8>, Option<Cached>)> =
        paths.into_iter().zip(given).map(|(p, g)| (p, if g == 1 { cached.next() } else { None })).collect();
    if !entries.windows(2).all(|w| component_order(&w[0].0, &w[1].0).is_lt()) {
        return Err(bad());
    }
    let (tree_ids, shape) = input.trees_and_shape()?;
    if !input.at_end() {
        return Err(bad());
    }
    Ok(DecodedDelta { generation, taken_at_ns, entries, tree_ids, shape })
}

/// The error of a cache whose bytes do not decode.
fn malformed() -> Error {
    Error::corrupt("stat cache", "malformed")
}

/// Sets a stat field of an entry from its encoding ([`Input::stats`]).
type SetField<'a> = dyn FnMut(usize, Column, &[u8]) -> Result<()> + 'a;

/// A reader that counts what it gave.
struct Counted<R> {
    r: R,
    read: u64,
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.r.read(buf)?;
        self.read += n as u64;
        Ok(n)
    }
}

/// An encoded cache read in order, from a slice or a decompressing reader; every failure
/// (a short read, a read error, a count its size cannot hold) is `corrupt`.
struct Input<R: Read> {
    r: std::io::BufReader<Counted<R>>,
    /// The plaintext's size if known, else the most a record may be.
    size: u64,
}

impl<R: Read> Input<R> {
    fn new(r: R, size: Option<u64>) -> Self {
        let most = crate::storage::store::RECORD_MAX as u64;
        let r = std::io::BufReader::with_capacity(64 * 1024, Counted { r, read: 0 });
        Input { r, size: size.unwrap_or(most).min(most) }
    }

    fn exact(&mut self, out: &mut [u8]) -> Result<()> {
        self.r.read_exact(out).map_err(|_| malformed())
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        let mut out = [0u8; N];
        self.exact(&mut out)?;
        Ok(out)
    }

    fn varint(&mut self) -> Result<usize> {
        varint::read(&mut self.r).and_then(|v| usize::try_from(v).ok()).ok_or_else(malformed)
    }

    /// A count of items of at least `least` bytes each: more than the plaintext can hold is
    /// malformed, not an allocation to attempt.
    fn count(&mut self, least: usize) -> Result<usize> {
        let count = self.varint()?;
        if count as u64 > self.size / least as u64 {
            return Err(malformed());
        }
        Ok(count)
    }

    /// `count` paths as [`put_paths`] wrote them, each handed to `push` (whose error stops
    /// the reading).
    fn paths(&mut self, count: usize, push: &mut dyn FnMut(&[u8]) -> Result<()>) -> Result<()> {
        // Shared prefixes make paths longer than their encoding, but only so much: a real
        // tree's paths fit in a small multiple of it. More is malformed, not an allocation.
        let mut budget = self.size.saturating_mul(64).saturating_add(1 << 20);
        let mut previous: Vec<u8> = Vec::new();
        for _ in 0..count {
            let (shared, len) = (self.varint()?, self.varint()?);
            if shared > previous.len() {
                return Err(malformed());
            }
            let whole = shared.checked_add(len).ok_or_else(malformed)?;
            budget = budget.checked_sub(whole as u64).ok_or_else(malformed)?;
            previous.truncate(shared);
            // Grown as the bytes come: a length the input does not hold allocates nothing.
            let read = (&mut self.r).take(len as u64).read_to_end(&mut previous).map_err(|_| malformed())?;
            if read != len {
                return Err(malformed());
            }
            push(&previous)?;
        }
        Ok(())
    }

    /// The stat columns of `count` entries as [`put_columns`] wrote them, handed one field
    /// at a time to `set` (entry, column, its bytes; `None`: a value it cannot hold). The
    /// id column follows them ([`Input::ids`]).
    fn stats(&mut self, count: usize, set: &mut SetField<'_>) -> Result<()> {
        let mut buf = vec![0u8; 64 * 1024];
        for column in COLUMNS {
            let width = column.width();
            let mut done = 0;
            while done < count {
                let n = (buf.len() / width).min(count - done);
                let bytes = &mut buf[..n * width];
                self.exact(bytes)?;
                for (k, value) in bytes.chunks_exact(width).enumerate() {
                    set(done + k, column, value)?;
                }
                done += n;
            }
        }
        Ok(())
    }

    /// The id column of `items`, filled in place.
    fn ids<T>(&mut self, items: &mut [T], id: fn(&mut T) -> &mut ContentId) -> Result<()> {
        items.iter_mut().try_for_each(|item| self.array().map(|bytes| *id(item) = ContentId(bytes)))
    }

    /// Reads past `n` bytes.
    fn skip(&mut self, n: u64) -> Result<()> {
        let skipped = io::copy(&mut (&mut self.r).take(n), &mut io::sink()).map_err(|_| malformed())?;
        if skipped != n {
            return Err(malformed());
        }
        Ok(())
    }

    /// How many bytes of the plaintext have been read.
    fn position(&self) -> u64 {
        self.r.get_ref().read - self.r.buffer().len() as u64
    }

    /// The tree ids, then the shape if the layout has one (`with_shape`).
    fn trees_and_shape(&mut self) -> Result<(Vec<ContentId>, Option<Shape>)> {
        let trees = self.count(32)?;
        let tree_ids = (0..trees).map(|_| self.array().map(ContentId)).collect::<Result<Vec<_>>>()?;
        let shape = match self.array::<1>()? {
            [0] => None,
            [1] => Some(Shape { root: ContentId(self.array()?), others: self.array()? }),
            _ => return Err(malformed()),
        };
        Ok((tree_ids, shape))
    }

    /// Whether nothing is left (a read error is not the end).
    fn at_end(&mut self) -> bool {
        matches!(self.r.fill_buf(), Ok([]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stat(mtime_ns: i64) -> Stat {
        Stat { mode: 0o100644, size: 3, mtime_ns, ctime_ns: mtime_ns, device: 1, inode: 9 }
    }

    #[test]
    fn round_trips_and_trusts_only_old_unchanged_files() {
        let mut cache =
            StatCache { taken_at_ns: 10_000_000_000, tree_ids: vec![ContentId([7; 32])], ..Default::default() };
        cache.push(b"old.txt", Cached { stat: stat(1_000_000_000), id: ContentId([1; 32]) });
        cache.push(b"racy.txt", Cached { stat: stat(9_500_000_000), id: ContentId([2; 32]) });
        let back = decode(&cache.encode()).unwrap();
        assert_eq!((back.taken_at_ns, back.tree_ids.clone()), (cache.taken_at_ns, cache.tree_ids.clone()));
        assert_eq!(back.clean_id(b"old.txt", &stat(1_000_000_000)), Some(ContentId([1; 32])));
        assert_eq!(back.clean_id(b"old.txt", &stat(1_000_000_001)), None, "any stat change means read again");
        assert_eq!(back.clean_id(b"racy.txt", &stat(9_500_000_000)), None, "racily clean entries are re-read");
        assert_eq!(back.clean_id(b"new.txt", &stat(1)), None);
    }

    #[test]
    fn shared_prefixes_round_trip_and_any_truncation_is_malformed_not_a_panic() {
        let mut cache = StatCache { taken_at_ns: 5, tree_ids: vec![ContentId([3; 32])], ..Default::default() };
        for (i, p) in ["src/a.rs", "src/ab.rs", "src/b/c.rs", "z", "ünï/ß.txt"].iter().enumerate() {
            cache.push(p.as_bytes(), Cached { stat: stat(i as i64), id: ContentId([i as u8; 32]) });
        }
        cache.shape = Some(Shape { root: ContentId([9; 32]), others: [4; 32] });
        let bytes = cache.encode();
        let back = decode(&bytes).unwrap();
        assert_eq!(back.entries, cache.entries);
        assert_eq!(back.tree_ids, cache.tree_ids);
        assert_eq!(back.shape, cache.shape);
        for cut in MAGIC.len()..bytes.len() {
            assert!(decode(&bytes[..cut]).is_err(), "cut at {cut} accepted");
        }
    }

    #[test]
    fn a_walks_paths_asked_in_order_are_found_where_they_are() {
        let paths = ["a/b", "a/b/c", "a/b.c", "a.c", "b"];
        let cache = StatCache::of_entries(
            paths.iter().map(|p| (p.as_bytes().to_vec(), Cached { stat: stat(1), id: ContentId([1; 32]) })).collect(),
        );
        let back = decode(&cache.encode()).unwrap();
        // A walk's paths, asked in order from where the last was found, are found where
        // they are, and those not cached where they would go.
        let mut hint = 0;
        let walked: [&[u8]; 6] = [b"a/a", b"a/b", b"a/b/d", b"a/b.c", b"a.c", b"c"];
        let found: Vec<_> = walked
            .iter()
            .map(|p| {
                let at = back.entries.find_from(hint, p);
                hint = at.map_or_else(|i| i, |i| i + 1);
                at
            })
            .collect();
        assert_eq!(found, [Err(0), Ok(0), Err(2), Ok(2), Ok(3), Err(5)]);
    }

    #[test]
    fn a_search_from_any_hint_finds_what_a_search_of_the_whole_cache_finds() {
        // Paths in component order with their directories' entries between them.
        let mut paths: Vec<Vec<u8>> = Vec::new();
        for d in ["", "a/", "a/b/", "a.b/", "c/"] {
            for f in ["a", "b", "c.c", "d/e", "z"] {
                paths.push(format!("{d}{f}").into_bytes());
            }
        }
        paths.sort_by(|a, b| component_order(a, b));
        paths.dedup();
        let cache = StatCache::of_entries(
            paths.iter().step_by(2).map(|p| (p.clone(), Cached { stat: stat(1), id: ContentId([1; 32]) })).collect(),
        );
        let n = cache.entries.len();
        for p in &paths {
            let whole = cache.entries.search(0, n, p);
            for hint in 0..=n + 2 {
                assert_eq!(cache.entries.find_from(hint, p), whole, "{} from {hint}", String::from_utf8_lossy(p));
            }
        }
        assert_eq!(Files::default().find_from(3, b"a"), Err(0));
    }

    #[test]
    fn a_cache_of_another_layout_is_not_read_and_one_out_of_order_is_malformed() {
        let mut cache = StatCache { taken_at_ns: 5, tree_ids: vec![ContentId([3; 32])], ..Default::default() };
        cache.push(b"a", Cached { stat: stat(1), id: ContentId([1; 32]) });
        cache.push(b"b", Cached { stat: stat(2), id: ContentId([2; 32]) });
        cache.generation = [7; 16];
        let bytes = cache.encode();
        assert_eq!(decode(&bytes).unwrap().generation, [7; 16]);
        // An unreleased layout (TBS3 to TBS5): nothing is read, the next snapshot reads all.
        for old in [b"TBS3", b"TBS4", b"TBS5"] {
            let mut older = bytes.clone();
            older[..4].copy_from_slice(old);
            assert!(decode(&older).unwrap().entries.is_empty(), "{}", String::from_utf8_lossy(old));
        }
        // Out of order is no layout of turnback's: the same cache with its paths swapped.
        let mut wrong = StatCache { taken_at_ns: 5, tree_ids: vec![ContentId([3; 32])], ..Default::default() };
        wrong.push(b"b", Cached { stat: stat(2), id: ContentId([2; 32]) });
        wrong.push(b"a", Cached { stat: stat(1), id: ContentId([1; 32]) });
        wrong.generation = [7; 16];
        let wrong = decode(&wrong.encode()).unwrap_err();
        assert_eq!(wrong.code, crate::error::ErrorCode::Corrupt, "paths out of order are malformed: {wrong:?}");
    }

    fn whole(paths: &[&str]) -> StatCache {
        let entries = paths
            .iter()
            .enumerate()
            .map(|(i, p)| (p.as_bytes().to_vec(), Cached { stat: stat(i as i64), id: ContentId([i as u8; 32]) }))
            .collect();
        StatCache { taken_at_ns: 10_000_000_000, tree_ids: vec![ContentId([1; 32])], ..StatCache::of_entries(entries) }
    }

    /// A delta as [`seal_delta`] encodes it, decoded.
    fn delta_of(entries: &[(&str, Option<Cached>)], generation: [u8; 16]) -> DecodedDelta {
        let mut out = Vec::new();
        let shape = Shape { root: ContentId([8; 32]), others: [2; 32] };
        let entries: Vec<(&[u8], Option<Cached>)> = entries.iter().map(|(p, c)| (p.as_bytes(), *c)).collect();
        encode_delta(&mut out, generation, 20_000_000_000, &entries, &[ContentId([5; 32])], shape).unwrap();
        for cut in 0..out.len() {
            assert!(decode_delta(&out[..cut]).is_err(), "a delta cut at {cut} is accepted");
        }
        decode_delta(&out).unwrap()
    }

    #[test]
    fn a_delta_laid_over_the_whole_cache_gives_removes_and_joins_entries_in_order() {
        let mut cache = whole(&["a/x", "b", "c/d", "e"]);
        let given = |t: i64| Some(Cached { stat: stat(t), id: ContentId([t as u8; 32]) });
        let delta = delta_of(
            &[("a/w", given(50)), ("a/x", None), ("b", given(60)), ("c/d", None), ("d", given(70)), ("z", None)],
            cache.generation,
        );
        cache.lay(delta).expect("small");
        let order: Vec<&[u8]> = cache.entries.iter().map(|(p, _)| p).collect();
        assert_eq!(order, [&b"a/w"[..], b"b", b"d", b"e"]);
        let given_now: Vec<bool> = (0..4).map(|i| cache.given(i)).collect();
        assert_eq!(given_now, [true, true, true, false]);
        let ids: Vec<ContentId> = (0..4).map(|i| cache.id(i)).collect();
        assert_eq!(ids, [50, 60, 70, 3].map(|b| ContentId([b; 32])), "each id from where its entry came");
        assert_eq!(
            cache.delta.removed,
            [b"a/x".to_vec(), b"c/d".to_vec()],
            "a removal of a path never cached is dropped"
        );
        assert_eq!(cache.shape.map(|s| s.root), Some(ContentId([8; 32])), "the delta's shape");
        assert!(cache.names_tree(&ContentId([5; 32])) && cache.names_tree(&ContentId([1; 32])));
        // An entry the delta gave is trusted from the delta's walk on; the whole cache's
        // from its own: a file modified 1 s before the whole cache's walk is racy there.
        assert_eq!(cache.clean_id(b"e", &stat(3)), Some(ContentId([3; 32])));
        assert_eq!(cache.clean_id(b"d", &stat(70)), Some(ContentId([70; 32])));
        let mut late = whole(&["f"]);
        late.entries.set_stat(0, stat(9_000_000_000)).unwrap();
        assert_eq!(late.clean_id(b"f", &stat(9_000_000_000)), None);
        late.lay(delta_of(&[("f", Some(Cached { stat: stat(9_000_000_000), id: ContentId([4; 32]) }))], [0; 16]))
            .expect("small");
        assert_eq!(late.clean_id(b"f", &stat(9_000_000_000)), Some(ContentId([4; 32])), "settled at the delta's walk");
    }

    #[test]
    fn shared_prefixes_cannot_blow_up_a_small_input() {
        let (len, count) = (100_000usize, 1_000usize);
        let mut b = MAGIC.to_vec();
        b.extend_from_slice(&0i128.to_le_bytes());
        varint::put(&mut b, count as u64);
        varint::put(&mut b, 0);
        varint::put(&mut b, len as u64);
        b.extend(std::iter::repeat_n(b'a', len));
        for i in 1..count {
            varint::put(&mut b, len as u64);
            varint::put(&mut b, 1);
            b.push(i as u8);
        }
        b.extend(std::iter::repeat_n(0u8, 92 * count));
        varint::put(&mut b, 0);
        b.push(0);
        assert!(decode(&b).is_err(), "{} input bytes must not decode into ~100 MB of paths", b.len());
    }

    #[test]
    fn files_keep_each_ones_device_and_a_cache_on_more_devices_than_an_item_counts_does_not_load() {
        // Files on a few devices, interleaved: each reads back with its own.
        let mut cache = StatCache::default();
        for (i, device) in [7u64, u64::MAX, 7, 0, u64::MAX].into_iter().enumerate() {
            let s = Stat { device, ..stat(i as i64) };
            cache.push(format!("f{i}").as_bytes(), Cached { stat: s, id: ContentId([i as u8; 32]) });
        }
        let back = decode(&cache.encode()).unwrap();
        let devices: Vec<u64> = back.entries.iter().map(|(_, s)| s.device).collect();
        assert_eq!(devices, [7, u64::MAX, 7, 0, u64::MAX]);
        assert_eq!(back.entries, cache.entries);
        // One device more than an item's index holds: the cache does not load.
        let many = |devices: u64| {
            let paths: Vec<Vec<u8>> = (0..devices).map(|d| format!("{d:08}").into_bytes()).collect();
            let entries = || {
                paths.iter().enumerate().map(|(d, p)| {
                    (p.as_slice(), Cached { stat: Stat { device: d as u64, ..stat(1) }, id: ContentId([0; 32]) })
                })
            };
            let mut out = Vec::new();
            encode(&mut out, 0, &entries, &[], None, [0; 16]).unwrap();
            decode(&out)
        };
        assert_eq!(many(1 << 16).unwrap().entries.len(), 1 << 16);
        let err = many((1 << 16) + 1).unwrap_err();
        assert_eq!(err.code, ErrorCode::Corrupt, "{err:?}");
    }

    #[test]
    fn the_nth_number_outside_a_set_counts_past_its_members() {
        let outside = |set: &[u32]| -> Vec<usize> { (0..8).map(|n| nth_outside(set, n)).collect() };
        assert_eq!(outside(&[]), [0, 1, 2, 3, 4, 5, 6, 7]);
        assert_eq!(outside(&[0, 1, 5]), [2, 3, 4, 6, 7, 8, 9, 10]);
        assert_eq!(outside(&[3, 4, 6]), [0, 1, 2, 5, 7, 8, 9, 10]);
    }

    #[test]
    fn random_deltas_laid_over_a_whole_cache_give_each_entry_its_stat_id_and_origin() {
        // Whole cache: even-numbered paths; a delta replaces, removes and joins (odd
        // numbers) at random. Each entry after laying must be what a plain map says.
        let mut rng = turnback_fuzz::mutate::Rng::new(0x2545_f491_4f6c_dd1d);
        let mut next = |m: u64| rng.below(m as usize) as u64;
        let path = |n: u64| format!("p{n:05}").into_bytes();
        for round in 0..40 {
            let n = 1 + next(200);
            let mut cache = StatCache { taken_at_ns: 10_000_000_000, ..Default::default() };
            let mut model = std::collections::BTreeMap::new();
            for k in 0..n {
                let c = Cached { stat: stat(k as i64), id: ContentId([k as u8; 32]) };
                cache.push(&path(2 * k), c);
                model.insert(path(2 * k), (c, false));
            }
            let mut entries: Vec<(Vec<u8>, Option<Cached>)> = Vec::new();
            for p in 0..2 * n + 2 {
                let given = Some(Cached { stat: stat(1000 + p as i64), id: ContentId([200 - (p % 100) as u8; 32]) });
                let change = match next(5) {
                    0 => given,
                    1 => None,
                    _ => continue,
                };
                // Removing a path never cached is dropped; anything else changes the map.
                match change {
                    Some(c) => {
                        model.insert(path(p), (c, true));
                    }
                    None => {
                        model.remove(&path(p));
                    }
                }
                entries.push((path(p), change));
            }
            let delta = DecodedDelta {
                generation: [0; 16],
                taken_at_ns: 20_000_000_000,
                entries,
                tree_ids: Vec::new(),
                shape: None,
            };
            cache.lay(delta).unwrap();
            let got: Vec<(Vec<u8>, Cached, bool)> = (0..cache.entries.len())
                .map(|i| {
                    let c = Cached { stat: cache.entries.stat(i), id: cache.id(i) };
                    (cache.entries.path(i).to_vec(), c, cache.given(i))
                })
                .collect();
            let expected: Vec<(Vec<u8>, Cached, bool)> = model.into_iter().map(|(p, (c, g))| (p, c, g)).collect();
            assert!(got == expected, "round {round}: {got:?} != {expected:?}");
        }
    }
}
