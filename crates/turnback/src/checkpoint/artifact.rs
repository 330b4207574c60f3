//! The artifact store: encrypted pre- and post-images of checkpoint targets.
//!
//! Invariants:
//! - An artifact is a plain metadata record (`ContentMetadata` without the key version,
//!   which lives in the object header) pointing at one content object. Its bytes are only
//!   ever stored encrypted, through [`object`](crate::storage::object).
//! - An artifact is born `staged` in the same transaction as its checkpoint record and
//!   becomes `committed` in the same transaction as the checkpoint's commit. A staged
//!   artifact is never returned (`recovery-locked`).
//! - A read checks the artifact against what the sealed checkpoint expects (checkpoint id,
//!   digest, size, class) and against the object's own header, then decrypts and checks
//!   the keyed digest and size. Any disagreement is `corrupt` and returns no bytes.

use std::collections::HashSet;

use serde::{Deserialize, Serialize};

use crate::error::{Error, ErrorCode, Result};
use crate::storage::body::Kept;
use crate::storage::content::{ContentClass, ContentId, OBJECT_SCHEMA};
use crate::storage::keys::KeyRing;
use crate::storage::kv::{KeyValueStore, Txn};
use crate::storage::object;
use crate::storage::schema;

/// Which side of a mutation an image is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
pub enum ImageRole {
    /// Before the mutation.
    Pre,
    /// After the mutation.
    Post,
}

/// Lifecycle of an artifact.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
pub(crate) enum ArtifactState {
    /// Written with a checkpoint that has not committed.
    Staged,
    /// Its checkpoint committed.
    Committed,
}

/// The metadata of one artifact's content, as the seed names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub(crate) struct ContentMetadata {
    /// Keyed digest (HMAC-SHA-256) of the plaintext, hex.
    pub digest: String,
    /// Plaintext size in bytes.
    pub size: u64,
    /// `file-content` or `binary-blob`.
    pub content_class: ContentClass,
    /// Object schema version.
    pub schema_version: u16,
    /// Data-key version the content is encrypted under.
    pub key_version: u32,
}

/// The stored artifact record (plain: ids, sizes, states only).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub(crate) struct ArtifactRecord {
    /// This artifact's id.
    pub artifact_id: String,
    /// The checkpoint it belongs to.
    pub checkpoint_id: String,
    /// Pre- or post-image.
    pub role: ImageRole,
    /// Index of the target within the checkpoint.
    pub target: u32,
    /// Keyed digest, hex (also the content object's id).
    pub digest: String,
    /// Plaintext size.
    pub size: u64,
    /// Content class.
    pub content_class: ContentClass,
    /// Object schema version.
    pub schema_version: u16,
    /// Lifecycle state.
    pub state: ArtifactState,
}

/// Stores `bytes` as a staged artifact of `checkpoint_id` inside `txn`.
pub(crate) fn stage(
    keys: &KeyRing,
    txn: &mut dyn Txn,
    checkpoint_id: &str,
    role: ImageRole,
    target: u32,
    bytes: &[u8],
) -> Result<ArtifactRecord> {
    let (id, class) = object::put(keys, txn, bytes)?;
    stage_kept(txn, checkpoint_id, role, target, Kept { id, size: bytes.len() as u64, class })
}

/// Records content the store holds already (`kept`: packed as it was read, or stored for
/// another record) as a staged artifact of `checkpoint_id` inside `txn`.
///
/// # Errors
/// `corrupt` if the store no longer holds it (read inside `txn`, so `gc` cannot have taken
/// it since).
pub(crate) fn stage_kept(
    txn: &mut dyn Txn,
    checkpoint_id: &str,
    role: ImageRole,
    target: u32,
    kept: Kept,
) -> Result<ArtifactRecord> {
    if !object::exists_in(txn, &kept.id)? {
        return Err(Error::corrupt(format!("content {}", kept.id.to_hex()), "not in the store"));
    }
    let record = ArtifactRecord {
        artifact_id: uuid::Uuid::now_v7().to_string(),
        checkpoint_id: checkpoint_id.to_string(),
        role,
        target,
        digest: kept.id.to_hex(),
        size: kept.size,
        content_class: kept.class,
        schema_version: OBJECT_SCHEMA,
        state: ArtifactState::Staged,
    };
    put(txn, &record)?;
    Ok(record)
}

fn put(txn: &mut dyn Txn, record: &ArtifactRecord) -> Result<()> {
    let value = serde_json::to_vec(record).map_err(|e| Error::invalid(e.to_string()))?;
    txn.put(schema::ARTIFACTS, record.artifact_id.as_bytes(), &value)
}

fn parse(id: &str, value: &[u8]) -> Result<ArtifactRecord> {
    let record: ArtifactRecord =
        serde_json::from_slice(value).map_err(|e| Error::corrupt(format!("artifact {id}"), e))?;
    if record.artifact_id != id {
        return Err(Error::corrupt(format!("artifact {id}"), "record id does not match its key"));
    }
    Ok(record)
}

/// Marks the artifact `id` committed inside `txn`.
pub(crate) fn commit(txn: &mut dyn Txn, id: &str) -> Result<()> {
    let value = txn.get(schema::ARTIFACTS, id.as_bytes())?.ok_or_else(|| Error::not_found(format!("artifact {id}")))?;
    let mut record = parse(id, &value)?;
    record.state = ArtifactState::Committed;
    put(txn, &record)
}

/// Removes the artifact `id` inside `txn`; returns its size if it was there.
pub(crate) fn remove(txn: &mut dyn Txn, id: &str) -> Result<Option<u64>> {
    let Some(value) = txn.get(schema::ARTIFACTS, id.as_bytes())? else { return Ok(None) };
    let size = parse(id, &value).map(|r| r.size).unwrap_or(0);
    txn.delete(schema::ARTIFACTS, id.as_bytes())?;
    Ok(Some(size))
}

/// The record of artifact `id`.
pub(crate) fn record(kv: &dyn KeyValueStore, id: &str) -> Result<ArtifactRecord> {
    let value = kv.get(schema::ARTIFACTS, id.as_bytes())?.ok_or_else(|| Error::not_found(format!("artifact {id}")))?;
    parse(id, &value)
}

/// What the sealed checkpoint says an artifact must be.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Expected<'a> {
    pub checkpoint_id: &'a str,
    pub digest: &'a str,
    pub size: u64,
}

/// Checks the artifact record against the checkpoint's expectation and the object header,
/// without decrypting. Returns the metadata and the object id.
pub(crate) fn check(kv: &dyn KeyValueStore, id: &str, expected: Expected<'_>) -> Result<(ContentMetadata, ContentId)> {
    let rec = record(kv, id)?;
    let what = format!("artifact {id}");
    if rec.checkpoint_id != expected.checkpoint_id {
        return Err(Error::corrupt(what, "belongs to another checkpoint"));
    }
    if rec.state != ArtifactState::Committed {
        return Err(Error::new(ErrorCode::RecoveryLocked, format!("{what}: staged but never committed")));
    }
    if rec.digest != expected.digest || rec.size != expected.size {
        return Err(Error::corrupt(what, "digest or size differs from the checkpoint record"));
    }
    let oid = ContentId::from_hex(&rec.digest).ok_or_else(|| Error::corrupt(&what, "malformed digest"))?;
    let header = object::header(kv, &oid)?
        .ok_or_else(|| Error::corrupt(&what, "its content object is missing from the store"))?;
    if !same_class(header.class, rec.content_class) || header.size != rec.size || header.schema != rec.schema_version {
        return Err(Error::corrupt(what, "metadata differs from the stored object"));
    }
    let meta = ContentMetadata {
        digest: rec.digest,
        size: rec.size,
        content_class: rec.content_class,
        schema_version: rec.schema_version,
        key_version: header.key_version,
    };
    Ok((meta, oid))
}

/// Reads artifact `id` through every check; bytes only if all pass.
///
/// # Errors
/// `not-found`, `recovery-locked` (staged, never committed) or `corrupt`.
pub(crate) fn read(
    keys: &KeyRing,
    kv: &dyn KeyValueStore,
    id: &str,
    expected: Expected<'_>,
) -> Result<(ContentMetadata, Vec<u8>)> {
    let (meta, oid) = check(kv, id, expected)?;
    let (header, bytes) = object::get(keys, kv, &oid).map_err(|e| match e.code {
        ErrorCode::NotFound => Error::corrupt(format!("artifact {id}"), "content object missing"),
        _ => e,
    })?;
    if !same_class(header.class, meta.content_class) {
        return Err(Error::corrupt(format!("artifact {id}"), "content class mismatch"));
    }
    Ok((meta, bytes))
}

/// Whether a stored object of class `stored` can hold an artifact recorded as `recorded`.
/// Content ids name bytes, not kinds: a file whose bytes equal a symlink's target (or,
/// in theory, a directory node) shares the object a snapshot stored first under that
/// class. File classes must match exactly; the object's own class is authenticated with
/// it, so a tampered class still fails when the bytes are read.
fn same_class(stored: ContentClass, recorded: ContentClass) -> bool {
    stored == recorded || matches!(stored, ContentClass::SymlinkTarget | ContentClass::Tree)
}

/// The content every artifact record names, read inside `txn` (what keeps it alive).
pub(crate) fn content_in(txn: &mut dyn Txn) -> Result<HashSet<ContentId>> {
    let mut out = HashSet::new();
    for key in txn.keys(schema::ARTIFACTS, b"")? {
        if let Some(v) = txn.get(schema::ARTIFACTS, &key)?
            && let Ok(rec) = serde_json::from_slice::<ArtifactRecord>(&v)
            && let Some(id) = ContentId::from_hex(&rec.digest)
        {
            out.insert(id);
        }
    }
    Ok(out)
}

/// How many artifact records the store holds.
pub(crate) fn count(kv: &dyn KeyValueStore) -> Result<u64> {
    let mut n = 0;
    kv.scan_keys(schema::ARTIFACTS, b"", &mut |_| {
        n += 1;
        Ok(true)
    })?;
    Ok(n)
}
