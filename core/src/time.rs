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
    pub fn parse_rfc3339(s: &str) -> Result<Timestamp, TimestampError> {
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

/// Why a string is not an instant the log can hold.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TimestampError {
    /// Not RFC 3339 `date-time` (or not a real date, time or offset).
    #[error("{0:?} is not an RFC 3339 timestamp (e.g. 2026-03-02T09:00:00Z)")]
    NotRfc3339(String),
    /// An instant before the Unix epoch.
    #[error("{0:?} is before 1970")]
    BeforeEpoch(String),
    /// A number that is not a plausible count of unix seconds.
    #[error("timestamp {0} is not a plausible number of unix seconds")]
    Seconds(String),
    /// JSON that is neither a string nor a number.
    #[error("expected an RFC 3339 string or unix seconds, found {0}")]
    NotATimestamp(String),
    /// Not JSON at all.
    #[error("{0}")]
    Json(String),
}

/// Parses `YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)` into milliseconds since the epoch
/// (fractions below a millisecond are dropped).
///
/// jiff reads the date, the time and the offset. Three things are decided here first: the
/// grammar is RFC 3339's `date-time` alone (jiff also takes ISO 8601's basic format, `±HH`
/// offsets, times without seconds and RFC 9557's `[zone]` annotations, which the log never
/// accepted); a leap second (`:60`) is the second after `:59` (jiff clamps it to `:59`, which
/// would put `23:59:60.5` before `23:59:59.9`); and a fraction may have any number of digits,
/// as RFC 3339 allows (jiff stops at nanoseconds). jiff's range ends at
/// 9999-12-30T22:00:00.999Z; a later instant is refused.
pub fn parse_rfc3339_ms(s: &str) -> Result<Millis, TimestampError> {
    let bad = || TimestampError::NotRfc3339(s.to_owned());
    let frac_end = rfc3339_shape(s.as_bytes()).ok_or_else(bad)?;
    let leap = s.get(17..19) == Some("60");
    // `frac_end` is past the fraction's last digit; only nine of them reach jiff.
    let cut = frac_end.min(20 + 9);
    let (head, tail) = (s.get(..cut).ok_or_else(bad)?, s.get(frac_end..).ok_or_else(bad)?);
    let mut text = format!("{head}{tail}");
    if leap {
        text.replace_range(17..19, "59");
    }
    let t: jiff::Timestamp = text.parse().map_err(|_| bad())?;
    let ms = t.as_millisecond() + if leap { 1000 } else { 0 };
    u64::try_from(ms).map_err(|_| TimestampError::BeforeEpoch(s.to_owned()))
}

/// Checks RFC 3339 §5.6 `date-time` by position (digits, separators `-`, `T`/`t`/space, `:`,
/// an optional `.` fraction, `Z`/`z` or `±HH:MM` with HH ≤ 23 and MM ≤ 59); returns where the
/// fraction ends (19 without one). Ranges of the fields are jiff's to check.
fn rfc3339_shape(b: &[u8]) -> Option<usize> {
    let digits =
        |r: std::ops::Range<usize>| b.get(r).is_some_and(|d| !d.is_empty() && d.iter().all(u8::is_ascii_digit));
    let at = |i: usize, set: &[u8]| b.get(i).is_some_and(|c| set.contains(c));
    let fields = digits(0..4)
        && at(4, b"-")
        && digits(5..7)
        && at(7, b"-")
        && digits(8..10)
        && at(10, b"Tt ")
        && digits(11..13)
        && at(13, b":")
        && digits(14..16)
        && at(16, b":")
        && digits(17..19);
    if !fields {
        return None;
    }
    let mut end = 19;
    if at(19, b".") {
        end = 20;
        while b.get(end).is_some_and(u8::is_ascii_digit) {
            end += 1;
        }
        if end == 20 {
            return None;
        }
    }
    let two = |i: usize| b.get(i..i + 2).and_then(|d| std::str::from_utf8(d).ok()?.parse::<u8>().ok());
    let offset = match b.get(end) {
        Some(b'Z' | b'z') => end + 1 == b.len(),
        Some(b'+' | b'-') => {
            end + 6 == b.len()
                && digits(end + 1..end + 3)
                && at(end + 3, b":")
                && digits(end + 4..end + 6)
                && two(end + 1).is_some_and(|h| h <= 23)
                && two(end + 4).is_some_and(|m| m <= 59)
        }
        _ => false,
    };
    offset.then_some(end)
}

/// Formats milliseconds since the epoch as `YYYY-MM-DDTHH:MM:SS[.mmm]Z`. An instant past
/// jiff's range in milliseconds, 9999-12-30T22:00:00Z (the last that is in year 9999 at every
/// offset; only a damaged log holds a later one), is written as its milliseconds.
pub fn format_rfc3339(ms: Millis) -> String {
    let Some(t) = i64::try_from(ms).ok().and_then(|ms| jiff::Timestamp::from_millisecond(ms).ok()) else {
        return format!("{ms} ms after the epoch");
    };
    let precision = if ms % 1000 == 0 { 0 } else { 3 };
    jiff::fmt::temporal::DateTimePrinter::new().precision(Some(precision)).timestamp_to_string(&t)
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

    /// What the hand-written parser said, as this module's result kind.
    fn oracle(s: &str) -> Result<Millis, &'static str> {
        before_jiff::parse_rfc3339_ms(s).map_err(|e| if e.ends_with("before 1970") { "before" } else { "bad" })
    }

    fn parsed(s: &str) -> Result<Millis, &'static str> {
        parse_rfc3339_ms(s).map_err(|e| match e {
            TimestampError::BeforeEpoch(_) => "before",
            _ => "bad",
        })
    }

    #[test]
    fn leap_seconds_are_the_second_after_59_so_time_never_goes_back() {
        let ms = |s| parse_rfc3339_ms(s).unwrap();
        assert_eq!(ms("2016-12-31T23:59:60Z"), ms("2017-01-01T00:00:00Z"));
        assert_eq!(ms("2016-12-31T23:59:60.5Z"), ms("2017-01-01T00:00:00Z") + 500);
        assert!(ms("2016-12-31T23:59:59.9Z") < ms("2016-12-31T23:59:60.5Z"));
        assert_eq!(ms("2017-01-01T00:59:60+01:00"), ms("2017-01-01T00:00:00Z"));
        assert!(parse_rfc3339_ms("2016-12-31T23:59:61Z").is_err());
    }

    #[test]
    fn offsets_move_the_instant_and_only_rfc3339_offsets_are_read() {
        let ms = |s| parse_rfc3339_ms(s).unwrap();
        let utc = ms("2026-03-02T09:00:00Z");
        for (s, same) in [
            ("2026-03-02T14:30:00+05:30", true),
            ("2026-03-02T01:00:00-08:00", true),
            ("2026-03-02T09:00:00+00:00", true),
            ("2026-03-02T09:00:00-00:00", true),
            ("2026-03-02T09:00:00z", true),
            ("2026-03-02T09:00:00+23:59", false),
        ] {
            assert_eq!(ms(s) == utc, same, "{s}");
        }
        assert_eq!(ms("1970-01-01T01:00:00+01:00"), 0);
        for bad in [
            "2026-03-02T09:00:00+24:00",
            "2026-03-02T09:00:00+05:60",
            "2026-03-02T09:00:00+05",
            "2026-03-02T09:00:00+0530",
        ] {
            assert!(matches!(parse_rfc3339_ms(bad), Err(TimestampError::NotRfc3339(_))), "{bad}");
        }
        assert_eq!(
            parse_rfc3339_ms("1970-01-01T00:00:00+00:01"),
            Err(TimestampError::BeforeEpoch("1970-01-01T00:00:00+00:01".into()))
        );
        assert_eq!(
            parse_rfc3339_ms("1969-12-31T23:59:59.5Z").unwrap_err().to_string(),
            "\"1969-12-31T23:59:59.5Z\" is before 1970"
        );
    }

    #[test]
    fn fractions_of_any_length_are_cut_to_the_millisecond() {
        let base = parse_rfc3339_ms("2026-03-02T09:00:00Z").unwrap();
        for (frac, extra) in
            [(".1", 100), (".12", 120), (".123", 123), (".1239", 123), (".123456789999", 123), (".000001", 0)]
        {
            assert_eq!(parse_rfc3339_ms(&format!("2026-03-02T09:00:00{frac}Z")).unwrap(), base + extra, "{frac}");
        }
        for bad in ["2026-03-02T09:00:00.Z", "2026-03-02T09:00:00,5Z", "2026-03-02T09:00:00.5"] {
            assert!(parse_rfc3339_ms(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn only_the_rfc3339_date_time_grammar_is_accepted() {
        for good in ["2026-03-02t09:00:00Z", "2026-03-02 09:00:00Z", "2024-02-29T00:00:00Z", "2000-02-29T12:00:00Z"] {
            assert!(parse_rfc3339_ms(good).is_ok(), "{good}");
        }
        // ISO 8601 forms jiff reads but the log never accepted, and dates that do not exist.
        for bad in [
            "2026-03-02T09:00Z",
            "20260302T090000Z",
            "2026-03-02T09:00:00Z[UTC]",
            "2026-03-02T09:00:00Z ",
            " 2026-03-02T09:00:00Z",
            "+002026-03-02T09:00:00Z",
            "2026-02-29T00:00:00Z",
            "2026-04-31T00:00:00Z",
            "2026-03-02T24:00:00Z",
            "2026-03-02T09:60:00Z",
            "2026-00-02T09:00:00Z",
            "2026-03-00T09:00:00Z",
            "２026-03-02T09:00:00Z",
        ] {
            assert_eq!(parse_rfc3339_ms(bad), Err(TimestampError::NotRfc3339(bad.into())), "{bad}");
        }
        assert_eq!(
            parse_rfc3339_ms("yesterday").unwrap_err().to_string(),
            "\"yesterday\" is not an RFC 3339 timestamp (e.g. 2026-03-02T09:00:00Z)"
        );
    }

    #[test]
    fn formatting_is_what_the_hand_written_formatter_wrote() {
        for ms in [0, 1, 999, 1_000, 1_500, 951_782_400_000, 1_772_442_000_123, 253_402_207_200_000] {
            assert_eq!(format_rfc3339(ms), before_jiff::format_rfc3339(ms), "{ms}");
        }
        assert_eq!(format_rfc3339(1_500), "1970-01-01T00:00:01.500Z");
        assert_eq!(format_rfc3339(253_402_207_200_000), "9999-12-30T22:00:00Z");
        // Past jiff's last instant (only a damaged log holds one): the milliseconds, no panic.
        assert_eq!(format_rfc3339(253_402_207_201_000), "253402207201000 ms after the epoch");
        assert_eq!(format_rfc3339(u64::MAX), format!("{} ms after the epoch", u64::MAX));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(4096))]
        /// Every field at and past its bounds, every separator, fraction length and offset the
        /// grammar names: the same instant, or the same refusal, as the hand-written parser.
        #[test]
        fn parsing_agrees_with_the_hand_written_parser(
            year in 1965u32..2105,
            month in 0u32..14,
            day in 0u32..33,
            hour in 0u32..25,
            minute in 0u32..61,
            second in 0u32..62,
            sep in proptest::sample::select(vec!["T", "t", " ", "x"]),
            frac in proptest::option::of("[0-9]{0,12}"),
            offset in proptest::sample::select(vec!["Z", "z", "+00:00", "-00:00", "+05:30", "-08:00", "+23:59", "+24:00", "-12:60", "+05", ""]),
        ) {
            let frac = frac.map(|f| format!(".{f}")).unwrap_or_default();
            let s = format!("{year:04}-{month:02}-{day:02}{sep}{hour:02}:{minute:02}:{second:02}{frac}{offset}");
            proptest::prop_assert_eq!(parsed(&s), oracle(&s), "{}", s);
        }

        #[test]
        fn formatting_agrees_with_the_hand_written_formatter(ms in 0u64..253_402_207_200_000) {
            proptest::prop_assert_eq!(format_rfc3339(ms), before_jiff::format_rfc3339(ms));
            proptest::prop_assert_eq!(parse_rfc3339_ms(&format_rfc3339(ms)), Ok(ms));
        }
    }
}

/// The parser and formatter this module had before jiff (hand-written calendar arithmetic),
/// kept as the oracle the tests compare the new ones with.
#[cfg(test)]
mod before_jiff {
    #![allow(clippy::indexing_slicing, clippy::cast_possible_wrap)]
    use super::Millis;

    pub(super) fn parse_rfc3339_ms(s: &str) -> Result<Millis, String> {
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

    pub(super) fn format_rfc3339(ms: Millis) -> String {
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
}
