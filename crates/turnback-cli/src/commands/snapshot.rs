//! `turnback snapshot`.

use serde_json::json;
use turnback::Result;
use turnback::settings::format_size;
use turnback::snapshot::{self, SnapshotKind, TakeOptions};

use crate::app::Ctx;
use crate::output::Outcome;

pub fn take(ctx: &Ctx) -> Result<Outcome> {
    let store = ctx.open(true)?;
    let ws = ctx.workspace(&store)?;
    let session = ctx.session(&store, &ws)?;
    let bar = Progress::new();
    let report = |done: u64, total: u64| bar.show(done, total);
    let opts = TakeOptions { kind: Some(SnapshotKind::AdHoc), progress: Some(&report), ..TakeOptions::default() };
    let r = snapshot::take_with(&store, &ws, &session, &opts);
    bar.clear();
    let r = r?;
    let mut text = match &r.skipped {
        Some(reason) => format!("snapshot {} skipped: {reason}", r.snapshot_id),
        None => format!(
            "snapshot {}: {} files ({}), {} read, {} stored, {} ms",
            r.snapshot_id,
            r.files,
            format_size(r.bytes),
            r.read_files,
            format_size(r.stored_bytes),
            r.duration_ms
        ),
    };
    for n in &r.nested_repos {
        text.push_str(&format!("\n  nested repository {} at {}", n.path, n.commit));
    }
    for s in &r.skipped_paths {
        text.push_str(&format!("\n  left out {}: {}", s.path, s.reason));
    }
    Ok(Outcome::ok(json!(r), text))
}

/// A one-line progress bar on stderr for snapshots that take more than a moment; only on
/// a terminal (never in pipes, logs or `--json` consumers' stderr captures), no colours.
pub struct Progress {
    started: std::time::Instant,
    terminal: bool,
    shown: std::sync::atomic::AtomicBool,
}

impl Progress {
    pub fn new() -> Self {
        use std::io::IsTerminal;
        Progress {
            started: std::time::Instant::now(),
            terminal: std::io::stderr().is_terminal(),
            shown: std::sync::atomic::AtomicBool::new(false),
        }
    }

    pub fn show(&self, done: u64, total: u64) {
        if !self.terminal || total == 0 || self.started.elapsed() < std::time::Duration::from_millis(700) {
            return;
        }
        self.shown.store(true, std::sync::atomic::Ordering::Relaxed);
        let width = 30;
        let filled = (done.min(total) * width / total) as usize;
        eprint!(
            "\rsnapshot [{}{}] {} of {}   ",
            "#".repeat(filled),
            " ".repeat(width as usize - filled),
            format_size(done),
            format_size(total)
        );
    }

    pub fn clear(&self) {
        if self.shown.load(std::sync::atomic::Ordering::Relaxed) {
            eprint!("\r{}\r", " ".repeat(72));
        }
    }
}
