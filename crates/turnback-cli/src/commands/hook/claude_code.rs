//! Claude Code's hook events (its documented JSON on stdin, hooks reference at
//! code.claude.com/docs/en/hooks), translated into the agent protocol. Nothing here decides
//! anything the protocol decides.
//!
//! - File tools (`Write`, `Edit`, `NotebookEdit`; `MultiEdit`, gone from current Claude
//!   Code, still accepted) are checkpointed; `Bash` and `PowerShell` commands, and MCP
//!   tools (`mcp__server__tool`, which may write anything), are shell records — turn
//!   snapshots cover what they change. turnback's own MCP tools checkpoint themselves.
//! - A sub-agent's events carry its `agent_id`: its calls' checkpoints name it.
//! - `Stop` (again with `stop_hook_active` when another hook made Claude carry on),
//!   `StopFailure` (an API error ended the turn) and `SessionEnd` end the turn; at a stop
//!   the replies come in from the session's transcript (`transcript_path`), or from
//!   `last_assistant_message` when it cannot be read.

use std::path::PathBuf;

use serde::Deserialize;
use serde_json::Value;
use turnback::{AgentEvent, Error, Result, ToolCall, ToolEffect, TranscriptFormat};

use super::Translated;

/// Tools whose writes are checkpointed.
const FILE_TOOLS: [&str; 4] = ["Write", "Edit", "MultiEdit", "NotebookEdit"];
/// Tools that run shell commands.
const SHELL_TOOLS: [&str; 2] = ["Bash", "PowerShell"];
/// The prefix of turnback's own MCP tools, which checkpoint their writes themselves.
const OWN_MCP: &str = "mcp__turnback__";

/// One Claude Code hook event (the documented input; unknown fields are ignored).
#[derive(Debug, Deserialize)]
struct Event {
    session_id: Option<String>,
    cwd: Option<PathBuf>,
    transcript_path: Option<PathBuf>,
    hook_event_name: String,
    tool_name: Option<String>,
    tool_input: Option<Value>,
    tool_use_id: Option<String>,
    prompt: Option<String>,
    #[serde(default)]
    stop_hook_active: bool,
    last_assistant_message: Option<String>,
    /// The sub-agent an event comes from (tool events inside one, and its start and stop).
    agent_id: Option<String>,
    agent_type: Option<String>,
}

/// Translates one event.
///
/// # Errors
/// `invalid-argument` if it is not a Claude Code hook event.
pub fn translate(input: &str) -> Result<Translated> {
    let event: Event = super::parse(input)?;
    let workspace = std::env::var_os("CLAUDE_PROJECT_DIR").map(PathBuf::from).or(event.cwd.clone());
    let mut transcript = None;
    let mut last_reply = None;
    let events = match event.hook_event_name.as_str() {
        "SessionStart" => vec![AgentEvent::SessionStarted],
        // Claude Code hands a background sub-agent's completion to the main agent as a
        // prompt of its own making: the agent carries on, in the person's turn.
        "UserPromptSubmit"
            if event.prompt.as_deref().is_some_and(|p| p.trim_start().starts_with("<task-notification>")) =>
        {
            vec![AgentEvent::Continued]
        }
        "UserPromptSubmit" => {
            vec![AgentEvent::PromptSubmitted { prompt: Some(event.prompt.clone().unwrap_or_default()) }]
        }
        "PreToolUse" => vec![AgentEvent::ToolStarted { call: call(&event)? }],
        "PostToolUse" => vec![AgentEvent::ToolFinished { call: call(&event)? }],
        "PostToolUseFailure" => vec![AgentEvent::ToolFailed { call: call(&event)? }],
        "Stop" | "StopFailure" | "SessionEnd" => {
            transcript = event.transcript_path.clone().map(|p| (TranscriptFormat::ClaudeCode, p));
            last_reply = event.last_assistant_message.clone().filter(|m| !m.trim().is_empty());
            match event.hook_event_name.as_str() {
                "SessionEnd" => vec![AgentEvent::SessionEnded],
                "Stop" => vec![AgentEvent::Stopped { continued: event.stop_hook_active }],
                _ => vec![AgentEvent::Stopped { continued: false }],
            }
        }
        "PreCompact" => vec![AgentEvent::Compacted],
        "SubagentStart" | "SubagentStop" => match event.agent_id.clone() {
            Some(id) if event.hook_event_name == "SubagentStart" => {
                vec![AgentEvent::SubagentStarted { id, kind: event.agent_type.clone() }]
            }
            Some(id) => vec![AgentEvent::SubagentStopped { id }],
            None => Vec::new(),
        },
        _ => Vec::new(),
    };
    Ok(Translated {
        name: event.hook_event_name,
        workspace,
        cwd: event.cwd,
        session: event.session_id,
        events,
        transcript,
        last_reply,
        stored_session: None,
    })
}

/// The tool call an event is about.
fn call(event: &Event) -> Result<ToolCall> {
    let tool = event.tool_name.clone().unwrap_or_default();
    let input = event.tool_input.clone().unwrap_or(Value::Null);
    let (effect, paths, command) = if FILE_TOOLS.contains(&tool.as_str()) {
        let path = ["file_path", "notebook_path"]
            .iter()
            .find_map(|k| input.get(*k).and_then(Value::as_str))
            .ok_or_else(|| Error::invalid(format!("{tool}: no file_path in tool_input")))?;
        (ToolEffect::WritesFiles, vec![PathBuf::from(path)], None)
    } else if SHELL_TOOLS.contains(&tool.as_str()) {
        (ToolEffect::RunsShell, Vec::new(), input.get("command").and_then(Value::as_str).map(str::to_string))
    } else if tool.starts_with("mcp__") && !tool.starts_with(OWN_MCP) {
        (ToolEffect::RunsShell, Vec::new(), Some(super::mcp_command(&tool, &input)))
    } else {
        (ToolEffect::Other, Vec::new(), None)
    };
    Ok(ToolCall {
        id: event.tool_use_id.clone(),
        name: tool,
        effect,
        paths,
        command,
        exit_status: None,
        subagent: event.agent_id.clone(),
    })
}
