//! The file watcher behind O(changes) snapshots: one background process per workspace
//! ([`daemon`]) that listens to file-system events and tells a snapshot what changed since
//! the session's previous one.
//!
//! Invariants:
//! - **Never a wrong snapshot.** A snapshot first *syncs*: the watcher creates a cookie
//!   file in the workspace root (recorded first, so no snapshot records it while it is in
//!   flight: [`cookie_in_flight`]), waits for its event and removes it. Events of one
//!   watcher arrive in order, so every change made before the sync has been seen by then. The reply is the watcher's epoch (random per process), the cookie's
//!   sequence number (the *mark*, recorded with the snapshot) and the paths changed after
//!   the mark the previous snapshot recorded — or "walk everything" when that mark is of
//!   another epoch, older than what the watcher still holds (an overflow, a failed watch)
//!   or when the watcher is unhealthy. The mark is taken before the snapshot stats anything,
//!   so a change during a snapshot is dirty for the next one.
//! - **Nothing with a path is written.** Paths live in the watcher's memory and travel only
//!   over its Unix socket, which lives in the store's 0700 `watch/` directory (or, when
//!   that path is too long for a socket address, in a 0700 directory of this user's under
//!   `/tmp`, checked to be theirs); the directory's permissions are the authentication.
//! - **It slows nobody.** Agents and snapshots take no lock the watcher holds; the watcher
//!   holds only its own lock (one watcher per workspace). It exits after `watch-idle-seconds`
//!   without a sync, when its workspace root or its socket disappears, or when told to.
//! - **Bounded.** It remembers at most [`max_dirty`] paths; past that it forgets them and
//!   the next snapshot of every session walks the whole tree.

pub(crate) mod daemon;
pub(crate) mod dirty;
#[cfg(target_os = "linux")]
mod inotify;
#[cfg(any(not(target_os = "linux"), test))]
mod recursive;

use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::{Error, ErrorCode, IoResultExt, Result};

/// Paths the watcher remembers at most (`TURNBACK_WATCH_MAX_DIRTY` lowers it, for tests).
pub(crate) fn max_dirty() -> usize {
    std::env::var("TURNBACK_WATCH_MAX_DIRTY").ok().and_then(|v| v.parse().ok()).unwrap_or(250_000)
}

/// What an event source tells the watcher, in the order things happened.
pub(crate) enum Seen<'a> {
    /// Something at this (absolute) path changed: created, written, removed, moved from or
    /// to, its mode changed.
    Path(&'a Path),
    /// Events may have been lost: the next snapshot of every session walks everything.
    Lost,
    /// The source can no longer see every change; the watcher vouches for nothing more.
    Problem(String),
}

/// The platform's file-system events for one workspace.
pub(crate) trait Source: Send {
    /// Waits up to `wait` for events, then hands those queued to `sink`, in order (at most
    /// a buffer's worth, so the caller can act between calls). A directory that appears is
    /// watched before the next event is handed over.
    fn pump(&mut self, wait: Duration, sink: &mut dyn FnMut(Seen<'_>));
}

/// Starts watching `root`: every directory under it that `wanted` accepts (on platforms
/// that watch a whole tree at once, everything; unwanted paths are dropped as they are
/// recorded).
///
/// # Errors
/// `io` if the platform's events are unavailable or the tree cannot be watched.
pub(crate) fn source(root: &Path, wanted: impl Fn(&Path) -> bool + Send + 'static) -> Result<Box<dyn Source>> {
    #[cfg(target_os = "linux")]
    return Ok(Box::new(inotify::Watches::new(root, wanted)?));
    #[cfg(not(target_os = "linux"))]
    {
        let _ = wanted;
        Ok(Box::new(recursive::Recursive::new(root)?))
    }
}

/// `wait` as a poll timeout.
pub(crate) fn poll_timeout(wait: Duration) -> rustix::event::Timespec {
    rustix::event::Timespec { tv_sec: wait.as_secs() as _, tv_nsec: wait.subsec_nanos() as _ }
}

/// Where a snapshot stood in its watcher's stream of events: recorded with the snapshot,
/// asked about by the next one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct WatchMark {
    /// The watcher process's random epoch (hex).
    pub(crate) epoch: String,
    /// The sequence number of the snapshot's sync.
    pub(crate) seq: u64,
    /// `max-file-size` when it was taken: a changed limit means a full walk.
    pub(crate) max_file_bytes: u64,
}

/// What a sync found.
#[derive(Debug)]
pub(crate) enum Synced {
    /// The paths changed since the previous mark (relative, `/`-separated), and the new mark.
    Changed { epoch: String, seq: u64, paths: Vec<Vec<u8>> },
    /// A new mark, but the previous one cannot be answered: walk everything.
    Walk { epoch: String, seq: u64, why: String },
    /// No watcher, or one that cannot vouch for anything now.
    None { why: String },
}

/// A running watcher's state, as `turnback watch status` shows it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct WatchStatus {
    /// Whether a watcher runs for the workspace.
    pub running: bool,
    /// Its process id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// Why it cannot vouch for changes (snapshots then walk everything), if so.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
    /// Paths it holds as changed.
    pub dirty_paths: u64,
    /// Events seen.
    pub events: u64,
    /// How often it lost track (queue overflow, bound reached) and snapshots walked again.
    pub overflows: u64,
    /// Syncs answered.
    pub syncs: u64,
    /// When it started (ms since epoch).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub started_at_ms: Option<i64>,
    /// It exits after this many seconds without a sync.
    pub idle_exit_secs: u64,
}

impl WatchStatus {
    pub(crate) fn not_running() -> Self {
        WatchStatus {
            running: false,
            pid: None,
            problem: None,
            dirty_paths: 0,
            events: 0,
            overflows: 0,
            syncs: 0,
            started_at_ms: None,
            idle_exit_secs: 0,
        }
    }
}

/// Starts the watcher process for a workspace (the command line spawns `turnback watch
/// run` detached); the library decides when.
pub trait StartWatcher {
    /// Starts a watcher for `workspace` in the background; returns once it is spawned.
    ///
    /// # Errors
    /// `io` if it cannot be started.
    fn start(&self, workspace: &Path) -> Result<()>;

    /// Why the watcher started last has already exited, if it failed (so `watch start`
    /// need not wait for an answer that will not come).
    fn failed(&self) -> Option<String> {
        None
    }
}

/// Socket addresses hold at most this many bytes (`sun_path` is 108 on Linux, 104 on macOS).
const SUN_PATH_MAX: usize = 100;

/// Where the watcher of `workspace_id` listens: `STORE/watch/ID.sock`, or, when that is too
/// long for a socket address, `/tmp/turnback-UID/ID.sock` (a 0700 directory of this user,
/// created if needed and refused if it is anyone else's or open to others).
///
/// # Errors
/// `io` if the directory cannot be made private.
pub(crate) fn socket_path(store_dir: &Path, workspace_id: &str) -> Result<PathBuf> {
    let name = format!("{}.sock", workspace_id.replace('-', ""));
    // One store, one socket, however its path is spelled (`..`, a symlink): the length
    // decides where the socket goes, so it is measured on the canonical path.
    let store_dir = canonical(store_dir);
    let dir = store_dir.join("watch");
    let candidate = dir.join(&name);
    let dir = if candidate.as_os_str().len() <= SUN_PATH_MAX {
        dir
    } else {
        PathBuf::from(format!("/tmp/turnback-{}", rustix::process::geteuid().as_raw()))
    };
    private_dir(&dir)?;
    Ok(dir.join(name))
}

/// The watcher's lock directory and lock name (held by the watcher alone).
pub(crate) fn lock_of(store_dir: &Path, workspace_id: &str) -> (PathBuf, String) {
    (canonical(store_dir).join("watch"), format!("watch-{}", workspace_id.replace('-', "")))
}

/// The record of a watcher's sync cookie in flight, beside its lock (`lock`, as
/// [`lock_of`] gives it): the cookie's name from before the cookie is made until after it
/// is removed, empty (or absent) otherwise.
pub(crate) fn cookie_record(lock: &(PathBuf, String)) -> PathBuf {
    lock.0.join(format!("{}.cookie", lock.1))
}

/// Whether `name` (in the workspace root) is the sync cookie the watcher of `workspace_id`
/// has in flight, as its record says. Asked after `name` was seen, the answer is safe
/// against the sync running meanwhile: the record is cleared only once the cookie is gone.
pub(crate) fn cookie_in_flight(store_dir: &Path, workspace_id: &str, name: &[u8]) -> bool {
    std::fs::read(cookie_record(&lock_of(store_dir, workspace_id))).is_ok_and(|r| !r.is_empty() && r == name)
}

/// Removes the sync cookie a watcher killed mid-sync left in `root`, if no watcher of
/// `workspace_id` runs (a new watcher does the same as it starts); true if one was.
///
/// # Errors
/// `io` if the watcher's lock cannot be opened.
pub(crate) fn remove_dead_cookie(store_dir: &Path, workspace_id: &str, root: &Path) -> Result<bool> {
    let lock = lock_of(store_dir, workspace_id);
    let record = cookie_record(&lock);
    if std::fs::metadata(&record).map_or(true, |m| m.len() == 0) {
        return Ok(false);
    }
    let Some(_only_one) = crate::fs::lock::NamedLock::try_exclusive(&lock.0, &lock.1)? else { return Ok(false) };
    Ok(daemon::remove_recorded_cookie(root, &record))
}

/// `dir` with `..`, `.` and symlinks resolved (as it is, if it cannot be).
fn canonical(dir: &Path) -> PathBuf {
    std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf())
}

/// Creates `dir` 0700 if missing; refuses one that is a symlink, not ours, or open to others.
fn private_dir(dir: &Path) -> Result<()> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e).context(dir),
    }
    let meta = dir.symlink_metadata().context(dir)?;
    let uid = rustix::process::geteuid().as_raw();
    if !meta.is_dir() || meta.uid() != uid || meta.mode() & 0o077 != 0 {
        return Err(Error::new(
            ErrorCode::Io,
            format!("{} is not a private directory of this user (0700); refusing to use it", dir.display()),
        ));
    }
    Ok(())
}

/// Requests (one per connection): sync since a mark, status, stop.
const SYNC: u8 = b'S';
const STATUS: u8 = b'T';
const STOP: u8 = b'Q';

/// Reply tags to a sync.
const CHANGED: u8 = 0;
const WALK: u8 = 1;
const NONE: u8 = 2;

/// How long a snapshot waits for the watcher's answer before it walks instead. A healthy
/// watcher answers in milliseconds; one stopped (SIGSTOP, a suspended machine) or swamped
/// must not hold up the agent waiting on the hook: the walk is always right.
pub(crate) const SYNC_WAIT: Duration = Duration::from_millis(800);

fn connect(socket: &Path, timeout: Duration) -> Option<UnixStream> {
    let stream = UnixStream::connect(socket).ok()?;
    stream.set_read_timeout(Some(timeout)).ok()?;
    stream.set_write_timeout(Some(timeout)).ok()?;
    Some(stream)
}

/// Syncs with the watcher at `socket`: what changed since `previous` (`None`: a first
/// snapshot, or one after a full walk without a mark).
pub(crate) fn sync(socket: &Path, previous: Option<&WatchMark>) -> Synced {
    let Some(mut stream) = connect(socket, SYNC_WAIT) else {
        return Synced::None { why: "no watcher runs for this workspace".into() };
    };
    let mut request = vec![SYNC];
    let (epoch, seq) = previous.map_or((String::new(), 0), |m| (m.epoch.clone(), m.seq));
    put_bytes(&mut request, epoch.as_bytes());
    request.extend_from_slice(&seq.to_le_bytes());
    let reply = stream.write_all(&request).and_then(|()| {
        let _ = stream.shutdown(std::net::Shutdown::Write);
        let mut bytes = Vec::new();
        stream.read_to_end(&mut bytes).map(|_| bytes)
    });
    match reply.ok().and_then(|bytes| decode_sync(&bytes)) {
        Some(synced) => synced,
        None => Synced::None { why: "the watcher did not answer".into() },
    }
}

fn decode_sync(bytes: &[u8]) -> Option<Synced> {
    let mut rest = bytes;
    let tag = *take(&mut rest, 1)?.first()?;
    let epoch = String::from_utf8(take_bytes(&mut rest)?.to_vec()).ok()?;
    let seq = u64::from_le_bytes(take(&mut rest, 8)?.try_into().ok()?);
    let why = String::from_utf8(take_bytes(&mut rest)?.to_vec()).ok()?;
    match tag {
        CHANGED => {
            let count = u64::from_le_bytes(take(&mut rest, 8)?.try_into().ok()?);
            let mut paths = Vec::with_capacity(count.min(1 << 20) as usize);
            for _ in 0..count {
                paths.push(take_bytes(&mut rest)?.to_vec());
            }
            rest.is_empty().then_some(Synced::Changed { epoch, seq, paths })
        }
        WALK => Some(Synced::Walk { epoch, seq, why }),
        NONE => Some(Synced::None { why }),
        _ => None,
    }
}

pub(crate) fn encode_sync(synced: &Synced) -> Vec<u8> {
    let mut out = Vec::new();
    let (tag, epoch, seq, why) = match synced {
        Synced::Changed { epoch, seq, .. } => (CHANGED, epoch.as_str(), *seq, ""),
        Synced::Walk { epoch, seq, why } => (WALK, epoch.as_str(), *seq, why.as_str()),
        Synced::None { why } => (NONE, "", 0, why.as_str()),
    };
    out.push(tag);
    put_bytes(&mut out, epoch.as_bytes());
    out.extend_from_slice(&seq.to_le_bytes());
    put_bytes(&mut out, why.as_bytes());
    if let Synced::Changed { paths, .. } = synced {
        out.extend_from_slice(&(paths.len() as u64).to_le_bytes());
        for p in paths {
            put_bytes(&mut out, p);
        }
    }
    out
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_le_bytes());
    out.extend_from_slice(b);
}

fn take<'a>(rest: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
    let (head, tail) = rest.split_at_checked(n)?;
    *rest = tail;
    Some(head)
}

fn take_bytes<'a>(rest: &mut &'a [u8]) -> Option<&'a [u8]> {
    let n = u32::from_le_bytes(take(rest, 4)?.try_into().ok()?) as usize;
    take(rest, n)
}

/// The request a connection carries: `(kind, previous epoch, previous seq)`.
pub(crate) fn decode_request(bytes: &[u8]) -> Option<(u8, String, u64)> {
    let mut rest = bytes;
    let kind = *take(&mut rest, 1)?.first()?;
    if kind != SYNC {
        return Some((kind, String::new(), 0));
    }
    let epoch = String::from_utf8(take_bytes(&mut rest)?.to_vec()).ok()?;
    let seq = u64::from_le_bytes(take(&mut rest, 8)?.try_into().ok()?);
    Some((kind, epoch, seq))
}

fn ask(socket: &Path, kind: u8) -> Result<WatchStatus> {
    let Some(mut stream) = connect(socket, Duration::from_secs(10)) else {
        return Ok(WatchStatus::not_running());
    };
    let mut bytes = Vec::new();
    stream
        .write_all(&[kind])
        .and_then(|()| {
            let _ = stream.shutdown(std::net::Shutdown::Write);
            stream.read_to_end(&mut bytes)
        })
        .map_err(|e| Error::new(ErrorCode::Io, format!("the watcher did not answer: {e}")))?;
    serde_json::from_slice(&bytes).map_err(|e| Error::new(ErrorCode::Io, format!("the watcher's answer: {e}")))
}

/// The state of the watcher at `socket` (`running: false` if none answers).
///
/// # Errors
/// `io` if one answers with something unreadable.
pub(crate) fn status(socket: &Path) -> Result<WatchStatus> {
    ask(socket, STATUS)
}

/// Tells the watcher at `socket` to exit; returns its last state (`running: false` if
/// none answered).
///
/// # Errors
/// `io` if one answers with something unreadable.
pub(crate) fn stop(socket: &Path) -> Result<WatchStatus> {
    ask(socket, STOP)
}

/// Whether a watcher is there and answering.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Liveness {
    /// It answered a status request within the wait.
    Answers,
    /// Nothing listens at the socket.
    Absent,
    /// Something accepted the connection but did not answer in time (stopped, swamped).
    Stuck,
}

/// Asks the watcher at `socket` for its status, waiting at most `wait`.
pub(crate) fn liveness(socket: &Path, wait: Duration) -> Liveness {
    let Some(mut stream) = connect(socket, wait) else { return Liveness::Absent };
    let mut bytes = Vec::new();
    let answered = stream.write_all(&[STATUS]).and_then(|()| {
        let _ = stream.shutdown(std::net::Shutdown::Write);
        stream.read_to_end(&mut bytes)
    });
    match answered {
        Ok(_) if serde_json::from_slice::<WatchStatus>(&bytes).is_ok() => Liveness::Answers,
        _ => Liveness::Stuck,
    }
}

/// Where the watcher holding `lock` (as [`lock_of`] gives it) writes its process id.
pub(crate) fn pid_record(lock: &(PathBuf, String)) -> PathBuf {
    lock.0.join(format!("{}.pid", lock.1))
}

/// The watchers' log (replacements), beside their locks: `STORE/watch/watch.log`.
pub(crate) fn log_of(lock: &(PathBuf, String)) -> PathBuf {
    lock.0.join("watch.log")
}

/// `path` relative to `root`, as bytes (`None` outside it).
fn relative<'a>(root: &Path, path: &'a Path) -> Option<&'a [u8]> {
    let rel = path.strip_prefix(root).ok()?;
    Some(rel.as_os_str().as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sync_replies_round_trip() {
        let changed = Synced::Changed { epoch: "ab".into(), seq: 7, paths: vec![b"a/b".to_vec(), b"n\xff".to_vec()] };
        match decode_sync(&encode_sync(&changed)) {
            Some(Synced::Changed { epoch, seq, paths }) => {
                assert_eq!((epoch.as_str(), seq, paths), ("ab", 7, vec![b"a/b".to_vec(), b"n\xff".to_vec()]));
            }
            other => panic!("{other:?}"),
        }
        let walk = encode_sync(&Synced::Walk { epoch: "e".into(), seq: 3, why: "overflow".into() });
        assert!(matches!(decode_sync(&walk), Some(Synced::Walk { seq: 3, .. })));
        let bytes = encode_sync(&changed);
        for cut in 0..bytes.len() {
            assert!(decode_sync(&bytes[..cut]).is_none(), "cut at {cut}");
        }
    }

    #[test]
    fn a_store_spelled_with_dot_dot_has_the_one_socket_and_lock_of_its_canonical_path() {
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().canonicalize().unwrap().join("s".repeat(40));
        std::fs::create_dir_all(store.join("a".repeat(30))).unwrap();
        // Over the socket address limit spelled this way, under it spelled plainly.
        let spelled = store.join("a".repeat(30)).join("..");
        let id = "0192a7c4-1d2e-7f00-8000-0123456789ab";
        assert_eq!(socket_path(&spelled, id).unwrap(), socket_path(&store, id).unwrap());
        assert_eq!(lock_of(&spelled, id), lock_of(&store, id));
    }

    #[test]
    fn a_long_store_path_gets_a_short_private_socket_elsewhere() {
        let dir = tempfile::tempdir().unwrap();
        let long = dir.path().join("x".repeat(120));
        std::fs::create_dir_all(&long).unwrap();
        let id = "0192a7c4-1d2e-7f00-8000-0123456789ab";
        let socket = socket_path(&long, id).unwrap();
        assert!(socket.as_os_str().len() <= SUN_PATH_MAX, "{}", socket.display());
        assert!(!socket.starts_with(&long));
        let short = socket_path(dir.path(), id).unwrap();
        assert!(short.starts_with(dir.path().join("watch")));
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(short.parent().unwrap()).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
    }
}
