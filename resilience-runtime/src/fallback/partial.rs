//! The second fallback: a partial response, its failed part marked.

use std::fmt;

use super::falls_back;
use crate::retry::Classify;
use crate::telemetry::{self, Fallback, Labels};

/// One part of a response: there, or explicitly [`Unavailable`].
///
/// For a response assembled from several dependencies, where one of them
/// failing should cost that part, not the whole response: the part's
/// field is a `Part<T>`, so the consumer of the response sees which part
/// is missing instead of an empty default it could take for real data.
/// Serialized (serde, with the `serde` or the `config-file` feature) as
/// `T` when available and as `{"unavailable": "<part>"}` when not.
///
/// ```
/// use resilience::fallback::Part;
/// use resilience::retry::HttpStatus;
///
/// struct Profile {
///     name: String,
///     recommendations: Part<Vec<String>>,
/// }
///
/// let recommendations: Result<Vec<String>, HttpStatus> = Err(HttpStatus(503));
/// let profile = Profile {
///     name: "Ada".to_owned(),
///     // A 503: this part is unavailable, logged at WARN and counted.
///     recommendations: Part::of("recommendations", recommendations).unwrap(),
/// };
/// assert!(profile.recommendations.is_unavailable());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "an unavailable part must be shown as unavailable"]
pub enum Part<T> {
    /// The part, as the dependency returned it.
    Available(T),
    /// The dependency failed: the part is missing, and says so.
    Unavailable(Unavailable),
}

impl<T> Part<T> {
    /// The part from a call's `result`: a failure of the dependency (an
    /// error whose [`Outcome`](crate::Outcome) is a failure: a 5xx, a
    /// timeout, a network error) or a rejection by its breaker makes it
    /// [`Unavailable`], logged at WARN and counted in
    /// `http_client_fallbacks_total{target=part, kind="partial"}`; any
    /// other error (the caller's mistake, a cancelled call) is returned,
    /// since no fallback should hide it.
    pub fn of<E: Classify>(part: &'static str, result: Result<T, E>) -> Result<Self, E> {
        match result {
            Ok(value) => Ok(Part::Available(value)),
            Err(error) if falls_back(&error) => {
                telemetry::fallback(Labels::of(part), Fallback::Partial);
                Ok(Part::Unavailable(Unavailable::new(part)))
            }
            Err(error) => Err(error),
        }
    }

    /// The part named `part`, unavailable: for a `fallback =` fn, whose
    /// answer the macro logs and counts.
    pub const fn unavailable(part: &'static str) -> Self {
        Part::Unavailable(Unavailable::new(part))
    }

    /// `true` when the part is missing.
    pub const fn is_unavailable(&self) -> bool {
        matches!(self, Part::Unavailable(_))
    }

    /// The part, when available.
    pub fn available(&self) -> Option<&T> {
        match self {
            Part::Available(value) => Some(value),
            Part::Unavailable(_) => None,
        }
    }
}

/// The marker of a missing [`Part`]: which part, so that logs, a UI or a
/// client can say what is missing.
///
/// ```
/// use resilience::fallback::Unavailable;
///
/// assert_eq!(Unavailable::new("recommendations").to_string(), "recommendations: unavailable");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Unavailable {
    part: &'static str,
}

impl Unavailable {
    /// The part named `part` is missing.
    pub const fn new(part: &'static str) -> Self {
        Self { part }
    }

    /// The name of the missing part.
    pub const fn part(&self) -> &'static str {
        self.part
    }
}

impl fmt::Display for Unavailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: unavailable", self.part)
    }
}

// Wherever `serde` is a dependency: `config-file` gives these impls to the
// default build, `serde` to one without it.
#[cfg(any(feature = "serde", feature = "config-file"))]
impl serde::Serialize for Unavailable {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(Some(1))?;
        map.serialize_entry("unavailable", self.part)?;
        map.end()
    }
}

#[cfg(any(feature = "serde", feature = "config-file"))]
impl<T: serde::Serialize> serde::Serialize for Part<T> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Part::Available(value) => value.serialize(serializer),
            Part::Unavailable(missing) => missing.serialize(serializer),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::retry::HttpStatus;

    #[test]
    fn a_failure_makes_the_part_unavailable_and_a_4xx_stands() {
        assert_eq!(
            Part::of("recs", Ok::<_, HttpStatus>(3)),
            Ok(Part::Available(3))
        );
        assert_eq!(
            Part::<u8>::of("recs", Err(HttpStatus(502))),
            Ok(Part::unavailable("recs"))
        );
        assert_eq!(
            Part::<u8>::of("recs", Err(HttpStatus(404))),
            Err(HttpStatus(404))
        );
    }

    #[cfg(any(feature = "serde", feature = "config-file"))]
    #[test]
    fn serialized_as_the_value_or_as_the_missing_part() {
        #[derive(serde::Serialize)]
        struct Page {
            name: &'static str,
            recs: Part<Vec<u8>>,
        }
        let whole = Page {
            name: "a",
            recs: Part::Available(vec![1, 2]),
        };
        let partial = Page {
            name: "a",
            recs: Part::unavailable("recs"),
        };
        assert_eq!(
            serde_json::to_string(&whole).unwrap(),
            r#"{"name":"a","recs":[1,2]}"#
        );
        assert_eq!(
            serde_json::to_string(&partial).unwrap(),
            r#"{"name":"a","recs":{"unavailable":"recs"}}"#
        );
    }
}
