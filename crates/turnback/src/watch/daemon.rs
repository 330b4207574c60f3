//! The watcher process: file-system events in (from a [`Source`]), a bounded dirty set, syncs answered over the
//! socket (see [the module](crate::watch) for what a sync guarantees).
//!
//! Invariants:
//! - One thread handles events in the order the platform delivers them; a sync's cookie is
//!   answered only once that thread has handled its event, so every earlier event is in
//!   the dirty set by then.
//! - A directory that appears (created, moved in) is watched by the event source before
//!   the next event is handled (see [`Source`]); it is dirty itself, so the next snapshot
//!   walks it whole and finds whatever was made in it before its watch existed.
//! - What the source loses (its queue overflowed) is recorded, in order, as a loss; what
//!   it can no longer see (a watch it cannot add) makes the watcher vouch for nothing.
//! - Of the workspace's own `.git` only `.git` and `.git/info` are watched.
//! - Paths under the workspace's own `.git` are not content (only `info/exclude` changes
//!   the walk: it is passed on so the snapshot walks everything); inside a nested
//!   repository's `.git` an event dirties the repository's directory (its commit is read
//!   again); paths under the store and the watcher's own cookies are dropped.
//! - A cookie is recorded (by name, in the store's `watch/` directory) before it is made and
//!   the record cleared only after it is removed, so a snapshot can tell the cookie in
//!   flight from a person's file of the same shape ([`super::cookie_in_flight`]), and a
//!   watcher killed mid-sync leaves a cookie the next one removes
//!   ([`remove_recorded_cookie`]). A file is a cookie to the watcher only if this watcher
//!   made it: every other change is content, whatever its name.

use std::collections::HashMap;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::base::hex;
use crate::error::{Error, ErrorCode, IoResultExt, Result};
use crate::fs::lock::NamedLock;
use crate::fs::{files, rules, walk};
use crate::watch::dirty::{Dirty, Since};
use crate::watch::{
    STATUS, STOP, SYNC, Seen, Source, Synced, WatchStatus, decode_request, encode_sync, poll_timeout, relative, source,
};

/// How often the threads that wait (for events, connections, the clock) look for an exit.
const EXIT_CHECK: Duration = Duration::from_millis(500);
/// How long a sync waits for its cookie's event.
const COOKIE_WAIT: Duration = Duration::from_secs(10);
/// The name every cookie starts with (then `.turnback-<32 hex>.tmp`: a temporary name).
const COOKIE_STEM: &[u8] = b".watch.turnback-";
/// How long the watcher knows a cookie it made for its own (its removal's event comes
/// within [`COOKIE_WAIT`] of its creation).
const COOKIE_KNOWN: Duration = Duration::from_secs(30);

/// What a watcher watches and where it answers.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    /// The workspace root (canonical).
    pub root: PathBuf,
    /// The socket to listen on.
    pub socket: PathBuf,
    /// The lock only a watcher of this workspace holds: (directory, name).
    pub lock: (PathBuf, String),
    /// Directories whose events are dropped (the store, when inside the workspace).
    pub skip: Vec<PathBuf>,
    /// Exit after this long without a sync.
    pub idle: Duration,
    /// Paths remembered at most.
    pub max_dirty: usize,
}

struct State {
    dirty: Dirty,
    /// Cookies seen, by name, with their sequence number and when (one no sync waits for
    /// any more is forgotten).
    cookies: HashMap<Vec<u8>, (u64, Instant)>,
    /// Cookies this watcher made, by name, with when (forgotten after [`COOKIE_KNOWN`]).
    made: HashMap<Vec<u8>, Instant>,
    /// Why the watcher cannot vouch for anything (it then answers every sync with none).
    problem: Option<String>,
    /// Why it is exiting.
    exit: Option<String>,
    events: u64,
    syncs: u64,
    last_sync: Instant,
    /// The ignore files above the root as the previous sync saw them (no event tells of
    /// them: they are outside what is watched).
    above: Vec<Option<(u64, i64, i64, u64)>>,
}

type Shared = Arc<(Mutex<State>, Condvar)>;

fn lock(shared: &Shared) -> std::sync::MutexGuard<'_, State> {
    shared.0.lock().unwrap_or_else(|p| p.into_inner())
}

/// How long a new watcher waits for the workspace's lock: a watcher told to stop lets go
/// of it within a poll or two, and one started just then must not lose to its exit.
const LOCK_WAIT: Duration = Duration::from_secs(3);

/// Runs the watcher until it is idle, told to stop, or its workspace or socket is gone.
/// Returns (`Ok`) if another watcher still holds the workspace's lock after
/// [`LOCK_WAIT`].
///
/// # Errors
/// `io` if the workspace cannot be watched or the socket bound.
pub(crate) fn run(cfg: &Config) -> Result<()> {
    let _only_one = match take_lock(cfg)? {
        Some(lock) => lock,
        None if replace_stuck(cfg) => match take_lock(cfg)? {
            Some(lock) => lock,
            None => return Ok(()),
        },
        None => return Ok(()),
    };
    // Who holds the lock, for a later watcher that finds this one stuck.
    let _ = std::fs::write(super::pid_record(&cfg.lock), std::process::id().to_string());
    let root = cfg.root.clone();
    let record = super::cookie_record(&cfg.lock);
    remove_recorded_cookie(&root, &record);
    let root_id = root.metadata().map(|m| (m.dev(), m.ino())).context(&root)?;
    let shared: Shared = Arc::new((
        Mutex::new(State {
            dirty: Dirty::new(cfg.max_dirty),
            cookies: HashMap::new(),
            made: HashMap::new(),
            problem: None,
            exit: None,
            events: 0,
            syncs: 0,
            last_sync: Instant::now(),
            above: ignore_files_above(&root),
        }),
        Condvar::new(),
    ));
    let events = {
        let (root, skip) = (root.clone(), cfg.skip.clone());
        source(&cfg.root, move |dir| watched_dir(&root, &skip, dir))?
    };
    let _ = std::fs::remove_file(&cfg.socket);
    let listener = UnixListener::bind(&cfg.socket).context(&cfg.socket)?;
    let started_at_ms = crate::base::time::now_ms();
    let epoch = {
        let mut bytes = [0u8; 16];
        getrandom::fill(&mut bytes).map_err(|e| Error::new(ErrorCode::Io, format!("random source: {e}")))?;
        hex::hex(&bytes)
    };
    std::thread::scope(|scope| -> Result<()> {
        let handler = Handler { root: &root, skip: &cfg.skip, shared: &shared };
        scope.spawn(move || handler.handle_all(events));
        scope.spawn(|| monitor(cfg, &root, root_id, &shared));
        let answered = serve(cfg, &root, &listener, &shared, &epoch, started_at_ms);
        let mut state = lock(&shared);
        state.exit.get_or_insert_with(|| "stopped".into());
        drop(state);
        shared.1.notify_all();
        let _ = std::fs::remove_file(&cfg.socket);
        // The handling and monitoring threads see the exit within `EXIT_CHECK`; the
        // handling thread owns the event source and drops it as it ends.
        answered
    })
}

/// Takes the workspace's watcher lock, waiting up to [`LOCK_WAIT`] for a watcher told to
/// stop to let go of it; `None` if another still holds it.
fn take_lock(cfg: &Config) -> Result<Option<NamedLock>> {
    let deadline = Instant::now() + LOCK_WAIT;
    loop {
        if let Some(lock) = NamedLock::try_exclusive(&cfg.lock.0, &cfg.lock.1)? {
            return Ok(Some(lock));
        }
        if Instant::now() >= deadline {
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Ends the watcher holding the lock if it is stuck — it accepts connections but does not
/// answer within [`super::SYNC_WAIT`] (stopped by a debugger or SIGSTOP, a suspended
/// machine) — and is this very program (its executable is ours: a recycled process id is
/// never killed). It is killed outright (a stopped process handles no other signal); what
/// it knew is rebuilt by a walk. Logged in the watchers' log. True if it was ended.
fn replace_stuck(cfg: &Config) -> bool {
    if super::liveness(&cfg.socket, super::SYNC_WAIT) != super::Liveness::Stuck {
        return false;
    }
    let Some(pid) = std::fs::read_to_string(super::pid_record(&cfg.lock)).ok().and_then(|p| p.trim().parse().ok())
    else {
        return false;
    };
    let ours = match (std::fs::read_link(format!("/proc/{pid}/exe")), std::env::current_exe()) {
        (Ok(theirs), Ok(mine)) => theirs == mine,
        _ => false,
    };
    let Some(process) = rustix::process::Pid::from_raw(pid).filter(|_| ours) else { return false };
    if rustix::process::kill_process(process, rustix::process::Signal::KILL).is_err() {
        return false;
    }
    use std::io::Write;
    let line = format!(
        "{} replaced watcher {pid}: it did not answer within {} ms\n",
        crate::base::time::format_ms(crate::base::time::now_ms()),
        super::SYNC_WAIT.as_millis()
    );
    if let Ok(mut log) = std::fs::OpenOptions::new().create(true).append(true).open(super::log_of(&cfg.lock)) {
        let _ = log.write_all(line.as_bytes());
    }
    true
}

/// Checks every [`EXIT_CHECK`] whether to exit: idle too long, workspace root or socket gone.
fn monitor(cfg: &Config, root: &Path, root_id: (u64, u64), shared: &Shared) {
    loop {
        std::thread::sleep(EXIT_CHECK);
        let why = {
            let state = lock(shared);
            if state.exit.is_some() {
                return;
            }
            if state.last_sync.elapsed() > cfg.idle {
                Some(format!("idle for {} s", cfg.idle.as_secs()))
            } else if root.metadata().map(|m| (m.dev(), m.ino())).ok() != Some(root_id) {
                Some("the workspace was deleted or moved".to_string())
            } else if cfg.socket.symlink_metadata().is_err() {
                Some("its socket was removed".to_string())
            } else {
                None
            }
        };
        if let Some(why) = why {
            lock(shared).exit = Some(why);
            shared.1.notify_all();
            return;
        }
    }
}

/// Answers connections one at a time until told to exit.
fn serve(
    cfg: &Config,
    root: &Path,
    listener: &UnixListener,
    shared: &Shared,
    epoch: &str,
    started_at_ms: i64,
) -> Result<()> {
    listener.set_nonblocking(true).context(&cfg.socket)?;
    let record = super::cookie_record(&cfg.lock);
    loop {
        if lock(shared).exit.is_some() {
            return Ok(());
        }
        let Some(mut stream) = accept(listener, EXIT_CHECK) else { continue };
        let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
        let _ = stream.set_write_timeout(Some(Duration::from_secs(30)));
        let mut bytes = Vec::new();
        if std::io::Read::read_to_end(&mut stream, &mut bytes).is_err() {
            continue;
        }
        let Some((kind, previous_epoch, previous_seq)) = decode_request(&bytes) else { continue };
        let reply = match kind {
            SYNC => encode_sync(&sync(root, &record, shared, epoch, &previous_epoch, previous_seq)),
            STATUS | STOP => {
                let state = lock(shared);
                let (dirty, _, _, overflows) = state.dirty.counts();
                let status = WatchStatus {
                    running: true,
                    pid: Some(std::process::id()),
                    problem: state.problem.clone(),
                    dirty_paths: dirty as u64,
                    events: state.events,
                    overflows,
                    syncs: state.syncs,
                    started_at_ms: Some(started_at_ms),
                    idle_exit_secs: cfg.idle.as_secs(),
                };
                serde_json::to_vec(&status).unwrap_or_default()
            }
            _ => continue,
        };
        if kind == STOP {
            // Gone before the answer: once `watch stop` returns, nothing takes this watcher
            // for a running one, and a watcher started then waits for the lock it holds.
            let _ = std::fs::remove_file(&cfg.socket);
        }
        let _ = std::io::Write::write_all(&mut stream, &reply);
        drop(stream);
        if kind == STOP {
            lock(shared).exit = Some("told to stop".into());
            return Ok(());
        }
    }
}

/// The next connection, if one arrives within `wait`. The accept loop never blocks longer,
/// so it sees an exit even when nothing can connect to wake it (the socket's directory
/// deleted with the store).
fn accept(listener: &UnixListener, wait: Duration) -> Option<UnixStream> {
    let timeout = poll_timeout(wait);
    let mut fds = [rustix::event::PollFd::new(listener, rustix::event::PollFlags::IN)];
    match rustix::event::poll(&mut fds, Some(&timeout)) {
        Ok(0) | Err(_) => return None,
        Ok(_) => {}
    }
    // Accepted sockets inherit the listener's non-blocking flag on some platforms.
    let (stream, _) = listener.accept().ok()?;
    stream.set_nonblocking(false).ok()?;
    Some(stream)
}

/// One sync: a cookie through the event stream, then what changed since the previous mark.
/// The cookie is recorded at `record` before it is made and the record cleared after it
/// is removed.
fn sync(root: &Path, record: &Path, shared: &Shared, epoch: &str, previous_epoch: &str, previous_seq: u64) -> Synced {
    {
        let mut state = lock(shared);
        state.last_sync = Instant::now();
        state.syncs += 1;
        if let Some(problem) = &state.problem {
            return Synced::None { why: problem.clone() };
        }
    }
    let mut id = [0u8; 16];
    if getrandom::fill(&mut id).is_err() {
        return Synced::None { why: "no random source".into() };
    }
    let mut name = COOKIE_STEM.to_vec();
    name.extend_from_slice(hex::hex(&id).as_bytes());
    name.extend_from_slice(b".tmp");
    debug_assert!(files::temp_phase(&name).is_some(), "a cookie's name is shaped as a temporary file's");
    if let Err(e) = write_record(record, &name, true) {
        return Synced::None { why: format!("cannot record the sync cookie: {e}") };
    }
    {
        let mut state = lock(shared);
        state.made.retain(|_, at| at.elapsed() < COOKIE_KNOWN);
        state.made.insert(name.clone(), Instant::now());
    }
    let path = root.join(std::ffi::OsStr::from_bytes(&name));
    if let Err(e) = std::fs::OpenOptions::new().write(true).create_new(true).open(&path) {
        let _ = write_record(record, b"", false);
        return Synced::None { why: format!("cannot write the sync cookie in the workspace root: {e}") };
    }
    let deadline = Instant::now() + COOKIE_WAIT;
    let mut state = lock(shared);
    let seq = loop {
        if let Some((seq, _)) = state.cookies.remove(&name) {
            break Some(seq);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || state.exit.is_some() {
            break None;
        }
        state = shared.1.wait_timeout(state, left).unwrap_or_else(|p| p.into_inner()).0;
    };
    drop(state);
    if std::fs::remove_file(&path).is_ok() {
        let _ = write_record(record, b"", false);
    }
    let Some(seq) = seq else {
        return Synced::None { why: "the watcher did not see its sync cookie in time".into() };
    };
    let above = ignore_files_above(root);
    let mut state = lock(shared);
    if let Some(problem) = &state.problem {
        return Synced::None { why: problem.clone() };
    }
    if above != state.above {
        // An ignore file above the workspace changed: everything before is doubtful.
        state.above = above;
        state.dirty.lost();
        let seq = state.dirty.tick();
        return Synced::Walk {
            epoch: epoch.to_string(),
            seq,
            why: "an ignore file above the workspace changed".into(),
        };
    }
    let epoch = epoch.to_string();
    if previous_epoch != epoch {
        let why = if previous_epoch.is_empty() {
            "the previous snapshot has no mark of this watcher"
        } else {
            "the watcher restarted since the previous snapshot"
        };
        return Synced::Walk { epoch, seq, why: why.into() };
    }
    match state.dirty.since(previous_seq) {
        Since::Paths(paths) => Synced::Changed { epoch, seq, paths },
        Since::Lost => Synced::Walk { epoch, seq, why: "the watcher lost track of events since then".into() },
    }
}

/// The stat of every ignore file the walk reads that no watch sees: `.gitignore` and
/// `.ignore` of each directory above the root, and `info/exclude` of the repository of the
/// root and of each directory above it (for a linked worktree, in its main repository).
fn ignore_files_above(root: &Path) -> Vec<Option<(u64, i64, i64, u64)>> {
    let mut out = Vec::new();
    for dir in root.ancestors() {
        let exclude = rules::git_common_dir(dir).map(|git| git.join("info/exclude"));
        let above = (dir != root).then(|| [dir.join(".gitignore"), dir.join(".ignore")]);
        for file in above.into_iter().flatten().chain(exclude) {
            out.push(file.metadata().ok().map(|m| {
                (
                    m.ino(),
                    m.mtime_nsec() + m.mtime() * 1_000_000_000,
                    m.ctime_nsec() + m.ctime() * 1_000_000_000,
                    m.size(),
                )
            }));
        }
    }
    out
}

/// Whether the watcher watches the directory `dir`: not one of `skip` (the store), nothing
/// the walk leaves out whatever the ignore files say (dependency folders, credentials'
/// directories: [`walk::excluded`]) — except `.git`, of which only what tells a snapshot
/// something: of the workspace's own, `.git` itself and `.git/info` (where `exclude`
/// lives); of a nested repository's, `.git` and `.git/refs` with what is below it (where
/// its commit is).
fn watched_dir(root: &Path, skip: &[PathBuf], dir: &Path) -> bool {
    if skip.iter().any(|s| dir.starts_with(s)) {
        return false;
    }
    let Ok(rel) = dir.strip_prefix(root) else { return false };
    let parts: Vec<&[u8]> = rel.components().map(|c| c.as_os_str().as_bytes()).collect();
    let mut parent = None;
    for (i, part) in parts.iter().enumerate() {
        if *part == b".git" {
            let below = &parts[i + 1..];
            return if i == 0 {
                below.is_empty() || below == [b"info"]
            } else {
                below.first().is_none_or(|b| *b == b"refs")
            };
        }
        if walk::excluded(part, parent) {
            return false;
        }
        parent = Some(*part);
    }
    true
}

/// The thread that handles events in order.
struct Handler<'a> {
    root: &'a Path,
    skip: &'a [PathBuf],
    shared: &'a Shared,
}

impl Handler<'_> {
    fn handle_all(&self, mut events: Box<dyn Source>) {
        while lock(self.shared).exit.is_none() {
            events.pump(EXIT_CHECK, &mut |seen| self.seen(seen));
            self.shared.1.notify_all();
        }
    }

    fn seen(&self, seen: Seen<'_>) {
        match seen {
            Seen::Path(path) => self.touch(path),
            Seen::Lost => {
                lock(self.shared).dirty.lost();
            }
            Seen::Problem(why) => {
                let mut state = lock(self.shared);
                state.dirty.lost();
                state.problem.get_or_insert(why);
            }
        }
    }

    /// Records one path an event named.
    fn touch(&self, path: &Path) {
        let Some(rel) = relative(self.root, path) else { return };
        let mut state = lock(self.shared);
        state.events += 1;
        if rel.is_empty() {
            return; // the root itself: its deletion is the monitor's
        }
        if self.skip.iter().any(|s| path.starts_with(s)) {
            return;
        }
        // Only a cookie this watcher made is one; a file of any other name is content.
        if state.made.contains_key(rel) {
            let seq = state.dirty.tick();
            // Its removal is an event too, after its sync took it: bounded by age.
            state.cookies.retain(|_, (_, at)| at.elapsed() < COOKIE_WAIT);
            state.cookies.insert(rel.to_vec(), (seq, Instant::now()));
            return;
        }
        if let Some(dirty) = content_path(rel) {
            state.dirty.touch(dirty.to_vec());
        }
    }
}

/// Writes `name` (empty: no cookie in flight) as the cookie record at `record`, durably
/// with `sync`.
fn write_record(record: &Path, name: &[u8], sync: bool) -> std::io::Result<()> {
    let mut file = std::fs::OpenOptions::new().write(true).create(true).truncate(true).open(record)?;
    std::io::Write::write_all(&mut file, name)?;
    if sync { file.sync_data() } else { Ok(()) }
}

/// Removes the cookie a watcher killed mid-sync left in `root`, as its record at `record`
/// names it, then clears the record; true if a cookie was removed. Only a name the record
/// holds is removed, and only one shaped as a cookie's. The caller holds the watcher's
/// lock, so no sync is in flight.
pub(super) fn remove_recorded_cookie(root: &Path, record: &Path) -> bool {
    let Ok(name) = std::fs::read(record) else { return false };
    if name.is_empty() {
        return false;
    }
    let is_cookie = name.starts_with(COOKIE_STEM) && !name.contains(&b'/') && files::temp_phase(&name).is_some();
    let removed = is_cookie && std::fs::remove_file(root.join(std::ffi::OsStr::from_bytes(&name))).is_ok();
    if !is_cookie || removed || !root.join(std::ffi::OsStr::from_bytes(&name)).exists() {
        let _ = write_record(record, b"", false);
    }
    removed
}

/// The path a change at `rel` dirties: itself; for one inside a nested repository's `.git`,
/// the repository's directory; for the workspace's own `.git`, nothing but `info/exclude`
/// (which changes what the walk leaves out).
fn content_path(rel: &[u8]) -> Option<&[u8]> {
    let mut at = 0;
    for comp in rel.split(|c| *c == b'/') {
        if comp == b".git" {
            if at == 0 {
                let exclude = rel == b".git" || rel == b".git/info" || rel == b".git/info/exclude";
                return exclude.then_some(rel);
            }
            return Some(&rel[..at - 1]);
        }
        at += comp.len() + 1;
    }
    Some(rel)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn git_internals_dirty_the_repository_or_nothing() {
        assert_eq!(content_path(b"src/a.rs"), Some(&b"src/a.rs"[..]));
        assert_eq!(content_path(b"vendor/lib/.git/HEAD"), Some(&b"vendor/lib"[..]));
        assert_eq!(content_path(b"vendor/lib/.git/refs/heads/main"), Some(&b"vendor/lib"[..]));
        assert_eq!(content_path(b".git/index"), None);
        assert_eq!(content_path(b".git/objects/ab/cdef"), None);
        assert_eq!(content_path(b".git/info/exclude"), Some(&b".git/info/exclude"[..]));
        assert_eq!(content_path(b".gitignore"), Some(&b".gitignore"[..]));
    }

    #[test]
    fn the_store_and_the_workspaces_own_git_internals_are_not_watched() {
        let root = Path::new("/ws");
        let skip = [PathBuf::from("/ws/.turnback")];
        let watched = |p: &str| watched_dir(root, &skip, Path::new(p));
        assert!(watched("/ws") && watched("/ws/src") && watched("/ws/.git") && watched("/ws/.git/info"));
        assert!(!watched("/ws/.git/objects") && !watched("/ws/.git/objects/ab") && !watched("/ws/.git/info/x"));
        assert!(watched("/ws/vendor/lib/.git") && watched("/ws/vendor/lib/.git/refs/heads/topic"));
        assert!(!watched("/ws/vendor/lib/.git/objects/ab") && !watched("/ws/vendor/lib/.git/logs"));
        assert!(!watched("/ws/web/node_modules") && !watched("/ws/web/node_modules/x") && !watched("/ws/.venv/lib"));
        assert!(!watched("/ws/.turnback") && !watched("/ws/.turnback/watch") && !watched("/elsewhere"));
    }

    #[test]
    fn only_the_cookie_a_dead_watcher_recorded_is_removed() {
        let dir = tempfile::tempdir().unwrap();
        let (root, record) = (dir.path().join("ws"), dir.path().join("watch-x.cookie"));
        std::fs::create_dir(&root).unwrap();
        let name = |c: u8| {
            let mut name = COOKIE_STEM.to_vec();
            name.extend_from_slice(&[c; 32]);
            name.extend_from_slice(b".tmp");
            String::from_utf8(name).unwrap()
        };
        let (left, look_alike) = (name(b'a'), name(b'b'));
        std::fs::write(root.join(&left), "").unwrap();
        std::fs::write(root.join(&look_alike), "a person's file").unwrap();
        write_record(&record, left.as_bytes(), true).unwrap();
        assert!(remove_recorded_cookie(&root, &record));
        assert!(!root.join(&left).exists());
        assert_eq!(std::fs::read(root.join(&look_alike)).unwrap(), b"a person's file");
        assert_eq!(std::fs::read(&record).unwrap(), b"", "the record is cleared");
        // Nothing recorded: nothing removed, whatever the root holds.
        assert!(!remove_recorded_cookie(&root, &record));
        std::fs::write(&record, "../outside").unwrap();
        assert!(!remove_recorded_cookie(&root, &record), "only a cookie's name is ever removed");
        assert!(root.join(&look_alike).exists());
    }

    #[test]
    fn cookies_are_temporary_names() {
        let mut name = COOKIE_STEM.to_vec();
        name.extend_from_slice(&[b'a'; 32]);
        name.extend_from_slice(b".tmp");
        assert!(files::temp_phase(&name).is_some());
    }
}
