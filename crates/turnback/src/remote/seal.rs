//! The envelope of every object in a bucket, and the keyed names that say nothing.
//!
//! Invariants:
//! - Every object turnback writes to a bucket is zstd-compressed, then encrypted with
//!   AES-256-GCM under the remote key, with associated data binding the object's name (its
//!   kind and id): an object moved to another name, altered, cut or swapped fails to open,
//!   as `corrupt`. Nothing in a bucket is plain but ids and sizes.
//! - The remote key is derived from the master key alone (a keyed PRF under the lookup key
//!   with its own label), never from a store's data keys: every store opened with the same
//!   master key reads and writes the same bucket, whatever its own data-key versions.
//! - The format object holds a keyed check value of the master key next to its sealed
//!   body, so a bucket written under another master key is `key-mismatch`, not `corrupt`.
//! - Names are ids: random (packs, manifests), keyed digests of the plaintext (turn
//!   records, content ids), or keyed digests of a session id. No path, name, prompt or
//!   session id appears in a name.

use crate::base::hex::hex;
use crate::error::{Error, ErrorCode, Result};
use crate::storage::crypto::{self, Binding, SecretKey};
use crate::storage::keys::KeyRing;

const MAGIC: &[u8; 4] = b"TRB1";
const SCHEMA: u16 = 1;
/// The name of the format object, at the top of the prefix.
pub(crate) const FORMAT: &str = "turnback-remote";
/// Largest plaintext one object may open to.
const MAX_PLAIN: usize = 1 << 30;

/// The keys of one bucket: the remote encryption key and the keyed namers.
#[derive(Debug, Clone)]
pub(crate) struct RemoteKeys {
    key: SecretKey,
    ring: KeyRing,
}

impl RemoteKeys {
    /// The remote keys of the master key behind `ring`.
    pub(crate) fn new(ring: &KeyRing) -> Self {
        RemoteKeys { key: SecretKey(ring.lookup_id("turnback remote encryption key v1", b"")), ring: ring.clone() }
    }

    /// The keyed check value of the master key that the format object carries.
    fn check(&self) -> [u8; 32] {
        self.ring.lookup_id("turnback remote key check v1", b"")
    }

    /// The name part under which session `id`'s manifests live.
    pub(crate) fn session_key(&self, id: &str) -> String {
        hex(&self.ring.lookup_id("turnback remote session", id.as_bytes()))
    }

    /// The keyed id of a record's plaintext (its name: equal records are stored once).
    pub(crate) fn record_id(&self, plain: &[u8]) -> String {
        hex(&self.ring.lookup_id("turnback remote record", plain))
    }

    /// The keyed content id of `bytes` (the store's own).
    pub(crate) fn content_id(&self, bytes: &[u8]) -> [u8; 32] {
        self.ring.content_id(bytes)
    }

    /// Seals `plain` as the object `name`.
    pub(crate) fn seal(&self, name: &str, plain: &[u8]) -> Result<Vec<u8>> {
        let sealed = crypto::seal(&self.key, binding(name), plain)?;
        let mut out = Vec::with_capacity(MAGIC.len() + sealed.len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&sealed);
        Ok(out)
    }

    /// Opens the object `name`.
    ///
    /// # Errors
    /// `corrupt` if it was altered, cut, or belongs to another name.
    pub(crate) fn open(&self, name: &str, bytes: &[u8]) -> Result<Vec<u8>> {
        let sealed = bytes
            .strip_prefix(MAGIC.as_slice())
            .ok_or_else(|| Error::corrupt(format!("remote object {name}"), "not a turnback object"))?;
        crypto::open(&self.key, binding(name), sealed, MAX_PLAIN)
            .map_err(|_| Error::corrupt(format!("remote object {name}"), "it does not verify (altered or moved)"))
    }

    /// The format object's bytes: the check value, then the sealed format description.
    pub(crate) fn format_object(&self) -> Result<Vec<u8>> {
        let mut out = self.check().to_vec();
        out.extend(self.seal(FORMAT, br#"{"format":1}"#)?);
        Ok(out)
    }

    /// Checks a bucket's format object against this master key.
    ///
    /// # Errors
    /// `key-mismatch` if it was written under another master key; `corrupt` if it was
    /// altered.
    pub(crate) fn check_format(&self, bytes: &[u8]) -> Result<()> {
        let Some((check, sealed)) = bytes.split_first_chunk::<32>() else {
            return Err(Error::corrupt("remote format object", "too short"));
        };
        if *check != self.check() {
            return Err(Error::new(
                ErrorCode::KeyMismatch,
                "this remote was written under another master key: import the team's key (`turnback key import`)",
            ));
        }
        self.open(FORMAT, sealed).map(drop)
    }
}

fn binding(name: &str) -> Binding<'_> {
    Binding { kind: "remote", id: name.as_bytes(), class: "remote-object", schema: SCHEMA, key_version: 0 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::keys::KeySource;
    use crate::storage::kv::MemoryKv;

    fn keys(byte: u8) -> RemoteKeys {
        let kv = MemoryKv::new();
        let ring =
            KeyRing::open_with(&kv, SecretKey([byte; 32]), KeySource::Env, &crate::storage::digest::init_in).unwrap();
        RemoteKeys::new(&ring)
    }

    #[test]
    fn an_object_opens_only_under_its_own_name_and_unaltered() {
        let k = keys(1);
        let sealed = k.seal("t/abc", b"canary-record").unwrap();
        assert!(!sealed.windows(6).any(|w| w == b"canary"));
        assert_eq!(k.open("t/abc", &sealed).unwrap(), b"canary-record");
        assert_eq!(k.open("t/abd", &sealed).unwrap_err().code, ErrorCode::Corrupt);
        let mut flipped = sealed.clone();
        *flipped.last_mut().unwrap() ^= 1;
        assert_eq!(k.open("t/abc", &flipped).unwrap_err().code, ErrorCode::Corrupt);
    }

    #[test]
    fn two_stores_with_one_master_key_share_the_remote_key_and_another_key_is_a_mismatch() {
        let (a, b, other) = (keys(1), keys(1), keys(2));
        let format = a.format_object().unwrap();
        b.check_format(&format).unwrap();
        assert_eq!(b.open("x", &a.seal("x", b"same").unwrap()).unwrap(), b"same");
        assert_eq!(a.session_key("s1"), b.session_key("s1"));
        assert_eq!(other.check_format(&format).unwrap_err().code, ErrorCode::KeyMismatch);
        let mut altered = format.clone();
        *altered.last_mut().unwrap() ^= 1;
        assert_eq!(a.check_format(&altered).unwrap_err().code, ErrorCode::Corrupt);
    }
}
