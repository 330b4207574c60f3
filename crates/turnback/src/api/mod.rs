//! The API layer: the facade every entry point calls.

pub mod maintenance;
pub mod mutation;
