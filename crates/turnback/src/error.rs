//! Errors with a stable machine code.
//!
//! Every failure the library reports carries an [`ErrorCode`] whose string form
//! (`corrupt`, `recovery-locked`, …) is part of the public contract: the command line
//! prints it in `--json` output and maps it to an exit code. The message is for people and
//! may change; the code may not. Messages never contain file contents, and paths only when
//! the caller supplied them in this same call.

use std::fmt;
use std::path::Path;

/// The stable, machine-readable kind of a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    /// Stored data was altered: a record, a ciphertext or its metadata does not verify.
    Corrupt,
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
}

impl ErrorCode {
    /// The stable string form used in JSON output and documentation.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::Corrupt => "corrupt",
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
#[error("{code}: {message}")]
pub struct Error {
    /// The stable kind.
    pub code: ErrorCode,
    /// A sentence for people.
    pub message: String,
    /// Structured facts for `--json` output (for example the usage figures of `over-cap`).
    pub details: Option<serde_json::Value>,
    /// What went wrong below (an I/O or database error), for a caller that walks the chain.
    #[source]
    source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
}

impl Error {
    /// A new error of `code` with `message`.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Error { code, message: message.into(), details: None, source: None }
    }

    /// Attaches the lower-level error this one came from.
    pub fn with_source(mut self, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.source = Some(Box::new(source));
        self
    }

    /// Attaches structured details.
    pub fn with_details(mut self, details: serde_json::Value) -> Self {
        self.details = Some(details);
        self
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

    /// The error as every door reports it to a program (`--json` output, an MCP tool
    /// error): `{"error": {code, message, retryable, recoveryActions, details}}`.
    pub fn report(&self) -> serde_json::Value {
        serde_json::json!({
            "error": {
                "code": self.code.as_str(),
                "message": self.message,
                "retryable": self.code.retryable(),
                "recoveryActions": self.code.recovery_actions(),
                "details": self.details,
            }
        })
    }
}

/// Result with the library's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl From<rusqlite::Error> for Error {
    fn from(e: rusqlite::Error) -> Self {
        let busy = matches!(
            e.sqlite_error_code(),
            Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
        );
        let code = if busy { ErrorCode::ConcurrentUpdate } else { ErrorCode::Io };
        Error::new(code, format!("database: {e}")).with_source(e)
    }
}

/// Attaches the path an I/O error concerns, so every I/O failure names its file.
pub trait IoResultExt<T> {
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
}
