//! Times for people: absolute UTC (ISO 8601) and offsets like `+1.250s`.
//! Event times are Unix epoch milliseconds (contract section 1.1).

/// `1767225600000` → `2026-01-01T00:00:00.000Z`.
pub(crate) use palimpsest_core_session::time::utc;

/// An offset in milliseconds: `+0.120s`, `+4m05.120s`, `+2h00m07.000s`,
/// `-0.010s` (a clock that went backwards).
pub(crate) fn offset(ms: i128) -> String {
    let sign = if ms < 0 { '-' } else { '+' };
    let ms = ms.unsigned_abs();
    let (h, rest) = (ms / 3_600_000, ms % 3_600_000);
    let (m, rest) = (rest / 60_000, rest % 60_000);
    let (s, frac) = (rest / 1000, rest % 1000);
    if h > 0 {
        format!("{sign}{h}h{m:02}m{s:02}.{frac:03}s")
    } else if m > 0 {
        format!("{sign}{m}m{s:02}.{frac:03}s")
    } else {
        format!("{sign}{s}.{frac:03}s")
    }
}

/// A span for summaries: `0.260s`, `4m05.120s`.
pub(crate) fn span(ms: u64) -> String {
    offset(i128::from(ms)).trim_start_matches('+').to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_formats_known_instants() {
        assert_eq!(utc(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(utc(1_767_225_600_000), "2026-01-01T00:00:00.000Z");
        assert_eq!(utc(951_782_400_000 + 3_723_004), "2000-02-29T01:02:03.004Z");
        assert_eq!(utc(4_102_444_799_999), "2099-12-31T23:59:59.999Z");
    }

    #[test]
    fn offsets_grow_units_as_needed() {
        assert_eq!(offset(0), "+0.000s");
        assert_eq!(offset(120), "+0.120s");
        assert_eq!(offset(59_999), "+59.999s");
        assert_eq!(offset(245_120), "+4m05.120s");
        assert_eq!(offset(7_207_000), "+2h00m07.000s");
        assert_eq!(offset(-10), "-0.010s");
        assert_eq!(span(260), "0.260s");
    }
}
