//! The storage layer: bytes in, verified bytes out. The key-value backend, encryption and
//! keys, content-addressed objects and packs, sealed records, settings, and the store that
//! holds them. No domain words: it does not know what a checkpoint or a turn is.

pub mod crypto;
pub mod keys;
pub mod kv;
pub mod object;
pub mod pack;
pub mod settings;
pub mod store;
