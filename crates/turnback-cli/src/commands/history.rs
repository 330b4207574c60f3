//! `turnback history append|show|export|import`.

use std::io::{Read, Write};

use serde_json::{Value, json};
use turnback::history::{self, Entry, NewEntry, Role, Selection};
use turnback::{Error, ErrorCode, Result, Store, turn};

use crate::app::Ctx;
use crate::cli::{ExportFormat, HistoryCommand};
use crate::output::Outcome;

pub fn run(ctx: &Ctx, command: HistoryCommand) -> Result<Outcome> {
    let store = ctx.open(false)?;
    let ws = ctx.workspace(&store)?;
    let session = ctx.session(&store, &ws)?;
    match command {
        HistoryCommand::Append => {
            let mut input = String::new();
            std::io::stdin()
                .read_to_string(&mut input)
                .map_err(|e| Error::new(ErrorCode::Io, format!("reading stdin: {e}")))?;
            let mut appended = Vec::new();
            // Each entry is stored (durably) before the next is read.
            for new in parse_entries(&input)? {
                appended.push(history::append(&store, &session, new)?);
            }
            let cut: usize = appended.iter().map(|e| e.notes.len()).sum();
            let text = format!(
                "appended {} entr{} to session {}{}",
                appended.len(),
                if appended.len() == 1 { "y" } else { "ies" },
                session.id,
                if cut > 0 { format!(" ({cut} fields cut to fit the caps; see notes)") } else { String::new() }
            );
            Ok(Outcome::ok(json!({ "sessionId": session.id, "appended": appended }), text))
        }
        HistoryCommand::Show { turn, tail } => {
            let selection = match (turn, tail) {
                (Some(t), _) => Selection::Turn(resolve_turn(&store, &session.id, &t)?),
                (None, Some(n)) => Selection::Tail(n),
                (None, None) => Selection::All,
            };
            let view = history::read(&store, &session.id, &selection)?;
            let mut text = String::new();
            if view.partial {
                text.push_str("(partial: earlier entries are not shown)\n");
            }
            for e in &view.entries {
                text.push_str(&render(e));
            }
            if view.entries.is_empty() {
                text.push_str("no history\n");
            }
            Ok(Outcome::ok(json!(view), text))
        }
        HistoryCommand::Export { format, output } => {
            let entries = history::read(&store, &session.id, &Selection::All)?.entries;
            let body = match format {
                ExportFormat::Jsonl => {
                    let mut out = String::new();
                    for e in &entries {
                        out.push_str(&serde_json::to_string(e).map_err(|e| Error::invalid(e.to_string()))?);
                        out.push('\n');
                    }
                    out
                }
                ExportFormat::Messages => {
                    let mut out = serde_json::to_string_pretty(&history::messages(&entries))
                        .map_err(|e| Error::invalid(e.to_string()))?;
                    out.push('\n');
                    out
                }
            };
            match output {
                Some(path) => {
                    let path = if path.is_absolute() { path } else { ctx.cwd()?.join(path) };
                    write_private(&path, body.as_bytes())?;
                    let text = format!("wrote {} entries to {}", entries.len(), path.display());
                    Ok(Outcome::ok(json!({ "entries": entries.len(), "output": path }), text))
                }
                None => Ok(Outcome::raw(body)),
            }
        }
        HistoryCommand::Import { claude_code } => {
            let text = std::fs::read_to_string(&claude_code)
                .map_err(|e| Error::new(ErrorCode::Io, format!("{}: {e}", claude_code.display())))?;
            let report = turnback::transcript::import_claude_code(&store, &session, &text)?;
            let msg = if report.turns == 0 && report.entries == 0 {
                format!("nothing new to import into session {} (already imported)", session.id)
            } else {
                format!(
                    "imported {} turns and {} history entries into session {} ({} rows skipped)",
                    report.turns, report.entries, session.id, report.skipped_rows
                )
            };
            Ok(Outcome::ok(json!(report), msg))
        }
    }
}

/// One object, an array of objects, or JSON lines.
fn parse_entries(input: &str) -> Result<Vec<NewEntry>> {
    let bad = |e: serde_json::Error| Error::invalid(format!("history entry: {e}"));
    let trimmed = input.trim();
    if trimmed.is_empty() {
        return Err(Error::invalid("no entry on stdin"));
    }
    if let Ok(value) = serde_json::from_str::<Value>(trimmed) {
        return match value {
            Value::Array(items) => items.into_iter().map(|v| serde_json::from_value(v).map_err(bad)).collect(),
            v => Ok(vec![serde_json::from_value(v).map_err(bad)?]),
        };
    }
    trimmed.lines().filter(|l| !l.trim().is_empty()).map(|l| serde_json::from_str(l).map_err(bad)).collect()
}

/// Turn `t` by 1-based index or by id.
fn resolve_turn(store: &Store, session: &str, t: &str) -> Result<String> {
    let turn = match t.parse::<u64>() {
        Ok(index) => turn::by_index(store, session, index)?,
        Err(_) => turn::get(store, t)?,
    };
    if turn.session_id != session {
        return Err(Error::not_found(format!("turn {t} in session {session}")));
    }
    Ok(turn.turn_id)
}

fn render(e: &Entry) -> String {
    let who = match e.role {
        Role::User => "user",
        Role::Assistant => "assistant",
    };
    let mut out = format!("── {who}  {}  turn {}\n", e.at, e.turn_id);
    if let Some(t) = &e.thinking {
        out.push_str(&format!("  (thinking: {} bytes)\n", t.len()));
    }
    if !e.content.is_empty() {
        out.push_str(&e.content);
        if !e.content.ends_with('\n') {
            out.push('\n');
        }
    }
    for c in e.tool_calls.iter().flatten() {
        out.push_str(&format!("  [tool {}]\n", c.name));
    }
    for n in &e.notes {
        out.push_str(&format!("  note: {n}\n"));
    }
    out
}

/// Writes `bytes` to `path`, owner-only (0600) whether or not it existed.
fn write_private(path: &std::path::Path, bytes: &[u8]) -> Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let io = |e: std::io::Error| Error::new(ErrorCode::Io, format!("{}: {e}", path.display()));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(path)
        .map_err(io)?;
    f.set_permissions(std::fs::Permissions::from_mode(0o600)).map_err(io)?;
    f.write_all(bytes).map_err(io)?;
    f.sync_all().map_err(io)
}
