//! The writes of an undo (step 6 of [guarded apply](crate::undo::guarded)), batched: made
//! with the durability work done once for many files, not once per file.
//!
//! One file at a time, a write costs two syncs (its temporary file, then its directory),
//! each a wait on the disk: 10,000 files took tens of seconds. Here:
//! 1. removals go first, all of them, each a compare-and-swap (moved aside, checked,
//!    unlinked) — so a directory that replaced a file is empty before the file comes back;
//! 2. files to put in place go in chunks (at most [`CHUNK_FILES`] files in
//!    [`CHUNK_DIRS`] directories, one handle per directory): every temporary file of a
//!    chunk is written under its writing name, then one sync of the file system makes them
//!    all durable, then each takes its swapping name and is swapped in with the usual
//!    compare-and-swap (failpoint `write-temp-synced` before each swap);
//! 3. the failpoint `…-written`: every write made, nothing of step 2's names synced yet;
//! 4. one more sync of the file system makes every name durable.
//!
//! The writing and checking of steps 1 and 2 run on a few threads.
//!
//! Invariants: each file's replacement stays atomic (a temporary file is complete and
//! durable before it takes its swapping name, and only a swapping-named file is ever
//! swapped in) and guarded (the compare-and-swaps of [`files::Parent::swap_synced`] and
//! [`files::Parent::remove_if_unsynced`], unchanged); the caller records the undo as done
//! only after step 4, so the journal never says a write happened that a power cut could
//! still take back. A crash anywhere leaves each path old or new, plus temporary files
//! named by the undo's checkpoint id, which `reconcile` settles as it settles one. An I/O
//! failure stops what has not started: staged temporary files are removed, the writes made
//! so far are synced and counted.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};

use rayon::prelude::*;

use crate::base::failpoint;
use crate::base::hex::hex;
use crate::error::{Error, ErrorCode, Result};
use crate::fs::files::Current;
use crate::fs::files::{self, Expect, FileIdentity, FileSystem, Parent, Swap};
use crate::fs::relpath::RelPath;
use crate::storage::keys::KeyRing;

/// Files written before one sync of the file system, at most.
const CHUNK_FILES: usize = 1024;
/// Directories a chunk holds open, at most (one handle each).
const CHUNK_DIRS: usize = 128;
/// Threads writing, reading back and checking files.
const THREADS: usize = 4;

/// What must be at a path for its write to go ahead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Expected {
    /// Nothing.
    Absent,
    /// A regular file with this keyed digest (and, when known, this inode).
    File { digest: String, inode: Option<u64> },
}

/// What a path is to hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Intended {
    /// A file with these bytes and permission bits.
    File { bytes: Vec<u8>, mode: Option<u32> },
    /// Nothing.
    Absent,
}

/// One path an undo writes.
#[derive(Debug, Clone)]
pub(crate) struct Write {
    pub path: RelPath,
    pub expected: Expected,
    /// What is there, with its real bytes (kept in the undo's checkpoint).
    pub current: Current,
    pub intended: Intended,
    /// Missing parent directories are made (a file coming back where none is).
    pub make_parents: bool,
    /// An empty directory standing at the path gives way (one the undone turns put where
    /// the file was).
    pub clear_empty_dir: bool,
}

/// What became of one write: `None` if it was not tried (an I/O failure stopped the batch
/// before it).
pub(crate) type Outcome = Option<Result<Swap>>;

/// Makes `writes` (see the module docs) for the undo whose checkpoint is `checkpoint_id`;
/// returns each write's outcome, by index. `written` is the failpoint hit once every write
/// was made, before the last sync.
///
/// # Errors
/// `io` if the file system cannot be synced (the writes made are then not all durable).
pub(crate) fn write_all(
    keys: &KeyRing,
    root: &std::path::Path,
    writes: &[Write],
    checkpoint_id: &str,
    written: &str,
) -> Result<Vec<Outcome>> {
    let fs = FileSystem::of(root)?;
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(THREADS)
        .thread_name(|i| format!("turnback-write-{i}"))
        .build()
        .map_err(|e| Error::new(ErrorCode::Io, format!("cannot start the writing threads: {e}")))?;
    let stop = AtomicBool::new(false);
    let mut outcomes: Vec<Outcome> = (0..writes.len()).map(|_| None).collect();
    let (removals, puts): (Vec<usize>, Vec<usize>) =
        (0..writes.len()).partition(|&i| matches!(writes[i].intended, Intended::Absent));
    pool.install(|| -> Result<()> {
        let removed: Vec<(usize, Result<Swap>)> = removals
            .par_iter()
            .filter(|_| !stop.load(Ordering::SeqCst))
            .map(|&i| {
                let w = &writes[i];
                let temp = files::temp_name(&w.path, checkpoint_id);
                let r = match files::open_parent(root, &w.path, false) {
                    Ok(parent) => parent.remove_if_unsynced(&temp, &matcher(keys, &w.expected)),
                    Err(e) if e.code == ErrorCode::NotFound => Ok(Swap::Done),
                    Err(e) => Err(e),
                };
                note_stop(&stop, &r);
                (i, r)
            })
            .collect();
        for (i, r) in removed {
            outcomes[i] = Some(r);
        }
        for chunk in chunks(writes, &puts) {
            if stop.load(Ordering::SeqCst) {
                break;
            }
            // One handle per directory (made if missing, in order), shared by its files.
            let mut dirs: HashMap<(&[u8], bool), Result<Option<Parent>>> = HashMap::new();
            let parents: Vec<(usize, Result<Option<Parent>>)> = chunk
                .iter()
                .map(|&i| {
                    let w = &writes[i];
                    let dir = dir_of(w.path.as_bytes());
                    let opened = dirs.entry((dir, w.make_parents)).or_insert_with(|| open(root, w));
                    let parent = match opened {
                        Ok(Some(p)) => Ok(Some(p.sibling(&w.path))),
                        Ok(None) => Ok(None),
                        Err(e) => Err(Error::new(e.code, e.message.clone())),
                    };
                    (i, parent)
                })
                .collect();
            // Every temporary file of the chunk written, none synced.
            let staged: Vec<(usize, Result<Option<Parent>>)> = parents
                .into_par_iter()
                .map(|(i, parent)| {
                    let r = parent.and_then(|p| match p {
                        Some(p) => stage(&p, &writes[i], checkpoint_id).map(|()| Some(p)),
                        None => Ok(None),
                    });
                    note_stop(&stop, &r);
                    (i, r)
                })
                .collect();
            // All durable at once, or none is swapped in.
            let synced = fs.sync();
            if synced.is_err() {
                stop.store(true, Ordering::SeqCst);
            }
            // Then each named complete and swapped in.
            let done: Vec<(usize, Outcome)> = staged
                .into_par_iter()
                .map(|(i, r)| {
                    let w = &writes[i];
                    let temp = files::temp_name(&w.path, checkpoint_id);
                    let parent = match r {
                        Ok(Some(parent)) => parent,
                        Ok(None) => return (i, Some(Ok(Swap::Changed))),
                        Err(e) => return (i, Some(Err(e))),
                    };
                    if stop.load(Ordering::SeqCst) {
                        parent.discard_staged(&temp);
                        return (i, None);
                    }
                    let m = matcher(keys, &w.expected);
                    let expect = match w.expected {
                        Expected::Absent => Expect::Absent,
                        Expected::File { .. } => Expect::File(&m),
                    };
                    let r = parent.seal_staged(&temp).and_then(|()| {
                        failpoint::hit("write-temp-synced");
                        parent.swap_synced(&temp, &expect)
                    });
                    note_stop(&stop, &r);
                    (i, Some(r))
                })
                .collect();
            for (i, r) in done {
                outcomes[i] = r;
            }
            synced?;
        }
        Ok(())
    })?;
    failpoint::hit(written);
    fs.sync()?;
    Ok(outcomes)
}

/// The writes of `puts`, cut into chunks of at most [`CHUNK_FILES`] files in at most
/// [`CHUNK_DIRS`] directories.
fn chunks<'a>(writes: &[Write], puts: &'a [usize]) -> Vec<&'a [usize]> {
    let mut out = Vec::new();
    let (mut start, mut dirs) = (0, std::collections::HashSet::new());
    for (k, &i) in puts.iter().enumerate() {
        let dir = dir_of(writes[i].path.as_bytes());
        if k - start == CHUNK_FILES || (!dirs.contains(dir) && dirs.len() == CHUNK_DIRS) {
            out.push(&puts[start..k]);
            start = k;
            dirs.clear();
        }
        dirs.insert(dir);
    }
    if start < puts.len() {
        out.push(&puts[start..]);
    }
    out
}

/// The check a compare-and-swap makes of what it finds at a path: the digest (and, when
/// known, the inode) the plan saw.
fn matcher<'a>(keys: &'a KeyRing, expected: &'a Expected) -> impl Fn(&[u8], &FileIdentity) -> bool + 'a {
    move |bytes: &[u8], identity: &FileIdentity| match expected {
        Expected::File { digest, inode } => {
            *digest == hex(&keys.content_id(bytes)) && inode.is_none_or(|ino| ino == identity.inode)
        }
        Expected::Absent => false,
    }
}

/// Opens the directory of write `w` (making it, if the write asks); `None` if it is gone
/// (the target moved).
fn open(root: &std::path::Path, w: &Write) -> Result<Option<Parent>> {
    match files::open_parent(root, &w.path, w.make_parents) {
        Ok(parent) => Ok(Some(parent)),
        Err(e) if e.code == ErrorCode::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Stages write `w`'s temporary file in `parent`, an empty directory standing at the
/// target cleared first if the write asks.
fn stage(parent: &Parent, w: &Write, checkpoint_id: &str) -> Result<()> {
    let Intended::File { bytes, mode } = &w.intended else {
        return Err(Error::invalid("a removal is not staged"));
    };
    if w.clear_empty_dir {
        parent.clear_empty_dir();
    }
    parent.stage(&files::temp_name(&w.path, checkpoint_id), bytes, *mode)
}

/// The directory part of a relative path (`""` for the root).
fn dir_of(path: &[u8]) -> &[u8] {
    path.iter().rposition(|c| *c == b'/').map_or(&[][..], |at| &path[..at])
}

/// Sets `stop` on an I/O failure (not on an obstacle: that leaves one path alone).
fn note_stop<T>(stop: &AtomicBool, r: &Result<T>) {
    if r.as_ref().is_err_and(|e| !is_obstacle(e.code)) {
        stop.store(true, Ordering::SeqCst);
    }
}

/// Errors that leave one path alone rather than stopping the undo (see
/// [`guarded`](crate::undo::guarded)): something about that path stands in the way. An
/// I/O failure (a full disk, a failing device) is not one: it stops the undo.
pub(crate) fn is_obstacle(code: ErrorCode) -> bool {
    matches!(code, ErrorCode::PathRejected | ErrorCode::NotFound | ErrorCode::Inaccessible)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dir_of_a_path_is_what_precedes_its_last_slash() {
        assert_eq!(dir_of(b"a.txt"), b"");
        assert_eq!(dir_of(b"d/e/f.txt"), b"d/e");
    }
}
