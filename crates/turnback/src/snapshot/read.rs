//! Phase 5 of taking a snapshot: read, hash and pack what the store lacks, on the thread
//! pool, while a writer thread stores the batch before.
//!
//! Invariants: memory is bounded by a batch ([`BATCH_BYTES`], [`BATCH_FILES`]) and, for a
//! file over [`STREAM_FROM`], by a few blocks of it, never by the size of a file or of the
//! tree; content is deduplicated against the store and against what was sent and not yet
//! committed ([`Unseen`]); a file that vanished or cannot be read since the walk is left
//! out with the reason, never a failure of the snapshot; nothing read is named by a record
//! until the snapshot commits.

use std::collections::HashSet;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use rayon::prelude::*;

use crate::error::{Error, ErrorCode, Result};
use crate::fs::walk::{self, Skipped};
use crate::snapshot::options::cancelled;
use crate::snapshot::plan::ReadPlan;
use crate::snapshot::scan::Scan;
use crate::snapshot::{LeftOut, SnapshotRecord, TakeOptions};
use crate::storage::content::{ContentClass, ContentId};
use crate::storage::object;
use crate::storage::pack::{Packer, SealedPack};
use crate::storage::settings::format_size;
use crate::storage::store::Store;

/// Bytes of file content read and sealed per batch (bounds memory).
const BATCH_BYTES: u64 = 8 * 1024 * 1024;
/// Files read per batch at most: a batch of small files costs memory per file (its id,
/// index entry and read buffer, held by every stage a batch passes through), not only
/// per byte.
const BATCH_FILES: usize = 32 * 1024;
/// Files larger than this are read, hashed and packed in pieces ([`stream_file`]), not
/// whole: memory does not grow with the size of any file.
const STREAM_FROM: u64 = 8 * 1024 * 1024;
/// Blocks of a streamed file sealed and sent to the writer together.
const STREAM_BLOCKS: usize = 8;

/// Phase 5: reads, hashes and packs what the store lacks, on the thread pool; each batch
/// is compressed and encrypted while the next one is read, and stored by a writer thread.
/// Files that vanished or became unreadable since the walk are left out with the reason.
/// Takes the plan's list of files to read; returns the bytes stored.
pub(super) fn read_and_pack(
    store: &Store,
    root: &Path,
    walked: &Scan<'_>,
    plan: &mut ReadPlan,
    opts: &TakeOptions<'_>,
    record: &mut SnapshotRecord,
) -> Result<u64> {
    let (tx, rx) = std::sync::mpsc::sync_channel::<SealedPack>(1);
    let committed = AtomicUsize::new(0);
    std::thread::scope(|scope| -> Result<u64> {
        let writer = scope.spawn(|| write_packs(store, rx, &committed));
        let max_file = store.settings().snapshots.max_file_bytes;
        let mut reader = Reader {
            store,
            root,
            walked,
            opts,
            max_file,
            unseen: Unseen::default(),
            committed: &committed,
            tx,
            done: 0,
        };
        let reading = reader.read(plan, record);
        drop(reader); // the writer stops once the channel closes
        let written = writer.join().map_err(|_| Error::new(ErrorCode::Io, "snapshot writer thread panicked"))?;
        reading?;
        written
    })
}

/// The writer thread: stores each sealed pack in its own transaction, counting them in
/// `committed` (so the readers know which ids the store holds now); the bytes written.
fn write_packs(store: &Store, rx: std::sync::mpsc::Receiver<SealedPack>, committed: &AtomicUsize) -> Result<u64> {
    let mut written = 0;
    for sealed in rx {
        let mut txn = store.kv().begin()?;
        written += sealed.store(&mut *txn)?;
        txn.commit()?;
        committed.fetch_add(1, Ordering::Release);
    }
    Ok(written)
}

/// Phase 5's reading side: what it reads from, and what it sends the writer.
struct Reader<'a, 'w> {
    store: &'a Store,
    root: &'a Path,
    walked: &'a Scan<'w>,
    opts: &'a TakeOptions<'a>,
    max_file: u64,
    unseen: Unseen,
    committed: &'a AtomicUsize,
    tx: std::sync::mpsc::SyncSender<SealedPack>,
    /// Bytes read so far, for the progress callback.
    done: u64,
}

impl Reader<'_, '_> {
    /// Reads the plan's files: the small ones in batches, then the large ones streamed.
    fn read(&mut self, plan: &mut ReadPlan, record: &mut SnapshotRecord) -> Result<()> {
        // Split in place (a million files' list is 8 MB; a copy of it is 8 MB more).
        let walked = self.walked;
        let streamed = |i: usize| walked.get(i).stat.size > STREAM_FROM;
        let mut to_read = std::mem::take(&mut plan.to_read);
        let large: Vec<usize> = to_read.iter().copied().filter(|&i| streamed(i)).collect();
        to_read.retain(|&i| !streamed(i));
        if self.read_batches(&to_read, plan, record)? {
            self.read_large(&large, plan, record)?;
        }
        Ok(())
    }

    /// Tells the progress callback how far the reading is, and checks for cancelling.
    fn step(&mut self, bytes: u64, plan: &ReadPlan) -> Result<()> {
        cancelled(self.opts)?;
        if let Some(progress) = self.opts.progress {
            progress(self.done, plan.read_bytes);
        }
        self.done += bytes;
        Ok(())
    }

    /// Reads `to_read` batch by batch, each packed while the next is read and sealed as
    /// it goes to the writer; `false` if the writer stopped (its error is the one told).
    fn read_batches(&mut self, to_read: &[usize], plan: &mut ReadPlan, record: &mut SnapshotRecord) -> Result<bool> {
        let (store, walked) = (self.store, self.walked);
        let mut previous: Option<Packer> = None;
        for (n, batch) in batches(to_read, |i| walked.get(i).stat.size).into_iter().enumerate() {
            // The writer has work from the second batch on.
            let writing = n > 0;
            self.step(batch.iter().map(|&i| walked.get(i).stat.size).sum::<u64>(), plan)?;
            // Loaded before this batch looks into the store, which then sees those packs.
            self.unseen.forget_committed(self.committed.load(Ordering::Acquire));
            let unseen = &mut self.unseen;
            let (sealed, read) = rayon::join(
                || previous.take().map(|p| p.seal(store.keys())).transpose(),
                || {
                    read_batch(store, self.root, walked, batch, self.max_file, writing).map(|read| {
                        let packer = pack_batch(&read, unseen);
                        (read, packer)
                    })
                },
            );
            if let Some(sealed) = sealed?
                && self.tx.send(sealed).is_err()
            {
                return Ok(false);
            }
            let (read, packer) = read?;
            for (i, result) in read.files {
                record_read(walked, plan, i, result.map(|(id, _, stat)| (id, stat)), record);
            }
            previous = Some(packer).filter(|p| !p.is_empty());
        }
        if let Some(last) = previous {
            let _ = self.tx.send(last.seal(store.keys())?);
        }
        Ok(true)
    }

    /// Reads the files over [`STREAM_FROM`] one at a time, in pieces ([`stream_file`]).
    fn read_large(&mut self, large: &[usize], plan: &mut ReadPlan, record: &mut SnapshotRecord) -> Result<()> {
        for &i in large {
            let e = self.walked.get(i);
            self.step(e.stat.size, plan)?;
            let read = stream_file(self.store, self.root, e.path, self.max_file, &self.tx, &mut self.unseen, self.opts);
            if read.as_ref().is_err_and(|e| e.code == ErrorCode::Cancelled) {
                return read.map(|_| ());
            }
            record_read(self.walked, plan, i, read, record);
        }
        Ok(())
    }
}

/// One batch as read: each entry's file (or why not), and per file read, whether the store
/// held its content when the batch was read.
struct ReadBatch {
    files: Vec<(usize, Result<ReadFile>)>,
    in_store: Vec<bool>,
}

/// Reads and hashes the files of `batch` on the thread pool, then asks the store which of
/// their contents it holds. After the first batch (`writing`), through a read snapshot,
/// not the store's connection: the writer holds that while it commits the previous batch
/// (an fsync), and reading must not wait for it. (The first batch, all a small change
/// reads, has no writer to wait for and opens no second connection.) What this snapshot
/// wrote meanwhile and the writer has not yet committed is [`Unseen`]; what another writer did,
/// [`SealedPack::store`] tolerates.
fn read_batch(
    store: &Store,
    root: &Path,
    walked: &Scan<'_>,
    batch: &[usize],
    max_file: u64,
    writing: bool,
) -> Result<ReadBatch> {
    let files: Vec<(usize, Result<ReadFile>)> =
        batch.par_iter().map(|&i| (i, read_and_hash(store, root, walked.get(i).path, max_file))).collect();
    let ids: Vec<ContentId> = files.iter().filter_map(|(_, r)| r.as_ref().ok().map(|f| f.0)).collect();
    let in_store = if writing {
        object::exist_each(&*store.kv().read_snapshot()?, &ids)?
    } else {
        object::exist_each(store.kv(), &ids)?
    };
    Ok(ReadBatch { files, in_store })
}

/// Adds the content of one batch the store lacks to a packer (on the pool, beside the
/// sealing of the previous batch).
fn pack_batch(read: &ReadBatch, unseen: &mut Unseen) -> Packer {
    let mut packer = Packer::default();
    let files = read.files.iter().filter_map(|(_, r)| r.as_ref().ok());
    for ((id, bytes, _), in_store) in files.zip(&read.in_store) {
        // An earlier batch may still be on its way to the store (a content met twice in
        // this one, the packer adds once).
        if !in_store && !unseen.holds(id) {
            packer.add(*id, ContentClass::of(bytes), bytes);
        }
    }
    if !packer.is_empty() {
        unseen.sent(packer.take_ids());
    }
    packer
}

/// What this snapshot packed that a batch's look into the store may not see yet: the ids
/// of each packer on its way to the writer, by its place in the writer's queue (the
/// batches' non-empty packers are the writer's first messages, in order), until the
/// writer has committed it. Memory holds a few batches' ids, not the snapshot's.
#[derive(Default)]
struct Unseen {
    /// (message number, its ids), oldest first.
    packers: std::collections::VecDeque<(usize, HashSet<ContentId>)>,
    next: usize,
    /// The large files streamed so far (after every batch; few, kept to the end).
    large: HashSet<ContentId>,
}

impl Unseen {
    fn holds(&self, id: &ContentId) -> bool {
        self.large.contains(id) || self.packers.iter().any(|(_, ids)| ids.contains(id))
    }

    /// The ids of the next packer sent.
    fn sent(&mut self, ids: HashSet<ContentId>) {
        self.packers.push_back((self.next, ids));
        self.next += 1;
    }

    /// Drops the ids of the first `committed` messages: a look into the store that starts
    /// after the writer said so sees them.
    fn forget_committed(&mut self, committed: usize) {
        while self.packers.front().is_some_and(|(n, _)| *n < committed) {
            self.packers.pop_front();
        }
    }
}

/// Records what reading entry `i` found: its id and stat, or why it is left out.
fn record_read(
    walked: &Scan<'_>,
    plan: &mut ReadPlan,
    i: usize,
    result: Result<(ContentId, walk::Stat)>,
    record: &mut SnapshotRecord,
) {
    match result {
        Ok((id, stat)) => {
            plan.set_read(i, id, stat, walked.get(i).stat);
        }
        Err(e) => {
            let path = String::from_utf8_lossy(walked.get(i).path).into_owned();
            // Grown over max-file-size since the walk: left out like one found so.
            if let (ErrorCode::OverCap, Some(size)) = (e.code, e.details.as_ref().and_then(|d| d["size"].as_u64())) {
                record.left_out.push(LeftOut { path, size, reason: e.message });
            } else {
                record.skipped_paths.push(Skipped { path, reason: e.message });
            }
        }
    }
}

/// Reads one large file in pieces, hashing and packing each as it comes
/// ([`Packer::stream`]): its blocks go to the writer `tx` a few at a time, its index entry
/// last — or, if the store holds the content already, a deletion of the blocks it sent.
/// Memory holds a few blocks whatever the file's size. A file that ends before the size
/// it had when opened changed while it was read: it is left out (its blocks deleted).
fn stream_file(
    store: &Store,
    root: &Path,
    rel: &[u8],
    max_file: u64,
    tx: &std::sync::mpsc::SyncSender<SealedPack>,
    unseen: &mut Unseen,
    opts: &TakeOptions<'_>,
) -> Result<(ContentId, walk::Stat)> {
    let (mut file, meta, path) = open_to_read(root, rel, max_file)?;
    let keys = store.keys();
    let size = meta.len();
    let mut mac = keys.content_id_streaming(size);
    let mut streamed = Packer::stream();
    let mut buf = vec![0u8; crate::storage::pack::BLOCK_LEN];
    let mut class = None;
    let mut done = 0u64;
    let read = (|| -> Result<()> {
        while done < size {
            let want = (size - done).min(buf.len() as u64) as usize;
            let n = match file.read(&mut buf[..want]) {
                Ok(0) => return Err(Error::new(ErrorCode::Io, "changed while it was read (it got shorter)")),
                Ok(n) => n,
                Err(err) if err.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(err) => return Err(Error::new(ErrorCode::Io, format!("{}: {err}", path.display()))),
            };
            class.get_or_insert_with(|| ContentClass::of(&buf[..n]));
            mac.update(&buf[..n]);
            streamed.push(&buf[..n]);
            done += n as u64;
            if streamed.full_blocks() >= STREAM_BLOCKS {
                cancelled(opts)?;
                tx.send(streamed.seal_full(keys)?).map_err(|_| writer_stopped())?;
            }
        }
        Ok(())
    })();
    let id = match read.map(|()| mac.finish()) {
        Ok(Some(id)) => ContentId(id),
        Ok(None) => unreachable!("exactly `size` bytes were fed"),
        Err(err) => {
            let _ = tx.send(streamed.abandon());
            return Err(err);
        }
    };
    // Packed already by an earlier large file or by a batch the writer may not have
    // committed yet (a file that grew past the stream size after the walk), or stored.
    let known = unseen.holds(&id) || object::exists(store.kv(), &id)?;
    unseen.large.insert(id);
    let class = class.unwrap_or(ContentClass::FileContent);
    tx.send(streamed.finish(keys, id, class, known)?).map_err(|_| writer_stopped())?;
    Ok((id, walk::Stat::of(&meta)))
}

fn writer_stopped() -> Error {
    Error::new(ErrorCode::Io, "the snapshot's writer stopped")
}

/// `to_read` cut into read batches of [`BATCH_BYTES`] (the last file may overshoot) or
/// [`BATCH_FILES`], whichever comes first; `size` gives an entry's size.
fn batches(to_read: &[usize], size: impl Fn(usize) -> u64) -> Vec<&[usize]> {
    let mut out = Vec::new();
    let (mut start, mut bytes) = (0, 0u64);
    for (k, &i) in to_read.iter().enumerate() {
        bytes += size(i);
        if bytes >= BATCH_BYTES || k + 1 - start >= BATCH_FILES {
            out.push(&to_read[start..=k]);
            start = k + 1;
            bytes = 0;
        }
    }
    if start < to_read.len() {
        out.push(&to_read[start..]);
    }
    out
}

/// A file read and hashed by a worker: its id, its bytes, its stat after reading.
type ReadFile = (ContentId, Vec<u8>, walk::Stat);

/// Reads one file without following a symlink, and hashes it.
/// A file grown over `max_file` since the walk is not read (`over-cap`, its size in the
/// error's details).
fn read_and_hash(store: &Store, root: &Path, rel: &[u8], max_file: u64) -> Result<ReadFile> {
    let (mut file, meta, path) = open_to_read(root, rel, max_file)?;
    // Exactly the size fstat gave (what the stat cache records with it): a file that grew
    // meanwhile has a new size and is read again next time; one that shrank ends early.
    // (`read_to_end` would stat and seek again and read once more to see the end.)
    let mut bytes = vec![0u8; meta.len() as usize];
    let mut filled = 0;
    while filled < bytes.len() {
        match file.read(&mut bytes[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {}
            Err(err) => return Err(Error::new(ErrorCode::Io, format!("{}: {err}", path.display()))),
        }
    }
    bytes.truncate(filled);
    let id = ContentId(store.keys().content_id(&bytes));
    Ok((id, bytes, walk::Stat::of(&meta)))
}

/// Opens one file to read without following a symlink, checks it is still a regular file
/// within `max_file` (`over-cap`, its size in the error's details, if it grew over it),
/// and returns it with its stat and its path.
fn open_to_read(root: &Path, rel: &[u8], max_file: u64) -> Result<(std::fs::File, std::fs::Metadata, PathBuf)> {
    use std::os::unix::fs::OpenOptionsExt;
    let path = root.join(std::ffi::OsStr::from_bytes(rel));
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32 | rustix::fs::OFlags::NONBLOCK.bits() as i32)
        .open(&path)
        .map_err(|err| Error::new(ErrorCode::Io, format!("{}: {err}", path.display())))?;
    let meta = file.metadata().map_err(|err| Error::new(ErrorCode::Io, format!("{}: {err}", path.display())))?;
    if !meta.is_file() {
        return Err(Error::new(ErrorCode::Io, "no longer a regular file"));
    }
    if meta.len() > max_file {
        let why = format!(
            "grew larger than a snapshot keeps of one file while it was taken ({} > {}, max-file-size)",
            format_size(meta.len()),
            format_size(max_file)
        );
        return Err(Error::new(ErrorCode::OverCap, why).with_details(serde_json::json!({ "size": meta.len() })));
    }
    Ok((file, meta, path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_ends_at_its_bytes_or_its_files_whichever_comes_first() {
        let lens = |b: &[&[usize]]| b.iter().map(|x| x.len()).collect::<Vec<_>>();
        // Many empty files: cut by count, the rest in a last batch.
        let small: Vec<usize> = (0..BATCH_FILES * 2 + 5).collect();
        assert_eq!(lens(&batches(&small, |_| 0)), vec![BATCH_FILES, BATCH_FILES, 5]);
        // Large files: cut by bytes, the file that reaches the bound ending its batch.
        let big: Vec<usize> = (0..7).collect();
        assert_eq!(lens(&batches(&big, |_| BATCH_BYTES / 2)), vec![2, 2, 2, 1]);
        assert_eq!(lens(&batches(&big, |_| BATCH_BYTES / 2 - 1)), vec![3, 3, 1]);
        // Every entry in exactly one batch, in order.
        let all: Vec<usize> = batches(&small, |i| (i as u64 % 7) << 10).concat();
        assert_eq!(all, small);
        assert!(batches(&[], |_| 1).is_empty());
    }

    #[test]
    fn unseen_ids_are_held_until_the_writer_has_committed_their_packer() {
        let id = |b: u8| ContentId([b; 32]);
        let mut unseen = Unseen::default();
        unseen.sent([id(1)].into());
        unseen.sent([id(2), id(3)].into());
        unseen.sent([id(4)].into());
        assert!([1, 2, 3, 4].iter().all(|&b| unseen.holds(&id(b))));
        // The writer committed the first message: its ids are in the store now.
        unseen.forget_committed(1);
        assert!(!unseen.holds(&id(1)));
        assert!([2, 3, 4].iter().all(|&b| unseen.holds(&id(b))));
        // Saying so again, or less, forgets nothing more.
        unseen.forget_committed(1);
        unseen.forget_committed(0);
        assert!(unseen.holds(&id(2)));
        unseen.forget_committed(3);
        assert!(![1, 2, 3, 4].iter().any(|&b| unseen.holds(&id(b))));
        // Numbering goes on after the queue empties.
        unseen.sent([id(5)].into());
        unseen.forget_committed(3);
        assert!(unseen.holds(&id(5)));
        unseen.forget_committed(4);
        assert!(!unseen.holds(&id(5)));
    }
}
