//! How a stat cache is kept in the store: a whole cache's pieces and the row that names
//! them, a delta's row, and what `gc`, `doctor` and session deletion ask of them.
//!
//! Invariants: a whole cache's pieces are written before the transaction that writes its
//! row; a row names the generation of the pieces it belongs to, and a delta the
//! generation of the whole cache it applies to; pieces no row names are swept.

use std::io;

use super::codec::{decode_delta, decode_from, encode, encode_delta, malformed};
use super::{Cached, ENTRY_COLUMNS, PIECES_MAGIC, SCHEMA, Shape, StatCache, WholeIds};
use crate::error::{Error, ErrorCode, Result};
use crate::snapshot::pieces;
use crate::storage::content::ContentId;
use crate::storage::kv::Txn;
use crate::storage::schema;
use crate::storage::store::Store;

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
pub(super) fn open_row(store: &Store, session: &str, value: Vec<u8>) -> Result<Option<pieces::Manifest>> {
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
pub(super) fn open_whole(store: &Store, session: &str, value: Vec<u8>, ids: IdsIn) -> Result<StatCache> {
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
pub(super) enum IdsIn {
    Memory,
    Pieces,
}

/// The generation of the pieces the whole cache of `session` names, read in `txn`; `None`
/// if it names none (no cache, a row of another layout, or a row that does not verify).
///
/// # Errors
/// The store's other than a row's corruption (then no piece of the session is swept).
pub(super) fn named_generation(store: &Store, txn: &mut dyn Txn, session: &str) -> Result<Option<[u8; 16]>> {
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
pub(super) fn cached_sessions(store: &Store) -> Result<Vec<String>> {
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
