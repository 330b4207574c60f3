//! opencode: a plugin, `.opencode/plugin/turnback.js` (project) or
//! `~/.config/opencode/plugin/turnback.js` (user; `$XDG_CONFIG_HOME`), that forwards
//! opencode's events to `turnback hook opencode` (opencode loads every `.js` in a config
//! directory's `plugin/` folder; its plugin docs, packages/web/src/content/docs/plugins.mdx).
//! The plugin's text is `commands/hook/plugin.js`, with this binary's path written in.

use std::path::PathBuf;

use turnback::{Error, Result};

use super::{Change, Places, Plan, own_exe};
use crate::cli::Scope;

const PLUGIN: &str = include_str!("../hook/plugin.js");
/// The first line of turnback's plugin: a file that does not start with it is not ours.
const HEADER: &str = "// turnback: undo for this project's opencode sessions.";

pub fn plan(places: &Places, _command: &str, uninstall: bool) -> Result<Plan> {
    let dir = match places.scope {
        Scope::Project => places.project.join(".opencode"),
        Scope::User => std::env::var_os("XDG_CONFIG_HOME")
            .map(PathBuf::from)
            .unwrap_or_else(|| places.home.join(".config"))
            .join("opencode"),
    };
    let file = dir.join("plugin").join("turnback.js");
    let exe = own_exe()?.to_string_lossy().into_owned();
    let text = PLUGIN.replace("__TURNBACK__", &serde_json::to_string(&exe).expect("a string serializes"));
    let what = file.display().to_string();
    let edit = move |before: Option<&str>| match before {
        // Someone else's file of that name: never overwritten, never removed.
        Some(b) if !b.starts_with(HEADER) && uninstall => Ok(Some(b.to_string())),
        Some(b) if !b.starts_with(HEADER) => {
            Err(Error::invalid(format!("{what} exists and is not turnback's plugin; nothing was changed")))
        }
        _ if uninstall => Ok(None),
        _ => Ok(Some(text.clone())),
    };
    Ok(Plan { changes: vec![Change { file, edit: Box::new(edit) }], notes: Vec::new() })
}
