//! `turnback ui`: the full-screen terminal view of the workspace's sessions and turns — a
//! turn's diff and conversation, what a rewind or rollback would do (a person's edits shown
//! as left alone), apply held to the preview's plan id, and a one-key undo.
//!
//! The state (the model) and the views are apart. State: `state` (what is chosen, what is
//! loaded, which screen and mode; every call to the facade) and `diffs` (its background
//! worker and cache). Input: `keys` (a key → an action on the state). Views, which take
//! the state read-only: `render` (one frame), `timeline`, `turn_view`, `preview` (a plan's
//! consequences, as text), `style` (colours, times). Imports go one way, no circle:
//! `render → {timeline, turn_view, preview, style}`, `turn_view → preview`, each view →
//! `style`, `state`, `diffs` as it needs; `keys → state → diffs`; this module → `state`,
//! `keys`, `render`. No state module imports a view or `keys`.
//!
//! Invariants: the screen calls the facade ([`turnback::Turnback`]) and nothing else; the
//! terminal is restored on every way out (a panic too); nothing is written to stdout once
//! the screen is gone except one line per apply (the command's text output).

mod diffs;
mod keys;
mod preview;
mod render;
mod state;
mod style;
mod timeline;
mod turn_view;

use std::time::Duration;

use crossterm::event::{self, DisableMouseCapture, EnableMouseCapture};
use turnback::{Error, ErrorCode, Result};

use crate::ctx::Ctx;
use crate::output::Outcome;

pub fn run(ctx: &Ctx) -> Result<Outcome> {
    let mut app = state::App::open(&ctx.options(false)?)?;
    let io = |e: std::io::Error| Error::new(ErrorCode::Io, format!("terminal: {e}"));
    let mut terminal = ratatui::try_init().map_err(io)?;
    let looped = (|| -> std::io::Result<()> {
        crossterm::execute!(std::io::stdout(), EnableMouseCapture)?;
        while !app.quit {
            app.receive_diffs();
            draw(&mut terminal, &mut app)?;
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

/// Draws one frame of `app`, then keeps the help's scroll within what that frame could show.
fn draw<B: ratatui::backend::Backend>(
    terminal: &mut ratatui::Terminal<B>,
    app: &mut state::App,
) -> std::result::Result<(), B::Error> {
    let mut help = None;
    terminal.draw(|frame| help = render::draw(frame, app))?;
    app.fit_help(help);
    Ok(())
}

#[cfg(test)]
mod tests;
