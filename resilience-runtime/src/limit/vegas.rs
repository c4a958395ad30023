//! The limit algorithm: TCP Vegas, as Netflix's `concurrency-limits` adapts
//! it to request concurrency (`VegasLimit`), with its defaults.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use crate::error::ConfigError;

/// The settings of the adaptive limit: TCP Vegas (Brakmo & Peterson, "TCP
/// Vegas: End to End Congestion Avoidance on a Global Internet", IEEE
/// JSAC 13(8), 1995) as Netflix's `concurrency-limits` library applies it
/// to requests in flight (`com.netflix.concurrency.limits.limit.VegasLimit`).
///
/// Each sample is the latency of one call and the number of calls in
/// flight when it started. The lowest latency seen is taken as the
/// latency without load (`rtt_noload`); the calls queued at the dependency
/// are then estimated as `queue = ⌈limit × (1 − rtt_noload / rtt)⌉`, and:
///
/// - a *drop* (a timeout, a transient failure: the dependency shed or lost
///   the call) lowers the limit by `log10(limit)`;
/// - when fewer than half of the limit are in flight, the limit stays (no
///   upward drift while the limit is not what holds the calls back);
/// - `queue ≤ log10(limit)`: no queueing, the limit grows by
///   `beta = 6 log10(limit)`;
/// - `queue < alpha = 3 log10(limit)`: it grows by `log10(limit)`;
/// - `queue > beta`: it shrinks by `log10(limit)`;
/// - otherwise it stays.
///
/// `log10(n)` is `max(1, ⌊log10 n⌋)`, Netflix's `Log10RootIntFunction`.
/// The result is bounded by [`min_limit`](Self::with_min_limit) and
/// [`max_limit`](Self::with_max_limit), then smoothed. Every
/// `probe_multiplier × limit` samples (times a jitter drawn in [0.5, 1)),
/// the next sample becomes the new `rtt_noload`, so that a dependency that
/// became slower for good is not taken as queueing forever.
///
/// # Default
///
/// Netflix's defaults: initial limit 20, maximum 1000, minimum 1,
/// smoothing 1.0 (none), probe multiplier 30.
///
/// ```
/// use resilience::limit::VegasConfig;
///
/// let config = VegasConfig::new().with_initial_limit(10).with_max_limit(200);
/// assert_eq!(config.initial_limit(), 10);
/// assert!(config.validate().is_ok());
/// assert!(VegasConfig::new().with_max_limit(0).validate().is_err());
/// ```
#[derive(Debug, Clone, Copy)]
pub struct VegasConfig {
    initial_limit: u32,
    min_limit: u32,
    max_limit: u32,
    smoothing: f64,
    probe_multiplier: u32,
    decrease: fn(f64) -> f64,
}

impl Default for VegasConfig {
    fn default() -> Self {
        Self::new()
    }
}

/// `max(1, ⌊log10 n⌋)`: Netflix's `Log10RootIntFunction`.
pub(crate) const fn log10(n: u32) -> u32 {
    if n < 100 { 1 } else { n.ilog10() }
}

fn decrease_by_log10(limit: f64) -> f64 {
    limit - f64::from(log10(limit as u32))
}

impl VegasConfig {
    /// Netflix's defaults (see above).
    pub const fn new() -> Self {
        Self {
            initial_limit: 20,
            min_limit: 1,
            max_limit: 1000,
            smoothing: 1.0,
            probe_multiplier: 30,
            decrease: decrease_by_log10,
        }
    }

    /// The limit before any sample (default 20).
    pub const fn with_initial_limit(mut self, limit: u32) -> Self {
        self.initial_limit = limit;
        self
    }

    /// The lowest the limit goes (default 1).
    pub const fn with_min_limit(mut self, limit: u32) -> Self {
        self.min_limit = limit;
        self
    }

    /// The highest the limit goes (default 1000).
    pub const fn with_max_limit(mut self, limit: u32) -> Self {
        self.max_limit = limit;
        self
    }

    /// How much of each change is applied, in (0, 1] (default 1.0: all of
    /// it): `limit = (1 − smoothing) × limit + smoothing × new`.
    pub const fn with_smoothing(mut self, smoothing: f64) -> Self {
        self.smoothing = smoothing;
        self
    }

    /// How often `rtt_noload` is probed again, in multiples of the limit
    /// (default 30).
    pub const fn with_probe_multiplier(mut self, multiplier: u32) -> Self {
        self.probe_multiplier = multiplier;
        self
    }

    /// How the limit shrinks (default: by `log10(limit)`).
    pub const fn with_decrease(mut self, decrease: fn(f64) -> f64) -> Self {
        self.decrease = decrease;
        self
    }

    /// The limit before any sample.
    pub const fn initial_limit(&self) -> u32 {
        self.initial_limit
    }

    /// The lowest the limit goes.
    pub const fn min_limit(&self) -> u32 {
        self.min_limit
    }

    /// The highest the limit goes.
    pub const fn max_limit(&self) -> u32 {
        self.max_limit
    }

    /// Checks the settings: `1 ≤ min ≤ initial ≤ max`, smoothing in (0, 1],
    /// a probe multiplier of at least 1.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let subject = "adaptive concurrency limit";
        let mut errors = Vec::new();
        if self.min_limit == 0 {
            errors.push(ConfigError::new(
                subject,
                "min_limit",
                self.min_limit,
                "a limit of 0 would refuse every call; use at least 1",
            ));
        }
        if self.max_limit < self.min_limit.max(1) {
            errors.push(ConfigError::new(
                subject,
                "max_limit",
                self.max_limit,
                format!("must be at least `min_limit` ({}) and 1", self.min_limit),
            ));
        }
        if !(self.min_limit..=self.max_limit).contains(&self.initial_limit) {
            errors.push(ConfigError::new(
                subject,
                "initial_limit",
                self.initial_limit,
                format!(
                    "must lie between `min_limit` ({}) and `max_limit` ({})",
                    self.min_limit, self.max_limit
                ),
            ));
        }
        if !(self.smoothing > 0.0 && self.smoothing <= 1.0) {
            errors.push(ConfigError::new(
                subject,
                "smoothing",
                self.smoothing,
                "must lie in (0, 1]; 1 applies each change whole",
            ));
        }
        if self.probe_multiplier == 0 {
            errors.push(ConfigError::new(
                subject,
                "probe_multiplier",
                self.probe_multiplier,
                "must be at least 1",
            ));
        }
        ConfigError::combine(errors).map_or(Ok(()), Err)
    }
}

/// The state of the Vegas limit, updated by every sample without a lock:
/// the estimate is replaced by compare-and-swap, `rtt_noload` only ever
/// lowered between probes. Two samples racing may both be computed from
/// the same estimate; the second CAS then retries on the first's result.
#[derive(Debug)]
pub(crate) struct Vegas {
    config: VegasConfig,
    /// The estimated limit, an `f64`'s bits.
    estimate: AtomicU64,
    /// The latency without load, in nanoseconds; 0 before the first sample.
    rtt_noload: AtomicU64,
    /// Samples since the last probe.
    probe_count: AtomicU64,
    /// The probe's jitter in [0.5, 1), an `f64`'s bits.
    probe_jitter: AtomicU64,
    /// The limit's integer part, read by every admission.
    limit: AtomicU32,
}

impl Vegas {
    /// A limit at `config`'s initial value. `config` is valid.
    pub(crate) fn new(config: VegasConfig) -> Self {
        Self {
            config,
            estimate: AtomicU64::new(f64::from(config.initial_limit).to_bits()),
            rtt_noload: AtomicU64::new(0),
            probe_count: AtomicU64::new(0),
            probe_jitter: AtomicU64::new(jitter().to_bits()),
            limit: AtomicU32::new(config.initial_limit),
        }
    }

    /// The current limit.
    #[inline]
    pub(crate) fn limit(&self) -> u32 {
        self.limit.load(Ordering::Relaxed)
    }

    /// The latency without load in use, `None` before the first sample.
    pub(crate) fn rtt_noload(&self) -> Option<Duration> {
        match self.rtt_noload.load(Ordering::Relaxed) {
            0 => None,
            nanos => Some(Duration::from_nanos(nanos)),
        }
    }

    /// One sample: a call that took `rtt`, started with `in_flight` calls
    /// in flight (itself included), dropped or not. Returns the new limit
    /// when it changed.
    pub(crate) fn sample(&self, rtt: Duration, in_flight: u32, dropped: bool) -> Option<u32> {
        let rtt = crate::clock::duration_nanos(rtt).max(1);
        let count = self.probe_count.fetch_add(1, Ordering::Relaxed) + 1;
        let estimate = f64::from_bits(self.estimate.load(Ordering::Relaxed));
        let jitter = f64::from_bits(self.probe_jitter.load(Ordering::Relaxed));
        if jitter * f64::from(self.config.probe_multiplier) * estimate <= count as f64 {
            // Probe: this sample is the new latency without load.
            self.probe_jitter
                .store(self::jitter().to_bits(), Ordering::Relaxed);
            self.probe_count.store(0, Ordering::Relaxed);
            self.rtt_noload.store(rtt, Ordering::Relaxed);
            return None;
        }
        let noload = self.rtt_noload.load(Ordering::Relaxed);
        if noload == 0 {
            // The first sample: a racing one may have set it already.
            let _ = self
                .rtt_noload
                .compare_exchange(0, rtt, Ordering::Relaxed, Ordering::Relaxed);
            return None;
        }
        if rtt < noload {
            self.rtt_noload.fetch_min(rtt, Ordering::Relaxed);
            return None;
        }
        let mut current = self.estimate.load(Ordering::Relaxed);
        loop {
            let estimate = f64::from_bits(current);
            let next = next_limit(&self.config, estimate, rtt, noload, in_flight, dropped)?;
            match self.estimate.compare_exchange_weak(
                current,
                next.to_bits(),
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    let (before, after) = (estimate as u32, next as u32);
                    if before == after {
                        return None;
                    }
                    self.limit.store(after, Ordering::Relaxed);
                    return Some(after);
                }
                Err(actual) => current = actual,
            }
        }
    }
}

/// The probe's jitter, drawn in [0.5, 1).
fn jitter() -> f64 {
    use rand::Rng;
    crate::retry::thread_rng(|rng| rng.random_range(0.5..1.0))
}

/// Netflix's `updateEstimatedLimit`: the next estimate, or `None` when it
/// stays.
fn next_limit(
    config: &VegasConfig,
    estimate: f64,
    rtt: u64,
    noload: u64,
    in_flight: u32,
    dropped: bool,
) -> Option<f64> {
    let queue = (estimate * (1.0 - noload as f64 / rtt as f64)).ceil();
    let next = if dropped {
        (config.decrease)(estimate)
    } else if f64::from(in_flight) * 2.0 < estimate {
        return None;
    } else {
        let log = log10(estimate as u32);
        let (alpha, beta, threshold) = (f64::from(3 * log), f64::from(6 * log), f64::from(log));
        if queue <= threshold {
            estimate + beta
        } else if queue < alpha {
            estimate + f64::from(log)
        } else if queue > beta {
            (config.decrease)(estimate)
        } else {
            return None;
        }
    };
    let next = next.clamp(f64::from(config.min_limit), f64::from(config.max_limit));
    Some((1.0 - config.smoothing) * estimate + config.smoothing * next)
}

#[cfg(test)]
mod tests {
    //! Netflix's `VegasLimitTest`, with its numbers: `limit.onSample(0,
    //! rtt, inflight, didDrop)` is `vegas.sample(rtt, inflight, dropped)`.
    //! Its `create()` sets alpha 3 and beta 6, which are the defaults'
    //! values at a limit of 10 (3 and 6 times log10(10)).

    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn create() -> Vegas {
        Vegas::new(VegasConfig::new().with_initial_limit(10).with_max_limit(20))
    }

    #[test]
    fn log10_is_netflix_log10_root_int_function() {
        // Log10RootIntFunction: max(1, (int) Math.log10(t)).
        for (n, expected) in [
            (0, 1),
            (1, 1),
            (9, 1),
            (10, 1),
            (99, 1),
            (100, 2),
            (999, 2),
            (1000, 3),
            (10_000, 4),
        ] {
            assert_eq!(log10(n), expected, "log10({n})");
        }
    }

    #[test]
    fn initial_limit() {
        assert_eq!(create().limit(), 10);
    }

    #[test]
    fn large_limit_increase() {
        let vegas = Vegas::new(
            VegasConfig::new()
                .with_initial_limit(10_000)
                .with_max_limit(20_000),
        );
        vegas.sample(Duration::from_secs(10), 5000, false);
        assert_eq!(vegas.limit(), 10_000);
        vegas.sample(Duration::from_secs(10), 6000, false);
        assert_eq!(vegas.limit(), 10_024);
    }

    #[test]
    fn increase_limit() {
        let vegas = create();
        vegas.sample(10 * MS, 10, false);
        assert_eq!(vegas.limit(), 10);
        vegas.sample(10 * MS, 11, false);
        assert_eq!(vegas.limit(), 16);
    }

    #[test]
    fn decrease_limit() {
        let vegas = create();
        vegas.sample(10 * MS, 10, false);
        assert_eq!(vegas.limit(), 10);
        vegas.sample(50 * MS, 11, false);
        assert_eq!(vegas.limit(), 9);
    }

    #[test]
    fn no_change_if_within_thresholds() {
        let vegas = create();
        vegas.sample(10 * MS, 10, false);
        assert_eq!(vegas.limit(), 10);
        vegas.sample(14 * MS, 14, false);
        assert_eq!(vegas.limit(), 10);
    }

    #[test]
    fn decrease_smoothing() {
        let vegas = Vegas::new(
            VegasConfig::new()
                .with_decrease(|limit| limit / 2.0)
                .with_smoothing(0.5)
                .with_initial_limit(100)
                .with_max_limit(200),
        );
        // Pick up first min-rtt
        vegas.sample(10 * MS, 100, false);
        assert_eq!(vegas.limit(), 100);
        // First decrease
        vegas.sample(20 * MS, 100, false);
        assert_eq!(vegas.limit(), 75);
        // Second decrease
        vegas.sample(20 * MS, 100, false);
        assert_eq!(vegas.limit(), 56);
    }

    #[test]
    fn decrease_without_smoothing() {
        let vegas = Vegas::new(
            VegasConfig::new()
                .with_decrease(|limit| limit / 2.0)
                .with_initial_limit(100)
                .with_max_limit(200),
        );
        vegas.sample(10 * MS, 100, false);
        assert_eq!(vegas.limit(), 100);
        vegas.sample(20 * MS, 100, false);
        assert_eq!(vegas.limit(), 50);
        vegas.sample(20 * MS, 100, false);
        assert_eq!(vegas.limit(), 25);
    }

    // Beyond Netflix's tests, the other rules of `updateEstimatedLimit`.

    #[test]
    fn a_drop_lowers_the_limit_whatever_the_latency() {
        let vegas = create();
        vegas.sample(10 * MS, 10, false);
        vegas.sample(10 * MS, 1, true);
        assert_eq!(vegas.limit(), 9);
    }

    #[test]
    fn no_upward_drift_below_half_the_limit() {
        let vegas = create();
        vegas.sample(10 * MS, 10, false);
        // 4 in flight: 4 * 2 < 10, so no growth although nothing queues.
        vegas.sample(10 * MS, 4, false);
        assert_eq!(vegas.limit(), 10);
        vegas.sample(10 * MS, 5, false);
        assert_eq!(vegas.limit(), 16);
    }

    #[test]
    fn small_queue_grows_by_log10() {
        // Limit 100: log10 2, alpha 6, beta 12; rtt 10 -> 10.3 ms gives
        // queue ⌈100 × 0.029⌉ = 3, above the threshold 2, below alpha.
        let vegas = Vegas::new(VegasConfig::new().with_initial_limit(100));
        vegas.sample(10 * MS, 100, false);
        vegas.sample(Duration::from_micros(10_300), 100, false);
        assert_eq!(vegas.limit(), 102);
    }

    #[test]
    fn bounded_by_min_and_max() {
        let vegas = Vegas::new(
            VegasConfig::new()
                .with_initial_limit(3)
                .with_min_limit(2)
                .with_max_limit(5),
        );
        vegas.sample(10 * MS, 3, false);
        vegas.sample(10 * MS, 3, false);
        assert_eq!(vegas.limit(), 5, "3 + beta 6, capped at 5");
        for _ in 0..10 {
            vegas.sample(10 * MS, 1, true);
        }
        assert_eq!(vegas.limit(), 2);
    }

    #[test]
    fn a_probe_resets_rtt_noload_within_probe_multiplier_times_the_limit() {
        // Limit 10, multiplier 30, jitter in [0.5, 1): the probe comes
        // after 150 to 300 samples; until then the first, lowest latency
        // stays the latency without load.
        let vegas = Vegas::new(VegasConfig::new().with_initial_limit(10).with_max_limit(10));
        vegas.sample(10 * MS, 1, false);
        let mut probed_at = None;
        for n in 2..=300 {
            // Below half the limit in flight: the limit never moves.
            vegas.sample(40 * MS, 1, false);
            if vegas.rtt_noload() == Some(40 * MS) {
                probed_at = Some(n);
                break;
            }
            assert_eq!(vegas.rtt_noload(), Some(10 * MS));
        }
        let n = probed_at.expect("a probe within 300 samples");
        assert!((150..=300).contains(&n), "probed at sample {n}");
    }

    #[test]
    fn config_errors_name_every_field() {
        let err = VegasConfig::new()
            .with_min_limit(0)
            .with_initial_limit(2000)
            .with_smoothing(0.0)
            .with_probe_multiplier(0)
            .validate()
            .unwrap_err();
        let fields: Vec<_> = err.errors().map(|e| e.field().to_owned()).collect();
        assert_eq!(
            fields,
            [
                "min_limit",
                "initial_limit",
                "smoothing",
                "probe_multiplier"
            ]
        );
    }
}
