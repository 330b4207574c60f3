//! `turnback remote add|list|remove`, `push`, `pull`, `session list --remote` and
//! `gc --remote`.

use turnback::{Result, SessionChoice, format_ms, format_size};

use crate::cli::RemoteCommand;
use crate::ctx::Ctx;
use crate::output::{Outcome, Progress};

pub fn run(ctx: &Ctx, command: RemoteCommand) -> Result<Outcome> {
    match command {
        RemoteCommand::Add { name, url, endpoint, region } => {
            let r = ctx.open(true)?.remote_add(&name, &url, endpoint.as_deref(), region.as_deref())?;
            let text = format!("remote {} -> {}{}", r.name, r.url, endpoint_text(r.endpoint.as_deref()));
            Ok(Outcome::of(&r, text))
        }
        RemoteCommand::List => {
            let list = ctx.open(false)?.remotes()?;
            let mut text = String::new();
            for r in &list.remotes {
                text.push_str(&format!("{}  {}{}\n", r.name, r.url, endpoint_text(r.endpoint.as_deref())));
            }
            if list.remotes.is_empty() {
                text.push_str("no remotes\n");
            }
            Ok(Outcome::of(&list, text))
        }
        RemoteCommand::Remove { name } => {
            let r = ctx.open(false)?.remote_remove(&name)?;
            let text = format!("removed remote {} (the bucket was not touched)", r.name);
            Ok(Outcome::of(&r, text))
        }
    }
}

fn endpoint_text(endpoint: Option<&str>) -> String {
    endpoint.map(|e| format!("  (endpoint {e})")).unwrap_or_default()
}

fn choice(ctx: &Ctx, all: bool) -> SessionChoice {
    match (all, &ctx.global.session) {
        (true, _) => SessionChoice::All,
        (false, Some(id)) => SessionChoice::One(id.clone()),
        (false, None) => SessionChoice::Current,
    }
}

pub fn push(ctx: &Ctx, name: Option<&str>, all: bool) -> Result<Outcome> {
    let tb = ctx.open(false)?;
    let bar = Progress::labelled("push");
    let started = std::time::Instant::now();
    let reports = tb.push(name, &choice(ctx, all), &|done, total| bar.show(done, total));
    bar.clear();
    let reports = reports?;
    let mut text = String::new();
    for r in &reports.pushed {
        text.push_str(&format!(
            "pushed {} to {}: {} turns; {} of {} objects uploaded in {} packs, {} turn records; {} sent\n",
            r.session,
            r.remote,
            r.turns,
            r.objects_uploaded,
            r.objects,
            r.packs_uploaded,
            r.records_uploaded,
            format_size(r.bytes_uploaded)
        ));
    }
    text.push_str(&format!("took {:.2} s", started.elapsed().as_secs_f64()));
    Ok(Outcome::of(&reports, text))
}

pub fn pull(ctx: &Ctx, name: Option<&str>, all: bool) -> Result<Outcome> {
    let tb = ctx.open(true)?;
    let bar = Progress::labelled("pull");
    let reports = tb.pull(name, &choice(ctx, all), &|done, total| bar.show(done, total));
    bar.clear();
    let reports = reports?;
    let mut text = String::new();
    for r in &reports.pulled {
        text.push_str(&format!(
            "pulled {} from {}: {} turns ({} new); {} objects stored of {} reached; {} received\n",
            r.session,
            r.remote,
            r.turns,
            r.turns_added,
            r.objects_stored,
            r.objects,
            format_size(r.bytes_downloaded)
        ));
    }
    if reports.pulled.is_empty() {
        text.push_str("nothing to pull\n");
    }
    Ok(Outcome::of(&reports, text))
}

pub fn sessions(ctx: &Ctx, name: &str) -> Result<Outcome> {
    let list = ctx.open(false)?.remote_sessions(Some(name))?;
    let mut text = String::new();
    for s in &list.sessions {
        let agent = s.agent.as_deref().map(|a| format!("  agent {a}")).unwrap_or_default();
        text.push_str(&format!(
            "{}  {} turns  created {}  pushed {}{agent}\n",
            s.id,
            s.turns,
            s.created_at,
            format_ms(s.pushed_at)
        ));
    }
    if list.sessions.is_empty() {
        text.push_str(&format!("no sessions on {}\n", list.remote));
    }
    Ok(Outcome::of(&list, text))
}

pub fn gc(ctx: &Ctx, name: &str, grace_secs: Option<u64>) -> Result<Outcome> {
    let grace = grace_secs.map(std::time::Duration::from_secs);
    let r = ctx.open(false)?.gc_remote(Some(name), grace)?;
    let text = format!(
        "removed {} object(s) ({}) from {} that no manifest names; kept {} ({} unnamed but younger than the grace period)",
        r.deleted,
        format_size(r.bytes),
        r.remote,
        r.kept,
        r.kept_young
    );
    Ok(Outcome::of(&r, text))
}
