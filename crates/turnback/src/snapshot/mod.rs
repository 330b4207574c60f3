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
//! - A file larger than `max-file-size` (or, alone, than the snapshot may take) is left
//!   out with its reason ([`LeftOut`]) and the rest is recorded; a rewind never deletes or
//!   restores it. The other limits are checked, on what is kept, after the walk and before
//!   any content is read or stored; a snapshot over one is recorded as skipped with the
//!   reason, and nothing else.
//! - Content objects (and a large tree's nodes, past a few MiB of them, and a whole stat
//!   cache's pieces) are written before the transaction that commits the snapshot record
//!   (with its other trees and the new stat cache's row) and are protected from `gc`
//!   meanwhile by the shared objects lock; a crash in between leaves only what nothing
//!   names, which `gc` removes. Snapshots of
//!   one session are taken one at a time (the session lock): a second waits, it is never
//!   skipped.
//! - The stat cache describes the session's latest fully walked snapshot; the content and
//!   tree ids it names are kept alive by `gc` whether or not that snapshot still exists.
//! - With a watcher ([`watch`](crate::watch)), a snapshot first syncs with it and records
//!   the mark it got; the next one patches the previous tree where the watcher saw changes
//!   (`watched`) when everything adds up, and walks the whole tree otherwise.

//!
//! [`take`] takes one, phase by phase, on a [`scan`] (the walk merged with the stat cache),
//! through [`limits`], [`plan`], [`read`] and [`build`];
//! [`prune`] keeps a session within its budget;
//! [`edit`] makes trees (built whole or rebuilt where they changed); [`lookup`] reads them; [`diff`] compares two; [`statcache`] and [`tree`] are their
//! formats.

mod build;
pub(crate) mod diff;
mod edit;
mod limits;
mod lookup;
mod options;
mod patch;
pub(crate) mod pieces;
mod plan;
mod prune;
mod read;
mod scan;
pub(crate) mod statcache;
mod take;
pub(crate) mod tree;
mod watched;

pub(crate) use lookup::Lookup;
pub(crate) use lookup::{flatten, live_objects, read_tree};
pub(crate) use options::TakeOptions;

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::fs::walk::Skipped;
use crate::storage::kv::Txn;
use crate::storage::schema;
use crate::storage::store::Store;

const SNAPSHOT_SCHEMA: u16 = 1;

/// Why a snapshot was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
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
    /// As an agent's shell command started or finished (the window of a `shell`
    /// checkpoint).
    Shell,
}

/// A nested repository recorded as a pointer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct NestedRepo {
    /// Its path in the workspace.
    pub path: String,
    /// Its checked-out commit.
    pub commit: String,
}

/// A file left out of a snapshot for its size, and why. A rewind never deletes or restores
/// it; the rest of the tree is recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct LeftOut {
    /// Its path in the workspace.
    pub path: String,
    /// Its size when the snapshot saw it.
    pub size: u64,
    /// Why (the limit it is over, naming the setting).
    pub reason: String,
}

/// One snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SnapshotRecord {
    /// Its id (UUID v7).
    pub(crate) snapshot_id: String,
    /// The session.
    pub(crate) session_id: String,
    /// The workspace.
    pub(crate) workspace_id: String,
    /// Why it was taken.
    pub(crate) kind: SnapshotKind,
    /// The root tree's id (none when skipped).
    pub(crate) root: Option<String>,
    /// When the walk began (RFC 3339).
    pub(crate) created_at: String,
    /// Files recorded.
    pub(crate) files: u64,
    /// Their bytes.
    pub(crate) bytes: u64,
    /// Files that had to be read (new or changed since the previous snapshot).
    pub(crate) read_files: u64,
    /// Their bytes.
    pub(crate) read_bytes: u64,
    /// Bytes newly stored (encrypted), content and trees.
    pub(crate) stored_bytes: u64,
    /// Paths removed by the unconditional exclusions.
    pub(crate) excluded: u64,
    /// Nested repositories recorded as pointers.
    pub(crate) nested_repos: Vec<NestedRepo>,
    /// Paths left out with a reason (a nested repository without a commit, unreadable).
    pub(crate) skipped_paths: Vec<Skipped>,
    /// Files left out for their size (over `max-file-size`, or alone more than the
    /// snapshot may take); the limits count only what was kept.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) left_out: Vec<LeftOut>,
    /// Why the whole snapshot was skipped, if it was.
    pub(crate) skipped: Option<String>,
    /// Set when the session's stat cache did not verify: it was dropped (this once) and
    /// every file read in full.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) stat_cache_dropped: Option<String>,
    /// Milliseconds it took.
    pub(crate) duration_ms: u64,
    /// Milliseconds the walk alone took (every entry stat-ed, no content read): what the
    /// next walk costs when little changed. 0 for a snapshot the watcher answered.
    #[serde(default)]
    pub(crate) walk_ms: u64,
    /// The turn it belongs to, if any.
    #[serde(default)]
    pub(crate) turn_id: Option<String>,
    /// Where it stood in the workspace watcher's events (none without a watcher): the next
    /// snapshot asks the watcher what changed since.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) watch: Option<crate::watch::WatchMark>,
    /// Whether it was taken from the watcher's changes instead of a walk of the whole tree.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) watched: bool,
}

/// What a snapshot is of: a workspace's directory, for one session.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Source<'a> {
    /// The workspace's id.
    pub workspace_id: &'a str,
    /// Its root directory.
    pub root: &'a Path,
    /// The session.
    pub session_id: &'a str,
}

impl Source<'_> {
    /// Whether the file at `rel` is one of turnback's own temporary files now, which no
    /// snapshot records: a write's, by the pending checkpoint that named it
    /// ([`checkpoint::own_temp`](crate::checkpoint::own_temp)), or, in the root, the sync
    /// cookie of the workspace's watcher now in flight, by the watcher's record of it. A
    /// file named like one but accounted for by neither is anyone's, and recorded. A store
    /// error counts as turnback's: the file is left out of this snapshot (never removed).
    pub(crate) fn own_temp(&self, store: &Store, rel: &[u8]) -> bool {
        if !rel.contains(&b'/') && crate::watch::cookie_in_flight(store.dir(), self.workspace_id, rel) {
            return true;
        }
        crate::checkpoint::own_temp(store, self.workspace_id, rel).map_or(true, |phase| phase.is_some())
    }
}

/// Takes a snapshot of `source`, telling `hooks` (the turns) what it commits and prunes:
/// under the session's lock and the shared objects lock, it first syncs with the
/// workspace's watcher (before anything is stat-ed); a watched snapshot patches the previous
/// tree where the watcher saw changes ([`watched`]), else the whole tree is walked
/// ([`take`](take::take)).
///
/// # Errors
/// I/O errors of the store; `cancelled` if the flag was set before the record committed.
/// A snapshot over a limit is not an error but a record with `skipped` set.
pub(crate) fn take(
    store: &Store,
    source: Source<'_>,
    opts: &TakeOptions<'_>,
    hooks: &dyn Hooks,
) -> Result<SnapshotRecord> {
    let started = std::time::Instant::now();
    let _session_turn = crate::fs::lock::session(&store.locks_dir(), source.session_id)?;
    let _objects = crate::fs::lock::objects(&store.locks_dir(), false)?;
    let (synced, previous) = watched::sync(store, source)?;
    if let Some(record) = watched::take(store, source, opts, hooks, &synced, previous.as_ref(), started)? {
        return Ok(record);
    }
    take::take(store, source, opts, hooks, watched::mark(store, &synced), started)
}

/// What a snapshot tells its owner (the turns), inside the transactions that change it.
pub(crate) trait Hooks {
    /// `record` is being committed (a turn's late start snapshot attaches itself).
    fn committed(&self, txn: &mut dyn Txn, record: &SnapshotRecord) -> Result<()>;
    /// `record` is being pruned (its turn marks it so).
    fn pruned(&self, txn: &mut dyn Txn, record: &SnapshotRecord) -> Result<()>;
}

pub(crate) fn put_record(store: &Store, txn: &mut dyn Txn, record: &SnapshotRecord) -> Result<()> {
    let key = record.snapshot_id.as_bytes();
    txn.put(schema::SNAPSHOTS, key, &store.seal_record(schema::SNAPSHOTS, key, SNAPSHOT_SCHEMA, record)?)?;
    txn.put(schema::SNAPSHOTS_BY_SESSION, format!("{}/{}", record.session_id, record.snapshot_id).as_bytes(), b"")?;
    if let Some(turn) = &record.turn_id {
        txn.put(schema::SNAPSHOTS_BY_TURN, by_turn_key(turn, record.kind).as_bytes(), record.snapshot_id.as_bytes())?;
    }
    Ok(())
}

fn by_turn_key(turn: &str, kind: SnapshotKind) -> String {
    format!("{turn}/{}", if kind == SnapshotKind::TurnEnd { "end" } else { "start" })
}

/// The snapshot id recorded for `turn`'s start or end, read inside `txn`.
pub(crate) fn of_turn(txn: &mut dyn Txn, turn: &str, kind: SnapshotKind) -> Result<Option<String>> {
    Ok(txn
        .get(schema::SNAPSHOTS_BY_TURN, by_turn_key(turn, kind).as_bytes())?
        .map(|v| String::from_utf8_lossy(&v).into_owned()))
}

/// Removes a snapshot record (and, since the session's stat cache may describe it, the
/// cache too: the next snapshot reads everything again). Its objects are left for `gc`.
pub(crate) fn discard(txn: &mut dyn Txn, record: &SnapshotRecord) -> Result<()> {
    remove(txn, record)?;
    statcache::delete_in(txn, &record.session_id)?;
    Ok(())
}

pub(crate) fn remove(txn: &mut dyn Txn, record: &SnapshotRecord) -> Result<()> {
    txn.delete(schema::SNAPSHOTS, record.snapshot_id.as_bytes())?;
    txn.delete(schema::SNAPSHOTS_BY_SESSION, format!("{}/{}", record.session_id, record.snapshot_id).as_bytes())?;
    if let Some(turn) = &record.turn_id {
        txn.delete(schema::SNAPSHOTS_BY_TURN, by_turn_key(turn, record.kind).as_bytes())?;
    }
    Ok(())
}

/// Deletes every snapshot of `session` and its stat cache inside `txn`; returns how many.
pub(crate) fn delete_session_in(store: &Store, txn: &mut dyn Txn, session: &str) -> Result<u64> {
    let prefix = format!("{session}/");
    let mut deleted = 0;
    for key in txn.keys(schema::SNAPSHOTS_BY_SESSION, prefix.as_bytes())? {
        let id = String::from_utf8_lossy(&key[prefix.len()..]).into_owned();
        match txn.get(schema::SNAPSHOTS, id.as_bytes())? {
            Some(v) => remove(txn, &store.open_record::<SnapshotRecord>(schema::SNAPSHOTS, id.as_bytes(), &v)?)?,
            None => {
                txn.delete(schema::SNAPSHOTS_BY_SESSION, &key)?;
            }
        }
        deleted += 1;
    }
    // The caller holds the session's lock: no snapshot of it is storing pieces.
    statcache::delete_all_in(txn, session)?;
    Ok(deleted)
}

/// The snapshot `id`.
///
/// # Errors
/// `not-found`; `corrupt` if it does not verify.
pub(crate) fn get(store: &Store, id: &str) -> Result<SnapshotRecord> {
    store.get_record(schema::SNAPSHOTS, id.as_bytes())?.ok_or_else(|| Error::not_found(format!("snapshot {id}")))
}

/// The snapshot `id`, read inside `txn` (`None` if there is none).
pub(crate) fn get_in(store: &Store, txn: &mut dyn Txn, id: &str) -> Result<Option<SnapshotRecord>> {
    match txn.get(schema::SNAPSHOTS, id.as_bytes())? {
        Some(v) => store.open_record(schema::SNAPSHOTS, id.as_bytes(), &v).map(Some),
        None => Ok(None),
    }
}

/// The snapshots of `session`, oldest first.
pub(crate) fn list(store: &Store, session: &str) -> Result<Vec<SnapshotRecord>> {
    ids(store, session)?.iter().map(|id| get(store, id)).collect()
}

/// The ids of `session`'s snapshots, oldest first (ids are time-ordered; keys only, nothing
/// opened).
fn ids(store: &Store, session: &str) -> Result<Vec<String>> {
    let prefix = format!("{session}/");
    let mut ids = Vec::new();
    store.kv().scan_keys(schema::SNAPSHOTS_BY_SESSION, prefix.as_bytes(), &mut |k| {
        ids.push(String::from_utf8_lossy(&k[prefix.len()..]).into_owned());
        Ok(true)
    })?;
    Ok(ids)
}

/// The newest snapshot of `session` that `wanted` accepts, opening records newest first
/// and only until one is accepted (a snapshot runs this twice; a session has thousands).
pub(crate) fn newest(
    store: &Store,
    session: &str,
    wanted: impl Fn(&SnapshotRecord) -> bool,
) -> Result<Option<SnapshotRecord>> {
    for id in ids(store, session)?.iter().rev() {
        let record = get(store, id)?;
        if wanted(&record) {
            return Ok(Some(record));
        }
    }
    Ok(None)
}

/// Every snapshot in the store, oldest first per session.
pub(crate) fn all(store: &Store) -> Result<Vec<SnapshotRecord>> {
    let mut out = Vec::new();
    store.kv().scan(schema::SNAPSHOTS, b"", &mut |k, v| {
        out.push(store.open_record(schema::SNAPSHOTS, k, v)?);
        Ok(true)
    })?;
    Ok(out)
}

/// The latest snapshot of `session` that was not skipped.
pub(crate) fn latest(store: &Store, session: &str) -> Result<Option<SnapshotRecord>> {
    newest(store, session, |s| s.root.is_some())
}
