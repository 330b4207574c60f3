//! Gemini CLI's chat file (`~/.gemini/tmp/<project>/chats/session-…`), read into the turns
//! the person kept. Two generations (`packages/core/src/services/chatRecordingService.ts`):
//! JSON lines since v0.39 — a metadata line, message lines (one with an `id` seen before
//! replaces that message where it stands), `{"$set": …}` (with `messages`: all of them
//! anew), `{"$rewindTo": id}` (that message and every later one are gone: the person
//! rewound) — and, before, one JSON object with a `messages` array.
//!
//! Invariants:
//! - A `user` message with text of its own begins a turn; one holding only tool responses
//!   (`functionResponse` parts, recorded as user messages since v0.44) or text Gemini
//!   ignores itself (empty, `/command`, `?`, `<session_context>`, `<hook_context>`) does not.
//! - The `gemini` messages after it make the reply: text, thoughts (thinking), tool calls
//!   with their results, an error where the call's status says so. `info`, `error` and
//!   `warning` messages are notices, not conversation.
//! - A turn's key is the id of its user message.
//! - A file that is neither form is not a Gemini chat: refused.

use serde_json::Value;

use super::{Parsed, SourceTurn, join_text, reply_entry};
use crate::error::{Error, Result};
use crate::session::history::{Entry, ToolCall};

/// Reads a chat file.
///
/// # Errors
/// `invalid-argument` if it is not a Gemini CLI chat file.
pub(crate) fn parse(text: &str) -> Result<Parsed> {
    let (messages, skipped, session) = match serde_json::from_str::<Value>(text.trim()) {
        Ok(Value::Object(record)) if record.get("messages").is_some_and(Value::is_array) => {
            (record["messages"].as_array().cloned().unwrap_or_default(), 0, str_of(&Value::Object(record), "sessionId"))
        }
        _ => replay(text)?,
    };
    let mut turns: Vec<SourceTurn> = Vec::new();
    let mut skipped = skipped;
    for m in &messages {
        let at = str_of(m, "timestamp").unwrap_or_default();
        match str_of(m, "type").as_deref() {
            Some("user") => match prompt(m) {
                Some(prompt) => turns.push(SourceTurn {
                    key: str_of(m, "id").unwrap_or_else(|| format!("at-{at}")),
                    prompt,
                    sent: None,
                    started_at: at.clone(),
                    ended_at: at,
                    reply: None,
                }),
                None => {
                    if let Some(t) = turns.last_mut() {
                        t.ended_at = at;
                    }
                }
            },
            Some("gemini") => match turns.last_mut() {
                Some(turn) => {
                    turn.ended_at = at.clone();
                    reply(turn.reply.get_or_insert_with(|| reply_entry(&at)), m);
                }
                None => skipped += 1,
            },
            _ => skipped += 1,
        }
    }
    Ok(Parsed { turns, skipped_rows: skipped, session })
}

fn str_of(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(Value::as_str).map(str::to_string)
}

/// Replays JSON lines into the messages they leave, how many lines were skipped, and the
/// session the metadata line names.
fn replay(text: &str) -> Result<(Vec<Value>, u64, Option<String>)> {
    let (mut messages, mut skipped, mut chat, mut session) = (Vec::<Value>::new(), 0, false, None);
    let mut lines = 0;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        lines += 1;
        let Ok(row) = serde_json::from_str::<Value>(line) else {
            skipped += 1;
            continue;
        };
        if let Some(set) = row.get("$set") {
            chat = true;
            if let Some(all) = set.get("messages").and_then(Value::as_array) {
                messages = all.clone();
            }
        } else if let Some(id) = row.get("$rewindTo") {
            chat = true;
            let at = messages.iter().position(|m| m.get("id") == Some(id)).unwrap_or(0);
            messages.truncate(at);
        } else if row.get("id").is_some_and(Value::is_string)
            && matches!(row.get("type").and_then(Value::as_str), Some("user" | "gemini" | "info" | "error" | "warning"))
        {
            chat = true;
            match messages.iter().position(|m| m.get("id") == row.get("id")) {
                Some(at) => messages[at] = row,
                None => messages.push(row),
            }
        } else if row.get("sessionId").is_some() && row.get("projectHash").is_some() {
            // The metadata line.
            chat = true;
            session = session.or_else(|| str_of(&row, "sessionId"));
        } else {
            skipped += 1;
        }
    }
    if lines > 0 && !chat {
        return Err(Error::invalid("no session metadata or messages: not a Gemini CLI chat file"));
    }
    Ok((messages, skipped, session))
}

/// A user message's own text, unless it is only tool responses or text Gemini ignores.
fn prompt(m: &Value) -> Option<String> {
    let mut text = String::new();
    match m.get("content") {
        Some(Value::String(s)) => join_text(&mut text, Some(s)),
        Some(Value::Array(parts)) => {
            for part in parts {
                join_text(&mut text, part.get("text").and_then(Value::as_str));
            }
        }
        _ => {}
    }
    let t = text.trim_start();
    let ignored = ["/", "?", "<session_context>", "<hook_context>"].iter().any(|p| t.starts_with(p));
    (!t.is_empty() && !ignored).then_some(text)
}

/// Adds a `gemini` message to the reply (a message seen again was replaced upstream, so
/// each message counts once).
fn reply(reply: &mut Entry, m: &Value) {
    match m.get("content") {
        Some(Value::String(s)) => join_text(&mut reply.content, Some(s)),
        Some(Value::Array(parts)) => {
            for part in parts {
                join_text(&mut reply.content, part.get("text").and_then(Value::as_str));
            }
        }
        _ => {}
    }
    for thought in m.get("thoughts").and_then(Value::as_array).into_iter().flatten() {
        let mut thinking = reply.thinking.take().unwrap_or_default();
        let subject = thought.get("subject").and_then(Value::as_str).unwrap_or("");
        let description = thought.get("description").and_then(Value::as_str).unwrap_or("");
        let line = if subject.is_empty() { description.to_string() } else { format!("{subject}: {description}") };
        join_text(&mut thinking, Some(&line));
        reply.thinking = Some(thinking).filter(|t| !t.is_empty());
    }
    for call in m.get("toolCalls").and_then(Value::as_array).into_iter().flatten() {
        let calls = reply.tool_calls.get_or_insert_with(Vec::new);
        let status = call.get("status").and_then(Value::as_str).unwrap_or("");
        calls.push(ToolCall {
            name: str_of(call, "name").unwrap_or_default(),
            input: call.get("args").cloned().unwrap_or(Value::Null),
            output: call.get("result").map(result_text),
            error: (status == "error").then_some(true),
        });
    }
}

/// A tool call's result: its function responses' output (or error) text.
fn result_text(result: &Value) -> Value {
    let mut text = String::new();
    for part in result.as_array().into_iter().flatten() {
        let response = part.pointer("/functionResponse/response");
        let said = response.and_then(|r| r.get("output").or_else(|| r.get("error")));
        match said {
            Some(Value::String(s)) => join_text(&mut text, Some(s)),
            Some(other) => join_text(&mut text, Some(&other.to_string())),
            None => {}
        }
    }
    if text.is_empty() && !result.is_array() { result.clone() } else { Value::String(text) }
}
