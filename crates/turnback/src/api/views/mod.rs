//! Views: what the facade returns of the store's records, and what `--json` and the MCP
//! server serialize (with their JSON Schemas).
//!
//! Invariants:
//! - A view is made from its record ([`From`]) at the facade and never stored: the sealed
//!   records (`pub(crate)` in their layers) may change their layout with a format version
//!   while a view keeps its shape, and a view may leave out what only the library needs
//!   (a snapshot's watcher mark).
//! - Closed vocabularies (the kinds and states, [`LeftOut`](crate::LeftOut),
//!   [`NestedRepo`](crate::NestedRepo), [`Skipped`](crate::Skipped)) are shared: their
//!   names are the same words in a record and in its view.

mod checkpoint;
#[cfg(feature = "remote")]
mod remote;
mod session;
mod snapshot;
mod turn;

pub use checkpoint::{Checkpoint, Image, JournalEntry, MutationMetadata, ShellCall, SubagentWindow, Target};
#[cfg(feature = "remote")]
pub use remote::Remote;
pub use session::{Forked, Session, Workspace};
pub use snapshot::Snapshot;
pub use turn::{Begun, RewoundBy, ShellEffect, SnapshotRef, Subagent, Turn};
