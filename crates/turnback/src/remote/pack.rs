//! Remote packs: content objects (file contents, trees, symlink targets) put side by side
//! and sealed as one bucket object, and the index beside each pack that says which ids it
//! holds.
//!
//! Invariants:
//! - A pack is immutable and named by a random id (`p/ID`); its index (`x/ID`) lists the
//!   content ids it holds and is written only after the pack itself, so an index never
//!   names a pack that is not there (a push killed between the two leaves an unindexed
//!   pack, which `gc --remote` removes after the grace period).
//! - A pack's plaintext is its table (count, then per object its keyed content id, class
//!   and length) and the objects' bytes. Reading it checks that the table adds up to the
//!   bytes and that every object's keyed digest is its id: an object comes out of a pack
//!   only verified, or not at all (`corrupt`).

use crate::base::varint;
use crate::error::{Error, Result};
use crate::storage::content::{ContentClass, ContentId};

/// Plaintext bytes after which a pack is cut.
pub(crate) const PACK_LEN: usize = 16 * 1024 * 1024;

/// The bucket name of pack `id`.
pub(crate) fn pack_name(id: &str) -> String {
    format!("p/{id}")
}

/// The bucket name of pack `id`'s index.
pub(crate) fn index_name(id: &str) -> String {
    format!("x/{id}")
}

/// A pack being filled.
#[derive(Debug, Default)]
pub(crate) struct Builder {
    table: Vec<(ContentId, ContentClass, u64)>,
    data: Vec<u8>,
}

impl Builder {
    /// Adds one object.
    pub(crate) fn add(&mut self, id: ContentId, class: ContentClass, bytes: &[u8]) {
        self.table.push((id, class, bytes.len() as u64));
        self.data.extend_from_slice(bytes);
    }

    /// Bytes of content it holds.
    pub(crate) fn data_len(&self) -> usize {
        self.data.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    /// The ids it holds.
    pub(crate) fn ids(&self) -> Vec<ContentId> {
        self.table.iter().map(|(id, _, _)| *id).collect()
    }

    /// Its plaintext.
    pub(crate) fn finish(self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.table.len() * 40 + self.data.len() + 8);
        varint::put(&mut out, self.table.len() as u64);
        for (id, class, len) in &self.table {
            out.extend_from_slice(&id.0);
            out.push(class.code());
            varint::put(&mut out, *len);
        }
        out.extend_from_slice(&self.data);
        out
    }
}

/// The objects of a pack's plaintext, each verified against its keyed id.
///
/// # Errors
/// `corrupt` if the table is malformed or an object's digest is not its id.
pub(crate) fn objects<'a>(
    plain: &'a [u8],
    content_id: &dyn Fn(&[u8]) -> [u8; 32],
) -> Result<Vec<(ContentId, ContentClass, &'a [u8])>> {
    let bad = || Error::corrupt("remote pack", "malformed table");
    let mut rest = plain;
    let count = varint::take(&mut rest).ok_or_else(bad)?;
    let mut table = Vec::new();
    for _ in 0..count {
        let (id, tail) = rest.split_first_chunk::<32>().ok_or_else(bad)?;
        let (&class, tail) = tail.split_first().ok_or_else(bad)?;
        rest = tail;
        let class = ContentClass::from_code(class).ok_or_else(bad)?;
        let len = varint::take(&mut rest).and_then(|l| usize::try_from(l).ok()).ok_or_else(bad)?;
        table.push((ContentId(*id), class, len));
    }
    let mut out = Vec::with_capacity(table.len());
    for (id, class, len) in table {
        let (bytes, tail) = rest.split_at_checked(len).ok_or_else(bad)?;
        rest = tail;
        if content_id(bytes) != id.0 {
            return Err(Error::corrupt("remote pack", format!("object {} does not match its digest", id.to_hex())));
        }
        out.push((id, class, bytes));
    }
    if !rest.is_empty() {
        return Err(bad());
    }
    Ok(out)
}

/// An index's plaintext: the ids, 32 bytes each.
pub(crate) fn encode_index(ids: &[ContentId]) -> Vec<u8> {
    ids.iter().flat_map(|id| id.0).collect()
}

/// The ids an index lists.
///
/// # Errors
/// `corrupt` if its length is not a multiple of 32.
pub(crate) fn decode_index(plain: &[u8]) -> Result<Vec<ContentId>> {
    if !plain.len().is_multiple_of(32) {
        return Err(Error::corrupt("remote pack index", "malformed"));
    }
    Ok(plain.chunks_exact(32).filter_map(ContentId::try_from_slice).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id_of(bytes: &[u8]) -> [u8; 32] {
        let mut id = [0u8; 32];
        for (i, b) in bytes.iter().enumerate() {
            id[i % 32] ^= b.wrapping_add(i as u8);
        }
        id[31] ^= bytes.len() as u8;
        id
    }

    #[test]
    fn a_pack_reads_back_what_went_in_and_refuses_a_swapped_object() {
        let mut b = Builder::default();
        b.add(ContentId(id_of(b"one")), ContentClass::FileContent, b"one");
        b.add(ContentId(id_of(b"")), ContentClass::Tree, b"");
        b.add(ContentId(id_of(b"three")), ContentClass::BinaryBlob, b"three");
        let ids = b.ids();
        let plain = b.finish();
        let objects = objects(&plain, &id_of).unwrap();
        assert_eq!(objects.iter().map(|o| o.0).collect::<Vec<_>>(), ids);
        assert_eq!(objects[2].2, b"three");
        let mut swapped = plain.clone();
        let at = swapped.len() - 1;
        swapped[at] = b'E';
        assert!(super::objects(&swapped, &id_of).is_err());
        assert!(super::objects(&plain[..plain.len() - 1], &id_of).is_err());
        assert_eq!(decode_index(&encode_index(&ids)).unwrap(), ids);
        assert!(decode_index(&[0u8; 33]).is_err());
    }
}
