//! The storage layer: bytes in, verified bytes out. The key-value backend, encryption and
//! keys, content-addressed objects and packs, sealed records, settings, and the store that
//! holds them. No domain words: it does not know what a checkpoint or a turn is.

pub mod content;
pub mod crypto;
pub(crate) mod digest;
pub(crate) mod gc;
pub(crate) mod header;
pub mod keys;
pub mod kv;
pub mod object;
pub mod pack;
pub(crate) mod schema;
pub mod settings;
pub mod store;
