//! `turnback hook AGENT`: one agent hook event from stdin, translated into the agent
//! protocol's events (see the library's `AgentEvent`) and recorded. Each agent's module is
//! a translator and nothing else: it reads the agent's documented payload and says what
//! happened, where (workspace, directory, session), and — at a stop — where the agent's
//! own transcript is, so the replies of the turns recorded come into the history.
//!
//! Invariants: a hook never fails the agent — whatever goes wrong is appended to
//! `hooks.log` in the store (when, the agent, the error's code, the agent's event name and
//! the operating system's word for the failure; never an error's message, which may name a
//! path, a prompt or a payload: nothing plain goes under the store), the exit code is 0, and stdout holds only what the agent
//! expects from a hook that lets everything through (nothing for most agents; Cursor's
//! "allow" answers), so nothing turnback prints reaches the conversation. Events arriving
//! twice or out of order are harmless: the protocol is built for them. A hook ends within a
//! bound whatever it is given (20 s, `TURNBACK_HOOK_TIMEOUT_MS`) and within a second of
//! SIGINT or SIGTERM, logged, still exiting 0.

mod claude_code;
mod codex;
mod cursor;
#[cfg(test)]
mod fuzz_tests;
mod gemini;
pub mod opencode;
pub mod patch;

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use turnback::{AgentEvent, Error, ErrorCode, Result, TranscriptFormat, Turnback};

use crate::cli::HookAgent;
use crate::ctx::{Ctx, open_for_turns};
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
    /// The agent's transcript, to bring the replies of the turns recorded from (at a stop).
    pub transcript: Option<(TranscriptFormat, PathBuf)>,
    /// The agent's last reply as the event carries it: recorded if the transcript cannot be
    /// read (or there is none).
    pub last_reply: Option<String>,
    /// At opencode's stop: its session, whose replies come from opencode's storage.
    pub stored_session: Option<String>,
}

/// Handles one event; always exit 0 — even if turnback itself panics (the panic is logged,
/// not printed: an agent may read a hook's stderr).
pub fn run(ctx: &Ctx, agent: HookAgent) -> Outcome {
    let store = ctx.store_dir().ok();
    std::panic::set_hook(Box::new(move |info| {
        if let Some(dir) = &store {
            // Where in turnback's code, not the panic's message (which may quote data).
            let at = info.location().map(|l| format!(" at {}:{}", l.file(), l.line())).unwrap_or_default();
            append_log(dir, agent, ErrorCode::Io, &format!("turnback panicked{at}"));
        }
    }));
    let started = std::time::Instant::now();
    let mut name = String::from("event");
    let outcome = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| handle(ctx, agent, &mut name))) {
        Ok(outcome) => outcome,
        Err(_) => Outcome::raw(answer(agent, "")),
    };
    record_time(agent, &name, started.elapsed());
    outcome
}

/// With `TURNBACK_HOOK_TIMINGS=FILE`, appends `AGENT<TAB>EVENT<TAB>MICROSECONDS` for this
/// hook to FILE: how long the agent waited on turnback (the conformance suite's hook
/// times come from here). Nothing else is written; a failure to write is ignored.
fn record_time(agent: HookAgent, event: &str, elapsed: Duration) {
    let Some(file) = std::env::var_os("TURNBACK_HOOK_TIMINGS").filter(|f| !f.is_empty()) else { return };
    if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(file) {
        let _ = writeln!(f, "{}\t{event}\t{}", agent_name(agent), elapsed.as_micros());
    }
}

fn handle(ctx: &Ctx, agent: HookAgent, name: &mut String) -> Outcome {
    // SIGINT/SIGTERM while a prompt's start snapshot is awaited cancels that turn cleanly.
    let cancel = match super::turn::cancel_on_signals() {
        Ok(flag) => flag,
        Err(e) => {
            log(ctx, agent, "event", &e);
            return Outcome::raw(answer(agent, ""));
        }
    };
    watchdog(ctx.store_dir().ok(), agent, Arc::clone(&cancel), hook_bound());
    // Bounded by what is kept, not by what the agent sends (a 100 MB prompt keeps 4 MiB
    // here, 256 KiB in the history): see `turnback::read_json_input`.
    let result = turnback::read_json_input(std::io::stdin().lock())
        .map_err(|e| Error::new(e.code, format!("reading the event: {}", e.message)))
        .inspect(|input| capture(&input.text))
        .and_then(|input| translate(agent, &input.text))
        .and_then(|t| {
            *name = t.name.clone();
            // Test builds only: turnback failing as badly as it can, mid-hook.
            #[cfg(debug_assertions)]
            if std::env::var_os("TURNBACK_HOOK_PANIC").is_some() {
                panic!("TURNBACK_HOOK_PANIC is set");
            }
            record(ctx, agent, t, &cancel)
        });
    if let Err(e) = result {
        log(ctx, agent, name, &e);
    }
    Outcome::raw(answer(agent, name))
}

/// How long a hook may run (`TURNBACK_HOOK_TIMEOUT_MS` overrides it): an agent waits on
/// its hooks, so a hook that cannot finish must not freeze it. Far above what a hook takes
/// (milliseconds; a walk of a large tree without the watcher, seconds).
const HOOK_BOUND: Duration = Duration::from_secs(20);
/// How long a hook told to stop (SIGINT, SIGTERM) has to finish what it is doing.
const STOP_GRACE: Duration = Duration::from_millis(800);

fn hook_bound() -> Duration {
    std::env::var("TURNBACK_HOOK_TIMEOUT_MS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|ms| *ms > 0)
        .map_or(HOOK_BOUND, Duration::from_millis)
}

/// Ends the hook — exit 0, the agent's answer printed, the reason in `hooks.log` — once it
/// has run for `bound`, or [`STOP_GRACE`] after a stop signal. Ending mid-way is safe:
/// everything a hook records is one transaction at a time, as a crash at any step is
/// (tested by killing real processes); what it did not record, the next event or
/// `history import` picks up.
fn watchdog(store: Option<PathBuf>, agent: HookAgent, stop: Arc<AtomicBool>, bound: Duration) {
    let started = std::time::Instant::now();
    let spawned = std::thread::Builder::new().name("turnback-hook-watchdog".into()).spawn(move || {
        let mut stopped: Option<std::time::Instant> = None;
        loop {
            std::thread::sleep(Duration::from_millis(20));
            if stopped.is_none() && stop.load(Ordering::SeqCst) {
                stopped = Some(std::time::Instant::now());
            }
            let why = if stopped.is_some_and(|at| at.elapsed() >= STOP_GRACE) {
                "stopped by a signal"
            } else if started.elapsed() >= bound {
                "over its time bound"
            } else {
                continue;
            };
            if let Some(dir) = &store {
                append_log(dir, agent, ErrorCode::Cancelled, &format!("hook ended, {why}"));
            }
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(answer(agent, "").as_bytes());
            let _ = out.flush();
            std::process::exit(0);
        }
    });
    // Without the thread the hook runs unbounded, as it did before it: nothing to log.
    drop(spawned);
}

/// With `TURNBACK_HOOK_CAPTURE=FILE`, appends the event exactly as the agent sent it, one
/// JSON document per line: how the conformance suite keeps the real agents' payloads. Only
/// for tests — the event is plaintext (prompts, paths) and goes where the variable says.
fn capture(text: &str) {
    let Some(file) = std::env::var_os("TURNBACK_HOOK_CAPTURE").filter(|f| !f.is_empty()) else { return };
    if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(file) {
        let line = serde_json::from_str::<serde_json::Value>(text).map(|v| v.to_string()).unwrap_or_default();
        let _ = writeln!(f, "{line}");
    }
}

fn translate(agent: HookAgent, input: &str) -> Result<Translated> {
    match agent {
        HookAgent::ClaudeCode => claude_code::translate(input),
        HookAgent::Codex => codex::translate(input),
        HookAgent::Gemini => gemini::translate(input),
        HookAgent::Cursor => cursor::translate(input),
        HookAgent::Opencode => opencode::translate(input),
    }
}

/// What the agent reads on stdout: the answer of a hook that lets everything through.
fn answer(agent: HookAgent, event: &str) -> String {
    match agent {
        HookAgent::Cursor => cursor::answer(event),
        _ => String::new(),
    }
}

/// Records the translated events in the workspace and session they name, then brings in
/// the replies from the agent's transcript.
fn record(ctx: &Ctx, agent: HookAgent, t: Translated, cancel: &AtomicBool) -> Result<()> {
    if t.events.is_empty() && t.transcript.is_none() && t.last_reply.is_none() {
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
    options.agent = Some(agent_name(agent).to_string());
    let tb = open_for_turns(&options, PROMPT_WAIT)?;
    if let Ok(ws) = tb.workspace() {
        seen(&tb, agent, &ws.id, &t.name);
    }
    for event in &t.events {
        // At each turn end — the agent's stop, or its session's end — the library starts
        // the auto-push (if one is set) through the runtime the options carry.
        match tb.record_event(event, Some(cancel)) {
            // A file outside the workspace (a plan in ~/.claude/plans, a scratch file in
            // /tmp), in .git, or in the store: not the workspace's to checkpoint, and not a
            // failure of the hook.
            Err(e) if e.code == ErrorCode::PathRejected => {}
            other => {
                other?;
            }
        }
    }
    if let Some(session) = &t.stored_session {
        // The events carried the reply's text already; the storage adds its tool calls.
        return match opencode::data_dir() {
            Some(data) if data.exists() => tb.record_stored_replies(&data, session),
            _ => Ok(()),
        };
    }
    tb.record_replies(t.transcript.as_ref().map(|(f, p)| (*f, p.as_path())), t.last_reply)
}

/// One event in an agent's documented JSON.
///
/// # Errors
/// `invalid-argument` if it is not such an event.
fn parse<T: serde::de::DeserializeOwned>(input: &str) -> Result<T> {
    serde_json::from_str(input).map_err(|e| Error::invalid(format!("hook event: {e}")))
}

/// The exit status stated on the last line of `text` that begins with `label` ("Exit code:
/// 1", as the agents' shell tools print it).
fn exit_status_line(text: &str, label: &str) -> Option<i32> {
    text.lines().rev().find_map(|l| l.trim().strip_prefix(label))?.trim().parse().ok()
}

/// An MCP tool call as a shell record: the tool and its arguments, cut short (the protocol
/// redacts secrets in them).
fn mcp_command(tool: &str, input: &serde_json::Value) -> String {
    let mut args = input.to_string();
    if args.len() > 500 {
        let mut end = 500;
        while !args.is_char_boundary(end) {
            end -= 1;
        }
        args.truncate(end);
        args.push('…');
    }
    format!("{tool} {args}")
}

/// The name an agent is known by on the command line (and in `hooks.log`).
pub fn agent_name(agent: HookAgent) -> &'static str {
    match agent {
        HookAgent::ClaudeCode => "claude-code",
        HookAgent::Codex => "codex",
        HookAgent::Gemini => "gemini",
        HookAgent::Cursor => "cursor",
        HookAgent::Opencode => "opencode",
    }
}

/// Where the last event `agent`'s hooks delivered in workspace `workspace_id` is noted (its
/// time and name; never a path or a payload): `turnback doctor` reads it.
pub fn seen_file(store: &std::path::Path, agent: HookAgent, workspace_id: &str) -> PathBuf {
    store.join("hooks-seen").join(agent_name(agent)).join(workspace_id)
}

fn seen(tb: &Turnback, agent: HookAgent, workspace_id: &str, event: &str) {
    let file = seen_file(tb.store_dir(), agent, workspace_id);
    if let Some(parent) = file.parent() {
        let _ = std::fs::create_dir_all(parent);
    }
    let _ = std::fs::write(file, format!("{} {}\n", turnback::format_ms(turnback::now_ms()), event_word(event)));
}

/// An agent's event name as it may be written beside the store: its word characters only.
fn event_word(event: &str) -> String {
    event.chars().filter(|c| c.is_ascii_alphanumeric() || "-_.".contains(*c)).take(64).collect()
}

fn log(ctx: &Ctx, agent: HookAgent, event: &str, e: &Error) {
    if let Ok(dir) = ctx.store_dir() {
        append_log(&dir, agent, e.code, &failure(event, e));
    }
}

/// What `hooks.log` says of a failure: the event and, for a failure of the operating
/// system, its own words ("No space left on device") — never the error's message.
fn failure(event: &str, e: &Error) -> String {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(c) = cause {
        if let Some(os) = c.downcast_ref::<std::io::Error>().and_then(std::io::Error::raw_os_error) {
            return format!("{} failed ({})", event_word(event), std::io::Error::from_raw_os_error(os));
        }
        cause = c.source();
    }
    format!("{} failed", event_word(event))
}

fn append_log(dir: &std::path::Path, agent: HookAgent, code: ErrorCode, what: &str) {
    use std::os::unix::fs::OpenOptionsExt;
    let _ = std::fs::create_dir_all(dir);
    let line = format!("{} {} {code}: {what}\n", turnback::format_ms(turnback::now_ms()), agent_name(agent));
    if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).mode(0o600).open(dir.join("hooks.log")) {
        let _ = f.write_all(line.as_bytes());
    }
}
