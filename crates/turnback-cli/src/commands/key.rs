//! `turnback key status|rotate|export|import`.

use std::io::Read;

use turnback::{Error, ErrorCode, Result, Turnback};

use crate::cli::KeyCommand;
use crate::ctx::Ctx;
use crate::output::Outcome;

pub fn run(ctx: &Ctx, command: KeyCommand) -> Result<Outcome> {
    match command {
        KeyCommand::Export => {
            let key = Turnback::export_key(&ctx.options(false)?)?;
            Ok(Outcome::of(&serde_json::json!({ "key": key }), key.clone()))
        }
        KeyCommand::Import { file } => {
            let text = match &file {
                Some(f) => std::fs::read_to_string(f)
                    .map_err(|e| Error::new(ErrorCode::Io, format!("{}: {e}", f.display())))?,
                None => {
                    let mut s = String::new();
                    std::io::stdin()
                        .read_to_string(&mut s)
                        .map_err(|e| Error::new(ErrorCode::Io, format!("reading the key from stdin: {e}")))?;
                    s
                }
            };
            let r = Turnback::import_key(&ctx.options(false)?, &text)?;
            let text = if r.written {
                format!("key written to {}", r.key_file.display())
            } else {
                format!("{} holds this key already", r.key_file.display())
            };
            Ok(Outcome::of(&r, text))
        }
        KeyCommand::Status => {
            let status = ctx.open(false)?.key_status()?;
            let mut text = format!("master key  {}\n", status.master_key_source);
            for v in &status.versions {
                let mark = if v.current { " (current)" } else { "" };
                text.push_str(&format!("data key v{}{mark}: encrypts {} objects and records\n", v.version, v.objects));
            }
            Ok(Outcome::of(&status, text))
        }
        KeyCommand::Rotate { reencrypt } => {
            let report = ctx.open(false)?.rotate_keys(reencrypt)?;
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
