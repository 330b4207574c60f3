//! The timeline: the workspace's sessions (agent, turns, start), the chosen session's turns (index, when,
//! prompt, files changed with +/− counts once known, checkpoints, shell commands, snapshot trouble,
//! sub-agents, the running turn marked live), and the chosen turn's details.
//!
//! Invariants: a row is built from the turn record, the checkpoints read (in the background)
//! with the turns and the diff cache alone (no store read while drawing); names and prompts are escaped.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Borders, List, ListItem, ListState, Paragraph};
use turnback::{DiffReport, SnapshotRef, Turn, escape_controls, quote_name};

use super::diffs::DiffState;
use super::state::App;
use super::style::{added_style, clock, removed_style};

/// Files changed and lines added and removed, as `3 files +10 -2`.
pub fn stat(d: &DiffReport) -> String {
    let (add, del) = d.changes.iter().fold((0, 0), |(a, r), c| (a + c.added.unwrap_or(0), r + c.deleted.unwrap_or(0)));
    format!("{} file{} +{add} -{del}", d.changes.len(), if d.changes.len() == 1 { "" } else { "s" })
}

fn snapshot_note(which: &str, s: &SnapshotRef) -> Option<String> {
    if let Some(why) = &s.skipped {
        return Some(format!("{which} snapshot skipped ({})", escape_controls(why)));
    }
    if s.id.is_none() {
        return Some(format!("{which} snapshot pruned"));
    }
    s.late.then(|| format!("{which} snapshot late"))
}

/// Short notes on a turn: shell commands, snapshot trouble, sub-agents.
pub fn notes(t: &Turn) -> Vec<String> {
    let mut notes = Vec::new();
    if t.rewound.is_some() {
        notes.push("rewound".to_string());
    }
    if !t.shell_effects.is_empty() {
        notes.push(format!("${}", t.shell_effects.len()));
    }
    notes.extend(snapshot_note("start", &t.snapshot));
    if let Some(end) = &t.end_snapshot {
        notes.extend(snapshot_note("end", end));
    }
    if !t.subagents.is_empty() {
        notes.push(format!("{} sub-agent{}", t.subagents.len(), if t.subagents.len() == 1 { "" } else { "s" }));
    }
    notes
}

/// One row of the turn list.
pub fn row(app: &App, t: &Turn) -> String {
    let live = if t.running() { "● live " } else { "" };
    let stats = match app.diff_state(t) {
        Some(DiffState::Ready(d)) => stat(d),
        Some(DiffState::Computing) => "…".into(),
        _ => String::new(),
    };
    let checkpoints = match app.checkpoints_of(t.index).count() {
        0 => String::new(),
        1 => "1 checkpoint ".into(),
        n => format!("{n} checkpoints "),
    };
    let notes = notes(t).join(" ");
    format!(
        "{:>3} {} {live}{}  {stats}  {checkpoints}{notes}",
        t.index,
        clock(&t.started_at),
        escape_controls(&t.preview)
    )
}

pub fn render(frame: &mut Frame, area: Rect, app: &App) {
    let sessions_height = (app.sessions.len().min(4) as u16) + 2;
    let [sessions, turns, detail] =
        Layout::vertical([Constraint::Length(sessions_height), Constraint::Min(3), Constraint::Length(8)]).areas(area);
    let lines: Vec<Line> = app
        .sessions
        .iter()
        .map(|s| {
            let mark = if s.id == app.session_id { "▶" } else { " " };
            let parent =
                s.parent.as_deref().map(|p| format!(", forked from {}", quote_name(p.as_bytes()))).unwrap_or_default();
            let agent = s.agent.as_deref().map(|a| format!("{}  ", escape_controls(a))).unwrap_or_default();
            let text = format!(
                "{mark} {}  {agent}{} turns, started {}{parent}",
                quote_name(s.id.as_bytes()),
                s.turns,
                s.created_at.get(..16).unwrap_or(&s.created_at).replace('T', " ")
            );
            if s.id == app.session_id {
                Line::styled(text, Style::new().add_modifier(Modifier::BOLD))
            } else {
                Line::raw(text)
            }
        })
        .collect();
    frame.render_widget(Paragraph::new(lines).block(Block::new().borders(Borders::ALL).title(" Sessions ")), sessions);

    let visible = app.visible();
    let items: Vec<ListItem> = visible.iter().map(|&i| ListItem::new(row(app, &app.turns[i]))).collect();
    let title = if app.filter.is_empty() {
        format!(" Turns of {} ", quote_name(app.session_id.as_bytes()))
    } else {
        format!(" Turns of {} matching /{} ", quote_name(app.session_id.as_bytes()), escape_controls(&app.filter))
    };
    let list = List::new(items)
        .block(Block::new().borders(Borders::ALL).title(title))
        .highlight_style(Style::new().add_modifier(Modifier::REVERSED))
        .highlight_symbol("> ");
    let mut state = ListState::default().with_selected((!visible.is_empty()).then_some(app.selected));
    frame.render_stateful_widget(list, turns, &mut state);

    let mut lines = Vec::new();
    if let Some(t) = app.current() {
        lines.push(Line::raw(format!("turn {}: {}", t.index, escape_controls(&t.preview))));
        match app.diff_state(t) {
            Some(DiffState::Ready(d)) => {
                for c in &d.changes {
                    let counts = match (c.added, c.deleted) {
                        (Some(a), Some(r)) => format!("+{a} -{r}"),
                        _ => "binary".into(),
                    };
                    let style = if c.deleted.unwrap_or(0) > c.added.unwrap_or(0) {
                        removed_style(app)
                    } else {
                        added_style(app)
                    };
                    lines.push(Line::styled(format!("  {counts:>10}  {}", quote_name(c.path_bytes())), style));
                }
            }
            Some(DiffState::Computing) => lines.push(Line::raw("  computing its diff…")),
            Some(DiffState::Failed(e)) => lines.push(Line::raw(format!("  no diff: {}", escape_controls(e)))),
            None => lines.push(Line::raw("  (enter or d: its diff)")),
        }
        for s in &t.shell_effects {
            lines.push(Line::raw(format!("  ran $ {}", escape_controls(&s.command))));
        }
    }
    frame.render_widget(Paragraph::new(lines).block(Block::new().borders(Borders::ALL).title(" Chosen turn ")), detail);
}
