//! Library integration tests: one binary, one module per behaviour area.

pub(crate) mod common;
mod test_fuzz;
mod test_integrity;
mod test_mutations;
mod test_rewind_property;
mod test_rollback_property;
mod test_shell_property;
mod test_snapshot;
mod test_store;
mod test_undo_rules;
mod test_watch_property;
