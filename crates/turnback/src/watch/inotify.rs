//! Linux file-system events: one inotify watch per directory of the workspace, each known by
//! the watch descriptor the kernel returns and placed in the tree by its parent's
//! descriptor and its name, read and resolved to paths on the one thread that also adds
//! the watches.
//!
//! `notify`'s recursive inotify mode keys its watches by path and removes them by path
//! after the fact: a directory moved onto the path of one just deleted, or found at its new
//! path by a walk before its old path's `IN_MOVED_FROM` was read (the kernel returns the
//! same descriptor for a directory already watched), lost its watch, and its later changes
//! were never seen. Here nothing is removed by path.
//!
//! Invariants:
//! - Directories are opened one component at a time from the workspace root, never
//!   following a symlink (`O_NOFOLLOW`), and watched through their open descriptor: a
//!   directory outside the tree is never watched under a name inside it.
//! - A walk watches each directory *before* listing it, so a subdirectory made after the
//!   listing is an `IN_CREATE`, one made before it is in the listing. A directory created,
//!   moved in or whose mode changed is walked when its event is handled, before the next
//!   event is resolved; so is the whole tree after the kernel's queue overflowed, a file
//!   system under it was unmounted or the system's mounts changed (each also a
//!   [`Seen::Lost`]), and afterwards every watch that walk did not reach ends.
//! - A watch's place is where its directory was last found (its parent's watch and its
//!   name), so a directory moved within the tree carries every watch below it along, and a
//!   walk that finds a watched directory elsewhere moves its watch there (the kernel
//!   returns the same descriptor); no directory has two watches. A directory found at a new
//!   place that is still at its old one too (a bind mount) is a [`Seen::Problem`].
//! - A watch ends when the kernel says so (`IN_IGNORED`: deleted), or when its directory,
//!   after `IN_MOVE_SELF`, is no longer at its place (moved out of the tree, or to a place
//!   whose walk will watch it again), with every watch below it; device and inode decide.
//! - What the workspace's rules leave out is not watched (`wanted`).
//! - Anything that leaves a directory unwatched but for its vanishing, being replaced or
//!   being unreadable (whose contents a walk cannot record either) is a [`Seen::Problem`]:
//!   the watcher then vouches for nothing.
//! - The kernel's queue is the bound on memory; each call hands over one buffer of events.

use std::collections::{HashMap, HashSet};
use std::ffi::{OsStr, OsString};
use std::io::{Read, Seek};
use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::rc::Rc;
use std::time::Duration;

use rustix::event::{PollFd, PollFlags};
use rustix::fs::inotify::{self, CreateFlags, ReadFlags, WatchFlags};
use rustix::fs::{CWD, FileType};
use rustix::io::Errno;

use crate::error::{Error, ErrorCode, Result};
use crate::fs::walk::{open_dir, read_names};
use crate::watch::{Seen, Source, poll_timeout};

/// What every watch asks for. A file's own `IN_CLOSE_WRITE` adds nothing to `IN_MODIFY`.
/// Not `IN_EXCL_UNLINK`: it also drops writes through a descriptor whose file was linked in
/// after it was opened (`O_TMPFILE` then `linkat`). Watches are added through
/// `/proc/self/fd/N` of a directory already opened without following a symlink, so the
/// magic link itself must be followed (no `IN_DONT_FOLLOW`).
const FLAGS: WatchFlags = WatchFlags::CREATE
    .union(WatchFlags::DELETE)
    .union(WatchFlags::MODIFY)
    .union(WatchFlags::ATTRIB)
    .union(WatchFlags::MOVED_FROM)
    .union(WatchFlags::MOVED_TO)
    .union(WatchFlags::MOVE_SELF)
    .union(WatchFlags::ONLYDIR);

/// Bytes read from the kernel at a time (about 2,000 events with short names).
const READ_BUFFER: usize = 64 * 1024;

/// The parent of the root's watch.
const NO_PARENT: i32 = -1;

/// A watched directory: its place (its parent's watch and its name), and what it is.
#[derive(Debug)]
struct Watched {
    parent: i32,
    name: OsString,
    id: (u64, u64),
}

/// The watches of one workspace.
pub(crate) struct Watches<F> {
    inotify: OwnedFd,
    root: PathBuf,
    root_wd: i32,
    by_wd: HashMap<i32, Watched>,
    wanted: F,
    /// `/proc/self/mountinfo`, which polls as changed when the system's mounts do.
    mounts: Option<std::fs::File>,
    buf: Vec<MaybeUninit<u8>>,
}

/// A failure `sink` was already told of (the walk stops).
struct Told;

/// What a walk that adds watches starts from: a directory to open in an open parent.
struct Pending {
    parent_fd: Rc<OwnedFd>,
    parent_wd: i32,
    name: OsString,
    path: PathBuf,
}

impl<F: Fn(&Path) -> bool> Watches<F> {
    /// Watches every directory under `root` that `wanted` accepts.
    ///
    /// # Errors
    /// `io` if inotify is unavailable or a directory cannot be watched (the system's limit
    /// on watches reached, say).
    pub(crate) fn new(root: &Path, wanted: F) -> Result<Self> {
        let fail = |what: String| Error::new(ErrorCode::Io, format!("watching the workspace: {what}"));
        let inotify = inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK)
            .map_err(|e| fail(format!("file-system events (inotify): {e}")))?;
        let mut mounts = std::fs::File::open("/proc/self/mountinfo").ok();
        if let Some(m) = &mut mounts {
            let _ = std::io::copy(m, &mut std::io::sink());
        }
        let mut watches = Watches {
            inotify,
            root: root.to_path_buf(),
            root_wd: NO_PARENT,
            by_wd: HashMap::new(),
            wanted,
            mounts,
            buf: vec![MaybeUninit::uninit(); READ_BUFFER],
        };
        let mut problem = None;
        watches.watch_all(&mut |seen| {
            if let Seen::Problem(why) = seen {
                problem.get_or_insert(why);
            }
        });
        match problem {
            Some(why) => Err(fail(why)),
            None if watches.root_wd == NO_PARENT => Err(fail(format!("{} cannot be watched", root.display()))),
            None => Ok(watches),
        }
    }

    /// The path of the directory `wd` watches, from the places up to the root (`None` for
    /// a watch not known, or whose places do not lead to the root).
    fn path_of(&self, mut wd: i32) -> Option<PathBuf> {
        let mut names = Vec::new();
        for _ in 0..=self.by_wd.len() {
            let w = self.by_wd.get(&wd)?;
            if w.parent == NO_PARENT {
                let mut path = self.root.clone();
                path.extend(names.iter().rev());
                return Some(path);
            }
            names.push(&w.name);
            wd = w.parent;
        }
        None
    }

    /// Opens the directory at `path` (under the root) one component at a time, never
    /// following a symlink.
    fn open(&self, path: &Path) -> rustix::io::Result<OwnedFd> {
        let rel = path.strip_prefix(&self.root).map_err(|_| Errno::XDEV)?;
        let mut fd = open_dir(CWD, self.root.as_os_str())?;
        for part in rel.components() {
            let Component::Normal(name) = part else { return Err(Errno::INVAL) };
            fd = open_dir(&fd, name)?;
        }
        Ok(fd)
    }

    /// Whether the directory `id` is at `path` (not through a symlink).
    fn is_at(&self, path: &Path, id: (u64, u64)) -> bool {
        self.open(path).and_then(rustix::fs::fstat).is_ok_and(|s| (s.st_dev, s.st_ino) == id)
    }

    /// Waits up to `wait` for events, then hands one buffer of them to `sink`, in order.
    fn read(&mut self, wait: Duration, sink: &mut dyn FnMut(Seen<'_>)) {
        let timeout = poll_timeout(wait);
        let mounts_changed = {
            let mut fds = vec![PollFd::new(&self.inotify, PollFlags::IN)];
            if let Some(m) = &self.mounts {
                fds.push(PollFd::new(m, PollFlags::PRI));
            }
            match rustix::event::poll(&mut fds, Some(&timeout)) {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            fds.get(1).is_some_and(|f| !f.revents().is_empty())
        };
        if mounts_changed {
            // Mounting over a directory changes what is there without an event.
            if let Some(m) = &mut self.mounts {
                let _ = m.rewind().and_then(|()| m.read_to_end(&mut Vec::new()));
            }
            self.lost(sink);
        }
        let mut batch = Vec::new();
        {
            let mut reader = inotify::Reader::new(&self.inotify, &mut self.buf);
            loop {
                match reader.next() {
                    Ok(event) => batch.push((
                        event.wd(),
                        event.events(),
                        event.file_name().map(|n| OsStr::from_bytes(n.to_bytes()).to_os_string()),
                    )),
                    Err(Errno::AGAIN | Errno::INTR) => break,
                    Err(e) => {
                        sink(Seen::Problem(format!("reading file-system events: {e}")));
                        break;
                    }
                }
                if reader.is_buffer_empty() {
                    break;
                }
            }
        }
        for (wd, flags, name) in batch {
            self.event(wd, flags, name.filter(|n| !n.is_empty()), sink);
        }
    }

    /// Handles one event.
    fn event(&mut self, wd: i32, flags: ReadFlags, name: Option<OsString>, sink: &mut dyn FnMut(Seen<'_>)) {
        if flags.intersects(ReadFlags::QUEUE_OVERFLOW | ReadFlags::UNMOUNT) {
            // Events were dropped, or a file system under the tree went away with what it
            // held: whatever they would have said, walk and watch everything again.
            self.lost(sink);
            return;
        }
        if flags.contains(ReadFlags::IGNORED) {
            self.by_wd.remove(&wd);
            return;
        }
        if !self.by_wd.contains_key(&wd) {
            return; // a watch already ended
        }
        let Some(dir) = self.path_of(wd) else {
            // Places that do not lead to the root: only a walk of everything sorts them out.
            self.lost(sink);
            return;
        };
        let Some(name) = name else {
            // About the watched directory itself; its parent's watch reports the change.
            if flags.contains(ReadFlags::MOVE_SELF) {
                if wd == self.root_wd {
                    sink(Seen::Problem("the workspace directory was moved".into()));
                } else {
                    self.moved(wd, &dir);
                }
            }
            return;
        };
        let path = dir.join(&name);
        sink(Seen::Path(&path));
        if flags.contains(ReadFlags::ISDIR)
            && flags.intersects(ReadFlags::CREATE | ReadFlags::MOVED_TO | ReadFlags::ATTRIB)
        {
            // Created or moved in; or its mode changed, which may have made it (or what is
            // in it) readable, and so watchable, for the first time.
            match self.open(&dir) {
                Ok(fd) => {
                    let start = Pending { parent_fd: Rc::new(fd), parent_wd: wd, name, path };
                    self.watch_from(vec![start], &mut HashSet::new(), sink);
                }
                Err(Errno::NOENT | Errno::NOTDIR | Errno::LOOP | Errno::ACCESS) => {} // gone or moved meanwhile
                Err(e) => sink(Seen::Problem(format!("opening {}: {e}", dir.display()))),
            }
        }
    }

    /// A watched directory was moved: unless it is still at its place (a walk already
    /// moved its watch there), its watch and every one below it end.
    fn moved(&mut self, wd: i32, path: &Path) {
        let Some(id) = self.by_wd.get(&wd).map(|w| w.id) else { return };
        if self.is_at(path, id) {
            return;
        }
        let mut gone = HashSet::from([wd]);
        // Below it: every watch whose places lead up to it (each pass takes one more level).
        loop {
            let more: Vec<i32> = self
                .by_wd
                .iter()
                .filter(|(w, watched)| !gone.contains(*w) && gone.contains(&watched.parent))
                .map(|(w, _)| *w)
                .collect();
            if more.is_empty() {
                break;
            }
            gone.extend(more);
        }
        self.end(gone);
    }

    /// Ends these watches (the kernel answers each with an `IN_IGNORED`, which finds nothing
    /// left).
    fn end(&mut self, wds: impl IntoIterator<Item = i32>) {
        for wd in wds {
            let _ = inotify::remove_watch(&self.inotify, wd);
            self.by_wd.remove(&wd);
        }
    }

    /// What the watches may have missed is lost: say so, then watch the whole tree again.
    fn lost(&mut self, sink: &mut dyn FnMut(Seen<'_>)) {
        sink(Seen::Lost);
        self.watch_all(sink);
    }

    /// Watches the whole tree again (adding what is missing, moving what moved), then ends
    /// every watch the walk did not reach.
    fn watch_all(&mut self, sink: &mut dyn FnMut(Seen<'_>)) {
        let root = match open_dir(CWD, self.root.as_os_str()) {
            Ok(fd) => fd,
            Err(e) => {
                sink(Seen::Problem(format!("opening {}: {e}", self.root.display())));
                return;
            }
        };
        let mut reached = HashSet::new();
        let Ok(Some((wd, fd))) = self.watch_dir(root, NO_PARENT, OsString::new(), &mut reached, sink) else { return };
        self.root_wd = wd;
        let root_path = self.root.clone();
        let pending = self.listed(&fd, wd, &root_path, sink);
        self.watch_from(pending, &mut reached, sink);
        let unreached: Vec<i32> = self.by_wd.keys().filter(|wd| !reached.contains(*wd)).copied().collect();
        self.end(unreached);
    }

    /// Watches every directory of `pending` and everything below them that `wanted`
    /// accepts, each before it is listed; the descriptors it reaches go in `reached`.
    fn watch_from(&mut self, mut pending: Vec<Pending>, reached: &mut HashSet<i32>, sink: &mut dyn FnMut(Seen<'_>)) {
        while let Some(p) = pending.pop() {
            if !(self.wanted)(&p.path) {
                continue;
            }
            let fd = match open_dir(&*p.parent_fd, &p.name) {
                Ok(fd) => fd,
                // Gone, replaced by a file or a symlink meanwhile, or unreadable (which the
                // walk records as skipped: no snapshot is watched while it is).
                Err(Errno::NOENT | Errno::NOTDIR | Errno::LOOP | Errno::ACCESS) => continue,
                Err(e) => {
                    sink(Seen::Problem(format!("opening {}: {e}", p.path.display())));
                    return;
                }
            };
            match self.watch_dir(fd, p.parent_wd, p.name, reached, sink) {
                Ok(Some((wd, fd))) => pending.extend(self.listed(&fd, wd, &p.path, sink)),
                Ok(None) => {}
                Err(Told) => return,
            }
        }
    }

    /// Watches the open directory `fd`, placed at (`parent`, `name`): its descriptor, or
    /// `None` if it is unreadable, or [`Told`] (`sink` was told the problem) if that fails
    /// for any other reason.
    fn watch_dir(
        &mut self,
        fd: OwnedFd,
        parent: i32,
        name: OsString,
        reached: &mut HashSet<i32>,
        sink: &mut dyn FnMut(Seen<'_>),
    ) -> std::result::Result<Option<(i32, Rc<OwnedFd>)>, Told> {
        let stat = match rustix::fs::fstat(&fd) {
            Ok(stat) => stat,
            Err(e) => {
                sink(Seen::Problem(format!("a directory's status: {e}")));
                return Err(Told);
            }
        };
        let id = (stat.st_dev, stat.st_ino);
        let proc_path = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&fd));
        match inotify::add_watch(&self.inotify, proc_path.as_str(), FLAGS) {
            Ok(wd) => {
                self.place(wd, parent, name, id, sink);
                reached.insert(wd);
                Ok(Some((wd, Rc::new(fd))))
            }
            Err(Errno::ACCESS) => Ok(None),
            Err(Errno::NOSPC) => {
                sink(Seen::Problem(
                    "the system's limit on watched directories was reached (fs.inotify.max_user_watches); \
                     snapshots walk the whole tree"
                        .into(),
                ));
                Err(Told)
            }
            Err(e) => {
                sink(Seen::Problem(format!("watching a directory: {e}")));
                Err(Told)
            }
        }
    }

    /// The subdirectories of the open directory `fd` (watched as `wd`, at `path`), to watch.
    fn listed(&self, fd: &Rc<OwnedFd>, wd: i32, path: &Path, sink: &mut dyn FnMut(Seen<'_>)) -> Vec<Pending> {
        let mut out = Vec::new();
        let listed = read_names(fd, &mut |name, kind| {
            // A file system that does not give types: opening it (O_DIRECTORY) tells.
            if name != b"." && name != b".." && matches!(kind, FileType::Directory | FileType::Unknown) {
                let name = OsStr::from_bytes(name).to_os_string();
                out.push(Pending { parent_fd: Rc::clone(fd), parent_wd: wd, path: path.join(&name), name });
            }
        });
        match listed {
            Ok(()) | Err(Errno::ACCESS) => out,
            Err(e) => {
                sink(Seen::Problem(format!("listing {}: {e}", path.display())));
                out
            }
        }
    }

    /// Records that `wd` watches the directory `id`, placed at (`parent`, `name`).
    fn place(&mut self, wd: i32, parent: i32, name: OsString, id: (u64, u64), sink: &mut dyn FnMut(Seen<'_>)) {
        let moved_from = match self.by_wd.get(&wd) {
            Some(w) if (w.parent, &w.name) != (parent, &name) => Some((self.path_of(wd), w.id)),
            _ => None,
        };
        if let Some((Some(old), old_id)) = moved_from
            && old_id == id
            && self.is_at(&old, id)
        {
            let new = self.path_of(parent).map(|p| p.join(&name)).unwrap_or_default();
            sink(Seen::Problem(format!(
                "{} and {} are the same directory (a bind mount?); snapshots walk the whole tree",
                old.display(),
                new.display()
            )));
        }
        self.by_wd.insert(wd, Watched { parent, name, id });
    }
}

impl<F: Fn(&Path) -> bool + Send> Source for Watches<F> {
    fn pump(&mut self, wait: Duration, sink: &mut dyn FnMut(Seen<'_>)) {
        self.read(wait, sink);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// Every path the watches report within a short wait, relative to `root`, and every
    /// problem or loss.
    fn drain<F: Fn(&Path) -> bool>(w: &mut Watches<F>, root: &Path) -> (Vec<String>, Vec<String>) {
        let (mut paths, mut problems) = (Vec::new(), Vec::new());
        for _ in 0..4 {
            w.read(Duration::from_millis(50), &mut |seen| match seen {
                Seen::Path(p) => paths.push(p.strip_prefix(root).unwrap().to_string_lossy().into_owned()),
                Seen::Lost => problems.push("lost".into()),
                Seen::Problem(why) => problems.push(why),
            });
        }
        (paths, problems)
    }

    /// Writes the file `rel` and asserts the watches report it.
    fn write_and_see<F: Fn(&Path) -> bool>(w: &mut Watches<F>, root: &Path, rel: &str) {
        std::fs::write(root.join(rel), "x").unwrap();
        let (paths, _) = drain(w, root);
        assert!(paths.iter().any(|p| p == rel), "{rel}: {paths:?}");
    }

    /// Every watched directory's path, relative to `root`, sorted.
    fn watched_paths<F: Fn(&Path) -> bool>(w: &Watches<F>, root: &Path) -> Vec<String> {
        let mut out: Vec<String> = w
            .by_wd
            .keys()
            .map(|wd| w.path_of(*wd).unwrap().strip_prefix(root).unwrap().to_string_lossy().into_owned())
            .collect();
        out.sort();
        out
    }

    fn workspace() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("ws");
        std::fs::create_dir(&root).unwrap();
        let root = root.canonicalize().unwrap();
        (dir, root)
    }

    #[test]
    fn a_directory_moved_onto_a_deleted_ones_path_keeps_its_watch() {
        let (_dir, root) = workspace();
        std::fs::create_dir_all(root.join("a/sub")).unwrap();
        std::fs::create_dir_all(root.join("b/old")).unwrap();
        let mut w = Watches::new(&root, |_: &Path| true).unwrap();
        assert_eq!(watched_paths(&w, &root), ["", "a", "a/sub", "b", "b/old"]);
        std::fs::remove_dir_all(root.join("b")).unwrap();
        std::fs::rename(root.join("a"), root.join("b")).unwrap();
        let (paths, problems) = drain(&mut w, &root);
        assert!(problems.is_empty(), "{problems:?}");
        assert!(paths.contains(&"a".to_string()) && paths.contains(&"b".to_string()), "{paths:?}");
        assert_eq!(watched_paths(&w, &root), ["", "b", "b/sub"]);
        write_and_see(&mut w, &root, "b/sub/f");
    }

    #[test]
    fn a_directory_found_by_a_walk_before_its_move_is_read_keeps_its_watch() {
        // The move lands in a directory that is not watched yet: no IN_MOVED_TO, only the
        // walk of the new parent finds it (moving its watch), and the old parent's
        // IN_MOVED_FROM and the directory's IN_MOVE_SELF come after.
        let (_dir, root) = workspace();
        std::fs::create_dir_all(root.join("d1/d2")).unwrap();
        let mut w = Watches::new(&root, |_: &Path| true).unwrap();
        std::fs::create_dir_all(root.join("d3/d5")).unwrap();
        std::fs::rename(root.join("d1/d2"), root.join("d3/d5/d6")).unwrap();
        let (_, problems) = drain(&mut w, &root);
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(watched_paths(&w, &root), ["", "d1", "d3", "d3/d5", "d3/d5/d6"]);
        std::os::unix::fs::symlink("a.txt", root.join("d3/d5/d6/a.txt")).unwrap();
        let (paths, _) = drain(&mut w, &root);
        assert_eq!(paths, ["d3/d5/d6/a.txt"]);
    }

    #[test]
    fn a_directory_moved_out_of_the_tree_is_no_longer_watched() {
        let (dir, root) = workspace();
        std::fs::create_dir_all(root.join("a/sub/deeper")).unwrap();
        let mut w = Watches::new(&root, |_: &Path| true).unwrap();
        std::fs::rename(root.join("a"), dir.path().join("outside")).unwrap();
        let (paths, _) = drain(&mut w, &root);
        assert_eq!(paths, ["a"]);
        assert_eq!(watched_paths(&w, &root), [""]);
        std::fs::write(dir.path().join("outside/sub/f"), "x").unwrap();
        let (paths, _) = drain(&mut w, &root);
        assert!(paths.is_empty(), "{paths:?}");
    }

    #[test]
    fn what_is_below_a_moved_directory_moves_with_it_even_where_no_walk_reaches() {
        // After the first walk `hidden` is no longer wanted, so the walk of `b` after the
        // move does not reach `b/hidden/inner`; its watch still moves with its parent (a
        // path kept whole would still name `a/hidden/inner`).
        let (_dir, root) = workspace();
        std::fs::create_dir_all(root.join("a/hidden/inner")).unwrap();
        let hide = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let h = std::sync::Arc::clone(&hide);
        let wanted = move |p: &Path| {
            !(h.load(std::sync::atomic::Ordering::SeqCst) && p.components().any(|c| c.as_os_str() == "hidden"))
        };
        let mut w = Watches::new(&root, wanted).unwrap();
        hide.store(true, std::sync::atomic::Ordering::SeqCst);
        std::fs::rename(root.join("a"), root.join("b")).unwrap();
        drain(&mut w, &root);
        assert_eq!(watched_paths(&w, &root), ["", "b", "b/hidden", "b/hidden/inner"]);
        write_and_see(&mut w, &root, "b/hidden/inner/f");
    }

    /// Runs `f` on a thread of its own, with an unprivileged user's credentials when this
    /// process is root (permissions do not stop root); `dirs` are opened to that user first.
    fn unprivileged(dirs: &[&Path], f: impl FnOnce() + Send + 'static) {
        let root = rustix::process::geteuid().is_root();
        if root {
            for d in dirs {
                std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o777)).unwrap();
            }
        }
        let nobody = rustix::process::Uid::from_raw(65534);
        std::thread::spawn(move || {
            if root {
                // This thread only: the kernel keeps credentials per thread.
                rustix::thread::set_thread_res_uid(nobody, nobody, nobody).unwrap();
            }
            f();
        })
        .join()
        .expect("the unprivileged part passed");
    }

    #[test]
    fn a_directory_that_becomes_searchable_is_watched_with_what_is_below_it() {
        let (dir, root) = workspace();
        let ws = root.clone();
        unprivileged(&[dir.path(), &root], move || {
            let root = ws;
            std::fs::create_dir_all(root.join("p/c")).unwrap();
            std::fs::set_permissions(root.join("p"), std::fs::Permissions::from_mode(0o600)).unwrap();
            let mut w = Watches::new(&root, |_: &Path| true).unwrap();
            assert_eq!(watched_paths(&w, &root), ["", "p"]);
            std::fs::set_permissions(root.join("p"), std::fs::Permissions::from_mode(0o700)).unwrap();
            drain(&mut w, &root);
            assert_eq!(watched_paths(&w, &root), ["", "p", "p/c"]);
            write_and_see(&mut w, &root, "p/c/f");
        });
    }

    #[test]
    fn a_directory_swapped_for_a_symlink_to_itself_is_not_taken_for_a_bind_mount() {
        let (_dir, root) = workspace();
        std::fs::create_dir_all(root.join("a/sub")).unwrap();
        let mut w = Watches::new(&root, |_: &Path| true).unwrap();
        std::fs::rename(root.join("a"), root.join("b")).unwrap();
        std::os::unix::fs::symlink("b", root.join("a")).unwrap();
        let (_, problems) = drain(&mut w, &root);
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(watched_paths(&w, &root), ["", "b", "b/sub"]);
    }

    #[test]
    fn a_directory_visible_at_two_places_is_a_problem() {
        if !rustix::process::geteuid().is_root() {
            // Past the harness's capture, so a contributor sees what did not run.
            let _ = std::io::Write::write_all(
                &mut std::io::stderr(),
                b"skipped: the bind-mount watch check (needs root)\n",
            );
            return;
        }
        let (_dir, root) = workspace();
        std::fs::create_dir_all(root.join("a/sub")).unwrap();
        std::fs::create_dir_all(root.join("b")).unwrap();
        let mut w = Watches::new(&root, |_: &Path| true).unwrap();
        let (a, b) = (root.join("a"), root.join("b"));
        let mounted = std::process::Command::new("mount").arg("--bind").arg(&a).arg(&b).status();
        if !mounted.is_ok_and(|s| s.success()) {
            let _ = std::io::Write::write_all(
                &mut std::io::stderr(),
                b"skipped: the bind-mount watch check (no bind mount here)\n",
            );
            return;
        }
        let (_, problems) = drain(&mut w, &root);
        let _ = std::process::Command::new("umount").arg(&b).status();
        assert!(problems.iter().any(|p| p.contains("same directory")), "{problems:?}");
    }

    #[test]
    fn an_overflowed_queue_is_lost_and_every_directory_is_watched_again() {
        let (_dir, root) = workspace();
        std::fs::create_dir_all(root.join("a")).unwrap();
        let mut w = Watches::new(&root, |_: &Path| true).unwrap();
        // What an overflow hides: a directory created (its event dropped), one moved.
        std::fs::create_dir_all(root.join("new/inner")).unwrap();
        std::fs::rename(root.join("a"), root.join("b")).unwrap();
        let mut seen = Vec::new();
        w.event(-1, ReadFlags::QUEUE_OVERFLOW, None, &mut |s| {
            seen.push(matches!(s, Seen::Lost));
        });
        assert_eq!(seen, [true]);
        assert_eq!(watched_paths(&w, &root), ["", "b", "new", "new/inner"]);
        write_and_see(&mut w, &root, "new/inner/f");
    }

    #[test]
    fn symlinked_directories_and_unwanted_ones_are_not_watched() {
        let (_dir, root) = workspace();
        std::fs::create_dir_all(root.join("real/inner")).unwrap();
        std::fs::create_dir_all(root.join("skipped/inner")).unwrap();
        std::os::unix::fs::symlink("real", root.join("link")).unwrap();
        let skipped = root.join("skipped");
        let mut w = Watches::new(&root, move |p: &Path| !p.starts_with(&skipped)).unwrap();
        assert_eq!(watched_paths(&w, &root), ["", "real", "real/inner"]);
        std::fs::write(root.join("skipped/inner/f"), "x").unwrap();
        let (paths, _) = drain(&mut w, &root);
        assert!(paths.is_empty(), "{paths:?}");
    }
}
