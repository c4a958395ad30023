//! One limiter for a dependency: a throttle, a rate limit, then a bulkhead
//! or an adaptive limit, applied to each attempt as the HTTP layers do.

use std::future::Future;

#[cfg(feature = "limit-redis")]
use super::FleetRateLimit;
use super::{AdaptiveLimit, Bulkhead, Priority, RateLimit, Throttle};
use crate::retry::{Classify, FromRuntimeError};

/// The load limiter of one dependency, as the HTTP layers apply it
/// (`with_limit` on the reqwest middleware and the tower layer): an
/// optional [`Throttle`] in front, an optional [`RateLimit`], then at most
/// one of a [`Bulkhead`] and an [`AdaptiveLimit`], around each **attempt**
/// (see [where limiting sits](super#where-limiting-sits)).
///
/// ```
/// use resilience::limit::{AdaptiveLimit, Limiter, Priority, Throttle, ThrottleConfig, VegasConfig};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let limiter = Limiter::adaptive(AdaptiveLimit::new("users", VegasConfig::new())?)
///     .with_throttle(Throttle::new("users", ThrottleConfig::new())?);
/// let answer = limiter
///     .call(Priority::Default, async { Ok::<_, resilience::Error>(7) })
///     .await?;
/// assert_eq!(answer, 7);
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct Limiter {
    throttle: Option<Throttle>,
    rate: Option<RatePart>,
    slots: Option<Slots>,
}

/// The rate limit of a limiter: this process's, or a quota shared by the
/// fleet.
#[derive(Debug)]
pub(crate) enum RatePart {
    Local(RateLimit),
    #[cfg(feature = "limit-redis")]
    Fleet(FleetRateLimit),
}

impl RatePart {
    async fn acquire(&self, priority: Priority) -> Result<(), crate::Overloaded> {
        match self {
            RatePart::Local(rate) => rate.acquire(priority).await,
            #[cfg(feature = "limit-redis")]
            RatePart::Fleet(rate) => rate.acquire(priority).await,
        }
    }
}

#[derive(Debug)]
enum Slots {
    Bulkhead(Bulkhead),
    Adaptive(AdaptiveLimit),
}

impl Limiter {
    /// A limiter of `bulkhead`'s fixed number of calls in flight.
    pub fn bulkhead(bulkhead: Bulkhead) -> Self {
        Self {
            throttle: None,
            rate: None,
            slots: Some(Slots::Bulkhead(bulkhead)),
        }
    }

    /// A limiter of `limit`'s adaptive number of calls in flight.
    pub fn adaptive(limit: AdaptiveLimit) -> Self {
        Self {
            throttle: None,
            rate: None,
            slots: Some(Slots::Adaptive(limit)),
        }
    }

    /// A limiter that only throttles.
    pub fn throttle(throttle: Throttle) -> Self {
        Self {
            throttle: Some(throttle),
            rate: None,
            slots: None,
        }
    }

    /// A limiter of `rate` alone.
    pub fn rate(rate: RateLimit) -> Self {
        Self {
            throttle: None,
            rate: Some(RatePart::Local(rate)),
            slots: None,
        }
    }

    /// The same limiter, with `rate` after the throttle and before the
    /// slots (replacing any).
    #[must_use]
    pub fn with_rate(mut self, rate: RateLimit) -> Self {
        self.rate = Some(RatePart::Local(rate));
        self
    }

    pub(crate) fn with_rate_part(mut self, rate: RatePart) -> Self {
        self.rate = Some(rate);
        self
    }

    pub(crate) fn rate_part(rate: RatePart) -> Self {
        Self {
            throttle: None,
            rate: Some(rate),
            slots: None,
        }
    }

    /// The rate limit, if the limiter has one of this process's own.
    pub fn as_rate(&self) -> Option<&RateLimit> {
        match &self.rate {
            Some(RatePart::Local(rate)) => Some(rate),
            _ => None,
        }
    }

    /// The rate limit shared by the fleet through Redis, if the limiter
    /// has one (`shared` in its `[limits.<name>]` section).
    #[cfg(feature = "limit-redis")]
    pub fn as_fleet_rate(&self) -> Option<&FleetRateLimit> {
        match &self.rate {
            Some(RatePart::Fleet(rate)) => Some(rate),
            _ => None,
        }
    }

    /// The same limiter, with `throttle` in front (replacing any).
    #[must_use]
    pub fn with_throttle(mut self, throttle: Throttle) -> Self {
        self.throttle = Some(throttle);
        self
    }

    /// The bulkhead, if the limiter has one.
    pub fn as_bulkhead(&self) -> Option<&Bulkhead> {
        match &self.slots {
            Some(Slots::Bulkhead(bulkhead)) => Some(bulkhead),
            _ => None,
        }
    }

    /// The adaptive limit, if the limiter has one.
    pub fn as_adaptive(&self) -> Option<&AdaptiveLimit> {
        match &self.slots {
            Some(Slots::Adaptive(limit)) => Some(limit),
            _ => None,
        }
    }

    /// The throttle, if the limiter has one.
    pub fn as_throttle(&self) -> Option<&Throttle> {
        self.throttle.as_ref()
    }

    /// Runs `call` (one attempt) if the throttle, the rate limit and the
    /// slots admit it, waiting for its place in the rate limit's schedule
    /// and for a bulkhead's slot at most their `max_wait`; records its
    /// result (classified by `E`) with the throttle and the slots. A call
    /// shed is the caller's error made from
    /// [`Overloaded`](crate::Overloaded), and `call` is never polled.
    ///
    /// A call shed by the slots after the rate limit admitted it keeps its
    /// place in the rate: the rate counts what was admitted, so it can only
    /// err on the side of sending less.
    pub async fn call<F, T, E>(&self, priority: Priority, call: F) -> Result<T, E>
    where
        F: Future<Output = Result<T, E>>,
        E: Classify + FromRuntimeError,
    {
        let shed = |overloaded: crate::Overloaded| E::from_runtime(overloaded.into());
        let ticket = match &self.throttle {
            Some(throttle) => Some(throttle.try_acquire(priority).map_err(shed)?),
            None => None,
        };
        // A call the rate or the slots shed drops its ticket: the throttle
        // counts it for nothing, since the dependency never saw it.
        if let Some(rate) = &self.rate {
            rate.acquire(priority).await.map_err(shed)?;
        }
        let result = match &self.slots {
            None => call.await,
            Some(Slots::Bulkhead(bulkhead)) => {
                let _slot = bulkhead.acquire(priority).await.map_err(shed)?;
                call.await
            }
            Some(Slots::Adaptive(limit)) => {
                let permit = limit.try_acquire(priority).map_err(shed)?;
                let result = call.await;
                permit.record(&result);
                result
            }
        };
        if let Some(ticket) = ticket {
            ticket.record(&result);
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{Error, ShedBy};
    use crate::limit::{ThrottleConfig, VegasConfig};
    use crate::retry::HttpStatus;

    #[derive(Debug)]
    enum E {
        Status(u16),
        Runtime(Error),
    }

    impl From<Error> for E {
        fn from(err: Error) -> Self {
            E::Runtime(err)
        }
    }

    impl Classify for E {
        fn classify(&self) -> crate::Verdict {
            match self {
                E::Status(code) => HttpStatus(*code).classify(),
                E::Runtime(err) => err.classify(),
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_bulkhead_sheds_without_polling_the_call() {
        let limiter = Limiter::bulkhead(Bulkhead::new("users", 1).unwrap());
        let _held = limiter
            .as_bulkhead()
            .unwrap()
            .try_acquire(Priority::Critical)
            .unwrap();
        let mut polled = false;
        let err = limiter
            .call(Priority::Default, async {
                polled = true;
                Ok::<_, E>(())
            })
            .await
            .unwrap_err();
        assert!(!polled);
        assert!(matches!(err, E::Runtime(Error::Overloaded(o)) if o.by() == ShedBy::Bulkhead));
    }

    /// The rate limit comes before the slots: a call it refuses takes no
    /// slot and is never polled, and a call it lets wait holds no slot
    /// while it waits.
    #[tokio::test(start_paused = true)]
    async fn a_rate_limit_before_the_slots() {
        use crate::limit::{Rate, RateLimit};
        use std::time::Duration;

        let ms = Duration::from_millis(1);
        let limiter = Limiter::bulkhead(Bulkhead::new("partner", 1).unwrap()).with_rate(
            RateLimit::new("partner", Rate::per_second(10))
                .unwrap()
                .with_burst(1)
                .unwrap()
                .with_max_wait(ms * 150),
        );
        limiter
            .call(Priority::Default, async { Ok::<_, E>(()) })
            .await
            .unwrap();
        let start = tokio::time::Instant::now();
        let bulkhead = limiter.as_bulkhead().unwrap();
        let waiting = limiter.call(Priority::Default, async {
            assert_eq!(bulkhead.in_flight(), 1, "the slot is taken after the wait");
            Ok::<_, E>(start.elapsed())
        });
        let (waited, in_flight_meanwhile) = tokio::join!(waiting, async {
            tokio::time::sleep(ms * 50).await;
            bulkhead.in_flight()
        });
        assert_eq!(waited.unwrap(), ms * 100);
        assert_eq!(in_flight_meanwhile, 0, "no slot held while waiting");
        // Beyond the wait bound: refused at once, never polled, told when
        // to come back.
        let limiter = Limiter::rate(
            RateLimit::new("partner", Rate::per_second(10))
                .unwrap()
                .with_burst(1)
                .unwrap()
                .with_max_wait(ms * 50),
        );
        limiter
            .call(Priority::Default, async { Ok::<_, E>(()) })
            .await
            .unwrap();
        let mut polled = false;
        let err = limiter
            .call(Priority::Default, async {
                polled = true;
                Ok::<_, E>(())
            })
            .await
            .unwrap_err();
        assert!(!polled);
        assert!(matches!(err, E::Runtime(Error::Overloaded(o))
            if o.by() == ShedBy::RateLimit && o.retry_after() == Some(ms * 100)));
    }

    #[tokio::test(start_paused = true)]
    async fn the_throttle_counts_what_the_slots_let_through() {
        let limiter = Limiter::adaptive(
            AdaptiveLimit::new(
                "users",
                VegasConfig::new().with_initial_limit(1).with_max_limit(1),
            )
            .unwrap(),
        )
        .with_throttle(Throttle::new("users", ThrottleConfig::new()).unwrap());
        assert_eq!(
            limiter
                .call(Priority::Critical, async { Err::<(), _>(E::Status(503)) })
                .await
                .unwrap_err()
                .classify(),
            crate::Verdict::Transient
        );
        // Critical: counted by the throttle, never rejected by it (after a
        // 503 alone its probability is 1 / 2).
        limiter
            .call(Priority::Critical, async { Ok::<_, E>(()) })
            .await
            .unwrap();
        assert_eq!(limiter.as_throttle().unwrap().counts(), (2, 1));
        // Shed by the adaptive limit (its limit is 1, and one is held):
        // nothing for the throttle.
        let _held = limiter
            .as_adaptive()
            .unwrap()
            .try_acquire(Priority::Critical)
            .unwrap();
        let err = limiter
            .call(Priority::Critical, async { Ok::<_, E>(()) })
            .await
            .unwrap_err();
        assert!(
            matches!(err, E::Runtime(Error::Overloaded(o)) if o.by() == ShedBy::ConcurrencyLimit)
        );
        assert_eq!(limiter.as_throttle().unwrap().counts(), (2, 1));
    }
}
