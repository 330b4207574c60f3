//! The per-session stat cache: what each file looked like when its content was last read.
//!
//! Invariants:
//! - It is stored sealed (paths are secret) and written in the same transaction as the
//!   snapshot it describes. A watched snapshot (see
//!   [`watched`](crate::snapshot)) does not rewrite it, so it may describe an older snapshot
//!   of the session, even one pruned since: every content and tree id it names is therefore
//!   a root of `gc` ([`named_ids`], used by [`live_objects`](crate::snapshot::live_objects)),
//!   and a full walk after watched snapshots measures what it adds against the latest
//!   snapshot's tree, not against an older cache.
//! - A file is taken as unchanged only if every stat field (type and mode, size, mtime,
//!   ctime, device, inode) matches **and** its mtime is older than the moment the cached
//!   walk began by more than [`RACY_MARGIN_NS`]. A file written in the same instant as the
//!   walk (the "racily clean" case of git and jj) could change again without its mtime
//!   moving on a coarse clock, so it is read again. The margin covers file systems that
//!   keep whole seconds.
//! - Its [`Shape`], when it has one, is the root of the tree that its files and the walk's
//!   other entries (symlinks, nested repositories) made, written from the very build that
//!   made it: a walk that finds every file as cached and the same other entries has that
//!   tree again, without building it.
//! - It is derived data: everything in it can be found again by reading the files. A cache
//!   that does not verify (altered, or malformed) is never a reason to stop taking
//!   snapshots: [`StatCache::load_or_drop`] deletes it, says so once, and the snapshot reads
//!   every file in full.

use crate::base::varint;
use crate::error::{Error, ErrorCode, Result};
use crate::fs::walk::{Stat, component_order};
use crate::storage::content::ContentId;
use crate::storage::kv::Txn;
use crate::storage::schema;
use crate::storage::store::Store;

const SCHEMA: u16 = 1;
/// Encoded bytes of one entry's columns: mode, size, mtime, ctime, device, inode, id.
const ENTRY_COLUMNS: usize = 4 + 8 + 16 + 16 + 8 + 8 + 32;
/// Entries in component order (the walk's), then the tree ids and the shape.
const MAGIC: &[u8; 4] = b"TBS5";
/// Without a shape (before 2026-12-02): read, and rewritten at the next snapshot.
const MAGIC_NO_SHAPE: &[u8; 4] = b"TBS4";
/// Entries in byte order (before 2026-12): read, put in component order, rewritten.
const MAGIC_BYTE_ORDER: &[u8; 4] = b"TBS3";
/// How much older than the walk a file's mtime must be to be trusted unread.
pub const RACY_MARGIN_NS: i128 = 2_000_000_000;

/// Whether a file last modified at `stat`'s mtime was settled when the snapshot stamped
/// `taken_at_ns` began: modified more than [`RACY_MARGIN_NS`] before it, so a cached stat
/// can vouch for its content.
pub fn settled(stat: &Stat, taken_at_ns: i128) -> bool {
    i128::from(stat.mtime_ns) + RACY_MARGIN_NS < taken_at_ns
}

/// One cached file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cached {
    /// Its stat when read.
    pub stat: Stat,
    /// Its content id.
    pub id: ContentId,
}

/// The tree a cache's files made, with the walk's other entries as they were then.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// The root of the tree built from the cached files and those entries.
    pub root: ContentId,
    /// The digest of every entry of that walk that is not a file ([`others_digest`]).
    pub others: [u8; 32],
}

/// A session's stat cache.
#[derive(Debug, Default)]
pub struct StatCache {
    /// When the walk that produced it began (ns since epoch).
    pub taken_at_ns: i128,
    /// Each path and what it was, in component order ([`component_order`], the order of a
    /// walk), so that a walk is matched against it in one pass.
    pub entries: Vec<(Vec<u8>, Cached)>,
    /// The directory node ids of the snapshot it describes.
    pub tree_ids: Vec<ContentId>,
    /// The tree its files made, if it was written with one.
    pub shape: Option<Shape>,
    /// Read from an older layout: rewrite it at the next snapshot.
    pub outdated: bool,
}

impl StatCache {
    /// What `path` looked like, if cached.
    pub fn get(&self, path: &[u8]) -> Option<&Cached> {
        let i = self.entries.binary_search_by(|(p, _)| component_order(p, path)).ok()?;
        Some(&self.entries[i].1)
    }

    /// Whether `stat` proves the file cached as `c` unchanged since it was read.
    pub fn clean(&self, c: &Cached, stat: &Stat) -> bool {
        c.stat == *stat && settled(stat, self.taken_at_ns)
    }

    /// The content id of `path` if its stat proves it unchanged since it was read.
    #[cfg(test)]
    fn clean_id(&self, path: &[u8], stat: &Stat) -> Option<ContentId> {
        self.get(path).filter(|c| self.clean(c, stat)).map(|c| c.id)
    }

    /// For each of `paths` (in component order), the index of its entry here, if any: one
    /// merge of the two sorted lists, no hashing.
    pub fn align<'p>(&self, paths: impl Iterator<Item = &'p [u8]>) -> Vec<Option<usize>> {
        let mut next = 0;
        paths
            .map(|path| {
                while next < self.entries.len() && component_order(&self.entries[next].0, path).is_lt() {
                    next += 1;
                }
                (next < self.entries.len() && self.entries[next].0 == path).then_some(next)
            })
            .collect()
    }

    /// Loads the cache of `session` (empty if none).
    ///
    /// # Errors
    /// `corrupt` if it does not verify.
    pub fn load(store: &Store, session: &str) -> Result<Self> {
        match store.kv().get(schema::STATCACHE, session.as_bytes())? {
            Some(v) => decode(&store.open_bytes(schema::STATCACHE, session.as_bytes(), &v)?),
            None => Ok(StatCache::default()),
        }
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
                delete_in(&mut *txn, session)?;
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

    /// Its encoding ([`encode`]).
    #[cfg(test)]
    fn encode(&self) -> Vec<u8> {
        encode(self.taken_at_ns, &|| self.entries.iter().map(|(p, c)| (p.as_slice(), *c)), &self.tree_ids, self.shape)
    }
}

/// The entries of a cache to write, in component order, as often as they are asked for:
/// borrowed from the walk, so a cache is written without copying its paths.
pub(crate) type Entries<'e, I> = dyn Fn() -> I + 'e;

/// The sealed value to store for `session` ([`put_in`]): a cache of `entries` taken at
/// `taken_at_ns`, describing a snapshot of the directory nodes `tree_ids` (whose root
/// and other entries are `shape`, when they are known to go with these entries).
pub(crate) fn seal<'p, I: Iterator<Item = (&'p [u8], Cached)>>(
    store: &Store,
    session: &str,
    taken_at_ns: i128,
    entries: &Entries<'_, I>,
    tree_ids: &[ContentId],
    shape: Option<Shape>,
) -> Result<Vec<u8>> {
    let encoded = encode(taken_at_ns, entries, tree_ids, shape);
    store.seal_bytes_at_level(schema::STATCACHE, session.as_bytes(), SCHEMA, &encoded, 1)
}

/// In component order, then column by column (each path as the length it shares with the
/// previous one plus the rest; then every mode, size, mtime, ctime, device, inode, id), so
/// that similar bytes sit together and compress: about a third of the row layout. Then the
/// tree ids, and the shape (a byte 0, or 1 and its root and digest).
fn encode<'p, I: Iterator<Item = (&'p [u8], Cached)>>(
    taken_at_ns: i128,
    sorted: &Entries<'_, I>,
    tree_ids: &[ContentId],
    shape: Option<Shape>,
) -> Vec<u8> {
    // At most: the header, two varints and the path per entry, the columns, the trees.
    let (count, paths) = sorted().fold((0, 0), |(n, bytes), (p, _)| (n + 1, bytes + p.len() + 2 * 10));
    let mut out = Vec::with_capacity(4 + 16 + 3 * 10 + paths + count * ENTRY_COLUMNS + tree_ids.len() * 32 + 65);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&taken_at_ns.to_le_bytes());
    varint::put(&mut out, count as u64);
    let mut previous: &[u8] = &[];
    for (path, _) in sorted() {
        let shared = path.iter().zip(previous).take_while(|(a, b)| a == b).count();
        varint::put(&mut out, shared as u64);
        varint::put(&mut out, (path.len() - shared) as u64);
        out.extend_from_slice(&path[shared..]);
        previous = path;
    }
    sorted().for_each(|(_, c)| out.extend_from_slice(&c.stat.mode.to_le_bytes()));
    sorted().for_each(|(_, c)| out.extend_from_slice(&c.stat.size.to_le_bytes()));
    // Times are kept as 16 bytes (the layout predates the 8-byte fields in memory).
    sorted().for_each(|(_, c)| out.extend_from_slice(&i128::from(c.stat.mtime_ns).to_le_bytes()));
    sorted().for_each(|(_, c)| out.extend_from_slice(&i128::from(c.stat.ctime_ns).to_le_bytes()));
    sorted().for_each(|(_, c)| out.extend_from_slice(&c.stat.device.to_le_bytes()));
    sorted().for_each(|(_, c)| out.extend_from_slice(&c.stat.inode.to_le_bytes()));
    sorted().for_each(|(_, c)| out.extend_from_slice(&c.id.0));
    varint::put(&mut out, tree_ids.len() as u64);
    for id in tree_ids {
        out.extend_from_slice(&id.0);
    }
    match shape {
        Some(shape) => {
            out.push(1);
            out.extend_from_slice(&shape.root.0);
            out.extend_from_slice(&shape.others);
        }
        None => out.push(0),
    }
    out
}

/// The digest of every entry of `walked` that is not a file — symlinks with their mode and
/// target, nested repositories with their commit — in walk order: what, besides the files,
/// a tree is made of (directories are recorded only through what they hold).
pub(crate) fn others_digest(walked: &crate::fs::walk::Walk) -> [u8; 32] {
    use crate::fs::walk::Kind;
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    for e in &walked.entries {
        let (tag, bytes): (u8, &[u8]) = match &e.kind {
            Kind::File => continue,
            Kind::Symlink(target) => (b'l', target),
            Kind::Gitlink(commit) => (b'g', commit.as_bytes()),
        };
        for part in [&e.path[..], bytes] {
            h.update((part.len() as u64).to_le_bytes());
            h.update(part);
        }
        h.update([tag]);
        h.update(e.stat.mode.to_le_bytes());
    }
    h.finalize().into()
}

/// The content and tree ids every session's stat cache names (a cache that does not
/// verify names nothing: it is dropped before it is ever used). They are a root of `gc`: a
/// watched snapshot does not rewrite the cache, so it may describe a snapshot pruned since,
/// and the next full walk still takes its ids as stored.
pub(crate) fn named_ids(store: &Store) -> Result<(Vec<ContentId>, Vec<ContentId>)> {
    let (mut files, mut trees) = (Vec::new(), Vec::new());
    store.kv().scan(schema::STATCACHE, b"", &mut |k, v| {
        if let Ok(cache) = store.open_bytes(schema::STATCACHE, k, v).and_then(|b| decode(&b)) {
            files.extend(cache.entries.iter().map(|(_, c)| c.id));
            trees.extend(cache.tree_ids);
        }
        Ok(true)
    })?;
    Ok((files, trees))
}

/// Stores the sealed cache `value` of `session` inside `txn`.
pub(crate) fn put_in(txn: &mut dyn Txn, session: &str, value: &[u8]) -> Result<()> {
    txn.put(schema::STATCACHE, session.as_bytes(), value)
}

/// Removes the cache of `session` inside `txn` (the next snapshot reads everything).
pub(crate) fn delete_in(txn: &mut dyn Txn, session: &str) -> Result<()> {
    txn.delete(schema::STATCACHE, session.as_bytes()).map(|_| ())
}

fn decode(bytes: &[u8]) -> Result<StatCache> {
    let bad = || Error::corrupt("stat cache", "malformed");
    let (rest, version) = if let Some(rest) = bytes.strip_prefix(MAGIC) {
        (rest, 5)
    } else if let Some(rest) = bytes.strip_prefix(MAGIC_NO_SHAPE) {
        (rest, 4)
    } else if let Some(rest) = bytes.strip_prefix(MAGIC_BYTE_ORDER) {
        (rest, 3)
    } else {
        // An older format is not an error: the next snapshot reads everything again.
        return Ok(StatCache::default());
    };
    let outdated = version < 5;
    let mut rest = rest;
    let taken_at_ns = i128::from_le_bytes(split(&mut rest, 16).ok_or_else(bad)?.try_into().expect("16"));
    let count = usize::try_from(varint::take(&mut rest).ok_or_else(bad)?).map_err(|_| bad())?;
    // Every entry needs at least its path's 2-byte length and its columns: a count the
    // bytes cannot hold is malformed, not an allocation to attempt.
    if count > rest.len() / (2 + ENTRY_COLUMNS) {
        return Err(bad());
    }
    let mut paths: Vec<Vec<u8>> = Vec::with_capacity(count);
    // Shared prefixes make paths longer than their encoding, but only so much: a real
    // tree's paths fit in a small multiple of it. More is malformed, not an allocation.
    let mut budget = bytes.len().saturating_mul(64).saturating_add(1 << 20);
    for _ in 0..count {
        let shared = usize::try_from(varint::take(&mut rest).ok_or_else(bad)?).map_err(|_| bad())?;
        let len = usize::try_from(varint::take(&mut rest).ok_or_else(bad)?).map_err(|_| bad())?;
        let prefix: &[u8] =
            if shared == 0 { &[] } else { paths.last().and_then(|p| p.get(..shared)).ok_or_else(bad)? };
        let suffix = split(&mut rest, len).ok_or_else(bad)?;
        budget = budget.checked_sub(shared + len).ok_or_else(bad)?;
        let mut path = Vec::with_capacity(shared + len);
        path.extend_from_slice(prefix);
        path.extend_from_slice(suffix);
        paths.push(path);
    }
    let mut column = |width: usize| split(&mut rest, width * count).ok_or_else(bad);
    let (modes, sizes, mtimes, ctimes) = (column(4)?, column(8)?, column(16)?, column(16)?);
    let (devices, inodes, ids) = (column(8)?, column(8)?, column(32)?);
    let mut entries = Vec::with_capacity(count);
    for (i, path) in paths.into_iter().enumerate() {
        let stat = Stat {
            mode: u32::from_le_bytes(nth(modes, i)),
            size: u64::from_le_bytes(nth(sizes, i)),
            mtime_ns: i64::try_from(i128::from_le_bytes(nth(mtimes, i))).map_err(|_| bad())?,
            ctime_ns: i64::try_from(i128::from_le_bytes(nth(ctimes, i))).map_err(|_| bad())?,
            device: u64::from_le_bytes(nth(devices, i)),
            inode: u64::from_le_bytes(nth(inodes, i)),
        };
        entries.push((path, Cached { stat, id: ContentId(nth(ids, i)) }));
    }
    // Written in order by this version; an older one's byte order is sorted once here.
    if version == 3 || !entries.windows(2).all(|w| component_order(&w[0].0, &w[1].0).is_lt()) {
        entries.sort_by(|a, b| component_order(&a.0, &b.0));
        entries.dedup_by(|a, b| a.0 == b.0);
    }
    let trees = usize::try_from(varint::take(&mut rest).ok_or_else(bad)?).map_err(|_| bad())?;
    let tree_ids = split(&mut rest, trees.checked_mul(32).ok_or_else(bad)?).ok_or_else(bad)?;
    let tree_ids = tree_ids.chunks_exact(32).map(|c| ContentId(c.try_into().expect("32"))).collect();
    let shape = match (version, rest) {
        (5, [0]) => None,
        (5, [1, shape @ ..]) if shape.len() == 64 => Some(Shape {
            root: ContentId(shape[..32].try_into().expect("32")),
            others: shape[32..].try_into().expect("32"),
        }),
        (3 | 4, []) => None,
        _ => return Err(bad()),
    };
    Ok(StatCache { taken_at_ns, entries, tree_ids, shape, outdated })
}

/// The first `n` bytes of `rest`, which then starts after them.
fn split<'a>(rest: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
    let (head, tail) = rest.split_at_checked(n)?;
    *rest = tail;
    Some(head)
}

/// The `i`th `N`-byte value of a column (whose length was checked).
fn nth<const N: usize>(column: &[u8], i: usize) -> [u8; N] {
    column[i * N..(i + 1) * N].try_into().expect("column holds count values")
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
        cache.entries.push((b"old.txt".to_vec(), Cached { stat: stat(1_000_000_000), id: ContentId([1; 32]) }));
        cache.entries.push((b"racy.txt".to_vec(), Cached { stat: stat(9_500_000_000), id: ContentId([2; 32]) }));
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
            cache.entries.push((p.as_bytes().to_vec(), Cached { stat: stat(i as i64), id: ContentId([i as u8; 32]) }));
        }
        cache.shape = Some(Shape { root: ContentId([9; 32]), others: [4; 32] });
        let bytes = cache.encode();
        let back = decode(&bytes).unwrap();
        assert_eq!(back.entries, cache.entries);
        assert_eq!(back.tree_ids, cache.tree_ids);
        assert_eq!(back.shape, cache.shape);
        assert!(!back.outdated);
        for cut in MAGIC.len()..bytes.len() {
            assert!(decode(&bytes[..cut]).is_err(), "cut at {cut} accepted");
        }
    }

    #[test]
    fn an_older_cache_in_byte_order_is_read_in_component_order_and_marked_for_rewriting() {
        let paths = ["a.c", "a/b", "a/b.c", "a/b/c", "b"];
        let cache = StatCache {
            entries: paths
                .iter()
                .map(|p| (p.as_bytes().to_vec(), Cached { stat: stat(1), id: ContentId([1; 32]) }))
                .collect(),
            ..Default::default()
        };
        let mut bytes = cache.encode();
        bytes[..4].copy_from_slice(MAGIC_BYTE_ORDER);
        assert_eq!(bytes.pop(), Some(0), "no shape");
        let back = decode(&bytes).unwrap();
        let order: Vec<&[u8]> = back.entries.iter().map(|(p, _)| p.as_slice()).collect();
        assert_eq!(order, [&b"a/b"[..], b"a/b/c", b"a/b.c", b"a.c", b"b"]);
        assert!(back.outdated);
        assert!(!decode(&back.encode()).unwrap().outdated, "rewritten in component order");
        // Aligning a walk's paths finds each one, and none that is not cached.
        let walked: Vec<&[u8]> = vec![b"a/a", b"a/b", b"a/b.c", b"a.c", b"c"];
        assert_eq!(back.align(walked.into_iter()), [None, Some(0), Some(2), Some(3), None]);
        assert_eq!(back.get(b"a/b/c").map(|c| c.id), Some(ContentId([1; 32])));
        assert!(back.get(b"a/b/d").is_none());
    }

    #[test]
    fn a_cache_without_a_shape_is_read_and_marked_for_rewriting() {
        let mut cache = StatCache { taken_at_ns: 5, tree_ids: vec![ContentId([3; 32])], ..Default::default() };
        cache.entries.push((b"a".to_vec(), Cached { stat: stat(1), id: ContentId([1; 32]) }));
        let mut bytes = cache.encode();
        bytes[..4].copy_from_slice(MAGIC_NO_SHAPE);
        assert_eq!(bytes.pop(), Some(0));
        let back = decode(&bytes).unwrap();
        assert_eq!((back.entries, back.shape, back.outdated), (cache.entries, None, true));
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
}
