//! `turnback snapshot`.

use turnback::{Result, escape_controls, format_size, quote_name};

use crate::ctx::Ctx;
use crate::output::{Outcome, Progress, left_out};

pub fn take(ctx: &Ctx, full: bool) -> Result<Outcome> {
    let tb = ctx.open(true)?;
    let r = Progress::during(|report| if full { tb.snapshot_full(Some(report)) } else { tb.snapshot(Some(report)) })?;
    let mut text = match &r.skipped {
        Some(reason) => format!("snapshot {} skipped: {}", r.snapshot_id, escape_controls(reason)),
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
    if r.watched {
        text.push_str(" (from the watcher's changes)");
    }
    for n in &r.nested_repos {
        let (path, commit) = (quote_name(n.path.as_bytes()), escape_controls(&n.commit));
        text.push_str(&format!("\n  nested repository {path} at {commit}"));
    }
    for s in &r.skipped_paths {
        text.push_str(&format!("\n  left out {}", left_out(&s.path, &s.reason)));
    }
    for l in &r.left_out {
        text.push_str(&format!("\n  left out {}", left_out(&l.path, &l.reason)));
    }
    if let Some(why) = &r.stat_cache_dropped {
        text.push_str(&format!("\n  {why}"));
    }
    Ok(Outcome::of(&r, text))
}
