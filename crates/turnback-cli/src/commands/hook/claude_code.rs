//! Claude Code's hook events (its documented JSON on stdin), translated into the agent
//! protocol. Nothing here decides anything the protocol decides.

use std::path::PathBuf;

use serde::Deserialize;
use serde_json::Value;
use turnback::{AgentEvent, Error, Result, ToolCall, ToolEffect};

use super::Translated;

/// Tools whose writes are checkpointed (`MultiEdit` no longer exists in current Claude
/// Code; older sessions still send it).
const FILE_TOOLS: [&str; 4] = ["Write", "Edit", "MultiEdit", "NotebookEdit"];

/// One Claude Code hook event (the documented input; unknown fields are ignored).
#[derive(Debug, Deserialize)]
struct Event {
    session_id: Option<String>,
    cwd: Option<PathBuf>,
    hook_event_name: String,
    tool_name: Option<String>,
    tool_input: Option<Value>,
    tool_use_id: Option<String>,
    prompt: Option<String>,
    #[serde(default)]
    stop_hook_active: bool,
    /// The sub-agent an event comes from (tool events inside one, and its start and stop).
    agent_id: Option<String>,
    agent_type: Option<String>,
}

/// Translates one event.
///
/// # Errors
/// `invalid-argument` if it is not a Claude Code hook event.
pub fn translate(input: &str) -> Result<Translated> {
    let event: Event = serde_json::from_str(input).map_err(|e| Error::invalid(format!("hook event: {e}")))?;
    let workspace = std::env::var_os("CLAUDE_PROJECT_DIR").map(PathBuf::from).or(event.cwd.clone());
    let events = match event.hook_event_name.as_str() {
        "SessionStart" => vec![AgentEvent::SessionStarted],
        "UserPromptSubmit" => {
            vec![AgentEvent::PromptSubmitted { prompt: Some(event.prompt.clone().unwrap_or_default()) }]
        }
        "PreToolUse" => vec![AgentEvent::ToolStarted { call: call(&event)? }],
        "PostToolUse" => vec![AgentEvent::ToolFinished { call: call(&event)? }],
        "PostToolUseFailure" => vec![AgentEvent::ToolFailed { call: call(&event)? }],
        "Stop" => vec![AgentEvent::Stopped { continued: event.stop_hook_active }],
        "SessionEnd" => vec![AgentEvent::SessionEnded],
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
    Ok(Translated { name: event.hook_event_name, workspace, cwd: event.cwd, session: event.session_id, events })
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
    } else if tool == "Bash" {
        (ToolEffect::RunsShell, Vec::new(), input.get("command").and_then(Value::as_str).map(str::to_string))
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
