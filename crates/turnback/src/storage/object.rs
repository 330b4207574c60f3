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

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::storage::crypto::{self, Binding, hex};
use crate::storage::keys::KeyRing;
use crate::storage::kv::{KeyValueStore, Ns, Txn};

pub(crate) const NS_OBJECTS: Ns = "objects";
const MAGIC: &[u8; 3] = b"TO1";
const HEADER_LEN: usize = 3 + 4 + 2 + 1 + 8;
/// Schema version of object plaintext framing.
pub const OBJECT_SCHEMA: u16 = 1;
/// How far into a file to look for a NUL byte when classifying it.
pub const BINARY_SNIFF_LEN: usize = 8 * 1024;

/// What kind of bytes an object holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ContentClass {
    /// Text-like file content.
    FileContent,
    /// File content with a NUL byte in its first 8 KiB.
    BinaryBlob,
    /// A snapshot directory node (names, modes and ids of its entries).
    Tree,
    /// A symlink's target (stored as a link, never followed).
    SymlinkTarget,
}

impl ContentClass {
    /// Classifies file content: binary if a NUL appears in the first 8 KiB.
    pub fn of(bytes: &[u8]) -> Self {
        let head = &bytes[..bytes.len().min(BINARY_SNIFF_LEN)];
        if head.contains(&0) { ContentClass::BinaryBlob } else { ContentClass::FileContent }
    }

    /// The stable name (`file-content`, `binary-blob`).
    pub fn as_str(self) -> &'static str {
        match self {
            ContentClass::FileContent => "file-content",
            ContentClass::BinaryBlob => "binary-blob",
            ContentClass::Tree => "tree",
            ContentClass::SymlinkTarget => "symlink-target",
        }
    }

    pub(crate) fn code(self) -> u8 {
        match self {
            ContentClass::FileContent => 1,
            ContentClass::BinaryBlob => 2,
            ContentClass::Tree => 3,
            ContentClass::SymlinkTarget => 4,
        }
    }

    pub(crate) fn from_code(code: u8) -> Option<Self> {
        match code {
            1 => Some(ContentClass::FileContent),
            2 => Some(ContentClass::BinaryBlob),
            3 => Some(ContentClass::Tree),
            4 => Some(ContentClass::SymlinkTarget),
            _ => None,
        }
    }
}

/// A keyed content id, which is also the content's digest.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ContentId(pub [u8; 32]);

impl std::fmt::Debug for ContentId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ContentId({})", self.to_hex())
    }
}

impl ContentId {
    /// Lower-case hex, as shown in `digest` fields.
    pub fn to_hex(&self) -> String {
        hex(&self.0)
    }

    /// The id stored as `bytes`, if they are 32 bytes long.
    pub fn try_from_slice(bytes: &[u8]) -> Option<Self> {
        bytes.try_into().ok().map(ContentId)
    }

    /// Parses the hex form.
    pub fn from_hex(s: &str) -> Option<Self> {
        crypto::unhex(s)?.try_into().ok().map(ContentId)
    }
}

/// The plain header of a stored object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ObjectHeader {
    /// The data-key version it is encrypted under.
    pub key_version: u32,
    /// Its plaintext framing version.
    pub schema: u16,
    /// Its content class.
    pub class: ContentClass,
    /// Its plaintext size in bytes.
    pub size: u64,
}

/// Splits a stored value into its header and sealed bytes.
///
/// # Errors
/// `corrupt` if the header is malformed.
pub(crate) fn parse(value: &[u8]) -> Result<(ObjectHeader, &[u8])> {
    if value.len() < HEADER_LEN || &value[..3] != MAGIC {
        return Err(Error::corrupt("object", "bad header"));
    }
    let key_version = u32::from_be_bytes(value[3..7].try_into().expect("4 bytes"));
    let schema = u16::from_be_bytes(value[7..9].try_into().expect("2 bytes"));
    let class = ContentClass::from_code(value[9]).ok_or_else(|| Error::corrupt("object", "unknown content class"))?;
    let size = u64::from_be_bytes(value[10..18].try_into().expect("8 bytes"));
    Ok((ObjectHeader { key_version, schema, class, size }, &value[HEADER_LEN..]))
}

fn binding<'a>(id: &'a ContentId, h: &ObjectHeader) -> Binding<'a> {
    Binding { kind: "object", id: &id.0, class: h.class.as_str(), schema: h.schema, key_version: h.key_version }
}

fn encode(keys: &KeyRing, id: &ContentId, class: ContentClass, version: u32, bytes: &[u8]) -> Result<Vec<u8>> {
    let header = ObjectHeader { key_version: version, schema: OBJECT_SCHEMA, class, size: bytes.len() as u64 };
    let sealed = crypto::seal(keys.data_key(version)?, binding(id, &header), bytes)?;
    let mut value = Vec::with_capacity(HEADER_LEN + sealed.len());
    value.extend_from_slice(MAGIC);
    value.extend_from_slice(&version.to_be_bytes());
    value.extend_from_slice(&OBJECT_SCHEMA.to_be_bytes());
    value.push(class.code());
    value.extend_from_slice(&header.size.to_be_bytes());
    value.extend_from_slice(&sealed);
    Ok(value)
}

/// Stores file content `bytes` (once per distinct content) inside `txn`; returns its id
/// and class.
pub(crate) fn put(keys: &KeyRing, txn: &mut dyn Txn, bytes: &[u8]) -> Result<(ContentId, ContentClass)> {
    let class = ContentClass::of(bytes);
    let id = ContentId(keys.content_id(bytes));
    if txn.get(NS_OBJECTS, &id.0)?.is_none() && txn.get(crate::storage::pack::NS_PACKED, &id.0)?.is_none() {
        txn.put(NS_OBJECTS, &id.0, &encode(keys, &id, class, keys.current_version(), bytes)?)?;
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
    if txn.put_if_absent(NS_OBJECTS, &sealed.id.0, &sealed.value)? { Ok(sealed.value.len() as u64) } else { Ok(0) }
}

/// Whether the object `id` is stored, on its own or packed.
pub(crate) fn exists(kv: &dyn KeyValueStore, id: &ContentId) -> Result<bool> {
    Ok(kv.contains(NS_OBJECTS, &id.0)? || crate::storage::pack::contains(kv, id)?)
}

/// Which of `ids` are stored, on their own or packed (one read of each namespace).
pub(crate) fn exist_each(kv: &dyn KeyValueStore, ids: &[ContentId]) -> Result<Vec<bool>> {
    let keys: Vec<&[u8]> = ids.iter().map(|id| id.0.as_slice()).collect();
    let own = kv.contains_each(NS_OBJECTS, &keys)?;
    let packed = kv.contains_each(crate::storage::pack::NS_PACKED, &keys)?;
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
    match kv.get(NS_OBJECTS, &id.0)? {
        Some(value) => decode(keys, id, &value),
        None => {
            crate::storage::pack::read(keys, kv, id)?.ok_or_else(|| Error::not_found(format!("object {}", id.to_hex())))
        }
    }
}

/// The header of object `id`, without decrypting it.
pub(crate) fn header(kv: &dyn KeyValueStore, id: &ContentId) -> Result<Option<ObjectHeader>> {
    match kv.get(NS_OBJECTS, &id.0)? {
        Some(v) => Ok(Some(parse(&v)?.0)),
        None => crate::storage::pack::header(kv, id),
    }
}

/// Re-encrypts the object stored as `value` under the current key, inside `txn`.
pub(crate) fn reencrypt(keys: &KeyRing, txn: &mut dyn Txn, id: &ContentId, value: &[u8]) -> Result<bool> {
    let (header, plain) = decode(keys, id, value)?;
    if header.key_version == keys.current_version() {
        return Ok(false);
    }
    let fresh = encode(keys, id, header.class, keys.current_version(), &plain)?;
    txn.put(NS_OBJECTS, &id.0, &fresh)?;
    Ok(true)
}
