//! Whole-store maintenance: `verify`, `gc`, `du`, the keys, and deleting a session with
//! everything it owns.
//!
//! Invariants: `verify` never changes anything and reports every problem it finds with a
//! stable code — records that do not open, content that does not verify, and rows missing,
//! dangling or moved (each index against its records, history against its totals, the
//! journal against checkpoint states, digested indexes against their keyed digests); `gc` only removes content nothing references, inside one transaction so
//! a concurrent writer (whose objects and artifacts commit together) is never swept; a
//! session is deleted in one transaction, each owner deleting its own records.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::api::{Turnback, calls};
use crate::checkpoint::artifact::{self, ArtifactState, Expected};
use crate::checkpoint::journal;
use crate::checkpoint::{self, CheckpointRecord, EvictionReport, ReconcileReport, RetentionState, StageState};
use crate::error::Error;
use crate::error::{ErrorCode, Hint, Result};
use crate::fs::lock;
use crate::session::Session;
use crate::session::{history, turn};
use crate::snapshot;
use crate::storage::content::ContentId;
use crate::storage::object;
use crate::storage::schema;
use crate::storage::store::{RotationReport, Store};

/// One problem `verify` found.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Problem {
    /// Stable code (`corrupt`, `not-found`, …).
    pub code: String,
    /// What was checked (`checkpoint ID`, `object DIGEST`, …).
    pub what: String,
    /// What is wrong.
    pub message: String,
    /// What to do.
    pub recovery_actions: Vec<String>,
}

/// Counts of what `verify` examined.
#[derive(Debug, Clone, Default, Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct VerifyCounts {
    /// Checkpoint records.
    pub checkpoints: u64,
    /// Complete checkpoints.
    pub committed: u64,
    /// Stages in progress or waiting for `commit`.
    pub pending: u64,
    /// Incomplete stages left by crashes (expected after a crash; not a problem).
    pub recovery_locked: u64,
    /// Checkpoints whose content was evicted by retention.
    pub evicted: u64,
    /// Artifacts checked.
    pub artifacts: u64,
    /// Content objects (decrypted in a deep run).
    pub objects: u64,
    /// Other sealed records (decrypted in a deep run).
    pub records: u64,
}

/// The result of `verify`.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct VerifyReport {
    /// No problem found.
    pub clean: bool,
    /// Whether every object was decrypted.
    pub deep: bool,
    /// What was examined.
    pub counts: VerifyCounts,
    /// What is wrong.
    pub problems: Vec<Problem>,
}

fn problem(what: String, e: &crate::Error) -> Problem {
    Problem {
        code: e.code.as_str().to_string(),
        what,
        message: e.message.clone(),
        recovery_actions: e.recovery_actions().iter().map(|s| s.to_string()).collect(),
    }
}

/// What to do about derived data that does not verify.
const DERIVED: &str = "nothing to restore: derived data, dropped and rebuilt by the next snapshot";

/// Checks every record of the store; with `deep`, decrypts every object and record, and
/// loads every session's stat cache.
pub(crate) fn verify(store: &Store, deep: bool) -> Result<VerifyReport> {
    // Every check reads one committed state: a hook committing meanwhile must not look
    // like rows added or removed outside turnback.
    let view = store.read_view()?;
    let mut v = Verifier { store: &view, deep, counts: VerifyCounts::default(), problems: Vec::new() };
    let opened = v.checkpoints()?;
    v.snapshot_trees()?;
    v.objects()?;
    v.sealed_records()?;
    v.stat_caches()?;
    v.cross_checks(&opened)?;
    Ok(VerifyReport { clean: v.problems.is_empty(), deep, counts: v.counts, problems: v.problems })
}

/// One `verify` under way: what it reads, and what it has counted and found.
struct Verifier<'a> {
    /// The one committed state every check reads.
    store: &'a Store,
    deep: bool,
    counts: VerifyCounts,
    problems: Vec<Problem>,
}

impl Verifier<'_> {
    /// Opens every checkpoint record, once: the cross-checks use them as opened, by id
    /// (`None`: it does not open). The artifacts of those not evicted are checked too.
    fn checkpoints(&mut self) -> Result<BTreeMap<String, Option<CheckpointRecord>>> {
        let (store, counts) = (self.store, &mut self.counts);
        let mut opened = BTreeMap::new();
        for id in checkpoint::all_ids(store)? {
            counts.checkpoints += 1;
            let record = match checkpoint::load(store, &id) {
                Ok(r) => r,
                Err(e) => {
                    self.problems.push(problem(format!("checkpoint {id}"), &e));
                    opened.insert(id, None);
                    continue;
                }
            };
            opened.insert(id, Some(record.clone()));
            match record.stage_state {
                StageState::Committed => counts.committed += 1,
                StageState::Unreachable => counts.recovery_locked += 1,
                StageState::Staging | StageState::Staged => counts.pending += 1,
            }
            if record.retention_state == RetentionState::Evicted {
                counts.evicted += 1;
                continue;
            }
            verify_artifacts(store, &record, self.deep, counts, &mut self.problems);
        }
        Ok(opened)
    }

    /// Every snapshot tree must resolve: its nodes decrypt and every object it names exists.
    fn snapshot_trees(&mut self) -> Result<()> {
        match crate::snapshot::live_objects(self.store) {
            Ok(live) => {
                for id in live {
                    if !object::exists(self.store.kv(), &id)? {
                        self.problems.push(problem(
                            format!("object {}", id.to_hex()),
                            &crate::Error::corrupt("snapshot", "a snapshot names an object the store does not hold"),
                        ));
                    }
                }
            }
            Err(e) => self.problems.push(problem("snapshot trees".into(), &e)),
        }
        Ok(())
    }

    /// Every content object, packed or on its own: its header (with `deep`, its content)
    /// opens.
    fn objects(&mut self) -> Result<()> {
        let store = self.store;
        let object_ids = object::own_ids(store.kv())?;
        let (packed, packed_problems) = crate::storage::pack::verify(store.keys(), store.kv(), self.deep)?;
        self.counts.objects = object_ids.len() as u64 + packed;
        self.problems.extend(packed_problems.iter().map(|(what, e)| problem(what.clone(), e)));
        for key in object_ids {
            let what = format!("object {}", crate::base::hex::hex(&key));
            let Ok(id) = <[u8; 32]>::try_from(key.as_slice()).map(ContentId) else {
                self.problems.push(problem(what, &crate::Error::corrupt("object", "malformed id")));
                continue;
            };
            let checked = if self.deep {
                store.read_object(&id).map(|_| ())
            } else {
                object::header(store.kv(), &id).map(|_| ())
            };
            if let Err(e) = checked {
                self.problems.push(problem(what, &e));
            }
        }
        Ok(())
    }

    /// Every other sealed record counted, and with `deep` opened. (Checkpoint records
    /// were opened by [`checkpoints`](Self::checkpoints), one by one.)
    fn sealed_records(&mut self) -> Result<()> {
        let store = self.store;
        for table in schema::TABLES.iter().filter(|t| t.sealed && t.owner != "checkpoint/") {
            let ns = table.name;
            let mut entries = Vec::new();
            store.kv().scan(ns, b"", &mut |k, v| {
                entries.push((k.to_vec(), v.to_vec()));
                Ok(true)
            })?;
            for (k, v) in entries {
                self.counts.records += 1;
                if self.deep
                    && let Err(e) = store.open_bytes(ns, &k, &v)
                {
                    // A key that is not text (a stat cache piece's) is shown in hex.
                    let key = match std::str::from_utf8(&k) {
                        Ok(text) if !text.chars().any(char::is_control) => text.to_string(),
                        _ => crate::base::hex::hex(&k),
                    };
                    let mut p = problem(format!("{ns} record {key}"), &e);
                    if table.derived {
                        // Nothing is lost, and no backup is needed.
                        p.recovery_actions = vec![DERIVED.into()];
                    }
                    self.problems.push(p);
                }
            }
        }
        Ok(())
    }

    /// With `deep`, each session's stat cache as a snapshot loads it: every piece its row
    /// names, in its place and of its length, and its delta laid over it.
    fn stat_caches(&mut self) -> Result<()> {
        if self.deep {
            for (session, e) in crate::snapshot::statcache::failing_to_load(self.store)? {
                let mut p = problem(format!("stat cache of session {session}"), &e);
                p.recovery_actions = vec![DERIVED.into()];
                self.problems.push(p);
            }
        }
        Ok(())
    }

    /// Rows missing, dangling or moved: each index against its records (`opened`: the
    /// checkpoints'), and every digested index against its keyed digest (rows removed
    /// together with what they index).
    fn cross_checks(&mut self, opened: &BTreeMap<String, Option<CheckpointRecord>>) -> Result<()> {
        let store = self.store;
        let crossed =
            [checkpoint::cross_check(store, opened)?, turn::cross_check(store)?, history::cross_check(store)?];
        self.problems.extend(crossed.iter().flatten().map(|(what, e)| problem(what.clone(), e)));
        for m in crate::storage::digest::check(store.keys(), store.kv())? {
            self.problems.push(problem(m.what(), &Error::corrupt("index", m.describe())));
        }
        Ok(())
    }
}

fn verify_artifacts(
    store: &Store,
    record: &CheckpointRecord,
    deep: bool,
    counts: &mut VerifyCounts,
    problems: &mut Vec<Problem>,
) {
    let committed = record.stage_state == StageState::Committed;
    for (i, t) in record.targets.iter().enumerate() {
        for image in std::iter::once(&t.pre_image).chain(t.post_image.as_ref()) {
            let (Some(artifact_id), Some(digest)) = (image.artifact_id.as_deref(), image.digest.as_deref()) else {
                continue;
            };
            counts.artifacts += 1;
            let what = format!("checkpoint {} target {i} artifact {artifact_id}", record.checkpoint_id);
            let expected = Expected { checkpoint_id: &record.checkpoint_id, digest, size: image.size };
            let result = if !committed {
                // Staged artifacts of incomplete stages must still be intact, just not readable.
                artifact::record(store.kv(), artifact_id).and_then(|r| {
                    if r.state == ArtifactState::Staged || r.state == ArtifactState::Committed {
                        let id = ContentId::from_hex(&r.digest)
                            .ok_or_else(|| crate::Error::corrupt("artifact", "malformed digest"))?;
                        if deep { store.read_object(&id).map(|_| ()) } else { Ok(()) }
                    } else {
                        Ok(())
                    }
                })
            } else if deep {
                artifact::read(store.keys(), store.kv(), artifact_id, expected).map(|_| ())
            } else {
                artifact::check(store.kv(), artifact_id, expected).map(|_| ())
            };
            if let Err(e) = result {
                problems.push(problem(what, &e));
            }
        }
    }
}

/// What `gc` did.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct GcReport {
    /// Checkpoints past retention whose content was removed.
    pub eviction: EvictionReport,
    /// Content objects no artifact references any more, removed.
    pub objects_removed: u64,
    /// Their stored (encrypted) bytes.
    pub object_bytes_removed: u64,
    /// Database size before and after.
    pub disk_bytes_before: u64,
    /// Database size after compaction.
    pub disk_bytes_after: u64,
}

/// Evicts expired checkpoints, removes unreferenced objects and compacts the database.
pub(crate) fn gc(store: &Store) -> Result<GcReport> {
    let disk_bytes_before = store.kv().disk_bytes()?;
    let eviction = checkpoint::evict_expired(store, None, &|id| Session::round_of(store, id))?;
    let (objects_removed, object_bytes_removed) = super::sweep_objects(store)?;
    store.kv().compact()?;
    Ok(GcReport {
        eviction,
        objects_removed,
        object_bytes_removed,
        disk_bytes_before,
        disk_bytes_after: store.kv().disk_bytes()?,
    })
}

/// Store usage by kind.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct DuReport {
    /// The store directory.
    pub store: String,
    /// Database files on disk (bytes).
    pub disk_bytes: u64,
    /// Content objects: count, encrypted bytes stored, plaintext bytes they hold.
    pub objects: ObjectUsage,
    /// Plaintext bytes of retained checkpoint artifacts (what the store cap counts).
    pub checkpoint_artifact_bytes: u64,
    /// The store cap.
    pub store_cap: u64,
    /// The per-checkpoint cap.
    pub checkpoint_cap: u64,
    /// Artifacts.
    pub artifacts: u64,
    /// Checkpoints by stage state.
    pub checkpoints: BTreeMap<String, u64>,
    /// Journal entries.
    pub journal_entries: u64,
    /// Snapshots per session.
    pub sessions: Vec<SessionUsage>,
}

/// One session's snapshots.
#[derive(Debug, Clone, Default, Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct SessionUsage {
    /// The session.
    pub session_id: String,
    /// Snapshots kept.
    pub snapshots: u64,
    /// Bytes they stored (what the session budget counts).
    pub stored_bytes: u64,
    /// Snapshots skipped, with their reasons.
    pub skipped: Vec<String>,
    /// Paths left out of the latest snapshot, with why.
    pub left_out: Vec<String>,
}

/// Usage of content objects.
#[derive(Debug, Clone, Default, Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ObjectUsage {
    /// How many.
    pub count: u64,
    /// Encrypted bytes stored.
    pub stored_bytes: u64,
    /// Plaintext bytes they hold.
    pub plaintext_bytes: u64,
}

/// Measures the store.
pub(crate) fn du(store: &Store) -> Result<DuReport> {
    let (count, stored_bytes, plaintext_bytes) = object::own_usage(store.kv())?;
    let mut objects = ObjectUsage { count, stored_bytes, plaintext_bytes };
    let (packed, packed_stored, packed_plain) = crate::storage::pack::usage(store.kv())?;
    objects.count += packed;
    objects.stored_bytes += packed_stored;
    objects.plaintext_bytes += packed_plain;
    let artifacts = artifact::count(store.kv())?;
    let mut checkpoints = BTreeMap::new();
    for id in checkpoint::all_ids(store)? {
        let state = match checkpoint::load(store, &id) {
            Ok(r) if r.retention_state == RetentionState::Evicted => "evicted".to_string(),
            Ok(r) => r.stage_state.as_str().to_string(),
            Err(e) if e.code == ErrorCode::Corrupt => "corrupt".to_string(),
            Err(e) => return Err(e),
        };
        *checkpoints.entry(state).or_insert(0) += 1;
    }
    Ok(DuReport {
        store: store.dir().display().to_string(),
        disk_bytes: store.kv().disk_bytes()?,
        objects,
        checkpoint_artifact_bytes: checkpoint::usage(store)?,
        store_cap: store.settings().store_cap,
        checkpoint_cap: store.settings().checkpoint_cap,
        artifacts,
        checkpoints,
        journal_entries: journal::count(store.kv())?,
        sessions: session_usage(store)?,
    })
}

fn session_usage(store: &Store) -> Result<Vec<SessionUsage>> {
    let mut by_session: BTreeMap<String, SessionUsage> = BTreeMap::new();
    for r in crate::snapshot::all(store)? {
        let u = by_session
            .entry(r.session_id.clone())
            .or_insert_with(|| SessionUsage { session_id: r.session_id.clone(), ..SessionUsage::default() });
        u.snapshots += 1;
        u.stored_bytes += r.stored_bytes;
        if let Some(reason) = &r.skipped {
            u.skipped.push(format!("{}: {reason}", r.snapshot_id));
        } else {
            u.left_out = r.skipped_paths.iter().map(|s| format!("{}: {}", s.path, s.reason)).collect();
        }
    }
    Ok(by_session.into_values().collect())
}

/// What deleting a session removed.
#[derive(Debug, Clone, Default, Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Deleted {
    /// The session.
    pub session_id: String,
    /// Turns removed.
    pub turns: u64,
    /// Snapshots removed (their space comes back with `gc`).
    pub snapshots: u64,
    /// Checkpoints removed, with their content.
    pub checkpoints: u64,
}

/// The keys: where the master key comes from, and what each data-key version encrypts.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct KeyStatus {
    /// Where the master key was found.
    pub master_key_source: String,
    /// The data-key version new writes use.
    pub current_version: u32,
    /// Every version, with how many objects and records it encrypts.
    pub versions: Vec<KeyVersion>,
}

/// One data-key version.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
pub struct KeyVersion {
    /// The version.
    pub version: u32,
    /// New writes use it.
    pub current: bool,
    /// Objects and records it encrypts.
    pub objects: u64,
}

impl Turnback {
    /// Checks every record of the store; with `deep`, decrypts every object and record, and
    /// loads every session's stat cache.
    /// Changes nothing.
    ///
    /// # Errors
    /// Store errors that stop the check itself (every problem found is in the report).
    pub fn verify(&self, deep: bool) -> Result<VerifyReport> {
        verify(&self.store, deep)
    }

    /// Recovery on request (`turnback reconcile`): what opening found and did (see
    /// [`reconciled`](Self::reconciled)), and then, if this workspace is registered and no
    /// watcher of it runs, the removal of the sync cookie a watcher killed mid-sync left in
    /// its root (counted as a temporary file removed). Nothing else is looked for: turnback
    /// removes only temporary files a record of its own accounts for (an interrupted
    /// write's pending checkpoint, the watcher's cookie record), never a file for its name
    /// alone — one named like a temporary file is anyone's.
    ///
    /// # Errors
    /// Store errors; `io` if the watcher's lock cannot be opened.
    pub fn reconcile(&self) -> Result<ReconcileReport> {
        let mut report = self.reconciled.clone();
        if let Some(ws) = self.registered_workspace_record()?
            && crate::watch::remove_dead_cookie(self.store.dir(), &ws.id, &ws.root)?
        {
            report.temp_files_removed += 1;
        }
        Ok(report)
    }

    /// Evicts checkpoints past retention, removes unreferenced content, compacts.
    ///
    /// # Errors
    /// Store errors.
    pub fn gc(&self) -> Result<GcReport> {
        gc(&self.store)
    }

    /// Measures the store.
    ///
    /// # Errors
    /// Store errors.
    pub fn du(&self) -> Result<DuReport> {
        du(&self.store)
    }

    /// Where the master key comes from and what each data-key version encrypts.
    ///
    /// # Errors
    /// Store errors.
    pub fn key_status(&self) -> Result<KeyStatus> {
        let usage = self.store.key_usage()?;
        let keys = self.store.keys();
        let versions = usage
            .iter()
            .map(|(v, n)| KeyVersion { version: *v, current: *v == keys.current_version(), objects: *n })
            .collect();
        Ok(KeyStatus { master_key_source: keys.source.describe(), current_version: keys.current_version(), versions })
    }

    /// Adds a data-key version for new writes; with `reencrypt`, rewrites everything under
    /// it (interrupting it loses nothing: run it again).
    ///
    /// # Errors
    /// Store errors.
    pub fn rotate_keys(&mut self, reencrypt: bool) -> Result<RotationReport> {
        self.store.rotate_keys(reencrypt)
    }

    /// Deletes session `id` with its turns, snapshots, stat cache, history, tool-call keys
    /// and checkpoints, in one transaction. A fork of it keeps what it carried.
    ///
    /// # Errors
    /// `not-found`; `conflict` if a turn is running or a checkpoint is being written.
    pub fn delete_session(&self, id: &str) -> Result<Deleted> {
        delete_session(&self.store, id)
    }
}

/// Deletes session `id` and everything it owns, each owner deleting its own records, in one
/// transaction (see [`Turnback::delete_session`]).
pub(crate) fn delete_session(store: &Store, id: &str) -> Result<Deleted> {
    let session = Session::get(store, id)?.ok_or_else(|| Error::not_found(format!("session {id}")))?;
    if turn::running(store, id)?.is_some() {
        return Err(
            Error::new(ErrorCode::Conflict, format!("session {id} has a running turn")).with_hint(Hint::EndTurn)
        );
    }
    let _snapshots = lock::session(&store.locks_dir(), id)?;
    let mut txn = store.kv().begin()?;
    let checkpoints = checkpoint::delete_session_in(store, &mut *txn, id)?;
    let snapshots = snapshot::delete_session_in(store, &mut *txn, id)?;
    let turns = turn::delete_session_in(store, &mut *txn, id)?;
    history::delete_session_in(store, &mut *txn, id)?;
    crate::session::import::delete_session_in(&mut *txn, id)?;
    calls::delete_session_in(&mut *txn, id)?;
    Session::delete_in(&mut *txn, &session)?;
    txn.commit()?;
    Ok(Deleted { session_id: id.to_string(), turns, snapshots, checkpoints })
}
