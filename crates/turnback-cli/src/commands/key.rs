//! `turnback key status` and `turnback key rotate`.

use turnback::Result;

use crate::app::Ctx;
use crate::cli::KeyCommand;
use crate::output::Outcome;

pub fn run(ctx: &Ctx, command: KeyCommand) -> Result<Outcome> {
    let mut tb = ctx.open(false)?;
    match command {
        KeyCommand::Status => {
            let status = tb.key_status()?;
            let mut text = format!("master key  {}\n", status.master_key_source);
            for v in &status.versions {
                let mark = if v.current { " (current)" } else { "" };
                text.push_str(&format!("data key v{}{mark}: encrypts {} objects and records\n", v.version, v.objects));
            }
            Ok(Outcome::of(&status, text))
        }
        KeyCommand::Rotate { reencrypt } => {
            let report = tb.rotate_keys(reencrypt)?;
            let mut text = format!("data key v{} now encrypts new writes", report.new_version);
            if reencrypt {
                text.push_str(&format!("; re-encrypted {} objects and records", report.reencrypted));
            } else {
                text.push_str("; older data stays readable under its own version (use --reencrypt to rewrite it)");
            }
            Ok(Outcome::of(&report, text))
        }
    }
}
