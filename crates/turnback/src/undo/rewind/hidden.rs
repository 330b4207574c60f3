//! What a rewind's target snapshot could not see, so that a rewind never deletes it: paths
//! ignored then by the snapshot's own ignore files (or the workspace's
//! `.git/info/exclude`), excluded by name, inside a nested repository, or left out with a
//! reason when the snapshot was taken.

use std::collections::BTreeMap;
use std::path::Path;

use crate::error::Result;
use crate::fs::walk;
use crate::session::workspace::Workspace;
use crate::snapshot::tree::{Node, NodeKind};
use crate::snapshot::{self, SnapshotRecord};
use crate::storage::content::ContentId;
use crate::storage::store::Store;

/// What the target snapshot could not see: paths ignored by its own ignore files (and the
/// workspace's `.git/info/exclude`), excluded by name, inside a nested repository, or left
/// out with a reason when it was taken.
///
/// Only the ignore files of a path's own ancestor directories are looked up and read, once
/// each. One that cannot be read hides everything below it: a rewind then never deletes
/// there.
pub(super) struct HiddenAtTarget<'a> {
    store: &'a Store,
    root: std::path::PathBuf,
    target: ContentId,
    lookup: snapshot::Lookup<'a>,
    /// Matchers by ignore file path (`None`: none there; `Some(None)`: unreadable).
    matchers: BTreeMap<Vec<u8>, Option<Option<ignore::gitignore::Gitignore>>>,
    /// Ignore rules from outside the snapshot: the workspace's and its parents'
    /// `.git/info/exclude`, and the parents' `.gitignore` and `.ignore`, as on disk now.
    outside: Vec<ignore::gitignore::Gitignore>,
    skipped: Vec<Vec<u8>>,
}

impl<'a> HiddenAtTarget<'a> {
    pub(super) fn new(store: &'a Store, ws: &Workspace, target: ContentId, record: &SnapshotRecord) -> Self {
        // The walk also honoured ignore files in the directories above the workspace and
        // the enclosing repository's exclude file; their rules now stand in for then's.
        let mut outside = Vec::new();
        for dir in ws.root.ancestors() {
            let files = [dir.join(".git/info/exclude"), dir.join(".gitignore"), dir.join(".ignore")];
            for (i, file) in files.iter().enumerate() {
                if i > 0 && dir == ws.root {
                    continue; // the workspace's own ignore files come from the snapshot
                }
                if let Ok(text) = std::fs::read_to_string(file)
                    && let Some(g) = matcher(dir, text.lines())
                {
                    outside.push(g);
                }
            }
        }
        HiddenAtTarget {
            store,
            root: ws.root.clone(),
            target,
            lookup: snapshot::Lookup::new(store),
            matchers: BTreeMap::new(),
            outside,
            skipped: record.skipped_paths.iter().map(|s| s.path.as_bytes().to_vec()).collect(),
        }
    }

    pub(super) fn hides(&mut self, path: &[u8]) -> Result<bool> {
        use std::os::unix::ffi::OsStrExt;
        let below = |u: &[u8]| path == u || (path.starts_with(u) && path.get(u.len()) == Some(&b'/'));
        if self.skipped.iter().any(|u| below(u)) || self.lookup.under_gitlink(&self.target, path)? {
            return Ok(true);
        }
        let name = path.rsplit(|c| *c == b'/').next().unwrap_or_default();
        let parent = path[..path.len() - name.len()]
            .strip_suffix(b"/")
            .map(|p| p.rsplit(|c| *c == b'/').next().unwrap_or_default());
        if walk::excluded(name, parent) {
            return Ok(true);
        }
        let ignored = |dir: &[u8], g: &ignore::gitignore::Gitignore| {
            let rel = std::path::Path::new(std::ffi::OsStr::from_bytes(&path[dir.len()..]));
            g.matched_path_or_any_parents(rel, false).is_ignore()
        };
        let absolute = self.root.join(std::ffi::OsStr::from_bytes(path));
        if self.outside.iter().any(|g| g.matched_path_or_any_parents(&absolute, false).is_ignore()) {
            return Ok(true);
        }
        // Every ancestor directory ("", "a/", "a/b/", …) and its ignore files.
        let dirs = std::iter::once(0).chain(path.iter().enumerate().filter(|(_, c)| **c == b'/').map(|(i, _)| i + 1));
        for end in dirs.collect::<Vec<_>>() {
            let dir = &path[..end];
            for file in [&b".gitignore"[..], b".ignore"] {
                let key = [dir, file].concat();
                if !self.matchers.contains_key(&key) {
                    let built = match self.lookup.node(&self.target, &key)? {
                        Some(Node { kind: NodeKind::File(id), .. }) => {
                            Some(self.store.read_object(&id).ok().and_then(|(_, text)| {
                                matcher(
                                    &self.root.join(std::ffi::OsStr::from_bytes(dir)),
                                    String::from_utf8_lossy(&text).lines(),
                                )
                            }))
                        }
                        // The walk followed a symlinked ignore file; its rules are not in
                        // the snapshot, so everything below counts as hidden.
                        Some(_) => Some(None),
                        None => None,
                    };
                    self.matchers.insert(key.clone(), built);
                }
                match &self.matchers[&key] {
                    Some(Some(g)) if ignored(dir, g) => return Ok(true),
                    Some(None) => return Ok(true),
                    _ => {}
                }
            }
        }
        Ok(false)
    }
}

/// A gitignore matcher rooted at `root` from `lines` (`None` if it cannot be built).
fn matcher<'l>(root: &Path, lines: impl Iterator<Item = &'l str>) -> Option<ignore::gitignore::Gitignore> {
    let mut b = ignore::gitignore::GitignoreBuilder::new(root);
    for line in lines {
        let _ = b.add_line(None, line);
    }
    b.build().ok()
}
