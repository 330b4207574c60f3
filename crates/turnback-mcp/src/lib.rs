//! turnback's Model Context Protocol server (the official Rust SDK, `rmcp`), on stdio.
//!
//! Every tool is one call of the library's facade ([`turnback::Turnback`]); its result is
//! the facade's own result type, serialized — the same JSON document `turnback --json`
//! prints for the same command — and its output schema is that type's JSON Schema (the
//! library's `json-schema` feature). Every tool carries annotations (read-only,
//! destructive, idempotent, closed world). The server acts for an agent ([`turnback::Actor::Agent`]),
//! so the plan-id rule applies: `rollback_apply` and `rewind_apply` need the `planId` of a
//! preview.
//!
//! Invariants: stdout carries nothing but protocol (every tool's output is returned, never
//! printed); every file tool goes through the same checkpointed mutation path as
//! `turnback fs` and is confined to the workspace (no symlink followed, the store
//! refused); a turnback error is a tool result with `isError` and its stable code, never a
//! crash. Each call opens the store afresh, so other turnback processes (hooks, `run`)
//! share it.

mod transport;

use std::path::PathBuf;

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::tool::schema_for_output;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock, Implementation, ServerCapabilities, ServerConfig};
use rmcp::{ErrorData, ServerHandler, ServiceExt, tool, tool_handler, tool_router};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use turnback::{
    Actor, AgentEvent, BeginRequest, DiffRequest, Error, ErrorCode, Hint, Mutation, Options, Result, RollbackSelection,
    Turnback,
};

#[derive(Debug, Deserialize, JsonSchema)]
struct PathParams {
    /// A path in the workspace (relative to its root, or absolute inside it).
    path: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct ContentParams {
    /// A path in the workspace.
    path: String,
    /// The file's whole new content (UTF-8 text).
    content: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct EditParams {
    /// A path in the workspace.
    path: String,
    /// The exact text to replace; it must occur exactly once unless `replace_all`.
    old_string: String,
    /// The text to put in its place.
    new_string: String,
    /// Replace every occurrence.
    #[serde(default)]
    replace_all: bool,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
struct TurnParams {
    /// A turn's 1-based index (default: all turns / the newest turn).
    #[serde(default)]
    turn: Option<u64>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
struct RollbackParams {
    /// Checkpoint ids to take back.
    #[serde(default)]
    checkpoint_ids: Vec<String>,
    /// Every checkpoint of this turn (prompt round).
    #[serde(default)]
    turn: Option<u64>,
    /// Everything since this turn, inclusive.
    #[serde(default)]
    since_turn: Option<u64>,
    /// Every checkpoint this sub-agent made (its id, as list_checkpoints shows it).
    #[serde(default)]
    agent: Option<String>,
    /// Required for apply: the planId of the preview; refused (nothing changed) if anything
    /// moved since.
    #[serde(default)]
    plan_id: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct RewindParams {
    /// Rewind to the start of this turn (1-based index), undoing it and every later turn.
    to: u64,
    /// Required for apply: the planId of the preview; refused (nothing changed) if anything
    /// moved.
    #[serde(default)]
    plan_id: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct DiffParams {
    /// The turn's 1-based index (default: the newest).
    #[serde(default)]
    turn: Option<u64>,
    /// Also the unified diff of text files (binary files are named, not shown).
    #[serde(default)]
    patch: bool,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
struct BeginParams {
    /// The person's prompt: the turn's preview, and the first entry of its history.
    #[serde(default)]
    prompt: Option<String>,
    /// A new turn even if one is running (it then ends where this one begins); otherwise a
    /// message sent while a turn runs joins it, into its history.
    #[serde(default)]
    new: bool,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct ShellParams {
    /// The command line (secrets such as TOKEN=… are redacted before it is stored).
    command: String,
    /// Its exit status.
    #[serde(default)]
    exit_status: Option<i32>,
    /// Your id for it: the same command reported again with the same id is recorded once.
    #[serde(default)]
    id: Option<String>,
}

/// The server: how to open turnback for each call.
#[derive(Debug, Clone)]
pub struct Server {
    options: Options,
    tool_router: ToolRouter<Self>,
}

/// A facade result as a tool result: its JSON as structured content (and as text, for
/// clients that read only text); an error as a tool error whose text is the error document
/// the command line prints, naming its stable code.
fn result<T: Serialize>(r: Result<T>) -> std::result::Result<CallToolResult, ErrorData> {
    Ok(match r.and_then(|v| serde_json::to_value(v).map_err(|e| Error::new(ErrorCode::Io, e.to_string()))) {
        Ok(value) => {
            let value = if value.is_object() { value } else { serde_json::json!({ "result": value }) };
            let mut done = CallToolResult::success(vec![ContentBlock::text(value.to_string())]);
            done.structured_content = Some(value);
            done
        }
        // The same error document `--json` prints: {"error": {code, message, hint, …}},
        // the hint worded into the message as this server's tools.
        Err(e) => CallToolResult::error(vec![ContentBlock::text(e.report(hint_words).to_string())]),
    })
}

/// A [`Hint`] as this server says it: the tool that takes the step.
fn hint_words(hint: &Hint) -> String {
    match hint {
        Hint::Overwrite => "use the write_file tool to overwrite".into(),
        Hint::BeginTurn => "begin one with the begin_turn tool".into(),
        Hint::EndTurn => "end it first with the end_turn tool".into(),
        Hint::RollBack { checkpoint_id } => {
            format!("rollback_preview and rollback_apply with checkpoint {checkpoint_id} take it back")
        }
        Hint::Inspect { checkpoint_id } => {
            format!("list_checkpoints shows checkpoint {checkpoint_id}; `turnback inspect` in a terminal says more")
        }
    }
}

fn selection(p: &RollbackParams) -> Result<RollbackSelection> {
    RollbackSelection::from_parts(p.checkpoint_ids.clone(), p.turn, p.since_turn, p.agent.clone())
}

#[tool_router(router = tool_router)]
impl Server {
    /// A server that opens turnback with `options`, acting for an agent (a session it
    /// creates records the agent `mcp` unless `options` names one). Relative paths in tool
    /// calls are relative to the workspace root.
    pub fn new(options: Options) -> Self {
        let agent = options.agent.clone().or_else(|| Some("mcp".into()));
        let options = Options { actor: Actor::Agent, cwd: None, agent, ..options };
        Server { options, tool_router: Self::tool_router() }
    }

    /// Turnback for a tool that works on what is recorded: the store must exist already.
    fn open(&self) -> Result<Turnback> {
        Turnback::open(&Options { create: false, ..self.options.clone() })
    }

    /// Turnback for a tool that records something new: the store (and a key) is made if
    /// there is none yet.
    fn open_to_record(&self) -> Result<Turnback> {
        Turnback::open(&Options { create: true, ..self.options.clone() })
    }

    fn mutate(&self, m: Mutation) -> std::result::Result<CallToolResult, ErrorData> {
        result(self.open_to_record().and_then(|tb| tb.mutate(m, false)))
    }

    /// Reads a text file of the workspace (never through a symlink).
    #[tool(
        name = "read_file",
        output_schema = schema_for_output::<turnback::FileText>(),
        description = "Read a UTF-8 text file of the workspace.",
        annotations(title = "Read a file", read_only_hint = true, open_world_hint = false)
    )]
    async fn read_file(&self, Parameters(p): Parameters<PathParams>) -> std::result::Result<CallToolResult, ErrorData> {
        result(self.open().and_then(|tb| tb.read_file(&PathBuf::from(&p.path))))
    }

    /// Creates a file (it must not exist), with a checkpoint.
    #[tool(
        name = "create_file",
        output_schema = schema_for_output::<turnback::MutationReport>(),
        description = "Create a new file in the workspace (fails if it exists); checkpointed, so it can be rolled back.",
        annotations(
            title = "Create a file",
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = false,
            open_world_hint = false
        )
    )]
    async fn create_file(
        &self,
        Parameters(p): Parameters<ContentParams>,
    ) -> std::result::Result<CallToolResult, ErrorData> {
        self.mutate(Mutation::Create { path: p.path.into(), content: p.content.into_bytes() })
    }

    /// Creates or overwrites a file, with a checkpoint.
    #[tool(
        name = "write_file",
        output_schema = schema_for_output::<turnback::MutationReport>(),
        description = "Create or overwrite a file in the workspace; checkpointed, so it can be rolled back.",
        annotations(
            title = "Write a file",
            read_only_hint = false,
            destructive_hint = true,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    async fn write_file(
        &self,
        Parameters(p): Parameters<ContentParams>,
    ) -> std::result::Result<CallToolResult, ErrorData> {
        self.mutate(Mutation::Write { path: p.path.into(), content: p.content.into_bytes() })
    }

    /// Replaces exact text in a file, with a checkpoint.
    #[tool(
        name = "edit_file",
        output_schema = schema_for_output::<turnback::MutationReport>(),
        description = "Replace an exact string in a file (once, unless replace_all); checkpointed.",
        annotations(
            title = "Edit a file",
            read_only_hint = false,
            destructive_hint = true,
            idempotent_hint = false,
            open_world_hint = false
        )
    )]
    async fn edit_file(&self, Parameters(p): Parameters<EditParams>) -> std::result::Result<CallToolResult, ErrorData> {
        self.mutate(Mutation::Edit { path: p.path.into(), old: p.old_string, new: p.new_string, all: p.replace_all })
    }

    /// Deletes a file, with a checkpoint.
    #[tool(
        name = "delete_file",
        output_schema = schema_for_output::<turnback::MutationReport>(),
        description = "Delete a file of the workspace; checkpointed, so it can be restored.",
        annotations(
            title = "Delete a file",
            read_only_hint = false,
            destructive_hint = true,
            idempotent_hint = false,
            open_world_hint = false
        )
    )]
    async fn delete_file(
        &self,
        Parameters(p): Parameters<PathParams>,
    ) -> std::result::Result<CallToolResult, ErrorData> {
        self.mutate(Mutation::Delete { path: p.path.into() })
    }

    /// Begins a turn for a client without hooks.
    #[tool(
        name = "begin_turn",
        output_schema = schema_for_output::<turnback::Begun>(),
        description = "Begin a turn for the person's prompt: a snapshot of the whole workspace now, and the prompt in the history. Call it when a new prompt arrives; a message sent while a turn runs joins it (new: true begins a turn of its own instead); the same prompt again within a minute joins its turn. Tool calls still waiting are closed first.",
        annotations(
            title = "Begin a turn",
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = false,
            open_world_hint = false
        )
    )]
    async fn begin_turn(
        &self,
        Parameters(p): Parameters<BeginParams>,
    ) -> std::result::Result<CallToolResult, ErrorData> {
        let req = BeginRequest { prompt: p.prompt, background: false, new: p.new };
        result(self.open_to_record().and_then(|tb| tb.begin_turn(&req, None)))
    }

    /// Ends the running turn.
    #[tool(
        name = "end_turn",
        output_schema = schema_for_output::<turnback::Turn>(),
        description = "End the running turn with a snapshot of the workspace: call it when the reply to the prompt is done. not-found if no turn is running.",
        annotations(
            title = "End the turn",
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    async fn end_turn(&self) -> std::result::Result<CallToolResult, ErrorData> {
        result(self.open_to_record().and_then(|tb| tb.end_turn(None)))
    }

    /// Records a shell command the client ran, in the running turn.
    #[tool(
        name = "shell_ran",
        output_schema = schema_for_output::<turnback::Recorded>(),
        description = "Record a shell command you ran in the running turn (with its exit status, and your id for it so a repeat is recorded once). Shell commands are never claimed reversible; the turn's snapshots cover what they changed in the workspace.",
        annotations(
            title = "Record a shell command",
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = false,
            open_world_hint = false
        )
    )]
    async fn shell_ran(
        &self,
        Parameters(p): Parameters<ShellParams>,
    ) -> std::result::Result<CallToolResult, ErrorData> {
        let event = AgentEvent::ShellRan { id: p.id, command: p.command, exit_status: p.exit_status };
        result(self.open_to_record().and_then(|tb| tb.record_event(&event, None)))
    }

    /// The session's turns.
    #[tool(
        name = "list_turns",
        output_schema = schema_for_output::<turnback::TurnList>(),
        description = "The session's turns: index, turnId, kind, preview, startedAt, snapshots.",
        annotations(title = "List turns", read_only_hint = true, open_world_hint = false)
    )]
    async fn list_turns(&self) -> std::result::Result<CallToolResult, ErrorData> {
        result(self.open().and_then(|tb| tb.turns()))
    }

    /// The session's checkpoints.
    #[tool(
        name = "list_checkpoints",
        output_schema = schema_for_output::<turnback::CheckpointList>(),
        description = "The session's checkpoints, optionally of one turn.",
        annotations(title = "List checkpoints", read_only_hint = true, open_world_hint = false)
    )]
    async fn list_checkpoints(
        &self,
        Parameters(p): Parameters<TurnParams>,
    ) -> std::result::Result<CallToolResult, ErrorData> {
        result(self.open().and_then(|tb| tb.checkpoints(p.turn, false)))
    }

    /// Previews a rollback: every target's outcome and a planId.
    #[tool(
        name = "rollback_preview",
        output_schema = schema_for_output::<turnback::Analysis>(),
        description = "Preview taking checkpointed changes back (by ids, a turn, or since a turn): every file's outcome (eligible, conflict with reason, ...) and a planId. Changes nothing.",
        annotations(title = "Preview a rollback", read_only_hint = true, open_world_hint = false)
    )]
    async fn rollback_preview(
        &self,
        Parameters(p): Parameters<RollbackParams>,
    ) -> std::result::Result<CallToolResult, ErrorData> {
        result(self.open().and_then(|tb| tb.rollback_preview(&selection(&p)?, &[])))
    }

    /// Applies a rollback; never overwrites work done since.
    #[tool(
        name = "rollback_apply",
        output_schema = schema_for_output::<turnback::RollbackResult>(),
        description = "Apply a rollback previewed with rollback_preview (pass its planId): takes back only what is exactly the agent's result, leaves conflicts alone, and is itself undoable.",
        annotations(
            title = "Apply a rollback",
            read_only_hint = false,
            destructive_hint = true,
            idempotent_hint = false,
            open_world_hint = false
        )
    )]
    async fn rollback_apply(
        &self,
        Parameters(p): Parameters<RollbackParams>,
    ) -> std::result::Result<CallToolResult, ErrorData> {
        result(self.open().and_then(|tb| tb.rollback_apply(&selection(&p)?, &[], p.plan_id.as_deref())))
    }

    /// Previews a rewind to the start of a turn.
    #[tool(
        name = "rewind_preview",
        output_schema = schema_for_output::<turnback::RewindPlan>(),
        description = "Preview taking the whole workspace back to the start of a turn: files to restore, delete and leave alone (hand edits), and a planId. Changes nothing.",
        annotations(title = "Preview a rewind", read_only_hint = true, open_world_hint = false)
    )]
    async fn rewind_preview(
        &self,
        Parameters(p): Parameters<RewindParams>,
    ) -> std::result::Result<CallToolResult, ErrorData> {
        result(self.open().and_then(|tb| tb.rewind_preview(p.to, &[])))
    }

    /// Applies a rewind.
    #[tool(
        name = "rewind_apply",
        output_schema = schema_for_output::<turnback::Rewound>(),
        description = "Apply a rewind previewed with rewind_preview (pass its planId); hand edits are left alone; undoable through its checkpoint.",
        annotations(
            title = "Apply a rewind",
            read_only_hint = false,
            destructive_hint = true,
            idempotent_hint = false,
            open_world_hint = false
        )
    )]
    async fn rewind_apply(
        &self,
        Parameters(p): Parameters<RewindParams>,
    ) -> std::result::Result<CallToolResult, ErrorData> {
        result(self.open().and_then(|tb| tb.rewind_apply(p.to, &[], p.plan_id.as_deref())))
    }

    /// What a turn changed.
    #[tool(
        name = "diff_turn",
        output_schema = schema_for_output::<turnback::DiffReport>(),
        description = "What a turn changed: added, modified, deleted paths with line counts, and optionally the unified diff.",
        annotations(title = "Diff a turn", read_only_hint = true, open_world_hint = false)
    )]
    async fn diff_turn(&self, Parameters(p): Parameters<DiffParams>) -> std::result::Result<CallToolResult, ErrorData> {
        let req = DiffRequest { turn: p.turn, patch: p.patch, ..DiffRequest::default() };
        result(self.open().and_then(|tb| tb.diff(&req)))
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Server {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("turnback", env!("CARGO_PKG_VERSION")).with_title("turnback"))
            .with_instructions(
                "turnback: checkpointed file tools for this workspace, and undo: list_turns, list_checkpoints, \
                 rollback_preview/rollback_apply, rewind_preview/rewind_apply, diff_turn; begin_turn/end_turn \
                 around each prompt for clients without hooks.",
            )
    }
}

/// Serves MCP on stdin/stdout until the client closes it.
///
/// # Errors
/// `io` if the runtime cannot start or the transport fails.
pub fn serve(options: Options) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::new(ErrorCode::Io, format!("async runtime: {e}")))?;
    let server = Server::new(options);
    runtime.block_on(async move {
        let running =
            server.serve(transport::Stdio::new()).await.map_err(|e| Error::new(ErrorCode::Io, format!("mcp: {e}")))?;
        running.waiting().await.map_err(|e| Error::new(ErrorCode::Io, format!("mcp: {e}")))?;
        Ok::<(), Error>(())
    })
}
