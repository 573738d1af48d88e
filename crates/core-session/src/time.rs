//! Event times for people. An event's `time` is Unix epoch milliseconds
//! (contract section 1.1); [`utc`] writes one as RFC 3339 in UTC, the form
//! the command line and the stores' messages show.

/// `1767225600000` → `2026-01-01T00:00:00.000Z` (RFC 3339, UTC,
/// milliseconds; proleptic Gregorian for every `u64`).
///
/// ```
/// use palimpsest_core_session::time::utc;
///
/// assert_eq!(utc(0), "1970-01-01T00:00:00.000Z");
/// assert_eq!(utc(1_767_225_600_123), "2026-01-01T00:00:00.123Z");
/// ```
pub fn utc(epoch_ms: u64) -> String {
    let days = epoch_ms / 86_400_000;
    let ms_of_day = epoch_ms % 86_400_000;
    let (y, m, d) = civil_from_days(days);
    let (h, rest) = (ms_of_day / 3_600_000, ms_of_day % 3_600_000);
    let (min, rest) = (rest / 60_000, rest % 60_000);
    let (s, ms) = (rest / 1000, rest % 1000);
    format!("{y:04}-{m:02}-{d:02}T{h:02}:{min:02}:{s:02}.{ms:03}Z")
}

/// Days since 1970-01-01 → (year, month, day), proleptic Gregorian
/// (Howard Hinnant's `civil_from_days`, for non-negative days).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_instants_and_leap_days() {
        assert_eq!(utc(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(utc(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(utc(1_796_282_400_123), "2026-12-03T07:20:00.123Z");
        assert_eq!(utc(4_107_456_000_000), "2100-02-28T00:00:00.000Z");
        assert_eq!(utc(4_107_542_399_999), "2100-02-28T23:59:59.999Z", "2100 is not a leap year");
    }
}
