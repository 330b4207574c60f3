//! A regular file's content as turnback carries it from a read to a write: held in memory
//! when small, otherwise never whole.
//!
//! Invariants:
//! - A file over [`HELD_MAX`] bytes is never read whole into memory: it stays open
//!   ([`Body::Open`]) and is read again from its start, in pieces, each time its bytes are
//!   needed; a read that finds the file shorter or longer than it was is an error
//!   (`conflict`: it changed while turnback read it), never a prefix taken for the whole.
//! - [`Body::Stored`] names content the store holds by its keyed id; only the layers that
//!   hold the store read it ([`Source`] is how they hand its bytes to a write here).
//! - Every piece handed out is at most [`PIECE`] bytes, so a pass over a body holds one
//!   piece whatever the body's size.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use crate::error::{Error, ErrorCode, Result};

/// The largest file read whole into memory; larger ones are carried open (see the module
/// docs). Small enough that the few copies a write makes stay far under the memory bound.
pub(crate) const HELD_MAX: u64 = 4 << 20;
/// Bytes per piece of a pass over a body.
pub(crate) const PIECE: usize = 1 << 20;

/// A file's content (see the module docs).
#[derive(Debug, Clone)]
pub(crate) enum Body {
    /// The bytes themselves.
    Held(Vec<u8>),
    /// A file too large to hold, open for reading; `size` bytes when it was opened.
    Open { file: Arc<File>, size: u64 },
    /// Content the store holds: its keyed id and size.
    Stored { id: [u8; 32], size: u64 },
}

impl Body {
    /// Its size in bytes.
    pub(crate) fn size(&self) -> u64 {
        match self {
            Body::Held(bytes) => bytes.len() as u64,
            Body::Open { size, .. } | Body::Stored { size, .. } => *size,
        }
    }

    /// The bytes, if they are held.
    pub(crate) fn held(&self) -> Option<&[u8]> {
        match self {
            Body::Held(bytes) => Some(bytes),
            _ => None,
        }
    }
}

/// Something whose bytes can be poured, in pieces of at most [`PIECE`] bytes, into a write.
pub(crate) trait Source {
    /// Hands every byte to `out`, in order, in pieces.
    ///
    /// # Errors
    /// Whatever reading the bytes or `out` returns.
    fn pour(&self, out: &mut dyn FnMut(&[u8]) -> Result<()>) -> Result<()>;
}

impl Source for &[u8] {
    fn pour(&self, out: &mut dyn FnMut(&[u8]) -> Result<()>) -> Result<()> {
        self.chunks(PIECE).try_for_each(out)
    }
}

impl Source for Vec<u8> {
    fn pour(&self, out: &mut dyn FnMut(&[u8]) -> Result<()>) -> Result<()> {
        self.as_slice().chunks(PIECE).try_for_each(out)
    }
}

/// Reads the `size` bytes of an open file from its start, in pieces, handing each to `out`.
///
/// # Errors
/// `conflict` if the file is no longer `size` bytes long; `io`; whatever `out` returns.
pub(crate) fn read_open(file: &File, size: u64, out: &mut dyn FnMut(&[u8]) -> Result<()>) -> Result<()> {
    let changed = || Error::new(ErrorCode::Conflict, "a file changed while turnback read it");
    let mut buf = vec![0u8; PIECE.min(usize::try_from(size).unwrap_or(PIECE)).max(1)];
    let mut at = 0u64;
    while at < size {
        let want = buf.len().min(usize::try_from(size - at).unwrap_or(usize::MAX));
        let n = match file.read_at(&mut buf[..want], at) {
            Ok(0) => return Err(changed()),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Error::new(ErrorCode::Io, format!("reading a file: {e}")).with_source(e)),
        };
        out(&buf[..n])?;
        at += n as u64;
    }
    if file.metadata().map(|m| m.len()).ok() != Some(size) {
        return Err(changed());
    }
    Ok(())
}

/// Reads a body whole into memory (for the few uses that need every byte at once: an
/// exact-string edit, a merge); `None` for a stored body (its bytes are in the store).
///
/// # Errors
/// As [`read_open`].
pub(crate) fn read_whole(body: &Body) -> Result<Option<Vec<u8>>> {
    match body {
        Body::Held(bytes) => Ok(Some(bytes.clone())),
        Body::Open { file, size } => {
            let mut out = Vec::new();
            read_open(file, *size, &mut |piece| {
                out.extend_from_slice(piece);
                Ok(())
            })?;
            Ok(Some(out))
        }
        Body::Stored { .. } => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn an_open_body_that_changed_size_is_refused_rather_than_read_as_a_prefix() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, vec![b'a'; 3 * PIECE + 7]).unwrap();
        let file = File::open(&path).unwrap();
        let mut seen = Vec::new();
        read_open(&file, 3 * PIECE as u64 + 7, &mut |p| {
            assert!(p.len() <= PIECE);
            seen.push(p.len());
            Ok(())
        })
        .unwrap();
        assert_eq!(seen.iter().sum::<usize>(), 3 * PIECE + 7);
        std::fs::OpenOptions::new().append(true).open(&path).unwrap().write_all(b"more").unwrap();
        let grown = read_open(&file, 3 * PIECE as u64 + 7, &mut |_| Ok(())).unwrap_err();
        assert_eq!(grown.code, ErrorCode::Conflict);
        let shrunk = read_open(&file, 5 * PIECE as u64, &mut |_| Ok(())).unwrap_err();
        assert_eq!(shrunk.code, ErrorCode::Conflict);
    }
}
