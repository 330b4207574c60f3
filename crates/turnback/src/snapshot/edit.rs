//! The tree editor: the one place snapshot trees are made, whether built whole from a
//! walk ([`Stream`]) or rebuilt where they changed ([`Rebuild`]: the patch of a cached tree
//! and the watched snapshot).
//!
//! Invariants:
//! - Every directory node is encoded canonically ([`tree::encode`]) and sealed by a
//!   [`Sealer`], once per snapshot: a node sealed before in the same snapshot, one its
//!   caller knows is stored, or one the store holds is not sealed again.
//! - Sealed nodes (and symlink targets) are held for the snapshot's commit up to
//!   [`TREES_STORED_FROM`] bytes; past it they are stored ahead in their own transaction.
//!   Until the snapshot commits they are objects nothing names, which the shared objects
//!   lock (held by every snapshot) keeps from `gc`, and which `gc` removes after a crash.
//! - A directory left with no entries disappears from its parent; the root stays, empty.
//! - A rebuild makes again only the directories it is given and every one above them,
//!   deepest first, so each subdirectory is made before its parent; every other subtree is
//!   kept by its id. Its result is the tree a whole build of the same entries makes.

use std::collections::{HashMap, HashSet};

use crate::error::Result;
use crate::fs::relpath::{depth, dir_of, is_within, name_of};
use crate::snapshot::tree::{self, Node, NodeKind};
use crate::storage::content::{ContentClass, ContentId};
use crate::storage::object::{self, Sealed};
use crate::storage::store::Store;

/// Sealed tree nodes held for the commit up to this many bytes; past it they are stored
/// ahead, in their own transaction (small in tests, so that every larger test tree goes
/// that way).
const TREES_STORED_FROM: usize = if cfg!(test) { 64 * 1024 } else { 8 << 20 };

/// Seals a snapshot's directory nodes and symlink targets, and holds them for its commit.
pub(super) struct Sealer<'s> {
    store: &'s Store,
    /// Node ids the caller knows are stored (a stat cache's), so unchanged directories
    /// cost no store lookup.
    known: &'s dyn Fn(&ContentId) -> bool,
    /// Node ids sealed (or found stored) in this snapshot, once each, in order.
    made: Vec<ContentId>,
    seen: HashSet<ContentId>,
    pending: Vec<Sealed>,
    pending_bytes: usize,
    /// Bytes stored ahead of the commit.
    stored: u64,
}

/// What a [`Sealer`] leaves for the commit.
pub(super) struct Trees {
    /// The node ids of the snapshot's tree made in it, once each, in the order made.
    pub made: Vec<ContentId>,
    /// What is still to store, in the snapshot's transaction.
    pub pending: Vec<Sealed>,
    /// Bytes already stored ahead of it.
    pub stored: u64,
}

impl<'s> Sealer<'s> {
    /// A sealer for one snapshot; `known` tells a node id the caller knows is stored.
    pub(super) fn new(store: &'s Store, known: &'s dyn Fn(&ContentId) -> bool) -> Self {
        Sealer {
            store,
            known,
            made: Vec::new(),
            seen: HashSet::new(),
            pending: Vec::new(),
            pending_bytes: 0,
            stored: 0,
        }
    }

    /// Seals a directory of `nodes` (in any order) and gives its id.
    pub(super) fn dir(&mut self, nodes: Vec<Node>) -> Result<ContentId> {
        let (store, known, seen) = (self.store, self.known, &self.seen);
        let (id, sealed) = object::seal(store.keys(), &tree::encode(nodes), ContentClass::Tree, |id| {
            seen.contains(id) || known(id) || object::exists(store.kv(), id).unwrap_or(false)
        })?;
        if self.seen.insert(id) {
            self.made.push(id);
        }
        self.hold(sealed)?;
        Ok(id)
    }

    /// The node of a symlink named `name` to `target`, its target sealed.
    pub(super) fn symlink(&mut self, name: Vec<u8>, mode: u32, target: &[u8]) -> Result<Node> {
        let (id, sealed) = object::seal(self.store.keys(), target, ContentClass::SymlinkTarget, |_| false)?;
        self.hold(sealed)?;
        Ok(Node { name, mode, size: 0, kind: NodeKind::Symlink(id) })
    }

    /// Keeps `sealed` to store, storing ahead once enough is held.
    fn hold(&mut self, sealed: Option<Sealed>) -> Result<()> {
        self.pending_bytes += sealed.as_ref().map_or(0, |s| s.value.len());
        self.pending.extend(sealed);
        if self.pending_bytes < TREES_STORED_FROM {
            return Ok(());
        }
        let mut txn = self.store.kv().begin()?;
        self.stored += object::store_all(&mut *txn, &self.pending)?;
        txn.commit()?;
        self.pending.clear();
        self.pending_bytes = 0;
        Ok(())
    }

    /// What is left for the commit.
    pub(super) fn finish(self) -> Trees {
        Trees { made: self.made, pending: self.pending, stored: self.stored }
    }
}

/// Builds a whole tree bottom-up from entries given in component order: each directory is
/// sealed as soon as an entry outside it comes.
#[derive(Default)]
pub(super) struct Stream {
    /// Open directories from the root down: (path, entries so far).
    open: Vec<(Vec<u8>, Vec<Node>)>,
}

impl Stream {
    /// Adds `node` to directory `dir` (after every entry before it in component order).
    pub(super) fn add(&mut self, sealer: &mut Sealer<'_>, dir: &[u8], node: Node) -> Result<()> {
        if self.open.is_empty() {
            self.open.push((Vec::new(), Vec::new()));
        }
        // Close the directories `dir` is not in.
        while self.open.len() > 1 && !is_within(dir, &self.open.last().expect("non-empty").0) {
            self.close(sealer)?;
        }
        // Open those between the innermost open one and `dir`.
        let innermost = &self.open.last().expect("non-empty").0;
        let rest = if innermost.is_empty() { dir } else { &dir[(innermost.len() + 1).min(dir.len())..] };
        if !rest.is_empty() {
            let mut path = innermost.clone();
            for name in rest.split(|c| *c == b'/') {
                if !path.is_empty() {
                    path.push(b'/');
                }
                path.extend_from_slice(name);
                self.open.push((path.clone(), Vec::new()));
            }
        }
        self.open.last_mut().expect("non-empty").1.push(node);
        Ok(())
    }

    fn close(&mut self, sealer: &mut Sealer<'_>) -> Result<()> {
        let (path, nodes) = self.open.pop().expect("non-empty");
        let id = sealer.dir(nodes)?;
        let parent = &mut self.open.last_mut().expect("a parent").1;
        parent.push(Node { name: name_of(&path).to_vec(), mode: 0, size: 0, kind: NodeKind::Tree(id) });
        Ok(())
    }

    /// Seals every directory still open and gives the root's id.
    pub(super) fn finish(mut self, sealer: &mut Sealer<'_>) -> Result<ContentId> {
        while self.open.len() > 1 {
            self.close(sealer)?;
        }
        let (_, nodes) = self.open.pop().unwrap_or_default();
        sealer.dir(nodes)
    }
}

/// Rebuilds some directories of a tree, and every one above them, bottom-up. Its caller
/// walks [`order`](Rebuild::order), gives each directory's entries but its rebuilt
/// subdirectories, has those [`placed`](Rebuild::place_subdirs) and [`seals`](Rebuild::seal)
/// the directory; then the new [`root`](Rebuild::root).
pub(super) struct Rebuild<'p> {
    /// Deepest first (then by path), the root last.
    order: Vec<&'p [u8]>,
    /// The rebuilt subdirectories of each rebuilt directory.
    subdirs: HashMap<&'p [u8], Vec<&'p [u8]>>,
    /// Each rebuilt directory's node (`None`: it came out empty, and is gone).
    made: HashMap<&'p [u8], Option<ContentId>>,
}

impl<'p> Rebuild<'p> {
    /// The rebuild of `dirs` and every directory above them (none if `dirs` is empty).
    pub(super) fn of(dirs: impl IntoIterator<Item = &'p [u8]>) -> Self {
        let mut all: HashSet<&'p [u8]> = HashSet::new();
        for mut dir in dirs {
            while all.insert(dir) && !dir.is_empty() {
                dir = dir_of(dir);
            }
        }
        let mut order: Vec<&'p [u8]> = all.into_iter().collect();
        order.sort_by(|a, b| depth(b).cmp(&depth(a)).then(a.cmp(b)));
        let mut subdirs: HashMap<&'p [u8], Vec<&'p [u8]>> = HashMap::new();
        for &dir in order.iter().filter(|d| !d.is_empty()) {
            subdirs.entry(dir_of(dir)).or_default().push(dir);
        }
        Rebuild { order, subdirs, made: HashMap::new() }
    }

    /// The directories to rebuild, each after every one below it.
    pub(super) fn order(&self) -> Vec<&'p [u8]> {
        self.order.clone()
    }

    /// Puts each rebuilt subdirectory of `dir` in `nodes` in its place (and sorts them by
    /// name): over a directory of its name or as a new entry, or, come out empty, removing
    /// only a directory of its name (a file taking a directory's place stays).
    pub(super) fn place_subdirs(&self, dir: &[u8], nodes: &mut Vec<Node>) {
        if !nodes.is_sorted_by(|a, b| a.name < b.name) {
            nodes.sort_by(|a, b| a.name.cmp(&b.name));
        }
        for &sub in self.subdirs.get(dir).map(Vec::as_slice).unwrap_or_default() {
            let made = self.made.get(sub).copied().flatten();
            let now = made.map(|id| Node { name: name_of(sub).to_vec(), mode: 0, size: 0, kind: NodeKind::Tree(id) });
            set(nodes, name_of(sub), now, true);
        }
    }

    /// Seals `dir` with `nodes` (empty: it is gone, unless it is the root).
    pub(super) fn seal(&mut self, sealer: &mut Sealer<'_>, dir: &'p [u8], nodes: Vec<Node>) -> Result<()> {
        let id = if nodes.is_empty() && !dir.is_empty() { None } else { Some(sealer.dir(nodes)?) };
        self.made.insert(dir, id);
        Ok(())
    }

    /// The rebuilt root, once sealed (`None`: nothing was rebuilt).
    pub(super) fn root(&self) -> Option<ContentId> {
        self.made.get(&b""[..]).copied().flatten()
    }
}

/// Puts `now` at `name` in `nodes` (sorted by name), or removes what is there — only a
/// directory if `directory`, only anything else if not: a file and a directory trading
/// places are each applied in either order.
pub(super) fn set(nodes: &mut Vec<Node>, name: &[u8], now: Option<Node>, directory: bool) {
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
