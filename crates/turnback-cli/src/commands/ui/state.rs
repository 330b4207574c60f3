//! The state of `turnback ui`: the session shown, its turns, the turn chosen, the screen
//! open, and what was applied (so it can be undone with one key).
//!
//! Invariants: every read and every change goes through the facade
//! ([`turnback::Turnback`]), nothing else; an apply always names the plan id of the preview
//! on screen, so a workspace that moved since is refused and previewed again, never
//! applied blind; the undo offered is exactly the checkpoint the last apply recorded.
//! Diffs are computed in the background ([`super::diffs`]) and cached (an ended turn's
//! snapshots never change); nothing here waits for one. A running turn's diff, which takes
//! a snapshot of the live tree, is asked for again only when the turn is opened (`enter`,
//! `d`), never while drawing. Opening asks for the diffs of the newest [`EAGER_DIFFS`]
//! ended turns, so their rows fill in with +/− counts; older turns get theirs when chosen.
//! The session's checkpoints are read in the background too, each time the turns are.
//! A rollback preview's safe choices (skip, sanitized patch, resolve) are made per
//! conflicting path and previewed again at once; the apply carries exactly those choices.
//! This is the model alone: it imports no view (what an apply did is kept as the facade's
//! report, [`Done`], and worded by the views), and drawing never changes it.

use std::path::PathBuf;

use turnback::{
    Analysis, Checkpoint, Choice, ChoiceFile, CompareRequest, Comparison, ErrorCode, HistoryEntry, HistorySelection,
    Options, RelPath, Result, RewindPlan, RollbackSelection, TargetAnalysis, TargetOutcome, Turn, Turnback, quote_name,
};

use super::diffs::{DiffState, Diffs};
use crate::output::short;

/// How many of the newest ended turns have their diff computed when the screen opens.
pub const EAGER_DIFFS: usize = 20;

/// What fills the screen below the header.
#[derive(Debug)]
pub enum Screen {
    /// The sessions and the chosen session's turns.
    Timeline,
    /// One turn: its diff and its conversation.
    Turn,
    /// What a rewind to the start of the chosen turn would do.
    Rewind(Box<RewindPlan>),
    /// What rolling back the chosen turn's checkpoints (or one of them) would do, with the
    /// safe choices made so far on its conflicting paths.
    Rollback(Box<RollbackView>),
    /// The chosen turn's checkpoints, one to roll back.
    Checkpoints(CheckpointPick),
    /// What an apply (or an undo) did.
    Done(Box<Done>),
    /// Two sessions' results side by side.
    Compare(Box<Comparison>),
}

/// What a line typed at the bottom of the screen is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ask {
    /// The directory to fork the session into, after the chosen turn.
    ForkInto,
    /// The session to compare this one with.
    CompareWith,
}

/// A rollback preview on screen: the plan, what it was asked for, and the person's choices.
#[derive(Debug)]
pub struct RollbackView {
    pub analysis: Analysis,
    pub selection: RollbackSelection,
    /// What is rolled back, in words (`turn 2's edits`, `checkpoint 0f3a…`).
    pub what: String,
    /// A safe choice per conflicting path (workspace-relative), as the preview was asked with.
    pub choices: Vec<(RelPath, Choice)>,
    /// Position in `analysis.targets` of the target the choice keys act on.
    pub cursor: usize,
}

/// The list of one turn's checkpoints to choose one from.
#[derive(Debug)]
pub struct CheckpointPick {
    pub turn: u64,
    pub checkpoints: Vec<Checkpoint>,
    pub cursor: usize,
}

/// One session of the workspace, as the timeline lists it.
#[derive(Debug, Clone)]
pub struct SessionRow {
    pub id: String,
    pub created_at: String,
    pub turns: usize,
    pub parent: Option<String>,
    /// The agent that works in it, if recorded.
    pub agent: Option<String>,
}

/// What an apply (or an undo) did, as the facade reported it.
#[derive(Debug)]
pub struct Done {
    /// In words, as the status line and the summary printed at the end say it.
    pub what: String,
    pub did: Did,
}

/// The facade's report of an apply.
#[derive(Debug)]
pub enum Did {
    /// A rewind: the plan it carried out.
    Rewind(RewindPlan),
    /// A rollback (or an undo): each target's outcome, and the files its choices wrote.
    Rollback { targets: Vec<TargetAnalysis>, choice_files: Vec<ChoiceFile> },
}

/// The undo offered: the checkpoint the last apply recorded, and what it was.
#[derive(Debug, Clone)]
pub struct Undo {
    pub checkpoint_id: String,
    pub what: String,
}

/// Everything the screen shows.
#[derive(Debug)]
pub struct App {
    options: Options,
    pub tb: Turnback,
    pub workspace_root: PathBuf,
    pub session_id: String,
    pub sessions: Vec<SessionRow>,
    pub turns: Vec<Turn>,
    /// Position in [`visible`](Self::visible) of the chosen turn.
    pub selected: usize,
    pub filter: String,
    pub filtering: bool,
    /// A line being typed, and what for.
    pub asking: Option<(Ask, String)>,
    /// The session last forked from this screen (offered to compare with).
    pub last_fork: Option<String>,
    pub screen: Screen,
    pub help: bool,
    /// Lines scrolled in the help (kept within it when drawn).
    pub help_scroll: u16,
    /// Lines scrolled in the turn view and the previews.
    pub scroll: u16,
    /// One line about the last thing done (or refused).
    pub status: String,
    /// Colour allowed (`NO_COLOR` unset); markers are shown either way.
    pub color: bool,
    pub undo: Option<Undo>,
    /// One line per apply, printed once the screen is gone.
    pub applied: Vec<String>,
    pub quit: bool,
    pub diffs: Diffs,
}

impl App {
    /// Opens the session `options` name (default: the workspace's latest) on its newest turn.
    ///
    /// # Errors
    /// Store errors.
    pub fn open(options: &Options) -> Result<App> {
        Self::open_with(options, Diffs::start(options))
    }

    /// [`open`](Self::open) with the diff worker given.
    ///
    /// # Errors
    /// Store errors.
    pub fn open_with(options: &Options, diffs: Diffs) -> Result<App> {
        let tb = Turnback::open(options)?;
        let color = std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
        let mut app = App {
            options: options.clone(),
            workspace_root: PathBuf::new(),
            asking: None,
            last_fork: None,
            session_id: String::new(),
            tb,
            sessions: Vec::new(),
            turns: Vec::new(),
            selected: 0,
            filter: String::new(),
            filtering: false,
            screen: Screen::Timeline,
            help: false,
            help_scroll: 0,
            scroll: 0,
            status: String::new(),
            color,
            undo: None,
            applied: Vec::new(),
            quit: false,
            diffs,
        };
        app.reload()?;
        app.selected = app.visible().len().saturating_sub(1);
        app.prime_diffs();
        Ok(app)
    }

    /// Reads the sessions and the turns again (after an apply, or a fork); the checkpoints
    /// are read in the background.
    pub fn reload(&mut self) -> Result<()> {
        self.turns = self.tb.turn_records()?;
        self.session_id = self.tb.session()?.id.clone();
        self.diffs.read_checkpoints(&self.session_id);
        let list = self.tb.sessions()?;
        self.workspace_root = list.workspace;
        let mut sessions = Vec::new();
        for s in list.sessions {
            // The session shown counts the turns just read; another reads its own.
            let turns = if s.id == self.session_id {
                self.turns.len()
            } else {
                self.tb.session_info(Some(&s.id)).map_or(0, |i| i.turns)
            };
            sessions.push(SessionRow { id: s.id, created_at: s.created_at, turns, parent: s.parent, agent: s.agent });
        }
        self.sessions = sessions;
        self.selected = self.selected.min(self.visible().len().saturating_sub(1));
        Ok(())
    }

    /// Asks for the diffs of the newest [`EAGER_DIFFS`] ended turns (the newest served first).
    fn prime_diffs(&mut self) {
        let ended: Vec<Turn> = self.turns.iter().rev().filter(|t| !t.running()).take(EAGER_DIFFS).cloned().collect();
        for turn in ended.iter().rev() {
            self.request_diff(turn, false);
        }
    }

    fn request_diff(&mut self, turn: &Turn, again: bool) {
        self.diffs.request(&self.session_id, &turn.turn_id, turn.index, again);
    }

    /// The positions in `turns` of the turns the filter lets through, oldest first.
    pub fn visible(&self) -> Vec<usize> {
        let needle = self.filter.to_lowercase();
        (0..self.turns.len())
            .filter(|&i| needle.is_empty() || self.turns[i].preview.to_lowercase().contains(&needle))
            .collect()
    }

    /// The chosen turn.
    pub fn current(&self) -> Option<&Turn> {
        self.visible().get(self.selected).map(|&i| &self.turns[i])
    }

    /// Moves the choice by `delta` turns, within the visible ones.
    pub fn move_by(&mut self, delta: i64) {
        let n = self.visible().len() as i64;
        if n > 0 {
            self.selected = (self.selected as i64 + delta).clamp(0, n - 1) as usize;
            self.scroll = 0;
            if let Some(turn) = self.current().cloned().filter(|t| !t.running()) {
                self.request_diff(&turn, false);
            }
        }
    }

    /// Takes in the diffs the worker sent back; whether any came.
    pub fn receive_diffs(&mut self) -> bool {
        self.diffs.receive()
    }

    /// What is known of `turn`'s diff (none if never asked for).
    pub fn diff_state(&self, turn: &Turn) -> Option<&DiffState> {
        self.diffs.state(&turn.turn_id)
    }

    /// The conversation of `turn`.
    ///
    /// # Errors
    /// As [`Turnback::history`].
    pub fn conversation(&self, turn: &Turn) -> Result<Vec<HistoryEntry>> {
        Ok(self.tb.history(&HistorySelection::Turn(turn.turn_id.clone()))?.entries)
    }

    /// Opens the turn view of the chosen turn.
    pub fn open_turn(&mut self) {
        if let Some(turn) = self.current().cloned() {
            self.request_diff(&turn, turn.running());
            self.screen = Screen::Turn;
            self.scroll = 0;
        }
    }

    /// Previews a rewind to the start of the chosen turn.
    pub fn preview_rewind(&mut self) {
        if let Some(index) = self.current().map(|t| t.index) {
            self.preview_rewind_of(index);
        }
    }

    /// The checkpoints of turn `index`, oldest first (none until they are read).
    pub fn checkpoints_of(&self, index: u64) -> impl Iterator<Item = &Checkpoint> {
        self.diffs.checkpoints().unwrap_or_default().iter().filter(move |c| c.prompt_round == Some(index))
    }

    /// Previews rolling back the chosen turn's checkpoints.
    pub fn preview_rollback(&mut self) {
        let Some(index) = self.current().map(|t| t.index) else { return };
        self.preview_rollback_of(RollbackSelection::Turn(index), format!("turn {index}'s edits"), Vec::new());
    }

    /// Lists the chosen turn's checkpoints, to preview rolling back one of them.
    pub fn pick_checkpoint(&mut self) {
        let Some(turn) = self.current().map(|t| t.index) else { return };
        if let Err(why) = self.diffs.checkpoints() {
            self.status = why.to_string();
            return;
        }
        let checkpoints: Vec<Checkpoint> = self.checkpoints_of(turn).cloned().collect();
        if checkpoints.is_empty() {
            self.status = format!("turn {turn} has no checkpoint");
            return;
        }
        self.show(Screen::Checkpoints(CheckpointPick { turn, checkpoints, cursor: 0 }));
    }

    /// Previews rolling back the checkpoint chosen in the list.
    pub fn preview_picked(&mut self) {
        let Screen::Checkpoints(pick) = &self.screen else { return };
        let Some(c) = pick.checkpoints.get(pick.cursor) else { return };
        let id = c.checkpoint_id.clone();
        let what = format!("checkpoint {}", short(&id));
        self.preview_rollback_of(RollbackSelection::Checkpoints(vec![id]), what, Vec::new());
    }

    /// Moves the cursor of the checkpoint list or the rollback preview by `delta`.
    pub fn move_cursor(&mut self, delta: i64) {
        let (cursor, n) = match &mut self.screen {
            Screen::Checkpoints(pick) => (&mut pick.cursor, pick.checkpoints.len()),
            Screen::Rollback(view) => (&mut view.cursor, view.analysis.targets.len()),
            _ => return,
        };
        if n > 0 {
            *cursor = (*cursor as i64 + delta).clamp(0, n as i64 - 1) as usize;
            self.scroll = (*cursor as u16).saturating_sub(8);
        }
    }

    /// Sets (or, pressed again, clears) the safe choice for the path under the cursor of the
    /// rollback preview, and previews again with it: a choice changes the plan, so the plan
    /// id an apply is held to is always that of the choices on screen.
    pub fn choose(&mut self, choice: Choice) {
        let Screen::Rollback(view) = &self.screen else { return };
        let Some(target) = view.analysis.targets.get(view.cursor) else { return };
        let path = target.path.clone();
        let chosen = view.choices.iter().any(|(p, _)| *p == path);
        if !chosen && !matches!(target.outcome, TargetOutcome::Conflict { .. }) {
            self.status = format!("{} is not in conflict: nothing to choose", quote_name(path.as_bytes()));
            return;
        }
        let mut choices: Vec<(RelPath, Choice)> = view.choices.iter().filter(|(p, _)| *p != path).cloned().collect();
        if !view.choices.iter().any(|(p, c)| *p == path && *c == choice) {
            choices.push((path, choice));
        }
        let (selection, what, cursor) = (view.selection.clone(), view.what.clone(), view.cursor);
        self.preview_rollback_of(selection, what, choices);
        self.move_cursor(cursor as i64);
    }

    fn choice_paths(&self, choices: &[(RelPath, Choice)]) -> Vec<(PathBuf, Choice)> {
        choices.iter().map(|(p, c)| (self.workspace_root.join(p.as_path()), *c)).collect()
    }

    fn preview_rollback_of(&mut self, selection: RollbackSelection, what: String, choices: Vec<(RelPath, Choice)>) {
        match self.tb.rollback_preview(&selection, &self.choice_paths(&choices)) {
            Ok(analysis) => {
                self.show(Screen::Rollback(Box::new(RollbackView { analysis, selection, what, choices, cursor: 0 })))
            }
            Err(e) => self.status = format!("rollback preview: {e}"),
        }
    }

    fn show(&mut self, screen: Screen) {
        self.screen = screen;
        self.scroll = 0;
    }

    /// Applies the preview on screen, held to its plan id. A workspace that moved since is
    /// refused by the facade; the new preview is shown instead.
    pub fn confirm(&mut self) {
        match std::mem::replace(&mut self.screen, Screen::Timeline) {
            Screen::Rewind(plan) => match self.tb.rewind_apply(plan.to_turn, &[], Some(&plan.plan_id)) {
                Ok(done) => {
                    let what = format!("rewound the workspace to the start of turn {}", plan.to_turn);
                    self.after_apply(what, done.checkpoint_id, Did::Rewind(done.plan));
                }
                Err(e) if e.code == ErrorCode::Conflict => {
                    self.status = "refused: the workspace changed since that preview; this is the new one".into();
                    self.preview_rewind_of(plan.to_turn);
                }
                Err(e) => {
                    self.status = format!("rewind: {e}");
                    self.screen = Screen::Rewind(plan);
                }
            },
            Screen::Rollback(view) => {
                let choices = self.choice_paths(&view.choices);
                match self.tb.rollback_apply(&view.selection, &choices, Some(&view.analysis.plan_id)) {
                    Ok(done) => {
                        let what = format!("rolled back {} ({} path(s))", view.what, done.applied_paths.len());
                        let did = Did::Rollback { targets: done.targets, choice_files: done.choice_files };
                        self.after_apply(what, done.rollback_checkpoint_id, did);
                    }
                    Err(e) if e.code == ErrorCode::Conflict => {
                        self.status = "refused: the workspace changed since that preview; this is the new one".into();
                        let RollbackView { selection, what, choices, .. } = *view;
                        self.preview_rollback_of(selection, what, choices);
                    }
                    Err(e) => {
                        self.status = format!("rollback: {e}");
                        self.screen = Screen::Rollback(view);
                    }
                }
            }
            other => self.screen = other,
        }
    }

    fn preview_rewind_of(&mut self, index: u64) {
        match self.tb.rewind_preview(index, &[]) {
            Ok(plan) => self.show(Screen::Rewind(Box::new(plan))),
            Err(e) => self.status = format!("rewind preview: {e}"),
        }
    }

    fn after_apply(&mut self, what: String, checkpoint: Option<String>, did: Did) {
        self.applied.push(what.clone());
        self.undo = checkpoint.map(|checkpoint_id| Undo { checkpoint_id, what: what.clone() });
        self.status = match &self.undo {
            Some(_) => format!("{what}; press u to undo it"),
            None => what.clone(),
        };
        self.diffs.clear();
        match self.reload() {
            Ok(()) => self.prime_diffs(),
            Err(e) => self.status = format!("reading the turns again: {e}"),
        }
        self.show(Screen::Done(Box::new(Done { what, did })));
    }

    /// Takes back the last apply: its own checkpoint rolled back, held to a fresh plan.
    pub fn undo(&mut self) {
        let Some(undo) = self.undo.take() else {
            self.status = "nothing to undo".into();
            return;
        };
        let selection = RollbackSelection::Checkpoints(vec![undo.checkpoint_id.clone()]);
        let result = self
            .tb
            .rollback_preview(&selection, &[])
            .and_then(|plan| self.tb.rollback_apply(&selection, &[], Some(&plan.plan_id)));
        match result {
            Ok(done) => {
                let what = format!("undid: {} ({} path(s) put back)", undo.what, done.applied_paths.len());
                self.applied.push(what.clone());
                self.status = what.clone();
                self.diffs.clear();
                match self.reload() {
                    Ok(()) => self.prime_diffs(),
                    Err(e) => self.status = format!("reading the turns again: {e}"),
                }
                let did = Did::Rollback { targets: done.targets, choice_files: Vec::new() };
                self.show(Screen::Done(Box::new(Done { what, did })));
            }
            Err(e) => {
                self.status = format!("undo: {e}");
                self.undo = Some(undo);
            }
        }
    }

    /// Shows the workspace's next session (in the order listed).
    pub fn next_session(&mut self) {
        let Some(pos) = self.sessions.iter().position(|s| s.id == self.session_id) else { return };
        let next = self.sessions[(pos + 1) % self.sessions.len()].id.clone();
        let options = Options { session: Some(next.clone()), create: false, ..self.options.clone() };
        match Turnback::open(&options) {
            Ok(tb) => {
                self.tb = tb;
                self.diffs.clear();
                self.undo = None;
                self.filter.clear();
                self.selected = usize::MAX;
                match self.reload() {
                    Ok(()) => self.prime_diffs(),
                    Err(e) => self.status = format!("session {next}: {e}"),
                }
                self.show(Screen::Timeline);
            }
            Err(e) => self.status = format!("session {next}: {e}"),
        }
    }

    /// Starts typing a line for `ask`, with a suggestion.
    pub fn ask(&mut self, ask: Ask) {
        let Some(turn) = self.current().map(|t| t.index) else { return };
        let suggestion = match ask {
            Ask::ForkInto => {
                let root = self.workspace_root.clone();
                let name = root.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
                root.with_file_name(format!("{name}-fork-{turn}")).display().to_string()
            }
            Ask::CompareWith => self
                .last_fork
                .clone()
                .or_else(|| self.sessions.iter().find(|s| s.id != self.session_id).map(|s| s.id.clone()))
                .unwrap_or_default(),
        };
        self.asking = Some((ask, suggestion));
    }

    /// Acts on the line typed: forks, or compares.
    pub fn answer(&mut self) {
        let Some((ask, text)) = self.asking.take() else { return };
        match ask {
            Ask::ForkInto => {
                let Some(turn) = self.current().map(|t| t.index) else { return };
                let into = PathBuf::from(text.trim());
                match self.tb.fork(&self.session_id, Some(turn), Some(&into), None) {
                    Ok(forked) => {
                        let what = format!(
                            "forked {} after turn {turn} into {} as session {}",
                            quote_name(self.session_id.as_bytes()),
                            quote_name(into.as_os_str().as_encoded_bytes()),
                            quote_name(forked.session.id.as_bytes())
                        );
                        self.applied.push(what.clone());
                        self.status = format!("c compares with it · {what}");
                        self.last_fork = Some(forked.session.id);
                    }
                    Err(e) => self.status = format!("fork: {e}"),
                }
            }
            Ask::CompareWith => {
                let req =
                    CompareRequest { a: self.session_id.clone(), b: text.trim().to_string(), turn: None, patch: true };
                match self.tb.compare(&req) {
                    Ok(c) => self.show(Screen::Compare(Box::new(c))),
                    Err(e) => self.status = format!("compare: {e}"),
                }
            }
        }
    }

    /// Keeps the help's scroll within `last`, how far the frame just drawn could scroll it
    /// (`None`: no help was drawn).
    pub fn fit_help(&mut self, last: Option<u16>) {
        if let Some(last) = last {
            self.help_scroll = self.help_scroll.min(last);
        }
    }

    /// Back to the timeline (or out of the help).
    pub fn back(&mut self) {
        if self.help {
            self.help = false;
            self.help_scroll = 0;
        } else {
            self.show(Screen::Timeline);
        }
    }
}
