//! Pull: a session from a bucket into the local store, verified like local data.
//!
//! Invariants:
//! - Every object read from the bucket is opened under its own name (altered, cut or moved:
//!   `corrupt`); every content object's keyed digest is checked against its id before it
//!   is stored; every turn record's keyed id is checked against its name, and its turn
//!   against the manifest's entry. A missing object is `not-found`.
//! - Content is stored first (under the shared objects lock, so a local `gc` waits); then
//!   every object the pulled turns' snapshots reach is checked to be in the store; only
//!   then are the session, turns, snapshot records and history written, in one
//!   transaction. A pull that fails leaves at most unreferenced content, which `gc`
//!   removes; it never writes into a workspace.
//! - A session that exists locally is merged by turn id: the local version of a turn is
//!   kept, turns only the remote has are added, and where two turns claim one index the
//!   one that started later moves up ([`merge_turns`](crate::remote::manifest::merge_turns)).

use std::collections::{HashMap, HashSet};

use serde::Serialize;

use crate::error::{Error, ErrorCode, Result};
use crate::remote::bucket::Bucket;
use crate::remote::manifest::{self, Candidate, TurnEntry};
use crate::remote::pack;
use crate::remote::push::{self, reachable};
use crate::remote::seal::{self, RemoteKeys};
use crate::remote::{RemoteConfig, TurnRecord};
use crate::session::workspace::Workspace;
use crate::session::{self, Session, history, turn};
use crate::snapshot::{self, SnapshotRecord};
use crate::storage::content::{ContentClass, ContentId};
use crate::storage::kv::Txn;
use crate::storage::object;
use crate::storage::pack::Packer;
use crate::storage::store::Store;

/// What a pull did.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct PullReport {
    /// The remote.
    pub remote: String,
    /// The session.
    pub session: String,
    /// Its turns in the local store now.
    pub turns: u64,
    /// Turns added by this pull.
    pub turns_added: u64,
    /// Content objects its snapshots reach.
    pub objects: u64,
    /// Content objects stored by this pull (the rest were here).
    pub objects_stored: u64,
    /// Packs downloaded.
    pub packs_downloaded: u64,
    /// Bytes downloaded in all.
    pub bytes_downloaded: u64,
}

/// Told the bytes downloaded so far and to download in all.
pub type PullProgress<'a> = dyn Fn(u64, u64) + Sync + 'a;

/// Opens the bucket and checks its format object.
///
/// # Errors
/// `not-found` if it holds no turnback data; `key-mismatch`; `corrupt`.
pub(crate) fn open_checked(config: &RemoteConfig, keys: &RemoteKeys) -> Result<Bucket> {
    let bucket = Bucket::open(config)?;
    let format = bucket.get(seal::FORMAT).map_err(|e| {
        if e.code == ErrorCode::NotFound {
            Error::not_found(format!("turnback data on remote {}", config.name))
        } else {
            e
        }
    })?;
    keys.check_format(&format)?;
    Ok(bucket)
}

/// Reads and verifies the turn records `entries` name.
fn fetch_records(
    bucket: &Bucket,
    keys: &RemoteKeys,
    session: &str,
    entries: &[TurnEntry],
) -> Result<HashMap<String, TurnRecord>> {
    let names: Vec<String> = entries.iter().map(|t| format!("t/{}", t.record)).collect();
    let mut by_record: HashMap<String, TurnRecord> = HashMap::new();
    bucket.get_each(&names, &mut |name, sealed| {
        let plain = keys.open(name, &sealed)?;
        let id = name.trim_start_matches("t/");
        if keys.record_id(&plain) != id {
            return Err(Error::corrupt(format!("remote turn record {name}"), "it does not match its keyed id"));
        }
        let record: TurnRecord =
            serde_json::from_slice(&plain).map_err(|e| Error::corrupt(format!("remote turn record {name}"), e))?;
        if record.turn.session_id != session {
            return Err(Error::corrupt(format!("remote turn record {name}"), "it belongs to another session"));
        }
        by_record.insert(id.to_string(), record);
        Ok(())
    })?;
    let mut out = HashMap::new();
    for t in entries {
        let record =
            by_record.get(&t.record).ok_or_else(|| Error::not_found(format!("remote turn record t/{}", t.record)))?;
        if record.turn.turn_id != t.turn_id {
            return Err(Error::corrupt(format!("remote turn record t/{}", t.record), "it holds another turn"));
        }
        out.insert(t.turn_id.clone(), record.clone());
    }
    Ok(out)
}

/// Stores the verified objects of one pack's plaintext that the store lacks; returns how
/// many it stored.
fn store_pack(store: &Store, keys: &RemoteKeys, name: &str, plain: &[u8]) -> Result<u64> {
    let objects = pack::objects(plain, &|b| keys.content_id(b))
        .map_err(|e| Error::new(e.code, format!("remote pack {name}: {}", e.message)))?;
    let ids: Vec<ContentId> = objects.iter().map(|o| o.0).collect();
    let present = object::exist_each(store.kv(), &ids)?;
    let mut packer = Packer::default();
    let mut own = Vec::new();
    let mut stored = 0;
    for ((id, class, bytes), here) in objects.into_iter().zip(present) {
        if here {
            continue;
        }
        stored += 1;
        match class {
            ContentClass::FileContent | ContentClass::BinaryBlob => packer.add(id, class, bytes),
            ContentClass::Tree | ContentClass::SymlinkTarget => {
                own.extend(object::seal(store.keys(), bytes, class, |_| false)?.1);
            }
        }
    }
    let sealed = packer.seal(store.keys())?;
    let mut txn = store.kv().begin()?;
    sealed.store(&mut *txn)?;
    for o in &own {
        object::store_sealed(&mut *txn, o)?;
    }
    txn.commit()?;
    Ok(stored)
}

/// Pulls session `session_id` from `config`'s bucket into `workspace` (a session that
/// exists locally keeps its own workspace).
///
/// # Errors
/// `not-found` if the remote holds no such session or lacks an object it names;
/// `corrupt` if an object does not verify; `key-mismatch` for another master key; `io`
/// for network failures that outlast the retries.
pub(crate) fn pull(
    store: &Store,
    config: &RemoteConfig,
    session_id: &str,
    workspace: &Workspace,
    progress: &PullProgress<'_>,
) -> Result<PullReport> {
    session::validate_id(session_id)?;
    let keys = RemoteKeys::new(store.keys());
    let bucket = open_checked(config, &keys)?;
    let session_key = keys.session_key(session_id);
    let manifests = push::read_manifests(&bucket, &keys, Some(&session_key))?.remove(&session_key).unwrap_or_default();
    if manifests.is_empty() {
        return Err(Error::not_found(format!("session {session_id} on remote {}", config.name)));
    }
    let merged = manifest::merge(manifests)?;
    if merged.session.id != session_id {
        return Err(Error::corrupt("remote manifest", "it names another session"));
    }
    let records = fetch_records(&bucket, &keys, session_id, &merged.turns)?;

    // Content first, verified, under the shared objects lock (a local gc waits).
    let _objects = crate::fs::lock::objects(&store.locks_dir(), false)?;
    let pack_names: Vec<String> = merged.packs.iter().map(|id| pack::pack_name(id)).collect();
    let sizes: HashMap<String, u64> = bucket.list("p/")?.into_iter().map(|l| (l.name, l.size)).collect();
    let total: u64 = pack_names.iter().filter_map(|n| sizes.get(n)).sum();
    let (mut stored, mut bytes) = (0u64, 0u64);
    progress(0, total);
    bucket.get_each(&pack_names, &mut |name, sealed| {
        bytes += sealed.len() as u64;
        let plain = keys.open(name, &sealed)?;
        stored += store_pack(store, &keys, name, &plain)?;
        progress(bytes, total);
        Ok(())
    })?;

    // Everything the turns' snapshots reach must be here now.
    let roots: Vec<ContentId> = records
        .values()
        .flat_map(|r| r.snapshots.iter().filter_map(|s| s.root.as_deref().and_then(ContentId::from_hex)))
        .collect();
    let reached = reachable(store, &roots).map_err(|e| match e.code {
        ErrorCode::NotFound => Error::not_found(format!("a directory node the remote session needs ({})", e.message)),
        _ => e,
    })?;
    let ids: Vec<ContentId> = reached.iter().map(|(id, _)| *id).collect();
    if let Some(missing) = object::exist_each(store.kv(), &ids)?.iter().position(|here| !here) {
        return Err(Error::not_found(format!(
            "content object {} that the session needs, on remote {}",
            ids[missing].to_hex(),
            config.name
        )));
    }

    // Then the records, in one transaction.
    let turns_added = write_records(store, session_id, &merged.session, &merged.turns, &records, workspace)?;
    let turns = turn::list(store, session_id)?.len() as u64;
    Ok(PullReport {
        remote: config.name.clone(),
        session: session_id.to_string(),
        turns,
        turns_added,
        objects: ids.len() as u64,
        objects_stored: stored,
        packs_downloaded: pack_names.len() as u64,
        bytes_downloaded: bytes,
    })
}

/// One turn of the merge: the local one as it is, or a remote one to add.
enum Side {
    Local(Box<turn::Turn>),
    Remote(String),
}

/// Writes the session's records in one transaction: the session (adopted, or its prompt
/// round raised to the merge's last turn), then the merge of its local turns with the
/// remote's `entries`; returns how many turns it added.
fn write_records(
    store: &Store,
    session_id: &str,
    remote_session: &Session,
    entries: &[TurnEntry],
    records: &HashMap<String, TurnRecord>,
    workspace: &Workspace,
) -> Result<u64> {
    let local = Session::get(store, session_id)?;
    let merged = merge_sides(store, session_id, local.is_some(), entries)?;
    let workspace_id = local.as_ref().map_or_else(|| workspace.id.clone(), |s| s.workspace_id.clone());
    let last = merged.last().map_or(0, |(i, _)| *i);
    let existing = existing_snapshots(store, &merged, records);
    let mut txn = store.kv().begin()?;
    match &local {
        Some(s) => Session::set_round_in(store, &mut *txn, &s.id, s.prompt_round.max(last))?,
        None => {
            let adopted = Session { workspace_id: workspace_id.clone(), prompt_round: last, ..remote_session.clone() };
            session::adopt_in(store, &mut *txn, &adopted)?;
        }
    }
    let added = write_turns_in(store, &mut *txn, session_id, &workspace_id, merged, records, &existing)?;
    txn.commit()?;
    Ok(added)
}

/// The session's turns by index: its local ones (if `local`, it exists here) merged with
/// the remote's `entries` that it lacks.
fn merge_sides(store: &Store, session_id: &str, local: bool, entries: &[TurnEntry]) -> Result<Vec<(u64, Side)>> {
    let local_turns = if local { turn::list(store, session_id)? } else { Vec::new() };
    let local_ids: HashSet<String> = local_turns.iter().map(|t| t.turn_id.clone()).collect();
    let mut candidates: Vec<Candidate<Side>> = local_turns
        .iter()
        .map(|t| Candidate {
            turn_id: t.turn_id.clone(),
            index: t.index,
            started_at: t.started_at.clone(),
            rank: (u8::MAX, String::new()),
            item: Side::Local(Box::new(t.clone())),
        })
        .collect();
    candidates.extend(entries.iter().filter(|t| !local_ids.contains(&t.turn_id)).map(|t| Candidate {
        turn_id: t.turn_id.clone(),
        index: t.index,
        started_at: t.started_at.clone(),
        rank: (u8::from(t.ended), t.record.clone()),
        item: Side::Remote(t.turn_id.clone()),
    }));
    Ok(manifest::merge_turns(candidates))
}

/// The snapshot records of the merge's remote turns already here (a pull run twice):
/// they are left as they are.
fn existing_snapshots(store: &Store, merged: &[(u64, Side)], records: &HashMap<String, TurnRecord>) -> HashSet<String> {
    let mut existing = HashSet::new();
    for (_, side) in merged {
        if let Side::Remote(id) = side {
            for s in &records[id].snapshots {
                if snapshot::get(store, &s.snapshot_id).is_ok() {
                    existing.insert(s.snapshot_id.clone());
                }
            }
        }
    }
    existing
}

/// Writes the merge's turns in `txn`: local turns that move to a new index, and remote
/// turns with their snapshot records (but the `existing` ones) and history; returns how
/// many remote turns it added.
fn write_turns_in(
    store: &Store,
    txn: &mut dyn Txn,
    session_id: &str,
    workspace_id: &str,
    merged: Vec<(u64, Side)>,
    records: &HashMap<String, TurnRecord>,
    existing: &HashSet<String>,
) -> Result<u64> {
    // Local turns that move give up their old index rows first.
    for (index, side) in &merged {
        if let Side::Local(t) = side
            && t.index != *index
        {
            turn::unindex_in(store, txn, session_id, t.index)?;
        }
    }
    let mut added = 0;
    for (index, side) in merged {
        match side {
            Side::Local(t) => {
                if t.index != index {
                    turn::put(store, txn, &turn::Turn { index, ..*t })?;
                }
            }
            Side::Remote(id) => {
                let record = &records[&id];
                for s in &record.snapshots {
                    if !existing.contains(&s.snapshot_id) {
                        let s = SnapshotRecord {
                            workspace_id: workspace_id.to_string(),
                            session_id: session_id.to_string(),
                            ..s.clone()
                        };
                        snapshot::put_record(store, txn, &s)?;
                    }
                }
                turn::put(store, txn, &turn::Turn { index, ..record.turn.clone() })?;
                history::append_in(store, txn, session_id, &record.history)?;
                added += 1;
            }
        }
    }
    Ok(added)
}
