//! Cursor's agent hook events (`.cursor/hooks.json`, version 1; payloads as Cursor's hooks
//! reference, cursor.com/docs/reference/hooks, describes them and as captured from Cursor
//! 2.7–3.22 in public repositories), translated into the agent protocol.
//!
//! - `beforeSubmitPrompt` begins a turn (also for the follow-ups a stop hook submits); `stop`
//!   and `sessionEnd` end it; `afterAgentResponse` is the reply.
//! - `preToolUse` for `Write` (Cursor's name for every edit) and `Delete` stages the file
//!   before the tool touches it; `postToolUse` / `postToolUseFailure` commit it, matched by
//!   `tool_use_id`. (`afterFileEdit` comes after the write, when the original is gone, and
//!   its edits cannot rebuild it: it is not used.)
//! - `beforeShellExecution` and `afterShellExecution` are a shell call's start and finish
//!   (its window: a shell checkpoint of what it changed), matched by name alone — Cursor
//!   gives them no id, and runs one at a time — and recorded in the turn (exit status when
//!   the output says).
//! - The workspace is `workspace_roots[0]` (a user-scope hook runs in `~/.cursor`); the
//!   session is the `conversation_id`.
//! - Every answer lets everything through: `{"continue": true}` for a prompt,
//!   `{"permission": "allow"}` for the events that ask, `{}` otherwise.

use std::path::PathBuf;

use serde::Deserialize;
use serde_json::Value;
use turnback::{AgentEvent, Result, ToolCall, ToolEffect};

use super::Translated;

/// Cursor's tool names for the calls that write files (`Write` in current builds; the
/// others as third-party matchers list them).
const FILE_TOOLS: [&str; 5] = ["Write", "Delete", "Edit", "StrReplace", "MultiEdit"];

/// One Cursor hook event (unknown fields are ignored).
#[derive(Debug, Deserialize)]
struct Event {
    hook_event_name: String,
    conversation_id: Option<String>,
    #[serde(default)]
    workspace_roots: Vec<PathBuf>,
    prompt: Option<String>,
    tool_name: Option<String>,
    tool_input: Option<Value>,
    tool_use_id: Option<String>,
    command: Option<String>,
    output: Option<String>,
    text: Option<String>,
    subagent_id: Option<String>,
    subagent_type: Option<String>,
}

/// Translates one event.
///
/// # Errors
/// `invalid-argument` if it is not a Cursor hook event.
pub fn translate(input: &str) -> Result<Translated> {
    let event: Event = super::parse(input)?;
    let workspace =
        event.workspace_roots.first().cloned().or_else(|| std::env::var_os("CURSOR_PROJECT_DIR").map(PathBuf::from));
    let events = match event.hook_event_name.as_str() {
        "sessionStart" => vec![AgentEvent::SessionStarted],
        "sessionEnd" => vec![AgentEvent::SessionEnded],
        "beforeSubmitPrompt" => {
            vec![AgentEvent::PromptSubmitted { prompt: Some(event.prompt.clone().unwrap_or_default()) }]
        }
        "stop" => vec![AgentEvent::Stopped { continued: false }],
        "afterAgentResponse" => match event.text.clone().filter(|t| !t.trim().is_empty()) {
            Some(text) => vec![AgentEvent::AssistantReplied { text, thinking: None }],
            None => Vec::new(),
        },
        "preToolUse" => file_call(&event).map(|call| AgentEvent::ToolStarted { call }).into_iter().collect(),
        "postToolUse" => file_call(&event).map(|call| AgentEvent::ToolFinished { call }).into_iter().collect(),
        "postToolUseFailure" => file_call(&event).map(|call| AgentEvent::ToolFailed { call }).into_iter().collect(),
        "beforeShellExecution" => {
            shell_call(&event, None).map(|call| AgentEvent::ToolStarted { call }).into_iter().collect()
        }
        "afterShellExecution" => {
            let exit_status = event.output.as_deref().and_then(|o| super::exit_status_line(o, "Exit code:"));
            shell_call(&event, exit_status).map(|call| AgentEvent::ToolFinished { call }).into_iter().collect()
        }
        "subagentStart" => match event.subagent_id.clone() {
            Some(id) => vec![AgentEvent::SubagentStarted { id, kind: event.subagent_type.clone() }],
            None => Vec::new(),
        },
        "subagentStop" => event.subagent_id.clone().map(|id| AgentEvent::SubagentStopped { id }).into_iter().collect(),
        "preCompact" => vec![AgentEvent::Compacted],
        _ => Vec::new(),
    };
    Ok(Translated {
        name: event.hook_event_name,
        cwd: workspace.clone(),
        workspace,
        session: event.conversation_id,
        events,
        transcript: None,
        last_reply: None,
        stored_session: None,
    })
}

/// A file-writing tool call (`None` for other tools).
fn file_call(event: &Event) -> Option<ToolCall> {
    let tool = event.tool_name.clone()?;
    if !FILE_TOOLS.contains(&tool.as_str()) {
        return None;
    }
    let path = event.tool_input.as_ref()?.get("file_path").and_then(Value::as_str)?;
    Some(ToolCall {
        id: event.tool_use_id.clone(),
        name: tool,
        effect: ToolEffect::WritesFiles,
        paths: vec![PathBuf::from(path)],
        ..ToolCall::default()
    })
}

/// A shell call (`None` without its command).
fn shell_call(event: &Event, exit_status: Option<i32>) -> Option<ToolCall> {
    Some(ToolCall {
        name: "Shell".into(),
        effect: ToolEffect::RunsShell,
        command: Some(event.command.clone()?),
        exit_status,
        ..ToolCall::default()
    })
}

/// What Cursor reads back: the answer of a hook that lets everything through.
pub fn answer(event: &str) -> String {
    match event {
        "beforeSubmitPrompt" => r#"{"continue":true}"#.to_string(),
        "preToolUse" | "beforeShellExecution" | "beforeMCPExecution" | "beforeReadFile" | "subagentStart" => {
            r#"{"permission":"allow"}"#.to_string()
        }
        _ => "{}".to_string(),
    }
}
