//! The file watcher through the facade: start, stop, status, the watcher process itself,
//! and the start a turn begin makes when `[snapshots] watch = "auto"`.

use std::time::{Duration, Instant};

use crate::api::Turnback;
use crate::error::{Error, ErrorCode, Result};
use crate::snapshot::{SnapshotKind, TakeOptions};
use crate::storage::settings::WatchMode;
use crate::watch::{self, WatchStatus, daemon};

/// How long `watch start` waits for a new watcher to answer (watching a large tree takes
/// a while: one watch per directory).
const START_WAIT: Duration = Duration::from_secs(120);
/// How long a turn's start waits for the watcher's status before it starts a replacement:
/// on the agent's path, and a healthy watcher answers in a millisecond.
const LIVENESS_WAIT: Duration = Duration::from_millis(200);

impl Turnback {
    fn watch_socket(&self) -> Result<std::path::PathBuf> {
        watch::socket_path(self.store.dir(), &self.workspace_record()?.id)
    }

    /// The workspace's watcher, if one runs.
    ///
    /// # Errors
    /// Store errors; `io` if a watcher answers with something unreadable.
    pub fn watch_status(&self) -> Result<WatchStatus> {
        watch::status(&self.watch_socket()?)
    }

    /// Starts the workspace's watcher unless one runs, and waits until it answers.
    ///
    /// # Errors
    /// `invalid-argument` without a way to start one (the [`Runtime`](crate::Runtime) has no watcher);
    /// `io` if it does not answer in time.
    pub fn watch_start(&self) -> Result<WatchStatus> {
        let socket = self.watch_socket()?;
        let status = watch::status(&socket)?;
        if status.running {
            return Ok(status);
        }
        let starter =
            self.runtime.watcher.as_deref().ok_or_else(|| Error::invalid("no way to start a watcher here"))?;
        starter.start(&self.workspace_record()?.root)?;
        let deadline = Instant::now() + START_WAIT;
        while Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
            let status = watch::status(&socket)?;
            if status.running {
                return Ok(status);
            }
            if let Some(why) = starter.failed() {
                return Err(Error::new(ErrorCode::Io, format!("the watcher exited at once ({why})")));
            }
        }
        Err(Error::new(ErrorCode::Io, "the watcher did not start (see `turnback watch run` for its error)"))
    }

    /// Stops the workspace's watcher; its last state (`running: false` if none ran).
    ///
    /// # Errors
    /// Store errors.
    pub fn watch_stop(&self) -> Result<WatchStatus> {
        watch::stop(&self.watch_socket()?)
    }

    /// Runs the workspace's watcher in this process until it is
    /// idle for `watch-idle-seconds`, stopped, or its workspace is deleted; returns at once
    /// if one runs already.
    ///
    /// # Errors
    /// `io` if the workspace cannot be watched (no file-system events here).
    pub fn watch_run(&self) -> Result<()> {
        let ws = self.workspace_record()?;
        let cfg = daemon::Config {
            root: ws.root.clone(),
            socket: self.watch_socket()?,
            lock: watch::lock_of(self.store.dir(), &ws.id),
            skip: self.store.protected_paths().to_vec(),
            idle: Duration::from_secs(self.store.settings().snapshots.watch_idle_secs),
            max_dirty: watch::max_dirty(),
        };
        daemon::run(&cfg)
    }

    /// Starts the watcher if the settings ask for one, a way to start it was given and none
    /// answers (within [`LIVENESS_WAIT`]: a healthy one answers in a millisecond). A watcher that cannot start only means snapshots walk the whole tree.
    pub(crate) fn ensure_watcher(&self) {
        if self.store.settings().snapshots.watch != WatchMode::Auto {
            return;
        }
        let (Some(starter), Ok(socket)) = (self.runtime.watcher.as_deref(), self.watch_socket()) else { return };
        // A watcher that accepts but does not answer (stopped, swamped) is replaced: the
        // new one ends it (see the watcher's start).
        if watch::liveness(&socket, LIVENESS_WAIT) != watch::Liveness::Answers
            && let Ok(ws) = self.workspace_record()
        {
            let _ = starter.start(&ws.root);
        }
    }

    /// Takes an ad hoc snapshot by walking the whole tree, whatever the watcher could say.
    ///
    /// # Errors
    /// As [`snapshot`](Self::snapshot).
    pub fn snapshot_full(&self, progress: Option<&(dyn Fn(u64, u64) + Sync)>) -> Result<crate::api::views::Snapshot> {
        let (ws, session) = (self.workspace_record()?, self.session_record()?);
        let opts = TakeOptions { kind: Some(SnapshotKind::AdHoc), progress, full: true, ..TakeOptions::default() };
        crate::snapshot::take(
            &self.store,
            crate::session::turn::source(ws, session),
            &opts,
            &crate::session::turn::Hooks::new(&self.store),
        )
        .map(|r| (&r).into())
    }
}
