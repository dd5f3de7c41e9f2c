//! Event time and duration strings.
//!
//! Event time is carried everywhere as `i64` milliseconds since the Unix epoch: it is what the
//! contract's integer timestamps already are, it orders and subtracts without allocation, and it
//! covers every date a producer can sensibly send.
//!
//! Timestamps come from messages: this file is under the no-panic rule (crate documentation,
//! "Hostile input").
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing))]

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Milliseconds since the Unix epoch, in event time.
pub type EventTime = i64;

/// Parses an RFC 3339 timestamp (any offset) into milliseconds since the epoch, truncating
/// sub-millisecond digits toward negative infinity so that ordering is preserved.
pub fn parse_rfc3339_ms(text: &str) -> Option<EventTime> {
    let parsed = chrono::DateTime::parse_from_rfc3339(text).ok()?;
    Some(parsed.timestamp_millis())
}

/// Formats milliseconds since the epoch as RFC 3339 in UTC, seconds precision when exact.
pub fn format_rfc3339_ms(ms: EventTime) -> String {
    match chrono::DateTime::from_timestamp_millis(ms) {
        Some(t) if ms % 1000 == 0 => t.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
        Some(t) => t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string(),
        None => ms.to_string(),
    }
}

/// Wall-clock milliseconds for the monotonic instants the callers pass around: taken once, so
/// that every wall-clock figure of one engine (the timestamp limits, a checkpoint's time, the
/// watermark's lag) moves with the monotonic clock and never jumps with the system's.
#[derive(Debug, Clone, Copy)]
pub struct WallClock {
    /// The instant it was taken at.
    origin: std::time::Instant,
    /// The wall clock then, in milliseconds since the epoch.
    origin_ms: EventTime,
}

impl WallClock {
    /// The wall clock now.
    pub fn now() -> Self {
        WallClock { origin: std::time::Instant::now(), origin_ms: chrono::Utc::now().timestamp_millis() }
    }

    /// The wall clock at `now`, in milliseconds since the epoch.
    pub fn ms(&self, now: std::time::Instant) -> EventTime {
        let since = i64::try_from(now.saturating_duration_since(self.origin).as_millis()).unwrap_or(i64::MAX);
        self.origin_ms.saturating_add(since)
    }
}

/// A duration written as a number and a unit (`250ms`, `10s`, `30m`, `1h`, `1d`), as used by
/// every duration key of the configuration. Kept with its text so that `check-config` prints the
/// effective configuration the way the user would write it.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HumanDuration(Duration);

impl HumanDuration {
    pub const fn from_millis(ms: u64) -> Self {
        HumanDuration(Duration::from_millis(ms))
    }
    pub fn as_duration(self) -> Duration {
        self.0
    }
    /// The duration in milliseconds of event time, saturating (no configured duration comes close).
    pub fn as_millis_i64(self) -> i64 {
        i64::try_from(self.0.as_millis()).unwrap_or(i64::MAX)
    }
}

/// Why a duration string was refused; names the accepted forms so the fix is obvious.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid duration {text:?}: expected a whole number followed by ms, s, m, h or d (for example \"250ms\", \"10s\", \"30m\", \"1h\")")]
pub struct DurationParseError {
    /// What was given, quoted in the message.
    text: String,
}

impl FromStr for HumanDuration {
    type Err = DurationParseError;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let err = || DurationParseError { text: text.to_string() };
        let trimmed = text.trim();
        let digits_end = trimmed.find(|c: char| !c.is_ascii_digit()).unwrap_or(trimmed.len());
        let (number, unit) = trimmed.split_at(digits_end);
        let value: u64 = number.parse().map_err(|_| err())?;
        let unit_ms: u64 = match unit.trim() {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            _ => return Err(err()),
        };
        value.checked_mul(unit_ms).map(HumanDuration::from_millis).ok_or_else(err)
    }
}

impl fmt::Display for HumanDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.0.as_millis();
        for (unit, size) in [("d", 86_400_000u128), ("h", 3_600_000), ("m", 60_000), ("s", 1_000)] {
            if ms >= size && ms % size == 0 {
                return write!(f, "{}{unit}", ms / size);
            }
        }
        write!(f, "{ms}ms")
    }
}

impl fmt::Debug for HumanDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "\"{self}\"")
    }
}

impl Serialize for HumanDuration {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for HumanDuration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_and_print_back() {
        for (text, ms) in [("250ms", 250), ("10s", 10_000), ("30m", 1_800_000), ("1h", 3_600_000), ("2d", 172_800_000)]
        {
            let d: HumanDuration = text.parse().unwrap();
            assert_eq!(d.as_millis_i64(), ms);
            assert_eq!(d.to_string(), text);
        }
        assert_eq!("90s".parse::<HumanDuration>().unwrap().to_string(), "90s");
        assert_eq!("1500ms".parse::<HumanDuration>().unwrap().to_string(), "1500ms");
        for bad in ["", "10", "s", "1.5s", "-1s", "10 parsecs", "99999999999999999999d"] {
            assert!(bad.parse::<HumanDuration>().is_err(), "{bad} should be refused");
        }
    }

    #[test]
    fn rfc3339_with_offsets_and_fractions() {
        assert_eq!(parse_rfc3339_ms("2026-11-22T10:05:00Z"), Some(1_795_341_900_000));
        assert_eq!(parse_rfc3339_ms("2026-11-22T11:05:00+01:00"), Some(1_795_341_900_000));
        assert_eq!(parse_rfc3339_ms("2026-11-22T10:05:00.1239Z"), Some(1_795_341_900_123));
        assert_eq!(parse_rfc3339_ms("2026-11-22 10:05"), None);
        assert_eq!(format_rfc3339_ms(1_795_341_900_000), "2026-11-22T10:05:00Z");
    }
}
