//! Errors with a stable machine code.
//!
//! Every failure the library reports carries an [`ErrorCode`] whose string form
//! (`corrupt`, `recovery-locked`, …) is part of the public contract: the command line
//! prints it in `--json` output and maps it to an exit code. The message is for people and
//! may change; the code may not. Messages never contain file contents, and paths only when
//! the caller supplied them in this same call.
//!
//! A failure is typed by what a person must do about it, not by the layer it surfaced in: a
//! database that does not read back is `corrupt` (restore, do not retry), a write that found
//! no space is `disk-full` naming the file or database it could not grow, whether the
//! operating system said `ENOSPC` or SQLite said "disk I/O error" on a disk with no space left.

use std::fmt;
use std::path::Path;

/// The stable, machine-readable kind of a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    /// Stored data was altered: a record, a ciphertext or its metadata does not verify.
    Corrupt,
    /// The store was written by an unreleased build of turnback, in a format no release
    /// reads (formats are versioned and migrated from the first tagged release on).
    StoreTooOld,
    /// The record belongs to an incomplete stage (a crash between stage and commit).
    RecoveryLocked,
    /// Nothing with that id exists.
    NotFound,
    /// The master key cannot be found while the store holds data.
    KeyUnavailable,
    /// A master key was found but it is not the key this store was created with.
    KeyMismatch,
    /// The workspace changed in a way that makes the requested action unsafe.
    Conflict,
    /// A capacity cap would be exceeded and unprotected operation was not confirmed.
    OverCap,
    /// The caller asked for something malformed (bad argument, bad setting).
    InvalidArgument,
    /// The path is outside the workspace, inside the store or `.git`, or behind a symlink.
    PathRejected,
    /// The target already exists where the operation needs it absent.
    AlreadyExists,
    /// An exact-string edit found no occurrence of the old string.
    EditNoMatch,
    /// An exact-string edit found more than one occurrence and `all` was not asked for.
    EditNotUnique,
    /// A record changed under us (another process won a race); nothing was written.
    ConcurrentUpdate,
    /// An operating-system I/O error.
    Io,
    /// The outcome of an operation cannot be known (crash after dispatch).
    UnknownOutcome,
    /// A file exists but this user may not read it.
    Inaccessible,
    /// Interrupted (SIGINT/SIGTERM) before anything was recorded.
    Cancelled,
    /// A write found no space left on the disk (or the user's quota) it needed.
    DiskFull,
}

impl ErrorCode {
    /// The stable string form used in JSON output and documentation.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::Corrupt => "corrupt",
            ErrorCode::StoreTooOld => "store-too-old",
            ErrorCode::RecoveryLocked => "recovery-locked",
            ErrorCode::NotFound => "not-found",
            ErrorCode::KeyUnavailable => "key-unavailable",
            ErrorCode::KeyMismatch => "key-mismatch",
            ErrorCode::Conflict => "conflict",
            ErrorCode::OverCap => "over-cap",
            ErrorCode::InvalidArgument => "invalid-argument",
            ErrorCode::PathRejected => "path-rejected",
            ErrorCode::AlreadyExists => "already-exists",
            ErrorCode::EditNoMatch => "edit-no-match",
            ErrorCode::EditNotUnique => "edit-not-unique",
            ErrorCode::ConcurrentUpdate => "concurrent-update",
            ErrorCode::Io => "io",
            ErrorCode::UnknownOutcome => "unknown-outcome",
            ErrorCode::Inaccessible => "inaccessible",
            ErrorCode::Cancelled => "cancelled",
            ErrorCode::DiskFull => "disk-full",
        }
    }

    /// Whether trying the same call again can succeed without someone changing something.
    pub fn retryable(self) -> bool {
        matches!(self, ErrorCode::ConcurrentUpdate | ErrorCode::Io)
    }

    /// What a person can do about it, in the order worth trying.
    pub fn recovery_actions(self) -> &'static [&'static str] {
        match self {
            ErrorCode::Corrupt => &["inspect the store (turnback verify --deep)", "restore the store from a backup"],
            ErrorCode::StoreTooOld => {
                &["move the store directory aside and start a new one (turnback init); the old one is not read"]
            }
            ErrorCode::RecoveryLocked => {
                &["inspect the store (turnback inspect ID)", "run recovery (turnback reconcile)"]
            }
            ErrorCode::KeyUnavailable => &[
                "provide the master key (TURNBACK_KEY, TURNBACK_KEY_FILE or the key file)",
                "restore the key file from a backup",
            ],
            ErrorCode::KeyMismatch => &["provide the master key this store was created with"],
            ErrorCode::OverCap => &[
                "free space (turnback gc) or raise the cap in the store's settings.toml",
                "repeat with --confirm-unprotected to proceed without rollback protection",
            ],
            ErrorCode::UnknownOutcome => &["inspect the file and the checkpoint before trusting either"],
            ErrorCode::DiskFull => &[
                "free space on the disk the message names (turnback gc reclaims what the store no longer needs)",
                "then repeat the command",
            ],
            _ => &[],
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A failure: a stable code, a sentence for people, optional structured details, and the
/// lower-level error it came from (`std::error::Error::source`).
#[derive(Debug, thiserror::Error)]
#[error("{code}: {}", self.worded(Hint::describe))]
pub struct Error {
    /// The stable kind.
    pub code: ErrorCode,
    /// A sentence for people.
    pub message: String,
    /// Structured facts for `--json` output (for example the usage figures of `over-cap`);
    /// boxed, so an error stays small.
    pub details: Option<Box<serde_json::Value>>,
    /// What went wrong below (an I/O or database error), for a caller that walks the chain.
    #[source]
    source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
    /// What the person can do, when it differs from the code's usual advice.
    advice: Option<Advice>,
    /// The next step the message points to, for each door to word as its own (boxed: an
    /// error stays small).
    hint: Option<Box<Hint>>,
}

/// A next step an error points to, as a stable code and its arguments: each door words it
/// in its own terms (the command line names a command, the MCP server a tool), so no door
/// rewrites another's sentences. [`Hint::describe`] is the words of no door in particular.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(tag = "code", rename_all = "kebab-case", rename_all_fields = "camelCase")]
pub enum Hint {
    /// The file exists: write it (overwrite) rather than create it.
    Overwrite,
    /// Begin a turn first.
    BeginTurn,
    /// End the running turn first.
    EndTurn,
    /// Rolling back this checkpoint takes back what was written.
    RollBack {
        /// The checkpoint.
        checkpoint_id: String,
    },
    /// This checkpoint is worth a look before anything else.
    Inspect {
        /// The checkpoint.
        checkpoint_id: String,
    },
}

impl Hint {
    /// The step in plain words, naming no command or tool.
    pub fn describe(&self) -> String {
        match self {
            Hint::Overwrite => "write the file to overwrite it".into(),
            Hint::BeginTurn => "begin a turn first".into(),
            Hint::EndTurn => "end the running turn first".into(),
            Hint::RollBack { checkpoint_id } => format!("rolling back checkpoint {checkpoint_id} takes it back"),
            Hint::Inspect { checkpoint_id } => format!("inspect checkpoint {checkpoint_id}"),
        }
    }
}

/// Advice that replaces a code's usual recovery actions where those name a step that does
/// not apply (kept as a tag, so an error stays small).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Advice {
    /// An undo whose own checkpoint would break a cap: it never goes on unprotected (its
    /// checkpoint is what makes it undoable and crash-safe), so room must be made.
    MakeRoomForUndo,
}

impl Advice {
    fn actions(self) -> &'static [&'static str] {
        match self {
            Advice::MakeRoomForUndo => &[
                "free space (turnback gc) or raise checkpoint_cap / store_cap in the store's settings.toml",
                "then apply again",
            ],
        }
    }
}

impl Error {
    /// A new error of `code` with `message`.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Error { code, message: message.into(), details: None, source: None, advice: None, hint: None }
    }

    /// Attaches the lower-level error this one came from.
    pub fn with_source(mut self, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.source = Some(Box::new(source));
        self
    }

    /// Attaches structured details.
    pub fn with_details(mut self, details: serde_json::Value) -> Self {
        self.details = Some(Box::new(details));
        self
    }

    /// Points the message to a next step (see [`Hint`]).
    pub fn with_hint(mut self, hint: Hint) -> Self {
        self.hint = Some(Box::new(hint));
        self
    }

    /// The next step the message points to, if it points to one.
    pub fn hint(&self) -> Option<&Hint> {
        self.hint.as_deref()
    }

    /// Replaces the code's usual recovery actions with `advice`'s (for a case where the
    /// usual advice names a step that does not apply, such as a flag the command lacks).
    pub(crate) fn with_advice(mut self, advice: Advice) -> Self {
        self.advice = Some(advice);
        self
    }

    /// What the person can do about it: this error's own actions, else its code's.
    pub fn recovery_actions(&self) -> &'static [&'static str] {
        self.advice.map_or_else(|| self.code.recovery_actions(), Advice::actions)
    }

    /// Shorthand for a `corrupt` error.
    pub fn corrupt(what: impl fmt::Display, why: impl fmt::Display) -> Self {
        Error::new(ErrorCode::Corrupt, format!("{what}: {why}"))
    }

    /// Shorthand for a `not-found` error.
    pub fn not_found(what: impl fmt::Display) -> Self {
        Error::new(ErrorCode::NotFound, format!("{what} not found"))
    }

    /// Shorthand for an `invalid-argument` error.
    pub fn invalid(message: impl Into<String>) -> Self {
        Error::new(ErrorCode::InvalidArgument, message)
    }

    /// The message with its hint, if it has one, worded by `words` — a door's own terms
    /// for the step (`MESSAGE (WORDS)`); what every door shows people.
    pub fn worded(&self, words: impl Fn(&Hint) -> String) -> String {
        match self.hint() {
            Some(hint) => format!("{} ({})", self.message, words(hint)),
            None => self.message.clone(),
        }
    }

    /// The error as every door reports it to a program (`--json` output, an MCP tool
    /// error): `{"error": {code, message, retryable, recoveryActions, hint, details}}` —
    /// the message [worded](Self::worded) by `words`, and `hint` the [`Hint`] itself as
    /// `{code, …arguments}`.
    pub fn report(&self, words: impl Fn(&Hint) -> String) -> serde_json::Value {
        serde_json::json!({
            "error": {
                "code": self.code.as_str(),
                "message": self.worded(words),
                "retryable": self.code.retryable(),
                "recoveryActions": self.recovery_actions(),
                "hint": self.hint,
                "details": self.details,
            }
        })
    }
}

/// Result with the library's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl From<rusqlite::Error> for Error {
    fn from(e: rusqlite::Error) -> Self {
        database_error(e, None)
    }
}

impl Error {
    /// Names the database file `path` in an error that came from SQLite (an error from
    /// anywhere else is returned as it is), and tells a full disk behind SQLite's plain
    /// "disk I/O error" by the space left where the database lives.
    pub(crate) fn in_database(mut self, path: &Path) -> Error {
        match self.source.take().map(|s| s.downcast::<rusqlite::Error>()) {
            Some(Ok(e)) => database_error(*e, Some(path)),
            Some(Err(other)) => {
                self.source = Some(other);
                self
            }
            None => self,
        }
    }
}

/// Less free space than this where the database lives, and SQLite's I/O error was the disk
/// filling up: it writes whole pages, and a disk is never this full in ordinary use.
const NEARLY_FULL: u64 = 1024 * 1024;

/// The one classification of SQLite's failures: busy is a retryable race, a damaged file is
/// `corrupt`, no space is `disk-full` (said by SQLite, or an I/O error on a disk with no
/// space left), anything else `io`.
fn database_error(e: rusqlite::Error, path: Option<&Path>) -> Error {
    use rusqlite::ErrorCode as Sql;
    let at = path.map(|p| format!(" {}", p.display())).unwrap_or_default();
    let (code, message) = match e.sqlite_error_code() {
        Some(Sql::DatabaseBusy | Sql::DatabaseLocked) => (ErrorCode::ConcurrentUpdate, format!("database: {e}")),
        Some(Sql::DatabaseCorrupt | Sql::NotADatabase) => (
            ErrorCode::Corrupt,
            format!("the store's database{at} is damaged ({e}); it cannot be read and must be restored"),
        ),
        Some(Sql::DiskFull) => (ErrorCode::DiskFull, format!("disk full: the store's database{at} cannot grow ({e})")),
        Some(Sql::SystemIoFailure | Sql::CannotOpen)
            if let Some(free) = path.and_then(free_bytes).filter(|free| *free < NEARLY_FULL) =>
        {
            (
                ErrorCode::DiskFull,
                format!("disk full: the store's database{at} cannot be written ({free} bytes left on its disk; {e})"),
            )
        }
        _ => (ErrorCode::Io, format!("database{at}: {e}")),
    };
    Error::new(code, message).with_source(e)
}

/// The bytes an unprivileged writer may still use on the file system holding `path`.
fn free_bytes(path: &Path) -> Option<u64> {
    let dir = if path.is_dir() { path } else { path.parent()? };
    let stat = rustix::fs::statvfs(dir).ok()?;
    Some(stat.f_bavail.saturating_mul(stat.f_frsize))
}

/// Attaches the path an I/O error concerns, so every I/O failure names its file.
pub(crate) trait IoResultExt<T> {
    /// Converts the error to an `io` [`Error`] naming `path`.
    fn context(self, path: impl AsRef<Path>) -> Result<T>;
}

impl<T> IoResultExt<T> for std::io::Result<T> {
    fn context(self, path: impl AsRef<Path>) -> Result<T> {
        self.map_err(|e| io_error(e, path.as_ref()))
    }
}

impl<T> IoResultExt<T> for Result<T, rustix::io::Errno> {
    fn context(self, path: impl AsRef<Path>) -> Result<T> {
        self.map_err(|e| io_error(e.into(), path.as_ref()))
    }
}

fn io_error(e: std::io::Error, path: &Path) -> Error {
    if matches!(e.kind(), std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded) {
        return Error::new(ErrorCode::DiskFull, format!("disk full: no space left to write {} ({e})", path.display()))
            .with_source(e);
    }
    Error::new(ErrorCode::Io, format!("{}: {e}", path.display())).with_source(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_io_error_keeps_its_cause_and_names_its_path() {
        let e: Result<()> = Err(std::io::Error::from(std::io::ErrorKind::NotFound)).context("/some/file");
        let e = e.unwrap_err();
        assert_eq!(e.code, ErrorCode::Io);
        assert!(e.message.starts_with("/some/file: "), "{}", e.message);
        let cause = std::error::Error::source(&e).expect("the I/O error is the source");
        assert_eq!(
            cause.downcast_ref::<std::io::Error>().map(std::io::Error::kind),
            Some(std::io::ErrorKind::NotFound)
        );
    }

    #[test]
    fn no_space_is_disk_full_naming_the_file_and_never_retryable() {
        let e: Result<()> = Err(std::io::Error::from(std::io::ErrorKind::StorageFull)).context("/mnt/full/f");
        let e = e.unwrap_err();
        assert_eq!(e.code, ErrorCode::DiskFull);
        assert!(e.message.starts_with("disk full: ") && e.message.contains("/mnt/full/f"), "{}", e.message);
        assert!(!e.code.retryable());
    }

    #[test]
    fn a_damaged_database_is_corrupt_and_names_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store.db");
        std::fs::write(&path, b"this is no database, just sixty-four bytes of text in its place.").unwrap();
        let conn = rusqlite::Connection::open(&path).unwrap();
        let e = conn.query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get::<_, i64>(0)).unwrap_err();
        let e = Error::from(e).in_database(&path);
        assert_eq!(e.code, ErrorCode::Corrupt);
        assert!(!e.code.retryable());
        assert!(e.message.contains(&path.display().to_string()), "{}", e.message);
        assert!(std::error::Error::source(&e).is_some_and(|s| s.is::<rusqlite::Error>()));
    }
}
