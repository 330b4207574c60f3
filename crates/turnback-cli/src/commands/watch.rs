//! `turnback watch start|stop|status`, and `watch run`: the watcher process itself, which
//! `watch start` and `turn begin` spawn detached.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use turnback::{Error, ErrorCode, Result, StartWatcher, WatchStatus};

use crate::app::Ctx;
use crate::cli::WatchCommand;
use crate::output::Outcome;

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

pub fn run(ctx: &Ctx, command: WatchCommand) -> Result<Outcome> {
    let status = match command {
        WatchCommand::Start => {
            // The options carry the command line's runtime, its detached watcher among it.
            ctx.open(true)?.watch_start()?
        }
        WatchCommand::Stop => {
            let status = ctx.open(false)?.watch_stop()?;
            let text =
                if status.running { "watcher stopped".to_string() } else { "no watcher was running".to_string() };
            return Ok(Outcome::of(&status, text));
        }
        WatchCommand::Status => ctx.open(false)?.watch_status()?,
        WatchCommand::Run => {
            // A session of its own: no terminal, no signal meant for whoever started it.
            let _ = rustix::process::setsid();
            let tb = ctx.open(true)?;
            tb.workspace()?;
            // Hold no directory busy (an unmount, a deletion): everything is absolute now.
            let _ = std::env::set_current_dir("/");
            tb.watch_run()?;
            return Ok(Outcome::of(&serde_json::json!({ "stopped": true }), String::new()));
        }
    };
    let text = describe(&status);
    Ok(Outcome::of(&status, text))
}

fn describe(s: &WatchStatus) -> String {
    if !s.running {
        return "no watcher is running for this workspace (snapshots walk the whole tree)".into();
    }
    let mut text = format!(
        "watcher running (pid {}): {} changed paths held, {} events, {} syncs, {} overflows; exits after {} s idle",
        s.pid.unwrap_or_default(),
        s.dirty_paths,
        s.events,
        s.syncs,
        s.overflows,
        s.idle_exit_secs
    );
    if let Some(p) = &s.problem {
        text.push_str(&format!("\n  problem: {p}"));
    }
    text
}
