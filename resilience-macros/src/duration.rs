//! Durations written as string literals (`"100ms"`, `"1.5s"`), parsed at
//! compile time so that a typo is a compile error, not a startup panic.
//! The grammar is `resilience_rules::duration`, the config file's too;
//! this module words its errors for the attributes.

use std::time::Duration;

use resilience_rules::duration::{DurationError, UNITS, split};
use resilience_rules::suggest::did_you_mean;

pub(crate) use resilience_rules::duration::display;

/// Parses `"<number><unit>"`, the number an integer or a decimal, the unit
/// one of `ns`, `us`, `µs`, `ms`, `s`, `m`, `h`. The error is the reason,
/// ready to follow "invalid duration `…`: ".
pub(crate) fn parse(text: &str) -> Result<Duration, String> {
    let err = match resilience_rules::duration::parse(text) {
        Ok(duration) => return Ok(duration),
        Err(err) => err,
    };
    let (number, unit) = split(text);
    Err(match err {
        DurationError::NoNumber => {
            "a duration starts with a number, e.g. \"100ms\" or \"1.5s\"".into()
        }
        DurationError::NoUnit => format!(
            "the unit is missing: write \"{number}ms\" or \"{number}s\" (units: ns, us, ms, s, m, h)"
        ),
        DurationError::UnknownUnit => {
            let names = UNITS.iter().map(|(name, _)| *name);
            let hint = match did_you_mean(unit.trim(), names) {
                Some(near) => format!("; did you mean \"{number}{near}\"?"),
                None => String::new(),
            };
            format!("unknown unit `{unit}` (units: ns, us, ms, s, m, h, without a space){hint}")
        }
        DurationError::NotANumber => format!("`{number}` is not a number; write e.g. \"1.5s\""),
        DurationError::TooLong => format!("\"{text}\" is too long to be a duration"),
        DurationError::TooPrecise => format!("\"{text}\" is more precise than a nanosecond"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
