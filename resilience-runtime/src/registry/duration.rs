//! Durations as the config file writes them, with the file's messages:
//! the attributes' grammar (`resilience_rules::duration`).

use std::time::Duration;

use crate::error::ConfigError;

/// Parses `"250ms"`, `"1.5s"`, `"2m"`: a number and one of the units `ns`,
/// `us`, `ms`, `s`, `m`, `h`, by the attributes' grammar
/// (`resilience_rules::duration`: exact, no float, a value that does not
/// fit a `Duration` refused), the error naming the text.
pub(crate) fn duration(key: &'static str, text: &str) -> Result<Duration, ConfigError> {
    use resilience_rules::duration::{DurationError, split, unit_nanos};
    let err = match resilience_rules::duration::parse(text) {
        Ok(duration) => return Ok(duration),
        Err(err) => err,
    };
    let reason = match err {
        // The file's messages name the unit before the number.
        DurationError::NoNumber => match split(text).1 {
            "" => "no unit",
            unit if unit_nanos(unit).is_none() => "unknown unit",
            _ => "not a number",
        },
        DurationError::NoUnit => "no unit",
        DurationError::UnknownUnit => "unknown unit",
        DurationError::NotANumber => "not a number",
        DurationError::TooLong => {
            "too long: the largest duration is 18446744073709551615.999999999s"
        }
        DurationError::TooPrecise => "more precise than a nanosecond",
    };
    Err(ConfigError::new(
        "",
        key,
        format!("{text:?}"),
        format!(
            "{reason}; write a number and a unit (ns, us, ms, s, m, h), e.g. \"250ms\" or \"30s\""
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(duration("k", "250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(duration("k", "1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(duration("k", "2m").unwrap(), Duration::from_secs(120));
        assert_eq!(duration("k", "10us").unwrap(), Duration::from_micros(10));
        // A space is refused, as in the attributes: "2.5 m" once read 150 s
        // here and was an error there (found by the fuzz target `duration`).
        for bad in [
            "",
            "10",
            "ms",
            "10 parsecs",
            "1.2.3s",
            "-1s",
            "2.5 m",
            " 1s",
            "1s ",
        ] {
            let err = duration("window", bad).unwrap_err();
            assert_eq!(err.field(), "window");
            assert_eq!(err.value(), format!("{bad:?}"));
        }
    }

    #[test]
    fn durations_are_exact() {
        // A float read 0.1s as 100000000.0000000055ns and 1e-9-scale sums
        // drifted; integer arithmetic gives the written value.
        assert_eq!(duration("k", "0.1s").unwrap(), Duration::from_millis(100));
        assert_eq!(duration("k", "1.000000001s").unwrap(), Duration::new(1, 1));
        assert_eq!(duration("k", "2.5m").unwrap(), Duration::from_secs(150));
        assert_eq!(duration("k", "1.5ns").unwrap_err().field(), "k");
        assert_eq!(
            duration("k", "18446744073709551615.999999999s").unwrap(),
            Duration::MAX
        );
    }

    #[test]
    fn a_duration_that_does_not_fit_is_refused_with_its_text() {
        // Found by fuzzing the attribute's parser (same rules here).
        for text in [
            "340282366920938463463374607431.999999999s",
            "94522879700260684295381835.999999999999h",
            "18446744073709551616s",
            "99999999999999999999999999999999999999999h",
            "5124095576030432h",
        ] {
            let err = duration("cooldown", text).unwrap_err();
            assert_eq!(err.field(), "cooldown");
            assert_eq!(err.value(), format!("{text:?}"));
            assert!(err.to_string().contains("too long"), "{text}: {err}");
        }
    }
}
