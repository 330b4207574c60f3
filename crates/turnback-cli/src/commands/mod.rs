//! One module per command group.

pub mod checkpoints;
pub mod compare;
pub mod demo;
pub mod detached;
pub mod diff;
pub mod doctor;
pub mod fs;
pub mod history;
pub mod hook;
pub mod init;
pub mod install;
pub mod key;
pub mod maintenance;
pub mod mcp;
#[cfg(feature = "remote")]
pub mod remote;
pub mod rewind;
pub mod rollback;
pub mod run;
pub mod session;
pub mod snapshot;
pub mod turn;
pub mod ui;
pub mod watch;
