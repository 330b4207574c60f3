//! `turnback ui`: the full-screen terminal view of the workspace's sessions and turns — a
//! turn's diff and conversation, what a rewind or rollback would do (a person's edits shown
//! as left alone), apply held to the preview's plan id, and a one-key undo.
//!
//! Modules: `app` (the state, and every call to the facade), `diffs` (the background diff
//! worker and its cache), `timeline`, `turn_view`,
//! `preview` (a plan's consequences), `render` (one frame), `keys` (input → action).
//!
//! Invariants: the screen calls the facade ([`turnback::Turnback`]) and nothing else; the
//! terminal is restored on every way out (a panic too); nothing is written to stdout once
//! the screen is gone except one line per apply (the command's text output).

mod app;
mod diffs;
mod keys;
mod preview;
mod render;
mod timeline;
mod turn_view;

use std::time::Duration;

use crossterm::event::{self, DisableMouseCapture, EnableMouseCapture};
use turnback::{Error, ErrorCode, Result};

use crate::ctx::Ctx;
use crate::output::Outcome;

pub fn run(ctx: &Ctx) -> Result<Outcome> {
    let mut app = app::App::open(&ctx.options(false)?)?;
    let io = |e: std::io::Error| Error::new(ErrorCode::Io, format!("terminal: {e}"));
    let mut terminal = ratatui::try_init().map_err(io)?;
    let looped = (|| -> std::io::Result<()> {
        crossterm::execute!(std::io::stdout(), EnableMouseCapture)?;
        while !app.quit {
            app.receive_diffs();
            terminal.draw(|frame| render::draw(frame, &mut app))?;
            // While a diff is computing, look for it often; otherwise wait for input.
            let wait = if app.diffs.computing() { 40 } else { 500 };
            if event::poll(Duration::from_millis(wait))? {
                keys::handle(&mut app, &event::read()?);
            }
        }
        Ok(())
    })();
    let _ = crossterm::execute!(std::io::stdout(), DisableMouseCapture);
    ratatui::restore();
    looped.map_err(io)?;
    let text =
        if app.applied.is_empty() { String::new() } else { format!("turnback ui: {}\n", app.applied.join("; ")) };
    Ok(Outcome::of(&serde_json::json!({ "applied": app.applied }), text))
}

#[cfg(test)]
mod tests;
