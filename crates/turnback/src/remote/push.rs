//! Push: a session's turns, their snapshots' content and its history, to a bucket.
//!
//! Invariants (see also [`remote`](crate::remote)):
//! - Order: the format object, then packs, each followed by its index, then turn
//!   records, then — after checking that every pack it names is still there — the
//!   manifest, with a conditional create under a fresh name. A push killed anywhere leaves
//!   at most objects no manifest names yet; run again, it reuses the indexed packs it
//!   finds (unless they are unnamed and older than half the gc grace period, which `gc`
//!   may be removing) and completes.
//! - Only what the bucket lacks is uploaded: content objects no usable index lists, turn
//!   records no manifest names. An incremental push after one changed file uploads that
//!   file, the directory nodes above it, the turn's record and a manifest.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};

use rayon::prelude::*;
use serde::Serialize;

use crate::base::time::now_ms;
use crate::error::{Error, ErrorCode, Result};
use crate::remote::bucket::Bucket;
use crate::remote::manifest::{self, Candidate, Manifest, Merged, TurnEntry};
use crate::remote::pack::{self, Builder};
use crate::remote::seal::{self, RemoteKeys};
use crate::remote::{RemoteConfig, TurnRecord};
use crate::session::history::{self, Selection};
use crate::session::{Session, turn};
use crate::snapshot::{self, SnapshotRecord, tree::NodeKind};
use crate::storage::content::{ContentClass, ContentId};
use crate::storage::object;
use crate::storage::store::Store;

/// Packs sealed and uploaded together.
const PACKS_AT_ONCE: usize = 4;
/// How long an object no manifest names is kept by `gc --remote` (a push that takes
/// longer than half of it should not reuse what it finds unnamed).
pub(crate) const GRACE_MS: i64 = 60 * 60 * 1000;

/// What a push did.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct PushReport {
    /// The remote.
    pub remote: String,
    /// The session.
    pub session: String,
    /// Turns the remote holds for it now.
    pub turns: u64,
    /// Content objects its snapshots reach.
    pub objects: u64,
    /// Content objects uploaded (the rest were there).
    pub objects_uploaded: u64,
    /// Packs uploaded.
    pub packs_uploaded: u64,
    /// Turn records uploaded.
    pub records_uploaded: u64,
    /// Bytes uploaded in all (sealed: packs, indexes, records, the manifest).
    pub bytes_uploaded: u64,
    /// The manifest written.
    pub manifest: String,
}

/// Told the bytes of content processed so far and to process in all.
pub type PushProgress<'a> = dyn Fn(u64, u64) + Sync + 'a;

/// Makes sure the bucket holds a format object of this master key.
///
/// # Errors
/// `key-mismatch` if it was written under another master key.
pub(crate) fn ensure_format(bucket: &Bucket, keys: &RemoteKeys) -> Result<()> {
    match bucket.get(seal::FORMAT) {
        Ok(bytes) => keys.check_format(&bytes),
        Err(e) if e.code == ErrorCode::NotFound => {
            if bucket.create(seal::FORMAT, keys.format_object()?)? {
                Ok(())
            } else {
                keys.check_format(&bucket.get(seal::FORMAT)?)
            }
        }
        Err(e) => Err(e),
    }
}

/// Reads and opens every manifest in the bucket (or only session key `only`'s), by
/// session key. A manifest that does not open is an error for `only`'s own, and left out
/// for others.
pub(crate) fn read_manifests(
    bucket: &Bucket,
    keys: &RemoteKeys,
    only: Option<&str>,
) -> Result<HashMap<String, Vec<(String, Manifest)>>> {
    read_manifests_checked(bucket, keys, only, only.is_some())
}

/// [`read_manifests`], with `strict`: a manifest that does not open is an error.
pub(crate) fn read_manifests_checked(
    bucket: &Bucket,
    keys: &RemoteKeys,
    only: Option<&str>,
    strict: bool,
) -> Result<HashMap<String, Vec<(String, Manifest)>>> {
    let dir = only.map_or_else(|| "s/".to_string(), manifest::folder);
    let names: Vec<String> = bucket.list(&dir)?.into_iter().map(|l| l.name).collect();
    let mut out: HashMap<String, Vec<(String, Manifest)>> = HashMap::new();
    bucket.get_each(&names, &mut |name, bytes| {
        let session_key = name.split('/').nth(1).unwrap_or_default().to_string();
        let opened = keys.open(name, &bytes).and_then(|plain| {
            serde_json::from_slice::<Manifest>(&plain).map_err(|e| Error::corrupt(format!("remote manifest {name}"), e))
        });
        match opened {
            Ok(m) => out.entry(session_key).or_default().push((name.to_string(), m)),
            Err(e) if strict => return Err(e),
            Err(_) => {}
        }
        Ok(())
    })?;
    Ok(out)
}

/// The session's turns as records, with the content roots of their snapshots.
fn turn_records(store: &Store, session: &str) -> Result<(Vec<TurnRecord>, Vec<ContentId>)> {
    let turns = turn::list(store, session)?;
    let mut by_turn: HashMap<String, Vec<history::Entry>> = HashMap::new();
    for e in history::read(store, session, &Selection::All)?.entries {
        by_turn.entry(e.turn_id.clone()).or_default().push(e);
    }
    let mut roots = Vec::new();
    let mut records = Vec::new();
    for t in turns {
        let mut snapshots = Vec::new();
        for id in std::iter::once(&t.snapshot.id).chain(t.end_snapshot.as_ref().map(|e| &e.id)).flatten() {
            match snapshot::get(store, id) {
                Ok(s) => {
                    roots.extend(s.root.as_deref().and_then(ContentId::from_hex));
                    // A workspace id is one store's own: the record says nothing of it, so
                    // the same turn pushed from two stores is one record.
                    snapshots.push(SnapshotRecord { workspace_id: String::new(), ..s });
                }
                // A pruned snapshot is gone here too; its turn still travels.
                Err(e) if e.code == ErrorCode::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        let history = by_turn.remove(&t.turn_id).unwrap_or_default();
        records.push(TurnRecord { turn: t, snapshots, history });
    }
    Ok((records, roots))
}

/// Every content object the trees under `roots` reach, with its class, trees first.
pub(crate) fn reachable(store: &Store, roots: &[ContentId]) -> Result<Vec<(ContentId, ContentClass)>> {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    let mut stack: Vec<ContentId> = roots.to_vec();
    while let Some(id) = stack.pop() {
        if !seen.insert(id) {
            continue;
        }
        out.push((id, ContentClass::Tree));
        for node in snapshot::read_tree(store, &id)? {
            match node.kind {
                NodeKind::Tree(sub) => stack.push(sub),
                NodeKind::File(f) => {
                    if seen.insert(f) {
                        out.push((f, ContentClass::FileContent));
                    }
                }
                NodeKind::Symlink(f) => {
                    if seen.insert(f) {
                        out.push((f, ContentClass::SymlinkTarget));
                    }
                }
                NodeKind::Gitlink(_) => {}
            }
        }
    }
    Ok(out)
}

/// The pack size: [`pack::PACK_LEN`], or in test builds `TURNBACK_REMOTE_PACK_BYTES`
/// (crash tests cut small packs so that a push makes many uploads).
fn pack_len() -> usize {
    #[cfg(debug_assertions)]
    if let Some(n) = std::env::var("TURNBACK_REMOTE_PACK_BYTES").ok().and_then(|v| v.parse().ok()) {
        return n;
    }
    pack::PACK_LEN
}

/// Pushes `session` to `config`'s bucket.
///
/// # Errors
/// `not-found` for an unknown session; `key-mismatch` for a bucket of another master key;
/// `corrupt` for a manifest of this session that does not verify, or local content that
/// does not; `io` for network failures that outlast the retries.
pub(crate) fn push(
    store: &Store,
    config: &RemoteConfig,
    session_id: &str,
    progress: &PushProgress<'_>,
) -> Result<PushReport> {
    let session = Session::get(store, session_id)?.ok_or_else(|| Error::not_found(format!("session {session_id}")))?;
    let keys = RemoteKeys::new(store.keys());
    let bucket = Bucket::open(config)?;
    ensure_format(&bucket, &keys)?;
    let session_key = keys.session_key(session_id);
    let run = Pushing { store, bucket: &bucket, keys: &keys, bytes_up: AtomicU64::new(0) };

    let held = run.held(&session_key)?;
    let needed = run.needed(session_id, &held.content)?;
    let uploaded = run.upload_content(&needed.missing, progress)?;
    let (entries, records_uploaded) = run.upload_records(&needed.records, held.remote.as_ref())?;
    let packs = needed.packs.into_iter().chain(uploaded.iter().cloned()).collect();
    let manifest = run.write_manifest(session, &session_key, entries, held.remote, packs)?;
    Ok(PushReport {
        remote: config.name.clone(),
        session: session_id.to_string(),
        turns: manifest.turns.len() as u64,
        objects: needed.objects as u64,
        objects_uploaded: needed.missing.len() as u64,
        packs_uploaded: uploaded.len() as u64,
        records_uploaded,
        bytes_uploaded: run.bytes_up.into_inner(),
        manifest: manifest.name,
    })
}

/// One push under way: where it reads, where it writes, and the bytes it has uploaded.
struct Pushing<'a> {
    store: &'a Store,
    bucket: &'a Bucket,
    keys: &'a RemoteKeys,
    bytes_up: AtomicU64,
}

/// What the bucket holds for a push.
struct Held {
    /// The session's own manifests, merged (`None`: never pushed).
    remote: Option<Merged>,
    /// Each content object a usable pack holds, with that pack.
    content: HashMap<ContentId, String>,
}

/// What the session needs the bucket to hold.
struct Needed {
    /// Its turns as records.
    records: Vec<TurnRecord>,
    /// How many content objects its snapshots reach.
    objects: usize,
    /// The packs in the bucket that hold some of them.
    packs: HashSet<String>,
    /// Those no usable pack holds, in the order the local store packed them.
    missing: Vec<ContentId>,
}

/// The manifest a push wrote.
struct Written {
    /// Its name.
    name: String,
    /// The turns it names.
    turns: Vec<TurnEntry>,
}

impl Pushing<'_> {
    /// Counts `n` more bytes uploaded.
    fn count(&self, n: u64) {
        self.bytes_up.fetch_add(n, Ordering::Relaxed);
    }

    /// What the bucket holds: the session's manifests, and the content of every pack a
    /// manifest names or that is young enough not to be in a gc's way.
    fn held(&self, session_key: &str) -> Result<Held> {
        let manifests = read_manifests(self.bucket, self.keys, None)?;
        let named_packs: HashSet<String> =
            manifests.values().flatten().flat_map(|(_, m)| m.packs.iter().cloned()).collect();
        let own: Vec<(String, Manifest)> = manifests.get(session_key).cloned().unwrap_or_default();
        let remote: Option<Merged> = if own.is_empty() { None } else { Some(manifest::merge(own)?) };
        let now = now_ms();
        let usable: Vec<String> = self
            .bucket
            .list("x/")?
            .into_iter()
            .filter_map(|l| {
                let id = l.name.strip_prefix("x/")?.to_string();
                (named_packs.contains(&id) || now - l.modified_ms < GRACE_MS / 2).then_some(id)
            })
            .collect();
        let index_names: Vec<String> = usable.iter().map(|id| pack::index_name(id)).collect();
        let mut content: HashMap<ContentId, String> = HashMap::new();
        self.bucket.get_each(&index_names, &mut |name, bytes| {
            let id = name.trim_start_matches("x/").to_string();
            for c in pack::decode_index(&self.keys.open(name, &bytes)?)? {
                content.insert(c, id.clone());
            }
            Ok(())
        })?;
        Ok(Held { remote, content })
    }

    /// What the session needs: its turn records, and the content its snapshots reach
    /// that no pack in `held` holds.
    fn needed(&self, session_id: &str, held: &HashMap<ContentId, String>) -> Result<Needed> {
        let (records, roots) = turn_records(self.store, session_id)?;
        let objects = reachable(self.store, &roots)?;
        let packs: HashSet<String> = objects.iter().filter_map(|(id, _)| held.get(id).cloned()).collect();
        let mut missing: Vec<ContentId> =
            objects.iter().filter(|(id, _)| !held.contains_key(id)).map(|(id, _)| *id).collect();
        // Read in the order the local store packed them: each local block is decrypted once.
        let mut order = HashMap::new();
        for id in &missing {
            let at = crate::storage::pack::locate(self.store.kv(), id)?
                .and_then(|l| l.pieces.first().map(|p| (p.block, p.offset)));
            order.insert(*id, at);
        }
        missing.sort_by_key(|id| order[id]);
        Ok(Needed { records, objects: objects.len(), packs, missing })
    }

    /// Content first: `missing` in packs, each uploaded before its index; returns the
    /// packs uploaded.
    fn upload_content(&self, missing: &[ContentId], progress: &PushProgress<'_>) -> Result<Vec<String>> {
        let total: u64 = missing
            .iter()
            .map(|id| object::header(self.store.kv(), id).map(|h| h.map_or(0, |h| h.size)))
            .sum::<Result<u64>>()?;
        progress(0, total);
        let mut uploaded = Vec::new();
        let mut done = 0u64;
        let mut batch: Vec<Builder> = Vec::new();
        let mut current = Builder::default();
        let limit = pack_len();
        for id in missing {
            let (header, bytes) = self.store.read_object(id)?;
            current.add(*id, header.class, &bytes);
            done += bytes.len() as u64;
            if current.data_len() >= limit {
                batch.push(std::mem::take(&mut current));
                if batch.len() == PACKS_AT_ONCE {
                    uploaded.extend(self.upload_packs(std::mem::take(&mut batch))?);
                    progress(done, total);
                }
            }
        }
        if !current.is_empty() {
            batch.push(current);
        }
        if !batch.is_empty() {
            uploaded.extend(self.upload_packs(batch)?);
        }
        progress(done, total);
        Ok(uploaded)
    }

    /// Seals `batch` in parallel and uploads its packs, then their indexes; returns the
    /// packs' ids.
    fn upload_packs(&self, batch: Vec<Builder>) -> Result<Vec<String>> {
        let keys = self.keys;
        let sealed = batch
            .into_par_iter()
            .map(|b| {
                let id = uuid::Uuid::now_v7().simple().to_string();
                let index = pack::encode_index(&b.ids());
                let pack_bytes = keys.seal(&pack::pack_name(&id), &b.finish())?;
                let index_bytes = keys.seal(&pack::index_name(&id), &index)?;
                Ok((id, pack_bytes, index_bytes))
            })
            .collect::<Result<Vec<_>>>()?;
        let mut ids = Vec::new();
        let (mut p, mut x) = (Vec::new(), Vec::new());
        for (id, pb, ib) in sealed {
            p.push((pack::pack_name(&id), pb));
            x.push((pack::index_name(&id), ib));
            ids.push(id);
        }
        self.bucket.put_all(p, &|n| self.count(n))?;
        crate::base::failpoint::hit("remote-push-packs-uploaded");
        self.bucket.put_all(x, &|n| self.count(n))?;
        Ok(ids)
    }

    /// Then the turn records the bucket lacks (`remote` names the rest); returns every
    /// record's manifest entry, and how many were uploaded.
    fn upload_records(&self, records: &[TurnRecord], remote: Option<&Merged>) -> Result<(Vec<TurnEntry>, u64)> {
        let mut known_records: HashSet<String> = HashSet::new();
        if let Some(r) = remote {
            known_records.extend(r.turns.iter().map(|t| t.record.clone()));
        }
        let mut uploads = Vec::new();
        let mut entries = Vec::new();
        for r in records {
            let plain = serde_json::to_vec(r).map_err(|e| Error::new(ErrorCode::Io, format!("encode turn: {e}")))?;
            let id = self.keys.record_id(&plain);
            if !known_records.contains(&id) {
                let name = format!("t/{id}");
                uploads.push((name.clone(), self.keys.seal(&name, &plain)?));
            }
            entries.push(TurnEntry {
                turn_id: r.turn.turn_id.clone(),
                index: r.turn.index,
                started_at: r.turn.started_at.clone(),
                ended: !r.turn.running(),
                record: id,
            });
        }
        let uploaded = uploads.len() as u64;
        self.bucket.put_all(uploads, &|n| self.count(n))?;
        crate::base::failpoint::hit("remote-push-records-uploaded");
        Ok((entries, uploaded))
    }

    /// Last, the manifest: the merge of the remote's (`remote`) and ours (`local`, naming
    /// `packs`), once every pack it names is still there.
    fn write_manifest(
        &self,
        session: Session,
        session_key: &str,
        local: Vec<TurnEntry>,
        remote: Option<Merged>,
        mut packs: HashSet<String>,
    ) -> Result<Written> {
        let mut candidates: Vec<Candidate<TurnEntry>> = local.into_iter().map(Candidate::of).collect();
        let mut replaces = Vec::new();
        if let Some(r) = remote {
            packs.extend(r.packs);
            replaces = r.names;
            candidates.extend(r.turns.into_iter().map(Candidate::of));
        }
        let turns: Vec<TurnEntry> =
            manifest::merge_turns(candidates).into_iter().map(|(index, t)| TurnEntry { index, ..t }).collect();
        let mut packs: Vec<String> = packs.into_iter().collect();
        packs.sort();
        let pack_names: Vec<String> = packs.iter().map(|id| pack::pack_name(id)).collect();
        if let Some(gone) = self.bucket.exist_each(&pack_names)?.iter().position(|there| !there) {
            return Err(Error::new(
                ErrorCode::ConcurrentUpdate,
                format!("pack {} went from the remote during the push (a gc?): push again", packs[gone]),
            ));
        }
        crate::base::failpoint::hit("remote-push-before-manifest");
        let session = Session { prompt_round: turns.last().map_or(session.prompt_round, |t| t.index), ..session };
        let m = Manifest { format: manifest::FORMAT, session, turns, packs, replaces, pushed_at: now_ms() };
        let plain = serde_json::to_vec(&m).map_err(|e| Error::new(ErrorCode::Io, format!("encode manifest: {e}")))?;
        let name = manifest::new_name(&manifest::folder(session_key));
        let sealed = self.keys.seal(&name, &plain)?;
        self.count(sealed.len() as u64);
        if !self.bucket.create(&name, sealed)? {
            return Err(Error::new(ErrorCode::ConcurrentUpdate, "a manifest of that name exists already: push again"));
        }
        Ok(Written { name, turns: m.turns })
    }
}
