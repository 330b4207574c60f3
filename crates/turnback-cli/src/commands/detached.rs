//! The detached process that takes a turn's start snapshot: `turn begin` (and every entry
//! point that begins turns) spawns `turnback __turn-snapshot --turn ID` in its own process
//! group and waits for it only so long; the child finishes the snapshot whatever happens
//! to its parent, and the snapshot attaches itself to the turn when it commits.

use std::path::Path;
use std::process::{Child, Command, Stdio};

use turnback::{Error, ErrorCode, Result, RunningSnapshot, StartSnapshot};

use crate::app::Ctx;
use crate::output::Outcome;

/// Starts start snapshots as detached `turnback __turn-snapshot` processes.
#[derive(Debug)]
pub struct DetachedSnapshot {
    exe: std::path::PathBuf,
    store: std::path::PathBuf,
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

/// `turnback __turn-snapshot --turn ID`: the child's side.
pub fn take(ctx: &Ctx, turn_id: &str) -> Result<Outcome> {
    let r = ctx.open(true)?.take_turn_start_snapshot(turn_id)?;
    let text = r.snapshot_id.clone();
    Ok(Outcome::of(&r, text))
}
