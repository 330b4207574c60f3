//! Drawing one frame: a header (the session), the screen open, a status line and the keys
//! in a footer, with `?` the help on top.
//!
//! Invariants: drawing reads the app state (and, in the turn view, the facade's cached or
//! live diff); it changes nothing on disk. Colour only when `NO_COLOR` is unset; added and
//! removed lines carry their `+`/`-` markers either way.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Borders, Clear, Paragraph, Wrap};
use turnback::quote_name;

use super::app::{App, Ask, Screen};
use super::{preview, timeline, turn_view};

pub fn added_style(app: &App) -> Style {
    if app.color { Style::new().fg(Color::Green) } else { Style::new() }
}

pub fn removed_style(app: &App) -> Style {
    if app.color { Style::new().fg(Color::Red) } else { Style::new() }
}

pub fn hunk_style(app: &App) -> Style {
    if app.color { Style::new().fg(Color::Cyan) } else { Style::new() }
}

/// The keys of the screen open.
pub fn footer(app: &App) -> &'static str {
    if app.filtering {
        return "type to filter · enter keep · esc clear";
    }
    if app.asking.is_some() {
        return "type · enter go · esc cancel";
    }
    match app.screen {
        Screen::Timeline => "↑↓ move · enter diff · r rewind · b rollback · u undo · / find · ? help · q quit",
        Screen::Turn => "↑↓/jk scroll · ←→ turn · r rewind · b rollback · esc back · ? help · q quit",
        Screen::Rewind(_) => "y apply this plan · n cancel · ↑↓ scroll · ? help",
        Screen::Rollback(_) => "y apply this plan · n cancel · ↑↓ path · s skip · p patch · m merge · ? help",
        Screen::Checkpoints(_) => "↑↓ choose · enter preview its rollback · esc back · ? help",
        Screen::Done(_) => "u undo it · esc back · q quit",
        Screen::Compare(_) => "↑↓ scroll · esc back · ? help · q quit",
    }
}

const HELP: &str = "\
↑/↓, j/k   move between turns (scroll in a diff or a preview)
enter, d   open the turn: its diff and its conversation
←/→, h/l   previous / next turn in the turn view
r          preview a rewind of the workspace to the start of the turn
b          preview rolling back the turn's checkpointed edits
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

pub fn draw(frame: &mut Frame, app: &mut App) {
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
        Screen::Done(lines) => lines_panel(frame, body, app, " Done ".into(), lines.clone()),
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
        None => app.status.clone(),
    };
    frame.render_widget(Paragraph::new(status_text), status);
    frame.render_widget(Paragraph::new(footer(app)).style(Style::new().add_modifier(Modifier::DIM)), footer_area);
    if app.help {
        let area = centered(frame.area(), 80, 20);
        frame.render_widget(Clear, area);
        frame.render_widget(
            Paragraph::new(HELP).wrap(Wrap { trim: false }).block(Block::new().borders(Borders::ALL).title(" Keys ")),
            area,
        );
    }
}

pub fn short(id: &str) -> &str {
    id.get(..12).unwrap_or(id)
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
