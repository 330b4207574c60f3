//! A whole stat cache stored as numbered pieces: its plaintext is cut every
//! [`PIECE_BYTES`] and each piece sealed as a record of its own, stored ahead of the
//! commit that names it ([`write`]) and read back one piece at a time, in order ([`read`])
//! or at any offset ([`Cursor`]: the piece an offset lies in is computed). None ever holds
//! more than one piece of its sealed bytes (a million files' cache is about 40 MB sealed;
//! held whole, it was the largest allocation of a first snapshot and of every load).
//!
//! Invariants:
//! - A piece's key is its session, a `0` byte (no session id holds one), the generation of
//!   the cache it belongs to and its number (big-endian), and the key is bound into its
//!   seal: a piece moved to another number, generation or session does not open.
//! - Pieces are stored in transactions of their own, a few MiB each (so that other writers
//!   of the store do not wait for a whole cache), before the row that names them
//!   ([`Manifest`], in the stat cache's own row) commits; until then no snapshot reads
//!   them. Pieces no manifest names (a snapshot that failed or was cancelled after storing
//!   them, a cache deleted by a caller without the session's lock) go when the session's
//!   next whole cache is stored, when its cache is dropped or the session deleted (under its
//!   lock), or at `gc` ([`sweep`]).
//! - Every piece but the last holds exactly [`PIECE_BYTES`], the last the rest: a manifest
//!   whose number of pieces does not go with its size that way, or that counts more than a
//!   record may be, is refused before anything is read, and a piece of any other length is
//!   `corrupt`. A reading gives exactly the bytes the manifest counts, from exactly its
//!   pieces, or fails: a piece missing or altered is `corrupt` too.

use std::io::{self, Read, Write};

use crate::error::{Error, ErrorCode, Result};
use crate::storage::kv::Txn;
use crate::storage::schema;
use crate::storage::store::{RECORD_MAX, Store};

/// Plaintext bytes per piece (the last one may hold fewer): small in tests, so that a
/// test's cache spans several. Part of the stored layout: a build with another value
/// finds every stored cache's pieces of the wrong length, drops it, and reads every file
/// once.
pub(crate) const PIECE_BYTES: usize = if cfg!(test) { 4096 } else { 1 << 20 };
/// zstd level of each piece (the stat cache's, as a whole cache was sealed).
const LEVEL: i32 = 1;
const SCHEMA: u16 = 1;

/// Which pieces make a whole cache: its generation, how many, and its plaintext's size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Manifest {
    pub generation: [u8; 16],
    pub pieces: u32,
    pub size: u64,
}

/// Bytes of a [`Manifest`].
pub(crate) const MANIFEST_BYTES: usize = 16 + 4 + 8;

impl Manifest {
    pub(crate) fn to_bytes(self) -> [u8; MANIFEST_BYTES] {
        let mut out = [0u8; MANIFEST_BYTES];
        out[..16].copy_from_slice(&self.generation);
        out[16..20].copy_from_slice(&self.pieces.to_le_bytes());
        out[20..].copy_from_slice(&self.size.to_le_bytes());
        out
    }

    /// The manifest `bytes` hold, if its number of pieces goes with its size (each
    /// [`PIECE_BYTES`] but the last) and its size is at most a record's (its size bounds
    /// what a reader allocates, so a claim past what its pieces hold is refused unread).
    pub(crate) fn from_bytes(bytes: &[u8; MANIFEST_BYTES]) -> Option<Self> {
        let manifest = Manifest {
            generation: bytes[..16].try_into().expect("16 bytes"),
            pieces: u32::from_le_bytes(bytes[16..20].try_into().expect("4 bytes")),
            size: u64::from_le_bytes(bytes[20..].try_into().expect("8 bytes")),
        };
        let holds = u64::from(manifest.pieces) == manifest.size.div_ceil(PIECE_BYTES as u64)
            && manifest.size <= RECORD_MAX as u64;
        holds.then_some(manifest)
    }

    /// Bytes of piece `n` (of fewer than `pieces`).
    fn piece_len(&self, n: u32) -> usize {
        (self.size - u64::from(n) * PIECE_BYTES as u64).min(PIECE_BYTES as u64) as usize
    }
}

/// Every piece key of `session` starts with this.
fn prefix(session: &str) -> Vec<u8> {
    let mut key = session.as_bytes().to_vec();
    key.push(0);
    key
}

/// The key of piece `n` of `session`'s cache of `generation`.
pub(crate) fn key(session: &str, generation: &[u8; 16], n: u32) -> Vec<u8> {
    let mut key = prefix(session);
    key.extend_from_slice(generation);
    key.extend_from_slice(&n.to_be_bytes());
    key
}

/// Stores what `encode` writes as the pieces of `session`'s cache of `generation`, each
/// sealed as it fills; the manifest of what was stored.
///
/// # Errors
/// The store's, or `encode`'s.
pub(crate) fn write(
    store: &Store,
    session: &str,
    generation: [u8; 16],
    encode: &mut dyn FnMut(&mut dyn Write) -> io::Result<()>,
) -> Result<Manifest> {
    let mut writer = Writer {
        store,
        txn: None,
        session,
        generation,
        piece: Vec::with_capacity(PIECE_BYTES),
        pieces: 0,
        size: 0,
        failed: None,
    };
    let written = {
        let mut buffered = io::BufWriter::with_capacity(64 * 1024, &mut writer);
        encode(&mut buffered).and_then(|()| buffered.flush())
    };
    if let Err(e) = written {
        return Err(writer.failed.take().unwrap_or_else(|| Error::new(ErrorCode::Io, format!("stat cache: {e}"))));
    }
    if !writer.piece.is_empty() {
        writer.store_piece()?;
    }
    if let Some(txn) = writer.txn.take() {
        txn.commit()?;
    }
    Ok(Manifest { generation, pieces: writer.pieces, size: writer.size })
}

/// Pieces stored per transaction.
const PIECES_PER_COMMIT: u32 = 8;

/// What [`write`] writes through.
struct Writer<'a> {
    store: &'a Store,
    txn: Option<Box<dyn Txn + 'a>>,
    session: &'a str,
    generation: [u8; 16],
    piece: Vec<u8>,
    pieces: u32,
    size: u64,
    /// The store's error, if one stopped the writing (an `io::Error` carries only text).
    failed: Option<Error>,
}

impl Writer<'_> {
    fn store_piece(&mut self) -> Result<()> {
        let key = key(self.session, &self.generation, self.pieces);
        let sealed = self.store.seal_bytes_at_level(schema::STATCACHE_PIECES, &key, SCHEMA, &self.piece, LEVEL)?;
        let txn = match &mut self.txn {
            Some(txn) => txn,
            None => self.txn.insert(self.store.kv().begin()?),
        };
        txn.put(schema::STATCACHE_PIECES, &key, &sealed)?;
        self.pieces = self.pieces.checked_add(1).ok_or_else(|| Error::invalid("a stat cache of 2^32 pieces"))?;
        self.size += self.piece.len() as u64;
        self.piece.clear();
        if self.pieces.is_multiple_of(PIECES_PER_COMMIT)
            && let Some(txn) = self.txn.take()
        {
            txn.commit()?;
        }
        Ok(())
    }
}

impl Write for Writer<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = buf.len().min(PIECE_BYTES - self.piece.len());
        self.piece.extend_from_slice(&buf[..n]);
        if self.piece.len() == PIECE_BYTES
            && let Err(e) = self.store_piece()
        {
            return Err(stash(&mut self.failed, e));
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// What `decode` makes of the plaintext of the pieces `manifest` names, read one piece at a
/// time.
///
/// # Errors
/// `decode`'s; but if reading a piece failed (the store's error, or the piece's
/// corruption), that error, which says more than the decoder's "malformed".
pub(crate) fn read<T>(
    store: &Store,
    session: &str,
    manifest: Manifest,
    decode: impl FnOnce(&mut dyn Read) -> Result<T>,
) -> Result<T> {
    let pieces = Pieces { store, session, manifest };
    let mut reader = Reader { pieces, next: 0, piece: Vec::new(), at: 0, failed: None };
    // Each piece is read once: the store need not keep its pages.
    store.kv().reading_once(true);
    let decoded = decode(&mut reader);
    store.kv().reading_once(false);
    match (decoded, reader.failed) {
        (Err(_), Some(e)) => Err(e),
        (decoded, _) => decoded,
    }
}

/// The pieces a manifest names.
struct Pieces<'a> {
    store: &'a Store,
    session: &'a str,
    manifest: Manifest,
}

impl Pieces<'_> {
    /// Piece `n` (of fewer than the manifest's), opened: `corrupt` if it is missing, does
    /// not open, or is not of the length it was written with.
    fn open(&self, n: u32) -> Result<Vec<u8>> {
        let key = key(self.session, &self.manifest.generation, n);
        let missing = || Error::corrupt("stat cache", format!("piece {n} is missing"));
        let sealed = self.store.kv().get(schema::STATCACHE_PIECES, &key)?.ok_or_else(missing)?;
        let plain = self.store.open_bytes(schema::STATCACHE_PIECES, &key, &sealed)?;
        if plain.len() != self.manifest.piece_len(n) {
            return Err(Error::corrupt("stat cache", format!("piece {n} has {} bytes, not as written", plain.len())));
        }
        Ok(plain)
    }
}

/// What [`read`] reads through: the pieces in order, each as long as the manifest says, so
/// they hold exactly the bytes it counts.
struct Reader<'a> {
    pieces: Pieces<'a>,
    next: u32,
    piece: Vec<u8>,
    at: usize,
    /// The error that stopped reading: the store's, or a piece's corruption.
    failed: Option<Error>,
}

impl Read for Reader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.at == self.piece.len() && self.next < self.pieces.manifest.pieces {
            match self.pieces.open(self.next) {
                Ok(piece) => self.piece = piece,
                Err(e) => return Err(stash(&mut self.failed, e)),
            }
            self.at = 0;
            self.next += 1;
        }
        let n = buf.len().min(self.piece.len() - self.at);
        buf[..n].copy_from_slice(&self.piece[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

/// Reads bytes at any offset of the plaintext a manifest names, holding the last piece it
/// opened: every piece is [`PIECE_BYTES`] long but the last, so the piece an offset lies
/// in is computed, not searched for. A piece that does not open, or of another length, is
/// `corrupt`.
pub(crate) struct Cursor<'a> {
    pieces: Pieces<'a>,
    /// The piece last opened, and its number.
    held: Option<(u32, Vec<u8>)>,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(store: &'a Store, session: &'a str, manifest: Manifest) -> Self {
        Cursor { pieces: Pieces { store, session, manifest }, held: None }
    }

    /// Fills `out` with the plaintext from `offset` on.
    ///
    /// # Errors
    /// The store's; `corrupt` past the plaintext's end or for a piece not as written.
    pub(crate) fn read_at(&mut self, offset: u64, out: &mut [u8]) -> Result<()> {
        if offset.checked_add(out.len() as u64).is_none_or(|end| end > self.pieces.manifest.size) {
            return Err(Error::corrupt("stat cache", "a read past the end of its pieces"));
        }
        let mut done = 0;
        while done < out.len() {
            let at = offset + done as u64;
            // Below the manifest's number of pieces, a `u32`: `at` is below its size.
            let n = (at / PIECE_BYTES as u64) as u32;
            let piece = match &mut self.held {
                Some((held, piece)) if *held == n => piece,
                held => {
                    #[cfg(test)]
                    OPENED_AT.with(|opened| opened.set(opened.get() + 1));
                    &mut held.insert((n, self.pieces.open(n)?)).1
                }
            };
            let within = (at % PIECE_BYTES as u64) as usize;
            let take = (out.len() - done).min(piece.len() - within);
            out[done..done + take].copy_from_slice(&piece[within..within + take]);
            done += take;
        }
        Ok(())
    }
}

#[cfg(test)]
thread_local! {
    /// How many pieces this thread opened to read at an offset (a test's proof of what a
    /// snapshot asked).
    pub(crate) static OPENED_AT: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Keeps `e` in `failed` for whoever reads or writes through the `io` traits (an
/// `io::Error` carries only its text) and returns it as one.
fn stash(failed: &mut Option<Error>, e: Error) -> io::Error {
    let text = e.message.clone();
    *failed = Some(e);
    io::Error::other(text)
}

/// The generation in piece key `key` of a session whose key prefix is `prefix` bytes long.
fn generation_in(key: &[u8], prefix: usize) -> Option<&[u8]> {
    key.get(prefix..prefix + 16)
}

/// Deletes every piece of `session` inside `txn` but those of generation `keep`.
pub(crate) fn delete_in(txn: &mut dyn Txn, session: &str, keep: Option<&[u8; 16]>) -> Result<()> {
    let prefix = prefix(session);
    for key in txn.keys(schema::STATCACHE_PIECES, &prefix)? {
        if keep.is_none_or(|g| generation_in(&key, prefix.len()) != Some(g.as_slice())) {
            txn.delete(schema::STATCACHE_PIECES, &key)?;
        }
    }
    Ok(())
}

/// A session's whole-cache generation, read in the transaction given.
pub(crate) type GenerationOf<'a> = dyn Fn(&mut dyn Txn, &str) -> Result<Option<[u8; 16]>> + 'a;

/// Deletes, inside `txn`, every piece that no session's manifest names
/// (`generation_of` a session: its whole cache's generation, read in `txn`). The caller
/// holds what keeps snapshots from writing pieces meanwhile (the objects lock,
/// exclusively).
pub(crate) fn sweep(txn: &mut dyn Txn, generation_of: &GenerationOf<'_>) -> Result<()> {
    let keys = txn.keys(schema::STATCACHE_PIECES, b"")?;
    let (mut session, mut named) = (None::<Vec<u8>>, None);
    for key in keys {
        let zero = key.iter().position(|b| *b == 0).unwrap_or(key.len());
        if session.as_deref() != Some(&key[..zero]) {
            named = match std::str::from_utf8(&key[..zero]) {
                Ok(s) => generation_of(txn, s)?,
                Err(_) => None,
            };
            session = Some(key[..zero].to_vec());
        }
        if named.is_none_or(|g| generation_in(&key, zero + 1) != Some(g.as_slice())) {
            txn.delete(schema::STATCACHE_PIECES, &key)?;
        }
    }
    Ok(())
}
