//! `turnback mcp`: the Model Context Protocol on stdio (the official Rust SDK, `rmcp`).
//!
//! Invariants: stdout carries nothing but protocol (every tool's output is returned, never
//! printed); every file tool goes through the same checkpointed mutation path as `turnback
//! fs` and is confined to the workspace (no symlink followed, the store refused); a
//! turnback error is a tool result with `isError` and the stable code, never a crash.
//! Each call opens the store afresh, so other turnback processes (hooks, `run`) share it.

use std::path::PathBuf;

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock, ServerCapabilities, ServerConfig};
use rmcp::{ErrorData, ServerHandler, ServiceExt, tool, tool_handler, tool_router};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use turnback::mutation::{self, Context, Mutation};
use turnback::{Error, ErrorCode, Result};

use crate::app::Ctx;
use crate::cli::{Global, RollbackArgs};
use crate::output::Outcome;

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
    /// Required for apply: the planId of the preview; refused (nothing changed) if anything
    /// moved since.
    #[serde(default)]
    plan_id: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct RewindParams {
    /// Rewind to the start of this turn (1-based index), undoing it and every later turn.
    to: u64,
    /// For apply: the planId of the preview; refused (nothing changed) if anything moved.
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

/// The server: the command line's store, workspace and session options.
#[derive(Debug, Clone)]
pub struct Server {
    global: Global,
    tool_router: ToolRouter<Self>,
}

fn result(r: Result<Outcome>) -> std::result::Result<CallToolResult, ErrorData> {
    Ok(match r {
        Ok(outcome) => {
            let value = if outcome.json.is_object() { outcome.json } else { json!({ "result": outcome.json }) };
            let mut done = CallToolResult::success(vec![ContentBlock::text(value.to_string())]);
            done.structured_content = Some(value);
            done
        }
        Err(e) => CallToolResult::error(vec![ContentBlock::text(format!("{}: {}", e.code, e.message))]),
    })
}

#[tool_router(router = tool_router)]
impl Server {
    fn new(global: Global) -> Self {
        Server { global, tool_router: Self::tool_router() }
    }

    fn ctx(&self) -> Ctx {
        Ctx { global: Global { json: true, ..self.global.clone() } }
    }

    fn mutate(&self, m: Mutation) -> Result<Outcome> {
        let ctx = self.ctx();
        let store = ctx.open(true)?;
        let ws = ctx.workspace(&store)?;
        let session = ctx.session(&store, &ws)?;
        let c = Context { store: &store, workspace: &ws, session: &session, cwd: &ws.root, confirm_unprotected: false };
        let done = mutation::apply(c, m)?;
        let mut json = super::fs::summary_json(&done.checkpoint);
        json["replacements"] = json!(done.replacements);
        Ok(Outcome::ok(json, String::new()))
    }

    /// Reads a text file of the workspace (never through a symlink).
    #[tool(name = "read_file", description = "Read a UTF-8 text file of the workspace.")]
    async fn read_file(&self, Parameters(p): Parameters<PathParams>) -> std::result::Result<CallToolResult, ErrorData> {
        result((|| {
            let ctx = self.ctx();
            let store = ctx.open(true)?;
            let ws = ctx.workspace(&store)?;
            let rel = ws.resolve(&PathBuf::from(&p.path), &ws.root, store.protected_paths())?;
            let parent = turnback::files::open_parent(&ws.root, &rel, false)?;
            match parent.read()? {
                turnback::files::Current::File { bytes, .. } => {
                    let content =
                        String::from_utf8(bytes).map_err(|_| Error::invalid(format!("{}: not UTF-8 text", p.path)))?;
                    Ok(Outcome::ok(json!({ "path": rel.display(), "content": content }), String::new()))
                }
                turnback::files::Current::Absent => Err(Error::not_found(format!("{}: no such file", p.path))),
            }
        })())
    }

    /// Creates a file (it must not exist), with a checkpoint.
    #[tool(
        name = "create_file",
        description = "Create a new file in the workspace (fails if it exists); checkpointed, so it can be rolled back."
    )]
    async fn create_file(
        &self,
        Parameters(p): Parameters<ContentParams>,
    ) -> std::result::Result<CallToolResult, ErrorData> {
        result(self.mutate(Mutation::Create { path: p.path.into(), content: p.content.into_bytes() }))
    }

    /// Creates or overwrites a file, with a checkpoint.
    #[tool(
        name = "write_file",
        description = "Create or overwrite a file in the workspace; checkpointed, so it can be rolled back."
    )]
    async fn write_file(
        &self,
        Parameters(p): Parameters<ContentParams>,
    ) -> std::result::Result<CallToolResult, ErrorData> {
        result(self.mutate(Mutation::Write { path: p.path.into(), content: p.content.into_bytes() }))
    }

    /// Replaces exact text in a file, with a checkpoint.
    #[tool(
        name = "edit_file",
        description = "Replace an exact string in a file (once, unless replace_all); checkpointed."
    )]
    async fn edit_file(&self, Parameters(p): Parameters<EditParams>) -> std::result::Result<CallToolResult, ErrorData> {
        result(self.mutate(Mutation::Edit {
            path: p.path.into(),
            old: p.old_string,
            new: p.new_string,
            all: p.replace_all,
        }))
    }

    /// Deletes a file, with a checkpoint.
    #[tool(name = "delete_file", description = "Delete a file of the workspace; checkpointed, so it can be restored.")]
    async fn delete_file(
        &self,
        Parameters(p): Parameters<PathParams>,
    ) -> std::result::Result<CallToolResult, ErrorData> {
        result(self.mutate(Mutation::Delete { path: p.path.into() }))
    }

    /// The session's turns.
    #[tool(
        name = "list_turns",
        description = "The session's turns: index, turnId, kind, preview, startedAt, snapshots."
    )]
    async fn list_turns(&self) -> std::result::Result<CallToolResult, ErrorData> {
        result(super::turn::list(&self.ctx()))
    }

    /// The session's checkpoints.
    #[tool(name = "list_checkpoints", description = "The session's checkpoints, optionally of one turn.")]
    async fn list_checkpoints(
        &self,
        Parameters(p): Parameters<TurnParams>,
    ) -> std::result::Result<CallToolResult, ErrorData> {
        result(super::checkpoints::list(&self.ctx(), p.turn, false))
    }

    /// Previews a rollback: every target's outcome and a planId.
    #[tool(
        name = "rollback_preview",
        description = "Preview taking checkpointed changes back (by ids, a turn, or since a turn): every file's outcome (eligible, conflict with reason, ...) and a planId. Changes nothing."
    )]
    async fn rollback_preview(
        &self,
        Parameters(p): Parameters<RollbackParams>,
    ) -> std::result::Result<CallToolResult, ErrorData> {
        result(self.rollback(p, false))
    }

    /// Applies a rollback; never overwrites work done since.
    #[tool(
        name = "rollback_apply",
        description = "Apply a rollback previewed with rollback_preview (pass its planId): takes back only what is exactly the agent's result, leaves conflicts alone, and is itself undoable."
    )]
    async fn rollback_apply(
        &self,
        Parameters(p): Parameters<RollbackParams>,
    ) -> std::result::Result<CallToolResult, ErrorData> {
        result(self.rollback(p, true))
    }

    fn rollback(&self, p: RollbackParams, apply: bool) -> Result<Outcome> {
        if apply && p.plan_id.is_none() {
            return Err(Error::invalid("preview first: pass the planId that rollback_preview returned"));
        }
        let args = RollbackArgs {
            command: None,
            ids: p.checkpoint_ids,
            turn: p.turn,
            since_turn: p.since_turn,
            apply,
            plan: p.plan_id,
            choose: Vec::new(),
        };
        super::rollback::run(&self.ctx(), args)
    }

    /// Previews a rewind to the start of a turn.
    #[tool(
        name = "rewind_preview",
        description = "Preview taking the whole workspace back to the start of a turn: files to restore, delete and leave alone (hand edits), and a planId. Changes nothing."
    )]
    async fn rewind_preview(
        &self,
        Parameters(p): Parameters<RewindParams>,
    ) -> std::result::Result<CallToolResult, ErrorData> {
        result(super::rewind::run(&self.ctx(), p.to, false, None, Vec::new()))
    }

    /// Applies a rewind.
    #[tool(
        name = "rewind_apply",
        description = "Apply a rewind previewed with rewind_preview (pass its planId); hand edits are left alone; undoable through its checkpoint."
    )]
    async fn rewind_apply(
        &self,
        Parameters(p): Parameters<RewindParams>,
    ) -> std::result::Result<CallToolResult, ErrorData> {
        if p.plan_id.is_none() {
            return result(Err(Error::invalid("preview first: pass the planId that rewind_preview returned")));
        }
        result(super::rewind::run(&self.ctx(), p.to, true, p.plan_id, Vec::new()))
    }

    /// What a turn changed.
    #[tool(
        name = "diff_turn",
        description = "What a turn changed: added, modified, deleted paths with line counts, and optionally the unified diff."
    )]
    async fn diff_turn(&self, Parameters(p): Parameters<DiffParams>) -> std::result::Result<CallToolResult, ErrorData> {
        result(super::diff::run(&self.ctx(), p.turn, None, None, !p.patch, false))
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Server {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build()).with_instructions(
            "turnback: checkpointed file tools for this workspace, and undo: list_turns, \
             list_checkpoints, rollback_preview/rollback_apply, rewind_preview/rewind_apply, diff_turn.",
        )
    }
}

/// Serves MCP on stdin/stdout until the client closes it.
pub fn serve(ctx: &Ctx) -> Result<Outcome> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::new(ErrorCode::Io, format!("async runtime: {e}")))?;
    let server = Server::new(ctx.global.clone());
    runtime.block_on(async move {
        let running =
            server.serve(rmcp::transport::stdio()).await.map_err(|e| Error::new(ErrorCode::Io, format!("mcp: {e}")))?;
        running.waiting().await.map_err(|e| Error::new(ErrorCode::Io, format!("mcp: {e}")))?;
        Ok::<(), Error>(())
    })?;
    Ok(Outcome::raw(String::new()))
}
