//! Wall-clock time in the forms chatd uses: unix seconds and milliseconds, RFC 3339.

use std::time::{SystemTime, UNIX_EPOCH};

/// Seconds since the unix epoch (0 if the clock is before it).
pub fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// Milliseconds since the unix epoch (0 if the clock is before it).
pub fn unix_millis() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Now in RFC 3339, to the second (the model's "current date and time").
pub fn now_rfc3339() -> String {
    humantime::format_rfc3339_seconds(SystemTime::now()).to_string()
}
