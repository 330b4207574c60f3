//! `turnback verify`, `reconcile`, `gc` and `du`.

use turnback::{Result, escape_controls, format_size};

use crate::ctx::Ctx;
use crate::output::{Outcome, exit};

pub fn verify(ctx: &Ctx, deep: bool) -> Result<Outcome> {
    let report = ctx.open(false)?.verify(deep)?;
    let c = &report.counts;
    let mut text = format!(
        "{} {} checkpoints ({} committed, {} pending, {} recovery-locked, {} evicted), {} artifacts, {} objects{}, {} records\n",
        if report.clean { "clean:" } else { "PROBLEMS:" },
        c.checkpoints,
        c.committed,
        c.pending,
        c.recovery_locked,
        c.evicted,
        c.artifacts,
        c.objects,
        if deep { " decrypted" } else { "" },
        c.records,
    );
    for p in &report.problems {
        text.push_str(&format!("  {}: {}: {}\n", p.code, p.what, p.message));
        for a in &p.recovery_actions {
            text.push_str(&format!("    - {a}\n"));
        }
    }
    let code = if report.clean { exit::SUCCESS } else { exit::FAILURE };
    Ok(Outcome::of(&report, text).with_exit(code))
}

pub fn reconcile(ctx: &Ctx) -> Result<Outcome> {
    // Opening runs every recovery; a sync cookie a killed watcher left is removed too.
    let tb = ctx.open(false)?;
    let r = &tb.reconcile()?;
    let mut text = format!(
        "reconciled {} interrupted operation(s); {} in progress, {} awaiting commit, {} temporary file(s) removed\n",
        r.reconciled.len(),
        r.in_progress,
        r.awaiting_commit,
        r.temp_files_removed
    );
    for c in &r.reconciled {
        text.push_str(&format!(
            "  {} -> unreachable, recovery-locked ({})\n",
            c.checkpoint_id,
            c.commit_state.as_str()
        ));
    }
    for f in &r.recovered_files {
        text.push_str(&format!("  kept {f}: it may hold someone else's content\n"));
    }
    Ok(Outcome::of(r, text))
}

pub fn gc(ctx: &Ctx) -> Result<Outcome> {
    let r = ctx.open(false)?.gc()?;
    let text = format!(
        "evicted {} checkpoint(s) past retention ({}), removed {} unreferenced object(s) ({}); store {} -> {}",
        r.eviction.evicted,
        format_size(r.eviction.bytes_freed),
        r.objects_removed,
        format_size(r.object_bytes_removed),
        format_size(r.disk_bytes_before),
        format_size(r.disk_bytes_after)
    );
    Ok(Outcome::of(&r, text))
}

pub fn du(ctx: &Ctx) -> Result<Outcome> {
    let r = ctx.open(false)?.du()?;
    let states: Vec<String> = r.checkpoints.iter().map(|(k, v)| format!("{v} {k}")).collect();
    let mut text = format!(
        "store        {} ({} on disk)\ncontent      {} objects, {} stored for {} of content\ncheckpoints  {} of {} store cap used by retained artifacts ({} artifacts); {}\njournal      {} entries",
        r.store,
        format_size(r.disk_bytes),
        r.objects.count,
        format_size(r.objects.stored_bytes),
        format_size(r.objects.plaintext_bytes),
        format_size(r.checkpoint_artifact_bytes),
        format_size(r.store_cap),
        r.artifacts,
        if states.is_empty() { "none".to_string() } else { states.join(", ") },
        r.journal_entries,
    );
    for s in &r.sessions {
        text.push_str(&format!(
            "\nsession      {}: {} snapshots, {} stored",
            s.session_id,
            s.snapshots,
            format_size(s.stored_bytes)
        ));
        for k in &s.skipped {
            text.push_str(&format!("\n  skipped snapshot {k}"));
        }
        for l in &s.left_out {
            text.push_str(&format!("\n  left out {}", escape_controls(l)));
        }
    }
    Ok(Outcome::of(&r, text))
}
