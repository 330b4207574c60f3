//! Claude Code's session transcript (`~/.claude/projects/<project>/<session>.jsonl`), read
//! into the turns the person kept.
//!
//! Invariants:
//! - The kept conversation is the chain from the newest record back through `parentUuid`
//!   (and `logicalParentUuid` across a compaction): a branch the person abandoned with
//!   Claude Code's own `/rewind` or by editing and resending a message is not read.
//! - A person's prompt begins a turn; so does a custom slash command or a skill (its
//!   `<command-name>` record, with the expanded prompt of the `isMeta` record after it as
//!   the prompt sent). Built-in commands answered locally (`<local-command-stdout>`),
//!   interrupt notices (`[Request interrupted by user…]`), `<task-notification>`s, shell
//!   escapes (`<bash-input>`), compaction summaries, other meta records and sub-agent
//!   records (`isSidechain`) begin nothing.
//! - The assistant records after a prompt make one reply: its text (blocks of only
//!   whitespace dropped), its thinking, its tool calls each with its result and whether
//!   it was an error — also a result recorded beside the chain (parallel tool calls).
//! - A file with lines but no user or assistant record with a `message` is not a
//!   transcript: refused.

use std::collections::{HashMap, HashSet};

use serde_json::Value;

use super::{Parsed, SourceTurn, join_text, reply_entry};
use crate::error::{Error, Result};
use crate::session::history::ToolCall;

/// Reads a transcript.
///
/// # Errors
/// `invalid-argument` if it has lines but no user or assistant record.
pub(crate) fn parse(text: &str) -> Result<Parsed> {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let rows: Vec<Value> = lines.iter().filter_map(|l| serde_json::from_str::<Value>(l).ok()).collect();
    let unparsable = (lines.len() - rows.len()) as u64;
    // Claude Code's records carry their message under `message` (another agent's use `content`).
    if !lines.is_empty() && !rows.iter().any(|r| matches!(kind(r), "user" | "assistant") && r.get("message").is_some())
    {
        return Err(Error::invalid("no user or assistant records: not a Claude Code transcript"));
    }
    let kept = kept_chain(&rows);
    let mut rebuild = Rebuild::default();
    for &i in &kept {
        if !rebuild.row(&rows[i], i) {
            rebuild.skipped += 1;
        }
    }
    rebuild.off_chain_results(&rows);
    let skipped = rebuild.skipped + unparsable + (rows.len() - kept.len()) as u64;
    // The file's own session: its newest kept record's (a resumed session's file may begin
    // with records copied from the one it resumed).
    let session = kept.iter().rev().find_map(|&i| text_of(&rows[i], "sessionId")).map(str::to_string);
    Ok(Parsed { turns: rebuild.turns, skipped_rows: skipped, session })
}

fn kind(row: &Value) -> &str {
    row.get("type").and_then(Value::as_str).unwrap_or("")
}

fn text_of<'a>(row: &'a Value, field: &str) -> Option<&'a str> {
    row.get(field).and_then(Value::as_str)
}

fn flag(row: &Value, name: &str) -> bool {
    row.get(name).and_then(Value::as_bool).unwrap_or(false)
}

/// The indexes of the records on the kept chain, oldest first: from the newest record of
/// the main conversation back through its parents. A transcript without ids or parents
/// (older versions) is read in file order.
fn kept_chain(rows: &[Value]) -> Vec<usize> {
    let by_uuid: HashMap<&str, usize> =
        rows.iter().enumerate().filter_map(|(i, r)| Some((text_of(r, "uuid")?, i))).collect();
    let leaf = rows.iter().rposition(|r| {
        text_of(r, "uuid").is_some() && matches!(kind(r), "user" | "assistant" | "system") && !flag(r, "isSidechain")
    });
    let chained = rows.iter().any(|r| r.get("parentUuid").is_some());
    let Some(leaf) = leaf.filter(|_| chained) else { return (0..rows.len()).collect() };
    let (mut chain, mut seen) = (Vec::new(), HashSet::new());
    let mut at = Some(leaf);
    while let Some(i) = at.filter(|i| seen.insert(*i)) {
        chain.push(i);
        let row = &rows[i];
        let parent = text_of(row, "parentUuid").or_else(|| text_of(row, "logicalParentUuid"));
        at = parent.and_then(|p| by_uuid.get(p).copied());
    }
    chain.reverse();
    chain
}

/// A prompt waiting to be known for a turn: a slash command's record, whose expansion may
/// follow.
#[derive(Debug, Clone)]
struct Command {
    key: String,
    shown: String,
    at: String,
}

/// The turns being rebuilt from the kept records, in order.
#[derive(Default)]
struct Rebuild {
    turns: Vec<SourceTurn>,
    /// Tool-use id → (turn, call) of the calls waiting for their result.
    calls: HashMap<String, (usize, usize)>,
    command: Option<Command>,
    skipped: u64,
}

impl Rebuild {
    /// Takes one record in; `false` if it adds nothing.
    fn row(&mut self, row: &Value, index: usize) -> bool {
        let user_or_assistant = matches!(kind(row), "user" | "assistant");
        if !user_or_assistant || flag(row, "isSidechain") || flag(row, "isCompactSummary") {
            return false;
        }
        let key = text_of(row, "uuid").map_or_else(|| format!("row-{index}"), str::to_string);
        let at = text_of(row, "timestamp").unwrap_or("").to_string();
        let content = row.pointer("/message/content").cloned().unwrap_or(Value::Null);
        if kind(row) == "assistant" {
            return self.assistant(&content, at);
        }
        let (text, results) = user_parts(&content);
        let took_results = self.results(results, &at);
        if flag(row, "isMeta") {
            // A command's expansion: the prompt the agent was sent.
            return match (self.command.take(), text) {
                (Some(command), Some(sent)) => {
                    self.begin(command.key, command.shown, Some(sent), command.at);
                    true
                }
                (command, _) => {
                    self.command = command;
                    took_results
                }
            };
        }
        let Some(text) = text else { return took_results };
        match Prompt::of(&text) {
            Prompt::Person => {
                self.command = None;
                self.begin(key, text, None, at);
                true
            }
            Prompt::Command(shown) => {
                self.command = Some(Command { key, shown, at });
                true
            }
            Prompt::LocalOutput => {
                // The command was answered locally: no turn.
                self.command = None;
                false
            }
            Prompt::Injected => took_results,
        }
    }

    /// The results of calls the kept chain made that are not on it: Claude Code records the
    /// results of parallel tool calls as sibling records, of which the chain holds one.
    fn off_chain_results(&mut self, rows: &[Value]) {
        for row in rows.iter().filter(|r| kind(r) == "user" && !flag(r, "isSidechain")) {
            let content = row.pointer("/message/content").cloned().unwrap_or(Value::Null);
            let (_, results) = user_parts(&content);
            let waiting: Vec<(String, Value, bool)> = results
                .into_iter()
                .filter(|(id, _, _)| {
                    self.calls.get(id).is_some_and(|&(t, c)| {
                        let calls = self.turns[t].reply.as_ref().and_then(|r| r.tool_calls.as_ref());
                        calls.and_then(|cs| cs.get(c)).is_some_and(|call| call.output.is_none())
                    })
                })
                .collect();
            for (id, output, is_error) in waiting {
                let &(t, c) = &self.calls[&id];
                if let Some(call) =
                    self.turns[t].reply.as_mut().and_then(|r| r.tool_calls.as_mut()).and_then(|cs| cs.get_mut(c))
                {
                    call.output = Some(output);
                    call.error = is_error.then_some(true);
                }
            }
        }
    }

    fn begin(&mut self, key: String, prompt: String, sent: Option<String>, at: String) {
        self.turns.push(SourceTurn { key, prompt, sent, started_at: at.clone(), ended_at: at, reply: None });
    }

    /// Tool results: each goes to its call, with whether it was an error.
    fn results(&mut self, results: Vec<(String, Value, bool)>, at: &str) -> bool {
        let mut took = false;
        for (id, output, is_error) in results {
            let Some(&(t, c)) = self.calls.get(&id) else { continue };
            let turn = &mut self.turns[t];
            if let Some(call) = turn.reply.as_mut().and_then(|r| r.tool_calls.as_mut()).and_then(|c2| c2.get_mut(c)) {
                call.output = Some(output);
                call.error = is_error.then_some(true);
                turn.ended_at = at.to_string();
                took = true;
            }
        }
        took
    }

    /// An assistant record: its text, thinking and tool calls join the turn's reply.
    fn assistant(&mut self, content: &Value, at: String) -> bool {
        if let Some(command) = self.command.take() {
            // A command that went to the model without an expansion record.
            self.begin(command.key, command.shown, None, command.at);
        }
        // An assistant record before any prompt: the transcript began mid-turn.
        let Some(t) = self.turns.len().checked_sub(1) else { return false };
        let turn = &mut self.turns[t];
        let reply = turn.reply.get_or_insert_with(|| reply_entry(&at));
        if let Some(text) = content.as_str() {
            join_text(&mut reply.content, Some(text));
        }
        for block in content.as_array().into_iter().flatten() {
            match text_of(block, "type") {
                Some("text") => join_text(&mut reply.content, text_of(block, "text")),
                Some("thinking") => {
                    let mut thinking = reply.thinking.take().unwrap_or_default();
                    join_text(&mut thinking, text_of(block, "thinking"));
                    reply.thinking = Some(thinking).filter(|s| !s.is_empty());
                }
                Some("tool_use") => {
                    let calls = reply.tool_calls.get_or_insert_with(Vec::new);
                    if let Some(id) = text_of(block, "id") {
                        self.calls.insert(id.to_string(), (t, calls.len()));
                    }
                    calls.push(ToolCall {
                        name: text_of(block, "name").unwrap_or("").to_string(),
                        input: block.get("input").cloned().unwrap_or(Value::Null),
                        output: None,
                        error: None,
                    });
                }
                _ => {}
            }
        }
        turn.ended_at = at;
        true
    }
}

/// What a user record's text is.
#[derive(Debug, PartialEq)]
enum Prompt {
    /// A person's prompt.
    Person,
    /// A slash command or skill as typed (`/name args`); its expansion may follow.
    Command(String),
    /// A built-in command's local output.
    LocalOutput,
    /// Something Claude Code put there: an interrupt notice, a task notification, a shell
    /// escape, a caveat.
    Injected,
}

impl Prompt {
    fn of(text: &str) -> Prompt {
        let t = text.trim_start();
        // A command record begins with its tags; a prompt that only mentions them is a prompt.
        let command = t.starts_with("<command-message>") || t.starts_with("<command-name>");
        if let Some(name) = between(t, "<command-name>", "</command-name>").filter(|_| command) {
            let args = between(t, "<command-args>", "</command-args>").unwrap_or("").trim();
            let name = name.trim();
            let name = if name.starts_with('/') { name.to_string() } else { format!("/{name}") };
            return Prompt::Command(if args.is_empty() { name } else { format!("{name} {args}") });
        }
        if t.starts_with("<local-command-stdout>") || t.starts_with("<local-command-stderr>") {
            return Prompt::LocalOutput;
        }
        let injected = [
            "[Request interrupted by user",
            "<task-notification>",
            "<bash-input>",
            "<bash-stdout>",
            "<bash-stderr>",
            "Caveat: The messages below were generated by the user while running local commands",
        ];
        if injected.iter().any(|p| t.starts_with(p)) || t.starts_with("<command-message>") {
            return Prompt::Injected;
        }
        Prompt::Person
    }
}

fn between<'a>(text: &'a str, open: &str, close: &str) -> Option<&'a str> {
    let start = text.find(open)? + open.len();
    let end = text[start..].find(close)? + start;
    Some(&text[start..end])
}

/// A user record's text (if it has any that is not whitespace) and its tool results (id,
/// output, is an error).
fn user_parts(content: &Value) -> (Option<String>, Vec<(String, Value, bool)>) {
    match content {
        Value::String(s) => (Some(s.clone()).filter(|s| !s.trim().is_empty()), Vec::new()),
        Value::Array(blocks) => {
            let mut text = String::new();
            let mut results = Vec::new();
            for b in blocks {
                match text_of(b, "type") {
                    Some("text") => join_text(&mut text, text_of(b, "text")),
                    Some("tool_result") => {
                        let id = text_of(b, "tool_use_id").unwrap_or("").to_string();
                        results.push((id, tool_output(b.get("content")), flag(b, "is_error")));
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
                join_text(&mut text, text_of(b, "text"));
            }
            Value::String(text)
        }
        Some(v) => v.clone(),
        None => Value::Null,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::parse;

    fn rows(rows: &[Value]) -> String {
        rows.iter().map(|r| format!("{r}\n")).collect()
    }

    #[test]
    fn the_results_of_parallel_tool_calls_are_kept_though_one_is_off_the_chain() {
        // Two calls in one assistant message: Claude Code records each result as a child of
        // the call's record, and the chain goes on from the last one only
        // (anthropics/claude-code#31330).
        let text = rows(&[
            json!({ "type": "user", "uuid": "u1", "parentUuid": null, "message": { "role": "user", "content": "read both" } }),
            json!({ "type": "assistant", "uuid": "a1", "parentUuid": "u1", "message": { "role": "assistant", "content": [
                { "type": "tool_use", "id": "ta", "name": "Read", "input": { "file_path": "a" } } ] } }),
            json!({ "type": "assistant", "uuid": "a2", "parentUuid": "a1", "message": { "role": "assistant", "content": [
                { "type": "tool_use", "id": "tb", "name": "Read", "input": { "file_path": "b" } } ] } }),
            json!({ "type": "user", "uuid": "r1", "parentUuid": "a1", "message": { "role": "user", "content": [
                { "type": "tool_result", "tool_use_id": "ta", "content": "AAA" } ] } }),
            json!({ "type": "user", "uuid": "r2", "parentUuid": "a2", "message": { "role": "user", "content": [
                { "type": "tool_result", "tool_use_id": "tb", "content": "BBB", "is_error": true } ] } }),
            json!({ "type": "assistant", "uuid": "a3", "parentUuid": "r2", "message": { "role": "assistant", "content": [
                { "type": "text", "text": "Both read." } ] } }),
        ]);
        let parsed = parse(&text).unwrap();
        let calls = parsed.turns[0].reply.as_ref().unwrap().tool_calls.clone().unwrap();
        let got: Vec<(Option<Value>, Option<bool>)> = calls.into_iter().map(|c| (c.output, c.error)).collect();
        assert_eq!(got, [(Some(json!("AAA")), None), (Some(json!("BBB")), Some(true))]);
    }

    #[test]
    fn a_prompt_that_mentions_command_tags_is_a_prompt() {
        let prompt = "Why does the importer treat `<command-name>/review</command-name>` rows as turns?";
        let text = rows(&[
            json!({ "type": "user", "uuid": "u1", "parentUuid": null, "message": { "role": "user", "content": prompt } }),
        ]);
        assert_eq!(parse(&text).unwrap().turns[0].prompt, prompt);
    }
}
