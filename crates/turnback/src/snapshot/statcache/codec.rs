//! The stat cache's bytes: the whole cache's encoding (paths, then each stat column, then
//! the ids, tree ids, shape and generation) and the delta's, and their decoding.
//!
//! Invariants: decoding reads only what the input holds (a count larger than the bytes
//! left is malformed, never an allocation), and anything malformed is `corrupt`, never a
//! panic; what decodes is in component order.

use std::io::{self, BufRead, Read};

use super::files::{COLUMNS, Column, Files, TOO_LONG};
use super::{Cached, DELTA_MAGIC, ENTRY_COLUMNS, Entries, ID_BYTES, MAGIC, Shape, StatCache, WholeIds};
use crate::base::varint;
use crate::error::{Error, Result};
use crate::fs::walk::{Stat, component_order};
use crate::snapshot::pieces;
use crate::storage::content::ContentId;

pub(super) fn encode_delta(
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
pub(super) fn encode<'p, I: Iterator<Item = (&'p [u8], Cached)>>(
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

pub(super) fn put_varint(out: &mut dyn io::Write, v: u64) -> io::Result<()> {
    let mut buf = Vec::with_capacity(10);
    varint::put(&mut buf, v);
    out.write_all(&buf)
}

/// Each path as the length it shares with the previous one, the length of the rest, the
/// rest.
pub(super) fn put_paths<'p>(out: &mut dyn io::Write, paths: impl Iterator<Item = &'p [u8]>) -> io::Result<()> {
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

/// The stat columns, then the ids.
pub(super) fn put_columns<I: Iterator<Item = Cached>>(
    out: &mut dyn io::Write,
    cached: &dyn Fn() -> I,
) -> io::Result<()> {
    COLUMNS.iter().try_for_each(|column| cached().try_for_each(|c| column.put(out, &c.stat)))?;
    cached().try_for_each(|c| out.write_all(&c.id.0))
}

pub(super) fn put_trees_and_shape(
    out: &mut dyn io::Write,
    tree_ids: &[ContentId],
    shape: Option<Shape>,
) -> io::Result<()> {
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

#[cfg(test)]
pub(super) fn decode(bytes: &[u8]) -> Result<StatCache> {
    decode_from(bytes, Some(bytes.len() as u64), None)
}

/// Decodes a whole cache from `plain` as it is read (the decompressed plaintext is never
/// held whole); `size`, the plaintext's size if known, bounds what is allocated for it.
/// With `left` (the session and manifest of the pieces `plain` is read from), the content
/// ids are read past and left in the pieces ([`WholeIds::InPieces`]).
pub(super) fn decode_from(
    plain: impl Read,
    size: Option<u64>,
    left: Option<(&str, pieces::Manifest)>,
) -> Result<StatCache> {
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
pub(super) const BLANK: Cached =
    Cached { stat: Stat { mode: 0, size: 0, mtime_ns: 0, ctime_ns: 0, device: 0, inode: 0 }, id: ContentId([0; 32]) };

/// A delta as stored.
pub(super) struct DecodedDelta {
    pub(super) generation: [u8; 16],
    pub(super) taken_at_ns: i128,
    pub(super) entries: Vec<(Vec<u8>, Option<Cached>)>,
    pub(super) tree_ids: Vec<ContentId>,
    pub(super) shape: Option<Shape>,
}

pub(super) fn decode_delta(bytes: &[u8]) -> Result<DecodedDelta> {
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
pub(super) fn malformed() -> Error {
    Error::corrupt("stat cache", "malformed")
}

/// Sets a stat field of an entry from its encoding ([`Input::stats`]).
pub(super) type SetField<'a> = dyn FnMut(usize, Column, &[u8]) -> Result<()> + 'a;

/// A reader that counts what it gave.
pub(super) struct Counted<R> {
    pub(super) r: R,
    pub(super) read: u64,
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
pub(super) struct Input<R: Read> {
    pub(super) r: std::io::BufReader<Counted<R>>,
    /// The plaintext's size if known, else the most a record may be.
    pub(super) size: u64,
}

impl<R: Read> Input<R> {
    pub(super) fn new(r: R, size: Option<u64>) -> Self {
        let most = crate::storage::store::RECORD_MAX as u64;
        let r = std::io::BufReader::with_capacity(64 * 1024, Counted { r, read: 0 });
        Input { r, size: size.unwrap_or(most).min(most) }
    }

    pub(super) fn exact(&mut self, out: &mut [u8]) -> Result<()> {
        self.r.read_exact(out).map_err(|_| malformed())
    }

    pub(super) fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        let mut out = [0u8; N];
        self.exact(&mut out)?;
        Ok(out)
    }

    pub(super) fn varint(&mut self) -> Result<usize> {
        varint::read(&mut self.r).and_then(|v| usize::try_from(v).ok()).ok_or_else(malformed)
    }

    /// A count of items of at least `least` bytes each: more than the plaintext can hold is
    /// malformed, not an allocation to attempt.
    pub(super) fn count(&mut self, least: usize) -> Result<usize> {
        let count = self.varint()?;
        if count as u64 > self.size / least as u64 {
            return Err(malformed());
        }
        Ok(count)
    }

    /// `count` paths as [`put_paths`] wrote them, each handed to `push` (whose error stops
    /// the reading).
    pub(super) fn paths(&mut self, count: usize, push: &mut dyn FnMut(&[u8]) -> Result<()>) -> Result<()> {
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
    pub(super) fn stats(&mut self, count: usize, set: &mut SetField<'_>) -> Result<()> {
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
    pub(super) fn ids<T>(&mut self, items: &mut [T], id: fn(&mut T) -> &mut ContentId) -> Result<()> {
        items.iter_mut().try_for_each(|item| self.array().map(|bytes| *id(item) = ContentId(bytes)))
    }

    /// Reads past `n` bytes.
    pub(super) fn skip(&mut self, n: u64) -> Result<()> {
        let skipped = io::copy(&mut (&mut self.r).take(n), &mut io::sink()).map_err(|_| malformed())?;
        if skipped != n {
            return Err(malformed());
        }
        Ok(())
    }

    /// How many bytes of the plaintext have been read.
    pub(super) fn position(&self) -> u64 {
        self.r.get_ref().read - self.r.buffer().len() as u64
    }

    /// The tree ids, then the shape if the layout has one (`with_shape`).
    pub(super) fn trees_and_shape(&mut self) -> Result<(Vec<ContentId>, Option<Shape>)> {
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
    pub(super) fn at_end(&mut self) -> bool {
        matches!(self.r.fill_buf(), Ok([]))
    }
}
