//! The command line's entry: parsing the arguments, dispatching to the command they name,
//! and turning its result into output and an exit code.
//!
//! Invariants: this is the only module that names every command, and no command imports
//! it (what a command needs from the command line is [`crate::ctx::Ctx`]); a usage error is
//! reported as `--json` asks, like any other error.

use clap::Parser;
use turnback::{Error, Result};

use crate::cli::{Cli, Command};
use crate::commands;
use crate::ctx::Ctx;
use crate::output::{self, Outcome};

/// Parses the command line, runs the command, prints, and returns the exit code.
pub fn run() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => {
            // --help and --version.
            let _ = e.print();
            return output::exit::SUCCESS;
        }
        Err(e) => {
            if std::env::args_os().any(|a| a == "--json") {
                let rendered = e.render().to_string();
                let head = rendered.split("\n\n").next().unwrap_or_default();
                let message = head.trim_start_matches("error: ").split_whitespace().collect::<Vec<_>>().join(" ");
                let err = Error::invalid(message).with_details(serde_json::json!({ "usage": rendered }));
                return output::print_error(&err, true);
            }
            let _ = e.print();
            return output::exit::USAGE;
        }
    };
    let json = cli.global.json;
    let ctx = Ctx { global: cli.global };
    match dispatch(&ctx, cli.command) {
        Ok(outcome) => output::print(&outcome, json),
        Err(e) => output::print_error(&e, json),
    }
}

fn dispatch(ctx: &Ctx, command: Command) -> Result<Outcome> {
    match command {
        Command::Init => commands::init::run(ctx),
        Command::Fs(fs) => commands::fs::run(ctx, fs),
        Command::Stage { paths, kind, confirm_unprotected } => {
            commands::fs::stage(ctx, &paths, kind.as_deref(), confirm_unprotected)
        }
        Command::Commit { operation_id, failed } => commands::fs::commit(ctx, &operation_id, failed),
        Command::Snapshot { full } => commands::snapshot::take(ctx, full),
        Command::Watch(w) => commands::watch::run(ctx, w),
        Command::Diff { turn, from, to, stat, numstat } => commands::diff::run(ctx, turn, from, to, stat, numstat),
        Command::Compare { session_a, session_b, turn, patch } => {
            commands::compare::run(ctx, session_a, session_b, turn, patch)
        }
        Command::Ui => commands::ui::run(ctx),
        Command::Session(c) => commands::session::run(ctx, c),
        Command::Turn(t) => commands::turn::run(ctx, t),
        Command::Turns => commands::turn::list(ctx),
        Command::History(h) => commands::history::run(ctx, h),
        Command::Run { prompt, wait_ms, command } => commands::run::run(ctx, prompt, wait_ms, &command),
        Command::Hook { agent } => Ok(commands::hook::run(ctx, agent)),
        Command::Install { agent, scope, uninstall, follow_symlinks } => {
            commands::install::run(ctx, agent, scope, uninstall, follow_symlinks)
        }
        Command::Demo => commands::demo::run(),
        Command::Mcp => commands::mcp::serve(ctx),
        Command::Completions { shell } => {
            let mut cmd = <Cli as clap::CommandFactory>::command();
            let mut out = Vec::new();
            clap_complete::generate(shell, &mut cmd, "turnback", &mut out);
            Ok(Outcome::raw(String::from_utf8_lossy(&out).into_owned()))
        }
        Command::TurnSnapshot { turn } => commands::detached::take(ctx, &turn),
        Command::Rollback(args) => commands::rollback::run(ctx, args),
        Command::Rewind { to, apply, plan, force } => commands::rewind::run(ctx, to, apply, plan, force),
        Command::Checkpoints { turn, all } => commands::checkpoints::list(ctx, turn, all),
        Command::Inspect { id } => commands::checkpoints::inspect(ctx, &id),
        Command::Doctor => commands::doctor::run(ctx),
        Command::Verify { deep } => commands::maintenance::verify(ctx, deep),
        Command::Reconcile => commands::maintenance::reconcile(ctx),
        #[cfg(feature = "remote")]
        Command::Gc { remote: Some(name), grace_secs } => commands::remote::gc(ctx, &name, grace_secs),
        Command::Gc { .. } => commands::maintenance::gc(ctx),
        #[cfg(feature = "remote")]
        Command::Remote(r) => commands::remote::run(ctx, r),
        #[cfg(feature = "remote")]
        Command::Push { name, all } => commands::remote::push(ctx, name.as_deref(), all),
        #[cfg(feature = "remote")]
        Command::Pull { name, all } => commands::remote::pull(ctx, name.as_deref(), all),
        Command::Du => commands::maintenance::du(ctx),
        Command::Key(k) => commands::key::run(ctx, k),
    }
}
