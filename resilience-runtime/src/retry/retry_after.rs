//! Parsing the `Retry-After` header.

use std::time::{Duration, SystemTime};

/// Parses a `Retry-After` header value: delta-seconds (`"120"`) or an
/// HTTP-date (`"Wed, 21 Oct 2015 07:28:00 GMT"`, and the two obsolete
/// forms HTTP still accepts), relative to `now`.
///
/// Returns `None` for anything else, so that a garbage header falls back to
/// the plain backoff instead of failing the call. A date in the past gives
/// `Some(Duration::ZERO)`.
///
/// ```
/// use resilience::retry::parse_retry_after;
/// use std::time::{Duration, SystemTime, UNIX_EPOCH};
///
/// let now = UNIX_EPOCH + Duration::from_secs(1_445_412_470);
/// assert_eq!(parse_retry_after("7", now), Some(Duration::from_secs(7)));
/// assert_eq!(
///     parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now),
///     Some(Duration::from_secs(10)),
/// );
/// assert_eq!(parse_retry_after("soon", now), None);
/// ```
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim_matches(|c| c == ' ' || c == '\t');
    if value.is_empty() {
        return None;
    }
    if value.bytes().all(|b| b.is_ascii_digit()) {
        // A number too large for u64 is not a delay anyone can honour.
        return value.parse::<u64>().ok().map(Duration::from_secs);
    }
    match httpdate::parse_http_date(value) {
        Ok(at) => Some(at.duration_since(now).unwrap_or(Duration::ZERO)),
        // A valid date before 1970 is in the past too: "now".
        Err(_) if is_date_before_1970(value) => Some(Duration::ZERO),
        Err(_) => None,
    }
}

/// Whether `value` is a well-formed HTTP-date in a year before 1970, which
/// the `httpdate` parser refuses (it stops at the Unix epoch). The
/// Gregorian calendar repeats every 400 years, weekdays included, so the
/// same date 400·n years later is valid exactly when this one is.
fn is_date_before_1970(value: &str) -> bool {
    let Some((start, year)) = value
        .split(' ')
        .scan(0, |at, token| {
            let start = *at;
            *at += token.len() + 1;
            Some((start, token))
        })
        .find(|(_, token)| token.len() == 4 && token.bytes().all(|b| b.is_ascii_digit()))
    else {
        return false;
    };
    let Ok(year) = year.parse::<u32>() else {
        return false;
    };
    if year >= 1970 {
        return false;
    }
    let later = year + 400 * (1970 - year).div_ceil(400);
    let shifted = format!("{}{later}{}", &value[..start], &value[start + 4..]);
    httpdate::parse_http_date(&shifted).is_ok()
}

/// A value that may hold a `Retry-After` delay: what a field marked
/// `#[classify(retry_after)]` must be, so that `#[derive(Classify)]` waits
/// that long before the next attempt.
///
/// Implemented for `Duration` and `Option<Duration>` (see
/// [`parse_retry_after`] to get one from the header).
///
/// ```
/// use resilience::retry::AsRetryAfter;
/// use std::time::Duration;
///
/// assert_eq!(Duration::from_secs(2).as_retry_after(), Some(Duration::from_secs(2)));
/// assert_eq!(None::<Duration>.as_retry_after(), None);
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a `Retry-After` delay",
    label = "`#[classify(retry_after)]` needs a `Duration` or an `Option<Duration>`",
    note = "parse the header into a `Duration` with `resilience::retry::parse_retry_after`, and keep it in a field of type `Option<std::time::Duration>`"
)]
pub trait AsRetryAfter {
    /// The delay, if any.
    fn as_retry_after(&self) -> Option<Duration>;
}

impl AsRetryAfter for Duration {
    fn as_retry_after(&self) -> Option<Duration> {
        Some(*self)
    }
}

impl AsRetryAfter for Option<Duration> {
    fn as_retry_after(&self) -> Option<Duration> {
        *self
    }
}

/// [`parse_retry_after`] for raw header bytes; non-UTF-8 is garbage too.
pub fn parse_retry_after_bytes(value: &[u8], now: SystemTime) -> Option<Duration> {
    parse_retry_after(std::str::from_utf8(value).ok()?, now)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    fn now() -> SystemTime {
        // Wed, 21 Oct 2015 07:27:50 GMT
        UNIX_EPOCH + Duration::from_secs(1_445_412_470)
    }

    #[test]
    fn delta_seconds() {
        assert_eq!(parse_retry_after("0", now()), Some(Duration::ZERO));
        assert_eq!(parse_retry_after("1", now()), Some(Duration::from_secs(1)));
        assert_eq!(
            parse_retry_after(" 120\t", now()),
            Some(Duration::from_secs(120))
        );
    }

    #[test]
    fn http_dates_in_all_three_formats() {
        let ten = Some(Duration::from_secs(10));
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now()),
            ten
        );
        assert_eq!(
            parse_retry_after("Wednesday, 21-Oct-15 07:28:00 GMT", now()),
            ten
        );
        assert_eq!(parse_retry_after("Wed Oct 21 07:28:00 2015", now()), ten);
    }

    #[test]
    fn past_dates_mean_now() {
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:00:00 GMT", now()),
            Some(Duration::ZERO)
        );
    }

    #[test]
    fn dates_before_1970_mean_now() {
        // Found by fuzzing: a valid HTTP-date before the Unix epoch was
        // ignored (None) instead of meaning "come back now".
        for past in [
            "Thu, 01 Jan 1970 00:00:00 GMT",
            "Wed, 31 Dec 1969 23:59:59 GMT",
            "Mon, 01 Jan 1900 00:00:00 GMT",
            "Sat, 01 Jan 0000 00:00:00 GMT",
            "Wed Dec 31 23:59:59 1969",
        ] {
            assert_eq!(
                parse_retry_after(past, now()),
                Some(Duration::ZERO),
                "{past}"
            );
        }
        // Still well-formed only: a wrong weekday or a 30 February is garbage.
        for bad in [
            "Thu, 31 Dec 1969 23:59:59 GMT",
            "Mon, 30 Feb 1900 00:00:00 GMT",
            "Wed, 31 Dec 1969 24:00:00 GMT",
        ] {
            assert_eq!(parse_retry_after(bad, now()), None, "{bad}");
        }
    }

    #[test]
    fn garbage_is_ignored() {
        for garbage in [
            "",
            "   ",
            "-1",
            "1.5",
            "+3",
            "soon",
            "10 seconds",
            "99999999999999999999999",
            "Wed, 32 Oct 2015 07:28:00 GMT",
            "2015-10-21T07:28:00Z",
        ] {
            assert_eq!(parse_retry_after(garbage, now()), None, "{garbage:?}");
        }
        assert_eq!(parse_retry_after_bytes(b"\xff\xfe", now()), None);
        assert_eq!(
            parse_retry_after_bytes(b"3", now()),
            Some(Duration::from_secs(3))
        );
    }
}
