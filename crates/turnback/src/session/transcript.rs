//! Importing a Claude Code session transcript (its `~/.claude/projects/…/<id>.jsonl`) into
//! a session's history and turn list.
//!
//! Invariants:
//! - Each user row with text (not tool results, not meta or local-command rows) begins a
//!   turn; the assistant rows after it (text, thinking, tool calls) become one assistant
//!   entry of that turn, with each tool call's output taken from the matching
//!   `tool_result`. Sub-agent rows (`isSidechain`) and rows of other types are skipped.
//! - An import is one transaction: its turns and entries all land or none do.
//! - Re-running it changes nothing: the session remembers the last row it imported, and
//!   only rows after it are read (a transcript that grew adds its new turns).

use std::collections::HashMap;

use serde::Serialize;
use serde_json::Value;

use crate::error::{Error, Result};
use crate::session::Session;
use crate::session::history::{self, Entry, Role, ToolCall};
use crate::session::turn;
use crate::storage::store::Store;

/// What an import did.
#[derive(Debug, Clone, Default, Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Imported {
    /// Turns recorded.
    pub turns: u64,
    /// History entries recorded.
    pub entries: u64,
    /// Rows skipped (sub-agent, meta, other types, unparsable).
    pub skipped_rows: u64,
    /// Rows already imported by an earlier run.
    pub already_imported_rows: u64,
}

const NO_SNAPSHOT: &str = "imported from a Claude Code transcript (no snapshot)";

/// A turn being rebuilt.
struct Building {
    /// The turn already imported that these rows continue (no new turn, no user entry).
    continues: Option<String>,
    prompt: String,
    started_at: String,
    ended_at: String,
    assistant: Option<Entry>,
    /// Tool-use id → index in the assistant entry's calls.
    calls: HashMap<String, usize>,
}

/// Imports the transcript `text` into `session`: parse the rows, rebuild the turns from the
/// rows after the last one imported, commit them in one transaction.
///
/// # Errors
/// `invalid-argument` if nothing in it looks like a Claude Code transcript;
/// `concurrent-update` if another import into the session finished meanwhile.
pub fn import_claude_code(store: &Store, session: &Session, text: &str) -> Result<Imported> {
    let mut report = Imported::default();
    let totals = history::totals(store, &session.id)?;
    let rows = parse_rows(text, &mut report)?;
    // Skip what an earlier run imported.
    let start = match totals.last_imported_row.as_deref() {
        Some(last) => {
            rows.iter().position(|r| r.get("uuid").and_then(Value::as_str) == Some(last)).map_or(0, |i| i + 1)
        }
        None => 0,
    };
    report.already_imported_rows = start as u64;
    let continued = totals.last_imported_turn.clone().filter(|_| start > 0);
    let mut rebuilt = Rebuild { turns: Vec::new(), continued, last_uuid: None };
    for row in &rows[start..] {
        if !rebuilt.row(row) {
            report.skipped_rows += 1;
        }
    }
    let Some(last_uuid) = rebuilt.last_uuid.take() else { return Ok(report) };
    commit(store, &session.id, &totals, rebuilt.turns, last_uuid, &mut report)?;
    history::enforce_budget(store, &session.id)?;
    Ok(report)
}

/// The rows of a transcript (unparsable lines counted as skipped).
fn parse_rows(text: &str, report: &mut Imported) -> Result<Vec<Value>> {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let rows: Vec<Value> = lines.iter().filter_map(|l| serde_json::from_str(l).ok()).collect();
    report.skipped_rows += (lines.len() - rows.len()) as u64;
    if !rows.is_empty()
        && !rows.iter().any(|r| matches!(r.get("type").and_then(Value::as_str), Some("user" | "assistant")))
    {
        return Err(Error::invalid("no user or assistant rows: not a Claude Code transcript"));
    }
    Ok(rows)
}

/// Turns being rebuilt from rows, in order.
struct Rebuild {
    turns: Vec<Building>,
    /// The turn imported last, which rows before any new prompt continue.
    continued: Option<String>,
    /// The last row taken in.
    last_uuid: Option<String>,
}

impl Rebuild {
    /// Takes one row in; `false` if it is skipped (sub-agent, meta, other types, a local
    /// command, an assistant row before any prompt).
    fn row(&mut self, row: &Value) -> bool {
        let kind = row.get("type").and_then(Value::as_str).unwrap_or("");
        let flag = |name: &str| row.get(name).and_then(Value::as_bool).unwrap_or(false);
        if !matches!(kind, "user" | "assistant") || flag("isSidechain") || flag("isMeta") || flag("isCompactSummary") {
            return false;
        }
        if let Some(u) = row.get("uuid").and_then(Value::as_str) {
            self.last_uuid = Some(u.to_string());
        }
        let at = row.get("timestamp").and_then(Value::as_str).unwrap_or("").to_string();
        let content = row.pointer("/message/content").cloned().unwrap_or(Value::Null);
        if kind == "user" { self.user(&content, at) } else { self.assistant(&content, at) }
    }

    /// A user row: tool results for the turn being built, and maybe a new turn's prompt.
    fn user(&mut self, content: &Value, at: String) -> bool {
        let (text, results) = user_parts(content);
        for (id, output) in results {
            if let Some(t) = self.turns.last_mut()
                && let (Some(&i), Some(a)) = (t.calls.get(&id), t.assistant.as_mut())
                && let Some(calls) = a.tool_calls.as_mut()
            {
                calls[i].output = Some(output);
                t.ended_at = at.clone();
            }
        }
        match text {
            Some(text) if !is_local_command(&text) => {
                self.turns.push(Building::new(None, text, at));
                true
            }
            Some(_) => false,
            None => true,
        }
    }

    /// An assistant row: its text, thinking and tool calls join the turn's reply.
    fn assistant(&mut self, content: &Value, at: String) -> bool {
        if self.turns.is_empty()
            && let Some(turn) = self.continued.clone()
        {
            // The transcript grew in the middle of the turn imported last.
            self.turns.push(Building::new(Some(turn), String::new(), at.clone()));
        }
        // An assistant row before any prompt: the transcript began mid-turn.
        let Some(t) = self.turns.last_mut() else { return false };
        let a = t.assistant.get_or_insert_with(|| reply_entry(&at));
        for block in content.as_array().into_iter().flatten() {
            match block.get("type").and_then(Value::as_str) {
                Some("text") => join(&mut a.content, block.get("text").and_then(Value::as_str)),
                Some("thinking") => {
                    let mut thinking = a.thinking.take().unwrap_or_default();
                    join(&mut thinking, block.get("thinking").and_then(Value::as_str));
                    a.thinking = Some(thinking).filter(|s| !s.is_empty());
                }
                Some("tool_use") => {
                    let calls = a.tool_calls.get_or_insert_with(Vec::new);
                    if let Some(id) = block.get("id").and_then(Value::as_str) {
                        t.calls.insert(id.to_string(), calls.len());
                    }
                    calls.push(ToolCall {
                        name: block.get("name").and_then(Value::as_str).unwrap_or("").to_string(),
                        input: block.get("input").cloned().unwrap_or(Value::Null),
                        output: None,
                    });
                }
                _ => {}
            }
        }
        if let Some(text) = content.as_str() {
            join(&mut a.content, Some(text));
        }
        t.ended_at = at;
        true
    }
}

impl Building {
    fn new(continues: Option<String>, prompt: String, at: String) -> Self {
        Building { continues, prompt, started_at: at.clone(), ended_at: at, assistant: None, calls: HashMap::new() }
    }
}

/// An empty assistant entry begun at `at`.
fn reply_entry(at: &str) -> Entry {
    Entry {
        turn_id: String::new(),
        role: Role::Assistant,
        content: String::new(),
        prompt: None,
        thinking: None,
        tool_calls: None,
        background: None,
        at: at.to_string(),
        notes: Vec::new(),
    }
}

/// One transaction: the rebuilt turns, their entries, and the marker of what was imported.
fn commit(
    store: &Store,
    session: &str,
    totals: &history::Totals,
    turns: Vec<Building>,
    last_uuid: String,
    report: &mut Imported,
) -> Result<()> {
    let mut txn = store.kv().begin()?;
    if history::totals_in(store, &mut *txn, session)?.last_imported_row != totals.last_imported_row {
        return Err(Error::new(
            crate::ErrorCode::ConcurrentUpdate,
            "another import into this session finished meanwhile; run the import again",
        ));
    }
    let mut entries = Vec::new();
    let mut last_turn = totals.last_imported_turn.clone();
    for b in turns {
        let turn_id = match b.continues {
            Some(turn_id) => turn_id,
            None => {
                let turn = turn::insert_finished_in(
                    store,
                    &mut *txn,
                    session,
                    &b.prompt,
                    &b.started_at,
                    &b.ended_at,
                    NO_SNAPSHOT,
                )?;
                report.turns += 1;
                let mut user = Entry { role: Role::User, content: b.prompt, at: b.started_at, ..reply_entry("") };
                user.turn_id = turn.turn_id.clone();
                history::cap(&mut user);
                entries.push(user);
                turn.turn_id
            }
        };
        if let Some(mut a) = b.assistant {
            a.turn_id = turn_id.clone();
            history::cap(&mut a);
            entries.push(a);
        }
        last_turn = Some(turn_id);
    }
    report.entries = entries.len() as u64;
    let mut totals = history::append_in(store, &mut *txn, session, &entries)?;
    totals.last_imported_row = Some(last_uuid);
    totals.last_imported_turn = last_turn;
    history::put_totals_in(store, &mut *txn, session, &totals)?;
    txn.commit()
}

/// A user row's prompt text (if it has any) and its tool results (id → output).
fn user_parts(content: &Value) -> (Option<String>, Vec<(String, Value)>) {
    match content {
        Value::String(s) => (Some(s.clone()), Vec::new()),
        Value::Array(blocks) => {
            let mut text = String::new();
            let mut results = Vec::new();
            for b in blocks {
                match b.get("type").and_then(Value::as_str) {
                    Some("text") => join(&mut text, b.get("text").and_then(Value::as_str)),
                    Some("tool_result") => {
                        let id = b.get("tool_use_id").and_then(Value::as_str).unwrap_or("").to_string();
                        results.push((id, tool_output(b.get("content"))));
                    }
                    _ => {}
                }
            }
            (Some(text).filter(|t| !t.is_empty()), results)
        }
        _ => (None, Vec::new()),
    }
}

/// A tool result's content as a string when it is text (a string or text blocks).
fn tool_output(content: Option<&Value>) -> Value {
    match content {
        Some(Value::Array(blocks)) => {
            let mut text = String::new();
            for b in blocks {
                join(&mut text, b.get("text").and_then(Value::as_str));
            }
            Value::String(text)
        }
        Some(v) => v.clone(),
        None => Value::Null,
    }
}

fn join(into: &mut String, text: Option<&str>) {
    if let Some(t) = text.filter(|t| !t.is_empty()) {
        if !into.is_empty() {
            into.push_str("\n\n");
        }
        into.push_str(t);
    }
}

/// Rows Claude Code writes for local slash commands, not for the conversation.
fn is_local_command(text: &str) -> bool {
    let t = text.trim_start();
    t.starts_with("<command-name>") || t.starts_with("<local-command-stdout>") || t.starts_with("<command-message>")
}
