//! The duration grammar shared by the attributes (`#[retry(initial =
//! "100ms")]`, checked at compile time) and the config file
//! (`initial = "100ms"`, checked at startup): an integer or a decimal and
//! a unit, no space, read exactly in integer nanoseconds.

use std::fmt;
use std::time::Duration;

/// The accepted units and their length in nanoseconds (`min` as well as
/// `m` for minutes, `µs` as well as `us`).
pub const UNITS: &[(&str, u128)] = &[
    ("ns", 1),
    ("us", 1_000),
    ("µs", 1_000),
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60_000_000_000),
    ("min", 60_000_000_000),
    ("h", 3_600_000_000_000),
];

/// Why a text is not a duration, in the order [`parse`] checks: the first
/// rule the text breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DurationError {
    /// The text does not start with a digit or a `.` (`""`, `"ms"`, `"-1s"`).
    NoNumber,
    /// A number without a unit (`"100"`).
    NoUnit,
    /// A unit not in [`UNITS`] (`"100sec"`, `"2 s"`).
    UnknownUnit,
    /// A number that is not an integer or a decimal (`"1.s"`, `"1.2.3s"`, `".5s"`).
    NotANumber,
    /// Longer than [`Duration::MAX`].
    TooLong,
    /// A digit below a nanosecond (`"0.0000000001s"`).
    TooPrecise,
}

impl fmt::Display for DurationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::NoNumber => "no number",
            Self::NoUnit => "no unit",
            Self::UnknownUnit => "unknown unit",
            Self::NotANumber => "not a number",
            Self::TooLong => "too long",
            Self::TooPrecise => "more precise than a nanosecond",
        })
    }
}

impl std::error::Error for DurationError {}

/// The text split into its number (digits and dots) and what follows it,
/// the unit: `"1.5s"` is `("1.5", "s")`, `"2 s"` is `("2", " s")`.
///
/// ```
/// use resilience_rules::duration::split;
///
/// assert_eq!(split("1.5s"), ("1.5", "s"));
/// assert_eq!(split("ms"), ("", "ms"));
/// assert_eq!(split("100"), ("100", ""));
/// ```
pub fn split(text: &str) -> (&str, &str) {
    let at = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    text.split_at(at)
}

/// The length of `unit` in nanoseconds, if it is one of [`UNITS`].
pub fn unit_nanos(unit: &str) -> Option<u128> {
    UNITS
        .iter()
        .find(|(name, _)| *name == unit)
        .map(|&(_, nanos)| nanos)
}

/// Parses `"<number><unit>"`: the number an integer or a decimal, the unit
/// one of [`UNITS`], no space between them. Exact: the number is read in
/// integer nanoseconds with checked arithmetic (no float), so `"0.1s"` is
/// exactly 100 ms, and a value that does not fit a [`Duration`] is
/// refused, never wrapped or rounded to another value.
///
/// ```
/// use std::time::Duration;
/// use resilience_rules::duration::{DurationError, parse};
///
/// assert_eq!(parse("1.5s"), Ok(Duration::from_millis(1500)));
/// assert_eq!(parse("100"), Err(DurationError::NoUnit));
/// assert_eq!(parse("18446744073709551616s"), Err(DurationError::TooLong));
/// ```
pub fn parse(text: &str) -> Result<Duration, DurationError> {
    let (number, unit) = split(text);
    if number.is_empty() {
        return Err(DurationError::NoNumber);
    }
    if unit.is_empty() {
        return Err(DurationError::NoUnit);
    }
    let nanos_per_unit = unit_nanos(unit).ok_or(DurationError::UnknownUnit)?;
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() || fraction.contains('.') || (number.contains('.') && fraction.is_empty()) {
        return Err(DurationError::NotANumber);
    }
    // Leading zeros do not count towards the size of the number.
    let whole: u128 = whole.parse().map_err(|_| DurationError::TooLong)?;
    let mut nanos = whole
        .checked_mul(nanos_per_unit)
        .ok_or(DurationError::TooLong)?;
    let mut scale = nanos_per_unit;
    for digit in fraction.bytes() {
        scale /= 10;
        if scale == 0 {
            return Err(DurationError::TooPrecise);
        }
        // Checked: a whole part just below the limit plus its fraction
        // must be refused, not wrapped to a small value.
        nanos = nanos
            .checked_add(u128::from(digit - b'0') * scale)
            .ok_or(DurationError::TooLong)?;
    }
    let secs = u64::try_from(nanos / 1_000_000_000).map_err(|_| DurationError::TooLong)?;
    // The remainder is below 10^9 and fits.
    let subsec = (nanos % 1_000_000_000) as u32;
    Ok(Duration::new(secs, subsec))
}

/// `duration` as the shortest exact text in the same grammar, for
/// messages: [`parse`] reads it back to the same value.
///
/// ```
/// use std::time::Duration;
/// use resilience_rules::duration::display;
///
/// assert_eq!(display(Duration::from_secs(120)), "2m");
/// assert_eq!(display(Duration::from_millis(1500)), "1500ms");
/// ```
pub fn display(duration: Duration) -> String {
    let nanos = duration.as_nanos();
    if nanos == 0 {
        return "0s".to_owned();
    }
    for (unit, per) in [
        ("h", 3_600_000_000_000u128),
        ("m", 60_000_000_000),
        ("s", 1_000_000_000),
        ("ms", 1_000_000),
        ("us", 1_000),
    ] {
        if nanos >= per && nanos.is_multiple_of(per) {
            return format!("{}{unit}", nanos / per);
        }
    }
    if nanos >= 1_000_000_000 {
        // Exact: an `f64` would print 12345678.123456789s rounded.
        let fraction = format!("{:09}", duration.subsec_nanos());
        return format!("{}.{}s", duration.as_secs(), fraction.trim_end_matches('0'));
    }
    format!("{nanos}ns")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_every_unit_and_decimals() {
        let cases = [
            ("100ms", Duration::from_millis(100)),
            ("2s", Duration::from_secs(2)),
            ("1m", Duration::from_secs(60)),
            ("5min", Duration::from_secs(300)),
            ("1h", Duration::from_secs(3600)),
            ("1.5s", Duration::from_millis(1500)),
            ("0.25ms", Duration::from_micros(250)),
            ("750us", Duration::from_micros(750)),
            ("750µs", Duration::from_micros(750)),
            ("10ns", Duration::from_nanos(10)),
            ("0s", Duration::ZERO),
            ("007s", Duration::from_secs(7)),
            ("18446744073709551615.999999999s", Duration::MAX),
        ];
        for (text, expected) in cases {
            assert_eq!(parse(text), Ok(expected), "{text}");
        }
    }

    #[test]
    fn refuses_malformed_text_with_the_first_rule_it_breaks() {
        use DurationError::*;
        for (text, expected) in [
            ("100", NoUnit),
            ("1.5", NoUnit),
            ("ms", NoNumber),
            ("", NoNumber),
            ("-1s", NoNumber),
            ("100 ms", UnknownUnit),
            ("100sec", UnknownUnit),
            ("10mss", UnknownUnit),
            ("1.s", NotANumber),
            (".5s", NotANumber),
            ("1.2.3s", NotANumber),
            ("0.0000000001s", TooPrecise),
            ("99999999999999999999999999999999999999999h", TooLong),
            // Found by fuzzing: the whole part fits u128 nanoseconds, the
            // fraction pushed it over and the sum wrapped (a panic in a
            // debug build, 231.788543ms / 2168.2s in a release build).
            ("340282366920938463463374607431.999999999s", TooLong),
            ("94522879700260684295381835.999999999999h", TooLong),
            ("18446744073709551616s", TooLong),
        ] {
            assert_eq!(parse(text), Err(expected), "{text}");
        }
    }

    #[test]
    fn displays_the_shortest_exact_form() {
        assert_eq!(display(Duration::from_millis(100)), "100ms");
        assert_eq!(display(Duration::from_secs(120)), "2m");
        let odd = Duration::new(12_345_678, 123_456_789);
        assert_eq!(display(odd), "12345678.123456789s");
        assert_eq!(parse(&display(odd)), Ok(odd));
        assert_eq!(display(Duration::from_millis(1500)), "1500ms");
        assert_eq!(display(Duration::from_nanos(7)), "7ns");
        assert_eq!(display(Duration::ZERO), "0s");
        assert_eq!(parse(&display(Duration::MAX)), Ok(Duration::MAX));
    }
}
