//! Gemini CLI's chat file (`~/.gemini/tmp/<project>/chats/session-…`), read into the turns
//! the person kept. Two generations (`packages/core/src/services/chatRecordingService.ts`):
//! JSON lines since v0.39 — a metadata line, message lines (one with an `id` seen before
//! replaces that message where it stands), `{"$set": …}` (with `messages`: all of them
//! anew), `{"$rewindTo": id}` (that message and every later one are gone: the person
//! rewound) — and, before, one JSON object with a `messages` array.
//!
//! A resumed session (`--resume`) writes a new metadata line and `$set`s the messages
//! anew (first only the session context, then all) in the model API's form: the same ids,
//! but the resume's time on each, tool calls as `functionCall` parts of `gemini` messages
//! and their results as `functionResponse` parts of `user` messages (each twice).
//!
//! Invariants:
//! - A `user` message with text of its own begins a turn; one holding only tool responses
//!   (`functionResponse` parts, recorded as user messages since v0.44) or text Gemini
//!   ignores itself (empty, `/command`, `?`, `<session_context>`, `<hook_context>`) does not.
//! - The `gemini` messages after it make the reply: text, thoughts (thinking), tool calls
//!   with their results, an error where the call's status says so. `info`, `error` and
//!   `warning` messages are notices, not conversation.
//! - A turn's key is the id of its user message. A message a `$set` restates (same id, same
//!   type) stands as its own line last wrote it — its time, its tool calls with results —
//!   so a resume changes no key, no time and no reply.
//! - Tool calls come from `toolCalls` or from `functionCall` parts, their results from the
//!   call's `result` or from the first `functionResponse` part with the call's id.
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
    // The current turn's calls made as `functionCall` parts, by call id: their results
    // come in later `user` messages.
    let mut pending: Vec<(String, usize)> = Vec::new();
    for m in &messages {
        let at = str_of(m, "timestamp").unwrap_or_default();
        match str_of(m, "type").as_deref() {
            Some("user") => match prompt(m) {
                Some(prompt) => {
                    pending.clear();
                    turns.push(SourceTurn {
                        key: str_of(m, "id").unwrap_or_else(|| format!("at-{at}")),
                        prompt,
                        sent: None,
                        started_at: at.clone(),
                        ended_at: at,
                        reply: None,
                    })
                }
                None => {
                    if let Some(t) = turns.last_mut() {
                        t.ended_at = at;
                        if let Some(reply) = &mut t.reply {
                            responses(reply, &pending, m);
                        }
                    }
                }
            },
            Some("gemini") => match turns.last_mut() {
                Some(turn) => {
                    turn.ended_at = at.clone();
                    reply(turn.reply.get_or_insert_with(|| reply_entry(&at)), &mut pending, m);
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
    // Each message as its own line last wrote it, by (id, type).
    let mut written: std::collections::HashMap<(String, String), Value> = std::collections::HashMap::new();
    let identity = |m: &Value| Some((str_of(m, "id")?, str_of(m, "type")?));
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
                let restated = |m: &Value| identity(m).and_then(|k| written.get(&k).cloned()).unwrap_or(m.clone());
                messages = all.iter().map(restated).collect();
            }
        } else if let Some(id) = row.get("$rewindTo") {
            chat = true;
            let at = messages.iter().position(|m| m.get("id") == Some(id)).unwrap_or(0);
            messages.truncate(at);
        } else if row.get("id").is_some_and(Value::is_string)
            && matches!(row.get("type").and_then(Value::as_str), Some("user" | "gemini" | "info" | "error" | "warning"))
        {
            chat = true;
            if let Some(key) = identity(&row) {
                written.insert(key, row.clone());
            }
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
/// each message counts once); its `functionCall` parts join `pending`.
fn reply(reply: &mut Entry, pending: &mut Vec<(String, usize)>, m: &Value) {
    match m.get("content") {
        Some(Value::String(s)) => join_text(&mut reply.content, Some(s)),
        Some(Value::Array(parts)) => {
            for part in parts {
                join_text(&mut reply.content, part.get("text").and_then(Value::as_str));
                if let Some(call) = part.get("functionCall") {
                    let calls = reply.tool_calls.get_or_insert_with(Vec::new);
                    if let Some(id) = str_of(call, "id") {
                        pending.push((id, calls.len()));
                    }
                    calls.push(ToolCall {
                        name: str_of(call, "name").unwrap_or_default(),
                        input: call.get("args").cloned().unwrap_or(Value::Null),
                        output: None,
                        error: None,
                    });
                }
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

/// Gives the `pending` calls of `reply` their results from a `user` message's
/// `functionResponse` parts (the first for each call; Gemini CLI writes them twice).
fn responses(reply: &mut Entry, pending: &[(String, usize)], m: &Value) {
    let Some(calls) = reply.tool_calls.as_mut() else { return };
    for part in m.get("content").and_then(Value::as_array).into_iter().flatten() {
        let Some(response) = part.get("functionResponse") else { continue };
        let id = str_of(response, "id");
        let Some(&(_, at)) = pending.iter().find(|(p, _)| Some(p) == id.as_ref()) else { continue };
        if let Some(call) = calls.get_mut(at).filter(|c| c.output.is_none()) {
            let said = response.pointer("/response/error").map(|_| true);
            call.output = Some(result_text(&Value::Array(vec![part.clone()])));
            call.error = said;
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A chat file Gemini CLI 0.61.0 wrote for three prompts, the second and third each a
    /// `--resume latest` within the minute (paths and the session context shortened).
    const RESUMED: &str = include_str!("gemini-resumed.jsonl");

    fn calls(t: &SourceTurn) -> Vec<(String, bool)> {
        let calls = t.reply.as_ref().and_then(|r| r.tool_calls.clone()).unwrap_or_default();
        calls.into_iter().map(|c| (c.name, c.output.is_some())).collect()
    }

    #[test]
    fn a_resume_restating_the_conversation_keeps_each_turns_key_time_and_tool_calls() {
        let parsed = parse(RESUMED).unwrap();
        assert_eq!(parsed.session.as_deref(), Some("5f701a76-4c10-4b79-88ba-9a5a1066bcb8"));
        let prompts: Vec<&str> = parsed.turns.iter().map(|t| t.prompt.as_str()).collect();
        assert_eq!(prompts, ["Start a. (tb-1)", "Change a. (tb-2)", "Add c. (tb-3)"]);
        // As first written, not as the resumes restated them.
        let keys: Vec<&str> = parsed.turns.iter().map(|t| t.key.as_str()).collect();
        assert_eq!(
            keys,
            [
                "a426050c-1117-4fcc-bef6-f35ae7e307f9",
                "3454fc89-49f9-4bb6-a173-3077e78c18cd",
                "416d6e01-b093-4528-91f9-dfbb4fd5e8ec"
            ]
        );
        let starts: Vec<&str> = parsed.turns.iter().map(|t| t.started_at.as_str()).collect();
        assert_eq!(starts, ["2026-12-04T04:19:29.843Z", "2026-12-04T04:19:32.091Z", "2026-12-04T04:19:33.963Z"]);
        assert_eq!(
            calls(&parsed.turns[0]),
            [("write_file".to_string(), true), ("run_shell_command".to_string(), true)]
        );
        assert_eq!(calls(&parsed.turns[1]), [("replace".to_string(), true)]);
        let replies: Vec<String> =
            parsed.turns.iter().map(|t| t.reply.as_ref().map(|r| r.content.clone()).unwrap_or_default()).collect();
        assert_eq!(replies, ["Turn one done.", "Turn two done.", "Turn three done."]);
    }

    #[test]
    fn a_conversation_only_in_the_api_form_has_its_calls_from_function_parts() {
        // The last resume's `$set` alone: what a file holds when its first lines are gone.
        let set = RESUMED.lines().rfind(|l| l.contains("\"$set\":{\"messages\"")).unwrap();
        let parsed = parse(set).unwrap();
        assert_eq!(parsed.turns.len(), 2, "the two prompts before the last resume");
        assert_eq!(
            calls(&parsed.turns[0]),
            [("write_file".to_string(), true), ("run_shell_command".to_string(), true)]
        );
        let first = parsed.turns[0].reply.as_ref().unwrap().tool_calls.as_ref().unwrap()[0].clone();
        assert!(first.output.unwrap().as_str().unwrap().starts_with("Successfully created"), "its result, once");
        assert_eq!(parsed.turns[0].reply.as_ref().unwrap().content, "Turn one done.");
    }
}
