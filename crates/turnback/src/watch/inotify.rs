//! Linux file-system events: one inotify watch per directory of the workspace, keyed by the
//! watch descriptor the kernel returns, read and resolved to paths on the one thread that
//! also adds the watches.
//!
//! `notify`'s recursive inotify mode keys its watches by path and removes them by path
//! when it handles a move or a delete, after the fact: a directory moved onto the path of
//! one just deleted, or found at its new path by a walk before its old path's
//! `IN_MOVED_FROM` was read, loses its watch (the kernel returns the same descriptor for
//! a directory already watched), and its later changes are never seen. Here nothing is
//! removed by path, so that cannot happen.
//!
//! Invariants:
//! - Every directory of the workspace that [`Tree`]'s `wanted` accepts is watched, or an
//!   event that makes it watched is still queued: a walk adds a watch to each directory
//!   *before* listing it, so a subdirectory made after the listing is an `IN_CREATE`, one
//!   made before it is in the listing. A directory created or moved in is walked when its
//!   event is handled, before the next event is resolved.
//! - A watch's path is where its directory was last found. The kernel returns the same
//!   descriptor for a directory that is already watched, so a walk that finds a moved
//!   directory at its new path re-points it (and the directories below it); no directory
//!   has two watches. A directory visible at two paths at once (a bind mount) cannot be
//!   told apart and is a [`Seen::Problem`].
//! - A watch ends when the kernel says so (`IN_IGNORED`: the directory was deleted), or
//!   when its directory was moved (`IN_MOVE_SELF`) and is no longer at the watch's path
//!   (moved out of the workspace, or to a place whose walk has not yet re-pointed it):
//!   identity (device and inode) decides, never the path alone.
//! - Symlinks are never followed (`IN_DONT_FOLLOW`, `IN_ONLYDIR`, listings by entry type).
//! - The kernel's queue is the bound on memory: its overflow (`IN_Q_OVERFLOW`) and a file
//!   system unmounted under the tree are [`Seen::Lost`]; a watch that cannot be added for
//!   any reason but a vanished or unreadable directory is a [`Seen::Problem`] (the
//!   watcher then vouches for nothing).

use std::collections::HashMap;
use std::ffi::OsStr;
use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rustix::fs::inotify::{self, CreateFlags, ReadFlags, WatchFlags};
use rustix::io::Errno;

use crate::error::{Error, ErrorCode, Result};
use crate::watch::{Seen, Source};

/// What every watch asks for. A file's own `IN_CLOSE_WRITE` adds nothing to `IN_MODIFY`;
/// `IN_EXCL_UNLINK` keeps writes to deleted-but-open files out.
const FLAGS: WatchFlags = WatchFlags::CREATE
    .union(WatchFlags::DELETE)
    .union(WatchFlags::MODIFY)
    .union(WatchFlags::ATTRIB)
    .union(WatchFlags::MOVED_FROM)
    .union(WatchFlags::MOVED_TO)
    .union(WatchFlags::MOVE_SELF)
    .union(WatchFlags::ONLYDIR)
    .union(WatchFlags::DONT_FOLLOW)
    .union(WatchFlags::EXCL_UNLINK);

/// Bytes read from the kernel at a time (about 2,000 events with short names).
const READ_BUFFER: usize = 64 * 1024;

/// A watched directory: where it was last found, and what it is.
#[derive(Debug)]
struct Watched {
    path: PathBuf,
    id: (u64, u64),
}

/// The watches of one workspace.
pub(crate) struct Tree<F> {
    fd: OwnedFd,
    by_wd: HashMap<i32, Watched>,
    root_wd: i32,
    wanted: F,
    buf: Vec<MaybeUninit<u8>>,
}

impl<F: Fn(&Path) -> bool> Tree<F> {
    /// Watches every directory under `root` that `wanted` accepts.
    ///
    /// # Errors
    /// `io` if inotify is unavailable or a directory cannot be watched (the system's limit
    /// on watches reached, say).
    pub(crate) fn new(root: &Path, wanted: F) -> Result<Self> {
        let fd = inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK)
            .map_err(|e| Error::new(ErrorCode::Io, format!("file-system events (inotify): {e}")))?;
        let mut tree = Tree { fd, by_wd: HashMap::new(), root_wd: -1, wanted, buf: Vec::new() };
        let mut problem = None;
        tree.add_tree(root.to_path_buf(), &mut |seen| {
            if let Seen::Problem(why) = seen {
                problem.get_or_insert(why);
            }
        });
        if let Some(why) = problem {
            return Err(Error::new(ErrorCode::Io, format!("watching the workspace: {why}")));
        }
        tree.root_wd = match tree.by_wd.iter().find(|(_, w)| w.path == root) {
            Some((wd, _)) => *wd,
            None => {
                return Err(Error::new(ErrorCode::Io, format!("watching the workspace: {} is gone", root.display())));
            }
        };
        tree.buf = vec![MaybeUninit::uninit(); READ_BUFFER];
        Ok(tree)
    }

    /// How many directories are watched.
    #[cfg(test)]
    pub(crate) fn watched(&self) -> usize {
        self.by_wd.len()
    }

    /// Waits up to `wait` for events, then hands every queued one to `sink`, in order.
    fn read(&mut self, wait: Duration, sink: &mut dyn FnMut(Seen<'_>)) {
        let timeout = rustix::event::Timespec { tv_sec: wait.as_secs() as _, tv_nsec: wait.subsec_nanos() as _ };
        let mut fds = [rustix::event::PollFd::new(&self.fd, rustix::event::PollFlags::IN)];
        match rustix::event::poll(&mut fds, Some(&timeout)) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        loop {
            // One buffer's worth at a time: handling an event may add watches, which needs
            // the descriptor the reader borrows.
            let mut batch = Vec::new();
            let mut drained = false;
            {
                let mut reader = inotify::Reader::new(&self.fd, &mut self.buf);
                loop {
                    match reader.next() {
                        Ok(event) => batch.push((
                            event.wd(),
                            event.events(),
                            event.file_name().map(|n| n.to_bytes().to_vec()).filter(|n| !n.is_empty()),
                        )),
                        Err(Errno::AGAIN | Errno::INTR) => drained = true,
                        Err(e) => {
                            sink(Seen::Problem(format!("reading file-system events: {e}")));
                            drained = true;
                        }
                    }
                    if drained || reader.is_buffer_empty() {
                        break;
                    }
                }
            }
            for (wd, flags, name) in batch {
                self.event(wd, flags, name.as_deref(), sink);
            }
            if drained {
                return;
            }
        }
    }

    /// Handles one event.
    fn event(&mut self, wd: i32, flags: ReadFlags, name: Option<&[u8]>, sink: &mut dyn FnMut(Seen<'_>)) {
        if flags.contains(ReadFlags::QUEUE_OVERFLOW) {
            sink(Seen::Lost);
            return;
        }
        if flags.contains(ReadFlags::UNMOUNT) {
            // A file system under the tree went away: what it held vanished without events.
            sink(Seen::Lost);
        }
        if flags.contains(ReadFlags::IGNORED) {
            self.by_wd.remove(&wd);
            return;
        }
        let Some(watched) = self.by_wd.get(&wd) else { return }; // a watch already ended
        let Some(name) = name else {
            // About the watched directory itself; its parent's watch reports the change.
            if flags.contains(ReadFlags::MOVE_SELF) {
                if wd == self.root_wd {
                    sink(Seen::Problem("the workspace directory was moved".into()));
                } else {
                    self.moved(wd);
                }
            }
            return;
        };
        let path = watched.path.join(OsStr::from_bytes(name));
        sink(Seen::Path(&path));
        if flags.contains(ReadFlags::ISDIR) {
            if flags.intersects(ReadFlags::CREATE | ReadFlags::MOVED_TO) {
                self.add_tree(path, sink);
            } else if flags.contains(ReadFlags::ATTRIB) {
                // A directory that could not be watched (unreadable) may just have become
                // readable: watch it if it is new to us.
                match inotify::add_watch(&self.fd, &path, FLAGS) {
                    Ok(wd) if !self.by_wd.contains_key(&wd) => self.add_tree(path, sink),
                    _ => {}
                }
            }
        }
    }

    /// A watched directory was moved: every watch at or below its path whose directory is
    /// no longer there ends (a later walk of where it went watches it again).
    fn moved(&mut self, wd: i32) {
        let Some(top) = self.by_wd.get(&wd).map(|w| w.path.clone()) else { return };
        let gone: Vec<i32> = self
            .by_wd
            .iter()
            .filter(|(_, w)| w.path.starts_with(&top) && identity(&w.path) != Some(w.id))
            .map(|(wd, _)| *wd)
            .collect();
        for wd in gone {
            // The kernel answers with an `IN_IGNORED` for it, which finds nothing left.
            let _ = inotify::remove_watch(&self.fd, wd);
            self.by_wd.remove(&wd);
        }
    }

    /// Watches `top` and every directory below it (that `wanted` accepts), each before it
    /// is listed.
    fn add_tree(&mut self, top: PathBuf, sink: &mut dyn FnMut(Seen<'_>)) {
        let mut stack = vec![top];
        while let Some(dir) = stack.pop() {
            if !(self.wanted)(&dir) {
                continue;
            }
            let Some(id) = identity(&dir) else { continue }; // gone, or not a directory now
            match inotify::add_watch(&self.fd, &dir, FLAGS) {
                Ok(wd) => self.place(wd, &dir, id, sink),
                // Gone or replaced meanwhile; or unreadable, which the walk records as
                // skipped too (a chmod that opens it is an `IN_ATTRIB`, handled above).
                Err(Errno::NOENT | Errno::NOTDIR | Errno::LOOP | Errno::ACCESS) => continue,
                Err(Errno::NOSPC) => {
                    sink(Seen::Problem(
                        "the system's limit on watched directories was reached (fs.inotify.max_user_watches); \
                         snapshots walk the whole tree"
                            .into(),
                    ));
                    return;
                }
                Err(e) => {
                    sink(Seen::Problem(format!("watching {}: {e}", dir.display())));
                    return;
                }
            }
            let Ok(entries) = std::fs::read_dir(&dir) else { continue };
            for entry in entries.flatten() {
                if entry.file_type().is_ok_and(|t| t.is_dir()) {
                    stack.push(entry.path());
                }
            }
        }
    }

    /// Records that `wd` watches the directory `id` at `path`.
    fn place(&mut self, wd: i32, path: &Path, id: (u64, u64), sink: &mut dyn FnMut(Seen<'_>)) {
        match self.by_wd.get_mut(&wd) {
            Some(w) if w.path != path => {
                // Found again elsewhere: moved, unless it is still where it was too.
                if identity(&w.path) == Some(w.id) && w.id == id {
                    sink(Seen::Problem(format!(
                        "{} and {} are the same directory (a bind mount?); snapshots walk the whole tree",
                        w.path.display(),
                        path.display()
                    )));
                }
                w.path = path.to_path_buf();
                w.id = id;
            }
            Some(w) => w.id = id,
            None => {
                self.by_wd.insert(wd, Watched { path: path.to_path_buf(), id });
            }
        }
    }
}

impl<F: Fn(&Path) -> bool + Send> Source for Tree<F> {
    fn next(&mut self, wait: Duration, sink: &mut dyn FnMut(Seen<'_>)) {
        self.read(wait, sink);
    }
}

/// The device and inode of the directory at `path` (not following a symlink), if one is there.
fn identity(path: &Path) -> Option<(u64, u64)> {
    path.symlink_metadata().ok().filter(|m| m.is_dir()).map(|m| (m.dev(), m.ino()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every path the tree reports within `wait`, relative to `root`.
    fn drain<F: Fn(&Path) -> bool>(tree: &mut Tree<F>, root: &Path) -> (Vec<String>, Vec<String>) {
        let (mut paths, mut problems) = (Vec::new(), Vec::new());
        for _ in 0..3 {
            tree.read(Duration::from_millis(50), &mut |seen| match seen {
                Seen::Path(p) => paths.push(p.strip_prefix(root).unwrap().to_string_lossy().into_owned()),
                Seen::Lost => problems.push("lost".into()),
                Seen::Problem(why) => problems.push(why),
            });
        }
        (paths, problems)
    }

    #[test]
    fn a_directory_moved_onto_a_deleted_ones_path_keeps_its_watch() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join("a/sub")).unwrap();
        std::fs::create_dir_all(root.join("b/old")).unwrap();
        let mut tree = Tree::new(&root, |_: &Path| true).unwrap();
        assert_eq!(tree.watched(), 5);
        std::fs::remove_dir_all(root.join("b")).unwrap();
        std::fs::rename(root.join("a"), root.join("b")).unwrap();
        let (paths, problems) = drain(&mut tree, &root);
        assert!(problems.is_empty(), "{problems:?}");
        assert!(paths.contains(&"a".to_string()) && paths.contains(&"b".to_string()), "{paths:?}");
        // The moved directories are watched at their new paths, the deleted ones not at all.
        assert_eq!(tree.watched(), 3, "{:?}", tree.by_wd);
        std::fs::write(root.join("b/sub/f"), "x").unwrap();
        let (paths, _) = drain(&mut tree, &root);
        assert!(paths.contains(&"b/sub/f".to_string()), "{paths:?}");
    }

    #[test]
    fn a_directory_found_by_a_walk_before_its_move_is_read_keeps_its_watch() {
        // The move lands in a directory that is not watched yet: no IN_MOVED_TO, only the
        // walk of the new parent finds it (re-pointing its watch), and the old parent's
        // IN_MOVED_FROM and the directory's IN_MOVE_SELF come after.
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join("d1/d2")).unwrap();
        let mut tree = Tree::new(&root, |_: &Path| true).unwrap();
        std::fs::create_dir_all(root.join("d3/d5")).unwrap();
        std::fs::rename(root.join("d1/d2"), root.join("d3/d5/d6")).unwrap();
        let (_, problems) = drain(&mut tree, &root);
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(tree.watched(), 5, "{:?}", tree.by_wd);
        std::os::unix::fs::symlink("a.txt", root.join("d3/d5/d6/a.txt")).unwrap();
        let (paths, _) = drain(&mut tree, &root);
        assert_eq!(paths, ["d3/d5/d6/a.txt"]);
    }

    #[test]
    fn a_directory_moved_out_of_the_tree_is_no_longer_watched() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("ws");
        std::fs::create_dir_all(root.join("a/sub")).unwrap();
        let root = root.canonicalize().unwrap();
        let mut tree = Tree::new(&root, |_: &Path| true).unwrap();
        std::fs::rename(root.join("a"), dir.path().join("outside")).unwrap();
        let (paths, _) = drain(&mut tree, &root);
        assert_eq!(paths, ["a"]);
        assert_eq!(tree.watched(), 1, "{:?}", tree.by_wd);
        std::fs::write(dir.path().join("outside/sub/f"), "x").unwrap();
        let (paths, _) = drain(&mut tree, &root);
        assert!(paths.is_empty(), "{paths:?}");
    }

    #[test]
    fn symlinked_directories_and_unwanted_ones_are_not_watched() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join("real/inner")).unwrap();
        std::fs::create_dir_all(root.join("skipped/inner")).unwrap();
        std::os::unix::fs::symlink("real", root.join("link")).unwrap();
        let skipped = root.join("skipped");
        let mut tree = Tree::new(&root, move |p: &Path| !p.starts_with(&skipped)).unwrap();
        assert_eq!(tree.watched(), 3, "{:?}", tree.by_wd);
        std::fs::write(root.join("skipped/inner/f"), "x").unwrap();
        let (paths, _) = drain(&mut tree, &root);
        assert!(paths.is_empty(), "{paths:?}");
    }
}
