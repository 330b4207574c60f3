//! Snapshot trees: one encrypted, content-addressed node per directory.
//!
//! Invariants: a node lists its entries sorted by name, each with its kind, mode, size and
//! either the id of its content (file, symlink target, subtree) or a nested repository's
//! commit. The encoding is canonical, so equal directories have equal ids and unchanged
//! subtrees are stored once and shared by every snapshot; a diff can skip any subtree
//! whose id did not change.

use crate::error::{Error, Result};
use crate::storage::content::ContentId;

const MAGIC: &[u8; 4] = b"TBT1";

/// What a tree entry is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum NodeKind {
    /// A subdirectory; its node's id.
    Tree(ContentId),
    /// A regular file; its content's id.
    File(ContentId),
    /// A symlink; the id of its target's bytes.
    Symlink(ContentId),
    /// A nested repository at this commit.
    Gitlink(String),
}

/// One entry of a directory node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Node {
    /// The entry's name (one path component).
    pub name: Vec<u8>,
    /// Permission and type bits (`st_mode`; 0 for subtrees and nested repositories).
    pub mode: u32,
    /// Size in bytes (files), 0 otherwise.
    pub size: u64,
    /// What it is.
    pub kind: NodeKind,
}

/// Encodes entries (sorted here by name) canonically.
pub(crate) fn encode(mut nodes: Vec<Node>) -> Vec<u8> {
    nodes.sort_by(|a, b| a.name.cmp(&b.name));
    let mut out = Vec::with_capacity(8 + nodes.len() * 64);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(nodes.len() as u32).to_le_bytes());
    for n in &nodes {
        let (tag, payload): (u8, &[u8]) = match &n.kind {
            NodeKind::Tree(id) => (0, &id.0),
            NodeKind::File(id) => (1, &id.0),
            NodeKind::Symlink(id) => (2, &id.0),
            NodeKind::Gitlink(commit) => (3, commit.as_bytes()),
        };
        out.push(tag);
        out.extend_from_slice(&n.mode.to_le_bytes());
        out.extend_from_slice(&n.size.to_le_bytes());
        out.extend_from_slice(&(n.name.len() as u16).to_le_bytes());
        out.extend_from_slice(&n.name);
        out.push(payload.len() as u8);
        out.extend_from_slice(payload);
    }
    out
}

/// Decodes a node encoded by [`encode`], and only such a node: entries strictly sorted by
/// name, each name one path component, nothing after the last entry. (What decodes encodes
/// to the same bytes, so no node can smuggle in a name a restore would write outside its
/// directory, or two entries for one name.)
///
/// # Errors
/// `corrupt` if malformed.
pub(crate) fn decode(bytes: &[u8]) -> Result<Vec<Node>> {
    let bad = || Error::corrupt("tree", "malformed node");
    if bytes.len() < 8 || &bytes[..4] != MAGIC {
        return Err(bad());
    }
    let count = u32::from_le_bytes(bytes[4..8].try_into().expect("4 bytes")) as usize;
    let mut nodes = Vec::with_capacity(count.min(1 << 16));
    let mut at = 8;
    let mut take = |n: usize| -> Result<&[u8]> {
        let s = bytes.get(at..at + n).ok_or_else(bad)?;
        at += n;
        Ok(s)
    };
    for _ in 0..count {
        let tag = take(1)?[0];
        let mode = u32::from_le_bytes(take(4)?.try_into().expect("4 bytes"));
        let size = u64::from_le_bytes(take(8)?.try_into().expect("8 bytes"));
        let name_len = u16::from_le_bytes(take(2)?.try_into().expect("2 bytes")) as usize;
        let name = take(name_len)?.to_vec();
        let payload_len = take(1)?[0] as usize;
        let payload = take(payload_len)?;
        let id = || -> Result<ContentId> { Ok(ContentId(payload.try_into().map_err(|_| bad())?)) };
        let kind = match tag {
            0 => NodeKind::Tree(id()?),
            1 => NodeKind::File(id()?),
            2 => NodeKind::Symlink(id()?),
            3 => NodeKind::Gitlink(String::from_utf8(payload.to_vec()).map_err(|_| bad())?),
            _ => return Err(bad()),
        };
        if !is_component(&name) || nodes.last().is_some_and(|prev: &Node| prev.name >= name) {
            return Err(bad());
        }
        nodes.push(Node { name, mode, size, kind });
    }
    if at != bytes.len() {
        return Err(bad());
    }
    Ok(nodes)
}

/// Whether `name` can be an entry of a directory: one path component, not `.` or `..`.
fn is_component(name: &[u8]) -> bool {
    !name.is_empty() && name != b"." && name != b".." && !name.contains(&b'/') && !name.contains(&0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoding_is_canonical_and_round_trips() {
        let a = Node { name: b"b.txt".to_vec(), mode: 0o100644, size: 3, kind: NodeKind::File(ContentId([1; 32])) };
        let b = Node { name: b"a".to_vec(), mode: 0, size: 0, kind: NodeKind::Tree(ContentId([2; 32])) };
        let c = Node { name: b"sub".to_vec(), mode: 0, size: 0, kind: NodeKind::Gitlink("ab".repeat(20)) };
        let one = encode(vec![a.clone(), b.clone(), c.clone()]);
        let two = encode(vec![c.clone(), a.clone(), b.clone()]);
        assert_eq!(one, two);
        assert_eq!(decode(&one).unwrap(), vec![b, a, c]);
        assert!(decode(&one[..one.len() - 1]).is_err());
        let mut longer = one.clone();
        longer.push(0);
        assert!(decode(&longer).is_err(), "bytes after the last entry");
    }

    #[test]
    fn names_that_are_not_one_component_or_out_of_order_do_not_decode() {
        let file = |name: &[u8]| Node {
            name: name.to_vec(),
            mode: 0o100644,
            size: 1,
            kind: NodeKind::File(ContentId([1; 32])),
        };
        for name in [&b""[..], b".", b"..", b"../x", b"a/b", b"nul\0"] {
            assert!(decode(&encode(vec![file(name)])).is_err(), "{:?}", String::from_utf8_lossy(name));
        }
        // encode sorts; write two entries out of order (and twice the same) by hand.
        let (a, b) = (encode(vec![file(b"a")]), encode(vec![file(b"b")]));
        let two = |first: &[u8], second: &[u8]| {
            let mut out = b"TBT1".to_vec();
            out.extend_from_slice(&2u32.to_le_bytes());
            out.extend_from_slice(&first[8..]);
            out.extend_from_slice(&second[8..]);
            out
        };
        assert!(decode(&two(&a, &b)).is_ok());
        assert!(decode(&two(&b, &a)).is_err(), "out of order");
        assert!(decode(&two(&a, &a)).is_err(), "one name twice");
    }
}
