//! Whole-store maintenance: `verify`, `gc` and `du`.
//!
//! Invariants: `verify` never changes anything and reports every problem it finds with a
//! stable code; `gc` only removes content nothing references, inside one transaction so
//! a concurrent writer (whose objects and artifacts commit together) is never swept.

use std::collections::{BTreeMap, HashSet};

use serde::Serialize;

use crate::checkpoint::artifact::{self, ArtifactRecord, ArtifactState, Expected, NS_ARTIFACTS};
use crate::checkpoint::journal;
use crate::checkpoint::{self, CheckpointRecord, EvictionReport, RetentionState, StageState};
use crate::error::{ErrorCode, Result};
use crate::storage::object::{self, ContentId, NS_OBJECTS};
use crate::storage::store::{SEALED_NAMESPACES, Store};

/// One problem `verify` found.
#[derive(Debug, Clone, Serialize)]
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
        recovery_actions: e.code.recovery_actions().iter().map(|s| s.to_string()).collect(),
    }
}

/// Checks every record of the store; with `deep`, decrypts every object and record.
pub fn verify(store: &Store, deep: bool) -> Result<VerifyReport> {
    let mut counts = VerifyCounts::default();
    let mut problems = Vec::new();
    for id in checkpoint::all_ids(store)? {
        counts.checkpoints += 1;
        let record = match checkpoint::load(store, &id) {
            Ok(r) => r,
            Err(e) => {
                problems.push(problem(format!("checkpoint {id}"), &e));
                continue;
            }
        };
        match record.stage_state {
            StageState::Committed => counts.committed += 1,
            StageState::Unreachable => counts.recovery_locked += 1,
            StageState::Staging | StageState::Staged => counts.pending += 1,
        }
        if record.retention_state == RetentionState::Evicted {
            counts.evicted += 1;
            continue;
        }
        verify_artifacts(store, &record, deep, &mut counts, &mut problems);
    }
    // Every snapshot tree must resolve: its nodes decrypt and every object it names exists.
    match crate::snapshot::live_objects(store) {
        Ok(live) => {
            for id in live {
                if !object::exists(store.kv(), &id)? {
                    problems.push(problem(
                        format!("object {}", id.to_hex()),
                        &crate::Error::corrupt("snapshot", "a snapshot names an object the store does not hold"),
                    ));
                }
            }
        }
        Err(e) => problems.push(problem("snapshot trees".into(), &e)),
    }
    let mut object_ids = Vec::new();
    store.kv().scan_keys(NS_OBJECTS, b"", &mut |k| {
        object_ids.push(k.to_vec());
        Ok(true)
    })?;
    let (packed, packed_problems) = crate::storage::pack::verify(store.keys(), store.kv(), deep)?;
    counts.objects = object_ids.len() as u64 + packed;
    problems.extend(packed_problems.iter().map(|(what, e)| problem(what.clone(), e)));
    for key in object_ids {
        let what = format!("object {}", crate::storage::crypto::hex(&key));
        let Ok(id) = <[u8; 32]>::try_from(key.as_slice()).map(ContentId) else {
            problems.push(problem(what, &crate::Error::corrupt("object", "malformed id")));
            continue;
        };
        let checked =
            if deep { store.read_object(&id).map(|_| ()) } else { object::header(store.kv(), &id).map(|_| ()) };
        if let Err(e) = checked {
            problems.push(problem(what, &e));
        }
    }
    for ns in SEALED_NAMESPACES.iter().filter(|ns| **ns != checkpoint::NS_CHECKPOINTS) {
        let mut entries = Vec::new();
        store.kv().scan(ns, b"", &mut |k, v| {
            entries.push((k.to_vec(), v.to_vec()));
            Ok(true)
        })?;
        for (k, v) in entries {
            counts.records += 1;
            if deep && let Err(e) = store.open_bytes(ns, &k, &v) {
                problems.push(problem(format!("{ns} record {}", String::from_utf8_lossy(&k)), &e));
            }
        }
    }
    Ok(VerifyReport { clean: problems.is_empty(), deep, counts, problems })
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
pub fn gc(store: &Store) -> Result<GcReport> {
    let disk_bytes_before = store.kv().disk_bytes()?;
    let eviction = checkpoint::evict_expired(store, None)?;
    let (objects_removed, object_bytes_removed) = sweep_objects(store)?;
    store.kv().compact()?;
    Ok(GcReport {
        eviction,
        objects_removed,
        object_bytes_removed,
        disk_bytes_before,
        disk_bytes_after: store.kv().disk_bytes()?,
    })
}

/// Removes every content object that no artifact references and no snapshot reaches, in
/// one transaction, holding the objects lock exclusively (a snapshot writing objects holds
/// it shared; artifacts are always written with their objects). Returns how many objects
/// and stored bytes were removed.
pub fn sweep_objects(store: &Store) -> Result<(u64, u64)> {
    let _exclusive = crate::fs::lock::objects(&store.locks_dir(), true)?;
    let snapshot_live = crate::snapshot::live_objects(store)?;
    let mut txn = store.kv().begin()?;
    let mut live: HashSet<Vec<u8>> = snapshot_live.into_iter().map(|id| id.0.to_vec()).collect();
    live.extend(artifact_content_in(&mut *txn)?.into_iter().map(|id| id.0.to_vec()));
    let (mut removed, mut bytes) = (0, 0);
    for key in txn.keys(NS_OBJECTS, b"")? {
        if !live.contains(&key) {
            bytes += txn.get(NS_OBJECTS, &key)?.map_or(0, |v| v.len() as u64);
            txn.delete(NS_OBJECTS, &key)?;
            removed += 1;
        }
    }
    txn.commit()?;
    let live: HashSet<ContentId> = live.iter().filter_map(|k| ContentId::try_from_slice(k)).collect();
    let packed = crate::storage::pack::sweep(store.keys(), store.kv(), &live, &artifact_content_in)?;
    Ok((removed + packed.objects, bytes + packed.bytes))
}

/// The content every artifact record names, read inside `txn`.
fn artifact_content_in(txn: &mut dyn crate::storage::kv::Txn) -> Result<HashSet<ContentId>> {
    let mut out = HashSet::new();
    for key in txn.keys(NS_ARTIFACTS, b"")? {
        if let Some(v) = txn.get(NS_ARTIFACTS, &key)?
            && let Ok(rec) = serde_json::from_slice::<ArtifactRecord>(&v)
            && let Some(id) = ContentId::from_hex(&rec.digest)
        {
            out.insert(id);
        }
    }
    Ok(out)
}

/// Store usage by kind.
#[derive(Debug, Clone, Serialize)]
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
pub fn du(store: &Store) -> Result<DuReport> {
    let mut objects = ObjectUsage::default();
    store.kv().scan(NS_OBJECTS, b"", &mut |_, v| {
        objects.count += 1;
        objects.stored_bytes += v.len() as u64;
        objects.plaintext_bytes += object::parse(v).map(|(h, _)| h.size).unwrap_or(0);
        Ok(true)
    })?;
    let (packed, packed_stored, packed_plain) = crate::storage::pack::usage(store.kv())?;
    objects.count += packed;
    objects.stored_bytes += packed_stored;
    objects.plaintext_bytes += packed_plain;
    let mut artifacts = 0;
    store.kv().scan_keys(NS_ARTIFACTS, b"", &mut |_| {
        artifacts += 1;
        Ok(true)
    })?;
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
