//! The workspace walk: every path a snapshot may record, found in parallel, never
//! following a symlink, never entering a `.git` directory.
//!
//! Invariants:
//! - The ignore rules of [`rules`](crate::fs::rules) are honoured (`.gitignore`, `.ignore`,
//!   `.git/info/exclude`, and those of the directories above the workspace); the user's
//!   global git configuration is not. The walk finds exactly what the `ignore` crate's own
//!   walker found with the same options (held to it on random trees by a test).
//! - The unconditional exclusions of DESIGN.md §2.10 ([`excluded`]) are applied after the
//!   ignore rules and cannot be undone by them: no negation, no tracked status (turnback
//!   never reads a git index) brings a secret or a dependency folder back.
//! - A directory holding `.git` (other than the workspace root) is a nested repository:
//!   it is recorded as a pointer to its checked-out commit, read from `HEAD`, loose refs or
//!   `packed-refs` without running git, and never descended into.
//! - Symlinks are recorded as links (their target), never followed; every directory is
//!   opened relative to its parent with `O_NOFOLLOW`, so a directory swapped for a symlink
//!   mid-walk is not entered.
//! - turnback's own temporary files are never recorded; which files are its own the
//!   caller decides ([`OwnTemps`]), asked only of names shaped like one
//!   ([`files::temp_phase`]): a name alone never leaves a file out.
//! - Entries come out in component order ([`component_order`]) without a sort of the whole.

use std::ffi::OsStr;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use rayon::prelude::*;
use rustix::fs::{AtFlags, FileType, Mode, OFlags};

use crate::error::{IoResultExt, Result};
use crate::fs::files;
use crate::fs::relpath::{join, name_of};
use crate::fs::rules::{self, Rules};

/// What a walked path is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A regular file.
    File,
    /// A symlink with this target.
    Symlink(Vec<u8>),
    /// A nested repository checked out at this commit.
    Gitlink(String),
}

/// The stat fields a snapshot compares with its cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stat {
    /// `st_mode` (type and permissions).
    pub mode: u32,
    /// Size in bytes.
    pub size: u64,
    /// Modification time, ns since the epoch (saturating: past ±292 years it stays at the
    /// bound, and the status change time, which no one sets, still tells a change).
    pub mtime_ns: i64,
    /// Status change time, ns since the epoch.
    pub ctime_ns: i64,
    /// Device.
    pub device: u64,
    /// Inode.
    pub inode: u64,
}

impl Stat {
    /// The stat fields of `m`.
    pub(crate) fn of(m: &std::fs::Metadata) -> Self {
        Stat {
            mode: m.mode(),
            size: m.size(),
            mtime_ns: nanos(m.mtime(), m.mtime_nsec()),
            ctime_ns: nanos(m.ctime(), m.ctime_nsec()),
            device: m.dev(),
            inode: m.ino(),
        }
    }

    /// The stat fields of a raw `stat` (from `fstatat`): the same values [`Stat::of`] gives
    /// for the same file (the field types differ between platforms, hence the casts).
    #[allow(clippy::useless_conversion, clippy::unnecessary_cast)]
    fn of_raw(st: &rustix::fs::Stat) -> Self {
        Stat {
            mode: st.st_mode as u32,
            size: st.st_size as u64,
            mtime_ns: nanos(st.st_mtime as i64, st.st_mtime_nsec as i64),
            ctime_ns: nanos(st.st_ctime as i64, st.st_ctime_nsec as i64),
            device: st.st_dev as u64,
            inode: st.st_ino as u64,
        }
    }
}

/// Seconds and nanoseconds as nanoseconds, saturating at the bounds of `i64`.
fn nanos(seconds: i64, nanos: i64) -> i64 {
    seconds.saturating_mul(1_000_000_000).saturating_add(nanos)
}

/// One recorded path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
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

/// Everything one walk found: its entries, or what its caller kept of each
/// ([`walk_keeping`]).
#[derive(Debug)]
pub(crate) struct Walk<T = Entry> {
    /// Recorded paths, sorted by path components (or what a keeper kept of them, an item
    /// of which may stand for several: [`Keeper::join`]).
    pub entries: Vec<T>,
    /// Nested repositories that could not be recorded, and other notable skips.
    pub skipped: Vec<Skipped>,
    /// How many paths the unconditional exclusions removed.
    pub excluded: u64,
    /// In a partial walk ([`walk_scoped`]): the directories listed whole, and those met but
    /// not entered (not nested repositories). Empty in a full walk.
    pub dirs: ScopedDirs,
}

impl<T> Default for Walk<T> {
    fn default() -> Self {
        Walk { entries: Vec::new(), skipped: Vec::new(), excluded: 0, dirs: ScopedDirs::default() }
    }
}

/// What a walk keeps of each entry it records ([`walk_keeping`]), made on the walk's threads
/// directory by directory: [`keep`](Keeper::keep) is given each entry of a directory in
/// component order with the directory's own state (new at its first entry), and
/// [`close`](Keeper::close) that state and what was kept of the directory's entries once
/// they are all found (after joining), before anything below it is walked. What is kept of
/// an entry may be [`join`](Keeper::join)ed to what was kept of the one just before it
/// in the same directory (never across a subdirectory's entries, nor across directories:
/// a keeper that wants the longest runs joins again once the walk is flattened): a kept
/// item may stand for several entries, and a walk holds fewer items than entries.
pub(crate) trait Keeper<T>: Sync {
    /// What the keeper carries from one entry of a directory to the next.
    type Dir: Default;

    /// What is kept of `entry`.
    fn keep(&self, dir: &mut Self::Dir, entry: Entry) -> T;

    /// Takes `next` into `last` if it can (then `next` is dropped, not kept after it).
    fn join(&self, _last: &mut T, _next: &T) -> bool {
        false
    }

    /// Finishes what was kept of a directory's entries.
    fn close(&self, _dir: Self::Dir, _kept: &mut [T]) {}
}

/// Keeps every entry as found.
struct AsFound;

impl Keeper<Entry> for AsFound {
    type Dir = ();

    fn keep(&self, _: &mut (), entry: Entry) -> Entry {
        entry
    }
}

/// The directories a partial walk listed whole and those it did not enter.
#[derive(Debug, Default)]
pub(crate) struct ScopedDirs {
    /// Entered: every entry of theirs the rules keep is in the walk.
    pub listed: Vec<Vec<u8>>,
    /// Met in a listed directory but not entered.
    pub unlisted: Vec<Vec<u8>>,
}

/// Which directories (relative, `/`-separated) a partial walk enters.
pub(crate) type Scope<'a> = &'a (dyn Fn(&[u8]) -> bool + Sync);

/// Which files (relative, `/`-separated) are turnback's own temporary files right now,
/// never recorded. Asked only of names shaped like one ([`files::temp_phase`]), after the
/// name was listed and before the file is stat-ed, so a temporary file whose write ended
/// meanwhile is found gone rather than recorded (see `checkpoint::own_temp`).
pub(crate) type OwnTemps<'a> = &'a (dyn Fn(&[u8]) -> bool + Sync);

/// No file is turnback's own (a tree no write of turnback's is in).
#[cfg(test)]
pub(crate) const NO_OWN_TEMPS: OwnTemps<'static> = &|_: &[u8]| false;

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
pub(crate) fn excluded(name: &[u8], parent: Option<&[u8]>) -> bool {
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
#[cfg(test)]
pub(crate) fn walk(root: &Path, skip_dirs: &[std::path::PathBuf]) -> Result<Walk> {
    walk_scoped(root, skip_dirs, None, NO_OWN_TEMPS)
}

/// The walk (see [the module](self)), entering only the directories `scope` accepts (the
/// root is always listed): the same rules with the same ignore files, so what it finds in a
/// directory it lists is exactly what a full walk finds there.
///
/// Each directory is opened once, relative to its parent and without following a symlink;
/// its listing gives the names and types, and each file is stat-ed relative to it
/// (`fstatat`: one component for the kernel to resolve). Subdirectories are walked in
/// parallel (rayon), and each directory's findings come back in component order, so the
/// walk needs no sort.
///
/// # Errors
/// `io` if `root` cannot be read.
pub(crate) fn walk_scoped(
    root: &Path,
    skip_dirs: &[std::path::PathBuf],
    scope: Option<Scope<'_>>,
    own_temps: OwnTemps<'_>,
) -> Result<Walk> {
    walk_keeping(root, skip_dirs, scope, own_temps, &AsFound)
}

/// [`walk_scoped`], keeping of each entry what `keeper` makes of it as soon as it is found
/// (a snapshot keeps a file its stat cache describes unchanged as a reference to the
/// cache's entry), so that what the walk holds is what `keeper` made.
///
/// # Errors
/// `io` if `root` cannot be read.
pub(crate) fn walk_keeping<T: Send, K: Keeper<T>>(
    root: &Path,
    skip_dirs: &[std::path::PathBuf],
    scope: Option<Scope<'_>>,
    own_temps: OwnTemps<'_>,
    keeper: &K,
) -> Result<Walk<T>> {
    let root = root.canonicalize().context(root)?;
    let root_bytes = root.as_os_str().as_bytes();
    let skip = skip_dirs
        .iter()
        .filter_map(|d| {
            let d = d.canonicalize().unwrap_or_else(|_| d.clone());
            d.as_os_str().as_bytes().strip_prefix(root_bytes)?.strip_prefix(b"/").map(<[u8]>::to_vec)
        })
        .collect();
    let walker = Walker {
        root: &root,
        root_name: root.file_name().map(OsStrExt::as_bytes),
        skip,
        scope,
        own_temps,
        keeper,
        excluded: AtomicU64::new(0),
        notes: Mutex::new(Notes::default()),
    };
    let fd = open_dir(rustix::fs::CWD, root.as_os_str()).context(&root)?;
    let mut above = Vec::new();
    let rules = Rules::above(&root, &mut above);
    walker.note_problems(above);
    let found = walker.dir(&fd, b"", &rules);
    let Notes { mut skipped, dirs } = walker.notes.into_inner().unwrap_or_else(|p| p.into_inner());
    let mut entries = Vec::with_capacity(found.count);
    found.flatten_into(&mut entries);
    skipped.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(Walk { entries, skipped, excluded: walker.excluded.into_inner(), dirs })
}

/// What is rare in a walk (skipped paths, a partial walk's directories), shared between
/// its threads under a lock.
#[derive(Default)]
struct Notes {
    skipped: Vec<Skipped>,
    dirs: ScopedDirs,
}

/// What one walk shares between its threads.
struct Walker<'a, K> {
    /// Absolute and canonical.
    root: &'a Path,
    /// The root's own name: the parent name of its top-level entries.
    root_name: Option<&'a [u8]>,
    /// Directories never entered (relative to the root).
    skip: Vec<Vec<u8>>,
    scope: Option<Scope<'a>>,
    own_temps: OwnTemps<'a>,
    keeper: &'a K,
    excluded: AtomicU64,
    notes: Mutex<Notes>,
}

/// One directory's findings in component order: what was kept of its files and links, and,
/// each at the place it goes among them, what its subdirectories found. An item costs what
/// the keeper made of it (not an item and a tree node).
struct Found<T> {
    entries: Vec<T>,
    /// Each subdirectory's findings, with the number of this directory's items before it.
    dirs: Vec<(usize, Found<T>)>,
    /// Items kept here and below.
    count: usize,
}

impl<T> Default for Found<T> {
    fn default() -> Self {
        Found { entries: Vec::new(), dirs: Vec::new(), count: 0 }
    }
}

impl<T> Found<T> {
    fn flatten_into(self, out: &mut Vec<T>) {
        let mut entries = self.entries.into_iter();
        let mut taken = 0;
        for (at, found) in self.dirs {
            out.extend(entries.by_ref().take(at - taken));
            taken = at;
            found.flatten_into(out);
        }
        out.extend(entries);
    }
}

/// One name of a directory's listing, as the path it names (one allocation per name).
struct Listed {
    /// The directory's path, `/`, and the name (just the name in the root).
    path: Vec<u8>,
    /// Where the name starts in `path`.
    name_at: usize,
    file_type: FileType,
}

impl Listed {
    /// The name. Names hold no `/`, which component order ranks lowest, so sorting a
    /// listing by name puts each directory where its entries belong among its siblings'.
    fn name(&self) -> &[u8] {
        &self.path[self.name_at..]
    }
}

/// Opens directory `name` in `parent` (or an absolute path, with [`rustix::fs::CWD`]),
/// never through a symlink.
pub(crate) fn open_dir(parent: impl rustix::fd::AsFd, name: &OsStr) -> rustix::io::Result<OwnedFd> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    rustix::fs::openat(parent, name, flags, Mode::empty())
}

/// Calls `add` with each name and type in open directory `fd`, read in large batches
/// (`getdents64` into one buffer, no allocation per name).
#[cfg(target_os = "linux")]
pub(crate) fn read_names(fd: &OwnedFd, add: &mut dyn FnMut(&[u8], FileType)) -> rustix::io::Result<()> {
    let mut buf = Vec::with_capacity(32 * 1024);
    let mut dir = rustix::fs::RawDir::new(fd, buf.spare_capacity_mut());
    while let Some(entry) = dir.next() {
        let entry = entry?;
        add(entry.file_name().to_bytes(), entry.file_type());
    }
    Ok(())
}

/// Calls `add` with each name and type in open directory `fd` (read through a duplicate
/// of it, which the listing consumes).
#[cfg(not(target_os = "linux"))]
pub(crate) fn read_names(fd: &OwnedFd, add: &mut dyn FnMut(&[u8], FileType)) -> rustix::io::Result<()> {
    let listing = fd.try_clone().map_err(|e| rustix::io::Errno::from_io_error(&e).unwrap_or(rustix::io::Errno::IO))?;
    let mut dir = rustix::fs::Dir::new(listing)?;
    while let Some(entry) = dir.read() {
        let entry = entry?;
        add(entry.file_name().to_bytes(), entry.file_type());
    }
    Ok(())
}

impl<K> Walker<'_, K> {
    fn note_skipped(&self, rel: &[u8], reason: String) {
        let path = String::from_utf8_lossy(rel).into_owned();
        self.notes.lock().unwrap_or_else(|p| p.into_inner()).skipped.push(Skipped { path, reason });
    }

    /// Notes ignore files that could not be read whole or hold invalid rules.
    fn note_problems(&self, problems: Vec<rules::Problem>) {
        for p in problems {
            self.note_skipped(p.path.as_os_str().as_bytes(), p.reason);
        }
    }

    /// The names in open directory `fd` (without `.` and `..`) in component order, and
    /// which ignore-related names are among them; `None` (noted) if it cannot be read.
    fn list(&self, fd: &OwnedFd, rel: &[u8]) -> Option<(Vec<Listed>, rules::Markers)> {
        let (mut names, mut found) = (Vec::new(), rules::Markers::default());
        let mut add = |name: &[u8], file_type: FileType| {
            if name == b"." || name == b".." {
                return;
            }
            found.note(name);
            let path = join(rel, name);
            names.push(Listed { name_at: path.len() - name.len(), path, file_type });
        };
        if let Err(e) = read_names(fd, &mut add) {
            self.note_skipped(rel, std::io::Error::from(e).to_string());
            return None;
        }
        // One directory's names hold no separator: their component order is byte order.
        names.sort_unstable_by(|a, b| a.name().cmp(b.name()));
        Some((names, found))
    }

    /// Walks directory `rel` (open as `fd`; `rules` are those of its parent): its findings in
    /// component order.
    fn dir<T: Send>(&self, fd: &OwnedFd, rel: &[u8], rules: &Rules) -> Found<T>
    where
        K: Keeper<T>,
    {
        let Some((names, found)) = self.list(fd, rel) else { return Found::default() };
        let mut notes = Vec::new();
        let rules = rules.enter(self.root, rel, found, &mut notes);
        self.note_problems(notes);
        let parent_name = if rel.is_empty() { self.root_name } else { Some(name_of(rel)) };
        let mut entries: Vec<T> = Vec::with_capacity(names.len());
        let mut subdirs = Vec::new();
        let mut state = K::Dir::default();
        for listed in names {
            match self.visit(fd, listed, &rules, parent_name) {
                Visit::Skip => {}
                Visit::Record(entry) => {
                    let kept = self.keeper.keep(&mut state, entry);
                    // Joined only to an item after the last subdirectory's place.
                    let joinable = subdirs.last().is_none_or(|(at, _)| *at < entries.len());
                    let joined = joinable && entries.last_mut().is_some_and(|last| self.keeper.join(last, &kept));
                    if !joined {
                        entries.push(kept);
                    }
                }
                Visit::Enter(path) => subdirs.push((entries.len(), path)),
            }
        }
        self.keeper.close(state, &mut entries);
        // Made for every name listed, subdirectories too; held until the walk is flattened.
        entries.shrink_to_fit();
        let dirs: Vec<(usize, Found<T>)> = subdirs
            .into_par_iter()
            .map(|(at, path)| {
                let found = match open_dir(fd, OsStr::from_bytes(name_of(&path))) {
                    Ok(child) => self.dir(&child, &path, &rules),
                    Err(e) => {
                        self.note_skipped(&path, std::io::Error::from(e).to_string());
                        Found::default()
                    }
                };
                (at, found)
            })
            .collect();
        let count = entries.len() + dirs.iter().map(|(_, found)| found.count).sum::<usize>();
        Found { entries, dirs, count }
    }

    /// The one decision about a listed name in open directory `fd`: left out
    /// (ignored, turnback's own temporary file, excluded — counted —, gone, or of a kind
    /// not recorded), recorded (a file, a symlink, a nested repository), or a directory to
    /// enter (in a partial walk, only if the scope takes it).
    fn visit(&self, fd: &OwnedFd, listed: Listed, rules: &Rules, parent: Option<&[u8]>) -> Visit {
        let Listed { path, name_at, file_type: listed_type } = listed;
        let name = &path[name_at..];
        // A type the listing does not give is stat-ed first: the rules ask whether it is a
        // directory.
        let mut stat = None;
        let mut file_type = listed_type;
        if file_type == FileType::Unknown {
            let Ok(st) = rustix::fs::statat(fd, OsStr::from_bytes(name), AtFlags::SYMLINK_NOFOLLOW) else {
                return Visit::Skip; // gone since it was listed
            };
            file_type = FileType::from_raw_mode(st.st_mode);
            stat = Some(st);
        }
        let is_dir = file_type == FileType::Directory;
        // The ignore rules first, then turnback's own temporary files (never counted), then
        // the exclusions (counted, but `.git` itself, which is never content).
        if rules.ignored(&path, is_dir) {
            return Visit::Skip;
        }
        if !is_dir && files::temp_phase(name).is_some() {
            if (self.own_temps)(&path) {
                return Visit::Skip;
            }
            // Anyone's file: stat-ed after the question (a temporary file gone meanwhile
            // is then found gone, not recorded).
            stat = None;
        }
        if excluded(name, parent) || self.skip.contains(&path) {
            if name != b".git" {
                self.excluded.fetch_add(1, Ordering::Relaxed);
            }
            return Visit::Skip;
        }
        if is_dir {
            return match self.nested(fd, name, &path) {
                Nested::Yes(entry) => Visit::Record(entry),
                Nested::Unreadable => Visit::Skip,
                Nested::No => match self.scope {
                    None => Visit::Enter(path),
                    Some(scope) => {
                        let enter = scope(&path);
                        let mut notes = self.notes.lock().unwrap_or_else(|p| p.into_inner());
                        let dirs = if enter { &mut notes.dirs.listed } else { &mut notes.dirs.unlisted };
                        dirs.push(path.clone());
                        if enter { Visit::Enter(path) } else { Visit::Skip }
                    }
                },
            };
        }
        let stat =
            match stat.map_or_else(|| rustix::fs::statat(fd, OsStr::from_bytes(name), AtFlags::SYMLINK_NOFOLLOW), Ok) {
                Ok(st) => st,
                Err(_) => return Visit::Skip, // gone since it was listed
            };
        let kind = match FileType::from_raw_mode(stat.st_mode) {
            FileType::RegularFile => Kind::File,
            FileType::Symlink => match rustix::fs::readlinkat(fd, OsStr::from_bytes(name), Vec::new()) {
                Ok(target) => Kind::Symlink(target.into_bytes()),
                // Gone or changed since it was listed: left out, with the reason.
                Err(e) => {
                    self.note_skipped(&path, std::io::Error::from(e).to_string());
                    return Visit::Skip;
                }
            },
            // Sockets, fifos, devices; or replaced by a directory since it was listed.
            _ => return Visit::Skip,
        };
        Visit::Record(Entry { path, kind, stat: Stat::of_raw(&stat) })
    }

    /// Whether directory `name` (at `path`) holds `.git`, and if so the entry pointing at
    /// its checked-out commit (noted if that cannot be read).
    fn nested(&self, fd: &OwnedFd, name: &[u8], path: &[u8]) -> Nested {
        let mut git = name.to_vec();
        git.extend_from_slice(b"/.git");
        // Followed, as `Path::exists` would: a `.git` symlink marks a repository too.
        if rustix::fs::statat(fd, OsStr::from_bytes(&git), AtFlags::empty()).is_err() {
            return Nested::No;
        }
        let Ok(stat) = rustix::fs::statat(fd, OsStr::from_bytes(name), AtFlags::SYMLINK_NOFOLLOW) else {
            return Nested::Unreadable; // gone since it was listed
        };
        match nested_commit(&self.root.join(OsStr::from_bytes(path))) {
            Ok(commit) => {
                Nested::Yes(Entry { path: path.to_vec(), kind: Kind::Gitlink(commit), stat: Stat::of_raw(&stat) })
            }
            Err(reason) => {
                self.note_skipped(path, reason);
                Nested::Unreadable
            }
        }
    }
}

/// What a walk does with one listed name ([`Walker::visit`]).
enum Visit {
    Skip,
    Record(Entry),
    /// A directory to walk, at this path.
    Enter(Vec<u8>),
}

/// Whether a directory is a nested repository (never entered either way).
enum Nested {
    No,
    Yes(Entry),
    Unreadable,
}

/// Orders paths component by component (so a directory's entries are contiguous): the
/// same as comparing the bytes with `/` ranked below every other byte.
pub(crate) fn component_order(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
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
pub(crate) fn nested_commit(dir: &Path) -> std::result::Result<String, String> {
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

    /// What the `ignore` crate's own walker finds with the options turnback walked with
    /// before it had its own walker: the reference [`walk`] is held to. Each path with its
    /// kind, and the count of excluded paths.
    fn reference_walk(root: &Path) -> (Vec<(Vec<u8>, String)>, u64) {
        use std::sync::{Arc, Mutex};
        let found = Arc::new(Mutex::new(Vec::new()));
        let excluded_count = Arc::new(AtomicU64::new(0));
        let (nested, counter) = (found.clone(), excluded_count.clone());
        let root_bytes = root.as_os_str().as_bytes().to_vec();
        let mut builder = ignore::WalkBuilder::new(root);
        builder
            .hidden(false)
            .follow_links(false)
            .git_global(false)
            .git_ignore(true)
            .git_exclude(true)
            .ignore(true)
            .parents(true)
            .require_git(false);
        builder.filter_entry(move |e| {
            if e.depth() == 0 {
                return true;
            }
            let path = e.path().as_os_str().as_bytes();
            let name = e.file_name().as_bytes();
            let parent = path[..path.len() - name.len()]
                .strip_suffix(b"/")
                .map(|p| p.rsplit(|c| *c == b'/').next().unwrap_or_default());
            if excluded(name, parent) {
                if name != b".git" {
                    counter.fetch_add(1, Ordering::Relaxed);
                }
                return false;
            }
            if e.file_type().is_some_and(|t| t.is_dir()) && e.path().join(".git").exists() {
                if let Ok(commit) = nested_commit(e.path()) {
                    let rel = path[root_bytes.len() + 1..].to_vec();
                    nested.lock().unwrap().push((rel, format!("repo {commit}")));
                }
                return false;
            }
            true
        });
        let mut all: Vec<(Vec<u8>, String)> = Vec::new();
        for e in builder.build().flatten() {
            if e.depth() == 0 {
                continue;
            }
            let rel = e.path().as_os_str().as_bytes()[root.as_os_str().len() + 1..].to_vec();
            let t = e.file_type().unwrap();
            if t.is_file() {
                all.push((rel, "file".into()));
            } else if t.is_symlink() {
                let target = std::fs::read_link(e.path()).unwrap();
                all.push((rel, format!("link {}", target.display())));
            }
        }
        all.extend(found.lock().unwrap().drain(..));
        all.sort_by(|a, b| component_order(&a.0, &b.0));
        (all, excluded_count.load(Ordering::Relaxed))
    }

    fn kinds(walk: &Walk) -> Vec<(Vec<u8>, String)> {
        walk.entries
            .iter()
            .map(|e| {
                let kind = match &e.kind {
                    Kind::File => "file".to_string(),
                    Kind::Symlink(t) => format!("link {}", String::from_utf8_lossy(t)),
                    Kind::Gitlink(c) => format!("repo {c}"),
                };
                (e.path.clone(), kind)
            })
            .collect()
    }

    /// A random workspace: nested directories of files and symlinks named so that ignore
    /// rules, exclusions and component order all have something to decide; `.gitignore` and
    /// `.ignore` files of random rules (negations, anchors, directory-only and `**` rules,
    /// comments, escapes, trailing spaces, CRLF, a BOM) at any depth and in the directory
    /// above the workspace; the repository's `info/exclude`; nested repositories, one
    /// without a commit.
    fn random_tree(base: &Path, seed: u64) -> std::path::PathBuf {
        const NAMES: &[&str] = &[
            "a",
            "b",
            "c.txt",
            "d.log",
            "e.o",
            "build",
            "keep.log",
            "x",
            "y.c",
            "sub",
            ".hidden",
            "node_modules",
            ".env",
            "Foo",
            "a.b",
            "a-c",
            "deep",
            "a b",
            "z.key",
        ];
        const RULES: &[&str] = &[
            "*.log",
            "!keep.log",
            "build/",
            "/x",
            "sub/**/y.c",
            "**/deep",
            "a",
            "!a",
            "*.o",
            "d*",
            "sub/",
            "!sub/",
            "/sub/a",
            "Foo/",
            "# comment",
            "\\#x",
            "a.b ",
            "y.c\r",
            "*",
            "!*.c",
            "!*/",
            "deep/**",
            "**/b",
            "a/",
            "[ab]",
            "c.tx?",
            "!/Foo",
            "**",
            "!.hidden",
            "*.txt",
        ];
        // Above the workspace: rules that name paths inside it from there.
        const OUTER: &[&str] = &["ws/a", "ws/sub/", "/ws/b", "ws/**/deep", "!ws/x", "*.txt", "ws/Foo/a", "x"];
        let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        let mut next = move |n: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % n as u64) as usize
        };
        let rules = |next: &mut dyn FnMut(usize) -> usize, pool: &[&str]| {
            let mut text = if next(6) == 0 { "\u{feff}".to_string() } else { String::new() };
            for _ in 0..1 + next(4) {
                text.push_str(pool[next(pool.len())]);
                text.push_str(if next(5) == 0 { "\r\n" } else { "\n" });
            }
            text
        };
        if next(3) == 0 {
            std::fs::write(base.join(".gitignore"), rules(&mut next, OUTER)).unwrap();
        }
        if next(4) == 0 {
            std::fs::write(base.join(".ignore"), rules(&mut next, OUTER)).unwrap();
        }
        let ws = base.join("ws");
        std::fs::create_dir(&ws).unwrap();
        if next(2) == 0 {
            std::fs::create_dir_all(ws.join(".git/info")).unwrap();
            std::fs::write(ws.join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
            std::fs::write(ws.join(".git/info/exclude"), rules(&mut next, RULES)).unwrap();
        }
        let mut dirs = vec![(ws.clone(), 0)];
        while let Some((dir, depth)) = dirs.pop() {
            if next(3) == 0 {
                std::fs::write(dir.join(".gitignore"), rules(&mut next, RULES)).unwrap();
            }
            if next(6) == 0 {
                std::fs::write(dir.join(".ignore"), rules(&mut next, RULES)).unwrap();
            }
            for _ in 0..next(7) {
                let path = dir.join(NAMES[next(NAMES.len())]);
                if path.symlink_metadata().is_ok() {
                    continue;
                }
                match next(10) {
                    0..=3 if depth < 4 => {
                        std::fs::create_dir(&path).unwrap();
                        dirs.push((path, depth + 1));
                    }
                    4 => std::os::unix::fs::symlink(NAMES[next(NAMES.len())], &path).unwrap(),
                    5 if depth > 0 => {
                        std::fs::create_dir_all(path.join(".git/refs/heads")).unwrap();
                        std::fs::write(path.join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
                        if next(3) != 0 {
                            std::fs::write(path.join(".git/refs/heads/main"), format!("{:040x}\n", next(1 << 30)))
                                .unwrap();
                        }
                        std::fs::write(path.join("inside"), b"never walked").unwrap();
                    }
                    _ => std::fs::write(&path, b"x").unwrap(),
                }
            }
        }
        ws
    }

    #[test]
    fn a_walk_leaves_out_only_the_temporary_files_its_caller_says_are_turnbacks() {
        let dir = tempfile::tempdir().unwrap();
        let ours = "sub/.a.txt.turnback-01a2318f0d4b7c2e9a5f3b6d8e1c2a47.part";
        let look_alikes = [
            ".a.turnback-0123456789abcdef0123456789abcdef.part",
            "sub/.b.turnback-0123456789abcdef0123456789abcdef.tmp",
        ];
        for rel in look_alikes.iter().chain([&ours, &"sub/a.txt"]) {
            std::fs::create_dir_all(dir.path().join(rel).parent().unwrap()).unwrap();
            std::fs::write(dir.path().join(rel), rel).unwrap();
        }
        let asked = Mutex::new(Vec::new());
        let own = |rel: &[u8]| {
            asked.lock().unwrap().push(String::from_utf8_lossy(rel).into_owned());
            rel == ours.as_bytes()
        };
        let walked = walk_scoped(dir.path(), &[], None, &own).unwrap();
        let paths: Vec<String> = walked.entries.iter().map(|e| String::from_utf8_lossy(&e.path).into_owned()).collect();
        assert_eq!(paths, [look_alikes[0], look_alikes[1], "sub/a.txt"], "look-alikes are anyone's files");
        let mut asked = asked.into_inner().unwrap();
        asked.sort();
        assert_eq!(asked, [look_alikes[0], ours, look_alikes[1]], "asked only of names shaped like temporary ones");
    }

    #[test]
    fn the_walk_finds_what_the_ignore_crates_walker_finds_on_random_trees() {
        for seed in 0..300 {
            let base = tempfile::tempdir().unwrap();
            let ws = random_tree(base.path(), seed);
            let (expected, excluded) = reference_walk(&ws);
            let walked = walk(&ws, &[]).unwrap();
            assert_eq!(kinds(&walked), expected, "seed {seed}");
            assert_eq!(walked.excluded, excluded, "seed {seed}: excluded count");
            let order: Vec<&[u8]> = walked.entries.iter().map(|e| e.path.as_slice()).collect();
            assert!(order.is_sorted_by(|a, b| component_order(a, b).is_lt()), "seed {seed}: component order");
        }
    }

    /// A linked worktree's `.git` is a file naming its git directory, whose `commondir`
    /// leads to the main repository's: `info/exclude` is read from there, as git does.
    #[test]
    fn a_worktree_reads_info_exclude_from_its_main_repository() {
        let base = tempfile::tempdir().unwrap();
        let main_git = base.path().join("main/.git");
        let linked = main_git.join("worktrees/wt");
        std::fs::create_dir_all(main_git.join("info")).unwrap();
        std::fs::create_dir_all(&linked).unwrap();
        std::fs::write(main_git.join("info/exclude"), "secret.txt\n").unwrap();
        std::fs::write(linked.join("commondir"), "../..\n").unwrap();
        let wt = base.path().join("wt");
        std::fs::create_dir_all(&wt).unwrap();
        std::fs::write(wt.join(".git"), format!("gitdir: {}\n", linked.display())).unwrap();
        std::fs::write(wt.join("secret.txt"), "excluded").unwrap();
        std::fs::write(wt.join("kept.txt"), "kept").unwrap();
        let walked = walk(&wt, &[]).unwrap();
        let paths: Vec<&[u8]> = walked.entries.iter().map(|e| e.path.as_slice()).collect();
        assert_eq!(paths, [&b"kept.txt"[..]], "info/exclude of the main repository applies");
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
