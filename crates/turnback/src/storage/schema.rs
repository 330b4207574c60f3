//! Every table of the store, in one list: its name, the module that owns it, whether its
//! values are sealed records and whether they may be large.
//!
//! Invariants:
//! - A table is read and written only by its owner (the file or folder named by `owner`);
//!   every other module asks the owner. Modules name tables as `schema::NAME`, so a test
//!   can check each use against this list.
//! - The values of a `sealed` table are records sealed by [`Store::seal_record`]
//!   (`crate::storage::store::Store::seal_record`): key rotation re-seals exactly these, and
//!   `verify --deep` opens them.
//! - A `digested` table's rows (keys and values) are authenticated by keyed digests per
//!   session and per table, kept in the transaction that writes the rows
//!   (`storage/digest.rs`, the only place that writes them), so `verify` sees rows deleted,
//!   added, changed or moved even when nothing is left dangling.
//! - A `derived` table's rows are rebuilt from the workspace when lost or damaged.
//! - A `large` table's values may be big (content, stat caches, history): the SQLite
//!   backend keeps them in a rowid table of their own.

/// A namespace: the name of one table of the store.
pub(crate) type Ns = &'static str;

/// One table of the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Table {
    /// Its name (the namespace of its keys).
    pub name: Ns,
    /// The source path (under `src/`) of the module that owns it: a file, or a folder
    /// whose files share it.
    pub owner: &'static str,
    /// Its values are sealed records.
    pub sealed: bool,
    /// Its values may be large.
    pub large: bool,
    /// Its rows are authenticated by keyed digests ([`digest`](crate::storage::digest)):
    /// written only through `digest::put` and `digest::delete`.
    pub digested: bool,
    /// Its rows are derived from the workspace and rebuilt when lost or damaged (no
    /// backup is needed for them).
    pub derived: bool,
}

macro_rules! tables {
    ($($(#[$doc:meta])* $ident:ident = $name:literal in $owner:literal $(, $flag:ident)*;)*) => {
        $( $(#[$doc])* pub(crate) const $ident: Ns = $name; )*
        /// Every table, in the order key rotation and `verify` visit them.
        pub(crate) const TABLES: &[Table] = &[
            $( Table { name: $name, owner: $owner, sealed: tables!(@has sealed $($flag)*), large: tables!(@has large $($flag)*), digested: tables!(@has digested $($flag)*), derived: tables!(@has derived $($flag)*) }, )*
        ];
    };
    (@has sealed sealed $($rest:ident)*) => { true };
    (@has large large $($rest:ident)*) => { true };
    (@has digested digested $($rest:ident)*) => { true };
    (@has derived derived $($rest:ident)*) => { true };
    (@has $want:ident $other:ident $($rest:ident)*) => { tables!(@has $want $($rest)*) };
    (@has $want:ident) => { false };
}

tables! {
    /// The master-key check value and the current data-key version.
    META = "meta" in "storage/keys.rs";
    /// Wrapped data keys by version.
    KEYS = "keys" in "storage/keys.rs";
    /// Keyed digests of the digested tables, per group (session) and per table.
    INDEX_DIGESTS = "index-digests" in "storage/digest.rs";
    /// Content objects stored on their own (artifacts, trees, symlink targets).
    OBJECTS = "objects" in "storage/object.rs", large;
    /// Packed blocks of snapshot content.
    BLOCKS = "blocks" in "storage/pack.rs", large;
    /// Where each packed object lives.
    PACKED = "packed" in "storage/pack.rs";
    /// Artifact records (ids, sizes, states).
    ARTIFACTS = "artifacts" in "checkpoint/artifact.rs";
    /// Journal events per operation.
    JOURNAL = "journal" in "checkpoint/journal.rs";
    /// Operations dispatched and not finished.
    JOURNAL_OPEN = "journal-open" in "checkpoint/journal.rs";
    /// Checkpoint records.
    CHECKPOINTS = "checkpoints" in "checkpoint/", sealed;
    /// Checkpoints by session.
    CHECKPOINTS_BY_SESSION = "checkpoints-by-session" in "checkpoint/", digested;
    /// Checkpoints by operation id.
    CHECKPOINTS_BY_OPERATION = "checkpoints-by-operation" in "checkpoint/";
    /// Checkpoints not committed yet, with their owner process.
    CHECKPOINTS_PENDING = "checkpoints-pending" in "checkpoint/";
    /// Bytes retained checkpoint artifacts use.
    USAGE = "usage" in "checkpoint/";
    /// Snapshot records.
    SNAPSHOTS = "snapshots" in "snapshot/", sealed;
    /// Snapshots by session.
    SNAPSHOTS_BY_SESSION = "snapshots-by-session" in "snapshot/";
    /// Snapshots by turn and side.
    SNAPSHOTS_BY_TURN = "snapshots-by-turn" in "snapshot/";
    /// The newest snapshot of each workspace that holds a watcher's mark, whichever
    /// session took it: where a new session's first watched snapshot starts from.
    WATCHED_NEWEST = "watched-newest" in "snapshot/", derived;
    /// Per-session stat caches.
    STATCACHE = "statcache" in "snapshot/statcache/rows.rs", sealed, large, derived;
    /// Per-session deltas over the stat caches (what changed since each was written whole).
    STATCACHE_DELTA = "statcache-delta" in "snapshot/statcache/rows.rs", sealed, derived;
    /// The pieces of the whole stat caches, by session, generation and number (a whole
    /// cache's row holds only which pieces make it).
    STATCACHE_PIECES = "statcache-pieces" in "snapshot/pieces.rs", sealed, large, derived;
    /// Registered workspaces, by keyed lookup id of their path.
    WORKSPACES = "workspaces" in "session/workspace.rs", sealed;
    /// Session records.
    SESSIONS = "sessions" in "session/mod.rs", sealed;
    /// Sessions by workspace and creation time.
    WORKSPACE_SESSIONS = "workspace-sessions" in "session/mod.rs";
    /// Turn records.
    TURNS = "turns" in "session/turn.rs", sealed;
    /// Turns by session and index.
    TURNS_BY_SESSION = "turns-by-session" in "session/turn.rs", digested;
    /// Start snapshots being taken, with the owner process taking each.
    TURNS_TAKING_SNAPSHOT = "turns-taking-snapshot" in "session/turn.rs";
    /// History entries by session and sequence.
    HISTORY = "history" in "session/history.rs", sealed, large;
    /// History entries a rewind cut, by session and the rewind's checkpoint: given back
    /// when that checkpoint is rolled back (the rewind undone).
    HISTORY_CUT = "history-cut" in "session/history.rs", sealed, large;
    /// History totals per session.
    HISTORY_TOTALS = "history-totals" in "session/history.rs", sealed, digested;
    /// Turns imported from agents' transcripts, by session, source and the source's key.
    IMPORTED_TURNS = "imported-turns" in "session/import/", sealed;
    /// Pending user-authored resolutions of rollback conflicts.
    RESOLUTIONS = "resolutions" in "undo/rollback/", sealed;
    /// Configured remotes (bucket, prefix, endpoint, region; no credentials), by keyed id
    /// of their name.
    REMOTES = "remotes" in "remote/", sealed;
    /// Tool calls by the agent's own key (its tool-use id): seen, pending or done.
    EXTERNAL_OPERATIONS = "external-operations" in "api/calls.rs";
}

// The remotes table stays in the list without the `remote` feature: key rotation and
// `verify` visit a store a build with remotes wrote like any other.
#[cfg(not(feature = "remote"))]
const _: Ns = REMOTES;

/// Whether values of `ns` may be large.
pub(crate) fn is_large(ns: Ns) -> bool {
    TABLES.iter().any(|t| t.name == ns && t.large)
}

/// Whether rows of `ns` carry keyed digests (written only through `digest`).
pub(crate) fn is_digested(ns: Ns) -> bool {
    TABLES.iter().any(|t| t.name == ns && t.digested)
}

/// The sealed tables.
pub(crate) fn sealed() -> impl Iterator<Item = Ns> {
    TABLES.iter().filter(|t| t.sealed).map(|t| t.name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_flags_are_read() {
        let mut names: Vec<Ns> = TABLES.iter().map(|t| t.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), TABLES.len());
        assert!(is_large(OBJECTS) && is_large(STATCACHE) && !is_large(SESSIONS));
        assert!(sealed().any(|n| n == CHECKPOINTS) && !sealed().any(|n| n == JOURNAL));
    }
}
