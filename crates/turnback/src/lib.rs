//! turnback: undo for AI coding agents.
//!
//! This crate holds every behaviour; the `turnback` command line is a thin layer over it.
#![deny(missing_docs)]

pub mod error;

mod api;
mod base;
pub mod checkpoint;
mod fs;
pub mod session;
pub mod snapshot;
mod storage;
mod undo;

// Transitional paths (the layers above are the real home).
pub use api::{maintenance, mutation};
pub use base::{failpoint, redact};
pub use checkpoint::{artifact, journal, retention};
pub use fs::{files, handles, lock, walk};
pub use session::{fork, history, transcript, turn, workspace};
pub use snapshot::{diff, statcache, tree};
pub use storage::{crypto, keys, kv, object, pack, settings, store};
pub use undo::{patch, rewind, rollback};

pub use error::{Error, ErrorCode, Result};
pub use session::Session;
pub use session::workspace::{RelPath, Workspace};
pub use storage::store::{Store, StoreOptions};
