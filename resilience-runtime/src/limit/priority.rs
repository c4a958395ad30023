//! Per-call priority: which calls a full limiter sheds first.

use std::cell::Cell;
use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;

/// How important a call is when its dependency is overloaded: as a limit
/// fills, sheddable calls are refused first, critical calls last.
///
/// Each priority may fill a share of a concurrency limit `L` (a
/// [`Bulkhead`](super::Bulkhead)'s `max`, or the current limit of an
/// [`AdaptiveLimit`](super::AdaptiveLimit)), rounded up so that a small
/// limit starves no one:
///
/// | priority | may fill | with `L = 20` |
/// |---|---|---|
/// | [`Critical`](Self::Critical) | all of `L` | 20 |
/// | [`Default`](Self::Default) | ⌈9 `L` / 10⌉ | 18 |
/// | [`Sheddable`](Self::Sheddable) | ⌈`L` / 2⌉ | 10 |
///
/// So the last tenth of the slots is kept for critical calls, and
/// sheddable calls (prefetches, batch jobs, analytics) leave half of the
/// limit to the others. When a bulkhead with a
/// [`max_wait`](super::Bulkhead::with_max_wait) is full, a slot that frees
/// goes to a waiting critical call before any other, and sheddable calls
/// do not wait at all. The [`Throttle`](super::Throttle) applies its
/// rejection probability to default calls, twice it to sheddable ones,
/// and never rejects a critical call (it still counts it). The names
/// follow the criticalities of the SRE book's "Handling Overload".
///
/// ```
/// use resilience::limit::Priority;
///
/// assert_eq!(Priority::Critical.share(20), 20);
/// assert_eq!(Priority::Default.share(20), 18);
/// assert_eq!(Priority::Sheddable.share(20), 10);
/// // A limit of 1 admits one call of any priority.
/// assert_eq!(Priority::Sheddable.share(1), 1);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
#[non_exhaustive]
pub enum Priority {
    /// Shed first: work nobody waits for.
    Sheddable,
    /// Every call not marked otherwise.
    #[default]
    Default,
    /// Shed last: the calls the user is waiting for.
    Critical,
}

impl Priority {
    /// Every priority, the least important first.
    pub const ALL: [Priority; 3] = [Priority::Sheddable, Priority::Default, Priority::Critical];

    /// The metric label value and the word in the config file:
    /// `sheddable`, `default` or `critical`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Priority::Sheddable => "sheddable",
            Priority::Default => "default",
            Priority::Critical => "critical",
        }
    }

    /// Its place in [`ALL`](Self::ALL), the least important first.
    pub(crate) const fn index(self) -> usize {
        self as usize
    }

    /// The priority named `word` ([`as_str`](Self::as_str)).
    pub fn parse(word: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.as_str() == word)
    }

    /// How many calls in flight, out of a limit of `limit`, calls of this
    /// priority may fill (see the table above).
    pub const fn share(self, limit: u32) -> u32 {
        let limit = limit as u64;
        (match self {
            Priority::Critical => limit,
            Priority::Default => (9 * limit).div_ceil(10),
            Priority::Sheddable => limit.div_ceil(2),
        }) as u32
    }
}

thread_local! {
    // The priority the caller gave the calls being polled now, set only
    // while a `WithPriority` future is polled on this thread.
    static SCOPED: Cell<Option<Priority>> = const { Cell::new(None) };
}

/// The priority [`with_priority`] gives the calls being made now, if any.
pub(crate) fn scoped() -> Option<Priority> {
    SCOPED.get()
}

pin_project! {
    /// A future whose limited calls have one priority; see
    /// [`with_priority`].
    #[derive(Debug)]
    #[must_use = "futures do nothing unless `.await`ed"]
    pub struct WithPriority<F> {
        priority: Priority,
        #[pin]
        inner: F,
    }
}

impl<F: Future> Future for WithPriority<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        // Restores the outer value even if the inner future panics.
        struct Restore(Option<Priority>);
        impl Drop for Restore {
            fn drop(&mut self) {
                SCOPED.set(self.0);
            }
        }
        let _restore = Restore(SCOPED.replace(Some(*this.priority)));
        this.inner.poll(cx)
    }
}

/// Runs `fut` so that every limited call it makes has `priority`, whatever
/// priority its declaration gave it: one call sent as critical (a payment
/// the user waits for) or as sheddable (a prefetch), without a second
/// annotated fn.
///
/// It reaches the calls that take their priority from where they were
/// declared: `#[retry(limit = …)]` and `#[circuit_breaker(limit = …)]`,
/// and the reqwest middleware's and tower layer's requests that carry no
/// [`Priority`] of their own in their extensions. The scope is the
/// future's, like the caller's [deadline](crate::deadline): no extra
/// parameter, every call inside however deep, nothing leaks into tasks
/// spawned from inside; the innermost scope wins.
///
/// ```
/// use resilience::limit::{self, Priority};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// # async fn charge(amount: u64) -> Result<u64, std::io::Error> { Ok(amount) }
/// // `charge` is declared with the default priority; this one call is
/// // critical.
/// let receipt = limit::with_priority(Priority::Critical, charge(100)).await;
/// # assert_eq!(receipt.unwrap(), 100);
/// # }
/// ```
pub fn with_priority<F: IntoFuture>(priority: Priority, fut: F) -> WithPriority<F::IntoFuture> {
    WithPriority {
        priority,
        inner: fut.into_future(),
    }
}

#[cfg(test)]
mod tests {
    use super::Priority;

    #[test]
    fn shares_round_up_and_keep_order() {
        for limit in 1..=2000 {
            let [s, d, c] = Priority::ALL.map(|p| p.share(limit));
            assert!(1 <= s && s <= d && d <= c && c == limit, "limit {limit}");
        }
        assert_eq!(Priority::Default.share(16), 15);
        assert_eq!(Priority::Default.share(8), 8);
        assert_eq!(Priority::Sheddable.share(u32::MAX), u32::MAX / 2 + 1);
        assert_eq!(Priority::Default.share(u32::MAX), 3_865_470_566);
    }

    #[test]
    fn index_is_the_place_in_all() {
        for (i, p) in Priority::ALL.into_iter().enumerate() {
            assert_eq!(p.index(), i);
        }
    }

    #[tokio::test]
    async fn the_innermost_scope_wins_and_nothing_leaks() {
        use super::{scoped, with_priority};

        assert_eq!(scoped(), None);
        let seen = with_priority(Priority::Critical, async {
            let outer = scoped();
            let inner = with_priority(Priority::Sheddable, async { scoped() }).await;
            let spawned = tokio::spawn(async { scoped() }).await.unwrap();
            (outer, inner, scoped(), spawned)
        })
        .await;
        assert_eq!(
            seen,
            (
                Some(Priority::Critical),
                Some(Priority::Sheddable),
                Some(Priority::Critical),
                None
            )
        );
        assert_eq!(scoped(), None);
    }

    #[test]
    fn words_round_trip() {
        for p in Priority::ALL {
            assert_eq!(Priority::parse(p.as_str()), Some(p));
        }
        assert_eq!(Priority::parse("high"), None);
    }
}
