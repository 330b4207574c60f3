//! The undo layer: taking work back without overwriting anyone else's — the per-edit
//! rollback planner, the per-turn rewind planner, and the safe choices' patches.

pub mod patch;
pub mod rewind;
pub mod rollback;
