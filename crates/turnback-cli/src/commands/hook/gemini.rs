//! Gemini CLI's hook events (`hooks` in its `settings.json`; payloads as its hooks reference,
//! docs/hooks/reference.md, and `packages/core/src/hooks/types.ts` describe them),
//! translated into the agent protocol.
//!
//! - `BeforeAgent` carries the person's prompt: a turn begins. `AfterAgent` ends it, with
//!   the replies from the chat file (`transcript_path`) or its `prompt_response`; it does
//!   not always fire (upstream issues #18514, #27712), so the next prompt or `SessionEnd`
//!   also ends a turn left running.
//! - `write_file` and `replace` are checkpointed (`file_path`, found as Gemini finds it, or
//!   as its result names it); `run_shell_command` and MCP
//!   tools are shell records. Gemini gives its hooks no tool-call id: the protocol matches
//!   a call's before and after by name and paths, and a call the person declined (a
//!   `BeforeTool` with no `AfterTool`) is closed at the turn's end.
//! - A call's failure is `tool_response.error`; a shell command's exit status is only in
//!   its output text ("Exit Code: N").

use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;
use turnback::{AgentEvent, Result, ToolCall, ToolEffect, TranscriptFormat};

use super::Translated;

/// Tools whose writes are checkpointed.
const FILE_TOOLS: [&str; 2] = ["write_file", "replace"];

/// One Gemini CLI hook event (unknown fields are ignored).
#[derive(Debug, Deserialize)]
struct Event {
    session_id: Option<String>,
    cwd: Option<PathBuf>,
    transcript_path: Option<PathBuf>,
    hook_event_name: String,
    prompt: Option<String>,
    prompt_response: Option<String>,
    tool_name: Option<String>,
    tool_input: Option<Value>,
    tool_response: Option<Value>,
}

/// Translates one event.
///
/// # Errors
/// `invalid-argument` if it is not a Gemini CLI hook event.
pub fn translate(input: &str) -> Result<Translated> {
    let event: Event = super::parse(input)?;
    let workspace = std::env::var_os("GEMINI_PROJECT_DIR").map(PathBuf::from).or(event.cwd.clone());
    let mut transcript = None;
    let mut last_reply = None;
    let events = match event.hook_event_name.as_str() {
        "SessionStart" => vec![AgentEvent::SessionStarted],
        "SessionEnd" => vec![AgentEvent::SessionEnded],
        "BeforeAgent" => match event.prompt.clone().filter(|p| !p.trim().is_empty()) {
            Some(prompt) => vec![AgentEvent::PromptSubmitted { prompt: Some(prompt) }],
            // An empty prompt is Gemini re-running the agent after a hook's retry, not a
            // person's prompt (upstream issue #18514).
            None => Vec::new(),
        },
        "AfterAgent" => {
            transcript = event.transcript_path.clone().filter(|p| !p.as_os_str().is_empty());
            last_reply = event.prompt_response.clone().filter(|r| !r.trim().is_empty() && r != "[no response text]");
            vec![AgentEvent::Stopped { continued: false }]
        }
        "BeforeTool" => vec![AgentEvent::ToolStarted { call: call(&event, workspace.as_deref()) }],
        "AfterTool" => {
            let call = call(&event, workspace.as_deref());
            // A shell command's exit status marks it failed in the protocol itself.
            let failed = event.tool_response.as_ref().and_then(|r| r.get("error")).is_some_and(|e| !e.is_null());
            vec![if failed { AgentEvent::ToolFailed { call } } else { AgentEvent::ToolFinished { call } }]
        }
        "PreCompress" => vec![AgentEvent::Compacted],
        _ => Vec::new(),
    };
    Ok(Translated {
        name: event.hook_event_name,
        workspace,
        cwd: event.cwd,
        session: event.session_id,
        events,
        transcript: transcript.map(|p| (TranscriptFormat::Gemini, p)),
        last_reply,
        stored_session: None,
    })
}

/// The tool call an event is about.
fn call(event: &Event, workspace: Option<&Path>) -> ToolCall {
    let tool = event.tool_name.clone().unwrap_or_default();
    let input = event.tool_input.clone().unwrap_or(Value::Null);
    let (effect, paths, command) = if FILE_TOOLS.contains(&tool.as_str()) {
        // After the call, Gemini says which file it was; before, find it as Gemini will.
        let done =
            event.tool_response.as_ref().and_then(|r| r.pointer("/returnDisplay/filePath")).and_then(Value::as_str);
        let path = done.map(PathBuf::from).or_else(|| {
            let given = input.get("file_path").and_then(Value::as_str)?;
            Some(resolve(&tool, given, event.cwd.as_deref(), workspace))
        });
        (ToolEffect::WritesFiles, path.into_iter().collect(), None)
    } else if tool == "run_shell_command" {
        (ToolEffect::RunsShell, Vec::new(), input.get("command").and_then(Value::as_str).map(str::to_string))
    } else if tool.starts_with("mcp_") {
        (ToolEffect::RunsShell, Vec::new(), Some(super::mcp_command(&tool, &input)))
    } else {
        (ToolEffect::Other, Vec::new(), None)
    };
    let exit_status =
        (effect == ToolEffect::RunsShell).then(|| event.tool_response.as_ref().and_then(exit_status)).flatten();
    ToolCall { id: None, name: tool, effect, paths, command, exit_status, subagent: None }
}

/// The file a file tool's `file_path` names, as Gemini CLI finds it
/// (`packages/core/src/utils/pathCorrector.ts`): an absolute path as it is; a relative one
/// in the directory Gemini runs in — and for `replace`, when no such file is there, the one
/// file in the workspace whose path ends with it (Gemini searches for it too). Absolute, so
/// a call's before and after name the same file.
fn resolve(tool: &str, given: &str, cwd: Option<&Path>, workspace: Option<&Path>) -> PathBuf {
    let given = Path::new(given);
    let Some(cwd) = cwd.filter(|_| given.is_relative()) else { return given.to_path_buf() };
    let here = cwd.join(given);
    if here.exists() || tool != "replace" {
        return here;
    }
    workspace.and_then(|root| unique_ending_with(root, given)).unwrap_or(here)
}

/// The one file under `root` whose path ends with `tail` (`None` if none or several), looked
/// for breadth first among at most 50,000 entries, not in hidden or dependency folders.
fn unique_ending_with(root: &Path, tail: &Path) -> Option<PathBuf> {
    let mut queue = std::collections::VecDeque::from([root.to_path_buf()]);
    let (mut found, mut seen) = (None, 0);
    while let Some(dir) = queue.pop_front() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            seen += 1;
            if seen > 50_000 {
                return None;
            }
            let path = entry.path();
            let name = entry.file_name();
            let Ok(kind) = entry.file_type() else { continue };
            if kind.is_dir() {
                let skip = name.to_string_lossy().starts_with('.') || name == "node_modules" || name == "target";
                if !skip {
                    queue.push_back(path);
                }
            } else if kind.is_file() && path.ends_with(tail) {
                if found.is_some() {
                    return None;
                }
                found = Some(path);
            }
        }
    }
    found
}

/// A shell command's exit status, from the "Exit Code: N" line of its output.
fn exit_status(response: &Value) -> Option<i32> {
    super::exit_status_line(response.get("llmContent").and_then(Value::as_str)?, "Exit Code:")
}
