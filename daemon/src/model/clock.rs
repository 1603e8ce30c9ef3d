//! Wall-clock time as the time services and the access log print it, in
//! UTC, without a date crate.

use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

/// Seconds from 1900-01-01 to 1970-01-01, the offset RFC 868 time counts from.
const RFC868_EPOCH_OFFSET: u64 = 2_208_988_800;

const WEEKDAYS: [&str; 7] = [
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
];
const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];

/// A UTC instant broken into calendar fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Civil {
    pub year: i64,
    pub month: u32,
    pub day: u32,
    pub hour: u32,
    pub minute: u32,
    pub second: u32,
    /// 0 = Thursday, the weekday of 1970-01-01.
    weekday: usize,
}

impl Civil {
    pub fn now() -> Self {
        Self::from_unix(unix_seconds())
    }

    /// Howard Hinnant's days-to-civil algorithm, valid for any day count we can meet.
    pub fn from_unix(seconds: i64) -> Self {
        let days = seconds.div_euclid(86_400);
        let of_day = seconds.rem_euclid(86_400);
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z.rem_euclid(146_097);
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
        let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
        let year = yoe + era * 400 + i64::from(month <= 2);
        Self {
            year,
            month,
            day,
            hour: (of_day / 3600) as u32,
            minute: (of_day / 60 % 60) as u32,
            second: (of_day % 60) as u32,
            weekday: days.rem_euclid(7) as usize,
        }
    }

    /// RFC 867 leaves the format open; this is its suggested one:
    /// `Wednesday, December 2, 2026 13:31:13-UTC`. Written where it goes
    /// (an answer's buffer), with no string of its own.
    pub fn daytime(&self) -> impl fmt::Display + '_ {
        Shown(self, |c, f| {
            write!(
                f,
                "{}, {} {}, {} {:02}:{:02}:{:02}-UTC",
                WEEKDAYS[c.weekday],
                MONTHS[(c.month - 1) as usize],
                c.day,
                c.year,
                c.hour,
                c.minute,
                c.second
            )
        })
    }

    /// ISO 8601 in UTC: `2026-12-02T13:31:13Z`.
    pub fn iso8601(&self) -> impl fmt::Display + '_ {
        Shown(self, |c, f| {
            write!(
                f,
                "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
                c.year, c.month, c.day, c.hour, c.minute, c.second
            )
        })
    }
}

/// A time and the format it is shown in.
struct Shown<'a>(
    &'a Civil,
    fn(&Civil, &mut fmt::Formatter<'_>) -> fmt::Result,
);

impl fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        (self.1)(self.0, f)
    }
}

/// Seconds since 1970 (negative if the clock is set before it).
pub fn unix_seconds() -> i64 {
    match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_secs() as i64,
        Err(e) => -(e.duration().as_secs() as i64),
    }
}

/// A random duration up to `max` (none for a zero `max`): spreads what many
/// daemons, or many tasks of one, would otherwise do in step.
pub fn jitter(max: std::time::Duration) -> std::time::Duration {
    use std::hash::BuildHasher;
    let random = std::collections::hash_map::RandomState::new().hash_one(SystemTime::now());
    let nanos = u64::try_from(max.as_nanos()).unwrap_or(u64::MAX);
    std::time::Duration::from_nanos(random.checked_rem(nanos).unwrap_or(0))
}

/// RFC 868: seconds since 1900 as 32 bits, big-endian. The count wraps in 2036, as
/// the RFC's own format does; clients resolve the era.
pub fn rfc868(unix: i64) -> [u8; 4] {
    let since_1900 = (unix as i128 + RFC868_EPOCH_OFFSET as i128).rem_euclid(1 << 32);
    (since_1900 as u32).to_be_bytes()
}

#[cfg(test)]
mod tests {
    #[test]
    fn jitter_stays_below_its_bound() {
        use std::time::Duration;
        for _ in 0..100 {
            assert!(super::jitter(Duration::from_secs(5)) < Duration::from_secs(5));
        }
        assert_eq!(super::jitter(Duration::ZERO), Duration::ZERO);
    }

    use super::*;

    #[test]
    fn known_instants() {
        let epoch = Civil::from_unix(0);
        assert_eq!(epoch.iso8601().to_string(), "1970-01-01T00:00:00Z");
        assert_eq!(
            epoch.daytime().to_string(),
            "Thursday, January 1, 1970 00:00:00-UTC"
        );
        // 2000-02-29 (a leap day in a century leap year) 12:34:56.
        assert_eq!(
            Civil::from_unix(951_827_696).iso8601().to_string(),
            "2000-02-29T12:34:56Z"
        );
        // The seed's example: 2004-02-11 23:45:29, a Wednesday.
        let seed = Civil::from_unix(1_076_543_129);
        assert_eq!(seed.iso8601().to_string(), "2004-02-11T23:45:29Z");
        assert!(seed
            .daytime()
            .to_string()
            .starts_with("Wednesday, February 11, 2004"));
        assert_eq!(
            Civil::from_unix(-1).iso8601().to_string(),
            "1969-12-31T23:59:59Z"
        );
    }

    #[test]
    fn rfc868_offsets_and_wraps() {
        assert_eq!(rfc868(0), 2_208_988_800u32.to_be_bytes());
        // 2036-02-07 06:28:16 UTC is where the 32-bit count wraps to zero.
        assert_eq!(rfc868(2_085_978_496), [0, 0, 0, 0]);
    }
}
