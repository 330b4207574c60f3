//! Phase 6 of taking a snapshot: its tree — the one the stat cache's shape names, that
//! tree patched where files changed, or built whole ([`edit`](crate::snapshot::edit)) —
//! and what it writes of the stat cache (nothing, a delta, or the whole cache).
//!
//! Invariants: one decision ([`how_to_build`]) chooses; a patch that does not add up, or
//! that would make a delta too large, falls back to the whole build; the cache written
//! describes exactly the tree built, and is not rewritten when it still holds.

use std::collections::HashSet;

use crate::error::Result;
use crate::fs::relpath::{dir_of, name_of};
use crate::fs::walk::{self, Kind};
use crate::snapshot::NestedRepo;
use crate::snapshot::edit::{Sealer, Stream};
use crate::snapshot::patch::{self, Leaf};
use crate::snapshot::plan::{Known, ReadPlan};
use crate::snapshot::scan::{Scan, Seen};
use crate::snapshot::statcache::{self, Cached, Shape};
use crate::snapshot::tree::{Node, NodeKind};
use crate::storage::content::ContentId;
use crate::storage::object::Sealed;
use crate::storage::store::Store;

/// What phase 6 built: the root, the nested repositories, the tree nodes and symlink
/// targets to store, and what to write of the stat cache (`None`: the old one still holds).
pub(super) struct Built {
    pub(super) root: ContentId,
    pub(super) nested: Vec<NestedRepo>,
    pub(super) pending: Vec<Sealed>,
    /// Bytes of its nodes already stored, ahead of the commit.
    pub(super) stored: u64,
    pub(super) cache: Option<statcache::Write>,
}

/// Phase 6: the snapshot's tree and what it writes of the stat cache, as
/// [`how_to_build`] decides (a patch that does not add up is built whole).
pub(super) fn build(
    store: &Store,
    walked: &Scan<'_>,
    plan: &ReadPlan,
    session_id: &str,
    taken_at_ns: i128,
) -> Result<Built> {
    let unchanged = cache_still_holds(store, walked, plan, taken_at_ns)?;
    // A shape goes with the walk's files only if every file's node was made from the stat
    // cached for it (a file that changed while it was read has the walk's size and mode in
    // its node, the read's in the cache): then the digest of its other entries, asked by
    // the decision and by a whole build, is taken once.
    let others = plan.read_as_walked().then(|| others_digest(walked));
    let patched = match how_to_build(store, walked, plan, others, unchanged)? {
        // Every file as cached and the same other entries: the tree is the one the cache's
        // shape names, stored (a root of gc) and not built again.
        Build::Same(shape) => Some(Built {
            root: shape.root,
            nested: nested_of(walked.iter()),
            pending: Vec::new(),
            stored: 0,
            cache: None,
        }),
        Build::Patch(shape, changes) => patch_tree(store, walked, shape, &changes, session_id, taken_at_ns)?,
        Build::Whole => None,
    };
    match patched {
        Some(built) => Ok(built),
        None => build_trees(store, walked, plan, CacheUpdate { unchanged, others, taken_at_ns }, session_id),
    }
}

/// How phase 6 makes the snapshot's tree and what it writes of the stat cache.
enum Build<'w> {
    /// The tree the cache's shape names; the cache still holds.
    Same(Shape),
    /// The shape's tree patched where files changed; a delta over the cache.
    Patch(Shape, Changes<'w>),
    /// Every node built; the whole cache written, unless it still holds.
    Whole,
}

/// The one decision of phase 6: the shape's tree, as it is or patched, when the walk's
/// files were read as walked and its other entries are the shape's (`others`, their
/// digest, is given only when the files were read as walked); patched only while the
/// cache's delta stays small ([`statcache::delta_fits`]) and the cache is of this layout.
/// Everything else is built whole.
///
/// # Errors
/// The cache's, asked for the content ids of what changed.
fn how_to_build<'w>(
    store: &Store,
    walked: &'w Scan<'w>,
    plan: &ReadPlan,
    others: Option<[u8; 32]>,
    unchanged: bool,
) -> Result<Build<'w>> {
    let cache = walked.cache();
    let Some(shape) = cache.shape.filter(|s| others == Some(s.others)) else {
        return Ok(Build::Whole);
    };
    if unchanged {
        return Ok(Build::Same(shape));
    }
    Ok(match changes(store, walked, plan)? {
        Some(changes)
            if statcache::delta_fits(changes.cache.len(), cache.delta.tree_ids.len(), cache.entries.len()) =>
        {
            Build::Patch(shape, changes)
        }
        _ => Build::Whole,
    })
}

/// What a walk changed against the stat cache it was matched with.
struct Changes<'w> {
    /// The cache's new delta, in component order: every entry the old delta gave or removed
    /// that still differs from the whole cache, and every file this walk found changed,
    /// new, gone, or read again.
    cache: Vec<(&'w [u8], Option<Cached>)>,
    /// Every file whose node changed, with its old and new node.
    leaves: Vec<Leaf<'w>>,
}

/// What a walk changed against its cache, entry by entry in walk order; each is resolved
/// once the cache's ids it needs are read ([`changes`]).
enum Change<'w> {
    /// Cache entry `c`'s file is gone.
    Gone(usize),
    /// The file at `path` was read: its new cache entry and node, and its old cache entry
    /// if it had one.
    Read { path: &'w [u8], now: Cached, node: Node, was: Option<usize> },
    /// Cache entry `c`, given by the old delta and vouched for by it now: carried into the
    /// new one.
    Carried(usize),
}

impl Change<'_> {
    /// The cache entry whose content id it needs.
    fn cache_entry(&self) -> Option<usize> {
        match self {
            Change::Gone(c) | Change::Carried(c) => Some(*c),
            Change::Read { was, .. } => *was,
        }
    }
}

/// Matches the walk's files (with the ids the plan has for them) with the cache's entries;
/// `None` once the changes are more than a delta may hold, at the latest one entry after
/// (the whole cache is written then, and a change of a large tree's every file is not
/// listed first). The cache's content ids are asked only of the entries that changed.
///
/// # Errors
/// The cache's, asked for those ids ([`StatCache::ids_of`](crate::snapshot::statcache::StatCache::ids_of)).
fn changes<'w>(store: &Store, walked: &'w Scan<'w>, plan: &ReadPlan) -> Result<Option<Changes<'w>>> {
    let cache = walked.cache();
    let most = statcache::delta_max_entries(cache.entries.len());
    // One entry of the new delta each.
    let mut found: Vec<Change<'w>> = Vec::new();
    // Cache entries below `next` are matched or gone (both lists are in component order).
    let mut next = 0;
    for (i, e) in walked.iter().enumerate() {
        let cached = e.cached;
        if found.len() + cached.map_or(0, |c| c.saturating_sub(next)) > most {
            return Ok(None);
        }
        if let Some(c) = cached {
            found.extend((next..c).map(Change::Gone));
            next = c + 1;
        }
        match (plan.known(i).filter(|_| *e.kind == Kind::File), cached) {
            // Not a file now, or not read: whatever the cache held there is gone.
            (None, _) => found.extend(cached.map(Change::Gone)),
            // Vouched for by its cache entry, whose stat it has: the same node. An entry
            // the old delta gave is carried into the new one.
            (Some(Known::Cached(c)), _) => found.extend(Some(Change::Carried(c)).filter(|_| cache.given(c))),
            (Some(Known::Read(id)), was) => {
                let (now, node) = (Cached { stat: plan.stat_of(i, &e), id }, node(e.path, &e.stat, id));
                found.push(Change::Read { path: e.path, now, node, was });
            }
        }
    }
    if found.len() + cache.entries.len().saturating_sub(next) > most {
        return Ok(None);
    }
    found.extend((next..cache.entries.len()).map(Change::Gone));
    // One id for each change that names a cache entry, in order ([`StatCache::ids_of`](crate::snapshot::statcache::StatCache::ids_of)).
    let mut ids = cache.ids_of(store, found.iter().filter_map(Change::cache_entry))?.into_iter();
    let mut old = |c: usize| {
        let id = ids.next().expect("one id per entry asked");
        (id, node(cache.entries.path(c), &cache.entries.stat(c), id))
    };
    let mut out = Changes { cache: Vec::with_capacity(found.len()), leaves: Vec::new() };
    for change in found {
        match change {
            Change::Gone(c) => {
                let path = cache.entries.path(c);
                out.cache.push((path, None));
                out.leaves.push(Leaf { path, was: Some(old(c).1), now: None });
            }
            Change::Read { path, now, node, was } => {
                out.cache.push((path, Some(now)));
                let was = was.map(|c| old(c).1);
                if was.as_ref() != Some(&node) {
                    out.leaves.push(Leaf { path, was, now: Some(node) });
                }
            }
            Change::Carried(c) => {
                let stat = cache.entries.stat(c);
                out.cache.push((cache.entries.path(c), Some(Cached { stat, id: old(c).0 })));
            }
        }
    }
    // What the old delta removed from the whole cache and the walk did not find again.
    for path in &cache.delta.removed {
        let found = walked.position(path).is_some_and(|i| *walked.get(i).kind == Kind::File && plan.known(i).is_some());
        if !found {
            out.cache.push((path, None));
        }
    }
    out.cache.sort_by(|a, b| walk::component_order(a.0, b.0));
    Ok(Some(out))
}

/// A file's node in a tree: its name, mode, size and content.
fn node(path: &[u8], stat: &walk::Stat, id: ContentId) -> Node {
    Node { name: name_of(path).to_vec(), mode: stat.mode, size: stat.size, kind: NodeKind::File(id) }
}

/// Phase 6, patched: the shape's tree with the walk's changes, and a delta over the stat
/// cache; `None` if the tree in the store is not what the cache says (then built whole).
fn patch_tree(
    store: &Store,
    walked: &Scan<'_>,
    shape: Shape,
    changes: &Changes<'_>,
    session_id: &str,
    taken_at_ns: i128,
) -> Result<Option<Built>> {
    let cache = walked.cache();
    let Some(patched) = patch::patch(store, shape.root, &changes.leaves, &|id| cache.names_tree(id))? else {
        return Ok(None);
    };
    // The nodes made since the whole cache that the new tree still has (those of the
    // directories made again now go: a node named here is kept from `gc`), and those made
    // now. Any node of the new tree is kept through its root, which the delta names.
    let replaced: HashSet<&ContentId> = patched.replaced.iter().collect();
    let whole: HashSet<&ContentId> = cache.tree_ids.iter().collect();
    let mut tree_ids: Vec<ContentId> =
        cache.delta.tree_ids.iter().filter(|id| !replaced.contains(id)).copied().collect();
    let mut listed: HashSet<ContentId> = tree_ids.iter().copied().collect();
    tree_ids.extend(patched.trees.made.iter().filter(|id| !whole.contains(id) && listed.insert(**id)));
    // A patch that made more nodes than a delta may name: the whole tree and cache instead.
    if !statcache::delta_fits(changes.cache.len(), tree_ids.len(), cache.entries.len()) {
        return Ok(None);
    }
    let shape = Shape { root: patched.root, others: shape.others };
    let write =
        statcache::seal_delta(store, session_id, cache.generation, taken_at_ns, &changes.cache, &tree_ids, shape)?;
    Ok(Some(Built {
        root: patched.root,
        nested: nested_of(walked.iter()),
        pending: patched.trees.pending,
        stored: patched.trees.stored,
        cache: Some(write),
    }))
}

/// What phase 6 knows for the stat cache: whether the old one still holds
/// ([`cache_still_holds`]), the digest of the walk's other entries if a shape goes with its
/// files, and when this snapshot's walk began. (The directory nodes of the snapshot the old
/// one describes it asks the cache itself: [`StatCache::names_tree`](crate::snapshot::statcache::StatCache::names_tree).)
struct CacheUpdate {
    unchanged: bool,
    others: Option<[u8; 32]>,
    taken_at_ns: i128,
}

/// Phase 6: builds the trees bottom-up, and stores the new stat cache's pieces unless the
/// old one still describes this snapshot.
fn build_trees(
    store: &Store,
    walked: &Scan<'_>,
    plan: &ReadPlan,
    cache: CacheUpdate,
    session_id: &str,
) -> Result<Built> {
    let previous = walked.cache();
    let known = |id: &ContentId| previous.names_tree(id);
    let mut sealer = Sealer::new(store, &known);
    let mut stream = Stream::default();
    // Every file the cache vouches for needs its id here (none in a first snapshot).
    let cache_ids = if plan.vouches() { previous.all_ids(store)? } else { Vec::new() };
    for (i, e) in walked.iter().enumerate() {
        let (dir, name) = (dir_of(e.path), name_of(e.path).to_vec());
        let node = match e.kind {
            Kind::File => {
                let Some(id) = plan.id_in(i, &cache_ids) else { continue };
                Node { name, mode: e.stat.mode, size: e.stat.size, kind: NodeKind::File(id) }
            }
            Kind::Symlink(target) => sealer.symlink(name, e.stat.mode, target)?,
            Kind::Gitlink(commit) => Node { name, mode: 0, size: 0, kind: NodeKind::Gitlink(commit.clone()) },
        };
        stream.add(&mut sealer, dir, node)?;
    }
    let root = stream.finish(&mut sealer)?;
    let trees = sealer.finish();
    let unchanged_cache = cache.unchanged && trees.made.iter().all(|id| previous.names_tree(id));
    let cache = if unchanged_cache {
        None
    } else {
        let files = || {
            walked.iter().enumerate().filter_map(|(i, e)| {
                let id = plan.id_in(i, &cache_ids).filter(|_| *e.kind == Kind::File)?;
                Some((e.path, Cached { stat: plan.stat_of(i, &e), id }))
            })
        };
        let shape = cache.others.map(|others| Shape { root, others });
        Some(statcache::store_whole(store, session_id, cache.taken_at_ns, &files, &trees.made, shape)?)
    };
    Ok(Built { root, nested: nested_of(walked.iter()), pending: trees.pending, stored: trees.stored, cache })
}

/// The digest of the walk's entries that are not files ([`statcache::others_digest`]).
fn others_digest(walked: &Scan<'_>) -> [u8; 32] {
    statcache::others_digest(walked.iter().map(|e| (e.path, e.kind, e.stat.mode)))
}

/// The nested repositories among what a walk found, with their commits.
pub(super) fn nested_of<'a>(found: impl Iterator<Item = Seen<'a>>) -> Vec<NestedRepo> {
    found
        .filter_map(|e| match e.kind {
            Kind::Gitlink(commit) => {
                Some(NestedRepo { path: String::from_utf8_lossy(e.path).into_owned(), commit: commit.clone() })
            }
            _ => None,
        })
        .collect()
}

/// At most this many racily clean files, read again and found the same, that a rewritten
/// cache would now settle are left to be read again instead of rewriting it for them.
const SETTLE_LATER_FILES: usize = 64;
/// … and at most this many bytes of them.
const SETTLE_LATER_BYTES: u64 = 4 << 20;

/// Whether the old stat cache still describes this snapshot: every file kept the stat and
/// id it holds. A racily clean file read again and found the same does not make it stale:
/// until its mtime is past the margin it could not be settled anyway, and after that a few
/// such files ([`SETTLE_LATER_FILES`], [`SETTLE_LATER_BYTES`]) are simply read again — an
/// agent's edit is snapshotted at once and again moments later, and reading the file it
/// edited costs far less than rewriting the cache of a large tree; the next rewrite for
/// any other reason settles them.
///
/// # Errors
/// The cache's, asked for the ids of the files read again with the stat it holds.
fn cache_still_holds(store: &Store, walked: &Scan<'_>, plan: &ReadPlan, taken_at_ns: i128) -> Result<bool> {
    let cache = walked.cache();
    if plan.files as usize != cache.entries.len() {
        return Ok(false);
    }
    let (mut settling, mut settling_bytes) = (0usize, 0u64);
    // Files read again with the cached stat: the cache still holds if their ids are its.
    let (mut again, mut read_ids) = (Vec::new(), Vec::new());
    for (i, e) in walked.iter().enumerate().filter(|(_, e)| *e.kind == Kind::File) {
        let stat = plan.stat_of(i, &e);
        let Some(c) = e.cached.filter(|&c| cache.entries.stat(c) == stat) else { return Ok(false) };
        match plan.known(i) {
            // Vouched for by this very entry ([`classify`]): its id is the entry's.
            Some(Known::Cached(_)) => {}
            Some(Known::Read(id)) => {
                again.push(c);
                read_ids.push(id);
            }
            _ => return Ok(false),
        }
        if plan.was_read(i) && statcache::settled(&stat, taken_at_ns) {
            settling += 1;
            settling_bytes += stat.size;
        }
    }
    if settling > SETTLE_LATER_FILES || settling_bytes > SETTLE_LATER_BYTES {
        return Ok(false);
    }
    Ok(cache.ids_of(store, again)? == read_ids)
}
