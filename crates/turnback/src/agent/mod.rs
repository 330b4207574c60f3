//! The agent-neutral event protocol: what any coding agent reports, turned into turns,
//! checkpoints, shell records and history — once, here.
//!
//! An adapter for an agent (a hook command, a plugin, `turnback run`, the MCP server)
//! only translates the agent's own events into [`AgentEvent`]s and hands them, in the
//! order they arrived, to [`Turnback::record_event`]. Each event may come from a separate
//! process (hooks are), so everything the protocol remembers between events is in the
//! store.
//!
//! What each event does is documented on [`AgentEvent`]; docs/agent-protocol.md says how
//! to write an adapter.
//!
//! Invariants: an event delivered twice records nothing twice, and an event out of order
//! (an "after" without its "before", a stop with no turn) records nothing wrong; an event
//! that finds nothing to act on records nothing and is not an error. What an agent that
//! gives no ids makes ambiguous is said on [`AgentEvent`].

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

use serde::{Deserialize, Serialize};

use crate::api::views;
use crate::api::{CheckpointSummary, Turnback};
use crate::api::{Closing, NO_START, REPORTED_AFTER, WindowClosed, WindowOf, subagent_key};
use crate::error::Result;
use crate::session::begin::BeginRequest;
use crate::session::history::{NewEntry, Role, Selection};
use crate::session::import::{Format, Scope as ImportScope};
use crate::session::turn::Shell;

/// One thing an agent reports, in the agent-neutral protocol.
///
/// What each event does:
/// - `session-started`: the session exists from here on (created under the agent's id).
/// - `prompt-submitted`: tool calls still waiting for their "after" event are closed as
///   failed; a new turn begins with a start snapshot, and the prompt goes into the
///   history. The same prompt delivered again within a minute of its turn's start joins
///   that turn instead; a running turn that never got its stop ends where the new one
///   begins.
/// - `tool-started`: a call that writes files stages them (their pre-images) under the
///   call's id; a second start of the same call changes nothing.
/// - `tool-finished` / `tool-failed`: a file-writing call is committed (post-images; as
///   failed if it failed: the files may still have changed); a shell call is recorded in
///   the turn with how it ended. A finish without its start records nothing.
/// - `shell-ran`: a shell command reported on its own is recorded in the turn.
/// - `assistant-replied`: the agent's reply goes into the history of the current turn
///   (unless it is the newest entry already: the same reply delivered again).
/// - `stopped`: tool calls still waiting are closed as failed and the turn ends with its
///   end snapshot. A stop with no running turn does nothing, unless it says the agent
///   `continued` after an earlier stop: then the turn is ended again, so its end snapshot
///   holds what the agent did since.
/// - `subagent-started` / `subagent-stopped`: recorded in the running turn.
/// - `compacted`: nothing to do — the history turnback keeps is not compacted.
/// - `session-ended`: like a stop without its own event.
///
/// Continuations: a sign of the agent starting something new (a tool call, a shell
/// command or a sub-agent it has not reported before) while no turn runs, after the newest
/// turn ended, reopens that turn: an agent whose stop another hook blocked carries on in
/// the same turn, and its later edits count as its own, not as a person's. An event
/// delivered again, or a call's "after" event, never reopens a turn.
///
/// Ids: a tool call or shell command the agent gives an id is recognised when it is
/// delivered again. Without one, a tool call is matched by its name and paths (a start
/// while the same call is still pending is the same start again; two calls one after
/// another are two checkpoints), and a shell command cannot be told from the same command
/// run again: it is recorded each time and never reopens a stopped turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(tag = "event", rename_all = "kebab-case", rename_all_fields = "camelCase")]
pub enum AgentEvent {
    /// The agent's session began (or resumed).
    SessionStarted,
    /// The agent's session ended (the person quit).
    SessionEnded,
    /// The agent carries on after its stop with no prompt of the person's: it was handed a
    /// notice of its own making (Claude Code's `<task-notification>` when a background
    /// sub-agent finishes). The newest turn reopens; no turn begins.
    Continued,
    /// The person sent a prompt.
    PromptSubmitted {
        /// Its text (none: a turn without a prompt, such as `turnback run` without one).
        #[serde(default)]
        prompt: Option<String>,
    },
    /// A tool call is about to run.
    ToolStarted {
        /// The call.
        call: ToolCall,
    },
    /// A tool call ran.
    ToolFinished {
        /// The call.
        call: ToolCall,
    },
    /// A tool call failed or was refused (its files may still have changed).
    ToolFailed {
        /// The call.
        call: ToolCall,
    },
    /// A shell command ran, reported on its own.
    ShellRan {
        /// The agent's id for it.
        #[serde(default)]
        id: Option<String>,
        /// The command line.
        command: String,
        /// Its exit status, when known.
        #[serde(default)]
        exit_status: Option<i32>,
    },
    /// The agent replied.
    AssistantReplied {
        /// The reply.
        text: String,
        /// Its reasoning, when shown.
        #[serde(default)]
        thinking: Option<String>,
    },
    /// The agent finished its reply.
    Stopped {
        /// This stop follows an earlier one the agent carried on after (another hook
        /// blocked it).
        #[serde(default)]
        continued: bool,
    },
    /// A sub-agent began.
    SubagentStarted {
        /// The agent's id for it.
        id: String,
        /// Its kind, in the agent's words.
        #[serde(default)]
        kind: Option<String>,
    },
    /// A sub-agent finished.
    SubagentStopped {
        /// The agent's id for it.
        id: String,
    },
    /// The agent compacted its context.
    Compacted,
}

/// A tool call, as an agent reports it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ToolCall {
    /// The agent's id for the call (a tool-use id): its start and its end are matched by
    /// it. Without one, they are matched by name and paths (see [`AgentEvent`]).
    #[serde(default)]
    pub id: Option<String>,
    /// The tool's name.
    pub name: String,
    /// What the tool does.
    #[serde(default)]
    pub effect: ToolEffect,
    /// The files it names (absolute, or relative to the workspace).
    #[serde(default)]
    pub paths: Vec<PathBuf>,
    /// Its command line, for a shell call.
    #[serde(default)]
    pub command: Option<String>,
    /// Its exit status, for a finished shell call.
    #[serde(default)]
    pub exit_status: Option<i32>,
    /// The sub-agent making the call, if not the main agent (kept with its checkpoint).
    #[serde(default)]
    pub subagent: Option<String>,
}

/// What a tool does, as far as undo is concerned.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
pub enum ToolEffect {
    /// It writes the files it names: checkpointed.
    WritesFiles,
    /// It runs a shell command: recorded, never claimed reversible (snapshots cover its
    /// effect on workspace files).
    RunsShell,
    /// Anything else: nothing to record.
    #[default]
    Other,
}

/// What recording one event did.
#[derive(Debug, Clone, Default, Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Recorded {
    /// The turn the event began, joined, ended, reopened or was recorded in.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub turn: Option<views::Turn>,
    /// A running turn was joined rather than a new one begun.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub joined: bool,
    /// The turn was reopened: the agent carried on after its stop.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub reopened: bool,
    /// The checkpoint a tool call staged or committed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<CheckpointSummary>,
    /// Tool calls closed as failed because their "after" event never came.
    #[serde(skip_serializing_if = "is_zero")]
    pub abandoned_calls_closed: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Turnback {
    /// Records one event an agent reported (see [`AgentEvent`] for what each does). `cancel`,
    /// when set while a prompt's start snapshot is awaited, cancels that turn's begin.
    ///
    /// # Errors
    /// Store and workspace errors, `path-rejected` for a tool call naming a path outside
    /// the workspace, `cancelled`. An event with nothing to act on is not an error.
    pub fn record_event(&self, event: &AgentEvent, cancel: Option<&AtomicBool>) -> Result<Recorded> {
        let mut done = Recorded::default();
        match event {
            AgentEvent::SessionStarted => {
                self.session_record()?;
            }
            AgentEvent::PromptSubmitted { prompt } => {
                // An agent reports a prompt as it starts replying to it: a turn still
                // running was interrupted (no stop came), and this is a turn of its own.
                let req = BeginRequest { prompt: prompt.clone(), background: false, new: true };
                let begun = self.begin_turn(&req, cancel)?;
                done.abandoned_calls_closed = begun.abandoned_calls_closed;
                done.joined = begun.joined;
                done.turn = Some(begun.turn);
            }
            AgentEvent::ToolStarted { call } => {
                let key = self.tool_call_start_key(call.id.as_deref(), &call.name, &call.paths)?;
                if self.note_tool_call(&key)? {
                    done.reopened = self.reopen_if_stopped(&mut done)?;
                }
                if call.effect == ToolEffect::WritesFiles && !call.paths.is_empty() {
                    done.checkpoint = self.stage_tool_call(&key, &call.paths, call.subagent.as_deref())?;
                }
                if call.effect == ToolEffect::RunsShell {
                    self.open_window(&key)?;
                }
            }
            AgentEvent::ToolFinished { call } | AgentEvent::ToolFailed { call } => {
                // An "after" event never reopens a turn: its call began before the stop
                // (which closed what was still waiting), or it is one delivered again.
                let failed = matches!(event, AgentEvent::ToolFailed { .. });
                let key = self.tool_call_end_key(call.id.as_deref(), &call.name, &call.paths)?;
                if call.effect == ToolEffect::RunsShell {
                    let command = call.command.as_deref().unwrap_or("");
                    let (call_id, exit_status) = (call.id.as_deref(), call.exit_status);
                    // Its window closes first: the turn records the command with its
                    // checkpoint, or why it had none.
                    let closed = match &key {
                        Some(key) => {
                            let subagent = call.subagent.as_deref();
                            self.close_window(key, WindowOf::Shell { command, call_id, exit_status, subagent })?
                        }
                        None => WindowClosed::Without(NO_START.to_string()),
                    };
                    let no_window = match closed {
                        WindowClosed::Checkpoint(c) => {
                            done.checkpoint = Some(c);
                            None
                        }
                        WindowClosed::Unchanged => None,
                        WindowClosed::Without(why) => Some(why),
                    };
                    let shell = Shell {
                        command,
                        id: call_id,
                        exit_status,
                        failed,
                        checkpoint_id: done.checkpoint.as_ref().map(|c| c.checkpoint_id.as_str()),
                        no_window: no_window.as_deref(),
                    };
                    done.turn = self.record_shell_if_running(shell)?.as_ref().map(Into::into);
                }
                if let Some(key) = key
                    && let Some(committed) = self.commit_tool_call(&key, failed)?
                {
                    done.checkpoint = Some(committed);
                }
            }
            AgentEvent::ShellRan { id, command, exit_status } => {
                // Only a command with an id can tell a new command from one delivered
                // again, so only such a one reopens a stopped turn.
                if let Some(id) = id
                    && self.note_tool_call(&format!("shell:{id}"))?
                {
                    done.reopened = self.reopen_if_stopped(&mut done)?;
                }
                let shell = Shell {
                    command,
                    id: id.as_deref(),
                    exit_status: *exit_status,
                    failed: false,
                    checkpoint_id: None,
                    no_window: Some(REPORTED_AFTER),
                };
                done.turn = self.record_shell_if_running(shell)?.as_ref().map(Into::into);
            }
            AgentEvent::AssistantReplied { text, thinking } => {
                if !self.turn_records()?.is_empty() {
                    let entry = NewEntry { thinking: thinking.clone(), ..NewEntry::new(Role::Assistant, text.clone()) };
                    self.append_reply(entry)?;
                }
            }
            AgentEvent::Stopped { continued } => {
                if *continued && self.running_turn()?.is_none() {
                    done.reopened = self.reopen_if_stopped(&mut done)?;
                }
                let (ended, closed) = self.close_turn(self.progress())?;
                done.abandoned_calls_closed = closed;
                done.turn = ended.as_ref().map(Into::into).or(done.turn.take());
            }
            AgentEvent::Continued => {
                if self.running_turn()?.is_none() {
                    done.reopened = self.reopen_if_stopped(&mut done)?;
                }
            }
            AgentEvent::SessionEnded => {
                let (ended, closed) = self.close_turn_with(self.progress(), Closing::All)?;
                done.abandoned_calls_closed = closed;
                done.turn = ended.as_ref().map(Into::into);
            }
            AgentEvent::SubagentStarted { id, kind } => {
                if self.note_tool_call(&subagent_key(id))? {
                    done.reopened = self.reopen_if_stopped(&mut done)?;
                }
                done.turn = self.record_subagent(id, kind.as_deref(), false)?.as_ref().map(Into::into);
                self.open_window(&subagent_key(id))?;
            }
            AgentEvent::SubagentStopped { id } => {
                // Its calls still waiting for their "after" event are over; then its window
                // closes, leaving to them the paths they name.
                done.abandoned_calls_closed = self.finish_abandoned_tool_calls(Closing::Subagent(id))?;
                done.checkpoint = self.close_window(&subagent_key(id), WindowOf::Subagent { id })?.checkpoint();
                done.turn = self.record_subagent(id, None, true)?.as_ref().map(Into::into);
            }
            AgentEvent::Compacted => {}
        }
        Ok(done)
    }

    /// At a stop, the replies of the turns recorded, from the agent's own transcript (matched
    /// by their prompts, so it does not matter that the turn has just ended); `last_reply` is
    /// the reply the agent's stop event carried. It stands in while the transcript does not
    /// hold the newest turn's reply yet (the transcript's replaces it when it does), and
    /// when there is no transcript or it cannot be read. A transcript not written yet is no
    /// transcript.
    ///
    /// # Errors
    /// The transcript's read or import error, after the stand-in is recorded.
    pub fn record_replies(&self, transcript: Option<(Format, &Path)>, last_reply: Option<String>) -> Result<()> {
        let imported = transcript
            .filter(|(_, path)| path.exists())
            .map(|(format, path)| self.import_transcript_file(format, path, ImportScope::RepliesOnly));
        let stand_in = |text: String| self.record_event(&AgentEvent::AssistantReplied { text, thinking: None }, None);
        match (imported, last_reply) {
            (Some(Ok(_)), Some(text)) if !self.newest_turn_replied()? => stand_in(text).map(drop),
            (Some(Ok(_)), _) | (None, None) => Ok(()),
            (None, Some(text)) => stand_in(text).map(drop),
            (Some(Err(e)), last) => {
                if let Some(text) = last {
                    stand_in(text)?;
                }
                Err(e)
            }
        }
    }

    /// At a stop of opencode, the replies of the turns recorded — text, reasoning, tool
    /// calls with their outputs — from opencode's own storage in `data` (its database, or
    /// the JSON files of versions before 1.2), for its session `session`. Turns are never
    /// added this way: only the replies of turns the events recorded.
    ///
    /// # Errors
    /// `not-found` if opencode has no such session there; the storage's read error.
    pub fn record_stored_replies(&self, data: &Path, session: &str) -> Result<()> {
        let export = crate::session::import::opencode::read_storage(data, session)?;
        self.import_transcript(Format::Opencode, &export, ImportScope::RepliesOnly).map(drop)
    }

    /// Whether the session's newest turn has a reply in the history.
    fn newest_turn_replied(&self) -> Result<bool> {
        let Some(turn) = self.turn_records()?.pop() else { return Ok(true) };
        let entries = self.history(&Selection::Turn(turn.turn_id))?.entries;
        Ok(entries.iter().any(|e| e.role == Role::Assistant))
    }

    /// Reopens the newest turn when no turn runs: the agent is working after its stop.
    fn reopen_if_stopped(&self, done: &mut Recorded) -> Result<bool> {
        let reopened = self.reopen_turn()?;
        let was = reopened.is_some();
        if let Some(t) = reopened {
            done.turn = Some((&t).into());
        }
        Ok(was)
    }
}
