//! `turnback session new|list|show|delete`.

use serde_json::json;
use turnback::checkpoint::{self, ListFilter};
use turnback::settings::format_size;
use turnback::{Error, Result, Session, snapshot, turn};

use crate::app::Ctx;
use crate::cli::SessionCommand;
use crate::output::Outcome;

pub fn run(ctx: &Ctx, command: SessionCommand) -> Result<Outcome> {
    match command {
        SessionCommand::New { id } => {
            let store = ctx.open(true)?;
            let ws = ctx.workspace(&store)?;
            let s = Session::create(&store, &ws, id.as_deref())?;
            Ok(Outcome::ok(json!(s), s.id.clone()))
        }
        SessionCommand::List => {
            let store = ctx.open(false)?;
            let ws = ctx.workspace(&store)?;
            let sessions = Session::list(&store, &ws)?;
            let mut text = String::new();
            for s in &sessions {
                let parent = s.parent.as_deref().map(|p| format!("  forked from {p}")).unwrap_or_default();
                text.push_str(&format!("{}  created {}  round {}{parent}\n", s.id, s.created_at, s.prompt_round));
            }
            if sessions.is_empty() {
                text.push_str("no sessions\n");
            }
            Ok(Outcome::ok(json!({ "workspace": ws.root, "sessions": sessions }), text))
        }
        SessionCommand::Show { id } => {
            let store = ctx.open(false)?;
            let ws = ctx.workspace(&store)?;
            let s = match id {
                Some(id) => Session::get(&store, &id)?.ok_or_else(|| Error::not_found(format!("session {id}")))?,
                None => ctx.session(&store, &ws)?,
            };
            let turns = turn::list(&store, &s.id)?;
            let snaps = snapshot::list(&store, &s.id)?;
            let stored: u64 = snaps.iter().map(|r| r.stored_bytes).sum();
            let checkpoints = checkpoint::list(&store, &s, ListFilter::default())?.len();
            let running = turns.iter().rev().find(|t| t.running()).map(|t| t.turn_id.clone());
            let json = json!({
                "session": s, "turns": turns.len(), "runningTurn": running,
                "snapshots": snaps.len(), "snapshotStoredBytes": stored, "checkpoints": checkpoints,
            });
            let text = format!(
                "session    {}\ncreated    {}\nparent     {}\nturns      {} (running: {})\nsnapshots  {} ({} stored)\ncheckpoints {}\n",
                s.id,
                s.created_at,
                s.parent.as_deref().unwrap_or("-"),
                turns.len(),
                running.as_deref().unwrap_or("none"),
                snaps.len(),
                format_size(stored),
                checkpoints
            );
            Ok(Outcome::ok(json, text))
        }
        SessionCommand::Fork { from, after_turn, into, id } => {
            let store = ctx.open(false)?;
            let into = match into {
                Some(d) if d.is_absolute() => Some(d),
                Some(d) => Some(ctx.cwd()?.join(d)),
                None => None,
            };
            let f = turnback::fork::fork(&store, &from, after_turn, into.as_deref(), id.as_deref())?;
            let mut text = format!(
                "{}\n  forked from {} with {} turns and {} snapshots",
                f.session.id, from, f.turns, f.snapshots
            );
            if let Some(dir) = &f.into {
                text.push_str(&format!("\n  wrote {} files into {}", f.files_written, dir.display()));
            }
            for n in &f.not_written {
                text.push_str(&format!("\n  not written: {n}"));
            }
            Ok(Outcome::ok(json!(f), text))
        }
        SessionCommand::Delete { id } => {
            let store = ctx.open(false)?;
            let d = Session::delete(&store, &id)?;
            let text = format!(
                "deleted session {}: {} turns, {} snapshots, {} checkpoints (run turnback gc to reclaim space)",
                d.session_id, d.turns, d.snapshots, d.checkpoints
            );
            Ok(Outcome::ok(json!(d), text))
        }
    }
}
