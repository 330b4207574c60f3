//! Conversation history: an agent-neutral copy of each session's conversation, so that a
//! restarted agent, a stateless model API, a fork or a rewind still has it.
//!
//! Invariants:
//! - An entry is serialised and capped when it is appended (a later change to the
//!   caller's data cannot alter it) and stored sealed, one entry per key, in the same
//!   transaction as the session's history totals: an append is all there or not there;
//!   a crash never leaves a torn entry to read back.
//! - Every entry carries the id of the turn it belongs to; without one it joins the
//!   running turn (or, between turns, the newest).
//! - Caps are in bytes of UTF-8: text fields [`TEXT_CAP`], tool input and output
//!   [`TOOL_CAP`] each, a whole entry [`ENTRY_CAP`] (tool fields squeezed further, then
//!   the oldest tool calls dropped). Every cut is stated in the entry's `notes`.
//! - A session's history stays within its budget (`[history] max-session-size`): when an
//!   append goes over, the oldest entries go, keeping the newest that fit in half the
//!   budget and starting at a user entry; the totals say how much was compacted.
//! - Entries are read in the order of their turns, and in the order they were appended
//!   within a turn; an imported reply that grew is replaced where it is.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::base::bounded;
use crate::base::time::{format_ms, now_ms};
use crate::error::{Error, ErrorCode, Hint, Result};
use crate::session::Session;
use crate::session::turn::{self, Turn};
use crate::storage::digest;
use crate::storage::kv::Txn;
use crate::storage::schema;
use crate::storage::store::Store;

const SCHEMA: u16 = 1;
/// Most bytes of a text field (`content`, `prompt`, `thinking`).
pub(crate) const TEXT_CAP: usize = 256 * 1024;
/// Most bytes of one tool call's input, and of its output.
pub(crate) const TOOL_CAP: usize = 64 * 1024;
/// Most bytes of one whole entry, serialised.
pub(crate) const ENTRY_CAP: usize = 1024 * 1024;
/// What tool fields are squeezed to when an entry is over [`ENTRY_CAP`].
const SQUEEZED_TOOL_CAP: usize = 4 * 1024;

/// Who spoke.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The person (or whoever sent the prompt).
    User,
    /// The agent.
    Assistant,
}

/// One tool call made in an assistant entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
pub struct ToolCall {
    /// The tool's name.
    pub name: String,
    /// What it was called with.
    #[serde(default)]
    pub input: Value,
    /// What it returned, if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    /// It failed (the agent was told of an error).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<bool>,
}

/// One history entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    /// The turn it belongs to.
    pub turn_id: String,
    /// Who spoke.
    pub role: Role,
    /// What was said.
    pub content: String,
    /// The prompt as sent, when it differs from `content`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// The agent's reasoning, when shown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thinking: Option<String>,
    /// Tool calls, oldest first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCall>>,
    /// Work the agent started on its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub background: Option<bool>,
    /// When it was recorded (RFC 3339).
    pub at: String,
    /// What was cut to fit the caps, and how much.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// An entry as a caller hands it in: the turn and time may be left to us.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NewEntry {
    /// The turn (default: the running turn, else the newest).
    #[serde(default)]
    pub turn_id: Option<String>,
    /// Who spoke.
    pub role: Role,
    /// What was said. Required: an entry without it says nothing and is refused (an
    /// empty string is a deliberate empty reply).
    pub content: String,
    /// The prompt as sent.
    #[serde(default)]
    pub prompt: Option<String>,
    /// The agent's reasoning.
    #[serde(default)]
    pub thinking: Option<String>,
    /// Tool calls.
    #[serde(default)]
    pub tool_calls: Option<Vec<ToolCall>>,
    /// Background work.
    #[serde(default)]
    pub background: Option<bool>,
    /// When (default: now).
    #[serde(default)]
    pub at: Option<String>,
}

impl NewEntry {
    /// An entry of `role` saying `content`, in the running turn (else the newest), now.
    pub fn new(role: Role, content: String) -> Self {
        NewEntry {
            turn_id: None,
            role,
            content,
            prompt: None,
            thinking: None,
            tool_calls: None,
            background: None,
            at: None,
        }
    }

    /// A user's prompt in turn `turn_id`, recorded now.
    pub fn prompt(turn_id: &str, text: String) -> Self {
        NewEntry { turn_id: Some(turn_id.to_string()), ..NewEntry::new(Role::User, text) }
    }
}

/// A session's history totals.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub(crate) struct Totals {
    /// The next entry's sequence number.
    pub next_seq: u64,
    /// Entries kept.
    pub entries: u64,
    /// Bytes of the entries kept (serialised).
    pub bytes: u64,
    /// Entries removed by compaction, ever.
    pub compacted_entries: u64,
    /// Their bytes.
    pub compacted_bytes: u64,
}

/// A read of a session's history.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct View {
    /// The session.
    pub session_id: String,
    /// The entries, oldest first.
    pub entries: Vec<Entry>,
    /// Whether earlier entries exist that are not shown (a tail, or compacted ones).
    pub partial: bool,
    /// Entries compaction removed from this session.
    pub compacted_entries: u64,
}

/// Which part of a history to read.
#[derive(Debug, Clone)]
pub enum Selection {
    /// Everything kept.
    All,
    /// The entries of one turn.
    Turn(String),
    /// The newest `n` entries, widened back to start at a user entry.
    Tail(usize),
}

fn entry_key(session: &str, seq: u64) -> Vec<u8> {
    format!("{session}/{seq:016x}").into_bytes()
}

fn prefix(session: &str) -> Vec<u8> {
    format!("{session}/").into_bytes()
}

pub(crate) fn totals_in(store: &Store, txn: &mut dyn Txn, session: &str) -> Result<Totals> {
    match txn.get(schema::HISTORY_TOTALS, session.as_bytes())? {
        Some(v) => store.open_record(schema::HISTORY_TOTALS, session.as_bytes(), &v),
        None => Ok(Totals::default()),
    }
}

pub(crate) fn put_totals_in(store: &Store, txn: &mut dyn Txn, session: &str, t: &Totals) -> Result<()> {
    let sealed = store.seal_record(schema::HISTORY_TOTALS, session.as_bytes(), SCHEMA, t)?;
    digest::put(store.keys(), txn, schema::HISTORY_TOTALS, session.as_bytes(), &sealed)
}

/// The session's totals.
pub(crate) fn totals(store: &Store, session: &str) -> Result<Totals> {
    Ok(store.get_record(schema::HISTORY_TOTALS, session.as_bytes())?.unwrap_or_default())
}

// ---------------------------------------------------------------------------------------
// Caps
// ---------------------------------------------------------------------------------------

/// `text` cut to at most `cap` bytes on a character boundary, with a marker saying how
/// much was cut; `None` if it fits. Returns the cut text, the bytes cut and the bytes the
/// text had: a text already cut when it was read ([`bounded`]) counts that cut too.
fn cut_text(text: &str, cap: usize) -> Option<(String, usize, usize)> {
    if text.len() <= cap {
        return None;
    }
    let (body, before) = bounded::earlier_cut(text);
    let marker_room = 64;
    let mut end = cap.saturating_sub(marker_room).min(body.len());
    while !body.is_char_boundary(end) {
        end -= 1;
    }
    let (cut, original) = (body.len() - end + before, body.len() + before);
    Some((format!("{}{}", &body[..end], bounded::marker(cut)), cut, original))
}

/// `text` as a text field of an entry keeps it (cut to [`TEXT_CAP`]).
pub(crate) fn capped_text(text: &str) -> std::borrow::Cow<'_, str> {
    match cut_text(text, TEXT_CAP) {
        Some((cut, ..)) => std::borrow::Cow::Owned(cut),
        None => std::borrow::Cow::Borrowed(text),
    }
}

fn cap_field(field: &mut Option<String>, name: &str, cap: usize, notes: &mut Vec<String>) {
    if let Some(text) = field.as_deref()
        && let Some((cut, n, original)) = cut_text(text, cap)
    {
        notes.push(format!("{name}: cut {n} of {original} bytes"));
        *field = Some(cut);
    }
}

/// A JSON value capped at `cap` serialised bytes: a string is cut like text; anything
/// else over the cap becomes `{"truncated": <the start of its JSON text>, "bytes": N}`.
fn cap_value(value: &mut Value, what: &str, cap: usize, notes: &mut Vec<String>) {
    let len = serde_json::to_string(value).map_or(0, |s| s.len());
    if len <= cap {
        return;
    }
    if let Value::String(s) = value {
        // Cut until the JSON form fits (escapes can make it longer than the text).
        // Start below the text's own length: a short text can be long as JSON (escapes).
        let mut target = cap.saturating_sub(2).min(s.len().saturating_sub(1));
        loop {
            let Some((cut, n, original)) = cut_text(s, target) else { return };
            if serde_json::to_string(&cut).map_or(usize::MAX, |j| j.len()) <= cap {
                notes.push(format!("{what}: cut {n} of {original} bytes"));
                *s = cut;
                return;
            }
            target = target * 3 / 4;
        }
    }
    let text = serde_json::to_string(value).unwrap_or_default();
    let (start, ..) = cut_text(&text, cap / 2).unwrap_or((text.clone(), 0, 0));
    notes.push(format!("{what}: {len} bytes of JSON truncated"));
    *value = serde_json::json!({ "truncated": start, "bytes": len });
}

fn cap_tools(calls: &mut [ToolCall], cap: usize, notes: &mut Vec<String>) {
    for (i, call) in calls.iter_mut().enumerate() {
        cap_value(&mut call.input, &format!("toolCalls[{i}].input"), cap, notes);
        if let Some(out) = call.output.as_mut() {
            cap_value(out, &format!("toolCalls[{i}].output"), cap, notes);
        }
    }
}

fn size(entry: &Entry) -> usize {
    serde_json::to_vec(entry).map_or(usize::MAX, |v| v.len())
}

/// Applies every cap to `entry`, noting each cut.
pub(crate) fn cap(entry: &mut Entry) {
    let mut notes = std::mem::take(&mut entry.notes);
    let mut content = Some(std::mem::take(&mut entry.content));
    cap_field(&mut content, "content", TEXT_CAP, &mut notes);
    entry.content = content.unwrap_or_default();
    cap_field(&mut entry.prompt, "prompt", TEXT_CAP, &mut notes);
    cap_field(&mut entry.thinking, "thinking", TEXT_CAP, &mut notes);
    if let Some(calls) = entry.tool_calls.as_mut() {
        cap_tools(calls, TOOL_CAP, &mut notes);
    }
    entry.notes = notes;
    if size(entry) <= ENTRY_CAP {
        return;
    }
    // Over the whole-entry cap: squeeze the tool fields, then drop the oldest calls.
    let mut notes = std::mem::take(&mut entry.notes);
    if let Some(calls) = entry.tool_calls.as_mut() {
        cap_tools(calls, SQUEEZED_TOOL_CAP, &mut notes);
    }
    entry.notes = notes;
    let mut dropped = 0;
    while size(entry) > ENTRY_CAP && entry.tool_calls.as_ref().is_some_and(|c| !c.is_empty()) {
        entry.tool_calls.as_mut().expect("checked").remove(0);
        dropped += 1;
    }
    if dropped > 0 {
        entry.notes.push(format!("dropped the {dropped} oldest tool calls to fit {ENTRY_CAP} bytes"));
    }
    // Text alone can still be over once escaped as JSON (control characters take six
    // bytes each): halve the longest text field until the entry fits.
    while size(entry) > ENTRY_CAP {
        let mut notes = std::mem::take(&mut entry.notes);
        let mut content = Some(std::mem::take(&mut entry.content));
        let longest = [content.as_ref(), entry.prompt.as_ref(), entry.thinking.as_ref()]
            .map(|f| f.map_or(0, String::len))
            .into_iter()
            .enumerate()
            .max_by_key(|(_, len)| *len)
            .map_or(0, |(i, _)| i);
        let (field, name) = match longest {
            0 => (&mut content, "content"),
            1 => (&mut entry.prompt, "prompt"),
            _ => (&mut entry.thinking, "thinking"),
        };
        let half = field.as_ref().map_or(0, |f| f.len() / 2);
        cap_field(field, name, half, &mut notes);
        entry.content = content.unwrap_or_default();
        entry.notes = notes;
        if half < 128 {
            break;
        }
    }
}

// ---------------------------------------------------------------------------------------
// Writing
// ---------------------------------------------------------------------------------------

/// Resolves which turn a new entry joins.
fn turn_for(store: &Store, session: &str, asked: Option<&str>) -> Result<Turn> {
    if let Some(id) = asked {
        let t = turn::get(store, id)?;
        if t.session_id != session {
            return Err(Error::invalid(format!("turn {id} belongs to another session")));
        }
        return Ok(t);
    }
    if let Some(t) = turn::running(store, session)? {
        return Ok(t);
    }
    turn::list(store, session)?.pop().ok_or_else(|| {
        Error::invalid("the session has no turn yet: begin one, or give turnId").with_hint(Hint::BeginTurn)
    })
}

/// Builds the stored form of `new` (turn resolved, caps applied) without storing it.
pub(crate) fn prepare(store: &Store, session: &Session, new: NewEntry) -> Result<Entry> {
    let turn = turn_for(store, &session.id, new.turn_id.as_deref())?;
    Ok(entry_of(turn.turn_id, new))
}

/// The stored form of `new` in turn `turn_id` (caps applied).
pub(crate) fn entry_of(turn_id: String, new: NewEntry) -> Entry {
    let prompt = new.prompt.filter(|p| *p != new.content);
    let mut entry = Entry {
        turn_id,
        role: new.role,
        content: new.content,
        prompt,
        thinking: new.thinking,
        tool_calls: new.tool_calls.filter(|c| !c.is_empty()),
        background: new.background.filter(|b| *b),
        at: new.at.unwrap_or_else(|| format_ms(now_ms())),
        notes: Vec::new(),
    };
    cap(&mut entry);
    entry
}

/// Appends `new` to the session's history, durably; compacts if over the budget.
///
/// # Errors
/// `not-found` for an unknown turn; `invalid-argument` if there is no turn to join.
pub(crate) fn append(store: &Store, session: &Session, new: NewEntry) -> Result<Entry> {
    let entry = prepare(store, session, new)?;
    append_prepared(store, &session.id, std::slice::from_ref(&entry))?;
    Ok(entry)
}

/// Appends the agent's reply `new` unless the newest entry is that very reply (the same
/// reply delivered again — at the same moment, too: the check and the append are one
/// transaction). `None`: it was there already.
///
/// # Errors
/// As [`append`].
pub(crate) fn append_reply(store: &Store, session: &Session, new: NewEntry) -> Result<Option<Entry>> {
    let entry = prepare(store, session, new)?;
    let mut txn = store.kv().begin()?;
    let newest = match totals_in(store, &mut *txn, &session.id)?.next_seq.checked_sub(1) {
        Some(seq) => entry_in(store, &mut *txn, &session.id, seq)?,
        None => None,
    };
    if newest.is_some_and(|e| e.role == Role::Assistant && e.content == entry.content) {
        return Ok(None);
    }
    append_in(store, &mut *txn, &session.id, std::slice::from_ref(&entry))?;
    txn.commit()?;
    enforce_budget(store, &session.id)?;
    Ok(Some(entry))
}

/// Stores already prepared entries in one transaction, then compacts if over budget.
pub(crate) fn append_prepared(store: &Store, session: &str, entries: &[Entry]) -> Result<()> {
    let mut txn = store.kv().begin()?;
    append_in(store, &mut *txn, session, entries)?;
    crate::base::failpoint::hit("history-before-commit");
    txn.commit()?;
    enforce_budget(store, session)
}

/// Compacts the session's history to half its budget if it is over.
pub(crate) fn enforce_budget(store: &Store, session: &str) -> Result<()> {
    let budget = store.settings().history_max_session_bytes;
    if totals(store, session)?.bytes > budget {
        compact(store, session, budget / 2)?;
    }
    Ok(())
}

pub(crate) fn append_in(store: &Store, txn: &mut dyn Txn, session: &str, entries: &[Entry]) -> Result<Totals> {
    let mut totals = totals_in(store, txn, session)?;
    for entry in entries {
        let key = entry_key(session, totals.next_seq);
        let plain = serde_json::to_vec(entry).map_err(|e| Error::invalid(format!("history entry: {e}")))?;
        txn.put(schema::HISTORY, &key, &store.seal_bytes(schema::HISTORY, &key, SCHEMA, &plain)?)?;
        totals.next_seq += 1;
        totals.entries += 1;
        totals.bytes += plain.len() as u64;
    }
    put_totals_in(store, txn, session, &totals)?;
    Ok(totals)
}

/// Replaces, inside `txn`, entry `seq` of the session with `entry` (an imported reply that
/// grew), if it is still kept and still belongs to `entry`'s turn; `false` otherwise.
pub(crate) fn replace_in(store: &Store, txn: &mut dyn Txn, session: &str, seq: u64, entry: &Entry) -> Result<bool> {
    let key = entry_key(session, seq);
    let Some(old) = txn.get(schema::HISTORY, &key)? else { return Ok(false) };
    let (was, old_size) = open_entry(store, &key, &old)?;
    if was.turn_id != entry.turn_id {
        return Ok(false);
    }
    let plain = serde_json::to_vec(entry).map_err(|e| Error::invalid(format!("history entry: {e}")))?;
    txn.put(schema::HISTORY, &key, &store.seal_bytes(schema::HISTORY, &key, SCHEMA, &plain)?)?;
    let mut totals = totals_in(store, txn, session)?;
    totals.bytes = (totals.bytes + plain.len() as u64).saturating_sub(old_size);
    put_totals_in(store, txn, session, &totals)?;
    Ok(true)
}

/// Entry `seq` of the session, read inside `txn`, if it is still kept.
pub(crate) fn entry_in(store: &Store, txn: &mut dyn Txn, session: &str, seq: u64) -> Result<Option<Entry>> {
    let key = entry_key(session, seq);
    let Some(value) = txn.get(schema::HISTORY, &key)? else { return Ok(None) };
    Ok(Some(open_entry(store, &key, &value)?.0))
}

/// The sequence number in an entry's key (as [`keyed`] returns them).
pub(crate) fn seq_of(key: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(key).ok()?;
    u64::from_str_radix(text.rsplit_once('/')?.1, 16).ok()
}

/// The sequence number the next entry appended to the session gets.
pub(crate) fn next_seq_in(store: &Store, txn: &mut dyn Txn, session: &str) -> Result<u64> {
    Ok(totals_in(store, txn, session)?.next_seq)
}

/// Removes the oldest entries so the newest that fit in `keep` bytes remain, starting at
/// a user entry. Returns how many were removed.
pub(crate) fn compact(store: &Store, session: &str, keep: u64) -> Result<u64> {
    let all = keyed(store, session)?;
    // Walk back from the newest while it fits; then forward to a user entry.
    let mut kept_bytes = 0u64;
    let mut start = all.len();
    while start > 0 {
        let len = all[start - 1].2;
        if kept_bytes + len > keep {
            break;
        }
        kept_bytes += len;
        start -= 1;
    }
    while start < all.len() && all[start].1.role != Role::User {
        start += 1;
    }
    if start == all.len() {
        // Not even the newest turn fits: keep it anyway (from its user entry), never nothing.
        start = all.iter().rposition(|e| e.1.role == Role::User).unwrap_or(all.len().saturating_sub(1));
    }
    if start == 0 {
        return Ok(0);
    }
    let mut txn = store.kv().begin()?;
    let mut totals = totals_in(store, &mut *txn, session)?;
    // Counted only where the delete found the entry: a concurrent compaction or rewind
    // may have removed some already.
    let (mut removed, mut removed_bytes) = (0u64, 0u64);
    for (key, _, len) in &all[..start] {
        if txn.delete(schema::HISTORY, key)? {
            removed += 1;
            removed_bytes += len;
        }
    }
    totals.entries = totals.entries.saturating_sub(removed);
    totals.bytes = totals.bytes.saturating_sub(removed_bytes);
    totals.compacted_entries += removed;
    totals.compacted_bytes += removed_bytes;
    put_totals_in(store, &mut *txn, session, &totals)?;
    txn.commit()?;
    Ok(removed)
}

// ---------------------------------------------------------------------------------------
// Reading
// ---------------------------------------------------------------------------------------

/// Every kept entry with its key and serialised size, oldest first.
pub(crate) fn keyed(store: &Store, session: &str) -> Result<Vec<(Vec<u8>, Entry, u64)>> {
    let mut raw = Vec::new();
    store.kv().scan(schema::HISTORY, &prefix(session), &mut |k, v| {
        raw.push((k.to_vec(), v.to_vec()));
        Ok(true)
    })?;
    raw.into_iter()
        .map(|(k, v)| {
            let (entry, size) = open_entry(store, &k, &v)?;
            Ok((k, entry, size))
        })
        .collect()
}

/// The entry stored under `key` (`value` as the table holds it), and its serialised size.
fn open_entry(store: &Store, key: &[u8], value: &[u8]) -> Result<(Entry, u64)> {
    let plain = store.open_bytes(schema::HISTORY, key, value)?;
    let entry =
        serde_json::from_slice(&plain).map_err(|e| Error::corrupt("history entry", format!("does not parse: {e}")))?;
    Ok((entry, plain.len() as u64))
}

/// Reads the session's history.
///
/// # Errors
/// `corrupt` if an entry does not verify; `not-found` for an unknown turn.
pub(crate) fn read(store: &Store, session: &str, selection: &Selection) -> Result<View> {
    let mut all: Vec<Entry> = keyed(store, session)?.into_iter().map(|(_, e, _)| e).collect();
    // In the order of their turns (a reply imported later still follows its prompt), and
    // in the order they were recorded within a turn. Entries of turns no longer listed
    // (the oldest, pruned) come first.
    let position: std::collections::HashMap<String, u64> =
        turn::list(store, session)?.into_iter().map(|t| (t.turn_id, t.index)).collect();
    all.sort_by_key(|e| position.get(&e.turn_id).copied().unwrap_or(0));
    let compacted = totals(store, session)?.compacted_entries;
    let (entries, partial) = match selection {
        Selection::All => (all, compacted > 0),
        Selection::Turn(id) => (all.into_iter().filter(|e| e.turn_id == *id).collect(), false),
        Selection::Tail(0) => {
            let partial = !all.is_empty() || compacted > 0;
            (Vec::new(), partial)
        }
        Selection::Tail(n) => {
            let mut start = all.len().saturating_sub(*n);
            while start > 0 && start < all.len() && all[start].role != Role::User {
                start -= 1;
            }
            let partial = start > 0 || compacted > 0;
            (all.into_iter().skip(start).collect(), partial)
        }
    };
    Ok(View { session_id: session.to_string(), entries, partial, compacted_entries: compacted })
}

/// The prompt that started turn `turn_id`: its first user entry's prompt as sent (or its
/// content).
pub(crate) fn prompt_of(store: &Store, session: &str, turn_id: &str) -> Result<Option<String>> {
    let view = read(store, session, &Selection::Turn(turn_id.to_string()))?;
    Ok(view.entries.into_iter().find(|e| e.role == Role::User).map(|e| e.prompt.unwrap_or(e.content)))
}

// ---------------------------------------------------------------------------------------
// Forks and rewinds
// ---------------------------------------------------------------------------------------

/// Copies into `to` the entries of `from` whose turns are mapped, re-labelled with the
/// new turn ids, inside `txn` (a fork's transaction). `entries` were read beforehand.
pub(crate) fn copy_in(
    store: &Store,
    txn: &mut dyn Txn,
    to: &str,
    entries: &[Entry],
    turn_map: &std::collections::HashMap<String, String>,
) -> Result<u64> {
    let copied: Vec<Entry> = entries
        .iter()
        .filter_map(|e| turn_map.get(&e.turn_id).map(|t| Entry { turn_id: t.clone(), ..e.clone() }))
        .collect();
    append_in(store, txn, to, &copied)?;
    Ok(copied.len() as u64)
}

/// Removes the entries of the turns `turn_ids` (a rewind to the first of them) inside
/// `txn`, keeping them with the rewind's `checkpoint` (see [`restore_cut`]). Returns how
/// many were removed.
pub(crate) fn cut_in(
    store: &Store,
    txn: &mut dyn Txn,
    session: &str,
    keyed: &[(Vec<u8>, Entry, u64)],
    turn_ids: &std::collections::HashSet<String>,
    checkpoint: Option<&str>,
) -> Result<u64> {
    let mut totals = totals_in(store, txn, session)?;
    let mut kept: Vec<(u64, &Entry)> = Vec::new();
    for (key, entry, len) in keyed {
        if turn_ids.contains(&entry.turn_id) && txn.delete(schema::HISTORY, key)? {
            totals.entries = totals.entries.saturating_sub(1);
            totals.bytes = totals.bytes.saturating_sub(*len);
            kept.extend(seq_of(key).map(|seq| (seq, entry)));
        }
    }
    put_totals_in(store, txn, session, &totals)?;
    if let Some(checkpoint) = checkpoint.filter(|_| !kept.is_empty()) {
        let key = cut_key(session, checkpoint);
        let plain = serde_json::to_vec(&kept).map_err(|e| Error::invalid(format!("history entries: {e}")))?;
        txn.put(schema::HISTORY_CUT, &key, &store.seal_bytes(schema::HISTORY_CUT, &key, SCHEMA, &plain)?)?;
    }
    Ok(kept.len() as u64)
}

fn cut_key(session: &str, checkpoint: &str) -> Vec<u8> {
    format!("{session}/{checkpoint}").into_bytes()
}

/// Gives back what the rewind whose checkpoint is `checkpoint` cut (its undo was applied):
/// its turns lose their rewound mark, and its entries come back, each under its own
/// sequence number, so they stand where they stood; an entry whose place was taken
/// meanwhile stays out. Nothing when that rewind cut nothing (or `checkpoint` is no
/// rewind's). Returns how many entries came back.
pub(crate) fn restore_cut(store: &Store, session: &str, checkpoint: &str) -> Result<u64> {
    let turns = crate::session::turn::list(store, session)?;
    let key = cut_key(session, checkpoint);
    let mut txn = store.kv().begin()?;
    crate::session::turn::unmark_rewound_in(store, &mut *txn, &turns, checkpoint)?;
    let Some(value) = txn.get(schema::HISTORY_CUT, &key)? else {
        txn.commit()?;
        return Ok(0);
    };
    let plain = store.open_bytes(schema::HISTORY_CUT, &key, &value)?;
    let kept: Vec<(u64, Entry)> = serde_json::from_slice(&plain)
        .map_err(|e| Error::corrupt("cut history entries", format!("do not parse: {e}")))?;
    let mut totals = totals_in(store, &mut *txn, session)?;
    let mut restored = 0;
    for (seq, entry) in kept {
        let entry_key = entry_key(session, seq);
        if txn.get(schema::HISTORY, &entry_key)?.is_some() {
            continue;
        }
        let plain = serde_json::to_vec(&entry).map_err(|e| Error::invalid(format!("history entry: {e}")))?;
        txn.put(schema::HISTORY, &entry_key, &store.seal_bytes(schema::HISTORY, &entry_key, SCHEMA, &plain)?)?;
        totals.entries += 1;
        totals.bytes += plain.len() as u64;
        totals.next_seq = totals.next_seq.max(seq + 1);
        restored += 1;
    }
    put_totals_in(store, &mut *txn, session, &totals)?;
    txn.delete(schema::HISTORY_CUT, &key)?;
    txn.commit()?;
    Ok(restored)
}

/// Deletes a session's whole history inside `txn`.
pub(crate) fn delete_session_in(store: &Store, txn: &mut dyn Txn, session: &str) -> Result<u64> {
    let keys = txn.keys(schema::HISTORY, &prefix(session))?;
    for k in &keys {
        txn.delete(schema::HISTORY, k)?;
    }
    for k in txn.keys(schema::HISTORY_CUT, &prefix(session))? {
        txn.delete(schema::HISTORY_CUT, &k)?;
    }
    digest::delete(store.keys(), txn, schema::HISTORY_TOTALS, session.as_bytes())?;
    Ok(keys.len() as u64)
}

// ---------------------------------------------------------------------------------------
// Export
// ---------------------------------------------------------------------------------------

/// One message of a chat-completions style array.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
pub struct Message {
    /// `user` or `assistant`.
    pub role: Role,
    /// The text.
    pub content: String,
}

/// The history as plain role/content messages, ready to seed a stateless model API:
/// entries with no text (tool calls only) are left out.
pub(crate) fn messages(entries: &[Entry]) -> Vec<Message> {
    entries
        .iter()
        .filter(|e| !e.content.is_empty())
        .map(|e| Message { role: e.role, content: e.content.clone() })
        .collect()
}

/// Cross-checks each session's history entries against its totals, for `verify`: as
/// many entries as the totals count, none at or past the next sequence number.
pub(crate) fn cross_check(store: &Store) -> Result<Vec<(String, Error)>> {
    let mut seqs: std::collections::BTreeMap<String, Vec<u64>> = std::collections::BTreeMap::new();
    store.kv().scan_keys(schema::HISTORY, b"", &mut |k| {
        let session = String::from_utf8_lossy(k.split(|b| *b == b'/').next().unwrap_or(k)).into_owned();
        seqs.entry(session).or_default().extend(seq_of(k));
        Ok(true)
    })?;
    store.kv().scan_keys(schema::HISTORY_TOTALS, b"", &mut |k| {
        seqs.entry(String::from_utf8_lossy(k).into_owned()).or_default();
        Ok(true)
    })?;
    let mut problems = Vec::new();
    for (session, kept) in seqs {
        // Altered totals are reported where every sealed record is opened.
        let Ok(t) = totals(store, &session) else { continue };
        let what = format!("history of session {session}");
        if kept.len() as u64 != t.entries {
            problems.push((
                what.clone(),
                Error::new(
                    ErrorCode::NotFound,
                    format!(
                        "{} entries kept, its totals count {}: entries deleted or added outside turnback",
                        kept.len(),
                        t.entries
                    ),
                ),
            ));
        }
        if let Some(past) = kept.iter().find(|s| **s >= t.next_seq) {
            problems.push((
                what,
                Error::corrupt("history", format!("entry {past} is past the next sequence number {}", t.next_seq)),
            ));
        }
    }
    Ok(problems)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(content: &str) -> Entry {
        Entry {
            turn_id: "t".into(),
            role: Role::Assistant,
            content: content.into(),
            prompt: None,
            thinking: None,
            tool_calls: None,
            background: None,
            at: "2026-11-30T00:00:00Z".into(),
            notes: vec![],
        }
    }

    #[test]
    fn text_is_cut_in_bytes_on_a_character_boundary_and_says_how_much() {
        let text = "é".repeat(TEXT_CAP); // two bytes each: twice the cap
        let mut e = entry(&text);
        cap(&mut e);
        assert!(e.content.len() <= TEXT_CAP, "{}", e.content.len());
        assert!(e.content.starts_with('é'));
        let cut = text.len() - e.content.find('\n').unwrap();
        assert!(e.content.ends_with(&format!("[turnback: cut {cut} bytes]")), "{}", &e.content[e.content.len() - 40..]);
        assert_eq!(e.notes, vec![format!("content: cut {cut} of {} bytes", text.len())]);
    }

    #[test]
    fn oversized_tool_input_becomes_truncated_and_output_is_cut() {
        let mut e = entry("ok");
        let big = "x".repeat(TOOL_CAP * 2);
        e.tool_calls = Some(vec![ToolCall {
            name: "Write".into(),
            input: serde_json::json!({ "content": big }),
            output: Some(Value::String("ü".repeat(TOOL_CAP))),
            error: None,
        }]);
        cap(&mut e);
        let call = &e.tool_calls.as_ref().unwrap()[0];
        assert!(call.input.get("truncated").is_some_and(Value::is_string), "{:?}", call.input.get("bytes"));
        assert_eq!(call.input["bytes"], serde_json::json!(TOOL_CAP * 2 + 14));
        assert!(serde_json::to_string(&call.input).unwrap().len() <= TOOL_CAP);
        assert!(serde_json::to_string(call.output.as_ref().unwrap()).unwrap().len() <= TOOL_CAP);
        assert_eq!(e.notes.len(), 2, "{:?}", e.notes);
    }

    #[test]
    fn caps_hold_for_text_that_json_escapes_long() {
        let mut e = entry("ok");
        e.tool_calls = Some(vec![ToolCall {
            name: "Bash".into(),
            input: Value::Null,
            output: Some(Value::String("\u{1}".repeat(60_000))),
            error: None,
        }]);
        cap(&mut e);
        let out = serde_json::to_string(e.tool_calls.as_ref().unwrap()[0].output.as_ref().unwrap()).unwrap();
        assert!(out.len() <= TOOL_CAP, "{}", out.len());
        assert_eq!(e.notes.len(), 1, "{:?}", e.notes);
        let mut e = entry("ok");
        e.thinking = Some("\u{2}".repeat(250_000)); // under 256 KiB as text, 1.5 MB as JSON
        cap(&mut e);
        assert!(size(&e) <= ENTRY_CAP, "{}", size(&e));
        assert!(e.notes.iter().any(|n| n.starts_with("thinking: cut")), "{:?}", e.notes);
    }

    #[test]
    fn an_entry_over_one_mib_keeps_the_newest_tool_calls_and_says_how_many_went() {
        let mut e = entry("done");
        // 40 calls of ~60 KiB each are under their own cap but 2.4 MiB together; even
        // squeezed, 400 such calls would not fit.
        let calls: Vec<ToolCall> = (0..400)
            .map(|i| ToolCall {
                name: format!("call-{i}"),
                input: serde_json::json!({ "n": i, "pad": "y".repeat(3000) }),
                output: None,
                error: None,
            })
            .collect();
        e.tool_calls = Some(calls);
        cap(&mut e);
        assert!(size(&e) <= ENTRY_CAP);
        let kept = e.tool_calls.as_ref().unwrap();
        assert_eq!(kept.last().unwrap().name, "call-399", "the newest call is kept");
        let dropped = 400 - kept.len();
        assert!(dropped > 0);
        assert!(
            e.notes.iter().any(|n| n == &format!("dropped the {dropped} oldest tool calls to fit {ENTRY_CAP} bytes"))
        );
    }

    #[test]
    fn an_entry_given_without_content_is_refused_and_an_empty_one_is_kept() {
        let missing = serde_json::from_str::<NewEntry>(r#"{"role":"user"}"#).unwrap_err();
        assert!(missing.to_string().contains("content"), "{missing}");
        let empty: NewEntry = serde_json::from_str(r#"{"role":"assistant","content":""}"#).unwrap();
        assert_eq!(empty.content, "");
    }
}
