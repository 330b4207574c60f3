//! Reading snapshot trees: single paths ([`Lookup`]), whole trees ([`flatten`]), and every
//! object some snapshot keeps alive ([`live_objects`]).

use std::collections::{BTreeMap, HashSet};

use crate::error::{Error, Result};
use crate::snapshot::tree::{self, Node, NodeKind};
use crate::snapshot::{SnapshotRecord, all};
use crate::storage::content::{ContentClass, ContentId};
use crate::storage::store::Store;

/// Reads and verifies the tree node `id`.
pub(crate) fn read_tree(store: &Store, id: &ContentId) -> Result<Vec<Node>> {
    let (header, bytes) = store.read_object(id)?;
    if header.class != ContentClass::Tree {
        return Err(Error::corrupt("tree", "object is not a tree"));
    }
    tree::decode(&bytes)
}

/// Every object id some snapshot reaches (trees, file contents, symlink targets), and
/// every one a session's stat cache names (see [`statcache`](crate::snapshot::statcache)).
pub(crate) fn live_objects(store: &Store) -> Result<HashSet<ContentId>> {
    let mut roots: Vec<ContentId> =
        all(store)?.iter().filter_map(|r: &SnapshotRecord| r.root.as_deref().and_then(ContentId::from_hex)).collect();
    let (cached_files, cached_trees) = crate::snapshot::statcache::named_ids(store)?;
    roots.extend(cached_trees);
    let mut live: HashSet<ContentId> = cached_files.into_iter().collect();
    let mut stack = roots;
    let mut visited = HashSet::new();
    while let Some(id) = stack.pop() {
        if !visited.insert(id) {
            continue;
        }
        live.insert(id);
        for node in read_tree(store, &id)? {
            match node.kind {
                NodeKind::Tree(sub) => stack.push(sub),
                NodeKind::File(f) | NodeKind::Symlink(f) => {
                    live.insert(f);
                }
                NodeKind::Gitlink(_) => {}
            }
        }
    }
    Ok(live)
}

/// Looks single paths up in snapshot trees, decoding each directory node once however
/// many paths and snapshots share it (a rewind asks about the few paths that changed).
pub(crate) struct Lookup<'a> {
    store: &'a Store,
    trees: std::collections::HashMap<ContentId, std::rc::Rc<Vec<Node>>>,
}

impl<'a> Lookup<'a> {
    pub(crate) fn new(store: &'a Store) -> Self {
        Lookup { store, trees: Default::default() }
    }

    fn tree(&mut self, id: &ContentId) -> Result<std::rc::Rc<Vec<Node>>> {
        if let Some(t) = self.trees.get(id) {
            return Ok(std::rc::Rc::clone(t));
        }
        let nodes = std::rc::Rc::new(read_tree(self.store, id)?);
        self.trees.insert(*id, std::rc::Rc::clone(&nodes));
        Ok(nodes)
    }

    /// The node at `path` under `root`, as [`flatten`] would hold it: a file, symlink or
    /// nested repository, never a directory (`None` for a directory or nothing).
    pub(crate) fn node(&mut self, root: &ContentId, path: &[u8]) -> Result<Option<Node>> {
        Ok(self.entry(root, path)?.filter(|n| !matches!(n.kind, NodeKind::Tree(_))))
    }

    /// The entry at `path` under `root`, of any kind (a directory too), if there is one
    /// (`""`, the root itself, is no entry).
    pub(crate) fn entry(&mut self, root: &ContentId, path: &[u8]) -> Result<Option<Node>> {
        let mut dir = *root;
        let mut parts = path.split(|c| *c == b'/').peekable();
        while let Some(name) = parts.next() {
            let nodes = self.tree(&dir)?;
            let Ok(i) = nodes.binary_search_by(|n| n.name.as_slice().cmp(name)) else { return Ok(None) };
            match (&nodes[i].kind, parts.peek().is_some()) {
                (_, false) => return Ok(Some(nodes[i].clone())),
                (NodeKind::Tree(sub), true) => dir = *sub,
                (_, true) => return Ok(None),
            }
        }
        Ok(None)
    }

    /// The node id and entries of directory `path` under `root` (`""`: the root), if it is
    /// one there.
    pub(crate) fn dir(&mut self, root: &ContentId, path: &[u8]) -> Result<Option<(ContentId, std::rc::Rc<Vec<Node>>)>> {
        let mut dir = *root;
        if !path.is_empty() {
            for name in path.split(|c| *c == b'/') {
                let nodes = self.tree(&dir)?;
                let Ok(i) = nodes.binary_search_by(|n| n.name.as_slice().cmp(name)) else { return Ok(None) };
                let NodeKind::Tree(sub) = nodes[i].kind else { return Ok(None) };
                dir = sub;
            }
        }
        self.tree(&dir).map(|nodes| Some((dir, nodes)))
    }

    /// Files and their bytes under the subtree `id`.
    pub(crate) fn totals(&mut self, id: &ContentId) -> Result<(u64, u64)> {
        let (mut files, mut bytes) = (0, 0);
        let mut stack = vec![*id];
        while let Some(id) = stack.pop() {
            for n in self.tree(&id)?.iter() {
                match n.kind {
                    NodeKind::Tree(sub) => stack.push(sub),
                    NodeKind::File(_) => {
                        files += 1;
                        bytes += n.size;
                    }
                    NodeKind::Symlink(_) | NodeKind::Gitlink(_) => {}
                }
            }
        }
        Ok((files, bytes))
    }

    /// Whether some proper ancestor directory of `path` is a nested repository under `root`.
    pub(crate) fn under_gitlink(&mut self, root: &ContentId, path: &[u8]) -> Result<bool> {
        let mut at = 0;
        while let Some(slash) = path[at..].iter().position(|c| *c == b'/') {
            if matches!(self.node(root, &path[..at + slash])?, Some(Node { kind: NodeKind::Gitlink(_), .. })) {
                return Ok(true);
            }
            at += slash + 1;
        }
        Ok(false)
    }
}

/// Every path of a snapshot's tree with its node (for diff and rewind).
pub(crate) fn flatten(store: &Store, root: &ContentId) -> Result<BTreeMap<Vec<u8>, Node>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![(Vec::new(), *root)];
    while let Some((prefix, id)) = stack.pop() {
        for node in read_tree(store, &id)? {
            let mut path = prefix.clone();
            if !path.is_empty() {
                path.push(b'/');
            }
            path.extend_from_slice(&node.name);
            match node.kind {
                NodeKind::Tree(sub) => stack.push((path, sub)),
                _ => {
                    out.insert(path, node);
                }
            }
        }
    }
    Ok(out)
}
