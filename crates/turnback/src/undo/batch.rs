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
//!    all durable (on its own thread, while the next chunk is being written), then each takes its swapping
//!    name and is swapped in with the usual compare-and-swap — or, for a path that is to
//!    be created, takes the path's name with a no-replace rename — (failpoint
//!    `write-temp-synced` before each swap);
//! 3. the failpoint `…-written`: every write made, the last chunk's names not synced yet;
//! 4. one more sync of the file system makes every name durable.
//!
//! Step 1 runs on [`REMOVING_THREADS`] threads (removals wait on the device), step 2 on
//! one per core, at most [`WRITING_THREADS`] (creating files is CPU work in the kernel).
//!
//! Invariants: each file's replacement stays atomic (a temporary file is complete and
//! durable before it takes its swapping name or, for a create, the path's name; only a
//! swapping-named file is ever swapped with another) and guarded (the compare-and-swaps
//! of [`files::Parent::swap_synced`], [`files::Parent::create_staged`] and
//! [`files::Parent::remove_if_unsynced`]); a chunk is swapped in only after a sync that
//! began once its last file was written. The caller records the undo as done
//! only after step 4, so the journal never says a write happened that a power cut could
//! still take back. A crash anywhere leaves each path old or new, plus temporary files
//! named by the undo's checkpoint id, which `reconcile` settles as it settles one. An I/O
//! failure stops what has not started — the chunk waiting for its sync included, though
//! it is written: staged temporary files are removed, the writes made
//! so far are synced and counted.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};

use rayon::prelude::*;

use crate::base::failpoint;
use crate::error::{Error, ErrorCode, Result};
use crate::fs::body::Body;
use crate::fs::files::Current;
use crate::fs::files::{self, Expect, FileIdentity, FileSystem, Parent, Swap};
use crate::fs::relpath::RelPath;
use crate::storage::body::{self as storage_body, Pour};
use crate::storage::keys::KeyRing;
use crate::storage::kv::KeyValueStore;

/// Files written before one sync of the file system, at most.
const CHUNK_FILES: usize = 1024;
/// Directories a chunk holds open, at most (one handle each).
const CHUNK_DIRS: usize = 128;
/// Threads writing files, at most (see [`writing_threads`]).
const WRITING_THREADS: usize = 4;
/// Threads removing files. A removal mostly waits: for the file's blocks to be freed
/// (with online discard, a request to the device per file) and its bytes read back for
/// the check, so many wait at once (each holding one file's bytes while it checks them).
const REMOVING_THREADS: usize = 16;

/// What must be at a path for its write to go ahead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Expected {
    /// Nothing.
    Absent,
    /// A regular file with this keyed digest (and, when known, this inode).
    File { digest: String, inode: Option<u64> },
}

/// What a path is to hold.
#[derive(Debug, Clone)]
pub(crate) enum Intended {
    /// A file with this content and these permission bits.
    File { body: Body, mode: Option<u32> },
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
    kv: &dyn KeyValueStore,
    root: &std::path::Path,
    writes: &[Write],
    checkpoint_id: &str,
    written: &str,
) -> Result<Vec<Outcome>> {
    let fs = FileSystem::of(root)?;
    let batch = Batch { keys, kv, root, writes, checkpoint_id, stop: AtomicBool::new(false) };
    let mut outcomes: Vec<Outcome> = (0..writes.len()).map(|_| None).collect();
    let (removals, puts): (Vec<usize>, Vec<usize>) =
        (0..writes.len()).partition(|&i| matches!(writes[i].intended, Intended::Absent));
    // Both pools exist before anything is written: failing to start threads changes nothing.
    let removing = if removals.is_empty() { None } else { Some(pool("remove", REMOVING_THREADS)?) };
    let writing = if puts.is_empty() { None } else { Some(pool("write", writing_threads())?) };
    if let Some(removing) = removing {
        for (i, r) in removing.install(|| batch.remove(&removals)) {
            outcomes[i] = Some(r);
        }
    }
    if let Some(writing) = writing {
        writing.install(|| batch.put(&fs, &puts, &mut outcomes))?;
    }
    failpoint::hit(written);
    fs.sync()?;
    Ok(outcomes)
}

/// Threads writing and swapping in files: one per core, at most [`WRITING_THREADS`].
/// Creating files is the kernel's work under each directory's lock, so threads past the
/// cores only contend.
fn writing_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, WRITING_THREADS)
}

/// A pool of `threads` threads, named for what they do, for one step of the batch.
fn pool(does: &'static str, threads: usize) -> Result<rayon::ThreadPool> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .thread_name(move |i| format!("turnback-{does}-{i}"))
        .build()
        .map_err(|e| Error::new(ErrorCode::Io, format!("cannot start the {does} threads: {e}")))
}

/// A write (by index) and its directory's handle — `None` if the directory is gone (the
/// target moved) — or why the directory could not be opened; once staged, or why the
/// temporary file could not be written.
type Staged = (usize, Result<Option<Parent>>);

/// One undo's writes, and whether an I/O failure stopped them.
struct Batch<'a> {
    keys: &'a KeyRing,
    kv: &'a dyn KeyValueStore,
    root: &'a std::path::Path,
    writes: &'a [Write],
    checkpoint_id: &'a str,
    stop: AtomicBool,
}

impl Batch<'_> {
    fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// Stages write `w`'s temporary file in `parent` (its content poured in pieces), an
    /// empty directory standing at the target cleared first if the write asks.
    fn stage_write(&self, parent: &Parent, w: &Write) -> Result<()> {
        let Intended::File { body, mode } = &w.intended else {
            return Err(Error::invalid("a removal is not staged"));
        };
        if w.clear_empty_dir {
            parent.clear_empty_dir();
        }
        let source = Pour { keys: self.keys, kv: self.kv, body };
        parent.stage(&files::temp_name(&w.path, self.checkpoint_id), &source, *mode)
    }

    /// Step 1: every removal, each a compare-and-swap, in parallel.
    fn remove(&self, removals: &[usize]) -> Vec<(usize, Result<Swap>)> {
        removals
            .par_iter()
            .filter(|_| !self.stopped())
            .map(|&i| {
                let w = &self.writes[i];
                let temp = files::temp_name(&w.path, self.checkpoint_id);
                let r = match files::open_parent(self.root, &w.path, false) {
                    Ok(parent) => parent.remove_if_unsynced(&temp, &matcher(self.keys, &w.expected)),
                    Err(e) if e.code == ErrorCode::NotFound => Ok(Swap::Done),
                    Err(e) => Err(e),
                };
                note_stop(&self.stop, &r);
                (i, r)
            })
            .collect()
    }

    /// Step 2: the chunks of `puts`, each staged, synced (on its own thread while the next
    /// is staged: the disk's wait hides the writing) and swapped in.
    fn put(&self, fs: &FileSystem, puts: &[usize], outcomes: &mut [Outcome]) -> Result<()> {
        let (mut result, mut unsynced) = (Ok(()), None);
        for chunk in chunks(self.writes, puts) {
            if self.stopped() {
                break;
            }
            let staged = match unsynced.take() {
                None => self.stage(chunk),
                Some(previous) => {
                    let (synced, staged) = std::thread::scope(|scope| {
                        let syncing = scope.spawn(|| fs.sync());
                        let staged = self.stage(chunk);
                        (syncing.join().unwrap_or_else(|_| Err(Error::new(ErrorCode::Io, "sync panicked"))), staged)
                    });
                    result = self.swap(previous, synced, outcomes);
                    staged
                }
            };
            unsynced = Some(staged);
        }
        // The last chunk staged: synced and swapped in — or, if the batch stopped, discarded.
        match unsynced {
            Some(last) => result.and(self.swap(last, fs.sync(), outcomes)),
            None => result,
        }
    }

    /// Step 2's first half for one chunk: every temporary file written under its writing
    /// name, none synced. One handle per directory (made if missing, in order), shared by
    /// its files.
    fn stage(&self, chunk: &[usize]) -> Vec<Staged> {
        let mut dirs: HashMap<(&[u8], bool), Result<Option<Parent>>> = HashMap::new();
        let opened: Vec<Staged> = chunk
            .iter()
            .map(|&i| {
                let w = &self.writes[i];
                let opened = dirs.entry((w.path.dir(), w.make_parents)).or_insert_with(|| open(self.root, w));
                let parent = match opened {
                    Ok(Some(p)) => Ok(Some(p.sibling(&w.path))),
                    Ok(None) => Ok(None),
                    Err(e) => Err(Error::new(e.code, e.message.clone())),
                };
                (i, parent)
            })
            .collect();
        opened
            .into_par_iter()
            .map(|(i, parent)| {
                let r = parent.and_then(|p| match p {
                    Some(p) => self.stage_write(&p, &self.writes[i]).map(|()| Some(p)),
                    None => Ok(None),
                });
                note_stop(&self.stop, &r);
                (i, r)
            })
            .collect()
    }

    /// Step 2's second half for one chunk, once `synced` made it durable: each file swapped
    /// in with its compare-and-swap — or, if the sync failed or the batch stopped, every
    /// staged file removed.
    fn swap(&self, staged: Vec<Staged>, synced: Result<()>, outcomes: &mut [Outcome]) -> Result<()> {
        if synced.is_err() {
            self.stop.store(true, Ordering::SeqCst);
        }
        let done: Vec<(usize, Outcome)> = staged
            .into_par_iter()
            .map(|(i, r)| {
                let w = &self.writes[i];
                let temp = files::temp_name(&w.path, self.checkpoint_id);
                let parent = match r {
                    Ok(Some(parent)) => parent,
                    Ok(None) => return (i, Some(Ok(Swap::Changed))),
                    Err(e) => return (i, Some(Err(e))),
                };
                if self.stopped() {
                    parent.discard_staged(&temp);
                    return (i, None);
                }
                let r = match &w.expected {
                    Expected::Absent => {
                        failpoint::hit("write-temp-synced");
                        parent.create_staged(&temp)
                    }
                    Expected::File { .. } => {
                        let m = matcher(self.keys, &w.expected);
                        parent.seal_staged(&temp).and_then(|()| {
                            failpoint::hit("write-temp-synced");
                            parent.swap_synced(&temp, &Expect::File(&m))
                        })
                    }
                };
                note_stop(&self.stop, &r);
                (i, Some(r))
            })
            .collect();
        for (i, r) in done {
            outcomes[i] = r;
        }
        synced
    }
}

/// The writes of `puts`, cut into chunks of at most [`CHUNK_FILES`] files in at most
/// [`CHUNK_DIRS`] directories.
fn chunks<'a>(writes: &[Write], puts: &'a [usize]) -> Vec<&'a [usize]> {
    let mut out = Vec::new();
    let (mut start, mut dirs) = (0, std::collections::HashSet::new());
    for (k, &i) in puts.iter().enumerate() {
        let dir = writes[i].path.dir();
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
fn matcher<'a>(keys: &'a KeyRing, expected: &'a Expected) -> impl Fn(&Body, &FileIdentity) -> bool + 'a {
    move |body: &Body, identity: &FileIdentity| match expected {
        Expected::File { digest, inode } => {
            inode.is_none_or(|ino| ino == identity.inode)
                && storage_body::id(keys, body).is_ok_and(|id| *digest == id.to_hex())
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
