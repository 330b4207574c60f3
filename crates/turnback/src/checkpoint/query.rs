//! Reading checkpoints: every read is verified (record id, operation id, states), and
//! image bytes come back only through the artifact's own checks.

use serde::Serialize;

use crate::checkpoint::artifact::{self, ContentMetadata, Expected, ImageRole};
use crate::checkpoint::journal::{self, JournalEvent};
use crate::checkpoint::*;
use crate::error::{Error, ErrorCode, Result};
use crate::fs::body::{Body, HELD_MAX};
use crate::storage::schema;
use crate::storage::store::Store;

/// The checkpoint recording operation `operation_id`.
pub(crate) fn by_operation(store: &Store, operation_id: &str) -> Result<String> {
    let id = store
        .kv()
        .get(schema::CHECKPOINTS_BY_OPERATION, operation_id.as_bytes())?
        .ok_or_else(|| Error::not_found(format!("operation {operation_id}")))?;
    String::from_utf8(id).map_err(|_| Error::corrupt("operation index", "bad checkpoint id"))
}

/// Decrypts and checks the record `id` whatever its state (for `inspect` and `verify`).
///
/// # Errors
/// `not-found`, or `corrupt` if it was altered.
pub(crate) fn load(store: &Store, id: &str) -> Result<CheckpointRecord> {
    let value = store
        .kv()
        .get(schema::CHECKPOINTS, id.as_bytes())?
        .ok_or_else(|| Error::not_found(format!("checkpoint {id}")))?;
    let record: CheckpointRecord = store.open_record(schema::CHECKPOINTS, id.as_bytes(), &value)?;
    check_identity(id, &record)?;
    Ok(record)
}

/// The verified checkpoint `id`: complete and trustworthy, or an error.
///
/// # Errors
/// `not-found`; `corrupt` if altered or marked corrupt; `recovery-locked` if it is not
/// committed (an incomplete or unreachable stage).
pub(crate) fn get(store: &Store, id: &str) -> Result<CheckpointRecord> {
    let record = load(store, id)?;
    verify_usable(&record)?;
    Ok(record)
}

fn verify_usable(record: &CheckpointRecord) -> Result<()> {
    let id = &record.checkpoint_id;
    match record.integrity_state {
        IntegrityState::Corrupt => return Err(Error::corrupt(format!("checkpoint {id}"), "marked corrupt")),
        IntegrityState::RecoveryLocked => {
            return Err(Error::new(
                ErrorCode::RecoveryLocked,
                format!("checkpoint {id} is an incomplete stage (recovery-locked)"),
            ));
        }
        IntegrityState::Verified => {}
    }
    match record.stage_state {
        StageState::Committed => Ok(()),
        StageState::Unreachable => {
            Err(Error::new(ErrorCode::RecoveryLocked, format!("checkpoint {id} is unreachable")))
        }
        other => Err(Error::new(
            ErrorCode::RecoveryLocked,
            format!("checkpoint {id} is {} and has not been committed", other.as_str()),
        )),
    }
}

/// Where one image of a verified checkpoint is stored: its target, and its artifact with
/// what the sealed record expects of it (`None`: the file was absent).
///
/// # Errors
/// `recovery-locked` if the checkpoint is not committed; `not-found` if the content was
/// evicted or never stored (over a cap); `corrupt` for a record without the image.
fn image_artifact(
    record: &CheckpointRecord,
    target: usize,
    role: ImageRole,
) -> Result<Option<(&ImageRecord, &str, Expected<'_>)>> {
    verify_usable(record)?;
    let t = record.targets.get(target).ok_or_else(|| Error::not_found(format!("target {target}")))?;
    let image = match role {
        ImageRole::Pre => &t.pre_image,
        ImageRole::Post => {
            t.post_image.as_ref().ok_or_else(|| Error::corrupt("checkpoint", "committed without a post-image"))?
        }
    };
    if !image.present {
        return Ok(None);
    }
    if record.retention_state == RetentionState::Evicted {
        return Err(Error::not_found(format!("content of checkpoint {} (evicted)", record.checkpoint_id)));
    }
    let artifact_id = image
        .artifact_id
        .as_deref()
        .ok_or_else(|| Error::not_found(format!("content of {} (not protected: over a cap)", t.path.display())))?;
    let digest = image.digest.as_deref().ok_or_else(|| Error::corrupt("checkpoint", "image without digest"))?;
    Ok(Some((image, artifact_id, Expected { checkpoint_id: &record.checkpoint_id, digest, size: image.size })))
}

/// Reads the bytes of one image of a verified checkpoint (`None`: the file was absent).
///
/// # Errors
/// `recovery-locked` if the checkpoint is not committed; `not-found` if the content was
/// evicted or never stored; `corrupt` if anything does not verify. No bytes on failure.
pub(crate) fn read_image(
    store: &Store,
    record: &CheckpointRecord,
    target: usize,
    role: ImageRole,
) -> Result<Option<(ContentMetadata, Vec<u8>)>> {
    let Some((_, artifact_id, expected)) = image_artifact(record, target, role)? else { return Ok(None) };
    artifact::read(store.keys(), store.kv(), artifact_id, expected).map(Some)
}

/// One image of a verified checkpoint as a [`Body`] (`None`: the file was absent): read,
/// verified and held if it is small, else checked against its artifact record and the
/// object's header and named by its id (its bytes verify as they are poured).
///
/// # Errors
/// As [`read_image`].
pub(crate) fn image_body(
    store: &Store,
    record: &CheckpointRecord,
    target: usize,
    role: ImageRole,
) -> Result<Option<Body>> {
    let Some((image, artifact_id, expected)) = image_artifact(record, target, role)? else { return Ok(None) };
    if image.size <= HELD_MAX {
        return artifact::read(store.keys(), store.kv(), artifact_id, expected).map(|(_, b)| Some(Body::Held(b)));
    }
    let (meta, id) = artifact::check(store.kv(), artifact_id, expected)?;
    Ok(Some(Body::Stored { id: id.0, size: meta.size }))
}

/// Which checkpoints to list.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ListFilter {
    /// Only those made in this prompt round.
    pub prompt_round: Option<u64>,
    /// Include incomplete, unreachable and evicted records.
    pub all: bool,
}

/// A checkpoint the session's index names whose record cannot be opened: altered
/// (`corrupt`) or gone (`not-found`). Nothing of it can be read, and nothing of it taken
/// back; it is listed, and it keeps any rollback that meets it from being `full`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Unreadable {
    /// Its id.
    pub checkpoint_id: String,
    /// The prompt round the session's index gives it (none for an index row written before
    /// rounds were kept there: it may belong to any round).
    pub prompt_round: Option<u64>,
    /// Always `corrupt`: the record cannot be trusted.
    pub integrity_state: IntegrityState,
    /// The stable code of why (`corrupt`, or `not-found` for a record that is gone).
    pub code: String,
    /// For people.
    pub message: String,
}

/// A session's checkpoints: the records that open, and those that do not.
#[derive(Debug, Clone, Default)]
pub(crate) struct Listing {
    /// Records that open and verify, oldest first.
    pub records: Vec<CheckpointRecord>,
    /// Records the index names that cannot be opened, oldest first.
    pub unreadable: Vec<Unreadable>,
}

/// The value of a session index row: the prompt round the checkpoint was made in.
pub(crate) fn index_value(prompt_round: u64) -> Vec<u8> {
    prompt_round.to_string().into_bytes()
}

fn index_round(value: &[u8]) -> Option<u64> {
    std::str::from_utf8(value).ok()?.parse().ok()
}

/// The checkpoints of session `session_id`, oldest first. Without `all`, only complete
/// checkpoints whose content is still kept; records that cannot be opened are always in
/// [`Listing::unreadable`] (those of `filter`'s round, or of an unknown round).
pub(crate) fn list(store: &Store, session_id: &str, filter: ListFilter) -> Result<Listing> {
    let mut out = Listing::default();
    for (id, indexed_round) in index_rows(store, session_id)? {
        // One altered record must not hide every other checkpoint, nor itself.
        let record = match load(store, &id) {
            Ok(r) => r,
            Err(e) if matches!(e.code, ErrorCode::Corrupt | ErrorCode::NotFound) => {
                if filter.prompt_round.is_none_or(|r| indexed_round.is_none_or(|i| i == r)) {
                    out.unreadable.push(Unreadable {
                        checkpoint_id: id,
                        prompt_round: indexed_round,
                        integrity_state: IntegrityState::Corrupt,
                        code: e.code.as_str().to_string(),
                        message: e.message,
                    });
                }
                continue;
            }
            Err(e) => return Err(e),
        };
        if filter.prompt_round.is_some_and(|r| record.prompt_round != Some(r)) {
            continue;
        }
        let shown = filter.all
            || (record.stage_state == StageState::Committed
                && record.integrity_state == IntegrityState::Verified
                && record.retention_state != RetentionState::Evicted);
        if shown {
            out.records.push(record);
        }
    }
    Ok(out)
}

/// The rows of session `session_id`'s checkpoint index: each checkpoint id with the round
/// the row gives it, oldest first (for `verify`).
pub(super) fn index_rows(store: &Store, session_id: &str) -> Result<Vec<(String, Option<u64>)>> {
    let prefix = format!("{session_id}/");
    let mut rows = Vec::new();
    store.kv().scan(schema::CHECKPOINTS_BY_SESSION, prefix.as_bytes(), &mut |k, v| {
        rows.push((String::from_utf8_lossy(&k[prefix.len()..]).into_owned(), index_round(v)));
        Ok(true)
    })?;
    Ok(rows)
}

/// The checkpoints of `session_id` made after `after` (a time-ordered id: a checkpoint's
/// or a snapshot's), oldest first; those that do not open are left out.
pub(crate) fn made_after(store: &Store, session_id: &str, after: &str) -> Result<Vec<CheckpointRecord>> {
    let mut out = Vec::new();
    for (id, _) in index_rows(store, session_id)? {
        if id.as_str() > after
            && let Ok(record) = load(store, &id)
        {
            out.push(record);
        }
    }
    Ok(out)
}

/// Every checkpoint id in the store, in session order.
pub(crate) fn all_ids(store: &Store) -> Result<Vec<String>> {
    store.kv().text_keys(schema::CHECKPOINTS)
}

/// Cross-checks the checkpoint tables against each other, for `verify`: every row of a
/// session's index names a record of that session and round; every record is in its
/// session's index and its operation's; every operation's journal holds exactly the events
/// its record's commit state says happened (or what reconcile leaves of a rollback killed
/// mid-apply: see `journal_agrees`). `records` holds every checkpoint id of the store with
/// its record as `load` opened it (`None`: it does not open), so each is decrypted once.
/// Each problem comes with what it concerns.
pub(crate) fn cross_check(
    store: &Store,
    records: &std::collections::BTreeMap<String, Option<CheckpointRecord>>,
) -> Result<Vec<(String, Error)>> {
    let mut problems = session_index_problems(store, records)?;
    for (id, r) in records {
        let Some(r) = r else { continue };
        problems.extend(record_index_problems(store, id, r)?);
        problems.extend(journal_problem(store, id, r)?);
    }
    Ok(problems)
}

/// Every row of a session's index names a record (of `records`) of that session and round.
fn session_index_problems(
    store: &Store,
    records: &std::collections::BTreeMap<String, Option<CheckpointRecord>>,
) -> Result<Vec<(String, Error)>> {
    let mut problems = Vec::new();
    let mut rows = Vec::new();
    store.kv().scan(schema::CHECKPOINTS_BY_SESSION, b"", &mut |k, v| {
        rows.push((String::from_utf8_lossy(k).into_owned(), index_round(v)));
        Ok(true)
    })?;
    for (key, round) in rows {
        let Some((session, id)) = key.split_once('/') else { continue };
        let what = format!("checkpoint {id}");
        match records.get(id) {
            Some(Some(r)) if r.session_id != session => problems.push((
                what,
                Error::corrupt("checkpoints-by-session", format!("indexed under session {session}, made in another")),
            )),
            Some(Some(r)) if round.is_some() && r.prompt_round != round => problems.push((
                what,
                Error::corrupt(
                    "checkpoints-by-session",
                    format!("indexed in round {round:?}, made in {:?}", r.prompt_round),
                ),
            )),
            Some(Some(_)) => {}
            None => problems.push((
                what,
                Error::new(
                    ErrorCode::NotFound,
                    format!(
                        "session {session}'s checkpoints-by-session index names checkpoint {id}, whose record is gone"
                    ),
                ),
            )),
            // An altered record is reported where every record is opened.
            Some(None) => {}
        }
    }
    Ok(problems)
}

/// Record `r` (checkpoint `id`) is in its session's index, and its operation's leads to it.
fn record_index_problems(store: &Store, id: &str, r: &CheckpointRecord) -> Result<Vec<(String, Error)>> {
    let mut problems = Vec::new();
    let what = format!("checkpoint {id}");
    if !store.kv().contains(schema::CHECKPOINTS_BY_SESSION, format!("{}/{id}", r.session_id).as_bytes())? {
        problems.push((
            what.clone(),
            Error::new(
                ErrorCode::NotFound,
                format!("missing from session {}'s checkpoints-by-session index", r.session_id),
            ),
        ));
    }
    let op = &r.mutation.operation_id;
    if store.kv().get(schema::CHECKPOINTS_BY_OPERATION, op.as_bytes())?.as_deref() != Some(id.as_bytes()) {
        problems.push((
            what,
            Error::new(ErrorCode::NotFound, format!("operation {op} does not lead to it (checkpoints-by-operation)")),
        ));
    }
    Ok(problems)
}

/// Record `r`'s operation journal holds the events its states say happened
/// ([`journal_agrees`]).
fn journal_problem(store: &Store, id: &str, r: &CheckpointRecord) -> Result<Option<(String, Error)>> {
    let op = &r.mutation.operation_id;
    let events: Vec<JournalEvent> = journal::events(store.kv(), op)?.into_iter().map(|e| e.event).collect();
    let open = journal::is_open_now(store.kv(), op)?;
    if journal_agrees(r, &events, open) {
        return Ok(None);
    }
    let expected = expected_journal(r);
    Ok(Some((
        format!("operation {op}"),
        Error::corrupt(
            "journal",
            format!(
                "checkpoint {id} is {} / {}, which needs the journal {expected:?}{}; it holds {events:?}{}",
                r.stage_state.as_str(),
                r.mutation.commit_state.as_str(),
                if expected.len() == 1 { " (open)" } else { "" },
                if open { " (open)" } else { "" }
            ),
        ),
    )))
}

/// Whether operation `events` (and whether it is still `open`) are what record `r`'s states
/// say happened. Besides [`expected_journal`], one state a crash leaves is accepted: a
/// committed record still `pending` (a rollback's own checkpoint, committed before it
/// writes) whose process died mid-apply; reconcile closes its journal with
/// `OperationUnknownOutcome` and, by design, leaves the committed record as it is.
fn journal_agrees(r: &CheckpointRecord, events: &[JournalEvent], open: bool) -> bool {
    let expected = expected_journal(r);
    if events == expected.as_slice() && open == (expected.len() == 1) {
        return true;
    }
    r.stage_state == StageState::Committed
        && r.mutation.commit_state == CommitState::Pending
        && !open
        && events == [JournalEvent::EffectDispatchCommitted, JournalEvent::OperationUnknownOutcome]
}

/// The journal events a record's states say its operation has, in order.
fn expected_journal(r: &CheckpointRecord) -> Vec<JournalEvent> {
    let dispatched = match r.mutation.commit_state {
        CommitState::Abandoned => false,
        CommitState::Pending => r.stage_state != StageState::Staging,
        _ => true,
    };
    let terminal = match r.mutation.commit_state {
        CommitState::Succeeded => Some(JournalEvent::OperationSucceeded),
        CommitState::Failed => Some(JournalEvent::OperationFailed),
        CommitState::UnknownOutcome => Some(JournalEvent::OperationUnknownOutcome),
        CommitState::Pending | CommitState::Abandoned => None,
    };
    dispatched.then_some(JournalEvent::EffectDispatchCommitted).into_iter().chain(terminal).collect()
}
