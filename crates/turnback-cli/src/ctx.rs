//! What every command needs from the command line: the global options, and turnback opened
//! on the store, workspace and session they name.
//!
//! Invariants: a command reaches the store only through [`Ctx`], so every door of the
//! command line opens it with the same options and the same [`Runtime`](turnback::Runtime)
//! (the detached processes of [`crate::runtime`]); nothing here prints or exits. This module
//! imports no command and no dispatcher: commands import it, never the other way round.

use std::path::PathBuf;
use std::time::Duration;

use turnback::{Error, ErrorCode, Options, Result, SettingsOverrides, Turnback};

use crate::cli::Global;

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
            runtime: crate::runtime::detached(&self.store_dir()?)?,
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

/// Opens turnback with `options`, turn begins waiting for their start snapshot at most
/// `wait`.
pub fn open_for_turns(options: &Options, wait: Duration) -> Result<Turnback> {
    Turnback::open(&Options { runtime: options.runtime.clone().waiting(wait), ..options.clone() })
}

/// The current directory, as an error with a code when it is gone.
pub fn cwd() -> Result<PathBuf> {
    std::env::current_dir().map_err(|e| Error::new(ErrorCode::Io, format!("current directory: {e}")))
}
