//! Taking a snapshot, phase by phase: walk (the stat cache loaded meanwhile, or dropped if
//! it does not verify; each file it describes unchanged kept as a reference to it, a
//! [`Scan`]), leave out the files too large to keep, classify (what the stat cache
//! vouches for, what must be read), check the limits on what is kept, read, hash and pack
//! what the store lacks (each batch stored by a writer thread while the next is read),
//! build the trees bottom-up — unless every file is as cached and the walk's other entries
//! are those of the cache's [`Shape`], when the tree is the one it names — and commit the
//! record with its trees and the new stat cache's row in one transaction.
//!
//! Invariants: see [the module](crate::snapshot). Nothing of a snapshot is committed until
//! its last phase but what nothing names yet (content, a large tree's nodes, a whole stat
//! cache's pieces): a cancelled or failed snapshot leaves only that, which `gc` removes.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use rayon::prelude::*;

use crate::base::time::{format_ms, now_ms};
use crate::error::{Error, ErrorCode, Result};
use crate::fs::relpath::{dir_of, name_of};
use crate::fs::walk::{self, Kind, Skipped};
use crate::snapshot::edit::{Sealer, Stream};
use crate::snapshot::lookup::flatten;
use crate::snapshot::patch::{self, Leaf};
use crate::snapshot::prune::prune;
use crate::snapshot::scan::{Scan, Seen};
use crate::snapshot::statcache::{self, Cached, Shape, StatCache};
use crate::snapshot::tree::{Node, NodeKind};
use crate::snapshot::{Hooks, LeftOut, NestedRepo, SnapshotKind, SnapshotRecord, Source, latest, put_record};
use crate::storage::content::{ContentClass, ContentId};
use crate::storage::object::{self, Sealed};
use crate::storage::pack::{Packer, SealedPack};
use crate::storage::settings::{SnapshotLimits, format_size};
use crate::storage::store::Store;
use crate::watch::WatchMark;

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

/// How to take a snapshot.
#[derive(Clone, Copy, Default)]
pub(crate) struct TakeOptions<'a> {
    /// Why.
    pub kind: Option<SnapshotKind>,
    /// The turn it belongs to.
    pub turn_id: Option<&'a str>,
    /// Checked between batches and, finally, inside the committing transaction: once set,
    /// the snapshot is abandoned and nothing of it is committed (`cancelled` error).
    pub cancel: Option<&'a AtomicBool>,
    /// Told, after each batch, the bytes read so far and the bytes to read in all.
    pub progress: Option<&'a (dyn Fn(u64, u64) + Sync)>,
    /// Walk the whole tree even if the watcher could say what changed.
    pub full: bool,
}

impl std::fmt::Debug for TakeOptions<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TakeOptions").field("kind", &self.kind).field("turn_id", &self.turn_id).finish()
    }
}

fn cancelled(opts: &TakeOptions<'_>) -> Result<()> {
    match opts.cancel {
        Some(flag) if flag.load(Ordering::SeqCst) => {
            Err(Error::new(ErrorCode::Cancelled, "cancelled; nothing of the snapshot was recorded"))
        }
        _ => Ok(()),
    }
}

/// Takes a snapshot of `source` by walking the whole tree, telling `hooks` (the turns) what
/// it commits and prunes; the caller holds the session and objects locks and synced with
/// the watcher (`mark`, recorded with the snapshot) before anything was stat-ed.
///
/// # Errors
/// I/O errors of the store; `cancelled` if the flag was set before the record committed.
/// A snapshot over a limit is not an error but a record with `skipped` set.
pub(super) fn take(
    store: &Store,
    source: Source<'_>,
    opts: &TakeOptions<'_>,
    hooks: &dyn Hooks,
    mark: Option<WatchMark>,
    started: std::time::Instant,
) -> Result<SnapshotRecord> {
    let taken_at_ns = i128::from(now_ms()) * 1_000_000;
    let created_at = format_ms(now_ms());
    // The stat cache is decrypted and decoded while the tree is walked; once it is there,
    // the walk keeps each file it vouches for as a reference to its entry.
    let loading = std::sync::OnceLock::new();
    let walk_started = std::time::Instant::now();
    let (walked, loaded) = std::thread::scope(|scope| {
        let loader = scope.spawn(|| {
            // Set however the loading ends (an empty cache if it fails, or panics): the
            // walk may be waiting for it.
            let _set = SetOnDrop(&loading);
            let (cache, dropped) = StatCache::load_or_drop(store, source.session_id)?;
            let _ = loading.set(cache);
            Ok(dropped)
        });
        let own_temps = |rel: &[u8]| source.own_temp(store, rel);
        let walked = Scan::walk(source.root, store.protected_paths(), &own_temps, &loading);
        let loaded = loader.join().unwrap_or_else(|_| Err(Error::new(ErrorCode::Io, "stat cache loader panicked")));
        (walked, loaded)
    });
    let walked = walked?;
    let walk_ms = walk_started.elapsed().as_millis() as u64;
    crate::base::failpoint::hit("snapshot-walked");
    let stat_cache_dropped = loaded?;
    // Set: the loader did not fail, which returned above.
    let mut walked = Scan::new(walked, loading.get_or_init(StatCache::default));
    let cache = walked.cache();
    let kind = opts.kind.unwrap_or(SnapshotKind::AdHoc);
    let limits: SnapshotLimits = store.settings().snapshots;
    let baseline = Baseline::of(store, source.session_id, kind, cache)?;
    let left_out = leave_out(&mut walked, &baseline, &limits);
    let mut plan = classify(&walked);
    let mut record = SnapshotRecord {
        snapshot_id: uuid::Uuid::now_v7().to_string(),
        session_id: source.session_id.to_string(),
        workspace_id: source.workspace_id.to_string(),
        kind,
        root: None,
        created_at,
        files: plan.files,
        bytes: plan.bytes,
        read_files: plan.to_read.len() as u64,
        read_bytes: plan.read_bytes,
        stored_bytes: 0,
        excluded: walked.excluded,
        nested_repos: Vec::new(),
        skipped_paths: std::mem::take(&mut walked.skipped),
        left_out,
        skipped: over_limit(&walked, &baseline, &limits, &plan),
        stat_cache_dropped,
        duration_ms: 0,
        walk_ms,
        turn_id: opts.turn_id.map(str::to_string),
        watch: mark,
        watched: false,
    };
    if record.skipped.is_none() {
        record.stored_bytes += read_and_pack(store, source.root, &walked, &mut plan, opts, &mut record)?;
    }
    drop(baseline);
    let built = match record.skipped {
        Some(_) => None,
        None => {
            let unchanged = cache_still_holds(store, &walked, &plan, taken_at_ns)?;
            // A shape goes with the walk's files only if every file's node was made from the
            // stat cached for it (a file that changed while it was read has the walk's size
            // and mode in its node, the read's in the cache): then the digest of its other
            // entries, asked by the decision and by a whole build, is taken once.
            let others = plan.read_as_walked().then(|| others_digest(&walked));
            let patched = match how_to_build(store, &walked, &plan, others, unchanged)? {
                // Every file as cached and the same other entries: the tree is the one the
                // cache's shape names, stored (a root of gc) and not built again.
                Build::Same(shape) => Some(Built {
                    root: shape.root,
                    nested: nested_of(walked.iter()),
                    pending: Vec::new(),
                    stored: 0,
                    cache: None,
                }),
                Build::Patch(shape, changes) => {
                    patch_tree(store, &walked, shape, &changes, source.session_id, taken_at_ns)?
                }
                Build::Whole => None,
            };
            match patched {
                Some(built) => Some(built),
                None => {
                    let cache = CacheUpdate { unchanged, others, taken_at_ns };
                    Some(build_trees(store, &walked, &plan, cache, source.session_id)?)
                }
            }
        }
    };
    record.duration_ms = started.elapsed().as_millis() as u64;
    commit(store, &mut record, built, opts, hooks)?;
    prune(store, source.session_id, hooks)?;
    Ok(record)
}

/// Sets an empty stat cache when dropped, unless one was set: whoever waits for it is not
/// left waiting by a loader that failed.
struct SetOnDrop<'a>(&'a std::sync::OnceLock<StatCache>);

impl Drop for SetOnDrop<'_> {
    fn drop(&mut self) {
        let _ = self.0.set(StatCache::default());
    }
}

/// What the walk found, and what the stat cache cannot vouch for.
pub(super) struct ReadPlan {
    ids: Ids,
    /// By walked entry, the stat of a file read that differs from the walk's (it changed
    /// between the walk and the read): rare, so kept apart. Every other file read had the
    /// walk's stat.
    stat_after: HashMap<usize, walk::Stat>,
    /// Entries (indices) to read (taken by phase 5).
    to_read: Vec<usize>,
    files: u64,
    bytes: u64,
    pub(super) read_bytes: u64,
}

impl ReadPlan {
    /// How walked entry `i`'s content id is known, if it is.
    fn known(&self, i: usize) -> Option<Known> {
        self.ids.get(i)
    }

    /// Walked entry `i`'s content id, if this snapshot read it.
    pub(super) fn read_id(&self, i: usize) -> Option<ContentId> {
        match self.ids.get(i) {
            Some(Known::Read(id)) => Some(id),
            _ => None,
        }
    }

    /// Walked entry `i`'s content id, once known, given `cache_ids`, every cache entry's
    /// ([`StatCache::all_ids`]).
    fn id_in(&self, i: usize, cache_ids: &[ContentId]) -> Option<ContentId> {
        match self.ids.get(i)? {
            // One id per cache entry ([`StatCache::all_ids`]).
            Known::Cached(c) => Some(cache_ids[c]),
            Known::Read(id) => Some(id),
        }
    }

    /// Whether the cache vouches for any walked entry (whose id a whole build then asks of
    /// it).
    fn vouches(&self) -> bool {
        (0..self.ids.at.len()).any(|i| matches!(self.known(i), Some(Known::Cached(_))))
    }

    /// Whether walked entry `i` was read (and hashed) by this snapshot.
    fn was_read(&self, i: usize) -> bool {
        self.ids.was_read(i)
    }

    /// The stat to cache for walked entry `i` (`e`): as read, if it was read; as walked
    /// otherwise.
    fn stat_of(&self, i: usize, e: &Seen<'_>) -> walk::Stat {
        self.stat_after.get(&i).copied().unwrap_or(e.stat)
    }

    /// Whether every file read had the stat the walk found (so its node, made from the
    /// walk's stat, and its cache entry, from the read's, agree).
    fn read_as_walked(&self) -> bool {
        self.stat_after.is_empty()
    }
}

/// Per walked entry, how its content id is known: its cache entry vouches for it, or it
/// was read. Four bytes an entry, not a copy of each id (a million files' ids are in the
/// cache's pieces already, and a snapshot that builds no tree whole never asks for them).
struct Ids {
    /// Per entry: [`Ids::UNKNOWN`], its cache entry's index, or [`Ids::READ`] and the
    /// index in `read`.
    at: Vec<u32>,
    read: Vec<ContentId>,
}

/// How an entry's content id is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Known {
    /// It is this cache entry's.
    Cached(usize),
    /// It was read.
    Read(ContentId),
}

impl Ids {
    const UNKNOWN: u32 = u32::MAX;
    const READ: u32 = 1 << 31;

    fn new(entries: usize) -> Self {
        Ids { at: Vec::with_capacity(entries), read: Vec::new() }
    }

    /// The next entry's: cache entry `c`'s id, if given (an index of 2^31 or more, which no
    /// cache holds, is left unknown: the file is read).
    fn push(&mut self, c: Option<usize>) {
        self.at.push(c.and_then(|c| u32::try_from(c).ok()).filter(|&c| c < Self::READ).unwrap_or(Self::UNKNOWN));
    }

    fn set_read(&mut self, i: usize, id: ContentId) {
        // Below `READ - 1`, so that the flag and the index are never `UNKNOWN`.
        let at =
            u32::try_from(self.read.len()).ok().filter(|&k| k < Self::READ - 1).expect("fewer files than 2^31 - 1");
        self.read.push(id);
        self.at[i] = Self::READ | at;
    }

    fn get(&self, i: usize) -> Option<Known> {
        match self.at[i] {
            Self::UNKNOWN => None,
            at if at & Self::READ != 0 => Some(Known::Read(self.read[(at & !Self::READ) as usize])),
            c => Some(Known::Cached(c as usize)),
        }
    }

    fn was_read(&self, i: usize) -> bool {
        matches!(self.get(i), Some(Known::Read(_)))
    }
}

/// Phase 3: which of the files kept must be read — everything the stat cache cannot vouch
/// for.
pub(super) fn classify(walked: &Scan<'_>) -> ReadPlan {
    let cache = walked.cache();
    let mut plan = ReadPlan {
        ids: Ids::new(walked.len()),
        stat_after: HashMap::new(),
        to_read: Vec::new(),
        files: 0,
        bytes: 0,
        read_bytes: 0,
    };
    for (i, e) in walked.iter().enumerate() {
        let vouched = match e.kind {
            Kind::File => {
                plan.files += 1;
                plan.bytes += e.stat.size;
                e.cached.filter(|&c| cache.clean(c, &e.stat))
            }
            _ => None,
        };
        plan.ids.push(vouched);
        if plan.known(i).is_none() && *e.kind == Kind::File {
            plan.to_read.push(i);
            plan.read_bytes += e.stat.size;
        }
    }
    plan
}

/// What a snapshot is measured against: a first snapshot holds everything; a later one
/// adds what the stat cache does not vouch for — or, without a cache (lost, dropped, an
/// older format), what the previous snapshot lacks by path and size, so that re-reading
/// unchanged files does not count. A pre-rewind snapshot is how a rewind sees the
/// workspace: however much an agent added, it must be taken, so it has no baseline.
enum Baseline<'a> {
    PreRewind,
    First,
    Cache(&'a StatCache),
    Tree(BTreeMap<Vec<u8>, Node>),
}

impl<'a> Baseline<'a> {
    fn of(store: &Store, session_id: &str, kind: SnapshotKind, cache: &'a StatCache) -> Result<Self> {
        if kind == SnapshotKind::PreRewind {
            return Ok(Baseline::PreRewind);
        }
        let Some(previous) = latest(store, session_id)? else { return Ok(Baseline::First) };
        let previous_root = previous.root.as_deref().and_then(ContentId::from_hex);
        // After watched snapshots the cache describes an older one: measure against the tree.
        if !cache.entries.is_empty() && previous_root.is_some_and(|r| cache.names_tree(&r)) {
            return Ok(Baseline::Cache(cache));
        }
        Ok(Baseline::Tree(match previous_root {
            Some(root) => flatten(store, &root)?,
            None => BTreeMap::new(),
        }))
    }

    /// Whether file `e` counts as new or changed. A racily clean file (stat as cached, only
    /// too recent to trust) is read again but adds nothing new.
    fn adds(&self, e: &Seen<'_>) -> bool {
        match self {
            Baseline::PreRewind | Baseline::First => true,
            Baseline::Cache(cache) => e.cached.is_none_or(|c| cache.entries.stat(c) != e.stat),
            Baseline::Tree(before) => before.get(e.path).is_none_or(|n| n.size != e.stat.size),
        }
    }

    /// The limit file `e` is over, if it is, as (its bytes, setting, what it bounds): first
    /// `max-file-size`, then what the snapshot may take in all (a file alone over that
    /// could only ever skip the whole snapshot, again at every later one).
    fn file_over(&self, e: &Seen<'_>, limits: &SnapshotLimits) -> Option<(u64, &'static str, &'static str)> {
        if e.stat.size > limits.max_file_bytes {
            return Some((limits.max_file_bytes, "max-file-size", "a snapshot keeps of one file"));
        }
        let whole = match self {
            Baseline::First => (limits.first_max_bytes, "first-max-size", "a first snapshot may hold"),
            // Whether it adds is asked only of a file that would be over if it did.
            Baseline::Cache(_) | Baseline::Tree(_) if e.stat.size > limits.later_max_bytes && self.adds(e) => {
                (limits.later_max_bytes, "later-max-size", "a later snapshot may add")
            }
            _ => return None,
        };
        (e.stat.size > whole.0).then_some(whole)
    }
}

/// Phase 2: leaves out of the walk every file over a limit on its own
/// ([`Baseline::file_over`]), returning them with the reason; everything after counts only
/// what was kept.
fn leave_out(walked: &mut Scan<'_>, baseline: &Baseline<'_>, limits: &SnapshotLimits) -> Vec<LeftOut> {
    let mut left_out = Vec::new();
    walked.retain(|e| {
        let over = if *e.kind == Kind::File { baseline.file_over(&e, limits) } else { None };
        let Some((cap, setting, what)) = over else { return true };
        let (size, cap_text) = (format_size(e.stat.size), format_size(cap));
        left_out.push(LeftOut {
            path: String::from_utf8_lossy(e.path).into_owned(),
            size: e.stat.size,
            reason: format!("larger than {what} ({size} > {cap_text}, {setting})"),
        });
        false
    });
    left_out
}

/// Phase 4: the reason the snapshot is skipped, if what it keeps is over a limit. A first
/// snapshot counts everything; a later one what it adds.
fn over_limit(walked: &Scan<'_>, baseline: &Baseline<'_>, limits: &SnapshotLimits, plan: &ReadPlan) -> Option<String> {
    match baseline {
        Baseline::PreRewind => None,
        Baseline::First => limit_reason(plan.files, limits.first_max_files, plan.bytes, limits.first_max_bytes, ""),
        Baseline::Cache(_) | Baseline::Tree(_) => {
            let (new_files, new_bytes) = plan
                .to_read
                .iter()
                .map(|&i| walked.get(i))
                .filter(|e| baseline.adds(e))
                .fold((0u64, 0u64), |(n, b), e| (n + 1, b + e.stat.size));
            limit_reason(new_files, limits.later_max_files, new_bytes, limits.later_max_bytes, "new or changed ")
        }
    }
}

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
    let max_file = store.settings().snapshots.max_file_bytes;
    let mut unseen = Unseen::default();
    let (tx, rx) = std::sync::mpsc::sync_channel::<SealedPack>(1);
    let committed = AtomicUsize::new(0);
    std::thread::scope(|scope| -> Result<u64> {
        let committed = &committed;
        let writer = scope.spawn(move || -> Result<u64> {
            let mut written = 0;
            for sealed in rx {
                let mut txn = store.kv().begin()?;
                written += sealed.store(&mut *txn)?;
                txn.commit()?;
                committed.fetch_add(1, Ordering::Release);
            }
            Ok(written)
        });
        let reading = (|| -> Result<()> {
            let mut previous: Option<Packer> = None;
            let mut done_bytes = 0u64;
            // Split in place (a million files' list is 8 MB; a copy of it is 8 MB more).
            let streamed = |i: usize| walked.get(i).stat.size > STREAM_FROM;
            let mut to_read = std::mem::take(&mut plan.to_read);
            let large: Vec<usize> = to_read.iter().copied().filter(|&i| streamed(i)).collect();
            to_read.retain(|&i| !streamed(i));
            for (n, batch) in batches(&to_read, |i| walked.get(i).stat.size).into_iter().enumerate() {
                // The writer has work from the second batch on.
                let writing = n > 0;
                cancelled(opts)?;
                if let Some(progress) = opts.progress {
                    progress(done_bytes, plan.read_bytes);
                }
                done_bytes += batch.iter().map(|&i| walked.get(i).stat.size).sum::<u64>();
                // Loaded before this batch looks into the store, which then sees those packs.
                unseen.forget_committed(committed.load(Ordering::Acquire));
                let (sealed, read) = rayon::join(
                    || previous.take().map(|p| p.seal(store.keys())).transpose(),
                    || {
                        read_batch(store, root, walked, batch, max_file, writing).map(|read| {
                            let packer = pack_batch(&read, &mut unseen);
                            (read, packer)
                        })
                    },
                );
                if let Some(sealed) = sealed?
                    && tx.send(sealed).is_err()
                {
                    return Ok(()); // the writer failed; its error is reported below
                }
                let (read, packer) = read?;
                for (i, result) in read.files {
                    record_read(walked, plan, i, result.map(|(id, _, stat)| (id, stat)), record);
                }
                previous = Some(packer).filter(|p| !p.is_empty());
            }
            if let Some(last) = previous {
                let _ = tx.send(last.seal(store.keys())?);
            }
            for i in large {
                cancelled(opts)?;
                if let Some(progress) = opts.progress {
                    progress(done_bytes, plan.read_bytes);
                }
                done_bytes += walked.get(i).stat.size;
                let read = stream_file(store, root, walked.get(i).path, max_file, &tx, &mut unseen, opts);
                if read.as_ref().is_err_and(|e| e.code == ErrorCode::Cancelled) {
                    return read.map(|_| ());
                }
                record_read(walked, plan, i, read, record);
            }
            Ok(())
        })();
        drop(tx);
        let written = writer.join().map_err(|_| Error::new(ErrorCode::Io, "snapshot writer thread panicked"))?;
        reading?;
        written
    })
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
            plan.ids.set_read(i, id);
            if stat != walked.get(i).stat {
                plan.stat_after.insert(i, stat);
            }
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

/// What phase 6 built: the root, the nested repositories, the tree nodes and symlink
/// targets to store, and what to write of the stat cache (`None`: the old one still holds).
pub(super) struct Built {
    pub(super) root: ContentId,
    pub(super) nested: Vec<NestedRepo>,
    pub(super) pending: Vec<Sealed>,
    /// Bytes of its nodes already stored, ahead of the commit.
    pub(super) stored: u64,
    pub(super) cache: Option<statcache::Write>,
}

/// How phase 6 makes the snapshot's tree and what it writes of the stat cache.
enum Build<'w> {
    /// The tree the cache's shape names; the cache still holds.
    Same(Shape),
    /// The shape's tree patched where files changed; a delta over the cache.
    Patch(Shape, Changes<'w>),
    /// Every node built; the whole cache written, unless it still holds.
    Whole,
}

/// The one decision of phase 6: the shape's tree, as it is or patched, when the walk's
/// files were read as walked and its other entries are the shape's (`others`, their
/// digest, is given only when the files were read as walked); patched only while the
/// cache's delta stays small ([`statcache::delta_fits`]) and the cache is of this layout.
/// Everything else is built whole.
///
/// # Errors
/// The cache's, asked for the content ids of what changed.
fn how_to_build<'w>(
    store: &Store,
    walked: &'w Scan<'w>,
    plan: &ReadPlan,
    others: Option<[u8; 32]>,
    unchanged: bool,
) -> Result<Build<'w>> {
    let cache = walked.cache();
    let Some(shape) = cache.shape.filter(|s| others == Some(s.others)) else {
        return Ok(Build::Whole);
    };
    if unchanged {
        return Ok(Build::Same(shape));
    }
    Ok(match changes(store, walked, plan)? {
        Some(changes)
            if statcache::delta_fits(changes.cache.len(), cache.delta.tree_ids.len(), cache.entries.len()) =>
        {
            Build::Patch(shape, changes)
        }
        _ => Build::Whole,
    })
}

/// What a walk changed against the stat cache it was matched with.
struct Changes<'w> {
    /// The cache's new delta, in component order: every entry the old delta gave or removed
    /// that still differs from the whole cache, and every file this walk found changed,
    /// new, gone, or read again.
    cache: Vec<(&'w [u8], Option<Cached>)>,
    /// Every file whose node changed, with its old and new node.
    leaves: Vec<Leaf<'w>>,
}

/// What a walk changed against its cache, entry by entry in walk order; each is resolved
/// once the cache's ids it needs are read ([`changes`]).
enum Change<'w> {
    /// Cache entry `c`'s file is gone.
    Gone(usize),
    /// The file at `path` was read: its new cache entry and node, and its old cache entry
    /// if it had one.
    Read { path: &'w [u8], now: Cached, node: Node, was: Option<usize> },
    /// Cache entry `c`, given by the old delta and vouched for by it now: carried into the
    /// new one.
    Carried(usize),
}

impl Change<'_> {
    /// The cache entry whose content id it needs.
    fn cache_entry(&self) -> Option<usize> {
        match self {
            Change::Gone(c) | Change::Carried(c) => Some(*c),
            Change::Read { was, .. } => *was,
        }
    }
}

/// Matches the walk's files (with the ids the plan has for them) with the cache's entries;
/// `None` once the changes are more than a delta may hold, at the latest one entry after
/// (the whole cache is written then, and a change of a large tree's every file is not
/// listed first). The cache's content ids are asked only of the entries that changed.
///
/// # Errors
/// The cache's, asked for those ids ([`StatCache::ids_of`]).
fn changes<'w>(store: &Store, walked: &'w Scan<'w>, plan: &ReadPlan) -> Result<Option<Changes<'w>>> {
    let cache = walked.cache();
    let most = statcache::delta_max_entries(cache.entries.len());
    // One entry of the new delta each.
    let mut found: Vec<Change<'w>> = Vec::new();
    // Cache entries below `next` are matched or gone (both lists are in component order).
    let mut next = 0;
    for (i, e) in walked.iter().enumerate() {
        let cached = e.cached;
        if found.len() + cached.map_or(0, |c| c.saturating_sub(next)) > most {
            return Ok(None);
        }
        if let Some(c) = cached {
            found.extend((next..c).map(Change::Gone));
            next = c + 1;
        }
        match (plan.known(i).filter(|_| *e.kind == Kind::File), cached) {
            // Not a file now, or not read: whatever the cache held there is gone.
            (None, _) => found.extend(cached.map(Change::Gone)),
            // Vouched for by its cache entry, whose stat it has: the same node. An entry
            // the old delta gave is carried into the new one.
            (Some(Known::Cached(c)), _) => found.extend(Some(Change::Carried(c)).filter(|_| cache.given(c))),
            (Some(Known::Read(id)), was) => {
                let (now, node) = (Cached { stat: plan.stat_of(i, &e), id }, node(e.path, &e.stat, id));
                found.push(Change::Read { path: e.path, now, node, was });
            }
        }
    }
    if found.len() + cache.entries.len().saturating_sub(next) > most {
        return Ok(None);
    }
    found.extend((next..cache.entries.len()).map(Change::Gone));
    // One id for each change that names a cache entry, in order ([`StatCache::ids_of`]).
    let mut ids = cache.ids_of(store, found.iter().filter_map(Change::cache_entry))?.into_iter();
    let mut old = |c: usize| {
        let id = ids.next().expect("one id per entry asked");
        (id, node(cache.entries.path(c), &cache.entries.stat(c), id))
    };
    let mut out = Changes { cache: Vec::with_capacity(found.len()), leaves: Vec::new() };
    for change in found {
        match change {
            Change::Gone(c) => {
                let path = cache.entries.path(c);
                out.cache.push((path, None));
                out.leaves.push(Leaf { path, was: Some(old(c).1), now: None });
            }
            Change::Read { path, now, node, was } => {
                out.cache.push((path, Some(now)));
                let was = was.map(|c| old(c).1);
                if was.as_ref() != Some(&node) {
                    out.leaves.push(Leaf { path, was, now: Some(node) });
                }
            }
            Change::Carried(c) => {
                let stat = cache.entries.stat(c);
                out.cache.push((cache.entries.path(c), Some(Cached { stat, id: old(c).0 })));
            }
        }
    }
    // What the old delta removed from the whole cache and the walk did not find again.
    for path in &cache.delta.removed {
        let found = walked.position(path).is_some_and(|i| *walked.get(i).kind == Kind::File && plan.known(i).is_some());
        if !found {
            out.cache.push((path, None));
        }
    }
    out.cache.sort_by(|a, b| walk::component_order(a.0, b.0));
    Ok(Some(out))
}

/// A file's node in a tree: its name, mode, size and content.
fn node(path: &[u8], stat: &walk::Stat, id: ContentId) -> Node {
    Node { name: name_of(path).to_vec(), mode: stat.mode, size: stat.size, kind: NodeKind::File(id) }
}

/// Phase 6, patched: the shape's tree with the walk's changes, and a delta over the stat
/// cache; `None` if the tree in the store is not what the cache says (then built whole).
fn patch_tree(
    store: &Store,
    walked: &Scan<'_>,
    shape: Shape,
    changes: &Changes<'_>,
    session_id: &str,
    taken_at_ns: i128,
) -> Result<Option<Built>> {
    let cache = walked.cache();
    let Some(patched) = patch::patch(store, shape.root, &changes.leaves, &|id| cache.names_tree(id))? else {
        return Ok(None);
    };
    // The nodes made since the whole cache that the new tree still has (those of the
    // directories made again now go: a node named here is kept from `gc`), and those made
    // now. Any node of the new tree is kept through its root, which the delta names.
    let replaced: HashSet<&ContentId> = patched.replaced.iter().collect();
    let whole: HashSet<&ContentId> = cache.tree_ids.iter().collect();
    let mut tree_ids: Vec<ContentId> =
        cache.delta.tree_ids.iter().filter(|id| !replaced.contains(id)).copied().collect();
    let mut listed: HashSet<ContentId> = tree_ids.iter().copied().collect();
    tree_ids.extend(patched.trees.made.iter().filter(|id| !whole.contains(id) && listed.insert(**id)));
    // A patch that made more nodes than a delta may name: the whole tree and cache instead.
    if !statcache::delta_fits(changes.cache.len(), tree_ids.len(), cache.entries.len()) {
        return Ok(None);
    }
    let shape = Shape { root: patched.root, others: shape.others };
    let write =
        statcache::seal_delta(store, session_id, cache.generation, taken_at_ns, &changes.cache, &tree_ids, shape)?;
    Ok(Some(Built {
        root: patched.root,
        nested: nested_of(walked.iter()),
        pending: patched.trees.pending,
        stored: patched.trees.stored,
        cache: Some(write),
    }))
}

/// What phase 6 knows for the stat cache: whether the old one still holds
/// ([`cache_still_holds`]), the digest of the walk's other entries if a shape goes with its
/// files, and when this snapshot's walk began. (The directory nodes of the snapshot the old
/// one describes it asks the cache itself: [`StatCache::names_tree`].)
struct CacheUpdate {
    unchanged: bool,
    others: Option<[u8; 32]>,
    taken_at_ns: i128,
}

/// Phase 6: builds the trees bottom-up, and stores the new stat cache's pieces unless the
/// old one still describes this snapshot.
fn build_trees(
    store: &Store,
    walked: &Scan<'_>,
    plan: &ReadPlan,
    cache: CacheUpdate,
    session_id: &str,
) -> Result<Built> {
    let previous = walked.cache();
    let known = |id: &ContentId| previous.names_tree(id);
    let mut sealer = Sealer::new(store, &known);
    let mut stream = Stream::default();
    // Every file the cache vouches for needs its id here (none in a first snapshot).
    let cache_ids = if plan.vouches() { previous.all_ids(store)? } else { Vec::new() };
    for (i, e) in walked.iter().enumerate() {
        let (dir, name) = (dir_of(e.path), name_of(e.path).to_vec());
        let node = match e.kind {
            Kind::File => {
                let Some(id) = plan.id_in(i, &cache_ids) else { continue };
                Node { name, mode: e.stat.mode, size: e.stat.size, kind: NodeKind::File(id) }
            }
            Kind::Symlink(target) => sealer.symlink(name, e.stat.mode, target)?,
            Kind::Gitlink(commit) => Node { name, mode: 0, size: 0, kind: NodeKind::Gitlink(commit.clone()) },
        };
        stream.add(&mut sealer, dir, node)?;
    }
    let root = stream.finish(&mut sealer)?;
    let trees = sealer.finish();
    let unchanged_cache = cache.unchanged && trees.made.iter().all(|id| previous.names_tree(id));
    let cache = if unchanged_cache {
        None
    } else {
        let files = || {
            walked.iter().enumerate().filter_map(|(i, e)| {
                let id = plan.id_in(i, &cache_ids).filter(|_| *e.kind == Kind::File)?;
                Some((e.path, Cached { stat: plan.stat_of(i, &e), id }))
            })
        };
        let shape = cache.others.map(|others| Shape { root, others });
        Some(statcache::store_whole(store, session_id, cache.taken_at_ns, &files, &trees.made, shape)?)
    };
    Ok(Built { root, nested: nested_of(walked.iter()), pending: trees.pending, stored: trees.stored, cache })
}

/// The digest of the walk's entries that are not files ([`statcache::others_digest`]).
fn others_digest(walked: &Scan<'_>) -> [u8; 32] {
    statcache::others_digest(walked.iter().map(|e| (e.path, e.kind, e.stat.mode)))
}

/// The nested repositories among what a walk found, with their commits.
pub(super) fn nested_of<'a>(found: impl Iterator<Item = Seen<'a>>) -> Vec<NestedRepo> {
    found
        .filter_map(|e| match e.kind {
            Kind::Gitlink(commit) => {
                Some(NestedRepo { path: String::from_utf8_lossy(e.path).into_owned(), commit: commit.clone() })
            }
            _ => None,
        })
        .collect()
}

/// At most this many racily clean files, read again and found the same, that a rewritten
/// cache would now settle are left to be read again instead of rewriting it for them.
const SETTLE_LATER_FILES: usize = 64;
/// … and at most this many bytes of them.
const SETTLE_LATER_BYTES: u64 = 4 << 20;

/// Whether the old stat cache still describes this snapshot: every file kept the stat and
/// id it holds. A racily clean file read again and found the same does not make it stale:
/// until its mtime is past the margin it could not be settled anyway, and after that a few
/// such files ([`SETTLE_LATER_FILES`], [`SETTLE_LATER_BYTES`]) are simply read again — an
/// agent's edit is snapshotted at once and again moments later, and reading the file it
/// edited costs far less than rewriting the cache of a large tree; the next rewrite for
/// any other reason settles them.
///
/// # Errors
/// The cache's, asked for the ids of the files read again with the stat it holds.
fn cache_still_holds(store: &Store, walked: &Scan<'_>, plan: &ReadPlan, taken_at_ns: i128) -> Result<bool> {
    let cache = walked.cache();
    if plan.files as usize != cache.entries.len() {
        return Ok(false);
    }
    let (mut settling, mut settling_bytes) = (0usize, 0u64);
    // Files read again with the cached stat: the cache still holds if their ids are its.
    let (mut again, mut read_ids) = (Vec::new(), Vec::new());
    for (i, e) in walked.iter().enumerate().filter(|(_, e)| *e.kind == Kind::File) {
        let stat = plan.stat_of(i, &e);
        let Some(c) = e.cached.filter(|&c| cache.entries.stat(c) == stat) else { return Ok(false) };
        match plan.known(i) {
            // Vouched for by this very entry ([`classify`]): its id is the entry's.
            Some(Known::Cached(_)) => {}
            Some(Known::Read(id)) => {
                again.push(c);
                read_ids.push(id);
            }
            _ => return Ok(false),
        }
        if plan.was_read(i) && statcache::settled(&stat, taken_at_ns) {
            settling += 1;
            settling_bytes += stat.size;
        }
    }
    if settling > SETTLE_LATER_FILES || settling_bytes > SETTLE_LATER_BYTES {
        return Ok(false);
    }
    Ok(cache.ids_of(store, again)? == read_ids)
}

/// Phase 7: one transaction — the trees, the record, what the turns are told, and the new
/// stat cache's row (a whole cache's manifest, or a delta).
pub(super) fn commit(
    store: &Store,
    record: &mut SnapshotRecord,
    built: Option<Built>,
    opts: &TakeOptions<'_>,
    hooks: &dyn Hooks,
) -> Result<()> {
    let mut txn = store.kv().begin()?;
    let mut cache = None;
    if let Some(built) = built {
        record.stored_bytes += built.stored + object::store_all(&mut *txn, &built.pending)?;
        record.root = Some(built.root.to_hex());
        record.nested_repos = built.nested;
        cache = built.cache;
    }
    cancelled(opts)?;
    put_record(store, &mut *txn, record)?;
    if record.watch.is_some() && record.root.is_some() && record.skipped.is_none() {
        txn.put(crate::storage::schema::WATCHED_NEWEST, record.workspace_id.as_bytes(), record.snapshot_id.as_bytes())?;
    }
    hooks.committed(&mut *txn, record)?;
    if let Some(value) = &cache {
        statcache::put_in(&mut *txn, &record.session_id, value)?;
    }
    txn.commit()
}

fn limit_reason(files: u64, max_files: u64, bytes: u64, max_bytes: u64, what: &str) -> Option<String> {
    if files > max_files {
        Some(format!("too many {what}files ({files} > {max_files})"))
    } else if bytes > max_bytes {
        Some(format!(
            "{what}files exceed {} ({} > {})",
            format_size(max_bytes),
            format_size(bytes),
            format_size(max_bytes)
        ))
    } else {
        None
    }
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
    fn an_entry_has_its_cache_entrys_id_until_it_is_read_and_then_the_id_read() {
        let mut ids = Ids::new(5);
        // Vouched for by cache entries 2 and 0; unknown; an index past the flag's room.
        for c in [Some(2), Some(0), None, Some(Ids::READ as usize), Some(usize::MAX)] {
            ids.push(c);
        }
        let got = |ids: &Ids| (0..5).map(|i| (ids.get(i), ids.was_read(i))).collect::<Vec<_>>();
        let read = |n: u8| Some(Known::Read(ContentId([n; 32])));
        let cached = |c: usize| Some(Known::Cached(c));
        assert_eq!(got(&ids), [(cached(2), false), (cached(0), false), (None, false), (None, false), (None, false)]);
        ids.set_read(2, ContentId([7; 32]));
        ids.set_read(0, ContentId([8; 32]));
        ids.set_read(4, ContentId([9; 32]));
        assert_eq!(got(&ids), [(read(8), true), (cached(0), false), (read(7), true), (None, false), (read(9), true)]);
    }

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
