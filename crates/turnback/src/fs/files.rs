//! Reading and replacing workspace files without ever following a symlink.
//!
//! Invariants:
//! - Every access starts from the workspace root's directory descriptor and opens each
//!   parent component with `O_NOFOLLOW | O_DIRECTORY`: a symlinked parent is refused
//!   (`path-rejected`, "behind a symlink"), even if it was swapped in after validation.
//!   The final component is read with `O_NOFOLLOW` and a symlink there is refused too.
//! - A replacement is atomic: the new bytes go to a temporary file in the same directory,
//!   which is fsynced, given the old file's mode, renamed over the target, and then the
//!   directory is fsynced. A batch of replacements ([`Parent::stage`],
//!   [`Parent::seal_staged`], [`Parent::swap_synced`], [`Parent::remove_if_unsynced`])
//!   writes all its temporary files, makes them durable with one sync of the file system
//!   ([`FileSystem::sync`]) before any takes its swapping name (or, for a create, its
//!   target's name: [`Parent::create_staged`]), and syncs once more after the swaps,
//!   before the batch counts as done. A crash leaves the old file or the new one, never a
//!   mix, plus at most one temporary file per path, whose name is derived from the
//!   checkpoint id ([`temp_name`]) so reconcile can find and remove it.
//! - A temporary file's name says how far its write got ([`TempPhase`]): bytes are written
//!   under the *writing* name, and only a complete, synced file leaves it — renamed to the
//!   *swapping* name from which it is swapped in, or, where nothing is to be displaced,
//!   straight to the target's name with no-replace. A file under a writing name is therefore
//!   always turnback's own, whatever it holds; only one under a swapping name can hold
//!   content a swap displaced. Every error path removes the temporary file it made (a
//!   displaced file excepted: that is someone's content).

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;
use serde::{Deserialize, Serialize};

use crate::base::failpoint;
use crate::error::{Error, ErrorCode, IoResultExt, Result};
use crate::fs::body::{Body, HELD_MAX, Source};
use crate::fs::relpath::RelPath;

/// The identity and shape of a file at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct FileIdentity {
    /// Device id.
    pub device: u64,
    /// Inode number.
    pub inode: u64,
    /// Permission and type bits (`st_mode`).
    pub mode: u32,
    /// Size in bytes.
    pub size: u64,
    /// Modification time, ns since epoch.
    pub mtime_ns: i128,
    /// Status-change time, ns since epoch.
    pub ctime_ns: i128,
}

impl FileIdentity {
    fn of(st: &rustix::fs::Stat) -> Self {
        FileIdentity {
            device: st.st_dev,
            inode: st.st_ino,
            mode: st.st_mode,
            size: st.st_size as u64,
            mtime_ns: i128::from(st.st_mtime) * 1_000_000_000 + i128::from(st.st_mtime_nsec),
            ctime_ns: i128::from(st.st_ctime) * 1_000_000_000 + i128::from(st.st_ctime_nsec),
        }
    }

    /// The permission bits alone.
    pub fn permissions(&self) -> u32 {
        self.mode & 0o7777
    }

    /// Whether it names a file (device and inode): a state a snapshot recorded has its
    /// mode and size, but no device or inode (both 0).
    pub fn names_a_file(&self) -> bool {
        (self.device, self.inode) != (0, 0)
    }
}

/// What is at a path right now.
#[derive(Debug, Clone)]
pub(crate) enum Current {
    /// Nothing.
    Absent,
    /// A regular file with this content.
    File {
        /// Its content (held only when small: [`Body`]).
        body: Body,
        /// Its identity.
        identity: FileIdentity,
    },
}

/// What stands on the way to a path where a directory should be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum InTheWay {
    /// A symlink (never followed).
    Symlink,
    /// A regular file.
    File,
    /// Anything else that is not a directory.
    Other,
}

/// The nearest ancestor of `rel` (relative to `root`, as bytes) that exists and is not a
/// directory, with what it is; `None` if every ancestor is a directory or one is missing.
/// Undo plans ask it to tell a path behind a symlink from one behind a file they delete.
pub(crate) fn not_a_directory_above<'a>(root: &Path, rel: &'a [u8]) -> Option<(&'a [u8], InTheWay)> {
    for (slash, _) in rel.iter().enumerate().filter(|(_, b)| **b == b'/') {
        let ancestor = &rel[..slash];
        let meta = std::fs::symlink_metadata(root.join(OsStr::from_bytes(ancestor))).ok()?;
        let kind = meta.file_type();
        if kind.is_dir() {
            continue;
        }
        let what = if kind.is_symlink() {
            InTheWay::Symlink
        } else if kind.is_file() {
            InTheWay::File
        } else {
            InTheWay::Other
        };
        return Some((ancestor, what));
    }
    None
}

/// How deep [`Parent::clear_empty_dir`] goes before it leaves a tree alone.
const CLEAR_DEPTH: usize = 64;

/// Removes `name` in `dir` if it is a directory of nothing but such directories (deepest
/// first); true if it did.
fn clear_dirs(dir: impl AsFd, name: &OsStr, depth: usize) -> bool {
    let is_dir = rustix::fs::statat(dir.as_fd(), name, AtFlags::SYMLINK_NOFOLLOW)
        .is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Directory);
    if !is_dir || depth > CLEAR_DEPTH {
        return false;
    }
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let Ok(fd) = rustix::fs::openat(dir.as_fd(), name, flags, Mode::empty()) else { return false };
    let Ok(mut entries) = rustix::fs::Dir::read_from(&fd) else { return false };
    let mut children = Vec::new();
    while let Some(Ok(entry)) = entries.read() {
        let child = entry.file_name().to_bytes();
        if child != b"." && child != b".." {
            children.push(OsString::from_vec(child.to_vec()));
        }
    }
    // Every child must go for this one to; stop at the first that cannot.
    children.iter().all(|child| clear_dirs(&fd, child, depth + 1))
        && rustix::fs::unlinkat(dir.as_fd(), name, AtFlags::REMOVEDIR).is_ok()
}

/// A check of the bytes and identity of a file found at a target.
pub(crate) type Matcher<'a> = dyn Fn(&Body, &FileIdentity) -> bool + 'a;

/// What a compare-and-swap expects at the target.
pub(crate) enum Expect<'a> {
    /// Nothing.
    Absent,
    /// A regular file the matcher accepts.
    File(&'a Matcher<'a>),
}

impl std::fmt::Debug for Expect<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Expect::Absent => "Expect::Absent",
            Expect::File(_) => "Expect::File(..)",
        })
    }
}

/// The result of a compare-and-swap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Swap {
    /// The target held what was expected and now holds the new state.
    Done,
    /// The target held something else; it was left exactly as found.
    Changed,
}

/// What is at a path, for analysis: never fails on a symlink or a non-file.
#[derive(Debug, Clone)]
pub(crate) enum Observed {
    /// Nothing.
    Absent,
    /// A regular file.
    File {
        /// Its content.
        body: Body,
        /// Its identity.
        identity: FileIdentity,
    },
    /// A symlink (never followed).
    Symlink,
    /// A directory, socket, device or fifo.
    Other,
    /// Exists but cannot be read.
    Unreadable,
}

/// An open handle on the directory that holds a target, reached without symlinks.
#[derive(Debug)]
pub(crate) struct Parent {
    fd: Arc<OwnedFd>,
    name: OsString,
    shown: PathBuf,
    /// Directories created on the way (relative paths, outermost first).
    pub created_dirs: Vec<RelPath>,
}

fn behind_symlink(shown: &Path) -> Error {
    Error::new(
        ErrorCode::PathRejected,
        format!("{}: behind a symlink; turnback never writes through one", shown.display()),
    )
}

/// Opens the parent directory of `rel` under `root`, refusing symlinked components.
/// With `create`, missing directories are made (and listed in `created_dirs`).
pub(crate) fn open_parent(root: &Path, rel: &RelPath, create: bool) -> Result<Parent> {
    let shown = root.join(rel.as_path());
    let dir_flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mut fd = rustix::fs::open(root, dir_flags, Mode::empty()).context(root)?;
    let comps: Vec<&OsStr> = rel.components().collect();
    let (name, parents) = comps.split_last().expect("a RelPath has at least one component");
    let mut created_dirs = Vec::new();
    let mut so_far: Vec<u8> = Vec::new();
    for comp in parents {
        if !so_far.is_empty() {
            so_far.push(b'/');
        }
        so_far.extend_from_slice(comp.as_bytes());
        fd = match rustix::fs::openat(&fd, *comp, dir_flags, Mode::empty()) {
            Ok(next) => next,
            Err(Errno::NOENT) if create => {
                match rustix::fs::mkdirat(&fd, *comp, Mode::from_raw_mode(0o777)) {
                    Ok(()) => created_dirs.push(RelPath::new(so_far.clone())?),
                    Err(Errno::EXIST) => {}
                    Err(e) => return Err(e).context(&shown),
                }
                rustix::fs::openat(&fd, *comp, dir_flags, Mode::empty()).map_err(|e| classify(e, &shown))?
            }
            Err(e) => return Err(classify(e, &shown)),
        };
    }
    Ok(Parent { fd: Arc::new(fd), name: name.to_os_string(), shown, created_dirs })
}

fn classify(e: Errno, shown: &Path) -> Error {
    match e {
        Errno::LOOP | Errno::NOTDIR => behind_symlink(shown),
        Errno::NOENT => {
            Error::new(ErrorCode::NotFound, format!("{}: a parent directory does not exist", shown.display()))
        }
        other => Error::new(ErrorCode::Io, format!("{}: {}", shown.display(), std::io::Error::from(other))),
    }
}

impl Parent {
    /// Reads the target without following a symlink.
    ///
    /// # Errors
    /// `path-rejected` if it is a symlink or anything but a regular file.
    pub(crate) fn read(&self) -> Result<Current> {
        self.read_name(&self.name)
    }

    /// What the target is, without following a symlink and without failing on a symlink
    /// or a non-file (for three-way analysis).
    pub(crate) fn observe(&self) -> Result<Observed> {
        match rustix::fs::statat(&self.fd, &self.name, AtFlags::SYMLINK_NOFOLLOW) {
            Err(Errno::NOENT) => return Ok(Observed::Absent),
            Err(Errno::ACCESS) => return Ok(Observed::Unreadable),
            Err(e) => return Err(e).context(&self.shown),
            Ok(st) => match FileType::from_raw_mode(st.st_mode) {
                FileType::Symlink => return Ok(Observed::Symlink),
                FileType::RegularFile => {}
                _ => return Ok(Observed::Other),
            },
        }
        match self.read() {
            Ok(Current::File { body, identity }) => Ok(Observed::File { body, identity }),
            Ok(Current::Absent) => Ok(Observed::Absent),
            Err(e) if e.code == ErrorCode::PathRejected => Ok(Observed::Symlink),
            Err(e) if e.code == ErrorCode::Inaccessible => Ok(Observed::Unreadable),
            Err(e) => Err(e),
        }
    }

    /// The target's identity, if it is a regular file (never following a symlink).
    pub(crate) fn identity(&self) -> Option<FileIdentity> {
        let st = rustix::fs::statat(&self.fd, &self.name, AtFlags::SYMLINK_NOFOLLOW).ok()?;
        (FileType::from_raw_mode(st.st_mode) == FileType::RegularFile).then(|| FileIdentity::of(&st))
    }

    /// Names of the entries beside the target, with their inode numbers.
    pub(crate) fn siblings(&self) -> Result<Vec<(OsString, u64)>> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(&self.fd, ".", flags, Mode::empty()).context(&self.shown)?;
        let mut dir = rustix::fs::Dir::read_from(&fd).context(&self.shown)?;
        let mut out = Vec::new();
        while let Some(entry) = dir.read() {
            let entry = entry.context(&self.shown)?;
            let name = entry.file_name().to_bytes();
            if name != b"." && name != b".." {
                out.push((OsString::from_vec(name.to_vec()), entry.ino()));
            }
        }
        Ok(out)
    }

    /// Whether the sibling `name` is the file `recorded` describes, under another name.
    /// The inode number alone does not say so: a freed inode is soon handed to a new
    /// file. The sibling must also have been born no later than the recorded state was
    /// stamped (its birth time, where the file system keeps one) or, where it keeps
    /// none, still carry the recorded size and modification time.
    pub(crate) fn is_same_file(&self, name: &OsStr, recorded: &FileIdentity) -> bool {
        use rustix::fs::StatxFlags;
        let mask = StatxFlags::INO | StatxFlags::BTIME | StatxFlags::MTIME | StatxFlags::SIZE;
        let Ok(st) = rustix::fs::statx(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW, mask) else {
            return false;
        };
        let ns = |t: rustix::fs::StatxTimestamp| i128::from(t.tv_sec) * 1_000_000_000 + i128::from(t.tv_nsec);
        if st.stx_ino != recorded.inode {
            return false;
        }
        if StatxFlags::from_bits_retain(st.stx_mask).contains(StatxFlags::BTIME) {
            ns(st.stx_btime) <= recorded.ctime_ns
        } else {
            st.stx_size == recorded.size && ns(st.stx_mtime) == recorded.mtime_ns
        }
    }

    /// Reads another entry of the same directory (never following a symlink).
    pub(crate) fn read_sibling(&self, name: &OsStr) -> Result<Current> {
        self.read_name(name)
    }

    /// Renames one entry of the same directory to another name, never replacing one.
    pub(crate) fn rename_sibling(&self, from: &OsStr, to: &OsStr) -> Result<()> {
        rustix::fs::renameat_with(&self.fd, from, &self.fd, to, rustix::fs::RenameFlags::NOREPLACE)
            .context(&self.shown)?;
        rustix::fs::fsync(&self.fd).context(&self.shown)
    }

    /// The target's name in its directory.
    pub(crate) fn name(&self) -> &OsStr {
        &self.name
    }

    /// Puts `bytes` at the target only if what is there now is what `expect` says:
    /// a compare-and-swap. The new file is written and synced (under the writing name of
    /// `temp`, then renamed to `temp`), then swapped in atomically (`RENAME_EXCHANGE`, or a hard link for an absent target); the file it
    /// displaced is checked, and if it is not the expected one it is swapped straight
    /// back, untouched. Returns [`Swap::Changed`] in that case, having written nothing.
    /// Also returns the new file's identity when it was put in place.
    pub(crate) fn swap_in(
        &self,
        temp: &OsStr,
        bytes: &dyn Source,
        mode: Option<u32>,
        expect: &Expect<'_>,
    ) -> Result<(Swap, Option<FileIdentity>)> {
        let file = self.write_temp(temp, bytes, mode)?;
        failpoint::hit("write-temp-synced");
        let swapped = self.swap_synced(temp, expect);
        let synced = self.sync();
        let swap = swapped?;
        synced?;
        let identity = match swap {
            Swap::Done => Some(FileIdentity::of(&rustix::fs::fstat(&file).context(&self.shown)?)),
            Swap::Changed => None,
        };
        Ok((swap, identity))
    }

    /// The target `rel` beside this one: the same directory handle, another name. `rel`
    /// must be in the same directory.
    pub(crate) fn sibling(&self, rel: &RelPath) -> Parent {
        let name = rel.components().last().expect("a RelPath has at least one component").to_os_string();
        let shown = self.shown.with_file_name(&name);
        Parent { fd: Arc::clone(&self.fd), name, shown, created_dirs: Vec::new() }
    }

    /// Removes the target if it is a directory holding nothing but directories (one an
    /// undone turn put where a file was, its files already removed: `x/sub/` left of
    /// `x/sub/file`); true if it did. Anything else inside — a file, a symlink — leaves
    /// the whole of it in place (what was emptied stays emptied). Never follows a symlink.
    pub(crate) fn clear_empty_dir(&self) -> bool {
        clear_dirs(&self.fd, &self.name, 0)
    }

    /// Writes `bytes` under the writing name of `temp` without syncing them: the first
    /// step of a batched [`swap_in`](Self::swap_in), whose files are all written before
    /// one sync of the file system ([`FileSystem::sync`]) makes them durable together.
    /// [`Parent::seal_staged`] then gives the file the name `temp`;
    /// [`Parent::discard_staged`] removes it. On error nothing is left.
    pub(crate) fn stage(&self, temp: &OsStr, bytes: &dyn Source, mode: Option<u32>) -> Result<()> {
        self.write_new(&writing_name(temp), bytes, mode, false).map(drop)
    }

    /// Renames a staged file, complete and made durable by a sync of the file system since
    /// it was written, to `temp` itself (its swapping name). On error nothing is left.
    pub(crate) fn seal_staged(&self, temp: &OsStr) -> Result<()> {
        let writing = writing_name(temp);
        if let Err(e) = rustix::fs::renameat(&self.fd, &writing, &self.fd, temp) {
            let _ = rustix::fs::unlinkat(&self.fd, &writing, AtFlags::empty());
            return Err(e).context(&self.shown);
        }
        Ok(())
    }

    /// Puts a staged file, complete and made durable by a sync of the file system since it
    /// was written, at the target only if nothing is there: the compare-and-swap of a
    /// create, made by renaming it from its writing name with no-replace (one name change
    /// instead of three). Nothing can be displaced, so no swapping name is needed: a crash
    /// leaves the staged file (turnback's own, removed by reconcile) or the new one.
    /// Where the file system has no no-replace rename, it is sealed and linked in
    /// ([`Parent::seal_staged`], [`Parent::swap_synced`]). Without syncing the directory;
    /// the staged file is gone after it.
    pub(crate) fn create_staged(&self, temp: &OsStr) -> Result<Swap> {
        let writing = writing_name(temp);
        let flags = rustix::fs::RenameFlags::NOREPLACE;
        let result = match rustix::fs::renameat_with(&self.fd, &writing, &self.fd, &self.name, flags) {
            Ok(()) => {
                failpoint::hit("write-renamed");
                return Ok(Swap::Done);
            }
            Err(Errno::EXIST) => Ok(Swap::Changed),
            Err(Errno::INVAL | Errno::NOSYS | Errno::NOTSUP) => {
                return self.seal_staged(temp).and_then(|()| self.swap_synced(temp, &Expect::Absent));
            }
            Err(e) => Err(e).context(&self.shown),
        };
        let _ = rustix::fs::unlinkat(&self.fd, &writing, AtFlags::empty());
        result
    }

    /// Removes a staged file that is not to be swapped in after all.
    pub(crate) fn discard_staged(&self, temp: &OsStr) {
        let _ = rustix::fs::unlinkat(&self.fd, writing_name(temp), AtFlags::empty());
    }

    /// The compare-and-swap of [`swap_in`](Self::swap_in) once its complete, durable file
    /// is at `temp`, without syncing the directory: the caller syncs it ([`Parent::sync`],
    /// [`FileSystem::sync`]) before it records that the write was made. `temp` is gone after it
    /// (or names a displaced file it could not put back, as the error says).
    pub(crate) fn swap_synced(&self, temp: &OsStr, expect: &Expect<'_>) -> Result<Swap> {
        let result = match expect {
            Expect::Absent => match rustix::fs::linkat(&self.fd, temp, &self.fd, &self.name, AtFlags::empty()) {
                Ok(()) => {
                    failpoint::hit("write-renamed");
                    Ok(Swap::Done)
                }
                Err(Errno::EXIST) => Ok(Swap::Changed),
                Err(e) => Err(e).context(&self.shown),
            },
            Expect::File(matches) => {
                match rustix::fs::renameat_with(&self.fd, temp, &self.fd, &self.name, rustix::fs::RenameFlags::EXCHANGE)
                {
                    Ok(()) => {
                        failpoint::hit("write-renamed");
                        // `temp` now names the displaced file.
                        let displaced = self.read_name(temp);
                        let ok = matches!(&displaced, Ok(Current::File { body, identity }) if matches(body, identity));
                        if ok {
                            Ok(Swap::Done)
                        } else {
                            // `temp` holds someone's content now: never removed, named if
                            // it cannot be put back.
                            if let Err(e) = rustix::fs::renameat_with(
                                &self.fd,
                                temp,
                                &self.fd,
                                &self.name,
                                rustix::fs::RenameFlags::EXCHANGE,
                            ) {
                                return Err(Error::new(
                                    ErrorCode::Io,
                                    format!(
                                        "{}: {}; the file found there is kept as {}",
                                        self.shown.display(),
                                        std::io::Error::from(e),
                                        Path::new(temp).display()
                                    ),
                                )
                                .with_source(std::io::Error::from(e)));
                            }
                            Ok(Swap::Changed)
                        }
                    }
                    Err(Errno::NOENT) => Ok(Swap::Changed),
                    Err(Errno::INVAL | Errno::NOSYS | Errno::NOTSUP) => {
                        // No RENAME_EXCHANGE here: check, then rename (a narrower window).
                        match self.read() {
                            Ok(Current::File { body, identity }) if matches(&body, &identity) => {
                                rustix::fs::renameat(&self.fd, temp, &self.fd, &self.name)
                                    .context(&self.shown)
                                    .map(|()| Swap::Done)
                            }
                            _ => Ok(Swap::Changed),
                        }
                    }
                    Err(e) => Err(e).context(&self.shown),
                }
            }
        };
        let _ = rustix::fs::unlinkat(&self.fd, temp, AtFlags::empty());
        result
    }

    /// Syncs the directory itself (the names in it).
    pub(crate) fn sync(&self) -> Result<()> {
        rustix::fs::fsync(&self.fd).context(&self.shown)
    }

    /// Removes the target only if it is what `matches` accepts: it is first moved aside
    /// to `temp` (atomically), checked there, and then deleted — or moved back untouched.
    /// An already absent target counts as removed.
    pub(crate) fn remove_if(&self, temp: &OsStr, matches: &Matcher<'_>) -> Result<Swap> {
        let result = self.remove_if_unsynced(temp, matches)?;
        self.sync()?;
        Ok(result)
    }

    /// [`remove_if`](Self::remove_if) without syncing the directory: the caller syncs it
    /// ([`Parent::sync`], [`FileSystem::sync`]) before it records that the file was removed.
    pub(crate) fn remove_if_unsynced(&self, temp: &OsStr, matches: &Matcher<'_>) -> Result<Swap> {
        match rustix::fs::renameat(&self.fd, &self.name, &self.fd, temp) {
            Ok(()) => {}
            Err(Errno::NOENT) => return Ok(Swap::Done),
            Err(e) => return Err(e).context(&self.shown),
        }
        failpoint::hit("remove-moved-aside");
        let moved = self.read_name(temp);
        let result = if matches!(&moved, Ok(Current::File { body, identity }) if matches(body, identity)) {
            rustix::fs::unlinkat(&self.fd, temp, AtFlags::empty()).context(&self.shown)?;
            failpoint::hit("remove-unlinked");
            Swap::Done
        } else {
            match rustix::fs::linkat(&self.fd, temp, &self.fd, &self.name, AtFlags::empty()) {
                Ok(()) => {
                    rustix::fs::unlinkat(&self.fd, temp, AtFlags::empty()).context(&self.shown)?;
                }
                Err(Errno::EXIST) => {
                    return Err(Error::new(
                        ErrorCode::Conflict,
                        format!(
                            "{}: changed twice during rollback; the version found first was kept as {}",
                            self.shown.display(),
                            Path::new(temp).display()
                        ),
                    ));
                }
                Err(e) => return Err(e).context(&self.shown),
            }
            Swap::Changed
        };
        Ok(result)
    }

    /// Writes and syncs `bytes` under the writing name of `temp`, then renames the
    /// complete file to `temp` itself (see [`TempPhase`]). Owner-only until it has the old
    /// file's mode, so a private file's new content is never briefly readable by others; a
    /// new file gets the usual 0666 less the umask. On any error nothing it made is left.
    fn write_temp(&self, temp: &OsStr, bytes: &dyn Source, mode: Option<u32>) -> Result<File> {
        let writing = writing_name(temp);
        let _ = rustix::fs::unlinkat(&self.fd, temp, AtFlags::empty());
        let file = self.write_new(&writing, bytes, mode, true)?;
        if let Err(e) = rustix::fs::renameat(&self.fd, &writing, &self.fd, temp) {
            let _ = rustix::fs::unlinkat(&self.fd, &writing, AtFlags::empty());
            return Err(e).context(&self.shown);
        }
        Ok(file)
    }

    /// Creates `name` (replacing a stale one) with `bytes` and, with `sync`, syncs it;
    /// removes it again if anything fails, so a failed write (a full disk, say) leaves
    /// nothing behind.
    fn write_new(&self, name: &OsStr, bytes: &dyn Source, mode: Option<u32>, sync: bool) -> Result<File> {
        let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let create_mode = Mode::from_raw_mode(if mode.is_some() { 0o600 } else { 0o666 });
        let fd = match rustix::fs::openat(&self.fd, name, flags, create_mode) {
            // A stale one (a crash's): replaced.
            Err(Errno::EXIST) => {
                let _ = rustix::fs::unlinkat(&self.fd, name, AtFlags::empty());
                rustix::fs::openat(&self.fd, name, flags, create_mode)
            }
            opened => opened,
        }
        .context(&self.shown)?;
        let mut file = File::from(fd);
        let written = (|| {
            write_in_steps(&mut file, bytes, &self.shown)?;
            if let Some(mode) = mode {
                rustix::fs::fchmod(&file, Mode::from_raw_mode(mode & 0o7777)).context(&self.shown)?;
            }
            if sync { file.sync_all().context(&self.shown) } else { Ok(()) }
        })();
        if let Err(e) = written {
            drop(file);
            let _ = rustix::fs::unlinkat(&self.fd, name, AtFlags::empty());
            return Err(e);
        }
        Ok(file)
    }

    fn read_name(&self, name: &OsStr) -> Result<Current> {
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NOCTTY | OFlags::NONBLOCK;
        let fd = match rustix::fs::openat(&self.fd, name, flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Ok(Current::Absent),
            Err(Errno::LOOP) => return Err(behind_symlink(&self.shown)),
            Err(Errno::ACCESS) => {
                return Err(Error::new(
                    ErrorCode::Inaccessible,
                    format!("{}: permission denied", self.shown.display()),
                ));
            }
            Err(e) => return Err(e).context(&self.shown),
        };
        let st = rustix::fs::fstat(&fd).context(&self.shown)?;
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            return Err(Error::new(ErrorCode::PathRejected, format!("{}: not a regular file", self.shown.display())));
        }
        let mut file = File::from(fd);
        let size = st.st_size as u64;
        if size > HELD_MAX {
            return Ok(Current::File {
                body: Body::Open { file: Arc::new(file), size },
                identity: FileIdentity::of(&st),
            });
        }
        let mut bytes = Vec::with_capacity(size as usize);
        file.read_to_end(&mut bytes).context(&self.shown)?;
        let st = rustix::fs::fstat(file.as_fd()).context(&self.shown)?;
        Ok(Current::File { body: Body::Held(bytes), identity: FileIdentity::of(&st) })
    }

    /// Atomically replaces (or creates) the target with `bytes`; `mode` keeps the old
    /// file's permission bits (None: a new file, default permissions under the umask).
    /// `temp` is the temporary name to use (see [`temp_name`]).
    /// Nothing displaces anything here, so the file is written under the writing name and
    /// renamed straight over the target.
    pub(crate) fn replace(&self, temp: &OsStr, bytes: &dyn Source, mode: Option<u32>) -> Result<FileIdentity> {
        let writing = writing_name(temp);
        let file = self.write_new(&writing, bytes, mode, true)?;
        failpoint::hit("write-temp-synced");
        if let Err(e) = rustix::fs::renameat(&self.fd, &writing, &self.fd, &self.name) {
            let _ = rustix::fs::unlinkat(&self.fd, &writing, AtFlags::empty());
            return Err(e).context(&self.shown);
        }
        failpoint::hit("write-renamed");
        rustix::fs::fsync(&self.fd).context(&self.shown)?;
        let st = rustix::fs::fstat(&file).context(&self.shown)?;
        Ok(FileIdentity::of(&st))
    }

    /// Removes the temporary file `temp` (a swapping or a writing name) if a crash left it
    /// behind; true if one was there.
    pub(crate) fn remove_temp(&self, temp: &OsStr) -> Result<bool> {
        match rustix::fs::unlinkat(&self.fd, temp, AtFlags::empty()) {
            Ok(()) => Ok(true),
            Err(Errno::NOENT) => Ok(false),
            Err(e) => Err(e).context(&self.shown),
        }
    }
}

/// The file system a workspace is on, for one sync of everything written to it
/// (`syncfs`): a batch of writes made durable together, not file by file.
#[derive(Debug)]
pub(crate) struct FileSystem {
    fd: OwnedFd,
    shown: PathBuf,
}

impl FileSystem {
    /// The file system of the directory `root` (opened now: [`sync`](Self::sync) reports
    /// every write-back failure on it from now on).
    pub(crate) fn of(root: &Path) -> Result<Self> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let fd = rustix::fs::open(root, flags, Mode::empty()).context(root)?;
        Ok(FileSystem { fd, shown: root.to_path_buf() })
    }

    /// Writes everything written to the file system so far (file contents and names) to
    /// stable storage and waits for it, as an fsync of each file and directory would.
    ///
    /// # Errors
    /// `io` if any write-back failed.
    pub(crate) fn sync(&self) -> Result<()> {
        #[cfg(any(target_os = "linux", target_os = "android"))]
        return rustix::fs::syncfs(&self.fd).context(&self.shown);
        // Elsewhere there is no per-file-system sync: everything is flushed.
        #[cfg(not(any(target_os = "linux", target_os = "android")))]
        {
            rustix::fs::sync();
            Ok(())
        }
    }
}

/// Opens `path` (anywhere: a file an agent names) for reading if it is a regular file. The
/// open never blocks: a FIFO with no writer, a device or a socket is refused
/// (`invalid-argument`) instead of waited on.
///
/// # Errors
/// `not-found`, `io`; `invalid-argument` for anything but a regular file.
pub(crate) fn open_regular(path: &Path) -> Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let flags = (OFlags::NONBLOCK | OFlags::NOCTTY).bits() as i32;
    let file = std::fs::OpenOptions::new().read(true).custom_flags(flags).open(path).context(path)?;
    let meta = file.metadata().context(path)?;
    if !meta.is_file() {
        return Err(Error::invalid(format!("{}: not a regular file; not read", path.display())));
    }
    // Reads of a regular file do not block anyway; the flag goes for clarity.
    rustix::fs::fcntl_setfl(&file, rustix::fs::OFlags::empty()).context(path)?;
    Ok(file)
}

/// The parent directories of `rel` that do not exist yet, outermost first (found without
/// following symlinks), so a mutation can record them before it creates them.
pub(crate) fn missing_parents(root: &Path, rel: &RelPath) -> Result<Vec<RelPath>> {
    let dir_flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let shown = root.join(rel.as_path());
    let mut fd = rustix::fs::open(root, dir_flags, Mode::empty()).context(root)?;
    let comps: Vec<&OsStr> = rel.components().collect();
    let mut so_far: Vec<u8> = Vec::new();
    let mut missing = Vec::new();
    for comp in &comps[..comps.len() - 1] {
        if !so_far.is_empty() {
            so_far.push(b'/');
        }
        so_far.extend_from_slice(comp.as_bytes());
        if !missing.is_empty() {
            missing.push(RelPath::new(so_far.clone())?);
            continue;
        }
        match rustix::fs::openat(&fd, *comp, dir_flags, Mode::empty()) {
            Ok(next) => fd = next,
            Err(Errno::NOENT) => missing.push(RelPath::new(so_far.clone())?),
            Err(e) => return Err(classify(e, &shown)),
        }
    }
    Ok(missing)
}

/// Removes the directory `rel` if it is empty (never following a symlink); true if removed.
pub(crate) fn remove_empty_dir(root: &Path, rel: &RelPath) -> Result<bool> {
    let parent = match open_parent(root, rel, false) {
        Ok(p) => p,
        Err(e) if e.code == ErrorCode::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    match rustix::fs::unlinkat(&parent.fd, &parent.name, AtFlags::REMOVEDIR) {
        Ok(()) => {
            rustix::fs::fsync(&parent.fd).context(&parent.shown)?;
            Ok(true)
        }
        Err(Errno::NOENT | Errno::NOTEMPTY | Errno::EXIST | Errno::NOTDIR) => Ok(false),
        Err(e) => Err(e).context(&parent.shown),
    }
}

/// The temporary (swapping) name used while replacing `rel` for the checkpoint
/// `checkpoint_id`: `.NAME.turnback-ID.tmp`, the id's hyphens left out. Its writing name
/// ends in `.part` instead ([`writing_name`]).
pub(crate) fn temp_name(rel: &RelPath, checkpoint_id: &str) -> OsString {
    let base = rel.components().last().expect("non-empty").as_bytes();
    let mut name = b".".to_vec();
    // Keep the name short enough for NAME_MAX with the suffix added.
    name.extend_from_slice(&base[..base.len().min(160)]);
    name.extend_from_slice(format!(".turnback-{}{SWAPPING}", checkpoint_id.replace('-', "")).as_bytes());
    OsString::from_vec(name)
}

const SWAPPING: &str = ".tmp";
const WRITING: &str = ".part";

/// The name the bytes of the temporary file `temp` are written under, before the complete
/// file takes the name `temp`.
pub(crate) fn writing_name(temp: &OsStr) -> OsString {
    let bytes = temp.as_bytes();
    let stem = bytes.strip_suffix(SWAPPING.as_bytes()).unwrap_or(bytes);
    let mut name = stem.to_vec();
    name.extend_from_slice(WRITING.as_bytes());
    OsString::from_vec(name)
}

/// How far the write of one of turnback's temporary files got, as its name says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TempPhase {
    /// Still being written (`.part`): turnback's own bytes, possibly a prefix of them.
    /// No swap has begun, so nobody's content can be in it.
    Writing,
    /// Complete and about to be (or being) swapped in (`.tmp`): turnback's bytes before the
    /// swap, the displaced file after it.
    Swapping,
}

/// Whether `name` is shaped like one of turnback's temporary file names
/// (`.NAME.turnback-ID.tmp` or `.part`, ID 32 hex digits), and in which phase its name
/// says it is. The shape alone never makes a file turnback's (anyone may name a file so):
/// only a record does (`checkpoint::own_temp`); the shape only says which names to ask
/// about.
pub(crate) fn temp_phase(name: &[u8]) -> Option<TempPhase> {
    let (stem, phase) = if let Some(stem) = name.strip_suffix(SWAPPING.as_bytes()) {
        (stem, TempPhase::Swapping)
    } else {
        (name.strip_suffix(WRITING.as_bytes())?, TempPhase::Writing)
    };
    let (base, id) = stem.split_at_checked(stem.len().checked_sub(32)?)?;
    let base = base.strip_suffix(b".turnback-")?;
    let is_id = id.iter().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b));
    (name.starts_with(b".") && base.len() > 1 && is_id).then_some(phase)
}

/// Writes what `bytes` pours, piece by piece (a crash test can stop a large write in the
/// middle, at the failpoint `write-temp-partial`, once the first few MiB are written and
/// more is coming).
fn write_in_steps(file: &mut File, bytes: &dyn Source, shown: &Path) -> Result<()> {
    const STEP: u64 = 4 << 20;
    let (mut written, mut stopped_once) = (0u64, false);
    bytes.pour(&mut |piece| {
        if written >= STEP && !stopped_once && !piece.is_empty() {
            stopped_once = true;
            failpoint::hit("write-temp-partial");
        }
        file.write_all(piece).context(shown)?;
        written += piece.len() as u64;
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    #[test]
    fn replace_keeps_mode_and_leaves_no_temp() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("run.sh");
        std::fs::write(&f, "old").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o751)).unwrap();
        let rel = RelPath::new("run.sh").unwrap();
        let parent = open_parent(dir.path(), &rel, false).unwrap();
        let Current::File { identity, .. } = parent.read().unwrap() else { panic!() };
        parent.replace(&temp_name(&rel, "c-1"), &&b"new"[..], Some(identity.mode)).unwrap();
        assert_eq!(std::fs::read(&f).unwrap(), b"new");
        assert_eq!(std::fs::metadata(&f).unwrap().permissions().mode() & 0o7777, 0o751);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn a_staged_create_takes_the_name_only_if_nothing_is_there() {
        let dir = tempfile::tempdir().unwrap();
        let (free, taken) = (RelPath::new("free.txt").unwrap(), RelPath::new("taken.txt").unwrap());
        let free_parent = open_parent(dir.path(), &free, false).unwrap();
        let taken_parent = open_parent(dir.path(), &taken, false).unwrap();
        free_parent.stage(&temp_name(&free, "c-1"), &&b"restored"[..], Some(0o640)).unwrap();
        taken_parent.stage(&temp_name(&taken, "c-1"), &&b"restored"[..], None).unwrap();
        // Someone writes the second path after the plan saw it absent.
        std::fs::write(dir.path().join("taken.txt"), "theirs").unwrap();
        assert_eq!(free_parent.create_staged(&temp_name(&free, "c-1")).unwrap(), Swap::Done);
        assert_eq!(taken_parent.create_staged(&temp_name(&taken, "c-1")).unwrap(), Swap::Changed);
        assert_eq!(std::fs::read(dir.path().join("free.txt")).unwrap(), b"restored");
        assert_eq!(std::fs::metadata(dir.path().join("free.txt")).unwrap().permissions().mode() & 0o7777, 0o640);
        assert_eq!(std::fs::read(dir.path().join("taken.txt")).unwrap(), b"theirs", "never overwritten");
        let mut names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        names.sort();
        assert_eq!(names, ["free.txt", "taken.txt"], "no temporary file is left");
    }

    #[test]
    fn temporary_names_say_their_phase_and_other_names_are_not_taken_for_them() {
        let rel = RelPath::new("src/main.rs").unwrap();
        let swapping = temp_name(&rel, "01a2318f-0d4b-7c2e-9a5f-3b6d8e1c2a47");
        assert_eq!(swapping, ".main.rs.turnback-01a2318f0d4b7c2e9a5f3b6d8e1c2a47.tmp");
        assert_eq!(temp_phase(swapping.as_bytes()), Some(TempPhase::Swapping));
        let writing = writing_name(&swapping);
        assert_eq!(writing, ".main.rs.turnback-01a2318f0d4b7c2e9a5f3b6d8e1c2a47.part");
        assert_eq!(temp_phase(writing.as_bytes()), Some(TempPhase::Writing));
        for name in [
            "main.rs.turnback-01a2318f0d4b7c2e9a5f3b6d8e1c2a47.tmp",
            ".main.rs.turnback-01A2318F0D4B7C2E9A5F3B6D8E1C2A47.tmp",
            ".main.rs.turnback-01a2318f0d4b7c2e9a5f3b6d8e1c2a4.tmp",
            ".turnback-01a2318f0d4b7c2e9a5f3b6d8e1c2a47.tmp",
            ".main.rs.turnback-01a2318f0d4b7c2e9a5f3b6d8e1c2a47.txt",
            ".main.rs.turnback-recovered",
            ".tmp",
        ] {
            assert_eq!(temp_phase(name.as_bytes()), None, "{name}");
        }
    }

    #[test]
    fn a_swap_leaves_neither_temporary_name() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.txt"), "old").unwrap();
        let rel = RelPath::new("a.txt").unwrap();
        let parent = open_parent(dir.path(), &rel, false).unwrap();
        let accept = |body: &Body, _: &FileIdentity| body.held() == Some(&b"old"[..]);
        let big = vec![b'x'; 9 << 20];
        let (swap, _) = parent.swap_in(&temp_name(&rel, "c-1"), &big, None, &Expect::File(&accept)).unwrap();
        assert_eq!(swap, Swap::Done);
        assert_eq!(std::fs::read(dir.path().join("a.txt")).unwrap(), big);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn a_renamed_file_is_the_same_file_and_a_reused_inode_is_not() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.txt"), "two").unwrap();
        let parent = open_parent(dir.path(), &RelPath::new("a.txt").unwrap(), false).unwrap();
        let Current::File { identity, .. } = parent.read().unwrap() else { panic!() };
        std::fs::rename(dir.path().join("a.txt"), dir.path().join("b.txt")).unwrap();
        assert!(parent.is_same_file(OsStr::new("b.txt"), &identity), "a rename keeps the file");
        // A file born after the recorded state, holding the same inode number (as a freed
        // inode handed out again would), is another file.
        let older = FileIdentity { ctime_ns: 0, mtime_ns: 0, ..identity };
        assert!(!parent.is_same_file(OsStr::new("b.txt"), &older));
        // And the real thing where the file system hands the inode out again soon.
        std::fs::remove_file(dir.path().join("b.txt")).unwrap();
        for i in 0..200 {
            let name = format!("new-{i}");
            std::fs::write(dir.path().join(&name), "another").unwrap();
            if std::fs::symlink_metadata(dir.path().join(&name)).unwrap().ino() == identity.inode {
                assert!(!parent.is_same_file(OsStr::new(&name), &identity), "reused inode taken for the file");
                break;
            }
            std::fs::remove_file(dir.path().join(&name)).unwrap();
        }
    }

    #[test]
    fn symlinked_parent_or_target_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("link")).unwrap();
        std::fs::write(outside.path().join("x"), "secret").unwrap();
        let err = open_parent(dir.path(), &RelPath::new("link/x").unwrap(), true).unwrap_err();
        assert_eq!(err.code, ErrorCode::PathRejected);
        std::os::unix::fs::symlink(outside.path().join("x"), dir.path().join("y")).unwrap();
        let parent = open_parent(dir.path(), &RelPath::new("y").unwrap(), false).unwrap();
        assert_eq!(parent.read().unwrap_err().code, ErrorCode::PathRejected);
    }

    #[test]
    fn missing_parents_are_created_and_listed() {
        let dir = tempfile::tempdir().unwrap();
        let parent = open_parent(dir.path(), &RelPath::new("a/b/c.txt").unwrap(), true).unwrap();
        let created: Vec<String> = parent.created_dirs.iter().map(|p| p.display()).collect();
        assert_eq!(created, ["a", "a/b"]);
        assert!(matches!(parent.read().unwrap(), Current::Absent));
    }

    #[test]
    fn missing_parents_are_listed_and_empty_ones_removed_again() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("a")).unwrap();
        let rel = RelPath::new("a/b/c/d.txt").unwrap();
        let missing: Vec<String> = missing_parents(dir.path(), &rel).unwrap().iter().map(|p| p.display()).collect();
        assert_eq!(missing, ["a/b", "a/b/c"]);
        open_parent(dir.path(), &rel, true).unwrap();
        std::fs::write(dir.path().join("a/b/keep.txt"), "x").unwrap();
        assert!(remove_empty_dir(dir.path(), &RelPath::new("a/b/c").unwrap()).unwrap());
        assert!(!remove_empty_dir(dir.path(), &RelPath::new("a/b").unwrap()).unwrap(), "not empty");
        assert!(dir.path().join("a/b/keep.txt").exists());
    }
}
