//! The rate grammar shared by the attributes (`#[retry(limit = "partner",
//! rate = "100/s")]`, checked at compile time) and the config file
//! (`rate = "100/s"` in a `[limits.<name>]` section, checked at startup):
//! a whole number of calls, a `/`, and a period, either a unit (`ms`, `s`,
//! `m`, `h`: one of it) or a duration (`"25/100ms"`, `"6000/10m"`).
//!
//! Both sides refuse the same texts with the same reason; each names the
//! offending text in its own words (a compile error, a `ConfigError`).
//!
//! ```
//! use resilience_rules::rate;
//! use std::time::Duration;
//!
//! assert_eq!(rate::parse("100/s"), Ok((100, Duration::from_secs(1))));
//! assert_eq!(rate::parse("25/100ms"), Ok((25, Duration::from_millis(100))));
//! assert_eq!(rate::parse("100 per second"), Err(rate::FORM));
//! assert!(rate::parse("0/s").unwrap_err().contains("at least 1"));
//! assert!(rate::burst(0).is_err());
//! assert!(rate::burst(20).is_ok());
//! ```

use std::time::Duration;

use crate::duration;
use crate::limits::MAX_BURST;

/// How a rate is written: the reason given for a text without a `/`.
pub const FORM: &str =
    "a rate is written `<calls>/<period>`, e.g. \"100/s\", \"6000/m\" or \"25/100ms\"";

/// Reads `"<calls>/<period>"` into the number of calls and the period,
/// then [checks](check) them. Spaces around either part are allowed.
///
/// # Errors
///
/// The reason the text is not a rate, ready to follow the text itself.
pub fn parse(text: &str) -> Result<(u32, Duration), &'static str> {
    let Some((count, period)) = text.split_once('/') else {
        return Err(FORM);
    };
    let count: u32 = count
        .trim()
        .parse()
        .map_err(|_| "the number of calls before `/` is a whole number from 1 to 4294967295")?;
    let period = period.trim();
    let period = match duration::unit_nanos(period) {
        Some(nanos) => Duration::from_nanos(nanos as u64),
        None => duration::parse(period).map_err(
            |_| "the period after `/` is a unit (`ms`, `s`, `m`, `h`) or a duration such as `10s`",
        )?,
    };
    check(count, period)?;
    Ok((count, period))
}

/// Checks `count` calls per `period`: at least one call, a period longer
/// than 0, and at most one call per nanosecond (the limit's clock).
///
/// # Errors
///
/// Why the rate cannot be kept.
pub fn check(count: u32, period: Duration) -> Result<(), &'static str> {
    if count == 0 {
        Err("a rate of 0 calls would refuse every call; use at least 1")
    } else if period.is_zero() {
        Err("a rate needs a period longer than 0, e.g. \"100/s\"")
    } else if interval_nanos(count, period) == 0 {
        Err("a rate faster than one call per nanosecond cannot be timed; use a longer period")
    } else {
        Ok(())
    }
}

/// The time between two calls at exactly `count` per `period`, in
/// nanoseconds, rounded down (0 for a count of 0).
pub fn interval_nanos(count: u32, period: Duration) -> u64 {
    if count == 0 {
        return 0;
    }
    let nanos = u64::try_from(period.as_nanos()).unwrap_or(u64::MAX);
    nanos / u64::from(count)
}

/// Checks a burst given to a rate limit: from 1 to [`MAX_BURST`].
///
/// # Errors
///
/// Why the burst cannot be kept.
pub fn burst(burst: u32) -> Result<(), String> {
    if burst == 0 {
        Err("a burst of 0 would refuse every call; use at least 1 (one call at a time, spaced by the rate)".to_owned())
    } else if burst > MAX_BURST {
        Err(format!(
            "a burst above {MAX_BURST} calls lets that many through at once after a quiet spell, which limits no dependency; a burst is the most calls the dependency takes at once, usually a small share of the rate's count"
        ))
    } else {
        Ok(())
    }
}
