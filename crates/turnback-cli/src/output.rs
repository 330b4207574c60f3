//! What a command prints: one JSON document with `--json`, short text otherwise.
//! Results go to stdout; errors go to stdout as JSON with `--json`, else to stderr.
//!
//! Every byte turnback prints goes through [`out`] or [`err`]: output into a pipe whose
//! reader went away (`turnback diff | head`) ends quietly, as git's does, never as a panic;
//! the command's work and exit code are what they were. Human text shows names through
//! `turnback::quote_name` (and free text through `turnback::escape_controls`), so a file
//! name cannot move the cursor, clear the screen or forge a line; JSON keeps names exact.

use serde::Serialize;
use serde_json::Value;
use turnback::{Error, ErrorCode, ResultType};

/// Exit codes of DESIGN.md §3.
pub mod exit {
    pub const SUCCESS: i32 = 0;
    pub const FAILURE: i32 = 1;
    pub const USAGE: i32 = 2;
    pub const PARTIAL: i32 = 3;
    pub const BLOCKED: i32 = 20;
    pub const UNKNOWN_OUTCOME: i32 = 70;
    pub const CANCELLED: i32 = 130;
}

/// A finished command: its JSON document, its text, and its exit code.
#[derive(Debug)]
pub struct Outcome {
    pub json: Value,
    pub text: String,
    pub exit: i32,
    /// Printed exactly as it is, with or without `--json` (an export's own format).
    pub raw: bool,
}

impl Outcome {
    /// A result: `value` (a library result type) is the JSON document, `text` what people see.
    pub fn of(value: &impl Serialize, text: impl Into<String>) -> Self {
        let json = serde_json::to_value(value).expect("library results serialize");
        Outcome { json, text: text.into(), exit: exit::SUCCESS, raw: false }
    }

    /// Output that is a document of its own (JSON lines, a JSON array).
    pub fn raw(text: String) -> Self {
        Outcome { json: Value::Null, text, exit: exit::SUCCESS, raw: true }
    }

    pub fn with_exit(mut self, code: i32) -> Self {
        self.exit = code;
        self
    }
}

/// The exit code of an undo's outcome: the one table for rollbacks and rewinds.
pub fn exit_for(result: ResultType) -> i32 {
    match result {
        ResultType::Full => exit::SUCCESS,
        ResultType::Partial => exit::PARTIAL,
        ResultType::Blocked => exit::BLOCKED,
    }
}

/// The word for an undo's outcome: its name in the JSON document.
pub fn result_word(result: ResultType) -> String {
    match serde_json::to_value(result) {
        Ok(Value::String(word)) => word,
        _ => format!("{result:?}"),
    }
}

/// The exit code for an error code.
pub fn exit_code(code: ErrorCode) -> i32 {
    match code {
        ErrorCode::InvalidArgument => exit::USAGE,
        ErrorCode::OverCap | ErrorCode::Conflict => exit::BLOCKED,
        ErrorCode::UnknownOutcome => exit::UNKNOWN_OUTCOME,
        ErrorCode::Cancelled => exit::CANCELLED,
        _ => exit::FAILURE,
    }
}

/// Writes `text` to stdout.
///
/// # Errors
/// A failure to write that a person must hear of (a full disk under a redirection); a
/// reader that went away is not one: the rest is dropped.
pub fn out(text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(text.as_bytes()).and_then(|()| stdout.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}

/// Writes `text` to stderr; a failure is dropped (there is nowhere left to report it).
pub fn err(text: &str) {
    use std::io::Write;
    let _ = std::io::stderr().lock().write_all(text.as_bytes());
}

/// Prints a command's result; returns its exit code (a failure if stdout cannot take it).
pub fn print(outcome: &Outcome, json_mode: bool) -> i32 {
    let printed = if outcome.raw {
        out(&outcome.text)
    } else if json_mode {
        out(&format!("{}\n", serde_json::to_string_pretty(&outcome.json).expect("JSON values serialize")))
    } else if !outcome.text.is_empty() {
        out(&format!("{}\n", outcome.text.trim_end()))
    } else {
        Ok(())
    };
    match printed {
        Ok(()) => outcome.exit,
        Err(e) => {
            err(&format!("turnback: io: cannot write the output: {e}\n"));
            exit::FAILURE
        }
    }
}

pub fn print_error(e: &Error, json_mode: bool) -> i32 {
    if json_mode {
        let _ =
            out(&format!("{}\n", serde_json::to_string_pretty(&e.report(hint_words)).expect("JSON values serialize")));
    } else {
        // A message may carry a name the caller gave (a path, an edit's text): quoted
        // like every name on a terminal; the JSON report stays exact.
        let mut text = format!("turnback: {}: {}\n", e.code, turnback::escape_controls(&e.worded(hint_words)));
        for action in e.recovery_actions() {
            text.push_str(&format!("  - {action}\n"));
        }
        err(&text);
    }
    exit_code(e.code)
}

/// A [`Hint`](turnback::Hint) as the command line says it: the command that takes the step.
pub fn hint_words(hint: &turnback::Hint) -> String {
    use turnback::Hint;
    match hint {
        Hint::Overwrite => "use `turnback fs write` to overwrite".into(),
        Hint::BeginTurn => "begin one with `turnback turn begin`".into(),
        Hint::EndTurn => "end it first with `turnback turn end`".into(),
        Hint::RollBack { checkpoint_id } => format!("`turnback rollback {checkpoint_id}` takes it back"),
        Hint::Inspect { checkpoint_id } => format!("see `turnback inspect {checkpoint_id}`"),
    }
}

/// A path a snapshot left out, and why, as a terminal shows them: the name quoted, the
/// reason's control characters escaped (`PATH: REASON`).
pub fn left_out(path: &str, reason: &str) -> String {
    format!("{}: {}", turnback::quote_name(path.as_bytes()), turnback::escape_controls(reason))
}

/// Shortens an id or digest for tables (its first 12 characters; the whole of anything
/// that does not cut there).
pub fn short(id: &str) -> &str {
    id.get(..12).unwrap_or(id)
}

/// A one-line progress bar on stderr for snapshots that take more than a moment; only on
/// a terminal (never in pipes, logs or `--json` consumers' stderr captures), no colours.
pub struct Progress {
    label: &'static str,
    started: std::time::Instant,
    terminal: bool,
    shown: std::sync::atomic::AtomicBool,
}

impl Progress {
    pub fn new() -> Self {
        Progress::labelled("snapshot")
    }

    /// A bar whose line starts with `label` (`push`, `pull`).
    pub fn labelled(label: &'static str) -> Self {
        use std::io::IsTerminal;
        Progress {
            label,
            started: std::time::Instant::now(),
            terminal: std::io::stderr().is_terminal(),
            shown: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Runs `work` with a progress callback, clearing the bar afterwards.
    pub fn during<T>(work: impl FnOnce(&(dyn Fn(u64, u64) + Sync)) -> T) -> T {
        let bar = Progress::new();
        let result = work(&|done, total| bar.show(done, total));
        bar.clear();
        result
    }

    pub fn show(&self, done: u64, total: u64) {
        if !self.terminal || total == 0 || self.started.elapsed() < std::time::Duration::from_millis(700) {
            return;
        }
        self.shown.store(true, std::sync::atomic::Ordering::Relaxed);
        let width = 30;
        let filled = (done.min(total) * width / total) as usize;
        err(&format!(
            "\r{} [{}{}] {} of {}   ",
            self.label,
            "#".repeat(filled),
            " ".repeat(width as usize - filled),
            turnback::format_size(done),
            turnback::format_size(total)
        ));
    }

    pub fn clear(&self) {
        if self.shown.load(std::sync::atomic::Ordering::Relaxed) {
            err(&format!("\r{}\r", " ".repeat(72)));
        }
    }
}
