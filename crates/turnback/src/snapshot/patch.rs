//! A tree patched where its files changed: the directories on the way from the root to
//! each change are made again, every other subtree is the old one, by id.
//!
//! Invariants:
//! - Each change says what the old tree held at its path ([`Leaf::was`]); if the old tree
//!   holds anything else there, the patch is refused and the caller builds the whole tree.
//! - The result is the tree a build from scratch would make of the same entries: nodes are
//!   encoded canonically, a directory left empty disappears from its parent (the root
//!   stays, empty), a file and a directory may take each other's place.

use std::collections::HashMap;

use crate::error::Result;
use crate::fs::relpath::{dir_of, name_of};
use crate::snapshot::edit::{Rebuild, Sealer, Trees, set};
use crate::snapshot::lookup::Lookup;
use crate::snapshot::tree::Node;
use crate::storage::content::ContentId;
use crate::storage::store::Store;

/// A file, symlink or nested repository that changed: what the old tree held at its path,
/// and what the new one holds (`None`: nothing, or a directory).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Leaf<'p> {
    pub path: &'p [u8],
    pub was: Option<Node>,
    pub now: Option<Node>,
}

/// A patched tree: its root, the old nodes of the directories made again, and the nodes
/// made for it.
pub(super) struct Patched {
    pub root: ContentId,
    pub replaced: Vec<ContentId>,
    pub trees: Trees,
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
    let mut sealer = Sealer::new(store, stored);
    let mut rebuild = Rebuild::of(by_dir.keys().copied());
    let mut replaced = Vec::new();
    for dir in rebuild.order() {
        let mut nodes: Vec<Node> = match old.dir(&old_root, dir)? {
            Some((id, nodes)) => {
                replaced.push(id);
                nodes.as_ref().clone()
            }
            None => Vec::new(),
        };
        rebuild.place_subdirs(dir, &mut nodes);
        for leaf in by_dir.get(dir).map(Vec::as_slice).unwrap_or_default() {
            set(&mut nodes, name_of(leaf.path), leaf.now.clone(), false);
        }
        rebuild.seal(&mut sealer, dir, nodes)?;
    }
    // Nothing rebuilt: nothing changed.
    let root = rebuild.root().unwrap_or(old_root);
    Ok(Some(Patched { root, replaced, trees: sealer.finish() }))
}
