//! `turnback session new|list|show|fork|delete`.

use turnback::{Result, format_size};

use crate::cli::SessionCommand;
use crate::ctx::Ctx;
use crate::output::Outcome;

pub fn run(ctx: &Ctx, command: SessionCommand) -> Result<Outcome> {
    match command {
        SessionCommand::New { id } => {
            let s = ctx.open(true)?.new_session(id.as_deref())?;
            let text = s.id.clone();
            Ok(Outcome::of(&s, text))
        }
        #[cfg(feature = "remote")]
        SessionCommand::List { remote: Some(name) } => super::remote::sessions(ctx, &name),
        SessionCommand::List { .. } => {
            let list = ctx.open(false)?.sessions()?;
            let mut text = String::new();
            for s in &list.sessions {
                let parent = s.parent.as_deref().map(|p| format!("  forked from {p}")).unwrap_or_default();
                let agent = s.agent.as_deref().map(|a| format!("  agent {a}")).unwrap_or_default();
                text.push_str(&format!(
                    "{}  created {}  round {}{agent}{parent}\n",
                    s.id, s.created_at, s.prompt_round
                ));
            }
            if list.sessions.is_empty() {
                text.push_str("no sessions\n");
            }
            Ok(Outcome::of(&list, text))
        }
        SessionCommand::Show { id } => {
            let info = ctx.open(false)?.session_info(id.as_deref())?;
            let s = &info.session;
            let text = format!(
                "session    {}\nagent      {}\ncreated    {}\nparent     {}\nturns      {} (running: {})\nsnapshots  {} ({} stored)\ncheckpoints {}\n",
                s.id,
                s.agent.as_deref().unwrap_or("-"),
                s.created_at,
                s.parent.as_deref().unwrap_or("-"),
                info.turns,
                info.running_turn.as_deref().unwrap_or("none"),
                info.snapshots,
                format_size(info.snapshot_stored_bytes),
                info.checkpoints
            );
            Ok(Outcome::of(&info, text))
        }
        SessionCommand::Fork { from, after_turn, into, id } => {
            let f = ctx.open(false)?.fork(&from, after_turn, into.as_deref(), id.as_deref())?;
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
            Ok(Outcome::of(&f, text))
        }
        SessionCommand::Delete { id } => {
            let d = ctx.open(false)?.delete_session(&id)?;
            let text = format!(
                "deleted session {}: {} turns, {} snapshots, {} checkpoints (run turnback gc to reclaim space)",
                d.session_id, d.turns, d.snapshots, d.checkpoints
            );
            Ok(Outcome::of(&d, text))
        }
    }
}
