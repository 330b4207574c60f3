//! Phases 2 and 4 of taking a snapshot: the limits. A file over a limit on its own is left
//! out with its reason; a snapshot whose kept files are over a limit is skipped with its
//! reason, before any content is read.
//!
//! Invariants: a first snapshot is measured by all it holds, a later one by what it adds
//! against its [`Baseline`], a pre-rewind snapshot by nothing (a rewind must see the
//! workspace); no limit advises a setting that would not change the outcome.

use std::collections::BTreeMap;

use crate::error::Result;
use crate::fs::walk::Kind;
use crate::snapshot::lookup::flatten;
use crate::snapshot::plan::ReadPlan;
use crate::snapshot::scan::{Scan, Seen};
use crate::snapshot::statcache::StatCache;
use crate::snapshot::tree::Node;
use crate::snapshot::{LeftOut, SnapshotKind, latest};
use crate::storage::content::ContentId;
use crate::storage::settings::{SnapshotLimits, format_size};
use crate::storage::store::Store;

/// What a snapshot is measured against: a first snapshot holds everything; a later one
/// adds what the stat cache does not vouch for — or, without a cache (lost, dropped, an
/// older format), what the previous snapshot lacks by path and size, so that re-reading
/// unchanged files does not count. A pre-rewind snapshot is how a rewind sees the
/// workspace: however much an agent added, it must be taken, so it has no baseline.
pub(super) enum Baseline<'a> {
    PreRewind,
    First,
    Cache(&'a StatCache),
    Tree(BTreeMap<Vec<u8>, Node>),
}

impl<'a> Baseline<'a> {
    pub(super) fn of(store: &Store, session_id: &str, kind: SnapshotKind, cache: &'a StatCache) -> Result<Self> {
        if kind == SnapshotKind::PreRewind {
            return Ok(Baseline::PreRewind);
        }
        let Some(previous) = latest(store, session_id)? else { return Ok(Baseline::First) };
        let previous_root = previous.root.as_deref().and_then(ContentId::from_hex);
        // After watched snapshots the cache describes an older one: measure against the tree.
        if !cache.entries.is_empty() && previous_root.is_some_and(|r| cache.names_tree(&r)) {
            return Ok(Baseline::Cache(cache));
        }
        Ok(Baseline::Tree(match previous_root {
            Some(root) => flatten(store, &root)?,
            None => BTreeMap::new(),
        }))
    }

    /// Whether file `e` counts as new or changed. A racily clean file (stat as cached, only
    /// too recent to trust) is read again but adds nothing new.
    fn adds(&self, e: &Seen<'_>) -> bool {
        match self {
            Baseline::PreRewind | Baseline::First => true,
            Baseline::Cache(cache) => e.cached.is_none_or(|c| cache.entries.stat(c) != e.stat),
            Baseline::Tree(before) => before.get(e.path).is_none_or(|n| n.size != e.stat.size),
        }
    }

    /// The limit file `e` is over, if it is, as (its bytes, setting, what it bounds): first
    /// `max-file-size`, then what the snapshot may take in all (a file alone over that
    /// could only ever skip the whole snapshot, again at every later one).
    fn file_over(&self, e: &Seen<'_>, limits: &SnapshotLimits) -> Option<(u64, &'static str, &'static str)> {
        if e.stat.size > limits.max_file_bytes {
            return Some((limits.max_file_bytes, "max-file-size", "a snapshot keeps of one file"));
        }
        let whole = match self {
            Baseline::First => (limits.first_max_bytes, "first-max-size", "a first snapshot may hold"),
            // Whether it adds is asked only of a file that would be over if it did.
            Baseline::Cache(_) | Baseline::Tree(_) if e.stat.size > limits.later_max_bytes && self.adds(e) => {
                (limits.later_max_bytes, "later-max-size", "a later snapshot may add")
            }
            _ => return None,
        };
        (e.stat.size > whole.0).then_some(whole)
    }
}

/// Phase 2: leaves out of the walk every file over a limit on its own
/// ([`Baseline::file_over`]), returning them with the reason; everything after counts only
/// what was kept.
pub(super) fn leave_out(walked: &mut Scan<'_>, baseline: &Baseline<'_>, limits: &SnapshotLimits) -> Vec<LeftOut> {
    let mut left_out = Vec::new();
    walked.retain(|e| {
        let over = if *e.kind == Kind::File { baseline.file_over(&e, limits) } else { None };
        let Some((cap, setting, what)) = over else { return true };
        let (size, cap_text) = (format_size(e.stat.size), format_size(cap));
        left_out.push(LeftOut {
            path: String::from_utf8_lossy(e.path).into_owned(),
            size: e.stat.size,
            reason: format!("larger than {what} ({size} > {cap_text}, {setting})"),
        });
        false
    });
    left_out
}

/// Phase 4: the reason the snapshot is skipped, if what it keeps is over a limit. A first
/// snapshot counts everything; a later one what it adds.
pub(super) fn over_limit(
    walked: &Scan<'_>,
    baseline: &Baseline<'_>,
    limits: &SnapshotLimits,
    plan: &ReadPlan,
) -> Option<String> {
    match baseline {
        Baseline::PreRewind => None,
        Baseline::First => limit_reason(plan.files, limits.first_max_files, plan.bytes, limits.first_max_bytes, ""),
        Baseline::Cache(_) | Baseline::Tree(_) => {
            let (new_files, new_bytes) = plan
                .to_read
                .iter()
                .map(|&i| walked.get(i))
                .filter(|e| baseline.adds(e))
                .fold((0u64, 0u64), |(n, b), e| (n + 1, b + e.stat.size));
            limit_reason(new_files, limits.later_max_files, new_bytes, limits.later_max_bytes, "new or changed ")
        }
    }
}

pub(super) fn limit_reason(files: u64, max_files: u64, bytes: u64, max_bytes: u64, what: &str) -> Option<String> {
    if files > max_files {
        Some(format!("too many {what}files ({files} > {max_files})"))
    } else if bytes > max_bytes {
        Some(format!(
            "{what}files exceed {} ({} > {})",
            format_size(max_bytes),
            format_size(bytes),
            format_size(max_bytes)
        ))
    } else {
        None
    }
}
