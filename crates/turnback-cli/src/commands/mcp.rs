//! `turnback mcp`: the Model Context Protocol server of the `turnback-mcp` crate, on stdio,
//! for the store, workspace and session the global options name.

use turnback::Result;

use crate::ctx::Ctx;
use crate::output::Outcome;

/// Serves MCP on stdin/stdout until the client closes it.
pub fn serve(ctx: &Ctx) -> Result<Outcome> {
    turnback_mcp::serve(ctx.options(true)?)?;
    Ok(Outcome::raw(String::new()))
}
