//! The undo layer: taking work back without overwriting anyone else's — the per-edit
//! rollback planner, the per-turn rewind planner, and the safe choices' patches.

mod batch;
pub(crate) mod guarded;
pub(crate) mod patch;
pub(crate) mod rewind;
pub(crate) mod rollback;

use crate::checkpoint::Origin;
use crate::error::Result;
use crate::session::Session;
use crate::session::workspace::Workspace;
use crate::storage::kv::Txn;
use crate::storage::store::Store;

/// Where the checkpoint of an undo (rollback, rewind, resolution) comes from: its session,
/// at the round current when the checkpoint is staged. `round` must outlive the origin.
pub(crate) fn undo_origin<'a>(
    session: &'a Session,
    ws: &'a Workspace,
    round: &'a dyn Fn(&mut dyn Txn) -> Result<u64>,
) -> Origin<'a> {
    Origin { session_id: &session.id, workspace_id: &ws.id, prompt_round: round, subagent: None }
}

/// Reads `session`'s round inside a staging transaction.
pub(crate) fn round_reader<'a>(store: &'a Store, session: &'a Session) -> impl Fn(&mut dyn Txn) -> Result<u64> + 'a {
    move |txn| Session::round_in(store, txn, &session.id)
}
