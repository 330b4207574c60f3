//! `turnback init`: create the store and key, register the workspace.

use turnback::{Result, format_size};

use crate::ctx::Ctx;
use crate::output::Outcome;

pub fn run(ctx: &Ctx) -> Result<Outcome> {
    let r = ctx.open(true)?.init()?;
    let text = format!(
        "store      {}\nworkspace  {}\nkey        {}\nlimits     keep {} prompt rounds; {} per checkpoint, {} in all",
        r.store.display(),
        r.workspace.display(),
        r.key_source,
        r.settings.retention_prompt_rounds,
        format_size(r.settings.checkpoint_cap),
        format_size(r.settings.store_cap),
    );
    Ok(Outcome::of(&r, text))
}
