//! The turn view: the chosen turn's diff (start → end, or → the live tree while it runs),
//! file by file with added and removed lines marked (`+`/`-`, and coloured unless
//! `NO_COLOR`), binary files named; beside or below it, the turn's checkpoints (edits,
//! shell commands with their files, sub-agents' windows) and its conversation (prompt,
//! replies, tool calls folded to their names).
//!
//! Invariants: patch text is the facade's own (`Turnback::diff`), names already quoted
//! there; conversation text is escaped.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Borders, Paragraph, Wrap};
use turnback::{DiffReport, HistoryEntry, Role, escape_controls, quote_name};

use super::diffs::DiffState;
use super::preview::checkpoint_words;
use super::state::App;
use super::style::{added_style, hunk_style, removed_style};

/// The diff as styled lines.
pub fn diff_lines(app: &App, d: &DiffReport) -> Vec<Line<'static>> {
    let mut lines = Vec::new();
    if d.changes.is_empty() {
        lines.push(Line::raw("no change"));
    }
    for line in d.patch.as_deref().unwrap_or_default().lines() {
        let text = escape_controls(line).into_owned();
        let styled = if line.starts_with("diff --turnback") {
            Line::styled(text, Style::new().add_modifier(Modifier::BOLD))
        } else if line.starts_with("+++") || line.starts_with("---") {
            Line::raw(text)
        } else if line.starts_with('+') {
            Line::styled(text, added_style(app))
        } else if line.starts_with('-') {
            Line::styled(text, removed_style(app))
        } else if line.starts_with("@@") {
            Line::styled(text, hunk_style(app))
        } else {
            Line::raw(text)
        };
        lines.push(styled);
    }
    for l in &d.left_out {
        lines.push(Line::raw(format!("left out {}: {}", quote_name(l.path.as_bytes()), l.reason)));
    }
    lines
}

/// The conversation as lines: who said what, tool calls folded.
pub fn conversation_lines(entries: &[HistoryEntry]) -> Vec<Line<'static>> {
    let mut lines = Vec::new();
    for e in entries {
        let who = match e.role {
            Role::User => "you",
            Role::Assistant => "agent",
        };
        lines.push(Line::styled(format!("{who}:"), Style::new().add_modifier(Modifier::BOLD)));
        for l in e.content.lines() {
            lines.push(Line::raw(format!("  {}", escape_controls(l))));
        }
        for call in e.tool_calls.iter().flatten() {
            lines.push(Line::raw(format!("  ▸ {} (folded)", escape_controls(&call.name))));
        }
    }
    if lines.is_empty() {
        lines.push(Line::raw("no conversation recorded for this turn"));
    }
    lines
}

pub fn render(frame: &mut Frame, area: Rect, app: &App) {
    let Some(turn) = app.current().cloned() else {
        frame.render_widget(Paragraph::new("no turn"), area);
        return;
    };
    let [diff_area, talk_area] = if area.width >= 120 {
        Layout::horizontal([Constraint::Percentage(60), Constraint::Percentage(40)]).areas(area)
    } else {
        Layout::vertical([Constraint::Percentage(60), Constraint::Percentage(40)]).areas(area)
    };
    let live = if turn.running() { " → live" } else { "" };
    let diff = match app.diff_state(&turn) {
        Some(DiffState::Ready(d)) => diff_lines(app, d),
        Some(DiffState::Failed(e)) => vec![Line::raw(format!("no diff: {}", escape_controls(e)))],
        Some(DiffState::Computing) | None => vec![Line::raw("computing…")],
    };
    let title = format!(" Turn {}: start → end{live} ", turn.index);
    frame.render_widget(
        Paragraph::new(diff).block(Block::new().borders(Borders::ALL).title(title)).scroll((app.scroll, 0)),
        diff_area,
    );
    // The turn's checkpoints — its edits, its shell commands, its sub-agents' windows —
    // above its conversation: `e` picks one to roll back.
    let checkpoints: Vec<Line<'static>> =
        app.checkpoints_of(turn.index).map(|c| Line::raw(format!("• {}", checkpoint_words(c)))).collect();
    let talk_area = if checkpoints.is_empty() {
        talk_area
    } else {
        let height = (checkpoints.len() as u16 + 2).min(talk_area.height / 2).max(3);
        let [list_area, rest] = Layout::vertical([Constraint::Length(height), Constraint::Min(0)]).areas(talk_area);
        let title = format!(" Checkpoints ({}) · e roll one back ", checkpoints.len());
        frame.render_widget(
            Paragraph::new(checkpoints).block(Block::new().borders(Borders::ALL).title(title)),
            list_area,
        );
        rest
    };
    let talk = match app.conversation(&turn) {
        Ok(entries) => conversation_lines(&entries),
        Err(e) => vec![Line::raw(format!("no conversation: {e}"))],
    };
    frame.render_widget(
        Paragraph::new(talk)
            .wrap(Wrap { trim: false })
            .block(Block::new().borders(Borders::ALL).title(" Conversation ")),
        talk_area,
    );
}
