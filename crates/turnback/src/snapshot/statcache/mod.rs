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
//!
//! Its parts: [`files`] holds the entries packed, [`codec`] turns a cache into bytes and
//! back, [`rows`] keeps it in the store.

mod codec;
mod files;
mod rows;
#[cfg(test)]
mod tests;

#[cfg(test)]
use codec::encode;
use codec::{DecodedDelta, decode_delta, malformed};
pub(crate) use files::Files;
use files::TOO_LONG;
pub(crate) use rows::{
    Entries, Write, delete_all_in, delete_in, failing_to_load, named_ids, put_in, seal_delta, store_whole, sweep_pieces,
};
use rows::{IdsIn, open_whole};

use crate::error::{Error, ErrorCode, Result};
use crate::fs::walk::{Stat, component_order};
use crate::snapshot::pieces;
use crate::storage::content::ContentId;
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
