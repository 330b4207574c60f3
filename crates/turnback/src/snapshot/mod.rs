//! Snapshots: the state of a whole workspace at a moment, as a Merkle tree of encrypted,
//! content-addressed nodes shared between snapshots.
//!
//! Invariants:
//! - A snapshot never reads or writes anything under `.git` but the nested repositories'
//!   `HEAD` and refs (read-only, see [`walk`](crate::fs::walk)); it runs no process.
//! - Only files whose stat changed since the session's last snapshot are read (the
//!   [`statcache`](crate::snapshot::statcache) decides, re-reading racily clean files); they are
//!   read and hashed on a thread pool, and content the store lacks is packed into shared
//!   blocks ([`pack`](crate::storage::pack)) compressed and encrypted on the thread pool too.
//! - Limits are checked after the walk and before any content is read or stored; a
//!   snapshot over a limit is recorded as skipped with the reason, and nothing else.
//! - Content objects are written before the transaction that commits the snapshot record
//!   (with its trees and the new stat cache) and are protected from `gc` meanwhile by the
//!   shared objects lock; a crash in between leaves only unreferenced objects, which `gc`
//!   removes. Snapshots of one session are taken one at a time (the session lock): a
//!   second waits, it is never skipped.
//! - The stat cache always describes the session's latest snapshot, so the content ids it
//!   holds are kept alive by that snapshot.

pub mod diff;
pub mod statcache;
pub mod tree;

use std::collections::{BTreeMap, HashSet};
use std::io::Read;
use std::os::unix::ffi::OsStrExt;

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::error::{Error, ErrorCode, Result};
use crate::fs::lock;
use crate::fs::walk::{self, Entry, Kind, Skipped};
use crate::session::Session;
use crate::session::workspace::Workspace;
use crate::snapshot::statcache::{Cached, StatCache};
use crate::snapshot::tree::{Node, NodeKind};
use crate::storage::kv::Ns;
use crate::storage::object::{self, ContentClass, ContentId, Sealed};
use crate::storage::pack::Packer;
use crate::storage::store::{Store, format_ms, now_ms};

pub(crate) const NS_SNAPSHOTS: Ns = "snapshots";
const NS_BY_SESSION: Ns = "snapshots-by-session";
const NS_BY_TURN: Ns = "snapshots-by-turn";
const SNAPSHOT_SCHEMA: u16 = 1;
/// Bytes of file content read and sealed per batch (bounds memory).
const BATCH_BYTES: u64 = 16 * 1024 * 1024;

/// Why a snapshot was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SnapshotKind {
    /// `turnback snapshot`.
    AdHoc,
    /// The start of a turn.
    TurnStart,
    /// The end of a turn.
    TurnEnd,
    /// Before a rewind changed the workspace.
    PreRewind,
}

/// A nested repository recorded as a pointer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NestedRepo {
    /// Its path in the workspace.
    pub path: String,
    /// Its checked-out commit.
    pub commit: String,
}

/// One snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotRecord {
    /// Its id (UUID v7).
    pub snapshot_id: String,
    /// The session.
    pub session_id: String,
    /// The workspace.
    pub workspace_id: String,
    /// Why it was taken.
    pub kind: SnapshotKind,
    /// The root tree's id (none when skipped).
    pub root: Option<String>,
    /// When the walk began (RFC 3339).
    pub created_at: String,
    /// Files recorded.
    pub files: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Files that had to be read (new or changed since the previous snapshot).
    pub read_files: u64,
    /// Their bytes.
    pub read_bytes: u64,
    /// Bytes newly stored (encrypted), content and trees.
    pub stored_bytes: u64,
    /// Paths removed by the unconditional exclusions.
    pub excluded: u64,
    /// Nested repositories recorded as pointers.
    pub nested_repos: Vec<NestedRepo>,
    /// Paths left out with a reason (a nested repository without a commit, unreadable).
    pub skipped_paths: Vec<Skipped>,
    /// Why the whole snapshot was skipped, if it was.
    pub skipped: Option<String>,
    /// Milliseconds it took.
    pub duration_ms: u64,
    /// The turn it belongs to, if any.
    #[serde(default)]
    pub turn_id: Option<String>,
}

/// A hook run inside the transaction that commits a snapshot record.
pub type InCommit<'a> = &'a dyn Fn(&mut dyn crate::storage::kv::Txn, &SnapshotRecord) -> Result<()>;

/// How to take a snapshot.
#[derive(Clone, Copy, Default)]
pub struct TakeOptions<'a> {
    /// Why.
    pub kind: Option<SnapshotKind>,
    /// The turn it belongs to.
    pub turn_id: Option<&'a str>,
    /// Checked between batches and, finally, inside the committing transaction: once set,
    /// the snapshot is abandoned and nothing of it is committed (`cancelled` error).
    pub cancel: Option<&'a std::sync::atomic::AtomicBool>,
    /// Run inside the committing transaction (a turn attaches the snapshot to itself).
    pub in_commit: Option<InCommit<'a>>,
    /// Told, after each batch, the bytes read so far and the bytes to read in all.
    pub progress: Option<&'a (dyn Fn(u64, u64) + Sync)>,
}

impl std::fmt::Debug for TakeOptions<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TakeOptions").field("kind", &self.kind).field("turn_id", &self.turn_id).finish()
    }
}

fn cancelled(opts: &TakeOptions<'_>) -> Result<()> {
    match opts.cancel {
        Some(flag) if flag.load(std::sync::atomic::Ordering::SeqCst) => {
            Err(Error::new(ErrorCode::Cancelled, "cancelled; nothing of the snapshot was recorded"))
        }
        _ => Ok(()),
    }
}

/// Takes a snapshot of `workspace` for `session`.
///
/// # Errors
/// I/O errors of the store; a snapshot over a limit is not an error but a record with
/// `skipped` set.
pub fn take(store: &Store, workspace: &Workspace, session: &Session, kind: SnapshotKind) -> Result<SnapshotRecord> {
    take_with(store, workspace, session, &TakeOptions { kind: Some(kind), ..TakeOptions::default() })
}

/// [`take`] with a turn, a cancellation flag and a commit hook.
///
/// # Errors
/// As [`take`]; `cancelled` if the flag was set before the record committed.
pub fn take_with(
    store: &Store,
    workspace: &Workspace,
    session: &Session,
    opts: &TakeOptions<'_>,
) -> Result<SnapshotRecord> {
    let kind = opts.kind.unwrap_or(SnapshotKind::AdHoc);
    let started = std::time::Instant::now();
    let _session_turn = lock::session(&store.locks_dir(), &session.id)?;
    let _objects = lock::objects(&store.locks_dir(), false)?;
    let taken_at_ns = i128::from(now_ms()) * 1_000_000;
    let created_at = format_ms(now_ms());
    let walked = walk::walk(&workspace.root, store.protected_paths())?;
    crate::base::failpoint::hit("snapshot-walked");
    let cache = StatCache::load(store, &session.id)?;
    let first = latest(store, &session.id)?.is_none();

    // Which files must be read: everything the stat cache cannot vouch for.
    let mut ids: Vec<Option<ContentId>> = Vec::with_capacity(walked.entries.len());
    let mut to_read = Vec::new();
    let (mut files, mut bytes, mut read_bytes) = (0u64, 0u64, 0u64);
    for (i, e) in walked.entries.iter().enumerate() {
        let id = match e.kind {
            Kind::File => {
                files += 1;
                bytes += e.stat.size;
                cache.clean_id(&e.path, &e.stat)
            }
            _ => None,
        };
        if id.is_none() && e.kind == Kind::File {
            to_read.push(i);
            read_bytes += e.stat.size;
        }
        ids.push(id);
    }
    let limits = store.settings().snapshots;
    let (new_files, new_bytes) = if cache.entries.is_empty() && !to_read.is_empty() {
        // No stat cache (lost, or an older format): what a later snapshot *adds* is still
        // judged against the previous snapshot, by path and size, so re-reading unchanged
        // files does not count against the limit.
        let previous = match latest(store, &session.id)?.and_then(|r| r.root).as_deref().and_then(ContentId::from_hex) {
            Some(root) => flatten(store, &root)?,
            None => BTreeMap::new(),
        };
        to_read
            .iter()
            .map(|&i| &walked.entries[i])
            .filter(|e| previous.get(&e.path).is_none_or(|n| n.size != e.stat.size))
            .fold((0u64, 0u64), |(n, b), e| (n + 1, b + e.stat.size))
    } else {
        // A racily clean file (stat as cached, only too recent to trust) is read again but
        // adds nothing new: it does not count against the limit.
        to_read
            .iter()
            .map(|&i| &walked.entries[i])
            .filter(|e| cache.entries.get(&e.path).is_none_or(|c| c.stat != e.stat))
            .fold((0u64, 0u64), |(n, b), e| (n + 1, b + e.stat.size))
    };
    // A pre-rewind snapshot is how a rewind sees the workspace: however much an agent
    // added, it must be taken, or the mess could never be rewound.
    let over = if kind == SnapshotKind::PreRewind {
        None
    } else if first {
        limit_reason(files, limits.first_max_files, bytes, limits.first_max_bytes, "")
    } else {
        limit_reason(new_files, limits.later_max_files, new_bytes, limits.later_max_bytes, "new or changed ")
    };
    let mut record = SnapshotRecord {
        snapshot_id: uuid::Uuid::now_v7().to_string(),
        session_id: session.id.clone(),
        workspace_id: workspace.id.clone(),
        kind,
        root: None,
        created_at,
        files,
        bytes,
        read_files: to_read.len() as u64,
        read_bytes,
        stored_bytes: 0,
        excluded: walked.excluded,
        nested_repos: Vec::new(),
        skipped_paths: walked.skipped.clone(),
        skipped: over,
        duration_ms: 0,
        turn_id: opts.turn_id.map(str::to_string),
    };
    if record.skipped.is_some() {
        record.duration_ms = started.elapsed().as_millis() as u64;
        let mut txn = store.kv().begin()?;
        cancelled(opts)?;
        put_record(store, &mut *txn, &record)?;
        if let Some(hook) = opts.in_commit {
            hook(&mut *txn, &record)?;
        }
        txn.commit()?;
        prune(store, &session.id)?;
        return Ok(record);
    }

    // Read, hash and pack what the store lacks; each batch is stored by a writer thread
    // while the next one is read.
    let mut stat_after = vec![None; walked.entries.len()];
    let mut packed = HashSet::new();
    let (tx, rx) = std::sync::mpsc::sync_channel::<crate::storage::pack::SealedPack>(1);
    let stored = std::thread::scope(|scope| -> Result<u64> {
        let writer = scope.spawn(move || -> Result<u64> {
            let mut written = 0;
            for sealed in rx {
                let mut txn = store.kv().begin()?;
                written += sealed.store(&mut *txn)?;
                txn.commit()?;
            }
            Ok(written)
        });
        let reading = (|| -> Result<()> {
            // While one batch is read and hashed, the previous one is compressed and
            // encrypted: both cores stay busy through the batch boundaries.
            let mut previous: Option<Packer> = None;
            let mut done_bytes = 0u64;
            for batch in batches(&to_read, &walked.entries) {
                cancelled(opts)?;
                if let Some(progress) = opts.progress {
                    progress(done_bytes, read_bytes);
                }
                done_bytes += batch.iter().map(|&i| walked.entries[i].stat.size).sum::<u64>();
                let (sealed, read) = rayon::join(
                    || previous.take().map(|p| p.seal(store.keys())).transpose(),
                    || -> Vec<(usize, Result<ReadFile>)> {
                        batch
                            .par_iter()
                            .map(|&i| (i, read_and_hash(store, &workspace.root, &walked.entries[i])))
                            .collect()
                    },
                );
                if let Some(sealed) = sealed?
                    && tx.send(sealed).is_err()
                {
                    return Ok(()); // the writer failed; its error is reported below
                }
                let read_ids: Vec<ContentId> = read.iter().filter_map(|(_, r)| r.as_ref().ok().map(|f| f.0)).collect();
                let mut in_store = object::exist_each(store.kv(), &read_ids)?.into_iter();
                let mut packer = Packer::default();
                for (i, result) in read {
                    match result {
                        Ok((id, bytes, stat)) => {
                            // `packed`: an earlier batch may still be on its way to the store.
                            if !in_store.next().unwrap_or(false) && packed.insert(id) {
                                packer.add(id, ContentClass::of(&bytes), &bytes);
                            }
                            ids[i] = Some(id);
                            stat_after[i] = Some(stat);
                        }
                        // Vanished or became unreadable since the walk: left out, with the reason.
                        Err(e) => record.skipped_paths.push(Skipped {
                            path: String::from_utf8_lossy(&walked.entries[i].path).into_owned(),
                            reason: e.message,
                        }),
                    }
                }
                previous = Some(packer).filter(|p| !p.is_empty());
            }
            if let Some(last) = previous {
                let _ = tx.send(last.seal(store.keys())?);
            }
            Ok(())
        })();
        drop(tx);
        let written = writer.join().map_err(|_| Error::new(ErrorCode::Io, "snapshot writer thread panicked"))?;
        reading?;
        written
    })?;
    record.stored_bytes += stored;

    // Build the trees bottom-up and commit them with the record and the new stat cache.
    // The old cache still describes this snapshot when every file kept the stat and id it
    // holds. A racily clean file read again and found the same does not make it stale:
    // the cache is rewritten for it (with this walk's time) only once that would settle
    // it, i.e. its mtime is past the margin now; until then it is simply read again,
    // which costs far less than rewriting the cache of a large tree at every snapshot.
    let unchanged_cache = files as usize == cache.entries.len()
        && walked.entries.iter().enumerate().filter(|(_, e)| e.kind == Kind::File).all(|(i, e)| {
            let stat = stat_after[i].unwrap_or(e.stat);
            let same =
                ids[i].is_some_and(|id| cache.entries.get(&e.path).is_some_and(|c| c.id == id && c.stat == stat));
            let would_settle =
                stat_after[i].is_some() && stat.mtime_ns + crate::snapshot::statcache::RACY_MARGIN_NS < taken_at_ns;
            same && !would_settle
        });
    let mut new_cache = StatCache { taken_at_ns, entries: Default::default(), tree_ids: Vec::new() };
    let mut builder = TreeBuilder { previous: cache.tree_ids.iter().copied().collect(), ..TreeBuilder::default() };
    let mut nested = Vec::new();
    for (i, e) in walked.entries.iter().enumerate() {
        let name = e.path.rsplit(|c| *c == b'/').next().unwrap_or_default().to_vec();
        let dir = &e.path[..e.path.len() - name.len()].strip_suffix(b"/").unwrap_or_default();
        let node = match &e.kind {
            Kind::File => {
                let Some(id) = ids[i] else { continue };
                let stat = stat_after[i].unwrap_or(e.stat);
                if !unchanged_cache {
                    new_cache.entries.insert(e.path.clone(), Cached { stat, id });
                }
                Node { name, mode: e.stat.mode, size: e.stat.size, kind: NodeKind::File(id) }
            }
            Kind::Symlink(target) => {
                let (id, sealed) = object::seal(store.keys(), target, ContentClass::SymlinkTarget, |_| false)?;
                builder.pending.extend(sealed);
                Node { name, mode: e.stat.mode, size: 0, kind: NodeKind::Symlink(id) }
            }
            Kind::Gitlink(commit) => {
                nested.push(NestedRepo { path: String::from_utf8_lossy(&e.path).into_owned(), commit: commit.clone() });
                Node { name, mode: 0, size: 0, kind: NodeKind::Gitlink(commit.clone()) }
            }
        };
        builder.add(store, dir, node)?;
    }
    let root = builder.finish(store)?;
    record.root = Some(root.to_hex());
    record.nested_repos = nested;
    let mut txn_bytes = 0;
    let pending = std::mem::take(&mut builder.pending);
    record.duration_ms = started.elapsed().as_millis() as u64;
    let unchanged_cache = unchanged_cache && builder.seen.iter().all(|id| builder.previous.contains(id));
    let cache_value = if unchanged_cache {
        None
    } else {
        new_cache.tree_ids = builder.seen.iter().copied().collect();
        Some(new_cache.seal(store, &session.id)?)
    };
    {
        let mut txn = store.kv().begin()?;
        for sealed in &pending {
            txn_bytes += object::store_sealed(&mut *txn, sealed)?;
        }
        record.stored_bytes += txn_bytes;
        cancelled(opts)?;
        put_record(store, &mut *txn, &record)?;
        if let Some(hook) = opts.in_commit {
            hook(&mut *txn, &record)?;
        }
        if let Some(value) = &cache_value {
            txn.put(crate::snapshot::statcache::NS_STATCACHE, session.id.as_bytes(), value)?;
        }
        txn.commit()?;
    }
    prune(store, &session.id)?;
    Ok(record)
}

fn limit_reason(files: u64, max_files: u64, bytes: u64, max_bytes: u64, what: &str) -> Option<String> {
    if files > max_files {
        Some(format!("too many {what}files ({files} > {max_files})"))
    } else if bytes > max_bytes {
        Some(format!(
            "{what}files exceed {} ({} > {})",
            crate::storage::settings::format_size(max_bytes),
            crate::storage::settings::format_size(bytes),
            crate::storage::settings::format_size(max_bytes)
        ))
    } else {
        None
    }
}

fn batches<'a>(to_read: &'a [usize], entries: &'a [Entry]) -> Vec<&'a [usize]> {
    let mut out = Vec::new();
    let (mut start, mut size) = (0, 0u64);
    for (k, &i) in to_read.iter().enumerate() {
        size += entries[i].stat.size;
        if size >= BATCH_BYTES {
            out.push(&to_read[start..=k]);
            start = k + 1;
            size = 0;
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
fn read_and_hash(store: &Store, root: &std::path::Path, e: &Entry) -> Result<ReadFile> {
    use std::os::unix::fs::OpenOptionsExt;
    let path = root.join(std::ffi::OsStr::from_bytes(&e.path));
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32 | rustix::fs::OFlags::NONBLOCK.bits() as i32)
        .open(&path)
        .map_err(|err| Error::new(ErrorCode::Io, format!("{}: {err}", path.display())))?;
    let meta = file.metadata().map_err(|err| Error::new(ErrorCode::Io, format!("{}: {err}", path.display())))?;
    if !meta.is_file() {
        return Err(Error::new(ErrorCode::Io, "no longer a regular file"));
    }
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
    use std::os::unix::fs::MetadataExt;
    let stat = walk::Stat {
        mode: meta.mode(),
        size: meta.size(),
        mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
        ctime_ns: i128::from(meta.ctime()) * 1_000_000_000 + i128::from(meta.ctime_nsec()),
        device: meta.dev(),
        inode: meta.ino(),
    };
    Ok((id, bytes, stat))
}

/// Builds directory nodes bottom-up from entries in component order.
#[derive(Default)]
struct TreeBuilder {
    /// Open directories from the root down: (path, entries so far).
    stack: Vec<(Vec<u8>, Vec<Node>)>,
    /// Sealed nodes not stored yet.
    pending: Vec<Sealed>,
    /// Node ids already sealed in this run.
    seen: HashSet<ContentId>,
    /// Node ids of the session's previous snapshot (known to be stored: that snapshot
    /// keeps them alive), so unchanged directories cost no store lookup.
    previous: HashSet<ContentId>,
}

impl TreeBuilder {
    fn add(&mut self, store: &Store, dir: &[u8], node: Node) -> Result<()> {
        if self.stack.is_empty() {
            self.stack.push((Vec::new(), Vec::new()));
        }
        // Close directories that are not ancestors of `dir`.
        while self.stack.len() > 1 && !is_ancestor(&self.stack.last().expect("non-empty").0, dir) {
            self.close(store)?;
        }
        // Open the directories between the innermost open one and `dir`.
        let open = self.stack.last().expect("non-empty").0.clone();
        let rest = if open.is_empty() { dir } else { &dir[(open.len() + 1).min(dir.len())..] };
        if !rest.is_empty() {
            let mut path = open;
            for comp in rest.split(|c| *c == b'/') {
                if !path.is_empty() {
                    path.push(b'/');
                }
                path.extend_from_slice(comp);
                self.stack.push((path.clone(), Vec::new()));
            }
        }
        self.stack.last_mut().expect("non-empty").1.push(node);
        Ok(())
    }

    fn close(&mut self, store: &Store) -> Result<()> {
        let (path, nodes) = self.stack.pop().expect("non-empty");
        let id = self.seal(store, nodes)?;
        let name = path.rsplit(|c| *c == b'/').next().unwrap_or_default().to_vec();
        self.stack.last_mut().expect("a parent").1.push(Node { name, mode: 0, size: 0, kind: NodeKind::Tree(id) });
        Ok(())
    }

    fn seal(&mut self, store: &Store, nodes: Vec<Node>) -> Result<ContentId> {
        let encoded = tree::encode(nodes);
        let (id, sealed) = object::seal(store.keys(), &encoded, ContentClass::Tree, |id| {
            self.seen.contains(id) || self.previous.contains(id) || object::exists(store.kv(), id).unwrap_or(false)
        })?;
        self.seen.insert(id);
        self.pending.extend(sealed);
        Ok(id)
    }

    fn finish(&mut self, store: &Store) -> Result<ContentId> {
        if self.stack.is_empty() {
            self.stack.push((Vec::new(), Vec::new()));
        }
        while self.stack.len() > 1 {
            self.close(store)?;
        }
        let (_, nodes) = self.stack.pop().expect("root");
        self.seal(store, nodes)
    }
}

fn is_ancestor(dir: &[u8], of: &[u8]) -> bool {
    dir.is_empty() || of == dir || (of.starts_with(dir) && of.get(dir.len()) == Some(&b'/'))
}

pub(crate) fn put_record(store: &Store, txn: &mut dyn crate::storage::kv::Txn, record: &SnapshotRecord) -> Result<()> {
    let key = record.snapshot_id.as_bytes();
    txn.put(NS_SNAPSHOTS, key, &store.seal_record(NS_SNAPSHOTS, key, SNAPSHOT_SCHEMA, record)?)?;
    txn.put(NS_BY_SESSION, format!("{}/{}", record.session_id, record.snapshot_id).as_bytes(), b"")?;
    if let Some(turn) = &record.turn_id {
        txn.put(NS_BY_TURN, by_turn_key(turn, record.kind).as_bytes(), record.snapshot_id.as_bytes())?;
    }
    Ok(())
}

fn by_turn_key(turn: &str, kind: SnapshotKind) -> String {
    format!("{turn}/{}", if kind == SnapshotKind::TurnEnd { "end" } else { "start" })
}

/// The snapshot id recorded for `turn`'s start or end, read inside `txn`.
pub(crate) fn of_turn(txn: &mut dyn crate::storage::kv::Txn, turn: &str, kind: SnapshotKind) -> Result<Option<String>> {
    Ok(txn.get(NS_BY_TURN, by_turn_key(turn, kind).as_bytes())?.map(|v| String::from_utf8_lossy(&v).into_owned()))
}

/// Removes a snapshot record (and, since the session's stat cache may describe it, the
/// cache too: the next snapshot reads everything again). Its objects are left for `gc`.
pub(crate) fn discard(txn: &mut dyn crate::storage::kv::Txn, record: &SnapshotRecord) -> Result<()> {
    remove(txn, record)?;
    txn.delete(crate::snapshot::statcache::NS_STATCACHE, record.session_id.as_bytes())?;
    Ok(())
}

fn remove(txn: &mut dyn crate::storage::kv::Txn, record: &SnapshotRecord) -> Result<()> {
    txn.delete(NS_SNAPSHOTS, record.snapshot_id.as_bytes())?;
    txn.delete(NS_BY_SESSION, format!("{}/{}", record.session_id, record.snapshot_id).as_bytes())?;
    if let Some(turn) = &record.turn_id {
        txn.delete(NS_BY_TURN, by_turn_key(turn, record.kind).as_bytes())?;
    }
    Ok(())
}

/// Deletes every snapshot of `session` and its stat cache inside `txn`; returns how many.
pub(crate) fn delete_session_in(store: &Store, txn: &mut dyn crate::storage::kv::Txn, session: &str) -> Result<u64> {
    let prefix = format!("{session}/");
    let mut deleted = 0;
    for key in txn.keys(NS_BY_SESSION, prefix.as_bytes())? {
        let id = String::from_utf8_lossy(&key[prefix.len()..]).into_owned();
        match txn.get(NS_SNAPSHOTS, id.as_bytes())? {
            Some(v) => remove(txn, &store.open_record::<SnapshotRecord>(NS_SNAPSHOTS, id.as_bytes(), &v)?)?,
            None => {
                txn.delete(NS_BY_SESSION, &key)?;
            }
        }
        deleted += 1;
    }
    txn.delete(crate::snapshot::statcache::NS_STATCACHE, session.as_bytes())?;
    Ok(deleted)
}

/// What pruning removed.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PruneReport {
    /// Snapshots removed.
    pub snapshots: u64,
    /// Turns whose snapshots were removed.
    pub turns: Vec<String>,
}

/// Keeps `session` within its snapshot budget (count and stored bytes): removes the oldest
/// whole turns — a turn's start and end snapshots together — and oldest ad hoc snapshots,
/// never the newest snapshot (the stat cache describes it). The turns keep their records,
/// with their snapshots marked pruned. Space comes back with `gc`.
pub fn prune(store: &Store, session: &str) -> Result<PruneReport> {
    let limits = store.settings().snapshots;
    let snaps = list(store, session)?;
    let mut count = snaps.len() as u64;
    let mut bytes: u64 = snaps.iter().map(|s| s.stored_bytes).sum();
    let mut report = PruneReport::default();
    if count <= limits.max_per_session && bytes <= limits.max_session_bytes {
        return Ok(report);
    }
    // The stat cache describes the newest snapshot that was not skipped: it is never pruned.
    let newest = snaps.iter().rev().find(|s| s.root.is_some()).map(|s| s.snapshot_id.clone());
    // Units, cheapest loss first: skipped records (they hold nothing), then snapshots that
    // belong to no turn (ad hoc, pre-rewind, previews), then whole turns; oldest first in
    // each group.
    let mut units: Vec<Vec<&SnapshotRecord>> = Vec::new();
    for s in &snaps {
        match s.turn_id.as_deref().and_then(|t| units.iter().position(|u| u[0].turn_id.as_deref() == Some(t))) {
            Some(i) => units[i].push(s),
            None => units.push(vec![s]),
        }
    }
    let rank = |u: &Vec<&SnapshotRecord>| match (u.iter().all(|s| s.root.is_none()), u[0].turn_id.is_some()) {
        (true, _) => 0,
        (false, false) => 1,
        (false, true) => 2,
    };
    units.sort_by_key(rank);
    for unit in units {
        if count <= limits.max_per_session && bytes <= limits.max_session_bytes {
            break;
        }
        if unit.iter().any(|s| Some(&s.snapshot_id) == newest.as_ref()) {
            continue;
        }
        let mut txn = store.kv().begin()?;
        for s in &unit {
            remove(&mut *txn, s)?;
            if let Some(turn) = &s.turn_id {
                crate::session::turn::mark_pruned(store, &mut *txn, turn, s.kind)?;
            }
        }
        txn.commit()?;
        count -= unit.len() as u64;
        bytes = bytes.saturating_sub(unit.iter().map(|s| s.stored_bytes).sum());
        report.snapshots += unit.len() as u64;
        if let Some(turn) = &unit[0].turn_id {
            report.turns.push(turn.clone());
        }
    }
    Ok(report)
}

/// The snapshot `id`.
///
/// # Errors
/// `not-found`; `corrupt` if it does not verify.
pub fn get(store: &Store, id: &str) -> Result<SnapshotRecord> {
    store.get_record(NS_SNAPSHOTS, id.as_bytes())?.ok_or_else(|| Error::not_found(format!("snapshot {id}")))
}

/// The snapshots of `session`, oldest first.
pub fn list(store: &Store, session: &str) -> Result<Vec<SnapshotRecord>> {
    let prefix = format!("{session}/");
    let mut ids = Vec::new();
    store.kv().scan_keys(NS_BY_SESSION, prefix.as_bytes(), &mut |k| {
        ids.push(String::from_utf8_lossy(&k[prefix.len()..]).into_owned());
        Ok(true)
    })?;
    ids.iter().map(|id| get(store, id)).collect()
}

/// Every snapshot in the store, oldest first per session.
pub fn all(store: &Store) -> Result<Vec<SnapshotRecord>> {
    let mut out = Vec::new();
    store.kv().scan(NS_SNAPSHOTS, b"", &mut |k, v| {
        out.push(store.open_record(NS_SNAPSHOTS, k, v)?);
        Ok(true)
    })?;
    Ok(out)
}

/// The latest snapshot of `session` that was not skipped.
pub fn latest(store: &Store, session: &str) -> Result<Option<SnapshotRecord>> {
    Ok(list(store, session)?.into_iter().rev().find(|s| s.root.is_some()))
}

/// Reads and verifies the tree node `id`.
pub fn read_tree(store: &Store, id: &ContentId) -> Result<Vec<Node>> {
    let (header, bytes) = store.read_object(id)?;
    if header.class != ContentClass::Tree {
        return Err(Error::corrupt("tree", "object is not a tree"));
    }
    tree::decode(&bytes)
}

/// Every object id some snapshot reaches (trees, file contents, symlink targets).
pub fn live_objects(store: &Store) -> Result<HashSet<ContentId>> {
    let mut roots = Vec::new();
    store.kv().scan(NS_SNAPSHOTS, b"", &mut |k, v| {
        let r: SnapshotRecord = store.open_record(NS_SNAPSHOTS, k, v)?;
        if let Some(root) = r.root.as_deref().and_then(ContentId::from_hex) {
            roots.push(root);
        }
        Ok(true)
    })?;
    let mut live = HashSet::new();
    let mut stack = roots;
    while let Some(id) = stack.pop() {
        if !live.insert(id) {
            continue;
        }
        for node in read_tree(store, &id)? {
            match node.kind {
                NodeKind::Tree(sub) => stack.push(sub),
                NodeKind::File(f) | NodeKind::Symlink(f) => {
                    live.insert(f);
                }
                NodeKind::Gitlink(_) => {}
            }
        }
    }
    Ok(live)
}

/// Looks single paths up in snapshot trees, decoding each directory node once however
/// many paths and snapshots share it (a rewind asks about the few paths that changed).
pub(crate) struct Lookup<'a> {
    store: &'a Store,
    trees: std::collections::HashMap<ContentId, std::rc::Rc<Vec<Node>>>,
}

impl<'a> Lookup<'a> {
    pub(crate) fn new(store: &'a Store) -> Self {
        Lookup { store, trees: Default::default() }
    }

    fn tree(&mut self, id: &ContentId) -> Result<std::rc::Rc<Vec<Node>>> {
        if let Some(t) = self.trees.get(id) {
            return Ok(std::rc::Rc::clone(t));
        }
        let nodes = std::rc::Rc::new(read_tree(self.store, id)?);
        self.trees.insert(*id, std::rc::Rc::clone(&nodes));
        Ok(nodes)
    }

    /// The node at `path` under `root`, as [`flatten`] would hold it: a file, symlink or
    /// nested repository, never a directory (`None` for a directory or nothing).
    pub(crate) fn node(&mut self, root: &ContentId, path: &[u8]) -> Result<Option<Node>> {
        let mut dir = *root;
        let mut parts = path.split(|c| *c == b'/').peekable();
        while let Some(name) = parts.next() {
            let nodes = self.tree(&dir)?;
            let Ok(i) = nodes.binary_search_by(|n| n.name.as_slice().cmp(name)) else { return Ok(None) };
            match (&nodes[i].kind, parts.peek().is_some()) {
                (NodeKind::Tree(sub), true) => dir = *sub,
                (NodeKind::Tree(_), false) | (_, true) => return Ok(None),
                (_, false) => return Ok(Some(nodes[i].clone())),
            }
        }
        Ok(None)
    }

    /// Whether some proper ancestor directory of `path` is a nested repository under `root`.
    pub(crate) fn under_gitlink(&mut self, root: &ContentId, path: &[u8]) -> Result<bool> {
        let mut at = 0;
        while let Some(slash) = path[at..].iter().position(|c| *c == b'/') {
            if matches!(self.node(root, &path[..at + slash])?, Some(Node { kind: NodeKind::Gitlink(_), .. })) {
                return Ok(true);
            }
            at += slash + 1;
        }
        Ok(false)
    }
}

/// Every path of a snapshot's tree with its node (for diff and rewind).
pub fn flatten(store: &Store, root: &ContentId) -> Result<BTreeMap<Vec<u8>, Node>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![(Vec::new(), *root)];
    while let Some((prefix, id)) = stack.pop() {
        for node in read_tree(store, &id)? {
            let mut path = prefix.clone();
            if !path.is_empty() {
                path.push(b'/');
            }
            path.extend_from_slice(&node.name);
            match node.kind {
                NodeKind::Tree(sub) => stack.push((path, sub)),
                _ => {
                    out.insert(path, node);
                }
            }
        }
    }
    Ok(out)
}
