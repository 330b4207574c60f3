//! `fs edit`: the exact-string replacement, of a file held in memory ([`replace_exact`])
//! and of one too large to hold, streamed from the file into the store ([`edit_open`]) so
//! that memory does not grow with the file's size.
//!
//! Invariants:
//! - One pass reads the file: it hashes the original (the compare-and-swap's expectation,
//!   so a file changed since is never overwritten) and packs the edited content into the
//!   store as it goes; the edited content is then written from the store in pieces.
//! - The rules are [`check_occurrences`], as for a held file: no match, or more
//!   than one without `all`, is refused (the edited content kept so far is left for `gc`).

use std::collections::VecDeque;
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::Path;

use crate::base::replace::{Out, Replacer};
use crate::error::{Error, ErrorCode, Result};
use crate::storage::body::{self as storage_body, Kept};
use crate::storage::content::ContentId;
use crate::storage::crypto::StreamingMac;
use crate::storage::store::Store;

/// Bytes of the file read at a time: small, since each occurrence in a piece is one mark.
const EDIT_PIECE: usize = 64 << 10;

/// The edit of an open file: the edited content (kept in the store), how many occurrences
/// were replaced, and the keyed id of the original the edit was made from.
pub(crate) struct Edited {
    pub kept: Kept,
    pub replacements: usize,
    pub original: ContentId,
}

/// Replaces `old` by `new` in the `size` bytes of `file` as it reads them (see the module
/// docs). The caller holds the objects lock shared until the checkpoint naming the edited
/// content commits.
///
/// # Errors
/// `edit-no-match`, `edit-not-unique` (naming `shown`); `conflict` if the file changed
/// while it was read; `io`.
pub(crate) fn edit_open(
    store: &Store,
    (file, size): (&File, u64),
    (old, new, all): (&[u8], &[u8], bool),
    shown: &std::path::Path,
) -> Result<Edited> {
    let mut reader = EditedReader {
        file,
        size,
        at: 0,
        replacer: Some(Replacer::new(old)),
        new,
        outs: VecDeque::new(),
        new_at: 0,
        mac: Some(store.keys().content_id_streaming(size)),
        replacements: 0,
        original: None,
        failed: None,
    };
    let kept = storage_body::keep_input(store.keys(), store.kv(), &mut reader, u64::MAX);
    if let Some(e) = reader.failed.take() {
        return Err(e);
    }
    let kept = kept?;
    let original = reader.original.ok_or_else(|| Error::new(ErrorCode::Conflict, "a file changed while read"))?;
    check_occurrences(reader.replacements, all, shown)?;
    Ok(Edited { kept, replacements: reader.replacements, original })
}

/// The rule on how many occurrences an edit found: at least one, and exactly one unless
/// `all`.
///
/// # Errors
/// `edit-no-match`, `edit-not-unique` (naming `shown`).
pub(crate) fn check_occurrences(n: usize, all: bool, shown: &std::path::Path) -> Result<()> {
    match n {
        0 => {
            Err(Error::new(ErrorCode::EditNoMatch, format!("{}: the string to replace was not found", shown.display())))
        }
        n if n > 1 && !all => Err(Error::new(
            ErrorCode::EditNotUnique,
            format!(
                "{}: the string to replace occurs {n} times; give more context to make it unique, or use --all",
                shown.display()
            ),
        )),
        _ => Ok(()),
    }
}

/// The edited content of a file as a stream (see [`edit_open`]).
struct EditedReader<'a> {
    file: &'a File,
    size: u64,
    at: u64,
    replacer: Option<Replacer>,
    new: &'a [u8],
    outs: VecDeque<Out>,
    /// How much of the front [`Out::New`] was read already.
    new_at: usize,
    mac: Option<StreamingMac>,
    replacements: usize,
    original: Option<ContentId>,
    /// The error that ended the stream (the caller's, not an I/O error of its own).
    failed: Option<Error>,
}

impl EditedReader<'_> {
    /// Reads the next piece of the file into `outs`; at its end, closes the replacement.
    fn refill(&mut self) -> Result<()> {
        let Some(replacer) = self.replacer.as_mut() else { return Ok(()) };
        let mut piece = vec![0u8; EDIT_PIECE];
        let mut out = Vec::new();
        if self.at < self.size {
            let want = piece.len().min(usize::try_from(self.size - self.at).unwrap_or(usize::MAX));
            let n = self
                .file
                .read_at(&mut piece[..want], self.at)
                .map_err(|e| Error::new(ErrorCode::Io, format!("reading a file: {e}")).with_source(e))?;
            if n == 0 {
                return Err(Error::new(ErrorCode::Conflict, "a file changed while turnback read it"));
            }
            self.at += n as u64;
            if let Some(mac) = self.mac.as_mut() {
                mac.update(&piece[..n]);
            }
            replacer.feed(&piece[..n], &mut out);
        } else {
            if self.file.metadata().map(|m| m.len()).ok() != Some(self.size) {
                return Err(Error::new(ErrorCode::Conflict, "a file changed while turnback read it"));
            }
            self.replacements = self.replacer.take().expect("checked above").finish(&mut out);
            self.original = self.mac.take().and_then(StreamingMac::finish).map(ContentId);
        }
        self.outs.extend(out);
        Ok(())
    }
}

impl Read for EditedReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        loop {
            while self.outs.is_empty() && self.replacer.is_some() {
                if let Err(e) = self.refill() {
                    let message = e.message.clone();
                    self.failed = Some(e);
                    return Err(std::io::Error::other(message));
                }
            }
            let Some(front) = self.outs.front_mut() else { return Ok(0) };
            let n = match front {
                Out::Kept(bytes) => {
                    let n = bytes.len().min(buf.len());
                    buf[..n].copy_from_slice(&bytes[..n]);
                    bytes.drain(..n);
                    n
                }
                Out::New => {
                    let rest = &self.new[self.new_at..];
                    let n = rest.len().min(buf.len());
                    buf[..n].copy_from_slice(&rest[..n]);
                    self.new_at += n;
                    n
                }
            };
            let done = match front {
                Out::Kept(bytes) => bytes.is_empty(),
                Out::New => self.new_at == self.new.len(),
            };
            if done {
                self.new_at = 0;
                self.outs.pop_front();
            }
            // An empty replacement gives nothing: go on to what follows it.
            if n > 0 || buf.is_empty() {
                return Ok(n);
            }
        }
    }
}

/// Replaces `old` by `new` in `bytes`: exactly one occurrence, or all with `all`.
///
/// # Errors
/// `edit-no-match` if `old` does not occur, `edit-not-unique` if it occurs more than once
/// without `all`, `invalid-argument` if `old` is empty or equal to `new`.
pub(crate) fn replace_exact(bytes: &[u8], old: &[u8], new: &[u8], all: bool, shown: &Path) -> Result<(Vec<u8>, usize)> {
    check_edit(old, new)?;
    let positions: Vec<usize> = find_all(bytes, old);
    check_occurrences(positions.len(), all, shown)?;
    let mut out = Vec::with_capacity(bytes.len() + positions.len() * new.len());
    let mut last = 0;
    for p in &positions {
        out.extend_from_slice(&bytes[last..*p]);
        out.extend_from_slice(new);
        last = p + old.len();
    }
    out.extend_from_slice(&bytes[last..]);
    Ok((out, positions.len()))
}

/// The strings of an edit, checked before any file is read.
///
/// # Errors
/// `invalid-argument` if `old` is empty or equal to `new`.
pub(super) fn check_edit(old: &[u8], new: &[u8]) -> Result<()> {
    if old.is_empty() {
        return Err(Error::invalid("the string to replace (--old) must not be empty"));
    }
    if old == new {
        return Err(Error::invalid("--old and --new are the same; nothing would change"));
    }
    Ok(())
}

fn find_all(haystack: &[u8], needle: &[u8]) -> Vec<usize> {
    let mut out = Vec::new();
    let mut i = 0;
    while i + needle.len() <= haystack.len() {
        if &haystack[i..i + needle.len()] == needle {
            out.push(i);
            i += needle.len();
        } else {
            i += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_replacement_rules() {
        let p = Path::new("f");
        assert_eq!(replace_exact(b"a b a", b"b", b"c", false, p).unwrap(), (b"a c a".to_vec(), 1));
        assert_eq!(replace_exact(b"a b a", b"a", b"x", false, p).unwrap_err().code, ErrorCode::EditNotUnique);
        assert_eq!(replace_exact(b"a b a", b"a", b"x", true, p).unwrap(), (b"x b x".to_vec(), 2));
        assert_eq!(replace_exact(b"a b a", b"z", b"x", false, p).unwrap_err().code, ErrorCode::EditNoMatch);
        assert_eq!(replace_exact(b"aaa", b"aa", b"b", true, p).unwrap(), (b"ba".to_vec(), 1));
        assert!(replace_exact(b"a", b"", b"x", false, p).is_err());
        assert!(replace_exact(b"a", b"a", b"a", false, p).is_err());
    }
}
