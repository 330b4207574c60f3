//! Content-addressed, encrypted objects: the bytes behind artifacts and snapshots.
//!
//! An object is stored on its own (artifacts, snapshot trees, symlink targets) or packed
//! with others in shared blocks ([`pack`](crate::storage::pack): snapshot file content); `get`,
//! `exists` and `header` look in both, so callers never care which.
//!
//! Invariants:
//! - An object's key is its keyed content id: HMAC-SHA-256 of the plaintext under a key
//!   derived from the master key. Equal content is stored once; the id reveals nothing to
//!   anyone without the key.
//! - The stored value is a small plain header (format, key version, schema, content class,
//!   plaintext size) followed by the sealed bytes, whose associated data binds the id, the
//!   class, the schema and the key version: changing any header field, moving the value to
//!   another id or flipping a byte makes the read fail as `corrupt`.
//! - A read returns bytes only after decryption succeeded and both the keyed digest and the
//!   size match; otherwise it returns an error and no bytes.

use crate::storage::schema;
use std::collections::{BTreeMap, HashSet};

use crate::error::{Error, ErrorCode, Result};
use crate::storage::content::{ContentClass, ContentId, OBJECT_SCHEMA, ObjectHeader};
use crate::storage::crypto::{self, Binding};
use crate::storage::header;
use crate::storage::keys::KeyRing;
use crate::storage::kv::{KeyValueStore, Txn};
use crate::storage::pack;

const MAGIC: &[u8; 3] = b"TO1";
/// Splits a stored value into its header and sealed bytes.
///
/// # Errors
/// `corrupt` if the header is malformed.
pub(crate) fn parse(value: &[u8]) -> Result<(ObjectHeader, &[u8])> {
    let (common, rest) = header::read(value, MAGIC, "object")?;
    let Some((&[class], rest)) = rest.split_first_chunk::<1>() else {
        return Err(Error::corrupt("object", "bad header"));
    };
    let Some((size, sealed)) = rest.split_first_chunk::<8>() else {
        return Err(Error::corrupt("object", "bad header"));
    };
    let class = ContentClass::from_code(class).ok_or_else(|| Error::corrupt("object", "unknown content class"))?;
    let h =
        ObjectHeader { key_version: common.key_version, schema: common.schema, class, size: u64::from_be_bytes(*size) };
    Ok((h, sealed))
}

fn binding<'a>(id: &'a ContentId, h: &ObjectHeader) -> Binding<'a> {
    Binding { kind: "object", id: &id.0, class: h.class.as_str(), schema: h.schema, key_version: h.key_version }
}

fn encode(keys: &KeyRing, id: &ContentId, class: ContentClass, version: u32, bytes: &[u8]) -> Result<Vec<u8>> {
    let header = ObjectHeader { key_version: version, schema: OBJECT_SCHEMA, class, size: bytes.len() as u64 };
    let mut value = Vec::new();
    header::write(&mut value, MAGIC, header::Header { key_version: version, schema: OBJECT_SCHEMA });
    value.push(class.code());
    value.extend_from_slice(&header.size.to_be_bytes());
    crypto::seal_into(keys.data_key(version)?, binding(id, &header), bytes, crypto::ZSTD_LEVEL, &mut value)?;
    Ok(value)
}

/// Stores file content `bytes` (once per distinct content) inside `txn`; returns its id
/// and class.
pub(crate) fn put(keys: &KeyRing, txn: &mut dyn Txn, bytes: &[u8]) -> Result<(ContentId, ContentClass)> {
    let class = ContentClass::of(bytes);
    let id = ContentId(keys.content_id(bytes));
    if txn.get(schema::OBJECTS, &id.0)?.is_none() && !pack::contains_in(txn, &id)? {
        txn.put(schema::OBJECTS, &id.0, &encode(keys, &id, class, keys.current_version(), bytes)?)?;
    }
    Ok((id, class))
}

/// An object sealed outside a transaction (on a worker thread), ready to be stored.
#[derive(Debug)]
pub(crate) struct Sealed {
    pub id: ContentId,
    pub value: Vec<u8>,
}

/// Computes the id of `bytes` and, unless `known(id)`, seals them as class `class`.
/// Thread-safe: snapshot workers hash and encrypt in parallel, one writer stores.
pub(crate) fn seal(
    keys: &KeyRing,
    bytes: &[u8],
    class: ContentClass,
    known: impl Fn(&ContentId) -> bool,
) -> Result<(ContentId, Option<Sealed>)> {
    let id = ContentId(keys.content_id(bytes));
    if known(&id) {
        return Ok((id, None));
    }
    let value = encode(keys, &id, class, keys.current_version(), bytes)?;
    Ok((id, Some(Sealed { id, value })))
}

/// Stores a sealed object inside `txn` unless it is there already; returns the bytes
/// written (0 if it was there).
pub(crate) fn store_sealed(txn: &mut dyn Txn, sealed: &Sealed) -> Result<u64> {
    if txn.put_if_absent(schema::OBJECTS, &sealed.id.0, &sealed.value)? { Ok(sealed.value.len() as u64) } else { Ok(0) }
}

/// [`store_sealed`] for each of `sealed`; returns the bytes written.
pub(crate) fn store_all(txn: &mut dyn Txn, sealed: &[Sealed]) -> Result<u64> {
    sealed.iter().map(|s| store_sealed(txn, s)).sum()
}

/// Whether the object `id` is stored, on its own or packed.
pub(crate) fn exists(kv: &dyn KeyValueStore, id: &ContentId) -> Result<bool> {
    Ok(kv.contains(schema::OBJECTS, &id.0)? || pack::contains(kv, id)?)
}

/// Whether the object `id` is stored, on its own or packed, read inside `txn`.
pub(crate) fn exists_in(txn: &mut dyn Txn, id: &ContentId) -> Result<bool> {
    Ok(txn.get(schema::OBJECTS, &id.0)?.is_some() || pack::contains_in(txn, id)?)
}

/// Which of `ids` are stored, on their own or packed (one read of each namespace).
pub(crate) fn exist_each(kv: &dyn KeyValueStore, ids: &[ContentId]) -> Result<Vec<bool>> {
    let keys: Vec<&[u8]> = ids.iter().map(|id| id.0.as_slice()).collect();
    let own = kv.contains_each(schema::OBJECTS, &keys)?;
    let packed = pack::contains_each(kv, &keys)?;
    Ok(own.iter().zip(packed).map(|(a, b)| *a || b).collect())
}

/// Decrypts and verifies a stored value read under `id`.
///
/// # Errors
/// `corrupt` on any mismatch: header, authentication, digest or size.
pub(crate) fn decode(keys: &KeyRing, id: &ContentId, value: &[u8]) -> Result<(ObjectHeader, Vec<u8>)> {
    let (header, sealed) = parse(value)?;
    let size = usize::try_from(header.size).map_err(|_| Error::corrupt("object", "size out of range"))?;
    let plain = crypto::open(keys.data_key(header.key_version)?, binding(id, &header), sealed, size)?;
    if plain.len() != size {
        return Err(Error::corrupt("object", "size mismatch"));
    }
    if keys.content_id(&plain) != id.0 {
        return Err(Error::corrupt("object", "digest mismatch"));
    }
    Ok((header, plain))
}

/// Reads and verifies the object `id`.
///
/// # Errors
/// `not-found` if absent; `corrupt` if it does not verify.
pub(crate) fn get(keys: &KeyRing, kv: &dyn KeyValueStore, id: &ContentId) -> Result<(ObjectHeader, Vec<u8>)> {
    match kv.get(schema::OBJECTS, &id.0)? {
        Some(value) => decode(keys, id, &value),
        None => pack::read(keys, kv, id)?.ok_or_else(|| Error::not_found(format!("object {}", id.to_hex()))),
    }
}

/// Reads and verifies the object `id`, handing its bytes to `out` in pieces (a packed
/// object streams in a few blocks' memory, whatever its size; one stored on its own is
/// decrypted whole, as it is stored). Verified only once every piece went out: on an
/// error, the caller throws away what `out` was given.
///
/// # Errors
/// `not-found` if absent; `corrupt` if it does not verify; whatever `out` returns.
pub(crate) fn get_to(
    keys: &KeyRing,
    kv: &dyn KeyValueStore,
    id: &ContentId,
    out: &mut dyn FnMut(&[u8]) -> Result<()>,
) -> Result<ObjectHeader> {
    match kv.get(schema::OBJECTS, &id.0)? {
        Some(value) => {
            let (header, bytes) = decode(keys, id, &value)?;
            out(&bytes)?;
            Ok(header)
        }
        None => pack::read_to(keys, kv, id, out)?.ok_or_else(|| Error::not_found(format!("object {}", id.to_hex()))),
    }
}

/// The header of object `id`, without decrypting it.
pub(crate) fn header(kv: &dyn KeyValueStore, id: &ContentId) -> Result<Option<ObjectHeader>> {
    match kv.get(schema::OBJECTS, &id.0)? {
        Some(v) => Ok(Some(parse(&v)?.0)),
        None => pack::header(kv, id),
    }
}

/// Re-encrypts, each in its own transaction, every object stored on its own under an older
/// data key (packed objects: [`pack::reencrypt`]). An altered object is left as it is for
/// `verify` to report. Returns how many were rewritten.
pub(crate) fn reencrypt_all(keys: &KeyRing, kv: &dyn KeyValueStore) -> Result<u64> {
    let current = keys.current_version();
    let mut stale = Vec::new();
    kv.scan(schema::OBJECTS, b"", &mut |k, v| {
        if parse(v)?.0.key_version != current {
            stale.push(k.to_vec());
        }
        Ok(true)
    })?;
    let mut count = 0;
    for key in stale {
        let id = ContentId::try_from_slice(&key).ok_or_else(|| Error::corrupt("object", "bad id"))?;
        let mut txn = kv.begin()?;
        let Some(value) = txn.get(schema::OBJECTS, &key)? else { continue };
        let (header, plain) = match decode(keys, &id, &value) {
            Ok(decoded) => decoded,
            Err(e) if e.code == ErrorCode::Corrupt => continue,
            Err(e) => return Err(e),
        };
        if header.key_version != current {
            txn.put(schema::OBJECTS, &key, &encode(keys, &id, header.class, current, &plain)?)?;
            txn.commit()?;
            count += 1;
        }
    }
    Ok(count)
}

/// Adds to `usage` how many objects stored on their own each data-key version encrypts.
pub(crate) fn key_usage(kv: &dyn KeyValueStore, usage: &mut BTreeMap<u32, u64>) -> Result<()> {
    kv.scan(schema::OBJECTS, b"", &mut |_, v| {
        *usage.entry(parse(v)?.0.key_version).or_insert(0) += 1;
        Ok(true)
    })
}

/// The ids of every object stored on its own (packed ones: [`pack::verify`]).
pub(crate) fn own_ids(kv: &dyn KeyValueStore) -> Result<Vec<Vec<u8>>> {
    let mut ids = Vec::new();
    kv.scan_keys(schema::OBJECTS, b"", &mut |k| {
        ids.push(k.to_vec());
        Ok(true)
    })?;
    Ok(ids)
}

/// Objects stored on their own: how many, their stored bytes, their plaintext bytes.
pub(crate) fn own_usage(kv: &dyn KeyValueStore) -> Result<(u64, u64, u64)> {
    let (mut count, mut stored, mut plain) = (0, 0, 0);
    kv.scan(schema::OBJECTS, b"", &mut |_, v| {
        count += 1;
        stored += v.len() as u64;
        plain += parse(v).map(|(h, _)| h.size).unwrap_or(0);
        Ok(true)
    })?;
    Ok((count, stored, plain))
}

/// Removes, inside `txn`, every object stored on its own that is not in `live`; returns
/// how many and their stored bytes.
pub(crate) fn sweep_in(txn: &mut dyn Txn, live: &HashSet<ContentId>) -> Result<(u64, u64)> {
    let (mut removed, mut bytes) = (0, 0);
    for key in txn.keys(schema::OBJECTS, b"")? {
        if ContentId::try_from_slice(&key).is_some_and(|id| live.contains(&id)) {
            continue;
        }
        bytes += txn.get(schema::OBJECTS, &key)?.map_or(0, |v| v.len() as u64);
        txn.delete(schema::OBJECTS, &key)?;
        removed += 1;
    }
    Ok((removed, bytes))
}
