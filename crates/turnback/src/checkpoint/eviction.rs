//! Retention applied: the content of checkpoints past their window is evicted (the
//! records stay, marked `evicted`), and a deleted session's checkpoints go entirely.

use std::collections::HashMap;

use serde::Serialize;

use crate::base::time::{format_ms, now_ms};
use crate::checkpoint::artifact::{self};
use crate::checkpoint::journal::{self, JournalEvent};
use crate::checkpoint::*;
use crate::error::{Error, ErrorCode, Result};
use crate::fs::lock;
use crate::storage::digest;
use crate::storage::kv::Txn;
use crate::storage::schema;
use crate::storage::store::Store;

/// Deletes every checkpoint of `session` (records, artifacts, indexes) inside `txn`.
///
/// # Errors
/// `conflict` if one of them is still being written by a live process.
pub(crate) fn delete_session_in(store: &Store, txn: &mut dyn Txn, session: &str) -> Result<u64> {
    let prefix = format!("{session}/");
    let mut deleted = 0;
    for key in txn.keys(schema::CHECKPOINTS_BY_SESSION, prefix.as_bytes())? {
        let id = String::from_utf8_lossy(&key[prefix.len()..]).into_owned();
        if let Some(owner) = txn.get(schema::CHECKPOINTS_PENDING, id.as_bytes())?
            && !owner.is_empty()
            && lock::owner_alive(&store.locks_dir(), &String::from_utf8_lossy(&owner))?
        {
            return Err(Error::new(ErrorCode::Conflict, format!("checkpoint {id} is being written right now")));
        }
        if let Ok(record) = load_in(store, txn, &id) {
            let mut freed = 0;
            for a in &record.artifact_ids {
                if let Some(size) = artifact::remove(txn, a)?
                    && artifact_counted(&record, a)
                    && record.retention_state != RetentionState::Evicted
                {
                    freed += size;
                }
            }
            add_usage(txn, -i128::from(freed))?;
            txn.delete(schema::CHECKPOINTS_BY_OPERATION, record.mutation.operation_id.as_bytes())?;
        }
        txn.delete(schema::CHECKPOINTS, id.as_bytes())?;
        txn.delete(schema::CHECKPOINTS_PENDING, id.as_bytes())?;
        digest::delete(store.keys(), txn, schema::CHECKPOINTS_BY_SESSION, &key)?;
        deleted += 1;
    }
    Ok(deleted)
}

/// What an eviction pass did.
#[derive(Debug, Clone, Default, Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct EvictionReport {
    /// Checkpoints whose content was removed.
    pub evicted: u64,
    /// Artifact bytes freed.
    pub bytes_freed: u64,
}

/// Removes the content of every checkpoint past its retention window (oldest first),
/// stopping once `enough` bytes are freed (`None`: evict every eligible one).
///
/// `round_of` says a session's current prompt round (`None`: the session is gone, and its
/// checkpoints count as expired).
pub(crate) fn evict_expired(
    store: &Store,
    enough: Option<u64>,
    round_of: &dyn Fn(&str) -> Result<Option<u64>>,
) -> Result<EvictionReport> {
    let mut report = EvictionReport::default();
    let mut rounds: HashMap<String, u64> = HashMap::new();
    let window = store.settings().retention_prompt_rounds;
    for id in all_ids(store)? {
        if enough.is_some_and(|n| report.bytes_freed >= n) {
            break;
        }
        let record = match load(store, &id) {
            Ok(r) => r,
            Err(e) if e.code == ErrorCode::Corrupt => continue,
            Err(e) => return Err(e),
        };
        // An external stage whose commit never came (the tool was denied or crashed) is
        // evicted like the rest once its window has passed, instead of holding room forever.
        let orphaned_stage = record.stage_state == StageState::Staged && record.owner.is_none();
        if record.retention_state == RetentionState::Evicted
            || !(orphaned_stage || matches!(record.stage_state, StageState::Committed | StageState::Unreachable))
        {
            continue;
        }
        let current = match rounds.get(&record.session_id) {
            Some(r) => *r,
            None => {
                let r = round_of(&record.session_id)?.unwrap_or(u64::MAX);
                rounds.insert(record.session_id.clone(), r);
                r
            }
        };
        if record.retention(current, window).retained {
            continue;
        }
        let mut txn = store.kv().begin()?;
        let mut record = load_in(store, &mut *txn, &id)?;
        if record.retention_state == RetentionState::Evicted {
            continue;
        }
        if record.stage_state == StageState::Staged && record.owner.is_none() {
            let opid = record.mutation.operation_id.clone();
            journal::finish(&mut *txn, &opid, &id, JournalEvent::OperationUnknownOutcome, &format_ms(now_ms()))?;
            record.mutation.commit_state = CommitState::UnknownOutcome;
            record.stage_state = StageState::Unreachable;
            record.integrity_state = IntegrityState::RecoveryLocked;
            txn.delete(schema::CHECKPOINTS_PENDING, id.as_bytes())?;
        }
        let mut freed = 0;
        for a in &record.artifact_ids {
            if let Some(size) = artifact::remove(&mut *txn, a)?
                && artifact_counted(&record, a)
            {
                freed += size;
            }
        }
        add_usage(&mut *txn, -i128::from(freed))?;
        record.retention_state = RetentionState::Evicted;
        record.bump();
        record.save(store, &mut *txn)?;
        txn.commit()?;
        report.evicted += 1;
        report.bytes_freed += freed;
    }
    Ok(report)
}

fn artifact_counted(record: &CheckpointRecord, artifact_id: &str) -> bool {
    record.targets.iter().any(|t| {
        t.pre_image.artifact_id.as_deref() == Some(artifact_id)
            || t.post_image.as_ref().and_then(|p| p.artifact_id.as_deref()) == Some(artifact_id)
    })
}
