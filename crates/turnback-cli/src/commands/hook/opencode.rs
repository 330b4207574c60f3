//! opencode's events, as the plugin `turnback install opencode` writes forwards them (one
//! JSON object per event on stdin; the plugin is `plugin.js` beside this file), translated
//! into the agent protocol. The plugin reads opencode's plugin hooks (`chat.message`,
//! `tool.execute.before`/`after`, and the `event` stream's `session.idle`,
//! `session.created`, `session.compacted` and tool-part errors; opencode's plugin docs,
//! packages/web/src/content/docs/plugins.mdx) and sends:
//!
//! | `event` | fields |
//! |---|---|
//! | `prompt` | `prompt` |
//! | `tool-before`, `tool-after`, `tool-failed` | `tool`, `callID`, `args`, `metadata` (after), `subagent` |
//! | `idle` | `reply` (the model's finished text parts of the turn) |
//! | `subagent-start`, `subagent-stop` | `id`, `kind` |
//! | `compacted` | — |
//!
//! each with `sessionID` (the root session: a sub-agent's calls come under its parent's,
//! named by `subagent`), `directory` (the project: the workspace) and `cwd` (where opencode
//! runs: its relative paths are relative to it). `write`, `edit`, `multiedit`,
//! `apply_patch` and `patch` are checkpointed; `bash` is a shell record. At `idle` the
//! turn's reply — its tool calls and their outputs too — comes from opencode's own storage.

use std::path::PathBuf;

use serde::Deserialize;
use serde_json::Value;
use turnback::{AgentEvent, Result, ToolCall, ToolEffect};

use super::{Translated, patch};

/// One event as the plugin sends it.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Event {
    event: String,
    #[serde(rename = "sessionID")]
    session_id: Option<String>,
    directory: Option<PathBuf>,
    cwd: Option<PathBuf>,
    prompt: Option<String>,
    tool: Option<String>,
    #[serde(rename = "callID")]
    call_id: Option<String>,
    args: Option<Value>,
    metadata: Option<Value>,
    subagent: Option<String>,
    id: Option<String>,
    kind: Option<String>,
    reply: Option<String>,
}

/// Translates one event.
///
/// # Errors
/// `invalid-argument` if it is not an event of turnback's opencode plugin.
pub fn translate(input: &str) -> Result<Translated> {
    let event: Event = super::parse(input)?;
    let events = match event.event.as_str() {
        "prompt" => vec![AgentEvent::PromptSubmitted { prompt: Some(event.prompt.clone().unwrap_or_default()) }],
        "tool-before" => vec![AgentEvent::ToolStarted { call: call(&event) }],
        "tool-after" => vec![AgentEvent::ToolFinished { call: call(&event) }],
        "tool-failed" => vec![AgentEvent::ToolFailed { call: call(&event) }],
        "idle" => {
            let reply = event.reply.clone().filter(|r| !r.trim().is_empty());
            let reply = reply.map(|text| AgentEvent::AssistantReplied { text, thinking: None });
            reply.into_iter().chain([AgentEvent::Stopped { continued: false }]).collect()
        }
        "subagent-start" => event
            .id
            .clone()
            .map(|id| AgentEvent::SubagentStarted { id, kind: event.kind.clone() })
            .into_iter()
            .collect(),
        "subagent-stop" => event.id.clone().map(|id| AgentEvent::SubagentStopped { id }).into_iter().collect(),
        "compacted" => vec![AgentEvent::Compacted],
        _ => Vec::new(),
    };
    let stored_session = (event.event == "idle").then(|| event.session_id.clone()).flatten();
    Ok(Translated {
        name: event.event,
        workspace: event.directory.clone(),
        cwd: event.cwd.or(event.directory),
        session: event.session_id,
        events,
        transcript: None,
        last_reply: None,
        stored_session,
    })
}

/// opencode's data directory, where it keeps its sessions: `$XDG_DATA_HOME/opencode`, else
/// `~/.local/share/opencode`.
pub fn data_dir() -> Option<PathBuf> {
    let data = std::env::var_os("XDG_DATA_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")))?;
    Some(data.join("opencode"))
}

/// The tool call an event is about.
fn call(event: &Event) -> ToolCall {
    let tool = event.tool.clone().unwrap_or_default();
    let args = event.args.clone().unwrap_or(Value::Null);
    let text = |k: &str| args.get(k).and_then(Value::as_str).map(str::to_string);
    let (effect, paths, command) = match tool.as_str() {
        "write" | "edit" | "multiedit" => {
            (ToolEffect::WritesFiles, text("filePath").map(PathBuf::from).into_iter().collect(), None)
        }
        "apply_patch" | "patch" => {
            (ToolEffect::WritesFiles, text("patchText").as_deref().map(patch::paths).unwrap_or_default(), None)
        }
        "bash" => (ToolEffect::RunsShell, Vec::new(), text("command")),
        _ => (ToolEffect::Other, Vec::new(), None),
    };
    let exit_status = event
        .metadata
        .as_ref()
        .and_then(|m| ["exit", "exitCode", "exit_code"].iter().find_map(|k| m.get(*k).and_then(Value::as_i64)))
        .and_then(|s| i32::try_from(s).ok());
    ToolCall {
        id: event.call_id.clone(),
        name: tool,
        effect,
        paths,
        command,
        exit_status,
        subagent: event.subagent.clone(),
    }
}
