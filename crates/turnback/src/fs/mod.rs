//! The file-system layer: workspace paths, symlink-safe reads and compare-and-swap
//! writes, open-handle detection, liveness locks, and the workspace walk with its
//! unconditional exclusions. It knows nothing of the store.

pub(crate) mod body;
pub(crate) mod files;
pub(crate) mod handles;
pub(crate) mod lock;
pub(crate) mod relpath;
pub(crate) mod rules;
pub(crate) mod walk;
