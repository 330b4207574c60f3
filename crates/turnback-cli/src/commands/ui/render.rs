//! Drawing one frame: a header (the session), the screen open, a status line and the keys
//! in a footer, with `?` the help on top of all but the footer.
//!
//! Invariants: drawing takes the state read-only (the one thing a frame learns, how far
//! the help can scroll at this size, it returns for the state to keep) and changes nothing
//! on disk; the diffs it shows are the cached ones. Colour only when `NO_COLOR` is unset;
//! added and removed lines carry their `+`/`-` markers either way.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Borders, Clear, Paragraph};
use turnback::quote_name;

use crate::output::short;

use super::state::{App, Ask, Screen};
use super::style::removed_style;
use super::{preview, timeline, turn_view};

/// The keys of the screen open (with the help open: how to scroll and close it, on the
/// last row whatever the size of the terminal).
pub fn footer(app: &App) -> &'static str {
    if app.help {
        return HELP_KEYS;
    }
    if app.filtering {
        return "type to filter · enter keep · esc clear";
    }
    if app.asking.is_some() {
        return "type · enter go · esc cancel";
    }
    match app.screen {
        Screen::Timeline => "↑↓ move · enter diff · r rewind · b rollback · u undo · / find · ? help · q quit",
        Screen::Turn => {
            "↑↓/jk scroll · ←→ turn · r rewind · b rollback · e one checkpoint · esc back · ? help · q quit"
        }
        Screen::Rewind(_) => "y apply this plan · n cancel · ↑↓ scroll · ? help",
        Screen::Rollback(_) => "y apply this plan · n cancel · ↑↓ path · s skip · p patch · m merge · ? help",
        Screen::Checkpoints(_) => "↑↓ choose · enter preview its rollback · esc back · ? help",
        Screen::Done(_) => "u undo it · esc back · q quit",
        Screen::Compare(_) => "↑↓ scroll · esc back · ? help · q quit",
    }
}

/// How to move in the help and close it.
const HELP_KEYS: &str = "esc/? close · ↑↓/jk PgUp/PgDn scroll · q quit";

const HELP: &str = "\
↑/↓, j/k   move between turns (scroll in a diff or a preview)
enter, d   open the turn: its diff and its conversation
←/→, h/l   previous / next turn in the turn view
r          preview a rewind of the workspace to the start of the turn
b          preview rolling back the turn's checkpoints (edits, shell commands)
e          choose one of the turn's checkpoints and preview rolling it back
s / p / m  on a conflicting path of a rollback preview: skip it, write a
           sanitized patch beside it, or write a merge to resolve
y / n      apply the preview on screen (held to its plan id) / cancel
u          undo the last apply
f          fork the session after the turn into a new directory
c          compare this session with another that shares a fork point
s          show the workspace's next session
/          filter turns by their prompt
esc        back · ? this help · q quit
Mouse wheel scrolls. Set NO_COLOR for no colour.";

/// Draws one frame of `app`. Returns, with the help open, how far it can scroll at this
/// size (the state keeps its scroll within that: [`App::fit_help`]).
pub fn draw(frame: &mut Frame, app: &App) -> Option<u16> {
    let [header, body, status, footer_area] =
        Layout::vertical([Constraint::Length(1), Constraint::Min(5), Constraint::Length(1), Constraint::Length(1)])
            .areas(frame.area());
    let undo = app.undo.as_ref().map(|u| format!(" · u: undo {}", u.what)).unwrap_or_default();
    frame.render_widget(
        Paragraph::new(format!(
            "turnback · session {} · {} turns{undo}",
            quote_name(app.session_id.as_bytes()),
            app.turns.len()
        ))
        .style(Style::new().add_modifier(Modifier::BOLD)),
        header,
    );
    match &app.screen {
        Screen::Timeline => timeline::render(frame, body, app),
        Screen::Turn => turn_view::render(frame, body, app),
        Screen::Rewind(plan) => {
            let title = format!(" Rewind to the start of turn {} · plan {} ", plan.to_turn, short(&plan.plan_id));
            let lines = preview::rewind_lines(plan);
            lines_panel(frame, body, app, title, lines);
        }
        Screen::Rollback(view) => {
            let title = format!(" Roll back {} · plan {} ", view.what, short(&view.analysis.plan_id));
            let lines = preview::rollback_view_lines(view);
            lines_panel(frame, body, app, title, lines);
        }
        Screen::Checkpoints(pick) => {
            let title = format!(" Checkpoints of turn {} ", pick.turn);
            let lines = preview::checkpoint_lines(pick);
            lines_panel(frame, body, app, title, lines);
        }
        Screen::Done(done) => lines_panel(frame, body, app, " Done ".into(), preview::done_lines(done)),
        Screen::Compare(c) => {
            let title = format!(" {} and {} from turn {} ", c.a.session_id, c.b.session_id, c.fork_point.turn);
            let lines = preview::compare_lines(c);
            lines_panel(frame, body, app, title, lines);
        }
    }
    let status_text = match &app.asking {
        Some((Ask::ForkInto, text)) => format!("fork into: {}", turnback::escape_controls(text)),
        Some((Ask::CompareWith, text)) => format!("compare with session: {}", turnback::escape_controls(text)),
        None if app.filtering => format!("/{}", turnback::escape_controls(&app.filter)),
        // A status may carry an error's message, which may carry a name: escaped like text.
        None => turnback::escape_controls(&app.status).into_owned(),
    };
    frame.render_widget(Paragraph::new(status_text), status);
    frame.render_widget(Paragraph::new(footer(app)).style(Style::new().add_modifier(Modifier::DIM)), footer_area);
    app.help.then(|| {
        help(frame, app, Rect { height: frame.area().height.saturating_sub(footer_area.height), ..frame.area() })
    })
}

/// The help over `within` (the frame but its footer): wrapped to the width there, scrolled
/// when it does not fit, its title saying how to close it and, while more is below or
/// above, its bottom edge how to see it. Returns how far it can scroll.
fn help(frame: &mut Frame, app: &App, within: Rect) -> u16 {
    let width = within.width.min(80);
    let lines = help_lines(width.saturating_sub(2) as usize);
    let area = centered(within, width, (lines.len() as u16).saturating_add(2));
    let rows = area.height.saturating_sub(2) as usize;
    let last = lines.len().saturating_sub(rows) as u16;
    let scroll = app.help_scroll.min(last);
    let mut block = Block::new().borders(Borders::ALL).title(" Keys · esc/? close ");
    if last > 0 {
        let at = match scroll {
            0 => "↓ more",
            s if s == last => "↑ more",
            _ => "↑↓ more",
        };
        block = block.title_bottom(Line::from(format!(" {at} · PgUp/PgDn ")).right_aligned());
    }
    frame.render_widget(Clear, area);
    frame.render_widget(Paragraph::new(lines.join("\n")).block(block).scroll((scroll, 0)), area);
    last
}

/// The help's lines wrapped at word breaks to `width` columns, a key's description going on
/// under itself (every help line is text of one column per character).
fn help_lines(width: usize) -> Vec<String> {
    /// Where a key's description begins.
    const KEYS: usize = 11;
    let width = width.max(1);
    let mut out = Vec::new();
    for line in HELP.lines() {
        let chars: Vec<char> = line.chars().collect();
        let keyed = chars.len() > KEYS && chars[KEYS - 2] == ' ' && chars[KEYS - 1] == ' ';
        let indent = if keyed && width >= KEYS + 10 { KEYS } else { 0 };
        let mut current = String::new();
        let mut len = 0;
        for word in line.split_inclusive(' ') {
            let w = word.trim_end_matches(' ').chars().count();
            if len > indent && len + w > width {
                out.push(current.trim_end().to_string());
                (current, len) = (" ".repeat(indent), indent);
                if word.trim().is_empty() {
                    continue;
                }
            }
            current.push_str(word);
            len += word.chars().count();
        }
        out.push(current.trim_end().to_string());
    }
    // A word longer than the width is cut, not clipped.
    out.iter()
        .flat_map(|l| {
            let chars: Vec<char> = l.chars().collect();
            if chars.is_empty() {
                return vec![String::new()];
            }
            chars.chunks(width).map(|c| c.iter().collect::<String>()).collect::<Vec<_>>()
        })
        .collect()
}

fn lines_panel(frame: &mut Frame, area: Rect, app: &App, title: String, lines: Vec<String>) {
    let styled: Vec<Line> = lines
        .into_iter()
        .map(|l| {
            if l.trim_start_matches(['>', ' ']).starts_with('!') {
                Line::styled(l, removed_style(app).add_modifier(Modifier::BOLD))
            } else {
                Line::raw(l)
            }
        })
        .collect();
    frame.render_widget(
        Paragraph::new(styled).block(Block::new().borders(Borders::ALL).title(title)).scroll((app.scroll, 0)),
        area,
    );
}

fn centered(area: Rect, width: u16, height: u16) -> Rect {
    let (w, h) = (width.min(area.width), height.min(area.height));
    Rect { x: area.x + (area.width - w) / 2, y: area.y + (area.height - h) / 2, width: w, height: h }
}
