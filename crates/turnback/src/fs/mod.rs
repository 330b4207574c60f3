//! The file-system layer: workspace paths, symlink-safe reads and compare-and-swap
//! writes, open-handle detection, liveness locks, and the workspace walk with its
//! unconditional exclusions. It knows nothing of the store.

pub mod files;
pub mod handles;
pub mod lock;
pub mod relpath;
pub mod rules;
pub mod walk;
