//! Sessions, forks and the conversation history through the facade.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::api::Turnback;
use crate::api::views;
use crate::base::bounded;
use crate::checkpoint::{self, ListFilter};
use crate::error::{Error, IoResultExt, Result};
use crate::session::Session;
use crate::session::fork;
use crate::session::history::{self, Entry, Message, NewEntry, Selection, View};
use crate::session::import::{self, Format, Imported, Scope};
use crate::session::turn;
use crate::snapshot;

/// The sessions of the workspace.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
pub struct SessionList {
    /// The workspace root.
    pub workspace: PathBuf,
    /// Its sessions, oldest first.
    pub sessions: Vec<views::Session>,
}

/// One session in numbers.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct SessionInfo {
    /// The session.
    pub session: views::Session,
    /// Its turns.
    pub turns: usize,
    /// The running turn's id.
    pub running_turn: Option<String>,
    /// Its snapshots.
    pub snapshots: usize,
    /// Bytes they stored.
    pub snapshot_stored_bytes: u64,
    /// Its complete checkpoints.
    pub checkpoints: usize,
}

/// History entries appended.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Appended {
    /// The session.
    pub session_id: String,
    /// The entries as stored (caps applied, cuts noted).
    pub appended: Vec<Entry>,
}

/// Most bytes of an agent's transcript kept once its long strings are cut (256 MiB): a
/// 2,000-turn session's is about 9 MB.
const TRANSCRIPT_CAP: usize = 256 * 1024 * 1024;

impl Turnback {
    /// Creates a session in the workspace (with `id`, or a fresh one).
    ///
    /// # Errors
    /// `already-exists` if `id` is taken; `invalid-argument` if it is malformed.
    pub fn new_session(&self, id: Option<&str>) -> Result<views::Session> {
        Session::create_for(&self.store, self.workspace_record()?, id, self.agent.as_deref()).map(|s| (&s).into())
    }

    /// The sessions of the workspace.
    ///
    /// # Errors
    /// Store errors.
    pub fn sessions(&self) -> Result<SessionList> {
        let ws = self.workspace_record()?;
        Ok(SessionList {
            workspace: ws.root.clone(),
            sessions: Session::list(&self.store, ws)?.iter().map(Into::into).collect(),
        })
    }

    /// Session `id` (default: this one) in numbers.
    ///
    /// # Errors
    /// `not-found`.
    pub fn session_info(&self, id: Option<&str>) -> Result<SessionInfo> {
        let session = match id {
            Some(id) => Session::get(&self.store, id)?.ok_or_else(|| Error::not_found(format!("session {id}")))?,
            None => self.session_record()?.clone(),
        };
        let turns = turn::list(&self.store, &session.id)?;
        let snaps = snapshot::list(&self.store, &session.id)?;
        let checkpoints = checkpoint::list(&self.store, &session.id, ListFilter::default())?.records.len();
        Ok(SessionInfo {
            running_turn: turns.iter().rev().find(|t| t.running()).map(|t| t.turn_id.clone()),
            turns: turns.len(),
            snapshots: snaps.len(),
            snapshot_stored_bytes: snaps.iter().map(|r| r.stored_bytes).sum(),
            checkpoints,
            session: (&session).into(),
        })
    }

    /// Forks session `from` after turn `after` (default: its newest): a new session
    /// carrying its turns, snapshots and history through that turn; with `into`, also the
    /// files as they were right after it, written into that new or empty directory, which
    /// must lie outside the workspace, the store and any `.git` and be reached through no
    /// symlink. A relative `into` is taken from the directory relative paths are resolved
    /// from.
    ///
    /// # Errors
    /// `not-found` for an unknown session or turn, or a state after the turn that was not
    /// snapshotted; `path-rejected` if `into` is in a `.git`, inside or above the workspace,
    /// the store or the keys, or reached through a symlink; `already-exists` if it is not an
    /// empty directory.
    pub fn fork(&self, from: &str, after: Option<u64>, into: Option<&Path>, id: Option<&str>) -> Result<views::Forked> {
        let into = match into {
            Some(dir) if dir.is_relative() => Some(self.cwd()?.join(dir)),
            other => other.map(Path::to_path_buf),
        };
        fork::fork(&self.store, from, after, into.as_deref(), id).map(Into::into)
    }

    /// Appends conversation entries to the session's history, each durably before the
    /// next; an entry without a turn joins the running turn (else the newest).
    ///
    /// # Errors
    /// `not-found` for an unknown turn; `invalid-argument` if there is no turn to join.
    pub fn history_append(&self, entries: Vec<NewEntry>) -> Result<Appended> {
        let session = self.session_record()?;
        let appended =
            entries.into_iter().map(|e| history::append(&self.store, session, e)).collect::<Result<Vec<_>>>()?;
        Ok(Appended { session_id: session.id.clone(), appended })
    }

    /// Appends the agent's reply unless the history's newest entry is that reply already
    /// (delivered again, perhaps at the same moment): see [`history::append_reply`].
    pub(crate) fn append_reply(&self, entry: NewEntry) -> Result<bool> {
        Ok(history::append_reply(&self.store, self.session_record()?, entry)?.is_some())
    }

    /// The session's history, or part of it.
    ///
    /// # Errors
    /// Store errors.
    pub fn history(&self, selection: &Selection) -> Result<View> {
        history::read(&self.store, &self.session_record()?.id, selection)
    }

    /// The session's history as `[{role, content}]` messages, to seed a stateless model.
    ///
    /// # Errors
    /// Store errors.
    pub fn history_messages(&self) -> Result<Vec<Message>> {
        Ok(history::messages(&self.history(&Selection::All)?.entries))
    }

    /// Imports an agent's transcript (the text of its file, in `format`) into the session's
    /// history and turns. Turns the hooks recorded with the same prompts get their replies
    /// instead of being recorded twice; with [`ImportScope::RepliesOnly`](Scope::RepliesOnly)
    /// nothing else is added. Running it again adds only what the transcript gained.
    ///
    /// # Errors
    /// `invalid-argument` if the text is not such a transcript.
    pub fn import_transcript(&self, format: Format, text: &str, scope: Scope) -> Result<Imported> {
        import::import(&self.store, self.session_record()?, format, text, scope)
    }

    /// [`import_transcript`](Self::import_transcript) of opencode's session `session`, read
    /// from opencode's data directory `data` (`~/.local/share/opencode`: its database, or the
    /// JSON files of versions before 1.2).
    ///
    /// # Errors
    /// `not-found` if opencode has no such session there; as `import_transcript`.
    pub fn import_opencode_session(&self, data: &Path, session: &str) -> Result<Imported> {
        let export = import::opencode::read_storage(data, session)?;
        self.import_transcript(Format::Opencode, &export, Scope::All)
    }

    /// [`import_transcript`](Self::import_transcript) of the file at `path` (compressed
    /// with zstd when its name ends in `.zst`, as newer Codex rollouts are).
    ///
    /// # Errors
    /// `io` if it cannot be read; as `import_transcript`.
    ///
    /// It is streamed, every JSON string over 4 MiB cut to its start as it is read (nothing
    /// turnback keeps of a field is longer; a prompt is compared as the history keeps it),
    /// so memory follows what is kept, not the file; a transcript still over 256 MiB once
    /// cut is refused (`invalid-argument`). Only a regular file is read: the path comes
    /// from the agent's event, and a FIFO or a device named there would block the hook —
    /// and the agent waiting on it — so it is opened without blocking and refused
    /// (`invalid-argument`).
    pub fn import_transcript_file(&self, format: Format, path: &Path, scope: Scope) -> Result<Imported> {
        let file = crate::fs::files::open_regular(path)?;
        let read = if path.extension().is_some_and(|e| e == "zst") {
            let decoder = zstd::Decoder::new(file).context(path)?;
            bounded::read_json_up_to(decoder, TRANSCRIPT_CAP)
        } else {
            bounded::read_json_up_to(std::io::BufReader::new(file), TRANSCRIPT_CAP)
        };
        let text = read
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::FileTooLarge => Error::invalid(format!("{}: {e}", path.display())),
                std::io::ErrorKind::InvalidData => Error::invalid(format!("{}: not UTF-8 text", path.display())),
                // A decoder's error on a file that is not zstd.
                _ if path.extension().is_some_and(|x| x == "zst") => {
                    Error::invalid(format!("{}: not zstd ({e})", path.display()))
                }
                _ => Error::new(crate::error::ErrorCode::Io, format!("{}: {e}", path.display())),
            })?
            .text;
        self.import_transcript(format, &text, scope)
    }
}
