//! `turnback turn begin|end`, `turnback turns`, and the detached start snapshot.

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;
use turnback::turn::{self, BeginRequest, Turn};
use turnback::{Error, ErrorCode, Result};

use crate::app::Ctx;
use crate::cli::TurnCommand;
use crate::output::{Outcome, Progress};

pub fn run(ctx: &Ctx, command: TurnCommand) -> Result<Outcome> {
    match command {
        TurnCommand::Begin { prompt, prompt_file, background, new, wait_ms } => {
            let prompt = match prompt_file {
                Some(f) => Some(
                    std::fs::read_to_string(&f)
                        .map_err(|e| Error::new(ErrorCode::Io, format!("{}: {e}", f.display())))?,
                ),
                None => prompt,
            };
            begin(ctx, BeginRequest { prompt, background, new }, Duration::from_millis(wait_ms))
        }
        TurnCommand::End => {
            let store = ctx.open(true)?;
            let ws = ctx.workspace(&store)?;
            let session = ctx.session(&store, &ws)?;
            let t = Progress::during(|report| turn::end_with(&store, &ws, &session, Some(report)))?;
            if let Some(reason) = t.end_snapshot.as_ref().and_then(|e| e.skipped.as_deref()) {
                eprintln!("turnback: turn {} ended without an end snapshot: {reason}", t.index);
            }
            let text = format!("ended turn {} ({})", t.index, t.turn_id);
            Ok(Outcome::ok(json!(t), text))
        }
        TurnCommand::Shell { command } => {
            let store = ctx.open(true)?;
            let ws = ctx.workspace(&store)?;
            let session = ctx.session(&store, &ws)?;
            let t = turn::record_shell(&store, &session.id, &command, None)?
                .ok_or_else(|| Error::not_found("a running turn (begin one with turnback turn begin)"))?;
            let recorded = t.shell_effects.last().map(|e| e.command.clone()).unwrap_or_default();
            Ok(Outcome::ok(json!({ "turn": t }), format!("recorded in turn {}: $ {recorded}", t.index)))
        }
    }
}

fn begin(ctx: &Ctx, req: BeginRequest, wait: Duration) -> Result<Outcome> {
    let (t, joined) = begin_turn(ctx, req, wait)?;
    Ok(Outcome::ok(json!({ "joined": joined, "turn": t }), t.turn_id.clone()))
}

/// Begins a turn: the start snapshot runs in a detached child process; this one waits for
/// it at most `wait`, and a SIGINT/SIGTERM meanwhile cancels everything (exit 130).
/// Returns the turn and whether it was a running one joined.
pub fn begin_turn(ctx: &Ctx, req: BeginRequest, wait: Duration) -> Result<(Turn, bool)> {
    let cancel = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, Arc::clone(&cancel))
            .map_err(|e| Error::new(ErrorCode::Io, format!("signal handler: {e}")))?;
    }
    let store = ctx.open(true)?;
    let ws = ctx.workspace(&store)?;
    let session = ctx.session(&store, &ws)?;
    let _one_begin_at_a_time =
        turnback::lock::NamedLock::exclusive(&store.locks_dir(), &format!("turn-begin-{}", session.id))?;
    if let Some(t) = turn::joins(&store, &session, &req)? {
        return Ok((t, true));
    }
    let turn_id = turn::new_id();
    let exe = std::env::current_exe().map_err(|e| Error::new(ErrorCode::Io, format!("own executable: {e}")))?;
    let mut child = {
        use std::os::unix::process::CommandExt;
        let mut cmd = Command::new(exe);
        cmd.arg("--store").arg(store.dir()).arg("--workspace").arg(&ws.root).arg("--session").arg(&session.id);
        cmd.args(["__turn-snapshot", "--turn", &turn_id])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0);
        cmd.spawn().map_err(|e| Error::new(ErrorCode::Io, format!("start snapshot: {e}")))?
    };
    let started = Instant::now();
    let late = loop {
        if cancel.load(Ordering::SeqCst) {
            let _ = child.kill();
            let _ = child.wait();
            turn::discard_start_snapshot(&store, &turn_id)?;
            return Err(Error::new(ErrorCode::Cancelled, "turn begin cancelled; no turn was recorded"));
        }
        match child.try_wait() {
            Ok(Some(status)) if status.success() => break (false, None),
            Ok(Some(status)) => {
                break (false, Some(format!("the start snapshot failed ({status}); see turnback snapshot")));
            }
            Ok(None) if started.elapsed() >= wait => break (true, None),
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            Err(e) => return Err(Error::new(ErrorCode::Io, format!("start snapshot: {e}"))),
        }
    };
    let (late, failure) = late;
    let t = turn::record(&store, &session, &turn_id, &req, late, failure)?;
    if let Some(reason) = &t.snapshot.skipped {
        eprintln!("turnback: turn {} started without a start snapshot: {reason}", t.index);
    }
    Ok((t, false))
}

pub fn detached_snapshot(ctx: &Ctx, turn_id: &str) -> Result<Outcome> {
    let store = ctx.open(true)?;
    let ws = ctx.workspace(&store)?;
    let session = ctx.session(&store, &ws)?;
    let r = turn::take_start_snapshot(&store, &ws, &session, turn_id, None)?;
    Ok(Outcome::ok(json!(r), r.snapshot_id.clone()))
}

pub fn list(ctx: &Ctx) -> Result<Outcome> {
    let store = ctx.open(false)?;
    let ws = ctx.workspace(&store)?;
    let session = ctx.session(&store, &ws)?;
    let turns = turn::list(&store, &session.id)?;
    let mut text = format!("session {}\n", session.id);
    for t in &turns {
        text.push_str(&turn_line(t));
    }
    if turns.is_empty() {
        text.push_str("no turns\n");
    }
    let items: Vec<_> = turns
        .iter()
        .map(|t| {
            json!({
                "index": t.index, "turnId": t.turn_id, "kind": t.kind, "preview": t.preview,
                "startedAt": t.started_at, "endedAt": t.ended_at,
                "snapshot": t.snapshot, "endSnapshot": t.end_snapshot,
            })
        })
        .collect();
    Ok(Outcome::ok(json!({ "sessionId": session.id, "turns": items }), text))
}

fn turn_line(t: &Turn) -> String {
    let snap = match (&t.snapshot.id, &t.snapshot.skipped) {
        (_, Some(reason)) => format!("snapshot skipped: {reason}"),
        (Some(id), None) => format!("snapshot {id}{}", if t.snapshot.late { " (late)" } else { "" }),
        (None, None) => "snapshot pending (late)".to_string(),
    };
    format!(
        "{:>4}  {}  {:<10} {}  {}  {}\n",
        t.index,
        t.turn_id,
        serde_json::to_value(t.kind).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default(),
        t.started_at,
        snap,
        t.preview
    )
}
