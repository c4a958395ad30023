//! Durations written as string literals (`"100ms"`, `"1.5s"`), parsed at
//! compile time so that a typo is a compile error, not a startup panic.

use std::time::Duration;

use crate::suggest::did_you_mean;

/// The accepted units (`min` as the config file also writes minutes).
const UNITS: &[(&str, u128)] = &[
    ("ns", 1),
    ("us", 1_000),
    ("µs", 1_000),
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60_000_000_000),
    ("min", 60_000_000_000),
    ("h", 3_600_000_000_000),
];

/// Parses `"<number><unit>"`, the number an integer or a decimal, the unit
/// one of `ns`, `us`, `µs`, `ms`, `s`, `m`, `h`. The error is the reason,
/// ready to follow "invalid duration `…`: ".
pub(crate) fn parse(text: &str) -> Result<Duration, String> {
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    if number.is_empty() {
        return Err("a duration starts with a number, e.g. \"100ms\" or \"1.5s\"".into());
    }
    if unit.is_empty() {
        return Err(format!(
            "the unit is missing: write \"{number}ms\" or \"{number}s\" (units: ns, us, ms, s, m, h)"
        ));
    }
    let Some(&(_, nanos_per_unit)) = UNITS.iter().find(|(name, _)| *name == unit) else {
        let names = UNITS.iter().map(|(name, _)| *name);
        let hint = match did_you_mean(unit.trim(), names) {
            Some(near) => format!("; did you mean \"{number}{near}\"?"),
            None => String::new(),
        };
        return Err(format!(
            "unknown unit `{unit}` (units: ns, us, ms, s, m, h, without a space){hint}"
        ));
    };
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() || fraction.contains('.') || (number.contains('.') && fraction.is_empty()) {
        return Err(format!("`{number}` is not a number; write e.g. \"1.5s\""));
    }
    let too_long = || format!("\"{text}\" is too long to be a duration");
    let whole: u128 = whole.parse().map_err(|_| too_long())?;
    let mut nanos = whole.checked_mul(nanos_per_unit).ok_or_else(too_long)?;
    // Exact decimal arithmetic: "1.5s" is 1_500_000_000 ns, not a float.
    let mut scale = nanos_per_unit;
    for digit in fraction.bytes() {
        scale /= 10;
        if scale == 0 {
            return Err(format!("\"{text}\" is more precise than a nanosecond"));
        }
        // Checked: a whole part just below the limit plus its fraction
        // must be refused, not wrapped to a small value.
        nanos = nanos
            .checked_add(u128::from(digit - b'0') * scale)
            .ok_or_else(too_long)?;
    }
    let secs = u64::try_from(nanos / 1_000_000_000).map_err(|_| too_long())?;
    // The remainder is below 10^9 and fits.
    let subsec = (nanos % 1_000_000_000) as u32;
    Ok(Duration::new(secs, subsec))
}

/// `Duration` as the shortest exact text in the same syntax, for messages.
pub(crate) fn display(duration: Duration) -> String {
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
            ("18446744073709551615.999999999s", Duration::MAX),
        ];
        for (text, expected) in cases {
            assert_eq!(parse(text), Ok(expected), "{text}");
        }
    }

    #[test]
    fn rejects_malformed_text_with_the_reason() {
        for (text, needle) in [
            ("100", "unit is missing"),
            ("ms", "starts with a number"),
            ("", "starts with a number"),
            ("100 ms", "without a space"),
            ("100sec", "unknown unit `sec`"),
            ("10mss", "did you mean \"10ms\""),
            ("1.s", "not a number"),
            ("1.2.3s", "not a number"),
            ("-1s", "starts with a number"),
            ("0.0000000001s", "more precise than a nanosecond"),
            ("99999999999999999999999999999999999999999h", "too long"),
            // Found by fuzzing: the whole part fits u128 nanoseconds, the
            // fraction pushed it over and the sum wrapped (a panic in a
            // debug build, 231.788543ms / 2168.2s in a release build).
            ("340282366920938463463374607431.999999999s", "too long"),
            ("94522879700260684295381835.999999999999h", "too long"),
            ("18446744073709551616s", "too long"),
        ] {
            let err = parse(text).unwrap_err();
            assert!(err.contains(needle), "{text}: {err}");
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
    }
}
