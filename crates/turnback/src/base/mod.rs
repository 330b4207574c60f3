//! The base layer: small facts every other layer uses and that know nothing of turnback's
//! concepts — clocks, integer codecs, crash-test failpoints, redaction of secrets, names
//! made safe to show on a terminal, reading untrusted JSON in bounded memory.

pub(crate) mod bounded;
pub(crate) mod failpoint;
pub(crate) mod hex;
pub(crate) mod quote;
pub(crate) mod redact;
pub(crate) mod replace;
pub(crate) mod time;
pub(crate) mod varint;
