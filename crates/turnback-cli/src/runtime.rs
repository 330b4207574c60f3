//! The command line's [`Runtime`]: start snapshots, watchers and auto-pushes each run as a
//! detached process of this executable on the same store (`__turn-snapshot`, `watch run`,
//! `push`), so none of them holds up the agent or the person, and each finishes after the
//! process that started it exits.
//!
//! Invariants: every door of the command line (and the MCP server it starts) installs this
//! one runtime through [`crate::ctx::Ctx::options`]; a child never inherits a terminal or
//! stdout (its stdin, stdout and stderr are null, an auto-push's stderr its log in the
//! store); a child that cannot start is an error of the call that started it, except an
//! auto-push, which notes it in its log. This module imports no command: the children are
//! this executable run again, by their arguments.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use turnback::{Error, ErrorCode, Result, RunningSnapshot, Runtime, StartSnapshot, StartWatcher};

/// How long a turn begin waits for its start snapshot unless told otherwise (an MCP
/// `begin_turn`; an agent's hook waits as long).
pub const START_WAIT: Duration = Duration::from_millis(1500);

/// The runtime of detached processes on the store at `store`.
pub fn detached(store: &Path) -> Result<Runtime> {
    let starter = Arc::new(DetachedSnapshot::new(store)?);
    let watcher = Arc::new(DetachedWatcher::new(store)?);
    let runtime = Runtime::default().with_start_snapshot(starter, START_WAIT).with_watcher(watcher);
    #[cfg(feature = "remote")]
    let runtime = runtime.with_push(Arc::new(DetachedPush::new()?));
    Ok(runtime)
}

/// Starts start snapshots as detached `turnback __turn-snapshot` processes.
#[derive(Debug)]
pub struct DetachedSnapshot {
    exe: PathBuf,
    store: PathBuf,
}

impl DetachedSnapshot {
    /// The child is this executable, on the same store.
    pub fn new(store: &Path) -> Result<Self> {
        let exe = std::env::current_exe().map_err(|e| Error::new(ErrorCode::Io, format!("own executable: {e}")))?;
        Ok(DetachedSnapshot { exe, store: store.to_path_buf() })
    }
}

impl StartSnapshot for DetachedSnapshot {
    fn start(&self, turn_id: &str, workspace: &Path, session_id: &str) -> Result<Box<dyn RunningSnapshot>> {
        use std::os::unix::process::CommandExt;
        let child = Command::new(&self.exe)
            .arg("--store")
            .arg(&self.store)
            .arg("--workspace")
            .arg(workspace)
            .args(["--session", session_id, "__turn-snapshot", "--turn", turn_id])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .map_err(|e| Error::new(ErrorCode::Io, format!("start snapshot: {e}")))?;
        Ok(Box::new(Running(child)))
    }
}

struct Running(Child);

impl RunningSnapshot for Running {
    fn poll(&mut self) -> Result<Option<std::result::Result<(), String>>> {
        match self.0.try_wait() {
            Ok(Some(status)) if status.success() => Ok(Some(Ok(()))),
            Ok(Some(status)) => Ok(Some(Err(status.to_string()))),
            Ok(None) => Ok(None),
            Err(e) => Err(Error::new(ErrorCode::Io, format!("start snapshot: {e}"))),
        }
    }

    fn stop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts the watcher as a detached `turnback watch run` (it makes itself a session leader,
/// with no terminal and nothing on stdin, stdout or stderr).
#[derive(Debug)]
pub struct DetachedWatcher {
    exe: PathBuf,
    store: PathBuf,
    /// How the last one started exited, once it has, if it failed.
    failed: Arc<Mutex<Option<String>>>,
}

impl DetachedWatcher {
    /// The watcher is this executable, on the same store.
    pub fn new(store: &Path) -> Result<Self> {
        let exe = std::env::current_exe().map_err(|e| Error::new(ErrorCode::Io, format!("own executable: {e}")))?;
        Ok(DetachedWatcher { exe, store: store.to_path_buf(), failed: Arc::default() })
    }
}

impl StartWatcher for DetachedWatcher {
    fn start(&self, workspace: &Path) -> Result<()> {
        // The workspace is its current directory, not an argument: no path in `ps`.
        let mut child = Command::new(&self.exe)
            .arg("--store")
            .arg(&self.store)
            .args(["watch", "run"])
            .current_dir(workspace)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| Error::new(ErrorCode::Io, format!("start the watcher: {e}")))?;
        // Reaped when it exits, whether or not this process outlives it (the MCP server does).
        let failed = Arc::clone(&self.failed);
        std::thread::spawn(move || {
            if let Ok(status) = child.wait()
                && !status.success()
            {
                *failed.lock().unwrap_or_else(|p| p.into_inner()) = Some(status.to_string());
            }
        });
        Ok(())
    }

    fn failed(&self) -> Option<String> {
        self.failed.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

#[cfg(feature = "remote")]
/// The command line's auto-push: `turnback push NAME --session SESSION` as a detached
/// process (its own process group; the agent never waits for it), its messages appended to
/// `auto-push.log` in the store. A push that cannot start is noted in that log.
pub struct DetachedPush {
    exe: PathBuf,
}

#[cfg(feature = "remote")]
impl DetachedPush {
    /// The pusher is this executable.
    pub fn new() -> Result<Self> {
        let exe = std::env::current_exe().map_err(|e| Error::new(ErrorCode::Io, format!("own executable: {e}")))?;
        Ok(DetachedPush { exe })
    }
}

#[cfg(feature = "remote")]
impl turnback::Push for DetachedPush {
    fn push(&self, store_dir: &Path, remote: &str, session: &str) -> Result<()> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        use std::os::unix::process::CommandExt;
        let log_path = store_dir.join("auto-push.log");
        let io = |e: std::io::Error| Error::new(ErrorCode::Io, format!("auto-push log: {e}"));
        let log = std::fs::OpenOptions::new().create(true).append(true).mode(0o600).open(&log_path).map_err(io)?;
        let started = Command::new(&self.exe)
            .arg("--store")
            .arg(store_dir)
            .args(["--session", session, "push", remote])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log.try_clone().map_err(io)?)
            .process_group(0)
            .spawn();
        if let Err(e) = started {
            let _ = writeln!(&log, "turnback: auto-push to {remote} did not start: {e}");
        }
        Ok(())
    }
}
