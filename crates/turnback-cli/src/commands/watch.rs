//! `turnback watch start|stop|status`, and `watch run`: the watcher process itself, which
//! `watch start` and `turn begin` spawn detached (through [`crate::runtime`]).

use turnback::{Result, WatchStatus};

use crate::cli::WatchCommand;
use crate::ctx::Ctx;
use crate::output::Outcome;

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
