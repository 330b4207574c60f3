//! A watched snapshot: the session's previous tree, patched where the watcher saw changes,
//! in O(changes × depth) instead of a walk of the whole tree.
//!
//! Invariants:
//! - It is taken only when every one of these holds, else the full walk runs (and still
//!   records the watcher's new mark, so the next one can be watched): the watcher answered
//!   the sync with paths (same epoch, nothing lost since the previous mark); the session's
//!   latest record is the one that mark belongs to, was not skipped, left nothing out and
//!   skipped no path; `max-file-size` is what it was; it is not a pre-rewind snapshot and
//!   `--full` was not asked for; the workspace's `.git/info/exclude` and root ignore files
//!   did not change.
//! - Only the directories on the paths from the root to a changed path are listed, with the
//!   very walk a full snapshot uses ([`walk_scoped`]: same ignore files and exclusions); a
//!   changed directory, or one whose `.gitignore`/`.ignore` changed, is walked whole.
//! - What it reuses it checks: an unchanged file must still have the size and mode its old
//!   node has, an unchanged entry of a listed directory must still be there, an unchanged
//!   subdirectory must still be a directory. Anything that does not add up means a missed
//!   event: the full walk runs instead. Changed files are read again (no stat cache is
//!   loaded or written; see [`statcache`](crate::snapshot::statcache)).
//! - Totals are the previous record's plus what changed; a change over the later-snapshot
//!   limits, or a file over `max-file-size`, hands over to the full walk, which decides.

use std::collections::{HashMap, HashSet};

use crate::base::time::{format_ms, now_ms};
use crate::error::Result;
use crate::fs::relpath::{dir_of, join, name_of};
use crate::fs::walk::{Kind, Walk, component_order, walk_scoped};
use crate::snapshot::build::{Built, nested_of};
use crate::snapshot::edit::{Rebuild, Sealer, Trees};
use crate::snapshot::lookup::Lookup;
use crate::snapshot::plan::classify;
use crate::snapshot::prune::prune;
use crate::snapshot::read::read_and_pack;
use crate::snapshot::scan::{Scan, Seen};
use crate::snapshot::statcache::StatCache;
use crate::snapshot::take::commit;
use crate::snapshot::tree::{Node, NodeKind};
use crate::snapshot::{Hooks, NestedRepo, SnapshotKind, SnapshotRecord, Source, TakeOptions, newest};
use crate::storage::content::ContentId;
use crate::storage::schema;
use crate::storage::settings::WatchMode;
use crate::storage::store::Store;
use crate::watch::{self, Synced, WatchMark};

/// Syncs with the workspace's watcher (before anything is stat-ed): what changed since the
/// newer of the session's latest snapshot and the workspace's newest marked one (another
/// session's: a new session starts from it), if the watcher can say.
pub(super) fn sync(store: &Store, source: Source<'_>) -> Result<(Synced, Option<SnapshotRecord>)> {
    // `--full` still syncs: its mark lets the next snapshot be watched.
    if store.settings().snapshots.watch == WatchMode::Off {
        return Ok((Synced::None { why: "not watched".into() }, None));
    }
    let own = newest(store, source.session_id, |_| true)?;
    let previous = match workspace_newest(store, source.workspace_id, own.as_ref())? {
        Some(other) => Some(other),
        None => own,
    };
    let socket = match watch::socket_path(store.dir(), source.workspace_id) {
        Ok(s) => s,
        Err(e) => return Ok((Synced::None { why: e.message }, previous)),
    };
    let mark = previous.as_ref().and_then(|p| p.watch.as_ref());
    Ok((watch::sync(&socket, mark), previous))
}

/// The workspace's newest marked snapshot, if it is newer than `own` (the session's
/// latest) and still there: a tree as complete as any other of the workspace's, which the
/// same checks ([`usable`], then the patch's own) vouch for before it is patched.
fn workspace_newest(store: &Store, workspace_id: &str, own: Option<&SnapshotRecord>) -> Result<Option<SnapshotRecord>> {
    let Some(id) = store.kv().get(schema::WATCHED_NEWEST, workspace_id.as_bytes())? else { return Ok(None) };
    let id = String::from_utf8_lossy(&id).into_owned();
    // Snapshot ids are UUID v7: they sort by the time they were made.
    if own.is_some_and(|o| o.snapshot_id >= id) {
        return Ok(None);
    }
    match crate::snapshot::get(store, &id) {
        Ok(record) if record.workspace_id == workspace_id && record.watch.is_some() => Ok(Some(record)),
        Ok(_) => Ok(None),
        Err(e) if e.code == crate::error::ErrorCode::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// The mark a snapshot synced at `synced` records.
pub(super) fn mark(store: &Store, synced: &Synced) -> Option<WatchMark> {
    match synced {
        Synced::Changed { epoch, seq, .. } | Synced::Walk { epoch, seq, .. } => Some(WatchMark {
            epoch: epoch.clone(),
            seq: *seq,
            max_file_bytes: store.settings().snapshots.max_file_bytes,
        }),
        Synced::None { .. } => None,
    }
}

/// The changed paths, if a watched snapshot may be taken on top of `previous`.
pub(super) fn usable<'a>(
    store: &Store,
    synced: &'a Synced,
    previous: Option<&SnapshotRecord>,
    opts: &TakeOptions<'_>,
) -> Option<&'a [Vec<u8>]> {
    let Synced::Changed { epoch, paths, .. } = synced else { return None };
    let previous = previous?;
    let mark = previous.watch.as_ref()?;
    let ok = mark.epoch == *epoch
        && mark.max_file_bytes == store.settings().snapshots.max_file_bytes
        && previous.root.is_some()
        && previous.skipped.is_none()
        && previous.left_out.is_empty()
        && previous.skipped_paths.is_empty()
        && !opts.full
        && opts.kind != Some(SnapshotKind::PreRewind);
    ok.then_some(paths.as_slice())
}

/// Takes a watched snapshot if [`usable`] and the patch adds up; `None`: walk everything.
pub(super) fn take(
    store: &Store,
    source: Source<'_>,
    opts: &TakeOptions<'_>,
    hooks: &dyn Hooks,
    synced: &Synced,
    previous: Option<&SnapshotRecord>,
    started: std::time::Instant,
) -> Result<Option<SnapshotRecord>> {
    let (Some(dirty), Some(previous)) = (usable(store, synced, previous, opts), previous) else { return Ok(None) };
    // A nested repository whose `.git` is a file (a submodule, a linked worktree) keeps its
    // HEAD and refs elsewhere, where no watch sees them: its commit is read again each time.
    let elsewhere = previous
        .nested_repos
        .iter()
        .filter(|n| source.root.join(&n.path).join(".git").symlink_metadata().is_ok_and(|m| m.is_file()));
    let elsewhere: Vec<Vec<u8>> = elsewhere.map(|n| n.path.as_bytes().to_vec()).collect();
    // The watcher's paths are copied only when there is something to add to them.
    let dirty: std::borrow::Cow<'_, [Vec<u8>]> =
        if elsewhere.is_empty() { dirty.into() } else { [dirty, &elsewhere].concat().into() };
    let Some(patched) = patch(store, source, previous, &dirty, opts)? else { return Ok(None) };
    let mut record = SnapshotRecord {
        snapshot_id: uuid::Uuid::now_v7().to_string(),
        session_id: source.session_id.to_string(),
        workspace_id: source.workspace_id.to_string(),
        kind: opts.kind.unwrap_or(SnapshotKind::AdHoc),
        root: None,
        created_at: format_ms(now_ms()),
        files: patched.files,
        bytes: patched.bytes,
        read_files: patched.read_files,
        read_bytes: patched.read_bytes,
        stored_bytes: patched.stored_bytes,
        excluded: previous.excluded,
        nested_repos: Vec::new(),
        skipped_paths: Vec::new(),
        left_out: Vec::new(),
        skipped: None,
        stat_cache_dropped: None,
        duration_ms: started.elapsed().as_millis() as u64,
        walk_ms: 0,
        turn_id: opts.turn_id.map(str::to_string),
        watch: mark(store, synced),
        watched: true,
    };
    commit(store, &mut record, Some(patched.built), opts, hooks)?;
    prune(store, source.session_id, hooks)?;
    Ok(Some(record))
}

/// The patched tree, ready to commit: what it built, the record's new totals.
pub(super) struct Patched {
    pub built: Built,
    pub files: u64,
    pub bytes: u64,
    pub read_files: u64,
    pub read_bytes: u64,
    pub stored_bytes: u64,
}

/// Patches `previous`'s tree with what changed at `dirty`; `None` if anything does not add
/// up (the caller walks the whole tree instead). Phase by phase: walk the scope, sort its
/// files into reused and changed, read the changed ones, rebuild the listed directories.
pub(super) fn patch(
    store: &Store,
    source: Source<'_>,
    previous: &SnapshotRecord,
    dirty: &[Vec<u8>],
    opts: &TakeOptions<'_>,
) -> Result<Option<Patched>> {
    let Some(old_root) = previous.root.as_deref().and_then(ContentId::from_hex) else { return Ok(None) };
    let Some(scope) = Scope::of(dirty) else { return Ok(None) };
    let enter = |rel: &[u8]| scope.enters(rel);
    let own_temps = |rel: &[u8]| source.own_temp(store, rel);
    let walked = walk_scoped(source.root, store.protected_paths(), Some(&enter), &own_temps)?;
    if !walked.skipped.is_empty() {
        return Ok(None);
    }
    let mut edit = Edit { store, walked, scope, old: Lookup::new(store), old_root };
    let Some(mut files) = edit.sort_files()? else { return Ok(None) };
    let Some(read) = edit.read_changed(source, previous, &mut files, opts)? else { return Ok(None) };
    let Some(tree) = edit.rebuild(&files.ids, previous)? else { return Ok(None) };
    let nested = edit.nested(previous);
    Ok(Some(Patched {
        built: Built { root: tree.root, nested, pending: tree.trees.pending, stored: tree.trees.stored, cache: None },
        files: tree.files,
        bytes: tree.bytes,
        read_files: read.files,
        read_bytes: read.bytes,
        stored_bytes: read.stored,
    }))
}

/// A watched snapshot's edit of the previous tree: the partial walk, what changed, and the
/// previous tree to check it against.
struct Edit<'a> {
    store: &'a Store,
    walked: Walk,
    scope: Scope,
    old: Lookup<'a>,
    old_root: ContentId,
}

/// The walk's files: each one's content id once known (an unchanged one's from the old
/// tree, a changed one's once read), and the changed ones to read.
struct Files {
    ids: HashMap<usize, ContentId>,
    to_read: Vec<usize>,
}

/// What reading the changed files took.
struct Read {
    files: u64,
    bytes: u64,
    stored: u64,
}

/// The rebuilt tree and its totals.
struct Rebuilt {
    root: ContentId,
    trees: Trees,
    files: u64,
    bytes: u64,
}

impl Edit<'_> {
    /// Phase 1: every file of a listed directory is changed (to read) or unchanged, with
    /// the size and mode its old node has (reused); `None` on a change the watcher did not
    /// report, or a changed file over `max-file-size`.
    fn sort_files(&mut self) -> Result<Option<Files>> {
        let max_file = self.store.settings().snapshots.max_file_bytes;
        let mut files = Files { ids: HashMap::new(), to_read: Vec::new() };
        for (i, e) in self.walked.entries.iter().enumerate() {
            if e.kind != Kind::File {
                continue;
            }
            if self.scope.changed(&e.path) {
                if e.stat.size > max_file {
                    return Ok(None);
                }
                files.to_read.push(i);
                continue;
            }
            match self.old.entry(&self.old_root, &e.path)? {
                Some(Node { kind: NodeKind::File(id), mode, size, .. })
                    if mode == e.stat.mode && size == e.stat.size =>
                {
                    files.ids.insert(i, id);
                }
                _ => return Ok(None),
            }
        }
        Ok(Some(files))
    }

    /// Phase 2: reads the changed files (and packs what the store lacks), within the limits
    /// of a later snapshot, before reading and after; `None` if one is left out or skipped,
    /// or the change is over a limit (the full walk decides).
    fn read_changed(
        &mut self,
        source: Source<'_>,
        previous: &SnapshotRecord,
        files: &mut Files,
        opts: &TakeOptions<'_>,
    ) -> Result<Option<Read>> {
        let limits = self.store.settings().snapshots;
        let to_read_bytes: u64 = files.to_read.iter().map(|&i| self.walked.entries[i].stat.size).sum();
        if files.to_read.len() as u64 > limits.later_max_files || to_read_bytes > limits.later_max_bytes {
            return Ok(None);
        }
        let no_cache = StatCache::default();
        let entries = files.to_read.iter().map(|&i| self.walked.entries[i].clone()).collect();
        let reading = Scan::of_entries(entries, &no_cache);
        let mut plan = classify(&reading);
        let mut scratch = previous.clone();
        scratch.left_out.clear();
        scratch.skipped_paths.clear();
        let stored = read_and_pack(self.store, source.root, &reading, &mut plan, opts, &mut scratch)?;
        if !scratch.left_out.is_empty() || !scratch.skipped_paths.is_empty() {
            return Ok(None);
        }
        // What the change adds, against the limits of a later snapshot.
        let (mut new_files, mut new_bytes) = (0u64, 0u64);
        for (k, &i) in files.to_read.iter().enumerate() {
            let Some(id) = plan.read_id(k) else { return Ok(None) };
            files.ids.insert(i, id);
            let size = self.walked.entries[i].stat.size;
            let same = matches!(self.old.entry(&self.old_root, &self.walked.entries[i].path)?,
                Some(Node { kind: NodeKind::File(was), size: was_size, .. }) if was == id && was_size == size);
            if !same {
                new_files += 1;
                new_bytes += size;
            }
        }
        if new_files > limits.later_max_files || new_bytes > limits.later_max_bytes {
            return Ok(None);
        }
        Ok(Some(Read { files: reading.len() as u64, bytes: plan.read_bytes, stored }))
    }

    /// Phase 3: rebuilds the listed directories bottom-up from what the walk found in them
    /// and the old tree's unlisted subdirectories, and counts the new totals from the
    /// previous record's; `None` if something is gone or replaced without an event.
    fn rebuild(&mut self, ids: &HashMap<usize, ContentId>, previous: &SnapshotRecord) -> Result<Option<Rebuilt>> {
        let Edit { store, walked, scope, old, old_root } = self;
        let mut by_dir: HashMap<&[u8], Vec<usize>> = HashMap::new();
        for (i, e) in walked.entries.iter().enumerate() {
            by_dir.entry(dir_of(&e.path)).or_default().push(i);
        }
        let (listed, unlisted) = listed_and_unlisted(walked);
        let mut unlisted_in: HashMap<&[u8], Vec<&[u8]>> = HashMap::new();
        for &d in &unlisted {
            unlisted_in.entry(dir_of(d)).or_default().push(d);
        }
        let mut sealer = Sealer::new(store, &|_| false);
        let mut rebuild = Rebuild::of(listed.iter().copied());
        let (mut files, mut bytes) = (i128::from(previous.files), i128::from(previous.bytes));
        for dir in rebuild.order() {
            let mut nodes = Vec::new();
            for &i in by_dir.get(dir).map(Vec::as_slice).unwrap_or_default() {
                let e = &walked.entries[i];
                let name = name_of(&e.path).to_vec();
                nodes.push(match &e.kind {
                    Kind::File => {
                        files += 1;
                        bytes += i128::from(e.stat.size);
                        Node { name, mode: e.stat.mode, size: e.stat.size, kind: NodeKind::File(ids[&i]) }
                    }
                    Kind::Symlink(target) => sealer.symlink(name, e.stat.mode, target)?,
                    Kind::Gitlink(commit) => Node { name, mode: 0, size: 0, kind: NodeKind::Gitlink(commit.clone()) },
                });
            }
            for &child in unlisted_in.get(dir).map(Vec::as_slice).unwrap_or_default() {
                match old.entry(old_root, child)? {
                    Some(Node { kind: NodeKind::Tree(id), .. }) => {
                        nodes.push(Node { name: name_of(child).to_vec(), mode: 0, size: 0, kind: NodeKind::Tree(id) });
                    }
                    Some(_) => return Ok(None),
                    None => {}
                }
            }
            rebuild.place_subdirs(dir, &mut nodes);
            let Some((f, b)) = gone(old, old_root, scope, dir, &nodes, (&listed, &unlisted))? else { return Ok(None) };
            files -= f;
            bytes -= b;
            rebuild.seal(&mut sealer, dir, nodes)?;
        }
        let root = rebuild.root().expect("the root is rebuilt");
        Ok(Some(Rebuilt {
            root,
            trees: sealer.finish(),
            files: u64::try_from(files).unwrap_or(0),
            bytes: u64::try_from(bytes).unwrap_or(0),
        }))
    }

    /// Phase 4: the nested repositories: those in reused subtrees stay, the listed ones
    /// are as found.
    fn nested(&self, previous: &SnapshotRecord) -> Vec<NestedRepo> {
        let (listed, unlisted) = listed_and_unlisted(&self.walked);
        let mut nested: Vec<NestedRepo> = previous
            .nested_repos
            .iter()
            .filter(|n| reused_subtree(n.path.as_bytes(), &listed, &unlisted))
            .cloned()
            .collect();
        nested.extend(nested_of(self.walked.entries.iter().map(Seen::of)));
        nested.sort_by(|a, b| component_order(a.path.as_bytes(), b.path.as_bytes()));
        nested
    }
}

/// The files and bytes the old directory `dir` held that its rebuild (`now`) no longer
/// counts: its files, and its subdirectories gone or replaced (a listed one is counted
/// when rebuilt, an unlisted one kept is unchanged); `None` if one of them went without
/// the watcher saying so.
fn gone(
    old: &mut Lookup<'_>,
    old_root: &ContentId,
    scope: &Scope,
    dir: &[u8],
    now: &[Node],
    (listed, unlisted): (&HashSet<&[u8]>, &HashSet<&[u8]>),
) -> Result<Option<(i128, i128)>> {
    let Some((_, before)) = old.dir(old_root, dir)? else { return Ok(Some((0, 0))) };
    let now: HashSet<&[u8]> = now.iter().map(|n| n.name.as_slice()).collect();
    let (mut files, mut bytes) = (0i128, 0i128);
    for n in before.iter() {
        let path = join(dir, &n.name);
        if let NodeKind::File(_) = n.kind {
            files += 1;
            bytes += i128::from(n.size);
        }
        let NodeKind::Tree(sub) = n.kind else {
            if !now.contains(n.name.as_slice()) && !scope.changed(&path) {
                return Ok(None);
            }
            continue;
        };
        let kept = unlisted.contains(path.as_slice()) && now.contains(n.name.as_slice());
        if listed.contains(path.as_slice()) || kept {
            continue;
        }
        if !scope.enters(&path) {
            return Ok(None); // gone or replaced without an event
        }
        let (f, b) = old.totals(&sub)?;
        files += i128::from(f);
        bytes += i128::from(b);
    }
    Ok(Some((files, bytes)))
}

/// The directories the partial walk listed (the root among them), and those it met in them
/// without entering.
fn listed_and_unlisted(walked: &Walk) -> (HashSet<&[u8]>, HashSet<&[u8]>) {
    let listed = std::iter::once(&b""[..]).chain(walked.dirs.listed.iter().map(Vec::as_slice)).collect();
    (listed, walked.dirs.unlisted.iter().map(Vec::as_slice).collect())
}

/// Whether `path` lies in a subdirectory reused whole (under an unlisted directory whose
/// parent was listed).
fn reused_subtree(path: &[u8], listed: &HashSet<&[u8]>, unlisted: &HashSet<&[u8]>) -> bool {
    let mut dir = dir_of(path);
    loop {
        if unlisted.contains(dir) {
            return dir != path;
        }
        if listed.contains(dir) || dir.is_empty() {
            return false;
        }
        dir = dir_of(dir);
    }
}

/// Which directories the partial walk enters: those on the way to a changed path, and
/// everything under a changed path (a directory created, moved in, or whose ignore files
/// changed is walked whole).
struct Scope {
    changed: HashSet<Vec<u8>>,
    ancestors: HashSet<Vec<u8>>,
}

impl Scope {
    /// `None` when the change is one only a full walk handles: the workspace's own
    /// `.git/info/exclude`, or an ignore file at the root.
    fn of(dirty: &[Vec<u8>]) -> Option<Self> {
        let mut changed = HashSet::new();
        for p in dirty {
            if p.is_empty() || p == b".git" || p.starts_with(b".git/") {
                return None;
            }
            let n = name_of(p);
            if n == b".gitignore" || n == b".ignore" {
                if dir_of(p).is_empty() {
                    return None;
                }
                changed.insert(dir_of(p).to_vec());
            }
            changed.insert(p.clone());
        }
        let mut ancestors = HashSet::new();
        for p in &changed {
            let mut dir = dir_of(p);
            while !dir.is_empty() && ancestors.insert(dir.to_vec()) {
                dir = dir_of(dir);
            }
        }
        Some(Scope { changed, ancestors })
    }

    /// Whether `path` or a directory above it changed.
    fn changed(&self, path: &[u8]) -> bool {
        let mut p = path;
        loop {
            if self.changed.contains(p) {
                return true;
            }
            if p.is_empty() {
                return false;
            }
            p = dir_of(p);
            if p.is_empty() {
                return false;
            }
        }
    }

    fn enters(&self, dir: &[u8]) -> bool {
        self.ancestors.contains(dir) || self.changed(dir)
    }
}
