//! Importing an agent's own record of a session (its transcript) into a session's history
//! and turn list. Each agent's format has a parser of its own ([`claude_code`], …) that
//! reads the turns the person actually kept; this module merges them in, the same way for
//! every agent.
//!
//! Invariants:
//! - A source turn is known by its key (the id of the record that began it, stable in the
//!   agent's file), remembered per session and source: importing again adds nothing
//!   twice, and a turn whose reply grew since (the file was read mid-turn) has its reply
//!   replaced where it stands in the history, never appended a second time; a reply that
//!   is not more of the one imported (the agent masked or compacted its own record) changes
//!   nothing.
//! - A source turn not imported before joins a turn the hooks already recorded when that
//!   turn has the same prompt and comes in the same order (the hooks made the turn, the
//!   transcript brings the reply; a reply an event brought is replaced by it), and did not
//!   begin well before it (an older turn with the same words): one set of turns and one
//!   reply each, never duplicates. Otherwise it becomes
//!   a finished turn of its own (no snapshots: nothing was recorded on disk then) — unless
//!   the import brings replies only (a hook's), which never adds a turn.
//! - A turn a rewind took back stays taken back: a source turn that is it (remembered, or
//!   joining it) or that began between its start and the rewind adds nothing — no turn,
//!   no reply — until the rewind is undone.
//! - A full import into a session of the same agent takes only that session's record: a
//!   transcript naming another of the agent's sessions is refused.
//! - An import is one transaction: its turns, entries and keys all land or none do.

pub(crate) mod claude_code;
pub(crate) mod codex;
pub(crate) mod gemini;
pub(crate) mod opencode;

use std::collections::{HashMap, HashSet};

use serde::{Deserialize, Serialize};

use crate::base::hex::hex;
use crate::error::{Error, Result};
use crate::session::Session;
use crate::session::history::{self, Entry, NewEntry, Role};
use crate::session::turn::{self, TurnKind};
use crate::storage::kv::Txn;
use crate::storage::schema;
use crate::storage::store::Store;

/// What an import did.
#[derive(Debug, Clone, Default, Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Imported {
    /// Turns recorded (new turns of their own).
    pub turns: u64,
    /// Turns the hooks had recorded that the import brought their replies to.
    pub joined_turns: u64,
    /// Turns imported before whose reply grew, and was replaced.
    pub updated_turns: u64,
    /// History entries recorded.
    pub entries: u64,
    /// Records skipped (a branch the person abandoned, sub-agents, injected notices,
    /// records of other kinds, unparsable lines).
    pub skipped_rows: u64,
    /// Turns already imported, unchanged.
    pub already_imported_turns: u64,
    /// Turns the source holds (none: nothing in it was recognised as a turn).
    pub source_turns: u64,
    /// Turns of the source a rewind took back: left out.
    pub rewound_turns: u64,
}

/// One turn as an agent's record of it holds it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SourceTurn {
    /// Stable in the source: the id of the record that began it.
    pub key: String,
    /// The prompt as the person wrote it (a slash command as typed).
    pub prompt: String,
    /// The prompt as the agent sent it, when different (a command's expansion).
    pub sent: Option<String>,
    /// When it began and ended (RFC 3339, as the source says).
    pub started_at: String,
    pub ended_at: String,
    /// The agent's reply: text, thinking and tool calls with their outputs (its turn id is
    /// filled in here).
    pub reply: Option<Entry>,
}

/// A source, read: its turns in the order the person kept them, and what was skipped.
#[derive(Debug, Clone, Default)]
pub(crate) struct Parsed {
    pub turns: Vec<SourceTurn>,
    pub skipped_rows: u64,
    /// The agent's session the source says it records, when it says.
    pub session: Option<String>,
}

/// Whose record it is: the name under which its keys are remembered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// A Claude Code session transcript (`~/.claude/projects/…/<session>.jsonl`).
    ClaudeCode,
    /// A Codex CLI rollout (`~/.codex/sessions/…/rollout-…-<session>.jsonl`).
    Codex,
    /// A Gemini CLI chat file (`~/.gemini/tmp/<project>/chats/session-….jsonl`, or `.json`
    /// before v0.39).
    Gemini,
    /// An opencode session, as `opencode export` prints it (or as
    /// [`Turnback::import_opencode_session`](crate::Turnback::import_opencode_session) reads
    /// it from opencode's storage).
    Opencode,
}

impl Format {
    fn name(self) -> &'static str {
        match self {
            Format::ClaudeCode => "claude-code",
            Format::Codex => "codex",
            Format::Gemini => "gemini",
            Format::Opencode => "opencode",
        }
    }

    pub(crate) fn parse(self, text: &str) -> Result<Parsed> {
        match self {
            Format::ClaudeCode => claude_code::parse(text),
            Format::Codex => codex::parse(text),
            Format::Gemini => gemini::parse(text),
            Format::Opencode => opencode::parse(text),
        }
    }
}

/// What an import may add.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Every turn: new ones become turns of their own.
    All,
    /// Only the replies of turns the hooks recorded (a hook reading the transcript as the
    /// agent stops).
    RepliesOnly,
}

/// An imported turn, remembered: the turn it went into, and its reply's place.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Known {
    turn_id: String,
    /// The reply's sequence number in the history.
    reply_seq: Option<u64>,
    /// A keyed digest of the reply as imported.
    reply_digest: Option<String>,
}

const KNOWN_SCHEMA: u16 = 1;
const NO_SNAPSHOT: &str = "imported from the agent's transcript (no snapshot)";

fn known_key(session: &str, format: Format, key: &str) -> Vec<u8> {
    format!("{session}/{}/{key}", format.name()).into_bytes()
}

/// Imports `text`, a record in `format`, into `session`.
///
/// # Errors
/// `invalid-argument` if `text` is not such a record; store errors.
pub(crate) fn import(store: &Store, session: &Session, format: Format, text: &str, scope: Scope) -> Result<Imported> {
    let parsed = format.parse(text)?;
    if let Some(theirs) = other_session(session, format, scope, &parsed) {
        return Err(Error::invalid(format!(
            "this transcript records {} session {theirs}, not session {} (that agent's too): import it into \
             session {theirs}, or into a session of no agent",
            format.name(),
            session.id
        )));
    }
    let mut report =
        Imported { skipped_rows: parsed.skipped_rows, source_turns: parsed.turns.len() as u64, ..Imported::default() };
    // What the hooks recorded, read before the transaction (reads and the write share one
    // connection): each prompt turn's prompt, and its reply if one is recorded already (an
    // event's copy of it, which the transcript's replaces).
    let mut recorded_entries: HashMap<String, (Option<String>, Option<u64>)> = HashMap::new();
    for (key, e, _) in history::keyed(store, &session.id)? {
        let slot = recorded_entries.entry(e.turn_id.clone()).or_default();
        match e.role {
            Role::User if slot.0.is_none() => slot.0 = Some(e.prompt.unwrap_or(e.content)),
            Role::Assistant if slot.1.is_none() => slot.1 = history::seq_of(&key),
            _ => {}
        }
    }
    let turns = turn::list(store, &session.id)?;
    let rewinds = rewind_windows(&turns);
    let recorded: Vec<HookTurn> = turns
        .into_iter()
        .filter(|t| t.kind == TurnKind::Prompt)
        .map(|t| {
            let (prompt, reply_seq) = recorded_entries.remove(&t.turn_id).unwrap_or_default();
            HookTurn {
                turn_id: t.turn_id,
                prompt,
                preview: t.preview,
                reply_seq,
                started_at: t.started_at,
                rewound: t.rewound.is_some(),
            }
        })
        .collect();
    let position = recorded.iter().enumerate().map(|(i, t)| (t.turn_id.clone(), i)).collect();
    let mut txn = store.kv().begin()?;
    let known = known(store, &mut *txn, &session.id)?;
    let claimed = known.values().map(|k| k.turn_id.clone()).collect();
    let mut merge =
        Merge { store, session: &session.id, format, scope, recorded, position, known, claimed, next: 0, rewinds };
    for source in parsed.turns {
        merge.turn(&mut *txn, source, &mut report)?;
    }
    txn.commit()?;
    history::enforce_budget(store, &session.id)?;
    Ok(report)
}

/// The other session of the same agent that a full import's source records, if it is
/// another's: a session an agent's hooks made is that agent's session (same id).
fn other_session(session: &Session, format: Format, scope: Scope, parsed: &Parsed) -> Option<String> {
    let theirs = parsed.session.as_deref()?;
    let same_agent = session.agent.as_deref() == Some(format.name());
    (scope == Scope::All && same_agent && theirs != session.id).then(|| theirs.to_string())
}

/// What a session's rewinds took back, as times: from the start of the first turn each
/// took back to when it ran.
fn rewind_windows(turns: &[turn::Turn]) -> Vec<(jiff::Timestamp, jiff::Timestamp)> {
    let mut by_rewind: HashMap<(&str, Option<&str>), jiff::Timestamp> = HashMap::new();
    for t in turns {
        let Some(r) = &t.rewound else { continue };
        let Ok(start) = t.started_at.parse::<jiff::Timestamp>() else { continue };
        let first = by_rewind.entry((r.at.as_str(), r.checkpoint.as_deref())).or_insert(start);
        *first = (*first).min(start);
    }
    by_rewind.into_iter().filter_map(|((at, _), start)| Some((start, at.parse().ok()?))).collect()
}

/// Every imported turn of `session` remembered, by its key (from any source).
fn known(store: &Store, txn: &mut dyn Txn, session: &str) -> Result<HashMap<Vec<u8>, Known>> {
    let mut out = HashMap::new();
    for key in txn.keys(schema::IMPORTED_TURNS, format!("{session}/").as_bytes())? {
        if let Some(value) = txn.get(schema::IMPORTED_TURNS, &key)? {
            out.insert(key.clone(), store.open_record(schema::IMPORTED_TURNS, &key, &value)?);
        }
    }
    Ok(out)
}

/// A prompt turn the session holds (the hooks recorded it): its prompt, and the place of a
/// reply already recorded.
#[derive(Debug, Clone)]
struct HookTurn {
    turn_id: String,
    /// The prompt the history holds (none once a rewind cut it).
    prompt: Option<String>,
    /// The prompt's first line, as the turn keeps it.
    preview: String,
    reply_seq: Option<u64>,
    started_at: String,
    /// A rewind took it back.
    rewound: bool,
}

/// How much earlier than the turn turnback recorded the agent may date the same prompt
/// (two clocks of one machine, and the time between the agent writing its record and its
/// hook running).
const CLOCK_SLACK_SECS: i64 = 120;

/// Whether a source turn that began at `source` can be the turn recorded at `recorded`:
/// not if it began well before it (an older turn with the same words — a repeated "yes",
/// a session resumed after turnback was installed). Unreadable times do not rule it out.
fn can_be(source: &str, recorded: &str) -> bool {
    match (source.parse::<jiff::Timestamp>(), recorded.parse::<jiff::Timestamp>()) {
        (Ok(s), Ok(r)) => s.as_second() >= r.as_second() - CLOCK_SLACK_SECS,
        _ => true,
    }
}

/// One import's merging of source turns into a session, in order.
struct Merge<'a> {
    store: &'a Store,
    session: &'a str,
    format: Format,
    scope: Scope,
    /// The session's prompt turns, oldest first, and where each turn id is among them.
    recorded: Vec<HookTurn>,
    position: HashMap<String, usize>,
    /// The source turns imported before, by key, and the turns they went into.
    known: HashMap<Vec<u8>, Known>,
    claimed: HashSet<String>,
    /// Where to look for the next recorded turn to join: turns join in order.
    next: usize,
    /// What the session's rewinds took back: from, until (see [`rewind_windows`]).
    rewinds: Vec<(jiff::Timestamp, jiff::Timestamp)>,
}

impl Merge<'_> {
    fn turn(&mut self, txn: &mut dyn Txn, source: SourceTurn, report: &mut Imported) -> Result<()> {
        let key = known_key(self.session, self.format, &source.key);
        if let Some(known) = self.known.get(&key).cloned() {
            if let Some(&at) = self.position.get(&known.turn_id) {
                self.next = self.next.max(at + 1);
                if self.recorded[at].rewound {
                    report.rewound_turns += 1;
                    return Ok(());
                }
            }
            let updated = self.reply(txn, &key, known, source.reply, report)?;
            report.already_imported_turns += u64::from(!updated);
            return Ok(());
        }
        let (turn_id, reply_seq) = match self.join(&source) {
            // Not remembered: once the rewind is undone, it joins as any recorded turn does.
            Some(joined) if joined.rewound => {
                report.rewound_turns += 1;
                return Ok(());
            }
            Some(joined) => {
                report.joined_turns += 1;
                (joined.turn_id, joined.reply_seq)
            }
            None if self.scope == Scope::RepliesOnly => return Ok(()),
            None if self.taken_back(&source) => {
                report.rewound_turns += 1;
                return Ok(());
            }
            None => (self.insert(txn, &source, report)?, None),
        };
        self.claimed.insert(turn_id.clone());
        // A reply recorded from an event stands in until the transcript's replaces it.
        let known = Known { turn_id, reply_seq, reply_digest: None };
        self.remember(txn, &key, &known)?;
        self.reply(txn, &key, known, source.reply, report).map(drop)
    }

    /// The recorded turn `source` joins: the next unclaimed one with the same prompt.
    fn join(&mut self, source: &SourceTurn) -> Option<HookTurn> {
        // The recorded prompt is as the history keeps it (cut to its cap): so is the
        // source's, before they are compared.
        let (prompt, sent) = (history::capped_text(&source.prompt), source.sent.as_deref().map(history::capped_text));
        let same = |p: &Option<String>| {
            p.as_deref()
                .is_some_and(|p| p.trim() == prompt.trim() || sent.as_deref().is_some_and(|s| p.trim() == s.trim()))
        };
        // A rewound turn's prompt went with its history: its preview stands in.
        let previews = [Some(turn::preview(&source.prompt)), source.sent.as_deref().map(turn::preview)];
        let same_preview = |r: &HookTurn| r.rewound && previews.iter().flatten().any(|p| *p == r.preview);
        let at = self.recorded[self.next..]
            .iter()
            .position(|r| {
                !self.claimed.contains(&r.turn_id)
                    && (same(&r.prompt) || (r.prompt.is_none() && same_preview(r)))
                    && can_be(&source.started_at, &r.started_at)
            })
            .map(|i| self.next + i)?;
        self.next = at + 1;
        Some(self.recorded[at].clone())
    }

    /// Whether `source`, recorded by no turn, began while turns a rewind took back ran
    /// (from the first one's start to the rewind): it is one of them.
    fn taken_back(&self, source: &SourceTurn) -> bool {
        let Ok(at) = source.started_at.parse::<jiff::Timestamp>() else { return false };
        self.rewinds.iter().any(|(from, until)| *from <= at && at <= *until)
    }

    /// A finished turn of its own, with its prompt's entry.
    fn insert(&mut self, txn: &mut dyn Txn, source: &SourceTurn, report: &mut Imported) -> Result<String> {
        let turn = turn::insert_finished_in(
            self.store,
            txn,
            self.session,
            &source.prompt,
            &source.started_at,
            &source.ended_at,
            NO_SNAPSHOT,
        )?;
        let new = NewEntry {
            prompt: source.sent.clone(),
            at: Some(source.started_at.clone()),
            ..NewEntry::new(Role::User, source.prompt.clone())
        };
        let user = history::entry_of(turn.turn_id.clone(), new);
        history::append_in(self.store, txn, self.session, &[user])?;
        report.turns += 1;
        report.entries += 1;
        Ok(turn.turn_id)
    }

    /// Records `reply` for the turn `known` names — replacing, where it stands, the one
    /// imported before if it changed — and remembers it. `true` if anything changed.
    fn reply(
        &mut self,
        txn: &mut dyn Txn,
        key: &[u8],
        mut known: Known,
        reply: Option<Entry>,
        report: &mut Imported,
    ) -> Result<bool> {
        let Some(mut reply) = reply else { return Ok(false) };
        reply.turn_id = known.turn_id.clone();
        history::cap(&mut reply);
        let digest = self.digest(&reply)?;
        if known.reply_digest.as_deref() == Some(digest.as_str()) {
            return Ok(false);
        }
        // A reply imported before is replaced only by more of it: the agent's own masking or
        // compaction of its record never thins turnback's history.
        if let (Some(_), Some(seq)) = (&known.reply_digest, known.reply_seq)
            && let Some(old) = history::entry_in(self.store, txn, self.session, seq)?
            && !grows(&old, &reply)
        {
            return Ok(false);
        }
        let replaced = match known.reply_seq {
            Some(seq) => history::replace_in(self.store, txn, self.session, seq, &reply)?,
            None => false,
        };
        if replaced {
            report.updated_turns += 1;
        } else {
            known.reply_seq = Some(history::next_seq_in(self.store, txn, self.session)?);
            history::append_in(self.store, txn, self.session, &[reply])?;
            report.entries += 1;
        }
        known.reply_digest = Some(digest);
        self.remember(txn, key, &known)?;
        Ok(true)
    }

    fn remember(&mut self, txn: &mut dyn Txn, key: &[u8], known: &Known) -> Result<()> {
        txn.put(
            schema::IMPORTED_TURNS,
            key,
            &self.store.seal_record(schema::IMPORTED_TURNS, key, KNOWN_SCHEMA, known)?,
        )?;
        self.known.insert(key.to_vec(), known.clone());
        Ok(())
    }

    /// A keyed digest of a reply (its time aside), to tell whether it grew.
    fn digest(&self, reply: &Entry) -> Result<String> {
        let plain = serde_json::to_vec(&Entry { at: String::new(), ..reply.clone() })
            .map_err(|e| Error::invalid(format!("history entry: {e}")))?;
        Ok(hex(&self.store.keys().lookup_id("imported-reply", &plain)[..16]))
    }
}

/// Whether reply `new` is reply `old` with more in it: its text and thinking go on from
/// the old, its tool calls are the old ones (outputs only added) and perhaps more.
fn grows(old: &Entry, new: &Entry) -> bool {
    let text = |o: &str, n: &str| n.starts_with(o);
    let thinking = text(old.thinking.as_deref().unwrap_or(""), new.thinking.as_deref().unwrap_or(""));
    let (old_calls, new_calls) = (old.tool_calls.as_deref().unwrap_or(&[]), new.tool_calls.as_deref().unwrap_or(&[]));
    let calls = old_calls.len() <= new_calls.len()
        && old_calls
            .iter()
            .zip(new_calls)
            .all(|(o, n)| o.name == n.name && o.input == n.input && (o.output.is_none() || o.output == n.output));
    text(&old.content, &new.content) && thinking && calls
}

/// Forgets a session's imported turns inside `txn` (its history goes with it).
pub(crate) fn delete_session_in(txn: &mut dyn Txn, session: &str) -> Result<()> {
    for key in txn.keys(schema::IMPORTED_TURNS, format!("{session}/").as_bytes())? {
        txn.delete(schema::IMPORTED_TURNS, &key)?;
    }
    Ok(())
}

/// Appends `text` to `into`, a blank line between, unless it is empty or only whitespace.
pub(crate) fn join_text(into: &mut String, text: Option<&str>) {
    if let Some(t) = text.filter(|t| !t.trim().is_empty()) {
        if !into.is_empty() {
            into.push_str("\n\n");
        }
        into.push_str(t);
    }
}

/// An empty reply entry begun at `at`.
pub(crate) fn reply_entry(at: &str) -> Entry {
    history::entry_of(
        String::new(),
        NewEntry { at: Some(at.to_string()), ..NewEntry::new(Role::Assistant, String::new()) },
    )
}
