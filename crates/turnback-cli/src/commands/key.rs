//! `turnback key status` and `turnback key rotate`.

use serde_json::json;
use turnback::Result;

use crate::app::Ctx;
use crate::cli::KeyCommand;
use crate::output::Outcome;

pub fn run(ctx: &Ctx, command: KeyCommand) -> Result<Outcome> {
    let mut store = ctx.open(false)?;
    match command {
        KeyCommand::Status => {
            let usage = store.key_usage()?;
            let keys = store.keys();
            let versions: Vec<_> = usage
                .iter()
                .map(|(v, n)| json!({"version": v, "current": *v == keys.current_version(), "objects": n}))
                .collect();
            let mut text = format!("master key  {}\n", keys.source.describe());
            for (v, n) in &usage {
                let mark = if *v == keys.current_version() { " (current)" } else { "" };
                text.push_str(&format!("data key v{v}{mark}: encrypts {n} objects and records\n"));
            }
            let json = json!({
                "masterKeySource": keys.source.describe(),
                "currentVersion": keys.current_version(),
                "versions": versions,
            });
            Ok(Outcome::ok(json, text))
        }
        KeyCommand::Rotate { reencrypt } => {
            let report = store.rotate_keys(reencrypt)?;
            let mut text = format!("data key v{} now encrypts new writes", report.new_version);
            if reencrypt {
                text.push_str(&format!("; re-encrypted {} objects and records", report.reencrypted));
            } else {
                text.push_str("; older data stays readable under its own version (use --reencrypt to rewrite it)");
            }
            Ok(Outcome::ok(json!(report), text))
        }
    }
}
