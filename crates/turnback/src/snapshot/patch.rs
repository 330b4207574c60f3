//! A tree patched where its files changed: the directories on the way from the root to
//! each change are made again, every other subtree is the old one, by id.
//!
//! Invariants:
//! - Each change says what the old tree held at its path ([`Leaf::was`]); if the old tree
//!   holds anything else there, the patch is refused and the caller builds the whole tree.
//! - The result is the tree a build from scratch would make of the same entries: nodes are
//!   encoded canonically, a directory left empty disappears from its parent (the root
//!   stays, empty), a file and a directory may take each other's place.

use std::collections::{HashMap, HashSet};

use crate::error::Result;
use crate::fs::relpath::{dir_of, name_of};
use crate::snapshot::lookup::Lookup;
use crate::snapshot::tree::{self, Node, NodeKind};
use crate::storage::content::{ContentClass, ContentId};
use crate::storage::object::{self, Sealed};
use crate::storage::store::Store;

/// A file, symlink or nested repository that changed: what the old tree held at its path,
/// and what the new one holds (`None`: nothing, or a directory).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Leaf<'p> {
    pub path: &'p [u8],
    pub was: Option<Node>,
    pub now: Option<Node>,
}

/// A patched tree: its root, the directory nodes made for it, the old nodes of the
/// directories made again, and the nodes to store.
pub(super) struct Patched {
    pub root: ContentId,
    pub made: Vec<ContentId>,
    pub replaced: Vec<ContentId>,
    pub pending: Vec<Sealed>,
}

/// Patches the tree at `old_root` with `leaves`; `None` if the old tree does not hold what
/// they say it held. `stored` tells a node id known to be in the store already.
pub(super) fn patch(
    store: &Store,
    old_root: ContentId,
    leaves: &[Leaf<'_>],
    stored: &dyn Fn(&ContentId) -> bool,
) -> Result<Option<Patched>> {
    let mut old = Lookup::new(store);
    let mut by_dir: HashMap<&[u8], Vec<&Leaf<'_>>> = HashMap::new();
    for leaf in leaves {
        if old.node(&old_root, leaf.path)? != leaf.was {
            return Ok(None);
        }
        by_dir.entry(dir_of(leaf.path)).or_default().push(leaf);
    }
    // Every directory holding a change, and every one above it, deepest first.
    let mut dirs: HashSet<&[u8]> = HashSet::new();
    for &dir in by_dir.keys() {
        let mut d = dir;
        while dirs.insert(d) && !d.is_empty() {
            d = dir_of(d);
        }
    }
    let mut order: Vec<&[u8]> = dirs.iter().copied().collect();
    order.sort_by(|a, b| depth(b).cmp(&depth(a)).then(a.cmp(b)));
    let mut children: HashMap<&[u8], Vec<&[u8]>> = HashMap::new();
    for &d in order.iter().filter(|d| !d.is_empty()) {
        children.entry(dir_of(d)).or_default().push(d);
    }

    let mut made: HashMap<&[u8], Option<ContentId>> = HashMap::new();
    let (mut ids, mut replaced, mut pending, mut seen) = (Vec::new(), Vec::new(), Vec::new(), HashSet::new());
    for &dir in &order {
        let mut nodes: Vec<Node> = match old.dir(&old_root, dir)? {
            Some((id, nodes)) => {
                replaced.push(id);
                nodes.as_ref().clone()
            }
            None => Vec::new(),
        };
        // A subdirectory made again replaces (or, left empty, removes) only a directory; a
        // file's change replaces (or removes) only what is not one: a file and a directory
        // trading places are each applied in either order.
        for &child in children.get(dir).map(Vec::as_slice).unwrap_or_default() {
            let now = made[child].map(|id| Node {
                name: name_of(child).to_vec(),
                mode: 0,
                size: 0,
                kind: NodeKind::Tree(id),
            });
            set(&mut nodes, name_of(child), now, true);
        }
        for leaf in by_dir.get(dir).map(Vec::as_slice).unwrap_or_default() {
            set(&mut nodes, name_of(leaf.path), leaf.now.clone(), false);
        }
        if nodes.is_empty() && !dir.is_empty() {
            made.insert(dir, None);
            continue;
        }
        let (id, sealed) = object::seal(store.keys(), &tree::encode(nodes), ContentClass::Tree, |id| {
            seen.contains(id) || stored(id) || object::exists(store.kv(), id).unwrap_or(false)
        })?;
        if seen.insert(id) {
            ids.push(id);
        }
        pending.extend(sealed);
        made.insert(dir, Some(id));
    }
    let root = match made.get(&b""[..]) {
        Some(Some(id)) => *id,
        _ => old_root, // nothing changed
    };
    Ok(Some(Patched { root, made: ids, replaced, pending }))
}

/// Puts `now` at `name` in `nodes` (sorted by name), or removes what is there — only a
/// directory if `directory`, only anything else if not.
fn set(nodes: &mut Vec<Node>, name: &[u8], now: Option<Node>, directory: bool) {
    let at = nodes.binary_search_by(|n| n.name.as_slice().cmp(name));
    match (at, now) {
        (Ok(i), Some(node)) => nodes[i] = node,
        (Err(i), Some(node)) => nodes.insert(i, node),
        (Ok(i), None) if matches!(nodes[i].kind, NodeKind::Tree(_)) == directory => {
            nodes.remove(i);
        }
        _ => {}
    }
}

fn depth(path: &[u8]) -> usize {
    if path.is_empty() { 0 } else { 1 + path.iter().filter(|c| **c == b'/').count() }
}
