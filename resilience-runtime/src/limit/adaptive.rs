//! The adaptive concurrency limit: calls in flight bounded by a limit that
//! follows the dependency's latency (Vegas).

use std::future::Future;
use std::sync::atomic::{AtomicU32, Ordering};

use tokio::time::Instant;

use super::report::{self, Report};
use super::vegas::{Vegas, VegasConfig};
use super::{Priority, sample_of};
use crate::error::{ConfigError, Overloaded, ShedBy};
use crate::retry::{Classify, FromRuntimeError, Verdict};
use crate::telemetry::Labels;

/// An adaptive concurrency limit: at most `limit` calls in flight, the
/// limit learnt from the latency of the calls themselves by TCP Vegas
/// ([`VegasConfig`]), each process deciding alone.
///
/// A call that finds the limit reached (for its [`Priority`]) is shed at
/// once with [`Overloaded`]: it never waits for a slot, since a caller
/// queued behind an overloaded dependency is the latency this limit is
/// there to remove.
///
/// Every call admitted is a sample, recorded when its permit is: its
/// latency, the calls in flight when it started, and whether it was a
/// *drop* (a timeout, or a transient failure: a `503`, a `429`, a reset).
/// An answer, even a `404`, is a plain sample; a call cancelled, or never
/// sent, is none.
///
/// # Cost
///
/// Admission is one compare-and-swap of the count in flight; the
/// sample costs two reads of the clock (Tokio's, so that tests can pause
/// it), one at admission and one at the end, and a compare-and-swap of the
/// estimate. Neither takes a lock or allocates. A [`Bulkhead`](super::Bulkhead)
/// reads no clock.
///
/// ```
/// use resilience::limit::{AdaptiveLimit, Priority, VegasConfig};
/// use resilience::retry::HttpStatus;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let limit = AdaptiveLimit::new("user", VegasConfig::new())?;
/// assert_eq!(limit.limit(), 20);
///
/// let permit = limit.try_acquire(Priority::Default)?;
/// tokio::time::sleep(std::time::Duration::from_millis(5)).await;
/// permit.record(&Ok::<_, HttpStatus>(()));
/// assert_eq!(limit.in_flight(), 0);
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct AdaptiveLimit {
    vegas: Vegas,
    in_flight: AtomicU32,
    report: Report,
}

impl AdaptiveLimit {
    /// A limit named `name` (the `target` label of its metrics), after
    /// checking `config`.
    pub fn new(name: &'static str, config: VegasConfig) -> Result<Self, ConfigError> {
        Self::new_in(crate::telemetry::UNKNOWN_SERVICE, name, config)
    }

    /// [`new`](Self::new), for the service `service`.
    pub(crate) fn new_in(
        service: &'static str,
        name: &'static str,
        config: VegasConfig,
    ) -> Result<Self, ConfigError> {
        config
            .validate()
            .map_err(|err| err.with_subject(format!("adaptive concurrency limit `{name}`")))?;
        let labels = Labels::new(service, name);
        report::limit_changed(labels, config.initial_limit());
        Ok(Self {
            vegas: Vegas::new(config),
            in_flight: AtomicU32::new(0),
            report: Report::new(labels, ShedBy::ConcurrencyLimit),
        })
    }

    /// The limit's name.
    pub fn name(&self) -> &'static str {
        self.report.name()
    }

    /// The current limit.
    pub fn limit(&self) -> u32 {
        self.vegas.limit()
    }

    /// The calls in flight now.
    pub fn in_flight(&self) -> u32 {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// The latency without load the limit compares calls to, `None`
    /// before the first sample.
    pub fn rtt_noload(&self) -> Option<std::time::Duration> {
        self.vegas.rtt_noload()
    }

    /// Admits one call of `priority` if the limit lets it through.
    ///
    /// # Errors
    ///
    /// [`Overloaded`] when the calls in flight already fill what the limit
    /// leaves to `priority` ([`Priority::share`]).
    #[inline]
    pub fn try_acquire(&self, priority: Priority) -> Result<LimitPermit<'_>, Overloaded> {
        let limit = self.vegas.limit();
        let share = priority.share(limit);
        let mut before = self.in_flight.load(Ordering::Relaxed);
        loop {
            if before >= share {
                return Err(self.report.shed(priority, limit));
            }
            match self.in_flight.compare_exchange_weak(
                before,
                before + 1,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(actual) => before = actual,
            }
        }
        report::limit_in_flight(self.report.labels(), before + 1);
        Ok(LimitPermit {
            limit: Some(self),
            start: Instant::now(),
            in_flight: before + 1,
        })
    }

    /// Runs `call` under a permit, or sheds it with the caller's error
    /// type; its result is the sample (classified by `E`).
    pub async fn call<F, T, E>(&self, priority: Priority, call: F) -> Result<T, E>
    where
        F: Future<Output = Result<T, E>>,
        E: Classify + FromRuntimeError,
    {
        let permit = self
            .try_acquire(priority)
            .map_err(|shed| E::from_runtime(shed.into()))?;
        let result = call.await;
        permit.record(&result);
        result
    }

    fn release(&self, sample: Option<(std::time::Duration, u32, bool)>) {
        // As a bulkhead's: set by admissions, and by the last release.
        if self.in_flight.fetch_sub(1, Ordering::Release) == 1 {
            report::limit_in_flight(self.report.labels(), 0);
        }
        if let Some((rtt, in_flight, dropped)) = sample
            && let Some(limit) = self.vegas.sample(rtt, in_flight, dropped)
        {
            report::limit_changed(self.report.labels(), limit);
        }
    }
}

/// One call admitted by an [`AdaptiveLimit`]: record its result when it
/// ends. Dropped without a record (the call was cancelled), it frees its
/// slot and is no sample.
#[derive(Debug)]
#[must_use = "a permit holds a slot until it is recorded or dropped"]
pub struct LimitPermit<'a> {
    limit: Option<&'a AdaptiveLimit>,
    start: Instant,
    in_flight: u32,
}

impl LimitPermit<'_> {
    /// Ends the call with `result`, classified by its error type (see
    /// [`AdaptiveLimit`] for what is a drop).
    pub fn record<T, E: Classify>(self, result: &Result<T, E>) {
        self.record_verdict(result.as_ref().err().map(Classify::classify));
    }

    /// Ends the call with its verdict: `None` for a success.
    pub fn record_verdict(mut self, verdict: Option<Verdict>) {
        if let Some(limit) = self.limit.take() {
            let sample =
                sample_of(verdict).map(|dropped| (self.start.elapsed(), self.in_flight, dropped));
            limit.release(sample);
        }
    }
}

impl Drop for LimitPermit<'_> {
    fn drop(&mut self) {
        if let Some(limit) = self.limit.take() {
            limit.release(None);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::retry::HttpStatus;

    const MS: Duration = Duration::from_millis(1);

    fn limit(initial: u32, max: u32) -> AdaptiveLimit {
        AdaptiveLimit::new(
            "test",
            VegasConfig::new()
                .with_initial_limit(initial)
                .with_max_limit(max),
        )
        .unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn sheds_past_the_limit_and_frees_the_slot_on_drop() {
        let limit = limit(2, 2);
        let a = limit.try_acquire(Priority::Critical).unwrap();
        let b = limit.try_acquire(Priority::Critical).unwrap();
        let shed = limit.try_acquire(Priority::Critical).unwrap_err();
        assert_eq!(shed.by(), ShedBy::ConcurrencyLimit);
        assert_eq!(shed.limit(), 2);
        assert_eq!(limit.in_flight(), 2);
        drop(a);
        assert_eq!(limit.in_flight(), 1);
        b.record_verdict(None);
        assert_eq!(limit.in_flight(), 0);
        // Neither was a sample: a dropped permit is a cancelled call, and
        // the recorded one the first sample (the latency without load).
        assert_eq!(limit.rtt_noload(), Some(Duration::from_nanos(1)));
    }

    #[tokio::test(start_paused = true)]
    async fn priorities_fill_their_share() {
        let limit = limit(20, 20);
        let sheddable: Vec<_> = (0..10)
            .map(|_| limit.try_acquire(Priority::Sheddable).unwrap())
            .collect();
        assert!(limit.try_acquire(Priority::Sheddable).is_err());
        let default: Vec<_> = (0..8)
            .map(|_| limit.try_acquire(Priority::Default).unwrap())
            .collect();
        assert!(limit.try_acquire(Priority::Default).is_err());
        let critical: Vec<_> = (0..2)
            .map(|_| limit.try_acquire(Priority::Critical).unwrap())
            .collect();
        assert!(limit.try_acquire(Priority::Critical).is_err());
        assert_eq!(limit.in_flight(), 20);
        drop((sheddable, default, critical));
        assert_eq!(limit.in_flight(), 0);
    }

    /// The samples are the calls' own latencies on the paused clock, and
    /// what they do to the limit is Netflix's `increaseLimit` /
    /// `decreaseLimit`: 10 ms then 10 ms with 11 in flight -> 16; a call
    /// at 50 ms -> limit - 1.
    #[tokio::test(start_paused = true)]
    async fn latencies_move_the_limit_as_vegas_says() {
        let limit = limit(10, 20);
        let mut held: Vec<_> = (0..9)
            .map(|_| limit.try_acquire(Priority::Critical).unwrap())
            .collect();
        let first = limit.try_acquire(Priority::Critical).unwrap();
        tokio::time::sleep(10 * MS).await;
        first.record(&Ok::<_, HttpStatus>(()));
        assert_eq!(limit.rtt_noload(), Some(10 * MS));
        assert_eq!(limit.limit(), 10);
        // 10 in flight with this one: 10 * 2 >= 10, no queue -> 10 + 6.
        let second = limit.try_acquire(Priority::Critical).unwrap();
        tokio::time::sleep(10 * MS).await;
        second.record(&Ok::<_, HttpStatus>(()));
        assert_eq!(limit.limit(), 16);
        // 50 ms: queue ⌈16 × 0.8⌉ = 13 > beta 6 -> 16 - 1.
        let slow = limit.try_acquire(Priority::Critical).unwrap();
        tokio::time::sleep(50 * MS).await;
        slow.record(&Ok::<_, HttpStatus>(()));
        assert_eq!(limit.limit(), 15);
        held.clear();
    }

    #[tokio::test(start_paused = true)]
    async fn a_transient_failure_is_a_drop_and_an_answer_is_not() {
        let limit = limit(10, 20);
        let first = limit.try_acquire(Priority::Default).unwrap();
        tokio::time::sleep(10 * MS).await;
        first.record(&Ok::<_, HttpStatus>(()));
        // A 503 as fast as the best call: still a drop -> 10 - 1.
        let p = limit.try_acquire(Priority::Default).unwrap();
        tokio::time::sleep(10 * MS).await;
        p.record(&Err::<(), _>(HttpStatus(503)));
        assert_eq!(limit.limit(), 9);
        // A 404 at 50 ms with 1 in flight: a plain sample, below half the
        // limit in flight, so no change.
        let p = limit.try_acquire(Priority::Default).unwrap();
        tokio::time::sleep(50 * MS).await;
        p.record(&Err::<(), _>(HttpStatus(404)));
        assert_eq!(limit.limit(), 9);
        // A call shed by another limiter, or cancelled: no sample at all.
        let p = limit.try_acquire(Priority::Default).unwrap();
        p.record_verdict(Some(Verdict::Ignored));
        assert_eq!(limit.limit(), 9);
    }

    #[tokio::test(start_paused = true)]
    async fn call_sheds_with_the_callers_error_type() {
        let limit = limit(1, 1);
        let _held = limit.try_acquire(Priority::Critical).unwrap();
        let err = limit
            .call(Priority::Critical, async { Ok::<_, crate::Error>(()) })
            .await
            .unwrap_err();
        assert!(matches!(err, crate::Error::Overloaded(o) if o.limiter() == "test"));
        assert_eq!(err.classify(), Verdict::Ignored);
    }

    #[test]
    fn the_config_is_checked_with_the_limits_name() {
        let err = AdaptiveLimit::new("user", VegasConfig::new().with_max_limit(5)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid adaptive concurrency limit `user`: `initial_limit = 20`: must lie between `min_limit` (1) and `max_limit` (5)"
        );
    }
}
