//! Paths inside a workspace.
//!
//! Invariants:
//! - A [`RelPath`] is always relative, `/`-separated, with no empty, `.` or `..`
//!   component: once made it cannot name anything outside its workspace.
//! - [`resolve`] refuses paths outside the workspace, the workspace root itself, anything
//!   inside a `.git` directory (guarantee 1: the user's repository is never touched) and
//!   anything inside the store or the key's directory. Symlinked parents are refused later,
//!   at the moment of access, by [`files`](crate::fs::files), which never follows them.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, ErrorCode, Result};

/// A path relative to a workspace root, as bytes (Unix paths need not be UTF-8).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RelPath(Vec<u8>);

impl std::fmt::Debug for RelPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RelPath({:?})", self.display())
    }
}

impl RelPath {
    /// Builds a relative path from `/`-separated bytes, validating every component.
    ///
    /// # Errors
    /// `path-rejected` for an empty path, an absolute path, or `.`/`..`/empty components.
    pub fn new(bytes: impl Into<Vec<u8>>) -> Result<Self> {
        let bytes = bytes.into();
        if bytes.is_empty() {
            return Err(Error::new(ErrorCode::PathRejected, "empty path"));
        }
        for comp in bytes.split(|b| *b == b'/') {
            if comp.is_empty() || comp == b"." || comp == b".." || comp.contains(&0) {
                return Err(Error::new(
                    ErrorCode::PathRejected,
                    format!("not a clean relative path: {:?}", String::from_utf8_lossy(&bytes)),
                ));
            }
        }
        Ok(RelPath(bytes))
    }

    /// The raw bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// As a [`Path`] (relative).
    pub fn as_path(&self) -> &Path {
        Path::new(OsStr::from_bytes(&self.0))
    }

    /// For people (lossy if not UTF-8).
    pub fn display(&self) -> String {
        String::from_utf8_lossy(&self.0).into_owned()
    }

    /// The components, in order.
    pub fn components(&self) -> impl Iterator<Item = &OsStr> {
        self.0.split(|b| *b == b'/').map(OsStr::from_bytes)
    }

    /// The directory that holds it, as bytes: what precedes the last `/` (`""` for a name
    /// in the workspace root).
    pub fn dir(&self) -> &[u8] {
        dir_of(&self.0)
    }
}

/// The directory part of a relative `/`-separated path: what precedes the last `/` (`""`
/// for a name in the workspace root).
pub(crate) fn dir_of(path: &[u8]) -> &[u8] {
    path.iter().rposition(|c| *c == b'/').map_or(&[][..], |at| &path[..at])
}

/// The last component of a relative `/`-separated path: what follows the last `/`.
pub(crate) fn name_of(path: &[u8]) -> &[u8] {
    path.iter().rposition(|c| *c == b'/').map_or(path, |at| &path[at + 1..])
}

/// How many components a relative `/`-separated path has (`""`, the root: none).
pub(crate) fn depth(path: &[u8]) -> usize {
    if path.is_empty() { 0 } else { 1 + path.iter().filter(|c| **c == b'/').count() }
}

/// Whether `path` is `dir` or lies under it (everything lies under the root, `""`).
pub(crate) fn is_within(path: &[u8], dir: &[u8]) -> bool {
    dir.is_empty() || path == dir || (path.starts_with(dir) && path.get(dir.len()) == Some(&b'/'))
}

/// `dir/name`, or `name` in the workspace root (`dir` empty).
pub(crate) fn join(dir: &[u8], name: &[u8]) -> Vec<u8> {
    let mut path = Vec::with_capacity(dir.len() + 1 + name.len());
    if !dir.is_empty() {
        path.extend_from_slice(dir);
        path.push(b'/');
    }
    path.extend_from_slice(name);
    path
}

#[cfg(feature = "json-schema")]
impl schemars::JsonSchema for RelPath {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "RelPath".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "A path relative to the workspace root, `/`-separated (a path that is not UTF-8: its bytes)",
            "anyOf": [{ "type": "string" }, { "type": "array", "items": { "type": "integer", "minimum": 0, "maximum": 255 } }]
        })
    }
}

impl Serialize for RelPath {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        match std::str::from_utf8(&self.0) {
            Ok(text) => s.serialize_str(text),
            Err(_) => s.serialize_bytes(&self.0),
        }
    }
}

impl<'de> Deserialize<'de> for RelPath {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Repr {
            Text(String),
            Bytes(Vec<u8>),
        }
        let bytes = match Repr::deserialize(d)? {
            Repr::Text(t) => t.into_bytes(),
            Repr::Bytes(b) => b,
        };
        RelPath::new(bytes).map_err(|e| serde::de::Error::custom(e.message))
    }
}

/// Turns a path given by a person or agent (absolute, or relative to `cwd`) into a
/// path inside the workspace at `root`.
///
/// # Errors
/// `path-rejected` if it is outside the workspace, is the workspace itself, lies inside
/// a `.git` directory, or is or lies inside one of `protected` (the store, the key file
/// and the key's directory: an agent must not be able to destroy them).
pub(crate) fn resolve(root: &Path, path: &Path, cwd: &Path, protected: &[PathBuf]) -> Result<RelPath> {
    let lexical = normalize(&if path.is_absolute() { path.to_path_buf() } else { cwd.join(path) });
    let reject = |why: &str| Error::new(ErrorCode::PathRejected, format!("{}: {why}", path.display()));
    // The root is canonical; a path that reaches the workspace through a symlink (a
    // workspace opened as /tmp/x on macOS, or through a linked folder) is the same file.
    let absolute = if lexical.starts_with(root) { lexical } else { through_links(&lexical) };
    let rel = absolute.strip_prefix(root).map_err(|_| reject("outside the workspace"))?;
    if rel.as_os_str().is_empty() {
        return Err(reject("is the workspace root, not a file"));
    }
    if rel.components().any(|c| c.as_os_str() == ".git") {
        return Err(reject("inside a .git directory; turnback never touches a repository's internals"));
    }
    for p in protected {
        let p = normalize(&p.canonicalize().unwrap_or_else(|_| p.to_path_buf()));
        if absolute.starts_with(&p) {
            return Err(reject("part of turnback's own store or keys"));
        }
    }
    RelPath::new(rel.as_os_str().as_bytes())
}

/// `path` with its longest existing ancestor directory canonicalized (what is below it does
/// not exist yet, so it has no links to resolve). The last component is never resolved: a
/// symlink there is the path's own, not a way to it.
fn through_links(path: &Path) -> PathBuf {
    let (Some(mut existing), Some(name)) = (path.parent(), path.file_name()) else { return path.to_path_buf() };
    let mut rest = vec![name.to_os_string()];
    loop {
        if let Ok(real) = existing.canonicalize() {
            return rest.iter().rev().fold(real, |p, c| p.join(c));
        }
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_os_string());
                existing = parent;
            }
            _ => return path.to_path_buf(),
        }
    }
}

/// Lexically removes `.` and resolves `..` (never above the root).
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve_in(root: &str, path: &str, cwd: &str, protected: &[PathBuf]) -> Result<RelPath> {
        resolve(Path::new(root), Path::new(path), Path::new(cwd), protected)
    }

    #[test]
    fn a_paths_dir_is_what_precedes_its_last_slash_and_join_puts_them_back() {
        assert_eq!(RelPath::new("a.txt").unwrap().dir(), b"");
        assert_eq!(RelPath::new("d/e/f.txt").unwrap().dir(), b"d/e");
        assert_eq!(name_of(b"d/e/f.txt"), b"f.txt");
        assert_eq!(name_of(b"a.txt"), b"a.txt");
        assert_eq!(join(b"", b"a.txt"), b"a.txt");
        assert_eq!(join(dir_of(b"d/e/f.txt"), name_of(b"d/e/f.txt")), b"d/e/f.txt");
    }

    #[test]
    fn resolves_relative_and_absolute_paths_inside() {
        let store = &[PathBuf::from("/s")];
        assert_eq!(resolve_in("/w", "a/b.txt", "/w", store).unwrap().display(), "a/b.txt");
        assert_eq!(resolve_in("/w", "../x", "/w/a", store).unwrap().display(), "x");
        assert_eq!(resolve_in("/w", "/w/./c", "/", store).unwrap().display(), "c");
    }

    #[test]
    fn rejects_escapes_root_git_store_and_keys() {
        let store = &[PathBuf::from("/w/.store"), PathBuf::from("/w/.config/turnback")];
        for (p, cwd) in [
            ("../etc/passwd", "/w"),
            ("/w", "/"),
            ("/wx/a", "/"),
            (".git/config", "/w"),
            ("sub/.git/HEAD", "/w"),
            (".store/store.db", "/w"),
            (".config/turnback/master.key", "/w"),
        ] {
            let err = resolve_in("/w", p, cwd, store).unwrap_err();
            assert_eq!(err.code, ErrorCode::PathRejected, "{p}");
        }
    }

    #[test]
    fn a_workspace_reached_through_a_symlink_is_the_same_workspace_and_links_out_stay_out() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real");
        std::fs::create_dir_all(real.join("sub")).unwrap();
        std::os::unix::fs::symlink(&real, dir.path().join("link")).unwrap();
        std::fs::create_dir(dir.path().join("elsewhere")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("elsewhere"), real.join("out")).unwrap();
        let root = real.canonicalize().unwrap();
        let via = |p: &str, cwd: &Path| resolve(&root, Path::new(p), cwd, &[]);
        let link = dir.path().join("link");
        assert_eq!(via(link.join("sub/new.txt").to_str().unwrap(), Path::new("/")).unwrap().display(), "sub/new.txt");
        assert_eq!(via("sub/a.txt", &link).unwrap().display(), "sub/a.txt", "relative to a linked cwd");
        // A path that leaves the workspace through a link inside it is not let in by the
        // fallback (lexically inside, it is checked where it is written, never followed).
        let outside = dir.path().join("elsewhere/x.txt");
        assert_eq!(via(outside.to_str().unwrap(), Path::new("/")).unwrap_err().code, ErrorCode::PathRejected);
    }

    #[test]
    fn rel_paths_are_clean_and_round_trip_non_utf8() {
        assert!(RelPath::new("a//b").is_err());
        assert!(RelPath::new("a/../b").is_err());
        assert!(RelPath::new("/a").is_err());
        let p = RelPath::new(b"caf\xe9/x".to_vec()).unwrap();
        let json = serde_json::to_string(&p).unwrap();
        assert_eq!(serde_json::from_str::<RelPath>(&json).unwrap(), p);
        let q = RelPath::new("ไฟล์/ข้อมูล.txt").unwrap();
        assert_eq!(serde_json::from_str::<RelPath>(&serde_json::to_string(&q).unwrap()).unwrap(), q);
    }
}
