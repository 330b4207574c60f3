//! How every view shows things alike: the colours of added, removed and hunk lines, and a
//! time as `HH:MM`.
//!
//! Invariants: colour only when the state allows it (`NO_COLOR` unset), and never the only
//! mark — a line keeps its `+`/`-` (or `!`) without it; nothing here reads or changes
//! state beyond that flag.

use ratatui::style::{Color, Style};

use super::state::App;

pub fn added_style(app: &App) -> Style {
    if app.color { Style::new().fg(Color::Green) } else { Style::new() }
}

pub fn removed_style(app: &App) -> Style {
    if app.color { Style::new().fg(Color::Red) } else { Style::new() }
}

pub fn hunk_style(app: &App) -> Style {
    if app.color { Style::new().fg(Color::Cyan) } else { Style::new() }
}

/// `HH:MM` of an RFC 3339 time (the whole text if it is not one).
pub fn clock(at: &str) -> &str {
    at.get(11..16).unwrap_or(at)
}
