//! `turnback checkpoints` and `turnback inspect`.

use serde_json::json;
use turnback::artifact::{self, ImageRole};
use turnback::checkpoint::{self, CheckpointRecord, EXCLUDED_EFFECTS, ImageRecord, ListFilter};
use turnback::settings::format_size;
use turnback::{Result, Session};

use crate::app::Ctx;
use crate::commands::fs::effect_word;
use crate::output::{Outcome, short};

pub fn list(ctx: &Ctx, turn: Option<u64>, all: bool) -> Result<Outcome> {
    let store = ctx.open(false)?;
    let ws = ctx.workspace(&store)?;
    let session = ctx.session(&store, &ws)?;
    let records = checkpoint::list(&store, &session, ListFilter { prompt_round: turn, all })?;
    let window = store.settings().retention_prompt_rounds;
    let mut items = Vec::new();
    let mut text = format!("session {} (prompt round {})\n", session.id, session.prompt_round);
    if records.is_empty() {
        text.push_str("no checkpoints\n");
    }
    for r in &records {
        let verdict = r.retention(session.prompt_round, window);
        let mut item = serde_json::to_value(r).expect("records serialize");
        item["effectiveRetention"] = json!(r.effective_retention(&verdict));
        item["retention"] = json!(verdict);
        items.push(item);
        let targets: Vec<String> =
            r.targets.iter().map(|t| format!("{} {}", effect_word(t.effect), t.path.display())).collect();
        text.push_str(&format!(
            "{}  round {:<3} {:<11} {:<10} {}\n",
            r.checkpoint_id,
            r.prompt_round.unwrap_or(0),
            r.stage_state.as_str(),
            r.effective_retention(&verdict).as_str(),
            targets.join(", ")
        ));
    }
    Ok(Outcome::ok(json!({ "sessionId": session.id, "checkpoints": items }), text))
}

fn image_text(label: &str, image: &ImageRecord) -> String {
    if !image.present {
        return format!("{label} absent");
    }
    let class = image.content_class.map(|c| c.as_str()).unwrap_or("?");
    let digest = image.digest.as_deref().map(short).unwrap_or("none");
    let stored = if image.artifact_id.is_some() { "" } else { ", NOT STORED" };
    format!("{label} {} ({class}, digest {digest}{stored})", format_size(image.size))
}

pub fn inspect(ctx: &Ctx, id: &str) -> Result<Outcome> {
    let store = ctx.open(false)?;
    let record = checkpoint::load(&store, id)?;
    let usable = checkpoint::get(&store, id).err();
    let round = Session::get(&store, &record.session_id)?.map(|s| s.prompt_round).unwrap_or(0);
    let verdict = record.retention(round, store.settings().retention_prompt_rounds);
    let mut artifacts = Vec::new();
    for (i, t) in record.targets.iter().enumerate() {
        for (role, image) in [(ImageRole::Pre, Some(&t.pre_image)), (ImageRole::Post, t.post_image.as_ref())] {
            let Some(ImageRecord { artifact_id: Some(aid), .. }) = image else { continue };
            let meta = artifact::record(store.kv(), aid).map(
                |a| json!({"state": a.state, "digest": a.digest, "size": a.size, "contentClass": a.content_class}),
            );
            artifacts.push(json!({
                "target": i, "role": role, "artifactId": aid,
                "metadata": meta.as_ref().ok(),
                "problem": meta.as_ref().err().map(|e| e.code.as_str()),
            }));
        }
    }
    let key_versions = store.key_usage().map(|u| u.keys().copied().collect::<Vec<_>>()).unwrap_or_default();
    let excluded: Vec<_> = EXCLUDED_EFFECTS.iter().map(|e| json!({"effect": e, "status": "never-protected"})).collect();
    let json = json!({
        "checkpoint": record,
        "usable": usable.is_none(),
        "problem": usable.as_ref().map(|e| json!({"code": e.code.as_str(), "message": e.message})),
        "retention": verdict,
        "effectiveRetention": record.effective_retention(&verdict),
        "encryption": {
            "algorithm": "AES-256-GCM",
            "compression": "zstd",
            "nonce": "random 96-bit per object",
            "currentKeyVersion": store.keys().current_version(),
            "keyVersions": key_versions,
        },
        "artifacts": artifacts,
        "bytes": record.artifact_bytes(),
        "excludedEffects": excluded,
    });
    Ok(Outcome::ok(json, inspect_text(&record, usable.as_ref(), &verdict, store.keys().current_version())))
}

fn inspect_text(
    r: &CheckpointRecord,
    problem: Option<&turnback::Error>,
    verdict: &turnback::retention::RetentionVerdict,
    key_version: u32,
) -> String {
    let mut t = format!("checkpoint {}\n", r.checkpoint_id);
    t.push_str(&format!(
        "  operation   {} ({}, {}, version {})\n",
        r.mutation.operation_id,
        r.mutation.kind.as_str(),
        r.mutation.commit_state.as_str(),
        r.mutation.aggregate_version
    ));
    t.push_str(&format!("  session     {}  prompt round {}\n", r.session_id, r.prompt_round.unwrap_or(0)));
    t.push_str(&format!("  created     {}", r.created_at));
    if let Some(c) = &r.committed_at {
        t.push_str(&format!("  committed {c}"));
    }
    t.push('\n');
    t.push_str(&format!("  stage       {}\n", r.stage_state.as_str()));
    t.push_str(&format!("  coverage    {}\n", r.coverage_state.as_str()));
    t.push_str(&format!("  integrity   {}\n", r.integrity_state.as_str()));
    if let Some(e) = problem {
        t.push_str(&format!("  usable      no: {}: {}\n", e.code, e.message));
    }
    t.push_str(&format!(
        "  encryption  AES-256-GCM after zstd, random nonce per object; data key v{key_version} for new writes\n"
    ));
    t.push_str(&format!(
        "  retention   {} (made in round {}, kept while round < {}, window {})\n",
        r.effective_retention(verdict).as_str(),
        verdict.creation_prompt_round,
        verdict.expiry_prompt_round,
        verdict.window_prompt_rounds
    ));
    t.push_str(&format!("  size        {}\n  targets\n", format_size(r.artifact_bytes())));
    for target in &r.targets {
        t.push_str(&format!("    {} {}\n", effect_word(target.effect), target.path.display()));
        t.push_str(&format!("      {}\n", image_text("before", &target.pre_image)));
        match &target.post_image {
            Some(p) => t.push_str(&format!("      {}\n", image_text("after ", p))),
            None => t.push_str("      after  not captured (not committed)\n"),
        }
    }
    t.push_str(&format!("  never protected: {}\n", EXCLUDED_EFFECTS.join(", ")));
    t
}
