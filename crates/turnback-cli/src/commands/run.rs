//! `turnback run -- COMMAND...`: any command-line agent as one turn.

use std::process::Command;
use std::time::Duration;

use serde_json::json;
use turnback::history::{self, NewEntry, Role};
use turnback::turn::{self, BeginRequest};
use turnback::{Error, ErrorCode, Result};

use crate::app::Ctx;
use crate::output::Outcome;

/// Begins a turn (start snapshot), runs `command` with the terminal attached, ends the
/// turn (end snapshot), and exits with the command's code (128 + N for a signal N).
pub fn run(ctx: &Ctx, prompt: Option<String>, wait_ms: u64, command: &[String]) -> Result<Outcome> {
    let req = BeginRequest { prompt: prompt.clone(), background: false, new: true };
    // Ctrl-C while the snapshot is prepared cancels the turn (exit 130, nothing recorded);
    // once the command runs, Ctrl-C is the command's to handle (the handler installed by
    // begin keeps turnback alive to end the turn).
    let (t, _) = super::turn::begin_turn(ctx, req, Duration::from_millis(wait_ms))?;
    let store = ctx.open(false)?;
    let ws = ctx.workspace(&store)?;
    let session = ctx.session(&store, &ws)?;
    if let Some(p) = prompt {
        let entry = NewEntry {
            turn_id: Some(t.turn_id.clone()),
            role: Role::User,
            content: p,
            prompt: None,
            thinking: None,
            tool_calls: None,
            background: None,
            at: None,
        };
        history::append(&store, &session, entry)?;
    }
    eprintln!("turnback: turn {} ({}) begins: {}", t.index, t.turn_id, command.join(" "));
    let status = Command::new(&command[0]).args(&command[1..]).status();
    let bar = super::snapshot::Progress::new();
    let report = |done: u64, total: u64| bar.show(done, total);
    let ended = turn::end_with(&store, &ws, &session, Some(&report));
    bar.clear();
    let ended = ended?;
    let code = match &status {
        Ok(s) => s.code().unwrap_or_else(|| {
            use std::os::unix::process::ExitStatusExt;
            128 + s.signal().unwrap_or(0)
        }),
        Err(_) => 127,
    };
    eprintln!(
        "turnback: turn {} ended{}; undo it with `turnback rewind --to {}`",
        ended.index,
        ended.end_snapshot.as_ref().and_then(|e| e.skipped.as_deref()).map(|r| format!(" ({r})")).unwrap_or_default(),
        ended.index
    );
    if let Err(e) = status {
        return Err(Error::new(ErrorCode::Io, format!("{}: {e}", command[0])));
    }
    Ok(Outcome::ok(json!({ "turn": ended, "exitCode": code }), String::new()).with_exit(code))
}
