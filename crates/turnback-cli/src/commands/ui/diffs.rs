//! Diffs computed in the background: a worker thread with its own [`Turnback`] (opened from
//! the screen's [`Options`], on the session each request names) takes requests over one
//! channel and sends each turn's diff back over another; the screen keeps what came back.
//! The session's checkpoint list (each row's count, the list `e` chooses from) is read the
//! same way, by a thread of its own, each time the turns are read.
//!
//! Invariants: the draw loop never waits for a diff — a turn whose diff is asked for and
//! not back yet is `Computing`, and the screen says so; the worker serves the newest
//! request first (the turn just chosen goes before the backlog opening asked for) and each
//! turn once; a result is kept only if it answers the latest request for that turn (a diff
//! asked for before an apply, or of a running turn before it was opened again, is
//! dropped). The worker ends when the screen drops its end of the channel.

use std::collections::HashMap;
use std::sync::mpsc::{self, Receiver, Sender, TryRecvError};

use turnback::{Checkpoint, DiffReport, DiffRequest, Options, Turnback};

/// One diff to compute: the turn of a session, and which request it answers.
#[derive(Debug, Clone)]
struct Job {
    session: String,
    turn_id: String,
    index: u64,
    generation: u64,
}

/// A turn's diff as the screen knows it.
#[derive(Debug, Clone)]
pub enum DiffState {
    /// Asked for, not back yet.
    Computing,
    /// Start → end (or → live, as of when it was asked for).
    Ready(DiffReport),
    /// Why there is none (pruned or skipped snapshots, a store error), in words.
    Failed(String),
}

/// The screen's side of the worker: the cache, and the two channels.
#[derive(Debug)]
pub struct Diffs {
    requests: Sender<Job>,
    results: Receiver<(Job, Result<DiffReport, String>)>,
    states: HashMap<String, (u64, DiffState)>,
    generation: u64,
    options: Options,
    checkpoints: Option<Receiver<Result<Vec<Checkpoint>, String>>>,
    checkpoint_list: Result<Vec<Checkpoint>, String>,
    #[cfg(test)]
    gate: Option<Sender<()>>,
}

impl Diffs {
    /// Starts the worker; it opens its own store handle from `options`.
    pub fn start(options: &Options) -> Diffs {
        Self::start_gated(options, false)
    }

    fn start_gated(options: &Options, gated: bool) -> Diffs {
        let (requests, jobs) = mpsc::channel::<Job>();
        let (done, results) = mpsc::channel();
        let (gate_tx, gate_rx) = mpsc::channel::<()>();
        let options = Options { create: false, ..options.clone() };
        let worker_options = options.clone();
        std::thread::spawn(move || {
            if gated {
                let _ = gate_rx.recv();
            }
            drop(gate_rx);
            work(&worker_options, &jobs, &done);
        });
        #[cfg(not(test))]
        drop(gate_tx);
        Diffs {
            requests,
            results,
            states: HashMap::new(),
            generation: 0,
            options,
            checkpoints: None,
            checkpoint_list: Err("reading the checkpoints…".into()),
            #[cfg(test)]
            gate: gated.then_some(gate_tx),
        }
    }

    /// A worker that waits for [`release`](Self::release) before computing anything.
    #[cfg(test)]
    pub fn start_held(options: &Options) -> Diffs {
        Self::start_gated(options, true)
    }

    /// Lets a held worker start.
    #[cfg(test)]
    pub fn release(&mut self) {
        if let Some(gate) = self.gate.take() {
            let _ = gate.send(());
        }
    }

    /// Asks for the diff of turn `index` (`turn_id`) of `session`, unless it is known or
    /// already asked for; with `again`, asks anew whatever is known (a running turn).
    pub fn request(&mut self, session: &str, turn_id: &str, index: u64, again: bool) {
        if !again && self.states.contains_key(turn_id) {
            return;
        }
        self.generation += 1;
        let job =
            Job { session: session.to_string(), turn_id: turn_id.to_string(), index, generation: self.generation };
        let state = match self.requests.send(job) {
            Ok(()) => DiffState::Computing,
            Err(_) => DiffState::Failed("the diff worker stopped".into()),
        };
        self.states.insert(turn_id.to_string(), (self.generation, state));
    }

    /// Reads the checkpoints of `session` anew, on a thread of its own.
    pub fn read_checkpoints(&mut self, session: &str) {
        let (tx, rx) = mpsc::channel();
        let options = Options { session: Some(session.to_string()), ..self.options.clone() };
        std::thread::spawn(move || {
            let list = Turnback::open(&options)
                .and_then(|tb| tb.checkpoints(None, false))
                .map(|l| l.checkpoints.into_iter().map(|c| c.record).collect())
                .map_err(|e| e.to_string());
            let _ = tx.send(list);
        });
        self.checkpoints = Some(rx);
    }

    /// The session's checkpoints, oldest first, once read (else why not, in words).
    pub fn checkpoints(&self) -> Result<&[Checkpoint], &str> {
        self.checkpoint_list.as_deref().map_err(String::as_str)
    }

    fn take_checkpoints(&mut self, wait: bool) -> bool {
        let Some(rx) = &self.checkpoints else { return false };
        let got = if wait { rx.recv().map_err(|_| TryRecvError::Disconnected) } else { rx.try_recv() };
        match got {
            Ok(list) => {
                self.checkpoint_list = list;
                self.checkpoints = None;
                true
            }
            Err(TryRecvError::Empty) => false,
            Err(TryRecvError::Disconnected) => {
                self.checkpoint_list = Err("the checkpoint reader stopped".into());
                self.checkpoints = None;
                true
            }
        }
    }

    /// Takes in every diff that came back (and the checkpoints, once read), without
    /// waiting. Returns whether any did.
    pub fn receive(&mut self) -> bool {
        let mut any = self.take_checkpoints(false);
        loop {
            match self.results.try_recv() {
                Ok((job, result)) => {
                    if let Some((generation, state)) = self.states.get_mut(&job.turn_id)
                        && *generation == job.generation
                    {
                        *state = match result {
                            Ok(d) => DiffState::Ready(d),
                            Err(e) => DiffState::Failed(e),
                        };
                        any = true;
                    }
                }
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => return any,
            }
        }
    }

    /// Waits until no diff asked for is still computing.
    #[cfg(test)]
    pub fn settle(&mut self) {
        self.take_checkpoints(true);
        while self.states.values().any(|(_, s)| matches!(s, DiffState::Computing)) {
            if let Ok((job, result)) = self.results.recv_timeout(std::time::Duration::from_secs(30)) {
                if let Some((generation, state)) = self.states.get_mut(&job.turn_id)
                    && *generation == job.generation
                {
                    *state = match result {
                        Ok(d) => DiffState::Ready(d),
                        Err(e) => DiffState::Failed(e),
                    };
                }
            } else {
                panic!("a diff never came back");
            }
        }
    }

    /// Whether a diff asked for (or the checkpoints) is not back yet.
    pub fn computing(&self) -> bool {
        self.checkpoints.is_some() || self.states.values().any(|(_, s)| matches!(s, DiffState::Computing))
    }

    /// What is known of `turn_id`'s diff.
    pub fn state(&self, turn_id: &str) -> Option<&DiffState> {
        self.states.get(turn_id).map(|(_, s)| s)
    }

    /// Forgets every diff (the workspace or the session changed); results of earlier
    /// requests are dropped when they come back.
    pub fn clear(&mut self) {
        self.states.clear();
    }
}

/// The worker: gathers what is queued, serves the newest request first, once per turn.
fn work(options: &Options, jobs: &Receiver<Job>, done: &Sender<(Job, Result<DiffReport, String>)>) {
    let mut open: Option<(String, Turnback)> = None;
    let mut queue: Vec<Job> = Vec::new();
    loop {
        if queue.is_empty() {
            match jobs.recv() {
                Ok(job) => queue.push(job),
                Err(_) => return,
            }
        }
        queue.extend(jobs.try_iter());
        let Some(job) = queue.pop() else { continue };
        queue.retain(|j| j.turn_id != job.turn_id);
        if open.as_ref().is_none_or(|(s, _)| *s != job.session) {
            let opened = Turnback::open(&Options { session: Some(job.session.clone()), ..options.clone() });
            match opened {
                Ok(tb) => open = Some((job.session.clone(), tb)),
                Err(e) => {
                    if done.send((job, Err(e.to_string()))).is_err() {
                        return;
                    }
                    continue;
                }
            }
        }
        let Some((_, tb)) = &open else { continue };
        let result = tb
            .diff(&DiffRequest { turn: Some(job.index), patch: true, ..DiffRequest::default() })
            .map_err(|e| e.to_string());
        if done.send((job, result)).is_err() {
            return;
        }
    }
}
