//! The view of a snapshot: its counts, what it left out and why (not the watcher's mark
//! it was synced at, which only the next snapshot needs).

use serde::Serialize;

use crate::fs::walk::Skipped;
use crate::snapshot::{LeftOut, NestedRepo, SnapshotKind};

/// One snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Snapshot {
    /// Its id (UUID v7).
    pub snapshot_id: String,
    /// The session.
    pub session_id: String,
    /// The workspace.
    pub workspace_id: String,
    /// Why it was taken.
    pub kind: SnapshotKind,
    /// The root tree's id (none when skipped).
    pub root: Option<String>,
    /// When the walk began (RFC 3339).
    pub created_at: String,
    /// Files recorded.
    pub files: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Files that had to be read (new or changed since the previous snapshot).
    pub read_files: u64,
    /// Their bytes.
    pub read_bytes: u64,
    /// Bytes newly stored (encrypted), content and trees.
    pub stored_bytes: u64,
    /// Paths removed by the unconditional exclusions.
    pub excluded: u64,
    /// Nested repositories recorded as pointers.
    pub nested_repos: Vec<NestedRepo>,
    /// Paths left out with a reason (a nested repository without a commit, unreadable).
    pub skipped_paths: Vec<Skipped>,
    /// Files left out for their size (over `max-file-size`, or alone more than the
    /// snapshot may take); the limits count only what was kept.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub left_out: Vec<LeftOut>,
    /// Why the whole snapshot was skipped, if it was.
    pub skipped: Option<String>,
    /// Set when the session's stat cache did not verify: it was dropped (this once) and
    /// every file read in full.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stat_cache_dropped: Option<String>,
    /// Milliseconds it took.
    pub duration_ms: u64,
    /// Milliseconds the walk alone took (every entry stat-ed, no content read): what the
    /// next walk costs when little changed. 0 for a snapshot the watcher answered.
    pub walk_ms: u64,
    /// The turn it belongs to, if any.
    pub turn_id: Option<String>,
    /// Whether it was taken from the watcher's changes instead of a walk of the whole tree.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub watched: bool,
}

impl From<&crate::snapshot::SnapshotRecord> for Snapshot {
    fn from(r: &crate::snapshot::SnapshotRecord) -> Self {
        Snapshot {
            snapshot_id: r.snapshot_id.clone(),
            session_id: r.session_id.clone(),
            workspace_id: r.workspace_id.clone(),
            kind: r.kind,
            root: r.root.clone(),
            created_at: r.created_at.clone(),
            files: r.files,
            bytes: r.bytes,
            read_files: r.read_files,
            read_bytes: r.read_bytes,
            stored_bytes: r.stored_bytes,
            excluded: r.excluded,
            nested_repos: r.nested_repos.clone(),
            skipped_paths: r.skipped_paths.clone(),
            left_out: r.left_out.clone(),
            skipped: r.skipped.clone(),
            stat_cache_dropped: r.stat_cache_dropped.clone(),
            duration_ms: r.duration_ms,
            walk_ms: r.walk_ms,
            turn_id: r.turn_id.clone(),
            watched: r.watched,
        }
    }
}
