//! `turnback init`: create the store and key, register the workspace.

use serde_json::json;
use turnback::Result;
use turnback::settings::format_size;

use crate::app::Ctx;
use crate::output::Outcome;

pub fn run(ctx: &Ctx) -> Result<Outcome> {
    let store = ctx.open(true)?;
    let ws = ctx.workspace(&store)?;
    let s = store.settings();
    let json = json!({
        "store": store.dir(),
        "workspace": ws.root,
        "workspaceId": ws.id,
        "keySource": store.keys().source.describe(),
        "dataKeyVersion": store.keys().current_version(),
        "settings": {
            "retentionPromptRounds": s.retention_prompt_rounds,
            "checkpointCap": s.checkpoint_cap,
            "storeCap": s.store_cap,
        },
    });
    let text = format!(
        "store      {}\nworkspace  {}\nkey        {}\nlimits     keep {} prompt rounds; {} per checkpoint, {} in all",
        store.dir().display(),
        ws.root.display(),
        store.keys().source.describe(),
        s.retention_prompt_rounds,
        format_size(s.checkpoint_cap),
        format_size(s.store_cap),
    );
    Ok(Outcome::ok(json, text))
}
