//! What stored content is: its keyed id (which is also its digest), its class, and the
//! plain header every stored object carries.
//!
//! Invariants: a [`ContentId`] is HMAC-SHA-256 of the plaintext under a key derived from
//! the master key, so equal content has one id and the id reveals nothing without the key;
//! a [`ContentClass`] is decided from the bytes alone ([`ContentClass::of`]) or by the
//! structure that stores them (trees, symlink targets).

use serde::{Deserialize, Serialize};

use crate::base::hex::{hex, unhex};

/// Schema version of object plaintext framing.
pub(crate) const OBJECT_SCHEMA: u16 = 1;
/// How far into a file to look for a NUL byte when classifying it.
pub(crate) const BINARY_SNIFF_LEN: usize = 8 * 1024;

/// What kind of bytes an object holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
pub enum ContentClass {
    /// Text-like file content.
    FileContent,
    /// File content with a NUL byte in its first 8 KiB.
    BinaryBlob,
    /// A snapshot directory node (names, modes and ids of its entries).
    Tree,
    /// A symlink's target (stored as a link, never followed).
    SymlinkTarget,
}

impl ContentClass {
    /// Classifies file content: binary if a NUL appears in the first 8 KiB.
    pub fn of(bytes: &[u8]) -> Self {
        let head = &bytes[..bytes.len().min(BINARY_SNIFF_LEN)];
        if head.contains(&0) { ContentClass::BinaryBlob } else { ContentClass::FileContent }
    }

    /// The stable name (`file-content`, `binary-blob`).
    pub fn as_str(self) -> &'static str {
        match self {
            ContentClass::FileContent => "file-content",
            ContentClass::BinaryBlob => "binary-blob",
            ContentClass::Tree => "tree",
            ContentClass::SymlinkTarget => "symlink-target",
        }
    }

    pub(crate) fn code(self) -> u8 {
        match self {
            ContentClass::FileContent => 1,
            ContentClass::BinaryBlob => 2,
            ContentClass::Tree => 3,
            ContentClass::SymlinkTarget => 4,
        }
    }

    pub(crate) fn from_code(code: u8) -> Option<Self> {
        match code {
            1 => Some(ContentClass::FileContent),
            2 => Some(ContentClass::BinaryBlob),
            3 => Some(ContentClass::Tree),
            4 => Some(ContentClass::SymlinkTarget),
            _ => None,
        }
    }
}

/// A keyed content id, which is also the content's digest.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct ContentId(pub [u8; 32]);

impl std::fmt::Debug for ContentId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ContentId({})", self.to_hex())
    }
}

impl ContentId {
    /// Lower-case hex, as shown in `digest` fields.
    pub(crate) fn to_hex(self) -> String {
        hex(&self.0)
    }

    /// The id stored as `bytes`, if they are 32 bytes long.
    pub(crate) fn try_from_slice(bytes: &[u8]) -> Option<Self> {
        bytes.try_into().ok().map(ContentId)
    }

    /// Parses the hex form.
    pub(crate) fn from_hex(s: &str) -> Option<Self> {
        unhex(s)?.try_into().ok().map(ContentId)
    }
}

/// The plain header of a stored object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ObjectHeader {
    /// The data-key version it is encrypted under.
    pub key_version: u32,
    /// Its plaintext framing version.
    pub schema: u16,
    /// Its content class.
    pub class: ContentClass,
    /// Its plaintext size in bytes.
    pub size: u64,
}
