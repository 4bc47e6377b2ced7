//! Sizes (`"32MiB"`, `"512B"`, plain integers = bytes) and durations
//! (`"30s"`, `"10ms"`, `"2m"`, `"1h"`) as written in a routes file.

use std::time::Duration;

/// Why a size string was refused; the caller adds the key and line.
#[derive(Debug, PartialEq, Eq)]
pub enum SizeError {
    /// Not `<integer><unit>` with a known unit.
    NotASize,
    /// A decimal or ambiguous unit (`MB`, `m`): suggests the binary one.
    AmbiguousUnit { suggestion: String },
    /// Larger than the machine's address space.
    TooLarge,
}

/// Parses `"32MiB"`, `"64 KiB"`, `"1GiB"`, `"512B"` or `"4096"` into bytes.
///
/// Only binary units are accepted: `"32MB"` would be ambiguous (10^6 or
/// 2^20?), so it is refused with the binary spelling as the suggestion.
pub fn parse_size(text: &str) -> Result<u64, SizeError> {
    let (number, unit) = split_number(text);
    if number.is_empty() {
        return Err(SizeError::NotASize);
    }
    let number: u64 = number.parse().map_err(|_| SizeError::TooLarge)?;
    let unit = unit.trim();
    let shift = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "kib" => 10,
        "mib" => 20,
        "gib" => 30,
        "k" | "kb" => return ambiguous(number, "KiB"),
        "m" | "mb" => return ambiguous(number, "MiB"),
        "g" | "gb" => return ambiguous(number, "GiB"),
        _ => return Err(SizeError::NotASize),
    };
    number.checked_mul(1 << shift).ok_or(SizeError::TooLarge)
}

/// Splits `"32 MiB"` into its digits (underscores dropped) and its unit.
fn split_number(text: &str) -> (String, &str) {
    let text = text.trim();
    let digits_end = text
        .find(|c: char| !(c.is_ascii_digit() || c == '_'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(digits_end);
    (number.chars().filter(|&c| c != '_').collect(), unit)
}

fn ambiguous(number: u64, unit: &str) -> Result<u64, SizeError> {
    Err(SizeError::AmbiguousUnit {
        suggestion: format!("{number}{unit}"),
    })
}

/// Parses `"30s"`, `"10ms"`, `"2m"`, `"1h"` (also `"30 s"`).
///
/// A bare number is refused by the caller: `timeout = 10` could be seconds
/// or milliseconds, and guessing wrong is a 1000x mistake.
pub fn parse_duration(text: &str) -> Option<Duration> {
    let (number, unit) = split_number(text);
    let number: u64 = number.parse().ok()?;
    let millis = match unit.trim() {
        "ms" => Some(number),
        "s" => number.checked_mul(1_000),
        "m" | "min" => number.checked_mul(60_000),
        "h" => number.checked_mul(3_600_000),
        _ => None,
    }?;
    Some(Duration::from_millis(millis))
}

/// Renders a byte count the way a routes file would spell it, for messages
/// ("at least "64KiB"").
pub fn format_size(bytes: u64) -> String {
    for (shift, unit) in [(30, "GiB"), (20, "MiB"), (10, "KiB")] {
        if bytes >= 1 << shift && bytes.is_multiple_of(1 << shift) {
            return format!("{}{unit}", bytes >> shift);
        }
    }
    format!("{bytes}B")
}

/// Renders a duration the way a routes file would spell it.
pub fn format_duration(duration: Duration) -> String {
    let millis = duration.as_millis();
    for (unit_ms, unit) in [(3_600_000, "h"), (60_000, "m"), (1_000, "s")] {
        if millis >= unit_ms && millis.is_multiple_of(unit_ms) {
            return format!("{}{unit}", millis / unit_ms);
        }
    }
    format!("{millis}ms")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_in_binary_units() {
        assert_eq!(parse_size("512B"), Ok(512));
        assert_eq!(parse_size("64KiB"), Ok(64 << 10));
        assert_eq!(parse_size("32MiB"), Ok(32 << 20));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size("32 MiB"), Ok(32 << 20));
        assert_eq!(parse_size("32mib"), Ok(32 << 20));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("1_024KiB"), Ok(1 << 20));
    }

    #[test]
    fn sizes_refused() {
        assert_eq!(parse_size("32 megs"), Err(SizeError::NotASize));
        assert_eq!(parse_size("MiB"), Err(SizeError::NotASize));
        assert_eq!(parse_size(""), Err(SizeError::NotASize));
        assert_eq!(parse_size("-1MiB"), Err(SizeError::NotASize));
        assert_eq!(parse_size("1.5MiB"), Err(SizeError::NotASize));
        assert_eq!(
            parse_size("32MB"),
            Err(SizeError::AmbiguousUnit {
                suggestion: "32MiB".into()
            })
        );
        assert_eq!(
            parse_size("64k"),
            Err(SizeError::AmbiguousUnit {
                suggestion: "64KiB".into()
            })
        );
        assert_eq!(parse_size("99999999999999GiB"), Err(SizeError::TooLarge));
        assert_eq!(
            parse_size("99999999999999999999999"),
            Err(SizeError::TooLarge)
        );
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10ms"), Some(Duration::from_millis(10)));
        assert_eq!(parse_duration("30s"), Some(Duration::from_secs(30)));
        assert_eq!(parse_duration("30 s"), Some(Duration::from_secs(30)));
        assert_eq!(parse_duration("2m"), Some(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Some(Duration::from_secs(3600)));
        assert_eq!(parse_duration("30"), None);
        assert_eq!(parse_duration("thirty seconds"), None);
        assert_eq!(parse_duration("1.5s"), None);
        assert_eq!(parse_duration("s"), None);
    }

    #[test]
    fn formatting_round_trips() {
        for bytes in [512, 64 << 10, 32 << 20, 1 << 30, 1500] {
            assert_eq!(parse_size(&format_size(bytes)), Ok(bytes));
        }
        for ms in [10, 1_000, 120_000, 3_600_000, 1_500] {
            let d = Duration::from_millis(ms);
            assert_eq!(parse_duration(&format_duration(d)), Some(d));
        }
        assert_eq!(format_size(64 << 10), "64KiB");
        assert_eq!(format_duration(Duration::from_secs(120)), "2m");
    }
}
