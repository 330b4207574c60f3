//! Shared plumbing of every command: parsing, opening turnback on the store, workspace and
//! session the global options name, and turning results into output and exit codes.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use turnback::{Error, ErrorCode, Options, Result, Runtime, SettingsOverrides, Turnback};

use crate::cli::{Cli, Command, Global};
use crate::commands;
use crate::output::{self, Outcome};

/// Everything a command needs from the command line.
#[derive(Debug)]
pub struct Ctx {
    pub global: Global,
}

impl Ctx {
    /// The options the global flags say: `--store`, `--workspace` (default: the current
    /// directory), `--session`, the settings flags; keys from the environment.
    pub fn options(&self, create: bool) -> Result<Options> {
        let cwd = cwd()?;
        let workspace = self.global.workspace.clone().unwrap_or_else(|| cwd.clone());
        Ok(Options {
            store: self.global.store.clone(),
            cwd: Some(cwd),
            session: self.global.session.clone(),
            settings: SettingsOverrides {
                retention_prompt_rounds: self.global.retention_rounds,
                checkpoint_cap: self.global.checkpoint_cap.clone(),
                store_cap: self.global.store_cap.clone(),
            },
            create,
            runtime: runtime(&self.store_dir()?)?,
            ..Options::new(workspace)
        })
    }

    /// Opens turnback (recovering what crashed processes left); `create` makes the store
    /// if it is missing.
    pub fn open(&self, create: bool) -> Result<Turnback> {
        Turnback::open(&self.options(create)?)
    }

    /// Opens turnback so that turn begins wait for their start snapshot (taken in a
    /// detached process) at most `wait`.
    pub fn open_for_turns(&self, wait: Duration) -> Result<Turnback> {
        open_for_turns(&self.options(true)?, wait)
    }

    /// The store directory, whether or not a store is there yet.
    pub fn store_dir(&self) -> Result<PathBuf> {
        match &self.global.store {
            Some(d) if d.is_absolute() => Ok(d.clone()),
            Some(d) => Ok(cwd()?.join(d)),
            None => turnback::default_store_dir()
                .ok_or_else(|| Error::invalid("no store directory: set TURNBACK_HOME or HOME, or pass --store")),
        }
    }
}

/// How long a turn begin waits for its start snapshot unless told otherwise (an MCP
/// `begin_turn`; an agent's hook waits as long).
pub const START_WAIT: Duration = Duration::from_millis(1500);

/// The command line's [`Runtime`]: start snapshots, watchers and auto-pushes each run as a
/// detached process of this executable on the store at `store`, so none of them holds up
/// the agent or the person, and each finishes after this process exits.
pub fn runtime(store: &std::path::Path) -> Result<Runtime> {
    let starter = Arc::new(commands::detached::DetachedSnapshot::new(store)?);
    let watcher = Arc::new(commands::watch::DetachedWatcher::new(store)?);
    let runtime = Runtime::default().with_start_snapshot(starter, START_WAIT).with_watcher(watcher);
    #[cfg(feature = "remote")]
    let runtime = runtime.with_push(Arc::new(commands::remote::DetachedPush::new()?));
    Ok(runtime)
}

/// Opens turnback with `options`, turn begins waiting for their start snapshot at most
/// `wait`.
pub fn open_for_turns(options: &Options, wait: Duration) -> Result<Turnback> {
    Turnback::open(&Options { runtime: options.runtime.clone().waiting(wait), ..options.clone() })
}

pub fn cwd() -> Result<PathBuf> {
    std::env::current_dir().map_err(|e| Error::new(ErrorCode::Io, format!("current directory: {e}")))
}

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
