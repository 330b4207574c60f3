//! The workspace walk: every path a snapshot may record, found in parallel, never
//! following a symlink, never entering a `.git` directory.
//!
//! Invariants:
//! - `.gitignore`, `.ignore` and `.git/info/exclude` of the workspace (and of parent
//!   directories up to the filesystem root, as git would for a subdirectory of a repository)
//!   are honoured; the user's global git configuration is not.
//! - The unconditional exclusions of DESIGN.md §2.10 ([`excluded`]) are applied after the
//!   ignore rules and cannot be undone by them: no negation, no tracked status (turnback
//!   never reads a git index) brings a secret or a dependency folder back.
//! - A directory holding `.git` (other than the workspace root) is a nested repository:
//!   it is recorded as a pointer to its checked-out commit, read from `HEAD`, loose refs or
//!   `packed-refs` without running git, and never descended into.
//! - Symlinks are recorded as links (their target), never followed.
//! - turnback's own temporary files ([`files::temp_phase`]) are never recorded.

use std::ffi::OsStr;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Mutex;

use ignore::{WalkBuilder, WalkState};
use rustix::fs::{AtFlags, FileType, Mode, OFlags};

use crate::error::Result;
use crate::fs::files;

/// What a walked path is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// A regular file.
    File,
    /// A symlink with this target.
    Symlink(Vec<u8>),
    /// A nested repository checked out at this commit.
    Gitlink(String),
}

/// The stat fields a snapshot compares with its cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    /// `st_mode` (type and permissions).
    pub mode: u32,
    /// Size in bytes.
    pub size: u64,
    /// Modification time, ns.
    pub mtime_ns: i128,
    /// Status change time, ns.
    pub ctime_ns: i128,
    /// Device.
    pub device: u64,
    /// Inode.
    pub inode: u64,
}

impl Stat {
    /// The stat fields of `m`.
    pub fn of(m: &std::fs::Metadata) -> Self {
        Stat {
            mode: m.mode(),
            size: m.size(),
            mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
            ctime_ns: i128::from(m.ctime()) * 1_000_000_000 + i128::from(m.ctime_nsec()),
            device: m.dev(),
            inode: m.ino(),
        }
    }

    /// The stat fields of a raw `stat` (from `fstatat`): the same values [`Stat::of`] gives
    /// for the same file (the field types differ between platforms, hence the casts).
    #[allow(clippy::useless_conversion, clippy::unnecessary_cast)]
    fn of_raw(st: &rustix::fs::Stat) -> Self {
        let ns = |s: i64, n: i64| i128::from(s) * 1_000_000_000 + i128::from(n);
        Stat {
            mode: st.st_mode as u32,
            size: st.st_size as u64,
            mtime_ns: ns(st.st_mtime as i64, st.st_mtime_nsec as i64),
            ctime_ns: ns(st.st_ctime as i64, st.st_ctime_nsec as i64),
            device: st.st_dev as u64,
            inode: st.st_ino as u64,
        }
    }
}

/// One recorded path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Relative, `/`-separated.
    pub path: Vec<u8>,
    /// What it is.
    pub kind: Kind,
    /// Its stat.
    pub stat: Stat,
}

/// A path left out, and why (shown by `du` and in snapshot records).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
pub struct Skipped {
    /// Relative path.
    pub path: String,
    /// Why.
    pub reason: String,
}

/// Everything one walk found.
#[derive(Debug, Default)]
pub struct Walk {
    /// Recorded paths, sorted by path components.
    pub entries: Vec<Entry>,
    /// Nested repositories that could not be recorded, and other notable skips.
    pub skipped: Vec<Skipped>,
    /// How many paths the unconditional exclusions removed.
    pub excluded: u64,
    /// In a partial walk ([`walk_scoped`]): the directories listed whole, and those met but
    /// not entered (not nested repositories). Empty in a full walk.
    pub dirs: ScopedDirs,
}

/// The directories a partial walk listed whole and those it did not enter.
#[derive(Debug, Default)]
pub struct ScopedDirs {
    /// Entered: every entry of theirs the rules keep is in the walk.
    pub listed: Vec<Vec<u8>>,
    /// Met in a listed directory but not entered.
    pub unlisted: Vec<Vec<u8>>,
}

/// Which directories (relative, `/`-separated) a partial walk enters.
pub type Scope<'a> = &'a (dyn Fn(&[u8]) -> bool + Sync);

const EXCLUDED_NAMES: &[&str] = &[
    ".env",
    ".envrc",
    ".netrc",
    ".npmrc",
    ".pypirc",
    ".git-credentials",
    "credentials.json",
    ".git",
    ".aws",
    ".ssh",
    ".gnupg",
    ".kube",
    "node_modules",
    ".venv",
    "__pycache__",
];
const EXCLUDED_PREFIXES: &[&str] = &[".env.", "id_rsa", "id_dsa", "id_ecdsa", "id_ed25519"];
const EXCLUDED_SUFFIXES: &[&str] = &[".pem", ".key", ".p12", ".pfx", ".tfvars"];

/// Whether a path with this file name (and parent name) is excluded whatever the ignore
/// files say: secrets, credentials, dependency folders and `.git`.
pub fn excluded(name: &[u8], parent: Option<&[u8]>) -> bool {
    // Bytes, not text: a name that is not UTF-8 is matched all the same.
    EXCLUDED_NAMES.iter().any(|n| name == n.as_bytes())
        || EXCLUDED_PREFIXES.iter().any(|p| name.starts_with(p.as_bytes()))
        || EXCLUDED_SUFFIXES.iter().any(|s| name.ends_with(s.as_bytes()))
        || name.windows(8).any(|w| w == b".tfstate")
        || (name == b"config.json" && parent == Some(b".docker"))
}

/// Walks `root`, leaving out ignored and excluded paths and everything under `skip_dirs`
/// (the store, when it lies inside the workspace).
///
/// # Errors
/// `io` if `root` cannot be read.
pub fn walk(root: &Path, skip_dirs: &[std::path::PathBuf]) -> Result<Walk> {
    walk_scoped(root, skip_dirs, None)
}

/// [`walk`], entering only the directories `scope` accepts (the root is always listed):
/// the same rules with the same ignore files, so what it finds in a directory it lists is
/// exactly what a full walk finds there.
///
/// # Errors
/// `io` if `root` cannot be read.
pub fn walk_scoped(root: &Path, skip_dirs: &[std::path::PathBuf], scope: Option<Scope<'_>>) -> Result<Walk> {
    let found = Mutex::new(Walk::default());
    let mut builder = WalkBuilder::new(root);
    builder
        .hidden(false)
        .follow_links(false)
        .git_global(false)
        .git_ignore(true)
        .git_exclude(true)
        .ignore(true)
        .parents(true)
        .require_git(false)
        .threads(std::thread::available_parallelism().map_or(2, |n| n.get()).min(8));
    let skip: Vec<Vec<u8>> = skip_dirs
        .iter()
        .map(|d| d.canonicalize().unwrap_or_else(|_| d.clone()).as_os_str().as_bytes().to_vec())
        .collect();
    let excluded_count = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let counter = excluded_count.clone();
    builder.filter_entry(move |e| {
        if e.depth() == 0 {
            return true;
        }
        // Byte comparisons: this runs for every path of the tree.
        let path = e.path().as_os_str().as_bytes();
        let name = e.file_name().as_bytes();
        let parent = path[..path.len() - name.len()]
            .strip_suffix(b"/")
            .map(|p| p.rsplit(|c| *c == b'/').next().unwrap_or_default());
        // turnback's own temporary files are never content (and never counted).
        if files::temp_phase(name).is_some() {
            return false;
        }
        let out = excluded(name, parent) || skip.iter().any(|s| path == s.as_slice());
        // `.git` itself is not counted: it is never part of a workspace's content.
        if out && e.file_name() != ".git" {
            counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        !out
    });
    let root_bytes = root.as_os_str().as_bytes();
    let root_bytes = root_bytes.strip_suffix(b"/").unwrap_or(root_bytes);
    builder.build_parallel().visit(&mut Visitors { root: root_bytes, found: &found, scope });
    let mut walk = found.into_inner().unwrap_or_else(|p| p.into_inner());
    walk.excluded = excluded_count.load(std::sync::atomic::Ordering::Relaxed);
    // Paths are unique, so an unstable sort orders them all the same.
    walk.entries.sort_unstable_by(|a, b| component_order(&a.path, &b.path));
    walk.skipped.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(walk)
}

/// Makes one [`Visitor`] per walker thread.
struct Visitors<'a> {
    root: &'a [u8],
    found: &'a Mutex<Walk>,
    scope: Option<Scope<'a>>,
}

impl<'s> ignore::ParallelVisitorBuilder<'s> for Visitors<'s> {
    fn build(&mut self) -> Box<dyn ignore::ParallelVisitor + 's> {
        Box::new(Visitor {
            root: self.root,
            found: self.found,
            scope: self.scope,
            local: Walk::default(),
            parent: None,
        })
    }
}

/// One walker thread's findings, kept to itself and handed over once when it is done (no
/// lock per path), and the directory it last stat-ed in: siblings are visited together, so
/// each path is stat-ed relative to its open parent (`fstatat`), one component for the
/// kernel to resolve instead of the whole path.
struct Visitor<'a> {
    root: &'a [u8],
    found: &'a Mutex<Walk>,
    scope: Option<Scope<'a>>,
    local: Walk,
    parent: Option<(Vec<u8>, OwnedFd)>,
}

impl Drop for Visitor<'_> {
    fn drop(&mut self) {
        let mut found = self.found.lock().unwrap_or_else(|p| p.into_inner());
        found.entries.append(&mut self.local.entries);
        found.skipped.append(&mut self.local.skipped);
        found.dirs.listed.append(&mut self.local.dirs.listed);
        found.dirs.unlisted.append(&mut self.local.dirs.unlisted);
    }
}

impl ignore::ParallelVisitor for Visitor<'_> {
    fn visit(&mut self, result: std::result::Result<ignore::DirEntry, ignore::Error>) -> WalkState {
        match result {
            Ok(entry) => self.visit_entry(&entry),
            Err(e) => {
                // Unreadable paths are skipped with a reason, never a failed snapshot.
                self.local.skipped.push(Skipped { path: String::new(), reason: e.to_string() });
                WalkState::Continue
            }
        }
    }
}

impl Visitor<'_> {
    /// The open directory `dir` (the last one, or opened now).
    fn parent_fd(&mut self, dir: &[u8]) -> Option<&OwnedFd> {
        if self.parent.as_ref().is_none_or(|(open, _)| open.as_slice() != dir) {
            let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
            self.parent =
                rustix::fs::open(OsStr::from_bytes(dir), flags, Mode::empty()).ok().map(|fd| (dir.to_vec(), fd));
        }
        self.parent.as_ref().map(|(_, fd)| fd)
    }

    /// Records one path the walk met: a file or symlink as an entry, a directory holding
    /// `.git` as a nested repository (not descended into), anything unreadable as skipped.
    fn visit_entry(&mut self, entry: &ignore::DirEntry) -> WalkState {
        if entry.depth() == 0 {
            return WalkState::Continue;
        }
        let full = entry.path().as_os_str().as_bytes();
        let Some(rel) = full.strip_prefix(self.root).and_then(|r| r.strip_prefix(b"/")) else {
            return WalkState::Continue;
        };
        let name = entry.file_name().as_bytes();
        let dir = &full[..full.len() - name.len() - 1];
        let Some(parent) = self.parent_fd(dir) else { return WalkState::Continue };
        let Ok(st) = rustix::fs::statat(parent, OsStr::from_bytes(name), AtFlags::SYMLINK_NOFOLLOW) else {
            return WalkState::Continue; // gone since it was listed
        };
        let stat = Stat::of_raw(&st);
        let file_type = FileType::from_raw_mode(st.st_mode);
        let record = match file_type {
            FileType::Directory => {
                let mut git = name.to_vec();
                git.extend_from_slice(b"/.git");
                // Followed, as `Path::exists` would: a `.git` symlink marks a repository too.
                if rustix::fs::statat(parent, OsStr::from_bytes(&git), AtFlags::empty()).is_err() {
                    let Some(scope) = self.scope else { return WalkState::Continue };
                    let enter = scope(rel);
                    let dirs = if enter { &mut self.local.dirs.listed } else { &mut self.local.dirs.unlisted };
                    dirs.push(rel.to_vec());
                    return if enter { WalkState::Continue } else { WalkState::Skip };
                }
                match nested_commit(entry.path()) {
                    Ok(commit) => {
                        self.local.entries.push(Entry { path: rel.to_vec(), kind: Kind::Gitlink(commit), stat })
                    }
                    Err(reason) => {
                        self.local.skipped.push(Skipped { path: String::from_utf8_lossy(rel).into_owned(), reason })
                    }
                }
                return WalkState::Skip;
            }
            FileType::Symlink => match rustix::fs::readlinkat(parent, OsStr::from_bytes(name), Vec::new()) {
                Ok(target) => Entry { path: rel.to_vec(), kind: Kind::Symlink(target.into_bytes()), stat },
                // Gone or changed since it was listed: left out, with the reason.
                Err(e) => {
                    let reason = std::io::Error::from(e).to_string();
                    self.local.skipped.push(Skipped { path: String::from_utf8_lossy(rel).into_owned(), reason });
                    return WalkState::Continue;
                }
            },
            FileType::RegularFile => Entry { path: rel.to_vec(), kind: Kind::File, stat },
            _ => return WalkState::Continue, // sockets, fifos, devices
        };
        self.local.entries.push(record);
        WalkState::Continue
    }
}

/// Orders paths component by component (so a directory's entries are contiguous): the
/// same as comparing the bytes with `/` ranked below every other byte.
pub fn component_order(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
    let rank = |c: u8| if c == b'/' { 0u16 } else { u16::from(c) + 1 };
    // Paths of one directory share long prefixes: skip them eight bytes at a time.
    let n = a.len().min(b.len());
    let mut i = 0;
    while i + 8 <= n && a[i..i + 8] == b[i..i + 8] {
        i += 8;
    }
    match a[i..n].iter().zip(&b[i..n]).position(|(x, y)| x != y) {
        Some(j) => rank(a[i + j]).cmp(&rank(b[i + j])),
        None => a.len().cmp(&b.len()),
    }
}

/// The commit a nested repository has checked out, read without running git.
///
/// # Errors
/// A reason for people when there is none (an unborn branch) or it cannot be read.
pub fn nested_commit(dir: &Path) -> std::result::Result<String, String> {
    let mut git_dir = dir.join(".git");
    if git_dir.is_file() {
        // A worktree or submodule: `gitdir: PATH`.
        let text = std::fs::read_to_string(&git_dir).map_err(|e| format!("unreadable .git file: {e}"))?;
        let target = text.trim().strip_prefix("gitdir:").ok_or("malformed .git file")?.trim();
        git_dir = dir.join(target);
    }
    let head =
        std::fs::read_to_string(git_dir.join("HEAD")).map_err(|e| format!("nested repository without HEAD: {e}"))?;
    let head = head.trim();
    let Some(reference) = head.strip_prefix("ref:").map(str::trim) else {
        return valid_commit(head).ok_or_else(|| "nested repository with a malformed HEAD".to_string());
    };
    if let Ok(text) = std::fs::read_to_string(git_dir.join(reference)) {
        return valid_commit(text.trim()).ok_or_else(|| format!("malformed ref {reference}"));
    }
    // A worktree's refs live in the common dir.
    let common = std::fs::read_to_string(git_dir.join("commondir")).ok().map(|c| git_dir.join(c.trim()));
    for base in std::iter::once(git_dir.clone()).chain(common) {
        if let Ok(text) = std::fs::read_to_string(base.join(reference)) {
            return valid_commit(text.trim()).ok_or_else(|| format!("malformed ref {reference}"));
        }
        if let Ok(packed) = std::fs::read_to_string(base.join("packed-refs")) {
            for line in packed.lines() {
                if let Some((id, name)) = line.split_once(' ')
                    && name == reference
                {
                    return valid_commit(id).ok_or_else(|| format!("malformed packed ref {reference}"));
                }
            }
        }
    }
    Err(format!("nested repository with no commit yet ({reference} is unborn)"))
}

fn valid_commit(s: &str) -> Option<String> {
    ((s.len() == 40 || s.len() == 64) && s.bytes().all(|b| b.is_ascii_hexdigit())).then(|| s.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_and_dependency_folders_are_excluded_by_name() {
        for name in [
            ".env",
            ".env.example",
            ".env.local",
            ".envrc",
            "server.pem",
            "tls.key",
            "a.p12",
            "b.pfx",
            "id_rsa",
            "id_rsa.pub",
            "id_ed25519",
            ".netrc",
            ".npmrc",
            ".pypirc",
            ".git-credentials",
            "credentials.json",
            "prod.tfvars",
            "terraform.tfstate",
            "terraform.tfstate.backup",
            ".aws",
            ".ssh",
            ".gnupg",
            ".kube",
            "node_modules",
            ".venv",
            "__pycache__",
            ".git",
        ] {
            assert!(excluded(name.as_bytes(), None), "{name}");
        }
        assert!(excluded(b"config.json", Some(b".docker")));
        assert!(excluded(b"sec\xff.key", None) && excluded(b".env.\xff", None), "non-UTF-8 names too");
        for name in ["config.json", "env.rs", "keys.rs", "main.rs", "environment", "README.md", "keyboard.c"] {
            assert!(!excluded(name.as_bytes(), None), "{name}");
        }
    }

    #[test]
    fn a_stat_relative_to_the_parent_equals_the_stat_of_the_whole_path() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f"), b"x").unwrap();
        std::os::unix::fs::symlink("f", dir.path().join("l")).unwrap();
        std::fs::create_dir(dir.path().join("d")).unwrap();
        let parent = rustix::fs::open(dir.path(), OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()).unwrap();
        for name in ["f", "l", "d"] {
            let raw = rustix::fs::statat(&parent, name, AtFlags::SYMLINK_NOFOLLOW).unwrap();
            let whole = std::fs::symlink_metadata(dir.path().join(name)).unwrap();
            assert_eq!(Stat::of_raw(&raw), Stat::of(&whole), "{name}");
        }
    }

    #[test]
    fn component_order_keeps_directories_together() {
        let mut v = vec![b"a.b".to_vec(), b"a/z".to_vec(), b"a/b".to_vec(), b"a-c".to_vec()];
        v.sort_by(|a, b| component_order(a, b));
        assert_eq!(v, vec![b"a/b".to_vec(), b"a/z".to_vec(), b"a-c".to_vec(), b"a.b".to_vec()]);
    }

    #[test]
    fn component_order_is_byte_order_with_the_separator_lowest_at_any_length() {
        // The reference: '/' mapped below every byte (no name holds a NUL).
        let reference = |a: &[u8], b: &[u8]| {
            let key = |p: &[u8]| p.iter().map(|&c| if c == b'/' { 0 } else { c }).collect::<Vec<u8>>();
            key(a).cmp(&key(b))
        };
        let alphabet = b"a/.-z";
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut paths = Vec::new();
        for _ in 0..400 {
            let len = (next() % 40) as usize;
            paths.push((0..len).map(|_| alphabet[(next() % 5) as usize]).collect::<Vec<u8>>());
        }
        // Long shared prefixes, differing past the first eight-byte words.
        paths.push(b"drivers/gpu/drm/amd/a.c".to_vec());
        paths.push(b"drivers/gpu/drm/amd/a/b.c".to_vec());
        paths.push(b"drivers/gpu/drm/amd".to_vec());
        for a in &paths {
            for b in &paths {
                assert_eq!(component_order(a, b), reference(a, b), "{a:?} {b:?}");
            }
        }
    }

    #[test]
    fn nested_commit_reads_loose_and_packed_refs() {
        let dir = tempfile::tempdir().unwrap();
        let git = dir.path().join(".git");
        std::fs::create_dir_all(git.join("refs/heads")).unwrap();
        std::fs::write(git.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        assert!(nested_commit(dir.path()).unwrap_err().contains("no commit"));
        let id = "0123456789abcdef0123456789abcdef01234567";
        std::fs::write(git.join("packed-refs"), format!("# pack-refs\n{id} refs/heads/main\n")).unwrap();
        assert_eq!(nested_commit(dir.path()).unwrap(), id);
        let other = "89abcdef0123456789abcdef0123456789abcdef";
        std::fs::write(git.join("refs/heads/main"), format!("{other}\n")).unwrap();
        assert_eq!(nested_commit(dir.path()).unwrap(), other);
        std::fs::write(git.join("HEAD"), format!("{id}\n")).unwrap();
        assert_eq!(nested_commit(dir.path()).unwrap(), id);
    }
}
