//! File-system events from `notify`'s recursive watcher, for platforms whose own API
//! watches a whole tree (FSEvents on macOS, `ReadDirectoryChangesW` on Windows). Linux uses
//! [`inotify`](super::inotify) instead; there this module is built only by the tests, so
//! it keeps compiling.
//!
//! Invariants:
//! - Events are counted between `notify`'s thread and the handling one; past
//!   [`MAX_QUEUED`] they are dropped and the loss is reported, in order, before the next
//!   one (memory bounded, never a silent gap).
//! - A rescan the platform asks for is [`Seen::Lost`]; the platform's limit on watches is
//!   a [`Seen::Problem`]; any other error is [`Seen::Lost`].

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::Duration;

use notify::{EventKind, RecursiveMode, Watcher};

use crate::error::{Error, ErrorCode, Result};
use crate::watch::{Seen, Source};

/// Events in flight between `notify`'s thread and the handling thread, at most.
const MAX_QUEUED: usize = 65_536;

enum Msg {
    Event(notify::Result<notify::Event>),
    /// Events were dropped before this point.
    Lost,
}

/// A recursive watch of one workspace.
pub(crate) struct Recursive {
    _watcher: notify::RecommendedWatcher,
    rx: Receiver<Msg>,
    queued: Arc<AtomicUsize>,
}

impl Recursive {
    /// Watches everything under `root` (paths the watcher does not want are dropped when
    /// they are recorded).
    ///
    /// # Errors
    /// `io` if the platform's events are unavailable or `root` cannot be watched.
    pub(crate) fn new(root: &Path) -> Result<Self> {
        let (tx, rx) = std::sync::mpsc::channel::<Msg>();
        let queued = Arc::new(AtomicUsize::new(0));
        let dropped = Arc::new(AtomicBool::new(false));
        let q = queued.clone();
        let handler = move |event: notify::Result<notify::Event>| {
            if q.load(Ordering::SeqCst) >= MAX_QUEUED {
                dropped.store(true, Ordering::SeqCst);
                return;
            }
            if dropped.swap(false, Ordering::SeqCst) {
                q.fetch_add(1, Ordering::SeqCst);
                let _ = tx.send(Msg::Lost);
            }
            q.fetch_add(1, Ordering::SeqCst);
            let _ = tx.send(Msg::Event(event));
        };
        // Symlinks are recorded as links, never followed: nothing outside the tree is watched.
        let config = notify::Config::default().with_follow_symlinks(false);
        let mut watcher = notify::RecommendedWatcher::new(handler, config)
            .map_err(|e| Error::new(ErrorCode::Io, format!("file-system events: {e}")))?;
        watcher
            .watch(root, RecursiveMode::Recursive)
            .map_err(|e| Error::new(ErrorCode::Io, format!("watching the workspace: {e}")))?;
        Ok(Recursive { _watcher: watcher, rx, queued })
    }
}

impl Source for Recursive {
    fn pump(&mut self, wait: Duration, sink: &mut dyn FnMut(Seen<'_>)) {
        let mut msg = match self.rx.recv_timeout(wait) {
            Ok(msg) => msg,
            Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => return,
        };
        loop {
            self.queued.fetch_sub(1, Ordering::SeqCst);
            match msg {
                Msg::Lost => sink(Seen::Lost),
                Msg::Event(Err(e)) if matches!(e.kind, notify::ErrorKind::MaxFilesWatch) => sink(Seen::Problem(
                    "the system's limit on watched directories was reached; snapshots walk the whole tree".into(),
                )),
                Msg::Event(Err(_)) => sink(Seen::Lost),
                Msg::Event(Ok(event)) if event.need_rescan() => sink(Seen::Lost),
                Msg::Event(Ok(event)) if matches!(event.kind, EventKind::Access(_)) => {}
                Msg::Event(Ok(event)) => {
                    for path in &event.paths {
                        sink(Seen::Path(path));
                    }
                }
            }
            match self.rx.try_recv() {
                Ok(next) => msg = next,
                Err(_) => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_is_seen_at_its_path() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let mut source = Recursive::new(&root).unwrap();
        std::fs::write(root.join("f"), "x").unwrap();
        let mut seen = Vec::new();
        for _ in 0..20 {
            source.pump(Duration::from_millis(50), &mut |s| {
                if let Seen::Path(p) = s {
                    seen.push(p.to_path_buf());
                }
            });
            if !seen.is_empty() {
                break;
            }
        }
        assert!(seen.contains(&root.join("f")), "{seen:?}");
    }
}
