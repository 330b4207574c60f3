//! Integration tests of the `turnback` binary: every test runs the real command line in
//! its own hermetic temporary environment (workspace, store, config and home directories).

mod common;
mod test_agents;
mod test_canary;
mod test_checkpoints;
mod test_claude_code;
mod test_compare;
mod test_crash;
mod test_doors;
mod test_entry_points;
mod test_fuzz_mcp;
mod test_history;
mod test_importers;
mod test_integrations;
mod test_integrity;
mod test_keys;
mod test_large_files;
mod test_remote;
mod test_repository;
mod test_rewind;
mod test_rollback;
mod test_session_agent;
mod test_sessions;
mod test_shell_checkpoints;
mod test_snapshot_hardening;
mod test_surface;
mod test_text;
mod test_turns;
mod test_ui;
mod test_watch;
mod test_writes;
