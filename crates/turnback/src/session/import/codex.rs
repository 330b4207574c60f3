//! Codex CLI's rollout file (`~/.codex/sessions/YYYY/MM/DD/rollout-…-<id>.jsonl`: one
//! `{timestamp, type, payload}` record per line; the types are `codex-rs/protocol`'s
//! `RolloutItem`, `ResponseItem` and `EventMsg`), read into the turns the person kept.
//!
//! Invariants:
//! - A turn begins at each `event_msg` `user_message` (before 0.16x) or `event_msg`
//!   `item_completed` whose item is a `UserMessage` (0.169 on): the person's own words; a
//!   file a newer Codex resumed may hold both for one prompt, read once. The
//!   `response_item` user messages are not read for prompts — they also hold what Codex
//!   injects (AGENTS.md instructions, `<environment_context>`, …).
//! - The reply is the `response_item` records after it: assistant messages (text),
//!   reasoning summaries (thinking), and tool calls (`function_call`, `custom_tool_call`
//!   such as `apply_patch`, `local_shell_call`) each with the output that shares its
//!   `call_id`; a patch that failed to apply (`patch_apply_end` with `success: false`, or
//!   a completed `FileChange` item whose status is `failed`) and a command that exited
//!   non-zero (a `CommandExecution` item's `exit_code`) mark the call as an error. The
//!   items' `AgentMessage` text stands in for a reply no assistant message recorded.
//! - `thread_rolled_back` (Codex's own rollback of its last N turns) drops those turns.
//! - A turn's key is the line of its `user_message`: the file only grows.
//! - A file with lines but no record of these types is not a rollout: refused.

use std::collections::HashMap;

use serde_json::Value;

use super::{Parsed, SourceTurn, join_text, reply_entry};
use crate::error::{Error, Result};
use crate::session::history::ToolCall;

/// Reads a rollout.
///
/// # Errors
/// `invalid-argument` if it has lines but no rollout record.
pub(crate) fn parse(text: &str) -> Result<Parsed> {
    let mut lines = 0u64;
    let mut rebuild = Rebuild::default();
    let mut known = false;
    // The rollout's own session: its first session_meta's (a fork's names its parent after).
    let mut session = None;
    for (index, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        lines += 1;
        let Ok(row) = serde_json::from_str::<Value>(line) else {
            rebuild.skipped += 1;
            continue;
        };
        let kind = row.get("type").and_then(Value::as_str).unwrap_or("");
        known |= matches!(kind, "session_meta" | "response_item" | "event_msg" | "turn_context");
        let at = row.get("timestamp").and_then(Value::as_str).unwrap_or("").to_string();
        let payload = row.get("payload").unwrap_or(&Value::Null);
        if kind == "session_meta" && session.is_none() {
            session = payload.get("id").and_then(Value::as_str).map(str::to_string);
        }
        if !rebuild.row(kind, payload, index, at) {
            rebuild.skipped += 1;
        }
    }
    if lines > 0 && !known {
        return Err(Error::invalid("no session_meta, response_item or event_msg records: not a Codex rollout"));
    }
    rebuild.finish();
    Ok(Parsed { turns: rebuild.turns, skipped_rows: rebuild.skipped, session })
}

#[derive(Default)]
struct Rebuild {
    turns: Vec<SourceTurn>,
    /// `call_id` → (turn, call).
    calls: HashMap<String, (usize, usize)>,
    /// The `agent_message` texts of the turn being built, in case it has no assistant
    /// `response_item` (older rollouts persisted only events).
    agent_messages: Vec<String>,
    skipped: u64,
}

fn text(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(Value::as_str).map(str::to_string)
}

impl Rebuild {
    fn row(&mut self, kind: &str, payload: &Value, index: usize, at: String) -> bool {
        let what = payload.get("type").and_then(Value::as_str).unwrap_or("");
        match (kind, what) {
            ("event_msg", "user_message") => self.prompt(text(payload, "message").unwrap_or_default(), index, at),
            ("event_msg", "item_completed") => self.item(payload.get("item").unwrap_or(&Value::Null), index, at),
            ("event_msg", "agent_message") => {
                self.agent_messages.extend(text(payload, "message"));
                self.touch(at)
            }
            ("event_msg", "patch_apply_end") => {
                if payload.get("success").and_then(Value::as_bool) == Some(false) {
                    self.result(payload, None, true);
                }
                self.touch(at)
            }
            ("event_msg", "thread_rolled_back") => {
                self.finish();
                let n = payload.get("num_turns").and_then(Value::as_u64).unwrap_or(0) as usize;
                let keep = self.turns.len().saturating_sub(n);
                self.turns.truncate(keep);
                self.calls.retain(|_, (t, _)| *t < keep);
                true
            }
            ("response_item", "message") => {
                if payload.get("role").and_then(Value::as_str) != Some("assistant") {
                    // The prompt again, or what Codex injects: the event carried the prompt.
                    return false;
                }
                let Some(reply) = self.reply(&at) else { return false };
                for block in payload.get("content").and_then(Value::as_array).into_iter().flatten() {
                    join_text(&mut reply.content, block.get("text").and_then(Value::as_str));
                }
                true
            }
            ("response_item", "reasoning") => {
                let Some(reply) = self.reply(&at) else { return false };
                let mut thinking = reply.thinking.take().unwrap_or_default();
                for block in payload.get("summary").and_then(Value::as_array).into_iter().flatten() {
                    join_text(&mut thinking, block.get("text").and_then(Value::as_str));
                }
                reply.thinking = Some(thinking).filter(|t| !t.is_empty());
                true
            }
            ("response_item", "function_call" | "custom_tool_call" | "local_shell_call") => {
                self.call(what, payload, at)
            }
            ("response_item", "function_call_output" | "custom_tool_call_output") => {
                self.result(payload, payload.get("output"), false);
                self.touch(at)
            }
            ("session_meta" | "turn_context" | "compacted", _) | ("event_msg", _) => true,
            _ => false,
        }
    }

    /// A prompt: a new turn, unless it is the prompt that began the turn being built, seen
    /// again in the other shape (`user_message` and a `UserMessage` item) before any reply.
    fn prompt(&mut self, prompt: String, index: usize, at: String) -> bool {
        if self.turns.last().is_some_and(|t| t.prompt == prompt && t.reply.is_none() && self.agent_messages.is_empty())
        {
            return true;
        }
        self.finish();
        self.turns.push(SourceTurn {
            key: format!("line-{index}"),
            prompt,
            sent: None,
            started_at: at.clone(),
            ended_at: at,
            reply: None,
        });
        true
    }

    /// A completed item (0.169 on): the person's message, the agent's, or what became of
    /// a command or a patch.
    fn item(&mut self, item: &Value, index: usize, at: String) -> bool {
        let texts = || {
            let mut joined = String::new();
            for part in item.get("content").and_then(Value::as_array).into_iter().flatten() {
                join_text(&mut joined, part.get("text").and_then(Value::as_str));
            }
            joined
        };
        let with_id = || serde_json::json!({ "call_id": item.get("id").cloned().unwrap_or(Value::Null) });
        match item.get("type").and_then(Value::as_str).unwrap_or("") {
            "UserMessage" => self.prompt(texts(), index, at),
            "AgentMessage" => {
                self.agent_messages.push(texts());
                self.touch(at)
            }
            "CommandExecution" => {
                if item.get("exit_code").and_then(Value::as_i64).is_some_and(|c| c != 0) {
                    self.result(&with_id(), None, true);
                }
                self.touch(at)
            }
            "FileChange" => {
                if item.get("status").and_then(Value::as_str) == Some("failed") {
                    self.result(&with_id(), None, true);
                }
                self.touch(at)
            }
            _ => self.touch(at),
        }
    }

    /// The reply of the turn being built (none before the first prompt).
    fn reply(&mut self, at: &str) -> Option<&mut crate::session::history::Entry> {
        let turn = self.turns.last_mut()?;
        turn.ended_at = at.to_string();
        Some(turn.reply.get_or_insert_with(|| reply_entry(at)))
    }

    fn touch(&mut self, at: String) -> bool {
        match self.turns.last_mut() {
            Some(turn) => {
                turn.ended_at = at;
                true
            }
            None => false,
        }
    }

    fn call(&mut self, what: &str, payload: &Value, at: String) -> bool {
        let (name, input) = match what {
            "function_call" => {
                let args = text(payload, "arguments").unwrap_or_default();
                let input = serde_json::from_str(&args).unwrap_or(Value::String(args));
                (text(payload, "name").unwrap_or_default(), input)
            }
            "custom_tool_call" => (
                text(payload, "name").unwrap_or_default(),
                serde_json::json!({ "input": payload.get("input").cloned().unwrap_or(Value::Null) }),
            ),
            _ => ("local_shell".to_string(), payload.get("action").cloned().unwrap_or(Value::Null)),
        };
        let t = self.turns.len().wrapping_sub(1);
        let Some(reply) = self.reply(&at) else { return false };
        let calls = reply.tool_calls.get_or_insert_with(Vec::new);
        calls.push(ToolCall { name, input, output: None, error: None });
        let c = calls.len() - 1;
        if let Some(id) = text(payload, "call_id") {
            self.calls.insert(id, (t, c));
        }
        true
    }

    /// A call's output (string, or content items whose text is joined), or its failure.
    fn result(&mut self, payload: &Value, output: Option<&Value>, failed: bool) {
        let Some(id) = text(payload, "call_id") else { return };
        let Some(&(t, c)) = self.calls.get(&id) else { return };
        let Some(call) = self.turns[t].reply.as_mut().and_then(|r| r.tool_calls.as_mut()).and_then(|cs| cs.get_mut(c))
        else {
            return;
        };
        if failed {
            call.error = Some(true);
        }
        if let Some(output) = output {
            call.output = Some(match output {
                Value::Array(items) => {
                    let mut joined = String::new();
                    for item in items {
                        join_text(&mut joined, item.get("text").and_then(Value::as_str));
                    }
                    Value::String(joined)
                }
                other => other.clone(),
            });
        }
    }

    /// Ends the turn being built: the events' copy of the reply stands in when no
    /// assistant message was recorded.
    fn finish(&mut self) {
        let messages = std::mem::take(&mut self.agent_messages);
        let Some(turn) = self.turns.last_mut() else { return };
        let at = turn.ended_at.clone();
        let reply = turn.reply.get_or_insert_with(|| reply_entry(&at));
        if reply.content.is_empty() {
            for m in &messages {
                join_text(&mut reply.content, Some(m));
            }
        }
        if reply.content.is_empty() && reply.thinking.is_none() && reply.tool_calls.is_none() {
            turn.reply = None;
        }
    }
}
