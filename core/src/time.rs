//! Time as data. The core never reads a clock: every instant is passed in by the host.
//!
//! The session API takes a [`Timestamp`], not a bare integer, so seconds cannot be passed
//! where milliseconds are meant; hosts build one from their clock
//! ([`Timestamp::from_system_time`], or `ctxlog_tokio::now()`) or from a recorded instant
//! ([`Timestamp::from_millis`]). The log stores the milliseconds ([`Millis`]).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch, as recorded in events.
pub type Millis = u64;

/// An instant: milliseconds since the Unix epoch, as a type of its own.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(Millis);

impl Timestamp {
    /// The Unix epoch.
    pub const EPOCH: Timestamp = Timestamp(0);

    /// An instant given in milliseconds since the epoch (a recorded `at`, a database column).
    pub const fn from_millis(ms: Millis) -> Timestamp {
        Timestamp(ms)
    }

    /// An instant given in whole seconds since the epoch (saturating).
    pub const fn from_secs(secs: u64) -> Timestamp {
        Timestamp(secs.saturating_mul(1000))
    }

    /// The instant a [`SystemTime`] stands for; one before 1970 reads as the epoch. This
    /// converts a value the host read; it reads no clock itself.
    pub fn from_system_time(t: SystemTime) -> Timestamp {
        let ms = t.duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        Timestamp(ms)
    }

    /// Parses an RFC 3339 instant (see [`parse_rfc3339_ms`]).
    pub fn parse_rfc3339(s: &str) -> Result<Timestamp, String> {
        parse_rfc3339_ms(s).map(Timestamp)
    }

    /// Milliseconds since the epoch.
    pub const fn as_millis(self) -> Millis {
        self.0
    }

    /// The instant `d` later (saturating; below a millisecond is dropped).
    pub fn after(self, d: Duration) -> Timestamp {
        Timestamp(self.0.saturating_add(u64::try_from(d.as_millis()).unwrap_or(u64::MAX)))
    }
}

impl From<SystemTime> for Timestamp {
    fn from(t: SystemTime) -> Timestamp {
        Timestamp::from_system_time(t)
    }
}

impl std::ops::Add<Duration> for Timestamp {
    type Output = Timestamp;
    fn add(self, d: Duration) -> Timestamp {
        self.after(d)
    }
}

impl std::fmt::Display for Timestamp {
    /// RFC 3339 in UTC, e.g. `2026-03-02T09:00:00Z`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&format_rfc3339(self.0))
    }
}

/// Parses `YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)` into milliseconds since the epoch.
pub fn parse_rfc3339_ms(s: &str) -> Result<Millis, String> {
    let bad = || format!("{s:?} is not an RFC 3339 timestamp (e.g. 2026-03-02T09:00:00Z)");
    let b = s.as_bytes();
    let num = |range: std::ops::Range<usize>| -> Result<i64, String> {
        let part = b.get(range).ok_or_else(bad)?;
        if part.is_empty() || !part.iter().all(u8::is_ascii_digit) {
            return Err(bad());
        }
        Ok(part.iter().fold(0i64, |acc, d| acc * 10 + i64::from(d - b'0')))
    };
    let sep = |i: usize, c: &[u8]| b.get(i).is_some_and(|x| c.contains(x));
    if !(sep(4, b"-") && sep(7, b"-") && sep(10, b"Tt ") && sep(13, b":") && sep(16, b":")) {
        return Err(bad());
    }
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, min, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let month_days = match month {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    };
    if !(1..=12).contains(&month) || !(1..=month_days).contains(&day) || hour > 23 || min > 59 || sec > 60 {
        return Err(bad());
    }
    let mut i = 19;
    let mut millis = 0i64;
    if sep(i, b".") {
        let start = i + 1;
        let mut end = start;
        while b.get(end).is_some_and(u8::is_ascii_digit) {
            end += 1;
        }
        if end == start {
            return Err(bad());
        }
        let digits = num(start..end.min(start + 3))?;
        let scale = [100, 10, 1];
        millis = digits * scale.get(end.min(start + 3) - start - 1).copied().unwrap_or(1);
        i = end;
    }
    let offset_min = match b.get(i) {
        Some(b'Z' | b'z') if i + 1 == b.len() => 0,
        Some(sign @ (b'+' | b'-')) if i + 6 == b.len() && sep(i + 3, b":") => {
            let (oh, om) = (num(i + 1..i + 3)?, num(i + 4..i + 6)?);
            if oh > 23 || om > 59 {
                return Err(bad());
            }
            let m = oh * 60 + om;
            if *sign == b'-' {
                -m
            } else {
                m
            }
        }
        _ => return Err(bad()),
    };
    let days = days_from_civil(year, month, day);
    let secs = days * 86_400 + hour * 3600 + min * 60 + sec - offset_min * 60;
    let ms = secs * 1000 + millis;
    u64::try_from(ms).map_err(|_| format!("{s:?} is before 1970"))
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Formats milliseconds since the epoch as `YYYY-MM-DDTHH:MM:SS[.mmm]Z`.
pub fn format_rfc3339(ms: Millis) -> String {
    let secs = (ms / 1000) as i64;
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Inverse of days_from_civil.
    let z = days + 719_468;
    let era = if z >= 0 { z } else { z - 146_096 } / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    let frac = ms % 1000;
    let base = format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}", rem / 3600, rem / 60 % 60, rem % 60);
    if frac == 0 {
        format!("{base}Z")
    } else {
        format!("{base}.{frac:03}Z")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_offsets() {
        assert_eq!(parse_rfc3339_ms("1970-01-01T00:00:00Z").unwrap(), 0);
        assert_eq!(parse_rfc3339_ms("2026-03-02T09:00:00Z").unwrap(), 1_772_442_000_000);
        assert_eq!(parse_rfc3339_ms("2026-03-02T10:00:00+01:00").unwrap(), 1_772_442_000_000);
        assert_eq!(parse_rfc3339_ms("2026-03-02T09:00:00.5Z").unwrap(), 1_772_442_000_500);
        for ms in [0, 1_772_442_000_000, 1_772_442_000_123, 951_782_400_000] {
            assert_eq!(parse_rfc3339_ms(&format_rfc3339(ms)).unwrap(), ms);
        }
        for bad in ["", "2026-03-02", "2026-13-02T00:00:00Z", "2026-03-02T09:00:00", "yesterday"] {
            assert!(parse_rfc3339_ms(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_timestamp_keeps_its_unit_whichever_way_it_is_built() {
        let t = Timestamp::parse_rfc3339("2026-03-02T09:00:00Z").unwrap();
        assert_eq!(t, Timestamp::from_secs(1_772_442_000));
        assert_eq!(t, Timestamp::from_millis(1_772_442_000_000));
        assert_eq!(t, Timestamp::from_system_time(UNIX_EPOCH + Duration::from_secs(1_772_442_000)));
        assert_eq!(Timestamp::from(UNIX_EPOCH + Duration::from_millis(1_500)).as_millis(), 1_500);
        assert_eq!((t + Duration::from_secs(4)).as_millis(), 1_772_442_004_000);
        assert_eq!(t.to_string(), "2026-03-02T09:00:00Z");
        // Before 1970 and past u64 milliseconds: clamped, never a panic.
        assert_eq!(Timestamp::from_system_time(UNIX_EPOCH - Duration::from_secs(1)), Timestamp::EPOCH);
        assert_eq!(Timestamp::from_secs(u64::MAX).as_millis(), u64::MAX);
        assert_eq!(Timestamp::from_millis(u64::MAX).after(Duration::from_secs(1)).as_millis(), u64::MAX);
    }
}
