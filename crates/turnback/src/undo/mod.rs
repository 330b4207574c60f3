//! The undo layer: taking work back without overwriting anyone else's — the per-edit
//! rollback planner, the per-turn rewind planner, and the safe choices' patches.

pub(crate) mod guarded;
pub mod patch;
pub mod rewind;
pub mod rollback;

use crate::checkpoint::Origin;
use crate::error::{Error, Result};
use crate::session::Session;
use crate::session::workspace::Workspace;
use crate::storage::store::Store;

/// Where the checkpoint of an undo (rollback, rewind, resolution) comes from: its session
/// at the current prompt round.
pub(crate) fn undo_origin<'a>(store: &Store, session: &'a Session, ws: &'a Workspace) -> Result<Origin<'a>> {
    let round =
        Session::round_of(store, &session.id)?.ok_or_else(|| Error::not_found(format!("session {}", session.id)))?;
    Ok(Origin { session_id: &session.id, workspace_id: &ws.id, prompt_round: round, subagent: None })
}
