//! `turnback run -- COMMAND...`: any command-line agent as one turn, recorded through the
//! agent protocol (a prompt submitted, the command, a stop).

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use turnback::{AgentEvent, Options, Result, Turn};

use crate::ctx::Ctx;
use crate::output::{Outcome, Progress, err};

/// What `run` reports.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Ran {
    turn: Option<Turn>,
    exit_code: i32,
}

/// Begins a turn (start snapshot), runs `command` with the terminal attached, ends the
/// turn (end snapshot), and exits with the command's code (128 + N for a signal N).
pub fn run(ctx: &Ctx, prompt: Option<String>, wait_ms: u64, command: &[String]) -> Result<Outcome> {
    // Ctrl-C while the snapshot is prepared cancels the turn (exit 130, nothing recorded);
    // once the command runs, Ctrl-C is the command's to handle (the handler installed here
    // keeps turnback alive to end the turn).
    let cancel = super::turn::cancel_on_signals()?;
    let bar = Arc::new(Progress::new());
    let shown = Arc::clone(&bar);
    let options = Options { agent: Some("run".into()), ..ctx.options(true)? };
    let tb = crate::ctx::open_for_turns(&options, Duration::from_millis(wait_ms))?
        .with_progress(Box::new(move |d, t| shown.show(d, t)));
    let begun = tb.record_event(&AgentEvent::PromptSubmitted { prompt }, Some(&cancel))?;
    let t = begun.turn.as_ref().expect("a prompt begins or joins a turn");
    err(&format!("turnback: turn {} ({}) begins: {}\n", t.index, t.turn_id, command.join(" ")));
    let code = match Command::new(&command[0]).args(&command[1..]).spawn() {
        Ok(child) => wait_forwarding(child),
        Err(e) => {
            err(&format!("turnback: {}: {e}\n", command[0]));
            127
        }
    };
    // The command's exit code is what the caller gets, whatever happens to the end snapshot.
    let ended = tb.record_event(&AgentEvent::Stopped { continued: false }, None);
    bar.clear();
    let turn = match ended {
        Ok(done) => {
            if let Some(t) = &done.turn {
                err(&format!(
                    "turnback: turn {} ended{}; undo it with `turnback rewind --to {}`\n",
                    t.index,
                    t.end_snapshot
                        .as_ref()
                        .and_then(|e| e.skipped.as_deref())
                        .map(|r| format!(" ({r})"))
                        .unwrap_or_default(),
                    t.index
                ));
            }
            done.turn
        }
        Err(e) => {
            err(&format!(
                "turnback: the turn could not be ended ({}: {}); run `turnback turn end`\n",
                e.code,
                e.worded(crate::output::hint_words)
            ));
            None
        }
    };
    Ok(Outcome::of(&Ran { turn, exit_code: code }, String::new()).with_exit(code))
}

/// Waits for `child`, passing on SIGTERM and SIGHUP sent to turnback (a supervisor stopping
/// the run) so the command stops too; Ctrl-C reaches it directly (same process group).
/// Returns its exit code, 128 + N if signal N ended it.
fn wait_forwarding(mut child: std::process::Child) -> i32 {
    use signal_hook::consts::{SIGHUP, SIGTERM};
    let pid = rustix::process::Pid::from_raw(child.id() as i32);
    let forwarder = signal_hook::iterator::Signals::new([SIGTERM, SIGHUP]).ok().map(|mut signals| {
        let handle = signals.handle();
        let thread = std::thread::spawn(move || {
            for sig in signals.forever() {
                let signal = if sig == SIGHUP { rustix::process::Signal::HUP } else { rustix::process::Signal::TERM };
                if let Some(pid) = pid {
                    let _ = rustix::process::kill_process(pid, signal);
                }
            }
        });
        (handle, thread)
    });
    let status = child.wait();
    if let Some((handle, thread)) = forwarder {
        handle.close();
        let _ = thread.join();
    }
    match status {
        Ok(s) => s.code().unwrap_or_else(|| {
            use std::os::unix::process::ExitStatusExt;
            128 + s.signal().unwrap_or(0)
        }),
        Err(_) => 1,
    }
}
