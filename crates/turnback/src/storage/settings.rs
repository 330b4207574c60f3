//! Settings: the store's `settings.toml`, overridden by command-line flags.
//!
//! Invariants: every value is validated when loaded, with an error naming the setting and
//! its allowed range; sizes are bytes (suffixes `KiB`, `MiB`, `GiB` are powers of 1024).

use std::path::Path;

use serde::Deserialize;

use crate::error::{Error, IoResultExt, Result};

/// Default retention window, in prompt rounds.
pub(crate) const DEFAULT_RETENTION_PROMPT_ROUNDS: u32 = 5;
/// Smallest allowed retention window.
pub(crate) const MIN_RETENTION_PROMPT_ROUNDS: u32 = 1;
/// Largest allowed retention window.
pub(crate) const MAX_RETENTION_PROMPT_ROUNDS: u32 = 100;
/// Default cap on one checkpoint's artifacts: 100 MiB.
pub(crate) const DEFAULT_CHECKPOINT_CAP: u64 = 100 * MIB;
/// Default cap on all retained checkpoint artifacts: 500 MiB.
pub(crate) const DEFAULT_STORE_CAP: u64 = 500 * MIB;
const MIB: u64 = 1024 * 1024;

/// Every tunable limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// Checkpoints stay retained for this many prompt rounds after the one that made them.
    pub retention_prompt_rounds: u32,
    /// The most bytes (pre- plus post-images) one checkpoint may hold.
    pub checkpoint_cap: u64,
    /// The most bytes all retained checkpoint artifacts together may hold.
    pub store_cap: u64,
    /// Snapshot limits.
    pub snapshots: SnapshotLimits,
    /// A session's conversation history is compacted to half of this when it grows over.
    pub history_max_session_bytes: u64,
}

/// Default history budget per session: 32 MiB.
pub(crate) const DEFAULT_HISTORY_BUDGET: u64 = 32 * MIB;

/// Limits on snapshots, checked before any content is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotLimits {
    /// A file larger than this is left out of every snapshot (with its reason); the rest
    /// of the tree is recorded.
    pub max_file_bytes: u64,
    /// A session's first snapshot may cover at most this many bytes…
    pub first_max_bytes: u64,
    /// …and this many files.
    pub first_max_files: u64,
    /// A later snapshot may add at most this many bytes of new or changed files…
    pub later_max_bytes: u64,
    /// …and this many new or changed files.
    pub later_max_files: u64,
    /// A session keeps at most this many snapshots (oldest whole turns are pruned)…
    pub max_per_session: u64,
    /// …and at most this many stored bytes of them.
    pub max_session_bytes: u64,
    /// Whether turns start the file watcher behind O(changes) snapshots.
    pub watch: WatchMode,
    /// The watcher exits after this many seconds without a snapshot asking it.
    pub watch_idle_secs: u64,
}

/// `[snapshots] watch`: whether turns start the file watcher.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchMode {
    /// Started by `turn begin` where the platform has file-system events (the default).
    Auto,
    /// Never started by turnback; snapshots walk the whole tree.
    Off,
}

/// Default idle time after which the watcher exits: 30 minutes.
pub(crate) const DEFAULT_WATCH_IDLE_SECS: u64 = 30 * 60;

impl Default for SnapshotLimits {
    fn default() -> Self {
        SnapshotLimits {
            max_file_bytes: 256 * MIB,
            first_max_bytes: 1024 * MIB,
            first_max_files: 100_000,
            later_max_bytes: 100 * MIB,
            later_max_files: 20_000,
            max_per_session: 200,
            max_session_bytes: 2 * 1024 * MIB,
            watch: if cfg!(any(target_os = "linux", target_os = "macos")) { WatchMode::Auto } else { WatchMode::Off },
            watch_idle_secs: DEFAULT_WATCH_IDLE_SECS,
        }
    }
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            retention_prompt_rounds: DEFAULT_RETENTION_PROMPT_ROUNDS,
            checkpoint_cap: DEFAULT_CHECKPOINT_CAP,
            store_cap: DEFAULT_STORE_CAP,
            snapshots: SnapshotLimits::default(),
            history_max_session_bytes: DEFAULT_HISTORY_BUDGET,
        }
    }
}

/// Overrides from flags; `None` keeps the file's value.
#[derive(Debug, Clone, Default)]
pub struct SettingsOverrides {
    /// `--retention-rounds`.
    pub retention_prompt_rounds: Option<u32>,
    /// `--checkpoint-cap`.
    pub checkpoint_cap: Option<String>,
    /// `--store-cap`.
    pub store_cap: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    checkpoints: FileCheckpoints,
    #[serde(default)]
    snapshots: FileSnapshots,
    #[serde(default)]
    history: FileHistory,
    /// Read (and checked) with or without the `remote` feature: one settings file serves
    /// every build.
    #[serde(default)]
    #[cfg_attr(not(feature = "remote"), allow(dead_code))]
    remote: FileRemote,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct FileRemote {
    #[cfg_attr(not(feature = "remote"), allow(dead_code))]
    auto_push: Option<String>,
}

/// `[remote] auto-push` of the settings file `path`: the remote every turn end pushes the
/// session to in the background (none: no automatic push).
///
/// # Errors
/// As [`Settings::load`].
#[cfg(feature = "remote")]
pub(crate) fn auto_push(path: &Path) -> Result<Option<String>> {
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let file: File =
                toml::from_str(&text).map_err(|e| Error::invalid(format!("{}: {}", path.display(), e.message())))?;
            Ok(file.remote.auto_push.filter(|n| !n.is_empty()))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).context(path),
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct FileHistory {
    max_session_size: Option<SizeValue>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct FileSnapshots {
    max_file_size: Option<SizeValue>,
    first_max_size: Option<SizeValue>,
    first_max_files: Option<u64>,
    later_max_size: Option<SizeValue>,
    later_max_files: Option<u64>,
    max_per_session: Option<u64>,
    max_session_size: Option<SizeValue>,
    watch: Option<String>,
    watch_idle_seconds: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct FileCheckpoints {
    retention_prompt_rounds: Option<i64>,
    checkpoint_cap: Option<SizeValue>,
    store_cap: Option<SizeValue>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum SizeValue {
    Bytes(i64),
    Text(String),
}

impl SizeValue {
    fn bytes(&self, name: &str) -> Result<u64> {
        match self {
            SizeValue::Bytes(n) => {
                u64::try_from(*n).map_err(|_| Error::invalid(format!("{name} must not be negative")))
            }
            SizeValue::Text(s) => parse_size(s).map_err(|e| Error::invalid(format!("{name}: {}", e.message))),
        }
    }
}

/// The text written to a new store's `settings.toml`.
pub(crate) const DEFAULT_FILE: &str = "\
# turnback settings for this store. Sizes are bytes; KiB/MiB/GiB suffixes are powers of 1024.
[checkpoints]
# Checkpoints stay restorable for this many prompt rounds after the round that made them (1-100).
retention-prompt-rounds = 5
# Most bytes one checkpoint may hold (pre- plus post-images).
checkpoint-cap = \"100 MiB\"
# Most bytes all retained checkpoints together may hold.
store-cap = \"500 MiB\"

[snapshots]
# A file larger than this is left out of snapshots (`turns`, `diff` and a rewind's preview
# say so; a rewind never deletes or restores it); the rest of the workspace is recorded.
max-file-size = \"256 MiB\"
# A session's first snapshot: at most this much and this many files, else it is skipped.
first-max-size = \"1 GiB\"
first-max-files = 100000
# Each later snapshot may add at most this much and this many new or changed files.
later-max-size = \"100 MiB\"
later-max-files = 20000
# Each session keeps at most this many snapshots, and this much of them; the oldest
# whole turns (start and end together) go first, and `turnback gc` reclaims the space.
max-per-session = 200
max-session-size = \"2 GiB\"
# \"auto\": `turn begin` starts a file watcher (one per workspace, `turnback watch status`)
# so that a snapshot reads only what changed; \"off\": every snapshot walks the whole tree.
watch = \"auto\"
# The watcher exits after this many seconds without a snapshot asking it.
watch-idle-seconds = 1800

[history]
# A session's conversation history keeps at most this much; when an entry takes it over,
# the oldest entries go, keeping the newest half (starting at a user prompt).
max-session-size = \"32 MiB\"
";

impl Settings {
    /// Loads `path` (defaults if it does not exist), then applies `overrides`.
    ///
    /// # Errors
    /// `invalid-argument` naming the setting when a value is malformed or out of range.
    pub fn load(path: &Path, overrides: &SettingsOverrides) -> Result<Self> {
        let file: File = match std::fs::read(path) {
            Ok(bytes) => {
                let text = String::from_utf8(bytes)
                    .map_err(|_| Error::invalid(format!("{}: not UTF-8 text (a TOML file is)", path.display())))?;
                toml::from_str(&text).map_err(|e| Error::invalid(format!("{}: {}", path.display(), e.message())))?
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => File::default(),
            Err(e) => return Err(e).context(path),
        };
        let mut s = Settings::default();
        if let Some(r) = file.checkpoints.retention_prompt_rounds {
            s.retention_prompt_rounds = validate_retention(r)?;
        }
        if let Some(v) = &file.checkpoints.checkpoint_cap {
            s.checkpoint_cap = v.bytes("checkpoint-cap")?;
        }
        if let Some(v) = &file.checkpoints.store_cap {
            s.store_cap = v.bytes("store-cap")?;
        }
        let f = &file.snapshots;
        if let Some(v) = &f.max_file_size {
            s.snapshots.max_file_bytes = v.bytes("max-file-size")?;
        }
        if let Some(v) = &f.first_max_size {
            s.snapshots.first_max_bytes = v.bytes("first-max-size")?;
        }
        if let Some(n) = f.first_max_files {
            s.snapshots.first_max_files = n;
        }
        if let Some(v) = &f.later_max_size {
            s.snapshots.later_max_bytes = v.bytes("later-max-size")?;
        }
        if let Some(n) = f.later_max_files {
            s.snapshots.later_max_files = n;
        }
        if let Some(n) = f.max_per_session {
            s.snapshots.max_per_session = n.max(1);
        }
        if let Some(v) = &f.max_session_size {
            s.snapshots.max_session_bytes = v.bytes("max-session-size")?;
        }
        // `TURNBACK_WATCH` (auto|off) overrides the file: test harnesses and one-off runs.
        let env_watch = std::env::var("TURNBACK_WATCH").ok();
        if let Some(w) = env_watch.as_ref().or(f.watch.as_ref()) {
            s.snapshots.watch = match w.as_str() {
                "auto" => s.snapshots.watch,
                "off" => WatchMode::Off,
                other => return Err(Error::invalid(format!("watch: \"{other}\" is not \"auto\" or \"off\""))),
            };
        }
        if let Some(n) = f.watch_idle_seconds {
            s.snapshots.watch_idle_secs = n.max(1);
        }
        if let Some(v) = &file.history.max_session_size {
            s.history_max_session_bytes = v.bytes("history max-session-size")?.max(64 * 1024);
        }
        if let Some(r) = overrides.retention_prompt_rounds {
            s.retention_prompt_rounds = validate_retention(i64::from(r))?;
        }
        if let Some(v) = &overrides.checkpoint_cap {
            s.checkpoint_cap = parse_size(v)?;
        }
        if let Some(v) = &overrides.store_cap {
            s.store_cap = parse_size(v)?;
        }
        Ok(s)
    }
}

/// Checks a retention window against 1–100 prompt rounds.
///
/// # Errors
/// `invalid-argument` saying the allowed range.
pub(crate) fn validate_retention(rounds: i64) -> Result<u32> {
    let range = i64::from(MIN_RETENTION_PROMPT_ROUNDS)..=i64::from(MAX_RETENTION_PROMPT_ROUNDS);
    if !range.contains(&rounds) {
        return Err(Error::invalid(format!(
            "retention-prompt-rounds must be between {MIN_RETENTION_PROMPT_ROUNDS} and {MAX_RETENTION_PROMPT_ROUNDS}, got {rounds}"
        )));
    }
    Ok(rounds as u32)
}

/// Parses `123`, `64 KiB`, `100MiB`, `2 GiB` into bytes.
///
/// # Errors
/// `invalid-argument` on anything else (including `MB`: turnback says what it means).
pub fn parse_size(text: &str) -> Result<u64> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    let n: u64 = digits.parse().map_err(|_| Error::invalid(format!("not a size: {text:?}")))?;
    let mult = match unit.trim() {
        "" | "B" => 1,
        "KiB" => 1024,
        "MiB" => MIB,
        "GiB" => 1024 * MIB,
        other => {
            return Err(Error::invalid(format!("unknown size unit {other:?} in {text:?}; use B, KiB, MiB or GiB")));
        }
    };
    n.checked_mul(mult).ok_or_else(|| Error::invalid(format!("size too large: {text:?}")))
}

/// Formats bytes for people: `10.0 KiB`, `100 MiB`, `12 B`.
pub fn format_size(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 || value.fract() == 0.0 {
        format!("{value:.0} {}", UNITS[unit])
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retention_window_edges() {
        assert_eq!(validate_retention(1).unwrap(), 1);
        assert_eq!(validate_retention(5).unwrap(), 5);
        assert_eq!(validate_retention(100).unwrap(), 100);
        for bad in [0, -1, 101] {
            let err = validate_retention(bad).unwrap_err();
            assert!(err.message.contains("between 1 and 100"), "{}", err.message);
        }
    }

    #[test]
    fn sizes_are_binary_units() {
        assert_eq!(parse_size("100 MiB").unwrap(), 100 * 1024 * 1024);
        assert_eq!(parse_size("10KiB").unwrap(), 10240);
        assert_eq!(parse_size("7").unwrap(), 7);
        assert!(parse_size("100 MB").is_err());
        assert!(parse_size("lots").is_err());
        assert_eq!(format_size(10240), "10 KiB");
        assert_eq!(format_size(1536), "1.5 KiB");
    }

    #[test]
    fn file_values_are_validated_and_flags_override() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("settings.toml");
        std::fs::write(&p, DEFAULT_FILE).unwrap();
        assert_eq!(Settings::load(&p, &SettingsOverrides::default()).unwrap(), Settings::default());
        std::fs::write(&p, "[checkpoints]\nretention-prompt-rounds = 0\n").unwrap();
        assert!(Settings::load(&p, &SettingsOverrides::default()).is_err());
        std::fs::write(&p, "[checkpoints]\nstore-cap = 1024\n").unwrap();
        let o = SettingsOverrides { retention_prompt_rounds: Some(7), ..Default::default() };
        let s = Settings::load(&p, &o).unwrap();
        assert_eq!((s.store_cap, s.retention_prompt_rounds), (1024, 7));
    }
}
