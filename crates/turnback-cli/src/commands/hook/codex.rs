//! Codex CLI's hook events (its `hooks.json` hooks; payloads as the official hooks
//! reference, developers.openai.com/codex/hooks, and the input schemas in
//! `codex-rs/hooks/schema/generated/` describe them), translated into the agent protocol.
//!
//! - `apply_patch` (Codex's only file-editing tool; hooks see it under that name, its
//!   `tool_input.command` the patch text) is checkpointed: the files the patch adds,
//!   deletes, updates or moves to, relative to the session's `cwd`.
//! - `Bash` (every shell tool — `shell`, `shell_command`, `local_shell`, `exec_command` —
//!   reaches hooks under that name) and MCP tools (`mcp__server__tool`) are shell records.
//! - `Stop` ends the turn (again, with `stop_hook_active`, when a hook made Codex carry
//!   on); its replies come from the rollout (`transcript_path`), or from
//!   `last_assistant_message`. `Interrupt` (the person stopped the turn: Ctrl-C, Esc) ends
//!   it the same way, and `SessionEnd` (Codex quitting) ends a turn left running.
//! - A sub-agent's events carry its `agent_id` (and the parent's session id): its calls'
//!   checkpoints name it, and its own prompt and stop start and stop it, inside the
//!   person's turn.

use std::path::PathBuf;

use serde::Deserialize;
use serde_json::Value;
use turnback::{AgentEvent, Result, ToolCall, ToolEffect, TranscriptFormat};

use super::{Translated, patch};

/// One Codex hook event (unknown fields are ignored).
#[derive(Debug, Deserialize)]
struct Event {
    session_id: Option<String>,
    cwd: Option<PathBuf>,
    transcript_path: Option<PathBuf>,
    hook_event_name: String,
    prompt: Option<String>,
    tool_name: Option<String>,
    tool_input: Option<Value>,
    tool_response: Option<Value>,
    tool_use_id: Option<String>,
    #[serde(default)]
    stop_hook_active: bool,
    last_assistant_message: Option<String>,
    agent_id: Option<String>,
    agent_type: Option<String>,
}

/// Translates one event.
///
/// # Errors
/// `invalid-argument` if it is not a Codex hook event.
pub fn translate(input: &str) -> Result<Translated> {
    let event: Event = super::parse(input)?;
    let mut transcript = None;
    let mut last_reply = None;
    // A sub-agent's hooks carry the parent's session id and its own agent_id: its prompt
    // and its stop are the sub-agent's, not a turn of the person's.
    let sub = event.agent_id.clone();
    let events = match (event.hook_event_name.as_str(), sub) {
        ("UserPromptSubmit", Some(id)) => vec![AgentEvent::SubagentStarted { id, kind: event.agent_type.clone() }],
        ("Stop", Some(id)) => vec![AgentEvent::SubagentStopped { id }],
        (name, _) => translate_main(&event, name, &mut transcript, &mut last_reply),
    };
    Ok(Translated {
        name: event.hook_event_name,
        workspace: event.cwd.clone(),
        cwd: event.cwd,
        session: event.session_id,
        events,
        transcript,
        last_reply,
        stored_session: None,
    })
}

/// The events of one of the main agent's hook events (and of a sub-agent's tool events).
fn translate_main(
    event: &Event,
    name: &str,
    transcript: &mut Option<(TranscriptFormat, PathBuf)>,
    last_reply: &mut Option<String>,
) -> Vec<AgentEvent> {
    match name {
        "SessionStart" => vec![AgentEvent::SessionStarted],
        "UserPromptSubmit" => {
            vec![AgentEvent::PromptSubmitted { prompt: Some(event.prompt.clone().unwrap_or_default()) }]
        }
        "PreToolUse" => vec![AgentEvent::ToolStarted { call: call(event) }],
        "PostToolUse" => vec![AgentEvent::ToolFinished { call: call(event) }],
        "Stop" | "Interrupt" | "SessionEnd" => {
            *transcript = event.transcript_path.clone().map(|p| (TranscriptFormat::Codex, p));
            *last_reply = event.last_assistant_message.clone().filter(|m| !m.trim().is_empty());
            match name {
                "SessionEnd" => vec![AgentEvent::SessionEnded],
                "Interrupt" => vec![AgentEvent::Stopped { continued: false }],
                _ => vec![AgentEvent::Stopped { continued: event.stop_hook_active }],
            }
        }
        "PreCompact" | "PostCompact" => vec![AgentEvent::Compacted],
        "SubagentStart" => match event.agent_id.clone() {
            Some(id) => vec![AgentEvent::SubagentStarted { id, kind: event.agent_type.clone() }],
            None => Vec::new(),
        },
        "SubagentStop" => event.agent_id.clone().map(|id| AgentEvent::SubagentStopped { id }).into_iter().collect(),
        _ => Vec::new(),
    }
}

/// The tool call an event is about.
fn call(event: &Event) -> ToolCall {
    let tool = event.tool_name.clone().unwrap_or_default();
    let input = event.tool_input.clone().unwrap_or(Value::Null);
    let command = input.get("command").and_then(Value::as_str).map(str::to_string);
    let (effect, paths, command) = match tool.as_str() {
        "apply_patch" | "Edit" | "Write" => {
            let text = command.or_else(|| input.get("input").and_then(Value::as_str).map(str::to_string));
            (ToolEffect::WritesFiles, text.as_deref().map(patch::paths).unwrap_or_default(), None)
        }
        "Bash" => (ToolEffect::RunsShell, Vec::new(), command),
        t if t.starts_with("mcp__") => (ToolEffect::RunsShell, Vec::new(), Some(super::mcp_command(t, &input))),
        _ => (ToolEffect::Other, Vec::new(), None),
    };
    ToolCall {
        id: event.tool_use_id.clone(),
        name: tool,
        effect,
        paths,
        command,
        exit_status: event.tool_response.as_ref().and_then(exit_status),
        subagent: event.agent_id.clone(),
    }
}

/// A shell call's exit status, where its response says it (`exit_code` / `exitCode`, or
/// the "Exit code: N" line of its text — "Process exited with code N" for `exec_command`,
/// as Codex 0.169 words it).
fn exit_status(response: &Value) -> Option<i32> {
    let field = ["exit_code", "exitCode"].iter().find_map(|k| response.get(*k).and_then(Value::as_i64));
    let text = || response.as_str().or_else(|| response.get("output").and_then(Value::as_str));
    field.and_then(|s| i32::try_from(s).ok()).or_else(|| {
        let text = text()?;
        super::exit_status_line(text, "Exit code:")
            .or_else(|| super::exit_status_line(text, "Process exited with code"))
    })
}
