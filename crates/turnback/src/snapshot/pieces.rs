//! A whole stat cache stored as numbered pieces: its plaintext is cut every
//! [`PIECE_BYTES`] and each piece sealed as a record of its own, written ahead of the
//! commit that names it. Neither writing nor reading ever holds more than one piece (a
//! million files' cache is about 40 MB sealed; held whole, it was the largest allocation of
//! a first snapshot and of every load).
//!
//! Invariants:
//! - A piece's key is its session, a `0` byte (no session id holds one), the generation of
//!   the cache it belongs to and its number (big-endian), and the key is bound into its
//!   seal: a piece moved to another number, generation or session does not open.
//! - Pieces are written in their own transaction before the record that names them
//!   ([`Manifest`], in the stat cache's own row) commits; until then nothing reads them.
//!   Pieces no manifest names (a snapshot that failed or was cancelled after writing them,
//!   a cache deleted by a caller without the session's lock) go when the session's next
//!   whole cache is stored, when its cache is dropped or the session deleted (under its
//!   lock), or at `gc` ([`sweep`]).
//! - A reader gives exactly the bytes the manifest counts, from exactly its pieces, or
//!   fails: a piece missing, altered or of another size is `corrupt`.

use std::io::{self, Read, Write};

use crate::error::{Error, Result};
use crate::storage::kv::Txn;
use crate::storage::schema;
use crate::storage::store::Store;

/// Plaintext bytes per piece written (the last one may hold fewer): small in tests, so
/// that a test's cache spans several.
pub(crate) const PIECE_BYTES: usize = if cfg!(test) { 4096 } else { PIECE_MAX };
/// The most plaintext bytes a piece may hold when read.
const PIECE_MAX: usize = 1 << 20;
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

impl Manifest {
    /// Whether its pieces can hold its size: each holds at least a byte and at most
    /// [`PIECE_MAX`]. (Its size bounds what a reader allocates, so one that claims more
    /// than its pieces could hold is refused before anything is read.)
    pub(crate) fn holds(&self) -> bool {
        u64::from(self.pieces) <= self.size && self.size <= u64::from(self.pieces) * PIECE_MAX as u64
    }
}

/// Every piece key of `session` starts with this.
fn prefix(session: &str) -> Vec<u8> {
    let mut key = session.as_bytes().to_vec();
    key.push(0);
    key
}

fn key(session: &str, generation: &[u8; 16], n: u32) -> Vec<u8> {
    let mut key = prefix(session);
    key.extend_from_slice(generation);
    key.extend_from_slice(&n.to_be_bytes());
    key
}

/// Seals what is written to it as the pieces of `session`'s cache of `generation`, each
/// stored in `txn` as it fills.
pub(crate) struct Writer<'a> {
    store: &'a Store,
    txn: &'a mut dyn Txn,
    session: &'a str,
    generation: [u8; 16],
    piece: Vec<u8>,
    pieces: u32,
    size: u64,
    /// The store's error, if one stopped the writing (io errors carry only text).
    failed: Option<Error>,
}

impl<'a> Writer<'a> {
    pub(crate) fn new(store: &'a Store, txn: &'a mut dyn Txn, session: &'a str, generation: [u8; 16]) -> Self {
        let piece = Vec::with_capacity(PIECE_BYTES);
        Writer { store, txn, session, generation, piece, pieces: 0, size: 0, failed: None }
    }

    fn store_piece(&mut self) -> Result<()> {
        let key = key(self.session, &self.generation, self.pieces);
        let sealed = self.store.seal_bytes_at_level(schema::STATCACHE_PIECES, &key, SCHEMA, &self.piece, LEVEL)?;
        self.txn.put(schema::STATCACHE_PIECES, &key, &sealed)?;
        self.pieces = self.pieces.checked_add(1).ok_or_else(|| Error::invalid("a stat cache of 2^32 pieces"))?;
        self.size += self.piece.len() as u64;
        self.piece.clear();
        Ok(())
    }

    /// Stores the last piece; the manifest of what was written.
    ///
    /// # Errors
    /// The store's.
    pub(crate) fn finish(mut self) -> Result<Manifest> {
        if !self.piece.is_empty() {
            self.store_piece()?;
        }
        Ok(Manifest { generation: self.generation, pieces: self.pieces, size: self.size })
    }

    /// The store's error behind `e`, a write error of this writer, if it had one.
    pub(crate) fn error(&mut self, e: io::Error) -> Error {
        self.failed.take().unwrap_or_else(|| Error::new(crate::error::ErrorCode::Io, format!("stat cache: {e}")))
    }
}

impl Write for Writer<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = buf.len().min(PIECE_BYTES - self.piece.len());
        self.piece.extend_from_slice(&buf[..n]);
        if self.piece.len() == PIECE_BYTES
            && let Err(e) = self.store_piece()
        {
            let text = e.message.clone();
            self.failed = Some(e);
            return Err(io::Error::other(text));
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The plaintext of the pieces `manifest` names, one piece in memory at a time.
pub(crate) struct Reader<'a> {
    store: &'a Store,
    session: &'a str,
    manifest: Manifest,
    next: u32,
    piece: Vec<u8>,
    at: usize,
    read: u64,
    /// The store's error, if reading stopped on one that is not corruption.
    pub(crate) failed: Option<Error>,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(store: &'a Store, session: &'a str, manifest: Manifest) -> Self {
        Reader { store, session, manifest, next: 0, piece: Vec::new(), at: 0, read: 0, failed: None }
    }

    /// Piece `n`, opened.
    fn piece(&self, n: u32) -> Result<Vec<u8>> {
        let key = key(self.session, &self.manifest.generation, n);
        let missing = || Error::corrupt("stat cache", format!("piece {n} is missing"));
        let sealed = self.store.kv().get(schema::STATCACHE_PIECES, &key)?.ok_or_else(missing)?;
        let plain = self.store.open_bytes(schema::STATCACHE_PIECES, &key, &sealed)?;
        if plain.is_empty() || plain.len() > PIECE_MAX {
            return Err(Error::corrupt("stat cache", format!("piece {n} has {} bytes", plain.len())));
        }
        Ok(plain)
    }

    fn fill(&mut self) -> Result<()> {
        while self.at == self.piece.len() && self.next < self.manifest.pieces {
            self.piece = self.piece(self.next)?;
            self.at = 0;
            self.next += 1;
            self.read += self.piece.len() as u64;
            if self.read > self.manifest.size {
                return Err(Error::corrupt("stat cache", "its pieces hold more than its manifest counts"));
            }
        }
        if self.at == self.piece.len() && self.read != self.manifest.size {
            return Err(Error::corrupt("stat cache", "its pieces hold less than its manifest counts"));
        }
        Ok(())
    }
}

impl Read for Reader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if let Err(e) = self.fill() {
            let text = e.message.clone();
            self.failed = Some(e);
            return Err(io::Error::other(text));
        }
        let n = buf.len().min(self.piece.len() - self.at);
        buf[..n].copy_from_slice(&self.piece[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

/// Deletes every piece of `session` inside `txn` but those of generation `keep`.
pub(crate) fn delete_in(txn: &mut dyn Txn, session: &str, keep: Option<&[u8; 16]>) -> Result<()> {
    let prefix = prefix(session);
    for key in txn.keys(schema::STATCACHE_PIECES, &prefix)? {
        let generation = key.get(prefix.len()..prefix.len() + 16);
        if keep.is_none_or(|g| generation != Some(g.as_slice())) {
            txn.delete(schema::STATCACHE_PIECES, &key)?;
        }
    }
    Ok(())
}

/// A session's whole-cache generation, read in the transaction given.
pub(crate) type GenerationOf<'a> = dyn Fn(&mut dyn Txn, &str) -> Result<Option<[u8; 16]>> + 'a;

/// Deletes, inside `txn`, every piece that no session's manifest names
/// (`generation_of` a session: its whole cache's generation, read in `txn`). Returns how
/// many went. The caller holds what keeps snapshots from writing pieces meanwhile (the
/// objects lock, exclusively).
pub(crate) fn sweep(txn: &mut dyn Txn, generation_of: &GenerationOf<'_>) -> Result<u64> {
    let keys = txn.keys(schema::STATCACHE_PIECES, b"")?;
    let (mut gone, mut session, mut named) = (0, None::<Vec<u8>>, None);
    for key in keys {
        let zero = key.iter().position(|b| *b == 0).unwrap_or(key.len());
        if session.as_deref() != Some(&key[..zero]) {
            named = match std::str::from_utf8(&key[..zero]) {
                Ok(s) => generation_of(txn, s)?,
                Err(_) => None,
            };
            session = Some(key[..zero].to_vec());
        }
        if named.is_none_or(|g| key.get(zero + 1..zero + 17) != Some(g.as_slice())) {
            txn.delete(schema::STATCACHE_PIECES, &key)?;
            gone += 1;
        }
    }
    Ok(gone)
}
