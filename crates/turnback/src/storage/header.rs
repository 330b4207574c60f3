//! The one plain header every sealed value in the store begins with: a three-byte magic
//! naming the format (`TR1` sealed record, `TO1` object, `TB1` packed block), the data-key
//! version that encrypts it and the schema version of its plaintext. Formats add their own
//! plain fields after it (an object's class and size, a block's length).
//!
//! Invariants: every field here is also bound into the ciphertext's associated data, so a
//! header altered in place makes the value fail to open (`corrupt`); [`read`] never
//! panics, whatever the bytes.

use crate::error::{Error, Result};

/// Bytes of the common header.
pub(crate) const LEN: usize = 3 + 4 + 2;

/// The common header's fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    /// The data-key version the value is encrypted under.
    pub key_version: u32,
    /// The schema version of its plaintext.
    pub schema: u16,
}

/// Appends the header of a value in format `magic`.
pub(crate) fn write(out: &mut Vec<u8>, magic: &[u8; 3], header: Header) {
    out.extend_from_slice(magic);
    out.extend_from_slice(&header.key_version.to_be_bytes());
    out.extend_from_slice(&header.schema.to_be_bytes());
}

/// Reads the header of a value in format `magic`; returns it and the bytes after it.
///
/// # Errors
/// `corrupt` (naming `what`) if the value is too short or of another format.
pub(crate) fn read<'a>(value: &'a [u8], magic: &[u8; 3], what: &str) -> Result<(Header, &'a [u8])> {
    let Some((head, rest)) = value.split_first_chunk::<LEN>() else {
        return Err(Error::corrupt(what, "bad header"));
    };
    let (found, fields) = head.split_first_chunk::<3>().expect("LEN > 3");
    if found != magic {
        return Err(Error::corrupt(what, "bad header"));
    }
    let (version, schema) = fields.split_first_chunk::<4>().expect("4 + 2 bytes");
    let schema: [u8; 2] = schema.try_into().expect("2 bytes");
    Ok((Header { key_version: u32::from_be_bytes(*version), schema: u16::from_be_bytes(schema) }, rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_rejects_other_formats_and_short_values() {
        let mut out = Vec::new();
        write(&mut out, b"TR1", Header { key_version: 7, schema: 2 });
        out.extend_from_slice(b"rest");
        let (h, rest) = read(&out, b"TR1", "record").unwrap();
        assert_eq!((h, rest), (Header { key_version: 7, schema: 2 }, &b"rest"[..]));
        assert!(read(&out, b"TO1", "object").is_err());
        for cut in 0..LEN {
            assert!(read(&out[..cut], b"TR1", "record").is_err());
        }
    }
}
