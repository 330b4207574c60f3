//! Wall-clock time as turnback records it: milliseconds since the Unix epoch, shown as
//! RFC 3339. Nothing decides by wall-clock time (retention counts prompt rounds); times
//! are for people and for ordering records made by one machine.

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    jiff::Timestamp::now().as_millisecond()
}

/// RFC 3339 form of a millisecond timestamp.
pub fn format_ms(ms: i64) -> String {
    jiff::Timestamp::from_millisecond(ms).map(|t| t.to_string()).unwrap_or_else(|_| ms.to_string())
}
