//! `turnback history append|show|export|import`.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::Value;
use turnback::{
    Error, ErrorCode, HistoryEntry as Entry, HistorySelection as Selection, ImportScope, NewHistoryEntry as NewEntry,
    Result, Role, TranscriptFormat, escape_controls, escape_lines,
};

use crate::cli::{ExportFormat, HistoryCommand};
use crate::ctx::Ctx;
use crate::output::Outcome;

pub fn run(ctx: &Ctx, command: HistoryCommand) -> Result<Outcome> {
    let tb = ctx.open(false)?;
    match command {
        HistoryCommand::Append => {
            // Bounded by what is kept, not by what is sent: see `turnback::read_json_input`.
            let input = turnback::read_json_input(std::io::stdin().lock())?.text;
            // Each entry is stored (durably) before the next.
            let done = tb.history_append(parse_entries(&input)?)?;
            let appended = &done.appended;
            let cut: usize = appended.iter().map(|e| e.notes.len()).sum();
            let text = format!(
                "appended {} entr{} to session {}{}",
                appended.len(),
                if appended.len() == 1 { "y" } else { "ies" },
                done.session_id,
                if cut > 0 { format!(" ({cut} fields cut to fit the caps; see notes)") } else { String::new() }
            );
            Ok(Outcome::of(&done, text))
        }
        HistoryCommand::Show { turn, tail } => {
            let selection = match (turn, tail) {
                (Some(t), _) => Selection::Turn(tb.turn(&t)?.turn_id),
                (None, Some(n)) => Selection::Tail(n),
                (None, None) => Selection::All,
            };
            let view = tb.history(&selection)?;
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
            Ok(Outcome::of(&view, text))
        }
        HistoryCommand::Export { format, output } => {
            let entries = tb.history(&Selection::All)?.entries;
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
                    let mut out = serde_json::to_string_pretty(&tb.history_messages()?)
                        .map_err(|e| Error::invalid(e.to_string()))?;
                    out.push('\n');
                    out
                }
            };
            match output {
                Some(path) => {
                    let path = if path.is_absolute() { path } else { crate::ctx::cwd()?.join(path) };
                    write_private(&path, body.as_bytes())?;
                    let text = format!("wrote {} entries to {}", entries.len(), path.display());
                    Ok(Outcome::of(&Exported { entries: entries.len(), output: path }, text))
                }
                None => Ok(Outcome::raw(body)),
            }
        }
        HistoryCommand::Import { claude_code, codex, gemini, opencode, opencode_data } => {
            // A file with records but no turn is one turnback cannot read (an empty file is a
            // transcript with nothing in it yet).
            let mut has_records = true;
            let mut file = |format, file: PathBuf| {
                has_records = std::fs::metadata(&file).map(|m| m.len() > 0).unwrap_or(true);
                tb.import_transcript_file(format, &file, ImportScope::All)
            };
            let report = match (claude_code, codex, gemini, opencode) {
                (Some(f), ..) => file(TranscriptFormat::ClaudeCode, f)?,
                (_, Some(f), ..) => file(TranscriptFormat::Codex, f)?,
                (_, _, Some(f), _) => file(TranscriptFormat::Gemini, f)?,
                (.., Some(id)) if Path::new(&id).is_file() => file(TranscriptFormat::Opencode, PathBuf::from(id))?,
                (.., Some(id)) => tb.import_opencode_session(&opencode_data_dir(opencode_data)?, &id)?,
                _ => {
                    return Err(Error::invalid(
                        "name a transcript to import (--claude-code, --codex or --gemini FILE, --opencode SESSION)",
                    ));
                }
            };
            let session = &tb.session()?.id;
            if report.source_turns == 0 && has_records {
                return Err(Error::invalid(format!(
                    "no turn recognised in the transcript ({} records skipped): not one this turnback can read, \
                     or one without a prompt yet; nothing was imported",
                    report.skipped_rows
                )));
            }
            let mut msg = if report.turns + report.joined_turns + report.updated_turns == 0 && report.entries == 0 {
                format!("nothing new to import into session {session} (already imported)")
            } else {
                format!(
                    "imported into session {session}: {} new turns, replies for {} recorded turns, {} replies grown; {} history entries ({} records skipped)",
                    report.turns, report.joined_turns, report.updated_turns, report.entries, report.skipped_rows
                )
            };
            if report.rewound_turns > 0 {
                msg.push_str(&format!(
                    "\n{} turns of the transcript were taken back by a rewind: left out (undo the rewind to bring them back)",
                    report.rewound_turns
                ));
            }
            Ok(Outcome::of(&report, msg))
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

/// What `history export --output` wrote.
#[derive(Debug, serde::Serialize)]
struct Exported {
    entries: usize,
    output: std::path::PathBuf,
}

/// One entry for people: everything in it came from an agent or a person (its time too, when
/// the caller gave one), so it is escaped — the content keeping its lines, the rest on one.
fn render(e: &Entry) -> String {
    let who = match e.role {
        Role::User => "user",
        Role::Assistant => "assistant",
    };
    let mut out = format!("── {who}  {}  turn {}\n", escape_controls(&e.at), escape_controls(&e.turn_id));
    if let Some(t) = &e.thinking {
        out.push_str(&format!("  (thinking: {} bytes)\n", t.len()));
    }
    if !e.content.is_empty() {
        let content = escape_lines(&e.content);
        out.push_str(&content);
        if !content.ends_with('\n') {
            out.push('\n');
        }
    }
    for c in e.tool_calls.iter().flatten() {
        out.push_str(&format!("  [tool {}]\n", escape_controls(&c.name)));
    }
    for n in &e.notes {
        out.push_str(&format!("  note: {}\n", escape_controls(n)));
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

/// opencode's data directory: the one given, else `$XDG_DATA_HOME/opencode`, else
/// `~/.local/share/opencode`.
fn opencode_data_dir(given: Option<PathBuf>) -> Result<PathBuf> {
    if let Some(dir) = given {
        return Ok(dir);
    }
    crate::commands::hook::opencode::data_dir()
        .ok_or_else(|| Error::invalid("no data directory: set HOME or pass --opencode-data"))
}
