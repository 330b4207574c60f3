//! What happens around a turn in the background, and how a door runs it: one [`Runtime`]
//! value each door (the command line and its hooks, the MCP server, a program using the
//! library) hands to [`Turnback::open`](crate::Turnback::open) in its
//! [`Options`](crate::Options). The library decides *when* — the bounded start snapshot at
//! every turn begin, a watcher started when `[snapshots] watch = "auto"` and none runs, a
//! push to the `[remote] auto-push` remote at every turn end (`turn end`, an agent's stop
//! or session end, `run`, MCP `end_turn`) — and the runtime only *how*.
//!
//! Invariants:
//! - A door never re-implements when: it installs parts of a runtime, never calls them.
//! - Without a part, the library does that work in the caller's process (the start
//!   snapshot, unbounded), or not at all (no watcher is started; no push is made).
//! - A push never fails or delays the turn end that asked for it: it is started, and
//!   whatever becomes of it is the runtime's to report (the command line's log).

use std::sync::Arc;
use std::time::Duration;

use crate::error::Result;
use crate::session::begin::StartSnapshot;
use crate::watch::StartWatcher;

/// Pushes a session to a remote in the background.
pub trait Push {
    /// Starts pushing session `session` of the store at `store_dir` to the remote named
    /// `remote`; returns once it is started, without waiting for it.
    ///
    /// # Errors
    /// When it cannot be started (the library notes nothing of it: the turn has ended).
    fn push(&self, store_dir: &std::path::Path, remote: &str, session: &str) -> Result<()>;
}

/// How a door runs the background work around turns. `Runtime::default()` is none of it:
/// start snapshots in the caller's process, no watcher, no push.
#[derive(Clone, Default)]
pub struct Runtime {
    pub(crate) start_snapshot: Option<(Arc<dyn StartSnapshot + Send + Sync>, Duration)>,
    pub(crate) watcher: Option<Arc<dyn StartWatcher + Send + Sync>>,
    pub(crate) push: Option<Arc<dyn Push + Send + Sync>>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("start_snapshot_wait", &self.start_snapshot.as_ref().map(|(_, wait)| wait))
            .field("watcher", &self.watcher.is_some())
            .field("push", &self.push.is_some())
            .finish()
    }
}

impl Runtime {
    /// Takes turn start snapshots with `starter` (somewhere they can finish after the
    /// begin stopped waiting), waiting for one at most `wait`: past that the turn goes on,
    /// its snapshot marked late, and the snapshot attaches itself when it commits.
    pub fn with_start_snapshot(mut self, starter: Arc<dyn StartSnapshot + Send + Sync>, wait: Duration) -> Self {
        self.start_snapshot = Some((starter, wait));
        self
    }

    /// The same start snapshots, waited for at most `wait` (a door whose caller is in a
    /// hurry: an agent's hook).
    pub fn waiting(mut self, wait: Duration) -> Self {
        if let Some((_, w)) = self.start_snapshot.as_mut() {
            *w = wait;
        }
        self
    }

    /// Starts file watchers with `starter`.
    pub fn with_watcher(mut self, starter: Arc<dyn StartWatcher + Send + Sync>) -> Self {
        self.watcher = Some(starter);
        self
    }

    /// Pushes sessions at turn ends with `push`.
    pub fn with_push(mut self, push: Arc<dyn Push + Send + Sync>) -> Self {
        self.push = Some(push);
        self
    }
}
