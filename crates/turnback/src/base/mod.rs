//! The base layer: small facts every other layer uses and that know nothing of turnback's
//! concepts — clocks, integer codecs, crash-test failpoints, redaction of secrets, names
//! made safe to show on a terminal, reading untrusted JSON in bounded memory.

pub mod bounded;
pub mod failpoint;
pub mod hex;
pub mod quote;
pub mod redact;
pub mod time;
pub(crate) mod varint;
