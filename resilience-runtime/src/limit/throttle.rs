//! Client-side adaptive throttling (the SRE book, "Handling Overload"):
//! reject locally in proportion to how much the dependency stopped
//! accepting.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use super::report::{self, Report};
use super::{Priority, sample_of};
use crate::error::{ConfigError, Overloaded, ShedBy};
use crate::retry::{Classify, FromRuntimeError, Verdict};
use crate::telemetry::Labels;

/// Buckets of the sliding window.
const BUCKETS: usize = 20;

/// The settings of a [`Throttle`].
///
/// # Default
///
/// The SRE book's: `K = 2`, a window of the last two minutes.
///
/// ```
/// use resilience::limit::ThrottleConfig;
/// use std::time::Duration;
///
/// let config = ThrottleConfig::new().with_k(1.5).with_window(Duration::from_secs(60));
/// assert!(config.validate().is_ok());
/// assert!(ThrottleConfig::new().with_k(0.5).validate().is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ThrottleConfig {
    k: f64,
    window: Duration,
}

impl Default for ThrottleConfig {
    fn default() -> Self {
        Self::new()
    }
}

impl ThrottleConfig {
    /// `K = 2`, a two-minute window.
    pub const fn new() -> Self {
        Self {
            k: 2.0,
            window: Duration::from_secs(120),
        }
    }

    /// The multiplier `K` (default 2): the dependency may refuse up to
    /// `1 − 1/K` of the calls before any is rejected locally. Lower is
    /// more aggressive; the book's 1.1 keeps nearly all of the excess away.
    pub const fn with_k(mut self, k: f64) -> Self {
        self.k = k;
        self
    }

    /// How far back the counts go (default two minutes).
    pub const fn with_window(mut self, window: Duration) -> Self {
        self.window = window;
        self
    }

    /// The multiplier `K`.
    pub const fn k(&self) -> f64 {
        self.k
    }

    /// How far back the counts go.
    pub const fn window(&self) -> Duration {
        self.window
    }

    /// Checks the settings: `K ≥ 1` (below 1 the throttle would reject
    /// calls of a dependency that accepts them all), a window of at least
    /// one second.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let subject = "client-side throttle";
        let mut errors = Vec::new();
        if !(self.k >= 1.0 && self.k.is_finite()) {
            errors.push(ConfigError::new(
                subject,
                "k",
                self.k,
                "must be at least 1: below it, calls the dependency accepts would be rejected; the SRE book uses 2 (1.1 to be aggressive)",
            ));
        }
        if self.window < Duration::from_secs(1) {
            errors.push(ConfigError::new(
                subject,
                "window",
                format!("{:?}", self.window),
                "must be at least 1s, or too few calls are counted to judge by",
            ));
        }
        ConfigError::combine(errors).map_or(Ok(()), Err)
    }
}

/// Client-side adaptive throttling, as the SRE book describes it
/// (Beyer et al., *Site Reliability Engineering*, O'Reilly 2016, ch. 21
/// "Handling Overload", "Client-side throttling"): each process counts,
/// over a sliding window, the `requests` it tried and the `accepts` the
/// dependency answered, and rejects a new call locally with probability
///
/// ```text
/// max(0, (requests − K × accepts) / (requests + 1))
/// ```
///
/// so that a dependency refusing most of its calls gets fewer of them,
/// smoothly, instead of the breaker's all or nothing. Calls rejected
/// locally count as requests, as the book has it: the probability keeps
/// rising while the dependency keeps refusing.
///
/// An *accept* is a call the dependency answered: a success, or a
/// permanent error (a `404` is an answer). A timeout or a transient
/// failure (a `503`, a `429`, a reset) is a request that was not
/// accepted; a cancelled call counts for nothing. [`Priority::Critical`]
/// calls are never rejected locally (they still count), sheddable ones
/// with twice the probability.
///
/// Each admission and each result reads the clock (Tokio's) to find its
/// bucket; no lock is taken. Two calls racing on a bucket that turns over
/// may lose a count, which the window absorbs.
///
/// ```
/// use resilience::limit::{Priority, Throttle, ThrottleConfig};
/// use resilience::retry::HttpStatus;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let throttle = Throttle::new("user", ThrottleConfig::new())?;
/// // 100 calls, 25 accepted: (100 - 2 × 25) / 101.
/// for n in 0..100 {
///     let ticket = throttle.try_acquire(Priority::Critical)?;
///     let status = if n % 4 == 0 { 200 } else { 503 };
///     ticket.record(&if status == 200 { Ok(()) } else { Err(HttpStatus(status)) });
/// }
/// assert!((throttle.probability() - 50.0 / 101.0).abs() < 1e-9);
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct Throttle {
    k: f64,
    /// A bucket's span, in nanoseconds.
    bucket: u64,
    born: Instant,
    buckets: [Bucket; BUCKETS],
    report: Report,
}

#[derive(Debug)]
struct Bucket {
    /// The span this bucket counts (nanoseconds since `born` / `bucket`);
    /// `u64::MAX` before its first use.
    epoch: AtomicU64,
    requests: AtomicU64,
    accepts: AtomicU64,
}

impl Throttle {
    /// A throttle named `name` (the `target` label of its metrics), after
    /// checking `config`.
    pub fn new(name: &'static str, config: ThrottleConfig) -> Result<Self, ConfigError> {
        Self::new_in(crate::telemetry::UNKNOWN_SERVICE, name, config)
    }

    pub(crate) fn new_in(
        service: &'static str,
        name: &'static str,
        config: ThrottleConfig,
    ) -> Result<Self, ConfigError> {
        config
            .validate()
            .map_err(|err| err.with_subject(format!("client-side throttle `{name}`")))?;
        Ok(Self {
            k: config.k,
            bucket: (crate::clock::duration_nanos(config.window) / BUCKETS as u64).max(1),
            born: Instant::now(),
            buckets: std::array::from_fn(|_| Bucket {
                epoch: AtomicU64::new(u64::MAX),
                requests: AtomicU64::new(0),
                accepts: AtomicU64::new(0),
            }),
            report: Report::new(Labels::new(service, name), ShedBy::Throttle),
        })
    }

    /// The throttle's name.
    pub fn name(&self) -> &'static str {
        self.report.name()
    }

    /// The requests and accepts counted in the window now.
    pub fn counts(&self) -> (u64, u64) {
        let now = self.epoch();
        self.buckets
            .iter()
            .filter(|b| {
                let epoch = b.epoch.load(Ordering::Acquire);
                epoch <= now && now - epoch < BUCKETS as u64
            })
            .fold((0, 0), |(r, a), b| {
                (
                    r + b.requests.load(Ordering::Relaxed),
                    a + b.accepts.load(Ordering::Relaxed),
                )
            })
    }

    /// The probability that a default call is rejected now:
    /// `max(0, (requests − K × accepts) / (requests + 1))`.
    pub fn probability(&self) -> f64 {
        let (requests, accepts) = self.counts();
        rejection_probability(self.k, requests, accepts)
    }

    /// Admits a call of `priority`, or rejects it with the probability
    /// above (twice it when sheddable, never when critical).
    ///
    /// # Errors
    ///
    /// [`Overloaded`] when the call is rejected locally.
    pub fn try_acquire(&self, priority: Priority) -> Result<ThrottleTicket<'_>, Overloaded> {
        use rand::Rng;
        let draw = crate::retry::thread_rng(|rng| rng.random::<f64>());
        self.try_acquire_with(priority, draw)
    }

    /// [`try_acquire`](Self::try_acquire) with the uniform draw in [0, 1)
    /// given.
    fn try_acquire_with(
        &self,
        priority: Priority,
        draw: f64,
    ) -> Result<ThrottleTicket<'_>, Overloaded> {
        let probability = self.probability();
        report::throttle_probability(self.report.labels(), probability);
        let probability = match priority {
            Priority::Critical => 0.0,
            Priority::Default => probability,
            Priority::Sheddable => (2.0 * probability).min(1.0),
        };
        if draw < probability {
            self.count(false);
            return Err(self.report.shed(priority, 0));
        }
        Ok(ThrottleTicket {
            throttle: Some(self),
        })
    }

    /// Runs `call` if the throttle admits it, or rejects it with the
    /// caller's error type; its result is counted (classified by `E`).
    pub async fn call<F, T, E>(&self, priority: Priority, call: F) -> Result<T, E>
    where
        F: Future<Output = Result<T, E>>,
        E: Classify + FromRuntimeError,
    {
        let ticket = self
            .try_acquire(priority)
            .map_err(|shed| E::from_runtime(shed.into()))?;
        let result = call.await;
        ticket.record(&result);
        result
    }

    fn epoch(&self) -> u64 {
        crate::clock::duration_nanos(self.born.elapsed()) / self.bucket
    }

    /// Counts one request, accepted or not, in the current bucket.
    fn count(&self, accepted: bool) {
        let epoch = self.epoch();
        let bucket = &self.buckets[(epoch % BUCKETS as u64) as usize];
        let seen = bucket.epoch.load(Ordering::Acquire);
        if seen != epoch
            && bucket
                .epoch
                .compare_exchange(seen, epoch, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            bucket.requests.store(0, Ordering::Relaxed);
            bucket.accepts.store(0, Ordering::Relaxed);
        }
        bucket.requests.fetch_add(1, Ordering::Relaxed);
        if accepted {
            bucket.accepts.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The SRE book's `max(0, (requests − K × accepts) / (requests + 1))`.
pub(crate) fn rejection_probability(k: f64, requests: u64, accepts: u64) -> f64 {
    let (requests, accepts) = (requests as f64, accepts as f64);
    ((requests - k * accepts) / (requests + 1.0)).max(0.0)
}

/// A call admitted by a [`Throttle`]: record its result when it ends.
/// Dropped without a record (the call was cancelled), it counts nothing.
#[derive(Debug)]
#[must_use = "a ticket counts the call when it is recorded"]
pub struct ThrottleTicket<'a> {
    throttle: Option<&'a Throttle>,
}

impl ThrottleTicket<'_> {
    /// Counts the call's `result`, classified by its error type.
    pub fn record<T, E: Classify>(self, result: &Result<T, E>) {
        self.record_verdict(result.as_ref().err().map(Classify::classify));
    }

    /// Counts the call by its verdict (`None` for a success): an accept
    /// unless a drop, nothing when ignored.
    pub fn record_verdict(mut self, verdict: Option<Verdict>) {
        if let (Some(throttle), Some(dropped)) = (self.throttle.take(), sample_of(verdict)) {
            throttle.count(!dropped);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::retry::HttpStatus;

    fn throttle(k: f64) -> Throttle {
        Throttle::new("test", ThrottleConfig::new().with_k(k)).unwrap()
    }

    fn record(throttle: &Throttle, accepted: u64, refused: u64) {
        for _ in 0..accepted {
            throttle
                .try_acquire(Priority::Critical)
                .unwrap()
                .record(&Ok::<_, HttpStatus>(()));
        }
        for _ in 0..refused {
            throttle
                .try_acquire(Priority::Critical)
                .unwrap()
                .record(&Err::<(), _>(HttpStatus(503)));
        }
    }

    /// The book's formula, term for term.
    #[test]
    fn the_sre_formula() {
        // Everything accepted: never reject.
        assert_eq!(rejection_probability(2.0, 100, 100), 0.0);
        // Half accepted with K = 2: requests = K × accepts, still 0 — the
        // dependency may refuse up to 1 − 1/K before the client steps in.
        assert_eq!(rejection_probability(2.0, 100, 50), 0.0);
        // A quarter accepted: (100 − 50) / 101.
        assert_eq!(rejection_probability(2.0, 100, 25), 50.0 / 101.0);
        // Nothing accepted: requests / (requests + 1), never quite 1.
        assert_eq!(rejection_probability(2.0, 100, 0), 100.0 / 101.0);
        // No history: 0.
        assert_eq!(rejection_probability(2.0, 0, 0), 0.0);
    }

    /// failsafe-go's `TestComputeRejectionRate`, whose
    /// `successRateThreshold` t is 1 / K here (its cap left aside).
    #[test]
    fn failsafe_go_compute_rejection_rate() {
        let k = 1.0 / 0.9;
        // Performing better than the threshold.
        assert_eq!(rejection_probability(k, 100, 95), 0.0);
        // Slightly overloaded: 20 / (120 + 1).
        assert!((rejection_probability(k, 120, 90) - 20.0 / 121.0).abs() < 1e-3);
        // Heavily overloaded: above 0.7 (failsafe-go caps at 0.8).
        let p = rejection_probability(k, 200, 50);
        assert!(p > 0.7 && p < 0.8, "{p}");
        // Zero executions.
        assert_eq!(rejection_probability(k, 0, 0), 0.0);
        // Decreasing success rates reject more.
        let healthy = rejection_probability(k, 100, 90);
        let struggling = rejection_probability(k, 100, 70);
        let unhealthy = rejection_probability(k, 100, 50);
        assert!(healthy.abs() < 1e-12 && healthy < struggling && struggling < unhealthy);
    }

    #[tokio::test(start_paused = true)]
    async fn the_counts_follow_the_results() {
        let throttle = throttle(2.0);
        record(&throttle, 25, 75);
        assert_eq!(throttle.counts(), (100, 25));
        assert_eq!(throttle.probability(), 50.0 / 101.0);
        // A 404 is an answer: an accept.
        throttle
            .try_acquire(Priority::Critical)
            .unwrap()
            .record(&Err::<(), _>(HttpStatus(404)));
        assert_eq!(throttle.counts(), (101, 26));
        // A cancelled call, or one shed further down: nothing.
        drop(throttle.try_acquire(Priority::Critical).unwrap());
        throttle
            .try_acquire(Priority::Critical)
            .unwrap()
            .record_verdict(Some(Verdict::Ignored));
        assert_eq!(throttle.counts(), (101, 26));
    }

    #[tokio::test(start_paused = true)]
    async fn rejects_with_the_probability_and_counts_the_rejection() {
        let throttle = throttle(2.0);
        record(&throttle, 25, 75);
        let p = 50.0 / 101.0;
        // A draw just below p rejects, just above admits.
        let shed = throttle
            .try_acquire_with(Priority::Default, p - 1e-9)
            .unwrap_err();
        assert_eq!(shed.by(), ShedBy::Throttle);
        assert_eq!(
            throttle.counts(),
            (101, 25),
            "a local rejection is a request"
        );
        let p = throttle.probability();
        assert!(
            throttle
                .try_acquire_with(Priority::Default, p + 1e-9)
                .is_ok()
        );
        // Sheddable: twice p. Critical: never.
        assert!(
            throttle
                .try_acquire_with(Priority::Sheddable, 1.9 * p)
                .is_err()
        );
        assert!(throttle.try_acquire_with(Priority::Critical, 0.0).is_ok());
    }

    /// Over many draws the share rejected is the probability.
    #[tokio::test(start_paused = true)]
    async fn the_share_rejected_matches_the_probability() {
        let throttle = throttle(2.0);
        record(&throttle, 10_000, 30_000);
        let p = throttle.probability();
        assert!((p - 0.5).abs() < 1e-3, "{p}");
        let rejected = (0..10_000)
            .filter(|_| throttle.try_acquire(Priority::Default).map(drop).is_err())
            .count();
        // p drifts up as rejections count as requests: 0.5 -> 0.55.
        assert!((4_800..5_700).contains(&rejected), "{rejected} rejected");
    }

    #[tokio::test(start_paused = true)]
    async fn the_window_slides() {
        let throttle = throttle(2.0);
        record(&throttle, 0, 100);
        assert!(throttle.probability() > 0.99);
        // Half a window later the old counts are still in.
        tokio::time::sleep(Duration::from_secs(60)).await;
        record(&throttle, 100, 0);
        assert_eq!(throttle.counts(), (200, 100));
        assert_eq!(throttle.probability(), 0.0);
        // A window after the first calls, only the newer ones are left.
        tokio::time::sleep(Duration::from_secs(61)).await;
        assert_eq!(throttle.counts(), (100, 100));
        // Two windows on, nothing.
        tokio::time::sleep(Duration::from_secs(120)).await;
        assert_eq!(throttle.counts(), (0, 0));
    }

    /// The book: K = 1.1 is aggressive, 2 lets more through.
    #[test]
    fn a_lower_k_rejects_more() {
        assert!(rejection_probability(1.1, 100, 60) > rejection_probability(2.0, 100, 60));
        assert_eq!(rejection_probability(2.0, 100, 60), 0.0);
    }

    #[test]
    fn the_config_is_checked() {
        let err = Throttle::new(
            "user",
            ThrottleConfig::new()
                .with_k(0.9)
                .with_window(Duration::from_millis(10)),
        )
        .unwrap_err();
        let fields: Vec<_> = err.errors().map(|e| e.field().to_owned()).collect();
        assert_eq!(fields, ["k", "window"]);
        assert!(
            err.to_string()
                .starts_with("invalid client-side throttle `user`: `k = 0.9`")
        );
    }
}
