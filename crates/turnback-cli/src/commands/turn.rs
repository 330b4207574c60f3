//! `turnback turn begin|end|shell` and `turnback turns`.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use turnback::{BeginRequest, Error, ErrorCode, Result, Shell, SnapshotRef, TurnSummary, escape_controls};

use crate::cli::TurnCommand;
use crate::ctx::Ctx;
use crate::output::{Outcome, Progress, err};

/// Most bytes of a prompt file (4 MiB; the history keeps the first 256 KiB of a prompt).
const PROMPT_FILE_CAP: u64 = 4 << 20;

/// A prompt file's text, read within [`PROMPT_FILE_CAP`] whatever it names (`/dev/zero`
/// included).
fn read_prompt_file(f: &Path) -> Result<String> {
    let io = |e: std::io::Error| Error::new(ErrorCode::Io, format!("{}: {e}", f.display()));
    let bytes = turnback::read_at_most(std::fs::File::open(f).map_err(io)?, PROMPT_FILE_CAP)?.ok_or_else(|| {
        Error::invalid(format!("{}: a prompt file holds at most {} MiB", f.display(), PROMPT_FILE_CAP >> 20))
    })?;
    String::from_utf8(bytes).map_err(|_| Error::invalid(format!("{}: a prompt file must be UTF-8 text", f.display())))
}

pub fn run(ctx: &Ctx, command: TurnCommand) -> Result<Outcome> {
    match command {
        TurnCommand::Begin { prompt, prompt_file, background, new, wait_ms } => {
            let prompt = match prompt_file {
                Some(f) => Some(read_prompt_file(&f)?),
                None => prompt,
            };
            let cancel = cancel_on_signals()?;
            let tb = ctx.open_for_turns(Duration::from_millis(wait_ms))?;
            let begun = tb.begin_turn(&BeginRequest { prompt, background, new }, Some(&cancel))?;
            if let Some(reason) = &begun.turn.snapshot.skipped {
                err(&format!(
                    "turnback: turn {} started without a start snapshot: {}\n",
                    begun.turn.index,
                    escape_controls(reason)
                ));
            }
            tell(&begun.turn.snapshot, begun.turn.index, "start");
            let text = begun.turn.turn_id.clone();
            Ok(Outcome::of(&begun, text))
        }
        TurnCommand::End => {
            let tb = ctx.open(true)?;
            let t = Progress::during(|report| tb.end_turn(Some(report)))?;
            if let Some(reason) = t.end_snapshot.as_ref().and_then(|e| e.skipped.as_deref()) {
                err(&format!(
                    "turnback: turn {} ended without an end snapshot: {}\n",
                    t.index,
                    escape_controls(reason)
                ));
            }
            if let Some(end) = &t.end_snapshot {
                tell(end, t.index, "end");
            }
            let text = format!("ended turn {} ({})", t.index, t.turn_id);
            Ok(Outcome::of(&t, text))
        }
        TurnCommand::Shell { command } => {
            let recorded = ctx.open(true)?.record_shell(Shell { command: &command, ..Shell::default() })?;
            let t = &recorded.turn;
            let shown = t.shell_effects.last().map(|e| e.command.clone()).unwrap_or_default();
            let text = format!("recorded in turn {}: $ {}", t.index, escape_controls(&shown));
            Ok(Outcome::of(&recorded, text))
        }
    }
}

/// Says on stderr what a turn's snapshot left out and whether it dropped a stat cache that
/// did not verify.
fn tell(snapshot: &SnapshotRef, index: u64, which: &str) {
    if let Some(why) = &snapshot.stat_cache_dropped {
        crate::output::err(&format!("turnback: turn {index}'s {which} snapshot: {}\n", escape_controls(why)));
    }
    for l in &snapshot.left_out {
        let what = crate::output::left_out(&l.path, &l.reason);
        crate::output::err(&format!("turnback: left out of turn {index}'s {which} snapshot: {what}\n"));
    }
}

/// A flag SIGINT and SIGTERM set: a turn begin waiting for its snapshot then cancels
/// cleanly (nothing recorded, exit 130); once a command runs under `turnback run`, the
/// handler keeps turnback alive to end the turn.
pub fn cancel_on_signals() -> Result<Arc<AtomicBool>> {
    let flag = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, Arc::clone(&flag))
            .map_err(|e| Error::new(ErrorCode::Io, format!("signal handler: {e}")))?;
    }
    Ok(flag)
}

pub fn list(ctx: &Ctx) -> Result<Outcome> {
    let list = ctx.open(false)?.turns()?;
    let mut text = if list.session_id.is_empty() {
        "no session yet\n".to_string()
    } else {
        format!("session {}\n", list.session_id)
    };
    for t in &list.turns {
        text.push_str(&turn_line(t));
    }
    if list.turns.is_empty() {
        text.push_str("no turns\n");
    }
    Ok(Outcome::of(&list, text))
}

fn turn_line(t: &TurnSummary) -> String {
    let snap = match (&t.snapshot.id, &t.snapshot.skipped) {
        (_, Some(reason)) => format!("snapshot skipped: {}", escape_controls(reason)),
        (Some(id), None) => format!("snapshot {id}{}", if t.snapshot.late { " (late)" } else { "" }),
        (None, None) => "snapshot pending (late)".to_string(),
    };
    let mut line = format!(
        "{:>4}  {}  {:<10} {}  {}  {}\n",
        t.index,
        t.turn_id,
        serde_json::to_value(t.kind).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default(),
        t.started_at,
        snap,
        escape_controls(&t.preview)
    );
    if let Some(r) = &t.rewound {
        line.push_str(&format!(
            "        rewound at {} (its history is cut; undoing that rewind gives it back)\n",
            r.at
        ));
    }
    // The shell commands it ran, and how each ended.
    for s in &t.shell_effects {
        let status = match (s.exit_status, s.failed) {
            (Some(code), _) => format!("exit {code}"),
            (None, true) => "failed".to_string(),
            (None, false) => "exit status unknown".to_string(),
        };
        // Whether it can be rolled back on its own: its checkpoint, or why it has none.
        let own = match (&s.checkpoint_id, &s.no_window) {
            (Some(id), _) => format!("  checkpoint {}", crate::output::short(id)),
            (None, Some(why)) => format!("  no window: {}", escape_controls(why)),
            (None, None) => String::new(),
        };
        line.push_str(&format!("        $ {}  ({status}){own}\n", escape_controls(&s.command)));
    }
    // What the start or end snapshot left out for its size (each path once).
    let mut shown: Vec<&str> = Vec::new();
    for l in t.snapshot.left_out.iter().chain(t.end_snapshot.iter().flat_map(|e| &e.left_out)) {
        if !shown.contains(&l.path.as_str()) {
            shown.push(&l.path);
            line.push_str(&format!("        left out {}\n", crate::output::left_out(&l.path, &l.reason)));
        }
    }
    line
}
