//! The journal: the sole authority on whether a mutation may have happened.
//!
//! Invariants:
//! - Per operation, `EffectDispatchCommitted` is durable *before* the mutation starts, and
//!   at most one terminal event (`OperationSucceeded`, `OperationFailed`,
//!   `OperationUnknownOutcome`) follows it. An operation is "open" exactly while it has a
//!   dispatch and no terminal event (the `journal-open` index, kept in the same
//!   transactions).
//! - Events are written in the same transaction as the checkpoint state they explain, so
//!   the journal and the checkpoint never disagree after a crash.
//! - Entries hold ids, event names and timestamps only: never a path or content.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::storage::kv::{KeyValueStore, Txn};
use crate::storage::schema;

/// A journal event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
pub enum JournalEvent {
    /// Written before the mutation: from here on it may have happened.
    EffectDispatchCommitted,
    /// The mutation completed.
    OperationSucceeded,
    /// The mutation failed (the file may still have been changed, see the post-image).
    OperationFailed,
    /// Recovery found a dispatch with no terminal event: nobody knows what happened.
    OperationUnknownOutcome,
}

/// One journal entry.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct JournalEntry {
    /// The operation.
    pub(crate) operation_id: String,
    /// The checkpoint recording the operation.
    pub(crate) checkpoint_id: String,
    /// What happened.
    pub(crate) event: JournalEvent,
    /// When (RFC 3339).
    pub(crate) at: String,
}

fn entry_key(operation_id: &str, seq: u32) -> Vec<u8> {
    format!("{operation_id}/{seq:04}").into_bytes()
}

fn append(txn: &mut dyn Txn, entry: &JournalEntry) -> Result<()> {
    let prefix = format!("{}/", entry.operation_id);
    let seq = txn.keys(schema::JOURNAL, prefix.as_bytes())?.len() as u32;
    let value = serde_json::to_vec(entry).map_err(|e| Error::invalid(e.to_string()))?;
    txn.put(schema::JOURNAL, &entry_key(&entry.operation_id, seq), &value)
}

/// Records that the mutation of `operation_id` is about to happen.
pub(crate) fn dispatch(txn: &mut dyn Txn, operation_id: &str, checkpoint_id: &str, at: &str) -> Result<()> {
    append(
        txn,
        &JournalEntry {
            operation_id: operation_id.into(),
            checkpoint_id: checkpoint_id.into(),
            event: JournalEvent::EffectDispatchCommitted,
            at: at.into(),
        },
    )?;
    txn.put(schema::JOURNAL_OPEN, operation_id.as_bytes(), checkpoint_id.as_bytes())
}

/// Closes `operation_id` with a terminal `event` (no-op if it is already closed).
pub(crate) fn finish(
    txn: &mut dyn Txn,
    operation_id: &str,
    checkpoint_id: &str,
    event: JournalEvent,
    at: &str,
) -> Result<()> {
    debug_assert!(event != JournalEvent::EffectDispatchCommitted);
    if !txn.delete(schema::JOURNAL_OPEN, operation_id.as_bytes())? {
        return Ok(());
    }
    append(
        txn,
        &JournalEntry { operation_id: operation_id.into(), checkpoint_id: checkpoint_id.into(), event, at: at.into() },
    )
}

/// Whether `operation_id` has a dispatch and no terminal event.
pub(crate) fn is_open(txn: &mut dyn Txn, operation_id: &str) -> Result<bool> {
    Ok(txn.get(schema::JOURNAL_OPEN, operation_id.as_bytes())?.is_some())
}

/// Whether `operation_id` has a dispatch and no terminal event, as committed now.
pub(crate) fn is_open_now(kv: &dyn KeyValueStore, operation_id: &str) -> Result<bool> {
    kv.contains(schema::JOURNAL_OPEN, operation_id.as_bytes())
}

/// Every event of `operation_id`, in order.
pub(crate) fn events(kv: &dyn KeyValueStore, operation_id: &str) -> Result<Vec<JournalEntry>> {
    let mut out = Vec::new();
    kv.scan(schema::JOURNAL, format!("{operation_id}/").as_bytes(), &mut |_, v| {
        out.push(serde_json::from_slice(v).map_err(|e| Error::corrupt("journal", e))?);
        Ok(true)
    })?;
    Ok(out)
}

/// The number of journal entries in the store.
pub(crate) fn count(kv: &dyn KeyValueStore) -> Result<u64> {
    let mut n = 0;
    kv.scan_keys(schema::JOURNAL, b"", &mut |_| {
        n += 1;
        Ok(true)
    })?;
    Ok(n)
}
