//! turnback: undo for AI coding agents.
//!
//! This crate holds every behaviour; the `turnback` command line is a thin layer over it.
//! It records each file mutation an agent makes as a [`checkpoint`] with encrypted pre-
//! and post-images, keeps everything in one encrypted, crash-consistent [`store`], and
//! verifies every read.
//!
//! ```no_run
//! use turnback::{Store, StoreOptions, Workspace, Session, mutation};
//! # fn main() -> turnback::Result<()> {
//! let store = Store::open(&StoreOptions { create: true, ..StoreOptions::new("/tmp/tb-store") })?;
//! let ws = Workspace::ensure(&store, std::path::Path::new("."))?;
//! let session = Session::resolve(&store, &ws, None)?;
//! let ctx = mutation::Context { store: &store, workspace: &ws, session: &session,
//!                               cwd: &ws.root, confirm_unprotected: false };
//! let done = mutation::apply(ctx, mutation::Mutation::Write { path: "notes.txt".into(), content: b"hi\n".to_vec() })?;
//! println!("checkpoint {}", done.checkpoint.checkpoint_id);
//! # Ok(()) }
//! ```
#![deny(missing_docs)]

pub mod artifact;
pub mod checkpoint;
pub mod crypto;
pub mod diff;
pub mod error;
pub mod failpoint;
pub mod files;
pub mod fork;
pub mod handles;
pub mod history;
pub mod journal;
pub mod keys;
pub mod kv;
pub mod lock;
pub mod maintenance;
pub mod mutation;
pub mod object;
pub mod pack;
pub mod patch;
pub mod redact;
pub mod retention;
pub mod rewind;
pub mod rollback;
pub mod session;
pub mod settings;
pub mod snapshot;
pub mod statcache;
pub mod store;
pub mod transcript;
pub mod tree;
pub mod turn;
mod varint;
pub mod walk;
pub mod workspace;

pub use error::{Error, ErrorCode, Result};
pub use session::Session;
pub use store::{Store, StoreOptions};
pub use workspace::{RelPath, Workspace};
