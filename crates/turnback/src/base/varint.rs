//! LEB128 variable-length integers for compact binary formats (packed index, stat cache).
//!
//! Invariants: [`take`] (and [`read`]) accept exactly what [`put`] writes for every `u64`, and return
//! `None` (never panics, never wraps) on truncated or over-long input.

/// Appends `v`, seven bits per byte, low bits first.
pub(crate) fn put(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Reads one integer from the front of `bytes` and advances past it.
pub(crate) fn take(bytes: &mut &[u8]) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let (&b, rest) = bytes.split_first()?;
        *bytes = rest;
        let bits = u64::from(b & 0x7f);
        if shift == 63 && bits > 1 {
            return None;
        }
        v |= bits << shift;
        if b & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

/// Reads one integer from `r` as [`take`] does from a slice (`None`: truncated, over-long,
/// or a read error).
pub(crate) fn read(r: &mut impl std::io::Read) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let mut b = [0u8; 1];
        r.read_exact(&mut b).ok()?;
        let bits = u64::from(b[0] & 0x7f);
        if shift == 63 && bits > 1 {
            return None;
        }
        v |= bits << shift;
        if b[0] & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    #[test]
    fn round_trips_edges_and_rejects_truncation() {
        for v in [0, 1, 127, 128, 300, u64::from(u32::MAX), u64::MAX - 1, u64::MAX] {
            let mut out = Vec::new();
            super::put(&mut out, v);
            let mut slice = out.as_slice();
            assert_eq!(super::take(&mut slice), Some(v));
            assert!(slice.is_empty());
            let mut reader = out.as_slice();
            assert_eq!(super::read(&mut reader), Some(v));
            assert!(reader.is_empty());
            assert_eq!(super::read(&mut &out[..out.len() - 1]), None);
            let mut short = &out[..out.len() - 1];
            assert_eq!(super::take(&mut short), None);
        }
        let mut too_long: &[u8] = &[0xff; 11];
        assert_eq!(super::take(&mut too_long), None);
        assert_eq!(super::read(&mut &[0xff; 11][..]), None);
    }
}
