//! The first fallback: the last good value, marked stale.

use std::collections::HashMap;
use std::fmt;
use std::hash::Hash;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use super::falls_back;
use crate::retry::Classify;
use crate::telemetry::{self, Fallback, Labels};

/// A value that is either fresh from the dependency or the last good one,
/// served stale because the dependency failed.
///
/// There is no `Deref` to the value: the caller matches, or asks
/// [`is_stale`](Self::is_stale), so a stale value cannot pass for a fresh
/// one by accident. With the `axum` feature a `MaybeStale<T>` is a
/// response: `T`'s, plus `X-From-Cache: stale` and `Age` when stale.
///
/// ```
/// use resilience::fallback::MaybeStale;
/// use std::time::Duration;
///
/// let answer = MaybeStale::stale("Ada", Duration::from_secs(90));
/// match &answer {
///     MaybeStale::Fresh(user) => println!("{user}"),
///     MaybeStale::Stale { value, age } => println!("{value} (as of {}s ago)", age.as_secs()),
/// }
/// assert!(answer.is_stale());
/// assert_eq!(answer.age(), Some(Duration::from_secs(90)));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "a stale value must be shown as stale: match on it or ask `is_stale`"]
pub enum MaybeStale<T> {
    /// Just received from the dependency.
    Fresh(T),
    /// The last good value, received `age` ago; the dependency failed
    /// since.
    Stale {
        /// The last good value.
        value: T,
        /// How long ago it was received.
        age: Duration,
    },
}

impl<T> MaybeStale<T> {
    /// A stale `value`, received `age` ago.
    pub const fn stale(value: T, age: Duration) -> Self {
        MaybeStale::Stale { value, age }
    }

    /// `true` when this is the last good value rather than a fresh one.
    pub const fn is_stale(&self) -> bool {
        matches!(self, MaybeStale::Stale { .. })
    }

    /// The age of a stale value; `None` when fresh.
    pub const fn age(&self) -> Option<Duration> {
        match self {
            MaybeStale::Fresh(_) => None,
            MaybeStale::Stale { age, .. } => Some(*age),
        }
    }

    /// The value, fresh or stale.
    pub const fn value(&self) -> &T {
        match self {
            MaybeStale::Fresh(value) | MaybeStale::Stale { value, .. } => value,
        }
    }

    /// The value, dropping the mark: for code that has already shown the
    /// caller whether it is stale.
    pub fn into_value(self) -> T {
        match self {
            MaybeStale::Fresh(value) | MaybeStale::Stale { value, .. } => value,
        }
    }

    /// The same freshness, with the value mapped.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> MaybeStale<U> {
        match self {
            MaybeStale::Fresh(value) => MaybeStale::Fresh(f(value)),
            MaybeStale::Stale { value, age } => MaybeStale::Stale {
                value: f(value),
                age,
            },
        }
    }
}

/// The last good value per key of one dependency, to serve marked stale
/// when a call to it fails.
///
/// Two ways to use it:
///
/// - by hand, [`or_stale`](Self::or_stale) takes a call's result: a
///   success is kept and returned fresh; a failure of the dependency (an
///   error whose [`Outcome`](crate::Outcome) is a failure: a 5xx, a
///   timeout, a network error) or a rejection by its breaker (not a 4xx,
///   which is an answer) is answered by the last good
///   value, logged at WARN and counted as `kind="stale"`;
/// - with `#[circuit_breaker(fallback = …)]`, the protected fn returns
///   [`fresh`](Self::fresh) and the fallback fn returns
///   [`stale`](Self::stale); the macro logs and counts the stale answer
///   (see [`fallback`](crate::fallback)).
///
/// One value is kept per key ever stored (the memory grows with the
/// keys); [`with_max_age`](Self::with_max_age) refuses to serve values
/// older than a bound.
///
/// ```
/// use resilience::fallback::{LastGood, MaybeStale};
/// use resilience::{DependencyDown, Error};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
/// let users: LastGood<u64, String> = LastGood::new("users");
/// let fresh = users.or_stale(42, Ok::<_, Error>("Ada".to_owned()));
/// assert_eq!(fresh, Ok(MaybeStale::Fresh("Ada".to_owned())));
///
/// let down = Error::from(DependencyDown::new("users", "open"));
/// let answer = users.or_stale(42, Err(down.clone())).unwrap();
/// assert!(answer.is_stale());
/// assert_eq!(answer.value(), "Ada");
///
/// // Nothing good was ever seen for 7: the error stands.
/// assert_eq!(users.or_stale(7, Err(down.clone())), Err(down));
/// # }
/// ```
pub struct LastGood<K, T> {
    target: &'static str,
    max_age: Option<Duration>,
    entries: Mutex<HashMap<K, (T, Instant)>>,
}

impl<K, T> LastGood<K, T> {
    /// An empty cache for the dependency `target` (the `target` label of
    /// its metrics, as the breaker or policy of the same name).
    pub fn new(target: &'static str) -> Self {
        Self {
            target,
            max_age: None,
            entries: Mutex::new(HashMap::new()),
        }
    }

    /// Serves no value older than `max_age`: past it, the error stands.
    #[must_use]
    pub fn with_max_age(mut self, max_age: Duration) -> Self {
        self.max_age = Some(max_age);
        self
    }

    /// The dependency's name, as given to [`new`](Self::new).
    pub fn target(&self) -> &'static str {
        self.target
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<K, (T, Instant)>> {
        // A panic while the map was held cannot leave an entry half
        // written (insert and get only), so the map is still good.
        self.entries
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl<K: Eq + Hash, T: Clone> LastGood<K, T> {
    /// Keeps `value` as the last good one for `key` and returns it fresh.
    pub fn fresh(&self, key: K, value: T) -> MaybeStale<T> {
        self.entries().insert(key, (value.clone(), Instant::now()));
        MaybeStale::Fresh(value)
    }

    /// The last good value for `key`, marked stale with its age; `None`
    /// when there is none (or it is older than the
    /// [`max_age`](Self::with_max_age)).
    ///
    /// Neither logged nor counted: meant for a `fallback =` fn, whose
    /// answer the macro logs and counts. By hand, use
    /// [`or_stale`](Self::or_stale).
    pub fn stale(&self, key: &K) -> Option<MaybeStale<T>> {
        let entries = self.entries();
        let (value, at) = entries.get(key)?;
        let age = at.elapsed();
        match self.max_age {
            Some(max_age) if age > max_age => None,
            _ => Some(MaybeStale::stale(value.clone(), age)),
        }
    }

    /// A call's `result`, with a failure of the dependency answered by the
    /// last good value for `key`, logged at WARN and counted in
    /// `http_client_fallbacks_total{kind="stale"}`. A success is kept for
    /// next time; any other error (the caller's mistake, a cancelled
    /// call), or a failure with nothing to serve, is returned as is.
    pub fn or_stale<E: Classify>(&self, key: K, result: Result<T, E>) -> Result<MaybeStale<T>, E> {
        match result {
            Ok(value) => Ok(self.fresh(key, value)),
            Err(error) if falls_back(&error) => match self.stale(&key) {
                Some(stale) => {
                    telemetry::fallback(Labels::of(self.target), Fallback::Stale);
                    Ok(stale)
                }
                None => Err(error),
            },
            Err(error) => Err(error),
        }
    }
}

impl<K, T> fmt::Debug for LastGood<K, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LastGood")
            .field("target", &self.target)
            .field("max_age", &self.max_age)
            .field("keys", &self.entries().len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::retry::HttpStatus;

    #[tokio::test(start_paused = true)]
    async fn a_failure_is_answered_by_the_last_good_value_with_its_age() {
        let cache = LastGood::new("users");
        assert_eq!(
            cache.or_stale(1, Ok::<_, HttpStatus>("a")),
            Ok(MaybeStale::Fresh("a"))
        );
        tokio::time::advance(Duration::from_secs(3)).await;
        assert_eq!(
            cache.or_stale(1, Err(HttpStatus(503))),
            Ok(MaybeStale::stale("a", Duration::from_secs(3)))
        );
        // A 4xx is an answer, not a failure: it stands.
        assert_eq!(
            cache.or_stale(1, Err(HttpStatus(404))),
            Err(HttpStatus(404))
        );
        // Another key has nothing to serve.
        assert_eq!(
            cache.or_stale(2, Err(HttpStatus(503))),
            Err(HttpStatus(503))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn values_past_max_age_are_not_served() {
        let cache = LastGood::new("users").with_max_age(Duration::from_secs(60));
        let _ = cache.fresh("k", 1);
        tokio::time::advance(Duration::from_secs(60)).await;
        assert_eq!(
            cache.stale(&"k"),
            Some(MaybeStale::stale(1, Duration::from_secs(60)))
        );
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(cache.stale(&"k"), None);
        assert_eq!(
            cache.or_stale("k", Err(HttpStatus(502))),
            Err(HttpStatus(502))
        );
    }

    #[test]
    fn a_fresh_value_replaces_the_last_good_one() {
        let cache = LastGood::new("users");
        let _ = cache.fresh(1, "old");
        let _ = cache.fresh(1, "new");
        assert_eq!(cache.stale(&1).map(MaybeStale::into_value), Some("new"));
    }
}
