//! Garbage collection on a remote, and what sessions a remote holds.
//!
//! Invariants:
//! - `gc --remote` deletes only objects that no manifest names and that are older than the
//!   grace period (default one hour), and manifests that a newer manifest replaces once
//!   both are there and the replaced one is older than the grace period. It lists the
//!   bucket first and reads the manifests after, so an object uploaded by a concurrent push
//!   is either not listed or named; a push's own uploads are younger than the grace period
//!   until its manifest names them, and a push reuses an unnamed pack only while it is
//!   younger than half the grace period and checks that every pack it names is there before
//!   it writes its manifest.
//! - A manifest that does not open stops `gc` (`corrupt`) before anything is deleted: what
//!   it names cannot be known.

use std::collections::HashSet;

use serde::Serialize;

use crate::base::time::now_ms;
use crate::error::Result;
use crate::remote::RemoteConfig;
use crate::remote::manifest;
use crate::remote::pack;
use crate::remote::pull::open_checked;
use crate::remote::push::read_manifests_checked;
use crate::remote::seal::{self, RemoteKeys};
use crate::storage::store::Store;

/// What `gc --remote` did.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct RemoteGcReport {
    /// The remote.
    pub remote: String,
    /// Objects deleted.
    pub deleted: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Objects no manifest names that were kept because they are younger than the grace
    /// period (a push may be on its way to naming them).
    pub kept_young: u64,
    /// Objects kept in all.
    pub kept: u64,
}

/// One session a remote holds.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct RemoteSession {
    /// The session id.
    pub id: String,
    /// Its turns there.
    pub turns: u64,
    /// The newest turn's preview is not shown: listing reads manifests only.
    pub created_at: String,
    /// The agent working in it, if recorded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// When it was last pushed (ms since epoch).
    pub pushed_at: i64,
    /// Manifests it is made of (more than one: pushes from several machines, not yet
    /// merged by a later push, or replaced ones `gc --remote` has not removed yet).
    pub manifests: u64,
}

/// The sessions `config`'s bucket holds, oldest push first.
pub(crate) fn sessions(store: &Store, config: &RemoteConfig) -> Result<Vec<RemoteSession>> {
    let keys = RemoteKeys::new(store.keys());
    let bucket = match open_checked(config, &keys) {
        Ok(b) => b,
        Err(e) if e.code == crate::error::ErrorCode::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut out = Vec::new();
    for (_, manifests) in read_manifests_checked(&bucket, &keys, None, false)? {
        let count = manifests.len() as u64;
        let pushed_at = manifests.iter().map(|(_, m)| m.pushed_at).max().unwrap_or(0);
        let merged = manifest::merge(manifests)?;
        out.push(RemoteSession {
            id: merged.session.id.clone(),
            turns: merged.turns.len() as u64,
            created_at: merged.session.created_at.clone(),
            agent: merged.session.agent.clone(),
            pushed_at,
            manifests: count,
        });
    }
    out.sort_by(|a, b| (a.pushed_at, &a.id).cmp(&(b.pushed_at, &b.id)));
    Ok(out)
}

/// Removes from `config`'s bucket what no manifest names and is older than `grace_ms`.
///
/// # Errors
/// `corrupt` if a manifest does not open (nothing is deleted then); `key-mismatch`; `io`.
pub(crate) fn gc(store: &Store, config: &RemoteConfig, grace_ms: i64) -> Result<RemoteGcReport> {
    let keys = RemoteKeys::new(store.keys());
    let bucket = open_checked(config, &keys)?;
    let listed = bucket.list("")?;
    let manifests = read_manifests_checked(&bucket, &keys, None, true)?;
    let mut named: HashSet<String> = HashSet::new();
    let mut replaced: HashSet<String> = HashSet::new();
    let present: HashSet<&str> = listed.iter().map(|l| l.name.as_str()).collect();
    for (name, m) in manifests.values().flatten() {
        named.insert(name.clone());
        for p in &m.packs {
            named.insert(pack::pack_name(p));
            named.insert(pack::index_name(p));
        }
        named.extend(m.turns.iter().map(|t| format!("t/{}", t.record)));
        // A replaced manifest may go once the one replacing it is there.
        replaced.extend(m.replaces.iter().filter(|r| *r != name && present.contains(name.as_str())).cloned());
    }
    let now = now_ms();
    let (mut doomed, mut bytes, mut kept_young, mut kept) = (Vec::new(), 0, 0, 0);
    for l in &listed {
        let old = now - l.modified_ms >= grace_ms;
        let live = l.name == seal::FORMAT || (named.contains(&l.name) && !replaced.contains(&l.name));
        if live {
            kept += 1;
        } else if old {
            bytes += l.size;
            doomed.push(l.name.clone());
        } else {
            kept_young += 1;
            kept += 1;
        }
    }
    // Replaced manifests go last: a reader listing meanwhile still finds every turn.
    doomed.sort_by_key(|n| n.starts_with("s/"));
    bucket.delete_all(&doomed)?;
    Ok(RemoteGcReport { remote: config.name.clone(), deleted: doomed.len() as u64, bytes, kept_young, kept })
}
