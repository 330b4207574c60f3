//! Keys and the mouse: what each does on the screen open.
//!
//! Invariants: one table maps input to an action; an action changes the workspace only
//! through a confirmed preview (`y`) or the undo (`u`).

use crossterm::event::{Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers, MouseEventKind};

use turnback::Choice;

use super::state::{App, Ask, Screen};

/// Applies one input event to the app.
pub fn handle(app: &mut App, event: &Event) {
    match event {
        Event::Key(key) if key.kind != KeyEventKind::Release => key_press(app, key),
        Event::Mouse(m) => match m.kind {
            MouseEventKind::ScrollDown if app.help => app.help_scroll = app.help_scroll.saturating_add(1),
            MouseEventKind::ScrollUp if app.help => app.help_scroll = app.help_scroll.saturating_sub(1),
            MouseEventKind::ScrollDown => down(app),
            MouseEventKind::ScrollUp => up(app),
            _ => {}
        },
        _ => {}
    }
}

fn scrolls(app: &App) -> bool {
    !matches!(app.screen, Screen::Timeline)
}

fn has_cursor(app: &App) -> bool {
    matches!(app.screen, Screen::Rollback(_) | Screen::Checkpoints(_))
}

fn down(app: &mut App) {
    if has_cursor(app) {
        return app.move_cursor(1);
    }
    if scrolls(app) { app.scroll = app.scroll.saturating_add(1) } else { app.move_by(1) }
}

fn up(app: &mut App) {
    if has_cursor(app) {
        return app.move_cursor(-1);
    }
    if scrolls(app) { app.scroll = app.scroll.saturating_sub(1) } else { app.move_by(-1) }
}

fn key_press(app: &mut App, key: &KeyEvent) {
    if key.modifiers.contains(KeyModifiers::CONTROL) && key.code == KeyCode::Char('c') {
        app.quit = true;
        return;
    }
    if let Some((_, text)) = app.asking.as_mut() {
        match key.code {
            KeyCode::Enter => app.answer(),
            KeyCode::Esc => app.asking = None,
            KeyCode::Backspace => {
                text.pop();
            }
            KeyCode::Char(c) => text.push(c),
            _ => {}
        }
        return;
    }
    if app.help {
        return help_key(app, key.code);
    }
    if app.filtering {
        match key.code {
            KeyCode::Enter => app.filtering = false,
            KeyCode::Esc => {
                app.filtering = false;
                app.filter.clear();
            }
            KeyCode::Backspace => {
                app.filter.pop();
            }
            KeyCode::Char(c) => app.filter.push(c),
            _ => {}
        }
        app.selected = app.selected.min(app.visible().len().saturating_sub(1));
        return;
    }
    let preview = matches!(app.screen, Screen::Rewind(_) | Screen::Rollback(_) | Screen::Checkpoints(_));
    let rollback = matches!(app.screen, Screen::Rollback(_));
    match key.code {
        KeyCode::Char('q') => app.quit = true,
        KeyCode::Char('?') => app.help = !app.help,
        KeyCode::Esc => app.back(),
        KeyCode::Down | KeyCode::Char('j') => down(app),
        KeyCode::Up | KeyCode::Char('k') => up(app),
        KeyCode::PageDown => (0..10).for_each(|_| down(app)),
        KeyCode::PageUp => (0..10).for_each(|_| up(app)),
        KeyCode::Right | KeyCode::Char('l') if matches!(app.screen, Screen::Turn) => app.move_by(1),
        KeyCode::Left | KeyCode::Char('h') if matches!(app.screen, Screen::Turn) => app.move_by(-1),
        KeyCode::Enter if matches!(app.screen, Screen::Checkpoints(_)) => app.preview_picked(),
        KeyCode::Char('s') if rollback => app.choose(Choice::Skip),
        KeyCode::Char('p') if rollback => app.choose(Choice::Patch),
        KeyCode::Char('m') if rollback => app.choose(Choice::Resolve),
        KeyCode::Char('y') if preview => app.confirm(),
        KeyCode::Char('n') if preview => app.back(),
        KeyCode::Enter | KeyCode::Char('d') if !preview => app.open_turn(),
        KeyCode::Char('r') if !preview => app.preview_rewind(),
        KeyCode::Char('b') if !preview => app.preview_rollback(),
        KeyCode::Char('e') if !preview => app.pick_checkpoint(),
        KeyCode::Char('u') => app.undo(),
        KeyCode::Char('/') if matches!(app.screen, Screen::Timeline) => app.filtering = true,
        KeyCode::Char('f') if !preview => app.ask(Ask::ForkInto),
        KeyCode::Char('c') if !preview => app.ask(Ask::CompareWith),
        KeyCode::Char('s') if matches!(app.screen, Screen::Timeline) => app.next_session(),
        _ => {}
    }
}

/// The help is on top: its keys scroll it or close it (`q` still quits); the screen below
/// waits. The draw keeps the scroll within the help.
fn help_key(app: &mut App, code: KeyCode) {
    let s = &mut app.help_scroll;
    match code {
        KeyCode::Char('?') | KeyCode::Esc => {
            app.help = false;
            app.help_scroll = 0;
        }
        KeyCode::Char('q') => app.quit = true,
        KeyCode::Down | KeyCode::Char('j') => *s = s.saturating_add(1),
        KeyCode::Up | KeyCode::Char('k') => *s = s.saturating_sub(1),
        KeyCode::PageDown | KeyCode::Char(' ') => *s = s.saturating_add(10),
        KeyCode::PageUp => *s = s.saturating_sub(10),
        KeyCode::Home | KeyCode::Char('g') => *s = 0,
        KeyCode::End | KeyCode::Char('G') => *s = u16::MAX,
        _ => {}
    }
}
