//! `turnback hook AGENT`: one agent hook event from stdin, translated into the agent
//! protocol's events (see the library's `AgentEvent`) and recorded. Each agent's module is
//! a translator and nothing else.
//!
//! Invariants: a hook never fails the agent — whatever goes wrong is appended to
//! `hooks.log` in the store and the exit code is 0, with nothing on stdout (Claude Code
//! adds a prompt hook's stdout to the conversation). Events arriving twice or out of order
//! are harmless: the protocol is built for them.

mod claude_code;

use std::io::{Read, Write};
use std::path::PathBuf;
use std::time::Duration;

use turnback::{AgentEvent, Error, ErrorCode, Result};

use std::sync::atomic::AtomicBool;

use crate::app::{Ctx, open_for_turns};
use crate::cli::HookAgent;
use crate::output::Outcome;

/// How long a prompt hook waits for the start snapshot before the turn goes on (late).
const PROMPT_WAIT: Duration = Duration::from_millis(1500);

/// One agent event, translated: where it happened and what it says.
#[derive(Debug, Default)]
pub struct Translated {
    /// The event's name in the agent's own words (for the log).
    pub name: String,
    /// The workspace the agent works in, if the event says.
    pub workspace: Option<PathBuf>,
    /// The directory the agent's relative paths are relative to, if the event says (else
    /// the workspace root).
    pub cwd: Option<PathBuf>,
    /// The agent's session id, if the event says.
    pub session: Option<String>,
    /// The protocol events, in order.
    pub events: Vec<AgentEvent>,
}

/// Handles one event; always exit 0, nothing on stdout.
pub fn run(ctx: &Ctx, agent: HookAgent) -> Outcome {
    // SIGINT/SIGTERM while a prompt's start snapshot is awaited cancels that turn cleanly.
    let cancel = match super::turn::cancel_on_signals() {
        Ok(flag) => flag,
        Err(e) => {
            log(ctx, agent, &e);
            return Outcome::raw(String::new());
        }
    };
    let mut input = String::new();
    let mut name = String::from("event");
    let result = std::io::stdin()
        .read_to_string(&mut input)
        .map_err(|e| Error::new(ErrorCode::Io, format!("reading the event: {e}")))
        .and_then(|_| match agent {
            HookAgent::ClaudeCode => claude_code::translate(&input),
        })
        .and_then(|t| {
            name = t.name.clone();
            record(ctx, t, &cancel)
        })
        .map_err(|e| Error::new(e.code, format!("{name}: {}", e.message)));
    if let Err(e) = result {
        log(ctx, agent, &e);
    }
    Outcome::raw(String::new())
}

/// Records the translated events in the workspace and session they name.
fn record(ctx: &Ctx, t: Translated, cancel: &AtomicBool) -> Result<()> {
    if t.events.is_empty() {
        return Ok(());
    }
    let mut options = ctx.options(true)?;
    if let Some(ws) = t.workspace {
        options.workspace = ws;
    }
    options.session = t.session.or(options.session);
    // The agent's relative paths are relative to its own directory, not to wherever the
    // hook process was started.
    options.cwd = t.cwd;
    let tb = open_for_turns(&options, PROMPT_WAIT)?;
    for event in &t.events {
        tb.record_event(event, Some(cancel))?;
    }
    Ok(())
}

fn log(ctx: &Ctx, agent: HookAgent, e: &Error) {
    use std::os::unix::fs::OpenOptionsExt;
    let Ok(dir) = ctx.store_dir() else { return };
    let _ = std::fs::create_dir_all(&dir);
    let agent = match agent {
        HookAgent::ClaudeCode => "claude-code",
    };
    let line = format!("{} {agent} {}: {}\n", turnback::format_ms(turnback::now_ms()), e.code, e.message);
    if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).mode(0o600).open(dir.join("hooks.log")) {
        let _ = f.write_all(line.as_bytes());
    }
}
