//! Taking a snapshot, phase by phase: walk (the stat cache loaded meanwhile, or dropped if
//! it does not verify; each file it describes unchanged kept as a reference to it, a
//! [`Scan`]), leave out the files too large to keep, classify (what the stat cache
//! vouches for, what must be read), check the limits on what is kept, read, hash and pack
//! what the store lacks (each batch stored by a writer thread while the next is read),
//! build the trees bottom-up — unless every file is as cached and the walk's other entries
//! are those of the cache's [`Shape`](crate::snapshot::statcache::Shape), when the tree is the one it names — and commit the
//! record with its trees and the new stat cache's row in one transaction.
//!
//! Each phase has its module: the walk [`scan`](super::scan), the limits (2 and 4)
//! [`limits`](super::limits), the read plan (3) [`plan`](super::plan), reading (5)
//! [`read`](super::read), the trees (6) [`build`](super::build); this one runs them and
//! commits (7).
//!
//! Invariants: see [the module](crate::snapshot). Nothing of a snapshot is committed until
//! its last phase but what nothing names yet (content, a large tree's nodes, a whole stat
//! cache's pieces): a cancelled or failed snapshot leaves only that, which `gc` removes.

use crate::base::time::{format_ms, now_ms};
use crate::error::{Error, ErrorCode, Result};
use crate::snapshot::build::{Built, build};
use crate::snapshot::limits::{Baseline, leave_out, over_limit};
use crate::snapshot::options::{TakeOptions, cancelled};
use crate::snapshot::plan::classify;
use crate::snapshot::prune::prune;
use crate::snapshot::read::read_and_pack;
use crate::snapshot::scan::Scan;
use crate::snapshot::statcache::{self, StatCache};
use crate::snapshot::{Hooks, SnapshotKind, SnapshotRecord, Source, put_record};
use crate::storage::object;
use crate::storage::settings::SnapshotLimits;
use crate::storage::store::Store;
use crate::watch::WatchMark;

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
        None => Some(build(store, &walked, &plan, source.session_id, taken_at_ns)?),
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
