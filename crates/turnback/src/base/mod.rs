//! The base layer: small facts every other layer uses and that know nothing of turnback's
//! concepts — clocks, integer codecs, crash-test failpoints, redaction of secrets.

pub mod failpoint;
pub mod redact;
pub(crate) mod varint;
