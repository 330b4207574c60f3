//! Differences between two snapshots.
//!
//! Invariants: the comparison descends only into directories whose node ids differ, so
//! its cost is proportional to what changed, not to the size of the workspace; content is
//! decrypted (through the verified path) only to count or show lines; binary files are
//! named, never shown; names in a patch's headers are quoted as git quotes them.

use serde::Serialize;

use crate::base::quote::quote_name;
use crate::error::Result;
use crate::fs::relpath::join;
use crate::snapshot;
use crate::snapshot::tree::{Node, NodeKind};
use crate::storage::content::{ContentClass, ContentId};
use crate::storage::store::Store;

/// How a path changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
pub enum Change {
    /// Only in the newer snapshot.
    Added,
    /// In both, with other content or mode.
    Modified,
    /// Only in the older snapshot.
    Deleted,
    /// In both, as different kinds (file, symlink, nested repository).
    TypeChanged,
}

/// One changed path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub(crate) struct Changed {
    /// The path (lossy if not UTF-8).
    pub path: String,
    /// How.
    pub change: Change,
    /// The path's exact bytes.
    #[serde(skip)]
    raw: Vec<u8>,
    #[serde(skip)]
    old: Option<Node>,
    #[serde(skip)]
    new: Option<Node>,
}

/// A regular file as a snapshot recorded it: its content, size and mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FileState {
    pub id: ContentId,
    pub size: u64,
    pub mode: u32,
}

/// One path whose regular file differs between two trees: what it was and what it became
/// (`None`: no regular file there — absent, or a symlink, a directory, a nested repository).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FileChange {
    pub path: Vec<u8>,
    pub before: Option<FileState>,
    pub after: Option<FileState>,
    /// For a file that was not there before: the directories above it (outermost first)
    /// that `from` has no directory at.
    pub new_dirs: Vec<Vec<u8>>,
}

/// The regular files that differ (content or mode) between the trees `from` and `to`,
/// by path.
///
/// # Errors
/// `corrupt`/`not-found` if a tree does not read.
pub(crate) fn file_changes(store: &Store, from: &ContentId, to: &ContentId) -> Result<Vec<FileChange>> {
    let file = |n: Option<Node>| match n {
        Some(Node { kind: NodeKind::File(id), size, mode, .. }) => Some(FileState { id, size, mode }),
        _ => None,
    };
    let mut old = snapshot::lookup::Lookup::new(store);
    let mut out = Vec::new();
    for r in raw(store, from, to)? {
        let change = FileChange { path: r.path, before: file(r.old), after: file(r.new), new_dirs: Vec::new() };
        if change.before == change.after {
            continue;
        }
        let new_dirs = match change.before {
            None => new_dirs(&mut old, from, &change.path)?,
            Some(_) => Vec::new(),
        };
        out.push(FileChange { new_dirs, ..change });
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

/// The directories above `path` (outermost first) that the tree `root` has no directory at.
fn new_dirs(old: &mut snapshot::lookup::Lookup<'_>, root: &ContentId, path: &[u8]) -> Result<Vec<Vec<u8>>> {
    let mut out = Vec::new();
    for (i, _) in path.iter().enumerate().filter(|(_, b)| **b == b'/') {
        let dir = &path[..i];
        if !matches!(old.node(root, dir)?, Some(Node { kind: NodeKind::Tree(_), .. })) {
            out.push(dir.to_vec());
        }
    }
    Ok(out)
}

/// Lines added and deleted in one changed path (`None` for binary content).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct NumStat {
    /// The path (lossy if not UTF-8: [`NumStat::path_bytes`] has it exact).
    pub path: String,
    /// How it changed.
    pub change: Change,
    /// Lines added (none: binary).
    pub added: Option<u64>,
    /// Lines deleted (none: binary).
    pub deleted: Option<u64>,
    #[serde(skip)]
    raw: Vec<u8>,
}

impl NumStat {
    /// The path's exact bytes, for showing it to people with
    /// [`quote_name`](crate::quote_name): two names that differ only in bytes that are
    /// not UTF-8 have the same lossy [`path`](Self::path).
    pub fn path_bytes(&self) -> &[u8] {
        &self.raw
    }
}

/// The changed paths between the trees `from` and `to`, sorted by path.
pub(crate) fn trees(store: &Store, from: &ContentId, to: &ContentId) -> Result<Vec<Changed>> {
    let mut out: Vec<Changed> = raw(store, from, to)?
        .into_iter()
        .map(|r| Changed {
            path: String::from_utf8_lossy(&r.path).into_owned(),
            change: r.change,
            raw: r.path,
            old: r.old,
            new: r.new,
        })
        .collect();
    out.sort_by(|a, b| a.path.cmp(&b.path).then_with(|| a.raw.cmp(&b.raw)));
    Ok(out)
}

/// One changed path as raw bytes, with its nodes on each side (files, symlinks and nested
/// repositories; a directory is never a node here, only the paths below it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RawChange {
    pub path: Vec<u8>,
    pub change: Change,
    pub old: Option<Node>,
    pub new: Option<Node>,
}

/// The changed paths between `from` and `to` as raw bytes, sorted bytewise.
pub(crate) fn raw(store: &Store, from: &ContentId, to: &ContentId) -> Result<Vec<RawChange>> {
    let mut out = Vec::new();
    compare(store, Vec::new(), Some(*from), Some(*to), &mut out)?;
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

fn compare(
    store: &Store,
    prefix: Vec<u8>,
    a: Option<ContentId>,
    b: Option<ContentId>,
    out: &mut Vec<RawChange>,
) -> Result<()> {
    if a == b {
        return Ok(());
    }
    let left = match a {
        Some(id) => snapshot::read_tree(store, &id)?,
        None => Vec::new(),
    };
    let right = match b {
        Some(id) => snapshot::read_tree(store, &id)?,
        None => Vec::new(),
    };
    let (mut i, mut j) = (0, 0);
    while i < left.len() || j < right.len() {
        let order = match (left.get(i), right.get(j)) {
            (Some(l), Some(r)) => l.name.cmp(&r.name),
            (Some(_), None) => std::cmp::Ordering::Less,
            _ => std::cmp::Ordering::Greater,
        };
        match order {
            std::cmp::Ordering::Less => {
                side(store, &prefix, Some(&left[i]), None, out)?;
                i += 1;
            }
            std::cmp::Ordering::Greater => {
                side(store, &prefix, None, Some(&right[j]), out)?;
                j += 1;
            }
            std::cmp::Ordering::Equal => {
                side(store, &prefix, Some(&left[i]), Some(&right[j]), out)?;
                i += 1;
                j += 1;
            }
        }
    }
    Ok(())
}

fn side(store: &Store, prefix: &[u8], l: Option<&Node>, r: Option<&Node>, out: &mut Vec<RawChange>) -> Result<()> {
    let path = join(prefix, &l.or(r).expect("one side").name);
    let tree_of = |n: Option<&Node>| match n.map(|n| &n.kind) {
        Some(NodeKind::Tree(id)) => Some(*id),
        _ => None,
    };
    let (lt, rt) = (tree_of(l), tree_of(r));
    // Directories recurse; a directory replaced by a file (or back) is both.
    if lt.is_some() || rt.is_some() {
        compare(store, path.clone(), lt, rt, out)?;
    }
    let l = l.filter(|n| !matches!(n.kind, NodeKind::Tree(_)));
    let r = r.filter(|n| !matches!(n.kind, NodeKind::Tree(_)));
    let change = match (l, r) {
        (None, None) => return Ok(()),
        (None, Some(_)) => Change::Added,
        (Some(_), None) => Change::Deleted,
        (Some(a), Some(b)) if std::mem::discriminant(&a.kind) != std::mem::discriminant(&b.kind) => Change::TypeChanged,
        (Some(a), Some(b)) if a.kind == b.kind && a.mode == b.mode => return Ok(()),
        _ => Change::Modified,
    };
    out.push(RawChange { path, change, old: l.cloned(), new: r.cloned() });
    Ok(())
}

/// The bytes of a file or symlink node (`None` for a nested repository).
fn content(store: &Store, node: Option<&Node>) -> Result<Option<(ContentClass, Vec<u8>)>> {
    match node.map(|n| &n.kind) {
        Some(NodeKind::File(id)) | Some(NodeKind::Symlink(id)) => {
            let (header, bytes) = store.read_object(id)?;
            Ok(Some((header.class, bytes)))
        }
        _ => Ok(None),
    }
}

fn text(c: &Option<(ContentClass, Vec<u8>)>) -> Option<&str> {
    match c {
        Some((ContentClass::BinaryBlob, _)) => None,
        Some((_, bytes)) => std::str::from_utf8(bytes).ok(),
        None => Some(""),
    }
}

/// The counts of a file added or deleted whole (`None` for any other change), read in
/// pieces: every line of it is added (or deleted), so its lines are counted as its bytes go
/// by, and memory does not grow with its size. A file that is not UTF-8 text counts as
/// binary (no counts), as the whole-content path says.
fn one_sided_counts(store: &Store, c: &Changed) -> Result<Option<(Option<u64>, Option<u64>)>> {
    let (node, added) = match (&c.old, &c.new) {
        (None, Some(n)) => (n, true),
        (Some(n), None) => (n, false),
        _ => return Ok(None),
    };
    let id = match &node.kind {
        NodeKind::File(id) | NodeKind::Symlink(id) => *id,
        _ => return Ok(None),
    };
    let mut lines = Lines::default();
    let header = store.read_object_to(&id, &mut |piece| {
        lines.feed(piece);
        Ok(())
    })?;
    let n = (header.class != ContentClass::BinaryBlob).then(|| lines.finish()).flatten();
    Ok(Some(if added { (n, n.map(|_| 0)) } else { (n.map(|_| 0), n) }))
}

/// Lines of a text fed in pieces, as a diff counts them (a last line without its newline
/// counts), and whether it is UTF-8 throughout (a character may span two pieces).
#[derive(Default)]
struct Lines {
    newlines: u64,
    last: Option<u8>,
    /// The start of a character the last piece ended in.
    carry: Vec<u8>,
    invalid: bool,
}

impl Lines {
    fn feed(&mut self, piece: &[u8]) {
        if piece.is_empty() {
            return;
        }
        self.newlines += piece.iter().filter(|b| **b == b'\n').count() as u64;
        self.last = piece.last().copied();
        if self.invalid {
            return;
        }
        let joined = [std::mem::take(&mut self.carry).as_slice(), piece].concat();
        if let Err(e) = std::str::from_utf8(&joined) {
            match e.error_len() {
                Some(_) => self.invalid = true,
                None => self.carry = joined[e.valid_up_to()..].to_vec(),
            }
        }
    }

    /// The number of lines, or `None` if the text was not UTF-8.
    fn finish(self) -> Option<u64> {
        if self.invalid || !self.carry.is_empty() {
            return None;
        }
        Some(self.newlines + u64::from(self.last.is_some_and(|b| b != b'\n')))
    }
}

/// Files over this size (either side) are not diffed line by line — as git treats files
/// over its `core.bigFileThreshold` — so a diff never holds a large file whole: the patch
/// says they differ and gives their sizes; a file added or deleted whole still has its
/// lines counted, as its bytes go by.
const LARGE_FILE: u64 = 4 << 20;

/// The line counts and, with `patch`, the unified diff, decrypting each content once.
pub(crate) fn report(store: &Store, changes: &[Changed], patch: bool) -> Result<(Vec<NumStat>, String)> {
    let mut counts = Vec::with_capacity(changes.len());
    let mut out = String::new();
    for c in changes {
        let size = |n: &Option<Node>| n.as_ref().map_or(0, |n| n.size);
        let large = size(&c.old).max(size(&c.new)) > LARGE_FILE;
        if !patch || large {
            let one_sided = one_sided_counts(store, c)?;
            if one_sided.is_some() || large {
                let (added, deleted) = one_sided.unwrap_or((None, None));
                counts.push(NumStat { path: c.path.clone(), change: c.change, added, deleted, raw: c.raw.clone() });
                if patch {
                    let side = |prefix: &str| quote_name(&[prefix.as_bytes(), &c.raw].concat()).into_owned();
                    out.push_str(&format!(
                        "diff --turnback {a} {b}\nLarge files {a} ({} bytes) and {b} ({} bytes) differ; not shown line by line\n",
                        size(&c.old),
                        size(&c.new),
                        a = side("a/"),
                        b = side("b/"),
                    ));
                }
                continue;
            }
        }
        let (old, new) = (content(store, c.old.as_ref())?, content(store, c.new.as_ref())?);
        let texts = (text(&old), text(&new));
        let (added, deleted) = match texts {
            (Some(a), Some(b)) => {
                let (mut add, mut del) = (0, 0);
                for hunk in diffy::create_patch(a, b).hunks() {
                    for line in hunk.lines() {
                        match line {
                            diffy::Line::Insert(_) => add += 1,
                            diffy::Line::Delete(_) => del += 1,
                            diffy::Line::Context(_) => {}
                        }
                    }
                }
                (Some(add), Some(del))
            }
            _ => (None, None),
        };
        counts.push(NumStat { path: c.path.clone(), change: c.change, added, deleted, raw: c.raw.clone() });
        if !patch {
            continue;
        }
        // Names in headers are quoted as git quotes them, so a name cannot forge a line.
        let side = |prefix: &str| quote_name(&[prefix.as_bytes(), &c.raw].concat()).into_owned();
        let (a_name, b_name) = (side("a/"), side("b/"));
        out.push_str(&format!("diff --turnback {a_name} {b_name}\n"));
        match texts {
            (Some(a), Some(b)) => {
                let from = if c.old.is_some() { a_name } else { "/dev/null".into() };
                let to = if c.new.is_some() { b_name } else { "/dev/null".into() };
                out.push_str(&format!("--- {from}\n+++ {to}\n"));
                // diffy writes its own `---`/`+++` lines (quoting by other rules): the hunks only.
                let patch = diffy::create_patch(a, b).to_string();
                out.push_str(patch.splitn(3, '\n').nth(2).unwrap_or_default());
            }
            _ => out.push_str(&format!("Binary files {a_name} and {b_name} differ\n")),
        }
    }
    Ok((counts, out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count(pieces: &[&[u8]]) -> Option<u64> {
        let mut lines = Lines::default();
        for p in pieces {
            lines.feed(p);
        }
        lines.finish()
    }

    #[test]
    fn lines_fed_in_pieces_count_as_a_whole_text_does() {
        assert_eq!(count(&[]), Some(0));
        assert_eq!(count(&[b"a\nb\n"]), Some(2));
        assert_eq!(count(&[b"a\nb"]), Some(2), "a last line without its newline counts");
        assert_eq!(count(&[b"a", b"\n", b"b\n", b"c"]), Some(3));
        let e = "é".as_bytes();
        assert_eq!(count(&[b"x", &e[..1], &e[1..], b"\n"]), Some(1), "a character across two pieces is UTF-8");
        assert_eq!(count(&[b"x\xff\n"]), None, "not UTF-8: binary");
        assert_eq!(count(&[b"x", &e[..1]]), None, "a character cut at the end is not UTF-8");
    }
}
