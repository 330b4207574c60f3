//! The storage layer: bytes in, verified bytes out. The key-value backend, encryption and
//! keys, content-addressed objects and packs, sealed records, settings, and the store that
//! holds them. No domain words: it does not know what a checkpoint or a turn is.

pub(crate) mod body;
pub(crate) mod content;
pub(crate) mod crypto;
pub(crate) mod digest;
pub(crate) mod gc;
pub(crate) mod header;
pub(crate) mod keys;
pub(crate) mod kv;
pub(crate) mod object;
pub(crate) mod pack;
pub(crate) mod schema;
pub(crate) mod settings;
pub(crate) mod store;
