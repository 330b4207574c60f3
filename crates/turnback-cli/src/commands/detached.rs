//! `turnback __turn-snapshot --turn ID`: the detached process that takes a turn's start
//! snapshot. `turn begin` (and every entry point that begins turns) spawns it through
//! [`crate::runtime`] in its own process group and waits for it only so long; the child
//! finishes the snapshot whatever happens to its parent, and the snapshot attaches itself
//! to the turn when it commits.

use turnback::Result;

use crate::ctx::Ctx;
use crate::output::Outcome;

/// `turnback __turn-snapshot --turn ID`: the child's side.
pub fn take(ctx: &Ctx, turn_id: &str) -> Result<Outcome> {
    let r = ctx.open(true)?.take_turn_start_snapshot(turn_id)?;
    let text = r.snapshot_id.clone();
    Ok(Outcome::of(&r, text))
}
