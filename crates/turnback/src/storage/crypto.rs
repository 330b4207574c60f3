//! The encryption envelope and keyed identifiers.
//!
//! Invariants:
//! - Every byte of content, every path and every record body that reaches the store went
//!   through [`seal`]: zstd compression, then AES-256-GCM with a fresh random 96-bit nonce
//!   and associated data naming what the bytes are (kind, id, content class, schema
//!   version, key version). A ciphertext moved under another id or class fails to open.
//! - Content ids and digests are HMAC-SHA-256 under a key derived from the master key, so
//!   the store cannot be probed for "does it hold this known file".
//! - Subkeys come from HKDF-SHA-256 with one `info` label per purpose; no key is used for
//!   two purposes.

use aes_gcm::Aes256Gcm;
use aes_gcm::aead::Nonce;
use aes_gcm::aead::{Aead, KeyInit, Payload};
use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::fmt;

use crate::base::hex::hex;
use crate::error::{Error, ErrorCode, Result};

/// Length of every symmetric key turnback uses.
pub(crate) const KEY_LEN: usize = 32;
const NONCE_LEN: usize = 12;
const TAG_LEN: usize = 16;
/// zstd level of everything sealed without a level of its own.
pub(crate) const ZSTD_LEVEL: i32 = 3;

/// 256 bits of key material. `Debug` never prints it.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct SecretKey(pub(crate) [u8; KEY_LEN]);

impl fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SecretKey(..)")
    }
}

impl SecretKey {
    /// A fresh key from the operating system's random source.
    pub(crate) fn random() -> Result<Self> {
        let mut k = [0u8; KEY_LEN];
        fill_random(&mut k)?;
        Ok(SecretKey(k))
    }

    /// Wraps raw bytes; fails unless there are exactly 32.
    pub(crate) fn from_slice(bytes: &[u8]) -> Result<Self> {
        let arr: [u8; KEY_LEN] = bytes
            .try_into()
            .map_err(|_| Error::invalid(format!("a key must be {KEY_LEN} bytes, got {}", bytes.len())))?;
        Ok(SecretKey(arr))
    }

    /// The raw bytes (for writing the key file).
    pub(crate) fn expose(&self) -> &[u8; KEY_LEN] {
        &self.0
    }

    /// Derives the subkey for `purpose` (HKDF-SHA-256, one label per purpose).
    pub(crate) fn derive(&self, purpose: Purpose) -> SecretKey {
        let hk = hkdf::Hkdf::<Sha256>::new(Some(b"turnback/v1"), &self.0);
        let mut out = [0u8; KEY_LEN];
        hk.expand(purpose.label().as_bytes(), &mut out).expect("32 bytes is a valid HKDF-SHA-256 output length");
        SecretKey(out)
    }

    /// [`mac`](Self::mac) of `parts` followed by one more part of `len` bytes, fed in
    /// pieces ([`StreamingMac::update`]): the same value as `mac` of all the parts, without
    /// holding the last one whole.
    pub(crate) fn mac_streaming(&self, parts: &[&[u8]], len: u64) -> StreamingMac {
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&self.0).expect("HMAC takes any key length");
        for p in parts {
            mac.update(&(p.len() as u64).to_le_bytes());
            mac.update(p);
        }
        mac.update(&len.to_le_bytes());
        StreamingMac { mac, left: len }
    }

    /// HMAC-SHA-256 of `parts` (each length-prefixed, so part boundaries are unambiguous).
    pub(crate) fn mac(&self, parts: &[&[u8]]) -> [u8; 32] {
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&self.0).expect("HMAC takes any key length");
        for p in parts {
            mac.update(&(p.len() as u64).to_le_bytes());
            mac.update(p);
        }
        mac.finalize().into_bytes().into()
    }
}

/// A [`SecretKey::mac`] whose last part arrives in pieces; its length was given first.
#[derive(Clone)]
pub(crate) struct StreamingMac {
    mac: Hmac<Sha256>,
    left: u64,
}

impl fmt::Debug for StreamingMac {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StreamingMac").field("left", &self.left).finish_non_exhaustive()
    }
}

impl StreamingMac {
    /// Feeds the next piece of the last part.
    pub(crate) fn update(&mut self, piece: &[u8]) {
        self.left = self.left.wrapping_sub(piece.len() as u64);
        self.mac.update(piece);
    }

    /// The MAC, if exactly the announced length was fed (else the value would not be the
    /// MAC of what was fed).
    pub(crate) fn finish(self) -> Option<[u8; 32]> {
        (self.left == 0).then(|| self.mac.finalize().into_bytes().into())
    }
}

/// What a derived key is for. Each purpose has its own HKDF label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Purpose {
    /// Wraps the versioned data keys kept in the store (from the master key).
    WrapDataKeys,
    /// Keyed content ids and digests (from the master key, so ids survive data-key rotation).
    ContentId,
    /// Keyed lookup ids of names that must stay secret, such as workspace paths.
    LookupId,
    /// The value stored to recognise the right master key (`key-mismatch` detection).
    KeyCheck,
    /// Content, record and path encryption (from a data key).
    Encrypt,
}

impl Purpose {
    fn label(self) -> &'static str {
        match self {
            Purpose::WrapDataKeys => "turnback wrap data keys",
            Purpose::ContentId => "turnback content id",
            Purpose::LookupId => "turnback lookup id",
            Purpose::KeyCheck => "turnback master key check",
            Purpose::Encrypt => "turnback encrypt",
        }
    }
}

/// Fills `buf` from the operating system's random source.
pub(crate) fn fill_random(buf: &mut [u8]) -> Result<()> {
    getrandom::fill(buf).map_err(|e| Error::new(ErrorCode::Io, format!("random source: {e}")))
}

/// What the associated data of an envelope binds: the object's identity and format.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Binding<'a> {
    /// The kind of object (`object`, `record:checkpoints`, `data-key`, …).
    pub kind: &'a str,
    /// The object's id as stored (its key).
    pub id: &'a [u8],
    /// The content class (`file-content`, `binary-blob`, `record`, …).
    pub class: &'a str,
    /// The schema version of the plaintext format.
    pub schema: u16,
    /// The data-key version used.
    pub key_version: u32,
}

impl Binding<'_> {
    fn aad(&self) -> Vec<u8> {
        let mut aad = Vec::with_capacity(64 + self.id.len() * 2);
        aad.extend_from_slice(b"turnback:");
        aad.extend_from_slice(self.kind.as_bytes());
        aad.push(b':');
        aad.extend_from_slice(hex(self.id).as_bytes());
        aad.push(b':');
        aad.extend_from_slice(self.class.as_bytes());
        aad.extend_from_slice(format!(":s{}:k{}", self.schema, self.key_version).as_bytes());
        aad
    }
}

/// Compresses then encrypts `plaintext`; returns `nonce || ciphertext || tag`.
pub(crate) fn seal(key: &SecretKey, binding: Binding<'_>, plaintext: &[u8]) -> Result<Vec<u8>> {
    seal_at_level(key, binding, plaintext, ZSTD_LEVEL)
}

/// [`seal`] with a chosen zstd level (1 for large, often rewritten records such as the
/// stat cache, where speed matters more than size).
pub(crate) fn seal_at_level(key: &SecretKey, binding: Binding<'_>, plaintext: &[u8], level: i32) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    seal_into(key, binding, plaintext, level, &mut out)?;
    Ok(out)
}

/// [`seal_at_level`] appending `nonce || ciphertext || tag` to `out` (after whatever header
/// its caller wrote there): compressed straight into `out` and encrypted in place, so a
/// block is allocated once, not once per step. On an error `out` holds a partial value,
/// to be thrown away.
pub(crate) fn seal_into(
    key: &SecretKey,
    binding: Binding<'_>,
    plaintext: &[u8],
    level: i32,
    out: &mut Vec<u8>,
) -> Result<()> {
    use aes_gcm::aead::AeadInOut;
    out.reserve(NONCE_LEN + zstd::zstd_safe::compress_bound(plaintext.len()) + TAG_LEN);
    let mut nonce = [0u8; NONCE_LEN];
    fill_random(&mut nonce)?;
    out.extend_from_slice(&nonce);
    let start = out.len();
    compress_into(plaintext, level, out)?;
    let cipher = Aes256Gcm::new_from_slice(&key.0).expect("32-byte key");
    let tag = cipher
        .encrypt_inout_detached(&Nonce::<Aes256Gcm>::from(nonce), &binding.aad(), (&mut out[start..]).into())
        .map_err(|_| Error::new(ErrorCode::Io, "encryption failed"))?;
    out.extend_from_slice(&tag);
    // Room was made for the worst case; what compressed well gives the rest back.
    if out.capacity() > out.len() + out.len() / 4 {
        out.shrink_to_fit();
    }
    Ok(())
}

/// zstd with one compression context per thread and level (a snapshot compresses
/// thousands of files per thread; making a context each time is measurable), appending
/// the frame to `out`, whose spare capacity must hold its bound.
fn compress_into(plaintext: &[u8], level: i32, out: &mut Vec<u8>) -> Result<()> {
    use std::cell::RefCell;
    thread_local! {
        static CONTEXTS: RefCell<Vec<(i32, zstd::bulk::Compressor<'static>)>> = const { RefCell::new(Vec::new()) };
    }
    let failed = |e: std::io::Error| Error::new(ErrorCode::Io, format!("compress: {e}"));
    CONTEXTS.with(|cell| {
        let mut contexts = cell.borrow_mut();
        let at = match contexts.iter().position(|(l, _)| *l == level) {
            Some(i) => i,
            None => {
                contexts.push((level, zstd::bulk::Compressor::new(level).map_err(failed)?));
                contexts.len() - 1
            }
        };
        let mut spare = std::io::Cursor::new(out);
        spare.set_position(spare.get_ref().len() as u64);
        contexts[at].1.compress_to_buffer(plaintext, &mut spare).map(drop).map_err(failed)
    })
}

/// Decrypts and decompresses what [`seal`] produced under the same `binding`.
///
/// `max_len` bounds the decompressed size (the recorded size for content), so a tampered
/// frame cannot make us allocate without limit. Any failure is `corrupt`: by the time this
/// runs the master key has been checked, so an authentication failure means altered bytes.
pub(crate) fn open(key: &SecretKey, binding: Binding<'_>, sealed: &[u8], max_len: usize) -> Result<Vec<u8>> {
    let what = binding.kind;
    if sealed.len() < NONCE_LEN + TAG_LEN {
        return Err(Error::corrupt(what, "ciphertext too short"));
    }
    let (nonce, ct) = sealed.split_at(NONCE_LEN);
    let nonce: [u8; NONCE_LEN] = nonce.try_into().expect("split at NONCE_LEN");
    let cipher = Aes256Gcm::new_from_slice(&key.0).expect("32-byte key");
    let aad = binding.aad();
    let compressed = cipher
        .decrypt(&Nonce::<Aes256Gcm>::from(nonce), Payload { msg: ct, aad: &aad })
        .map_err(|_| Error::corrupt(what, "authentication failed (altered ciphertext or metadata)"))?;
    decompress(&compressed, max_len).ok_or_else(|| Error::corrupt(what, "bad compressed frame"))
}

/// What [`open_reader`] returns: the plaintext as it is decompressed, and its size as the
/// frame records it (a bound for the caller's allocations), if it does.
pub(crate) type Opened = (Box<dyn std::io::Read + Send>, Option<u64>);

/// [`open`] for a large record, without holding its plaintext whole: the sealed bytes
/// (nonce, ciphertext, tag) that start at `at` in `value` are authenticated and decrypted in
/// place, and the reader decompresses them as it is read, ending (short, which the caller's
/// format sees as truncation) after `max_len` bytes. Failures are `corrupt`, as in
/// [`open`]; a bad frame shows as a read error.
pub(crate) fn open_reader(
    key: &SecretKey,
    binding: Binding<'_>,
    mut value: Vec<u8>,
    at: usize,
    max_len: usize,
) -> Result<Opened> {
    use aes_gcm::aead::AeadInOut;
    use std::io::Read;
    let what = binding.kind;
    if value.len() < at + NONCE_LEN + TAG_LEN {
        return Err(Error::corrupt(what, "ciphertext too short"));
    }
    let (start, end) = (at + NONCE_LEN, value.len() - TAG_LEN);
    let (nonce, rest) = value[at..].split_at_mut(NONCE_LEN);
    let nonce: [u8; NONCE_LEN] = (&*nonce).try_into().expect("split at NONCE_LEN");
    let (ct, tag) = rest.split_at_mut(end - start);
    let tag = aes_gcm::Tag::try_from(&*tag).map_err(|_| Error::corrupt(what, "bad tag"))?;
    let cipher = Aes256Gcm::new_from_slice(&key.0).expect("32-byte key");
    cipher
        .decrypt_inout_detached(&Nonce::<Aes256Gcm>::from(nonce), &binding.aad(), ct.into(), &tag)
        .map_err(|_| Error::corrupt(what, "authentication failed (altered ciphertext or metadata)"))?;
    let size = zstd::zstd_safe::get_frame_content_size(&value[start..end]).ok().flatten();
    let mut frame = std::io::Cursor::new(value);
    frame.set_position(start as u64);
    let decoder = zstd::stream::read::Decoder::new(frame.take((end - start) as u64))
        .map_err(|_| Error::corrupt(what, "bad compressed frame"))?;
    Ok((Box::new(decoder.take(max_len as u64)), size))
}

/// zstd decompression with one context per thread (a rewind or diff opens thousands of
/// tree nodes; making a context each time showed in profiles).
fn decompress(compressed: &[u8], max_len: usize) -> Option<Vec<u8>> {
    use std::cell::RefCell;
    use std::io::Read;
    // A frame that does not record its size (zstd allows it; this version's seals all
    // record it) is read as a stream into a buffer that grows with it, bounded by
    // `max_len`: the bulk decompressor would reserve all of `max_len` up front.
    if zstd::zstd_safe::get_frame_content_size(compressed).ok()?.is_none() {
        let mut out = Vec::new();
        let decoder = zstd::stream::read::Decoder::with_buffer(compressed).ok()?;
        decoder.take(max_len as u64 + 1).read_to_end(&mut out).ok()?;
        return (out.len() <= max_len).then_some(out);
    }
    thread_local! {
        static CONTEXT: RefCell<Option<zstd::bulk::Decompressor<'static>>> = const { RefCell::new(None) };
    }
    CONTEXT.with(|cell| {
        let mut context = cell.borrow_mut();
        if context.is_none() {
            *context = zstd::bulk::Decompressor::new().ok();
        }
        context.as_mut()?.decompress(compressed, max_len).ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn binding(id: &[u8]) -> Binding<'_> {
        Binding { kind: "object", id, class: "file-content", schema: 1, key_version: 1 }
    }

    #[test]
    fn seal_then_open_round_trips_and_hides_plaintext() {
        let key = SecretKey::random().unwrap();
        let text = "สวัสดีครับ canary-7f3a".repeat(20);
        let sealed = seal(&key, binding(b"a"), text.as_bytes()).unwrap();
        assert!(!sealed.windows(6).any(|w| w == b"canary"));
        let opened = open(&key, binding(b"a"), &sealed, text.len()).unwrap();
        assert_eq!(opened, text.as_bytes());
    }

    #[test]
    fn ciphertext_under_another_id_or_class_is_corrupt() {
        let key = SecretKey::random().unwrap();
        let sealed = seal(&key, binding(b"a"), b"hello").unwrap();
        let err = open(&key, binding(b"b"), &sealed, 5).unwrap_err();
        assert_eq!(err.code, ErrorCode::Corrupt);
        let other_class = Binding { class: "binary-blob", ..binding(b"a") };
        assert_eq!(open(&key, other_class, &sealed, 5).unwrap_err().code, ErrorCode::Corrupt);
        let other_version = Binding { key_version: 2, ..binding(b"a") };
        assert_eq!(open(&key, other_version, &sealed, 5).unwrap_err().code, ErrorCode::Corrupt);
    }

    #[test]
    fn every_flipped_byte_is_detected() {
        let key = SecretKey::random().unwrap();
        let sealed = seal(&key, binding(b"a"), b"some file content").unwrap();
        for i in 0..sealed.len() {
            let mut bad = sealed.clone();
            bad[i] ^= 0x01;
            assert_eq!(open(&key, binding(b"a"), &bad, 100).unwrap_err().code, ErrorCode::Corrupt, "byte {i}");
        }
    }

    #[test]
    fn what_is_sealed_into_a_value_follows_its_header_and_keeps_no_worst_case_room() {
        let key = SecretKey::random().unwrap();
        let text: Vec<u8> = (0..1u32 << 18).flat_map(|i| (i % 613).to_le_bytes()).collect();
        let mut value = b"head".to_vec();
        seal_into(&key, binding(b"a"), &text, 3, &mut value).unwrap();
        assert_eq!(&value[..4], b"head", "appended after what `out` held");
        assert_eq!(open(&key, binding(b"a"), &value[4..], text.len()).unwrap(), text);
        assert!(value.len() < text.len() / 4, "compressed: {} bytes", value.len());
        assert!(value.capacity() <= value.len() + value.len() / 4, "the worst case's room given back");
        // As long as the same plaintext sealed whole (nonce, frame, tag; the nonces differ).
        let whole = seal_at_level(&key, binding(b"a"), &text, 3).unwrap();
        assert_eq!(whole.len(), value.len() - 4);
        // Incompressible bytes fit the room made for them.
        let noise: Vec<u8> = (0..100_000u64).map(|i| (i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 56) as u8).collect();
        let mut value = b"h".to_vec();
        seal_into(&key, binding(b"b"), &noise, 3, &mut value).unwrap();
        assert_eq!(open(&key, binding(b"b"), &value[1..], noise.len()).unwrap(), noise);
    }

    #[test]
    fn a_reader_opens_what_open_opens_and_nothing_altered() {
        use std::io::Read;
        let key = SecretKey::random().unwrap();
        let text: Vec<u8> = (0..300_000u32).flat_map(|i| (i % 977).to_le_bytes()).collect();
        let sealed = seal(&key, binding(b"a"), &text).unwrap();
        let (mut reader, size) = open_reader(&key, binding(b"a"), sealed.clone(), 0, usize::MAX).unwrap();
        let mut back = Vec::new();
        reader.read_to_end(&mut back).unwrap();
        assert_eq!((back == text, size), (true, Some(text.len() as u64)));
        // It stops at the bound it is given.
        let (mut reader, _) = open_reader(&key, binding(b"a"), sealed.clone(), 0, 1000).unwrap();
        let mut bounded = Vec::new();
        reader.read_to_end(&mut bounded).unwrap();
        assert_eq!(bounded, text[..1000]);
        for i in [0, NONCE_LEN, sealed.len() / 2, sealed.len() - 1] {
            let mut bad = sealed.clone();
            bad[i] ^= 0x01;
            let err = open_reader(&key, binding(b"a"), bad, 0, usize::MAX).err().expect("altered bytes open");
            assert_eq!(err.code, ErrorCode::Corrupt, "byte {i}");
        }
        assert!(open_reader(&key, binding(b"b"), sealed, 0, usize::MAX).is_err(), "another id");
    }

    #[test]
    fn subkeys_differ_per_purpose_and_are_stable() {
        let k = SecretKey([7u8; 32]);
        assert_ne!(k.derive(Purpose::ContentId), k.derive(Purpose::Encrypt));
        assert_eq!(k.derive(Purpose::ContentId), k.derive(Purpose::ContentId));
    }

    #[test]
    fn mac_parts_are_unambiguous() {
        let k = SecretKey([1u8; 32]);
        assert_ne!(k.mac(&[b"ab", b"c"]), k.mac(&[b"a", b"bc"]));
    }

    #[test]
    fn a_mac_fed_in_pieces_equals_the_mac_of_the_whole_and_needs_every_byte() {
        let k = SecretKey([2u8; 32]);
        let whole: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        let mut streaming = k.mac_streaming(&[b"content"], whole.len() as u64);
        for piece in whole.chunks(999) {
            streaming.update(piece);
        }
        assert_eq!(streaming.finish(), Some(k.mac(&[b"content", &whole])));
        let mut short = k.mac_streaming(&[b"content"], whole.len() as u64);
        short.update(&whole[..9_999]);
        assert_eq!(short.finish(), None, "fewer bytes than announced make no MAC");
    }
}
