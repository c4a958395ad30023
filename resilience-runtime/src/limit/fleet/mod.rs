//! A rate quota shared by the replicas of a service through Redis; see
//! [`FleetRateLimit`].

mod link;
mod script;
mod stock;
mod task;

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use link::Link;
use stock::{MIN_SPAN, Plan};

use super::report::Report;
use super::{Priority, Rate};
use crate::clock::duration_nanos;
use crate::error::{ConfigError, Overloaded, ShedBy};
use crate::telemetry::Labels;

/// At most [`Rate`] calls across every replica of a service, a burst at
/// once, shared through Redis (the `limit-redis` feature): a partner's
/// quota of 1,000 requests a second per account, kept by five replicas
/// together.
///
/// A call is admitted or refused in memory, like
/// [`RateLimit::try_acquire`](super::RateLimit::try_acquire), from
/// tokens this replica leased from Redis in the background; see
/// below for how leases are sized, the bound on any second (`rate +
/// burst`), and what happens while Redis is down (each
/// replica admits its share of the quota alone). Priorities keep a reserve
/// of each lease as [`RateLimit`](super::RateLimit) keeps one of its
/// burst; a refused call carries [when to come
/// back](Overloaded::retry_after).
///
/// The lease task starts with the first call on a tokio runtime; until
/// the first lease (less than one lease period) calls are refused.
///
/// # How it leases
///
/// Each replica leases tokens from one bucket kept in Redis and admits
/// calls from what it holds, in memory; a background task asks for the
/// next lease before the last one runs out. How much and when:
///
/// - **The bucket** is a GCRA at the quota's rate `Q` on Redis' own clock
///   (`TIME`, in a Lua script, so the replicas' clocks do not matter),
///   whose tolerance, the *bank*, lets it hold at most `K` tokens no one
///   has taken. A lease of `n` tokens takes at most what the bucket holds.
/// - **The lease period** `P` and **life** `E` are drawn from the burst
///   `B`, whose span is `D = B / Q`: a lease lives `E = 0.6 D`, a replica
///   asks for the next one `P = 0.55 D` after the last, and a request not
///   answered within `E − P = 0.05 D` counts as Redis being down, while
///   the last lease still has tokens to give. The bank is what is left of
///   the burst: `K = B − Q E` (`0.4 D` of quota).
/// - **A lease's size** is one lease period of the replica's recent rate,
///   plus a tenth: its demand, but at most its share of the quota (`Q ÷
///   replicas`) when its last lease came short (the fleet wants more than
///   the quota, and the first to lease must not take what the others
///   need), and otherwise at most 1.25 times what it admitted or its
///   share, whichever is larger, so a replica grows into a quota the
///   others leave unused within a few periods without draining the bank
///   in one lease. A lease's tokens are
///   spent at an even pace over the lease period (a quarter of them at
///   once at most), and void `E` after the request that brought them.
/// - **Replicas lease at a random phase** of the period: one started with
///   the others first only announces itself, then leases at a random
///   point of the period, its first lease capped at its share. A replica
///   that leased less than an even spacing (`P ÷ replicas`) after another
///   moves its next lease later by half the shortfall (at most `0.025 D`),
///   which spreads the phases within a few periods, so that no gap
///   between two leases outlasts the bank.
///
/// # The bound
///
/// Take any 1 s window `[a, a + 1 s]`. A call admitted in it was admitted
/// from a token granted by Redis after `a − E` (older tokens are void by
/// `a`: a lease's life runs from its request, which precedes Redis'
/// grant). The bucket grants at most `Q s + K` tokens in any span `s`
/// (its arrival time moves one interval per token and never runs more
/// than the bank ahead of Redis' clock), so the window admits at most
///
/// ```text
/// Q (1 s + E) + K = Q + Q E + (B − Q E) = Q + B
/// ```
///
/// — the quota plus its burst, as a local [`RateLimit`](super::RateLimit)
/// of the same rate and burst would.
///
/// # Why most of the quota is used
///
/// Tokens are lost in three ways. (1) The bucket overflows when no
/// replica leases for longer than the bank lasts (`K / Q = 0.4 D`):
/// with `N ≥ 2` replicas whose phases are spread, the gaps are near
/// `P ÷ N`, well under `0.4 D`. (2) A lease's tokens void at its end: a replica offered more
/// than its lease spends it all at its pace; one offered less asked for a
/// tenth over its demand. (3) A replica's first lease after an outage
/// asks for its share; the bank, restarted after two periods without a
/// lease, holds one share. Round trips: one a lease period per replica,
/// `N / P` a second; at `B = Q` (a burst of one second's quota), 9.1 a
/// second for five replicas, under 10 per 1,000 calls at a quota of
/// 1,000/s used at 91 % or more.
///
/// # Redis down or frozen
///
/// A lease request that fails or goes unanswered for `E − P` makes the
/// replica fall back to a local GCRA at its share, `Q ÷ replicas` (the
/// replicas that announced themselves within the last four periods, as
/// the last answer counted them), with a burst of `B ÷ replicas`, from the
/// moment its leases stop, and say so once at WARN
/// (`http_client_rate_limit_shared_fallback` is 1 meanwhile). It asks
/// again every period on a new connection and leases again at the first
/// answer. Never unlimited, never zero. A replica that never reached Redis
/// counts itself alone: its share is the whole quota.
///
/// The first lease after deciding alone counts the calls the replica
/// admitted alone in the lease period before it as taken from that
/// lease, up to the quarter a lease may give at once. A lease may give a
/// quarter at once because the lease before it ran out that much before
/// the period's end; the local GCRA paced calls evenly up to the answer
/// and left no such gap, so in the second Redis answers again each
/// replica would otherwise admit that quarter on top of its share, and
/// the fleet a tenth more than the quota.
///
/// # Example
///
/// ```no_run
/// use resilience::limit::{FleetRateLimit, Priority, Rate};
///
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let partner = FleetRateLimit::new("partner", Rate::per_second(1000), "redis://127.0.0.1:6379/")?;
/// match partner.try_acquire(Priority::Default) {
///     Ok(()) => { /* send the call */ }
///     Err(refused) => println!("come back in {:?}", refused.retry_after()),
/// }
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct FleetRateLimit {
    link: Arc<Link>,
    max_wait: Duration,
}

impl FleetRateLimit {
    /// A fleet limit named `name` (the `target` label of its metrics and
    /// part of its Redis keys) of `rate`, shared through the Redis at
    /// `url`, with a burst of one period's worth of calls.
    ///
    /// # Errors
    ///
    /// A rate that [does not validate](Rate::validate), a URL that is no
    /// Redis URL, a burst spanning less than 100 ms of the rate.
    pub fn new(name: &'static str, rate: Rate, url: &'static str) -> Result<Self, ConfigError> {
        Self::new_in(crate::telemetry::UNKNOWN_SERVICE, name, rate, url)
    }

    pub(crate) fn new_in(
        service: &'static str,
        name: &'static str,
        rate: Rate,
        url: &'static str,
    ) -> Result<Self, ConfigError> {
        let subject = || format!("rate limit `{name}`");
        rate.validate().map_err(|err| err.with_subject(subject()))?;
        if let Err(err) = redis::Client::open(url) {
            return Err(ConfigError::new(
                subject(),
                "shared",
                format!("{url:?}"),
                format!("not a Redis URL ({err}); write `redis://host:port/db`"),
            ));
        }
        Self::build(service, name, rate, rate.count(), url)
    }

    fn build(
        service: &'static str,
        name: &'static str,
        rate: Rate,
        burst: u32,
        url: &'static str,
    ) -> Result<Self, ConfigError> {
        super::rate::check_burst(name, burst)?;
        let plan = Plan::new(rate, burst);
        if plan.span() < MIN_SPAN {
            let least = duration_nanos(MIN_SPAN).div_ceil(plan.interval);
            return Err(ConfigError::new(
                format!("rate limit `{name}`"),
                "burst",
                burst,
                format!(
                    "a shared rate limit leases for 60 % of its burst's span; a burst under 100 ms of the rate ({:?} here) would lease too often; use a burst of at least {least}",
                    plan.span()
                ),
            ));
        }
        let labels = Labels::new(service, name);
        Ok(Self {
            link: Arc::new(Link::new(
                plan,
                url,
                labels,
                Report::new(labels, ShedBy::RateLimit),
            )),
            max_wait: Duration::ZERO,
        })
    }

    /// The same limit, admitting up to `burst` calls at once across the
    /// fleet; it sets the lease period (see [how it leases](Self#how-it-leases)).
    ///
    /// # Errors
    ///
    /// A burst of 0, or spanning less than 100 ms of the rate.
    pub fn with_burst(self, burst: u32) -> Result<Self, ConfigError> {
        let link = &self.link;
        let labels = link.report.labels();
        let limit = Self::build(
            labels.service(),
            labels.target(),
            link.plan.rate,
            burst,
            link.url,
        )?;
        Ok(limit.with_max_wait(self.max_wait))
    }

    /// The same limit, whose [`acquire`](Self::acquire) waits at most
    /// `max_wait` for a place in what this replica holds.
    #[must_use]
    pub fn with_max_wait(mut self, max_wait: Duration) -> Self {
        self.max_wait = max_wait;
        self
    }

    /// The limit's name.
    pub fn name(&self) -> &'static str {
        self.link.report.name()
    }

    /// The fleet's rate.
    pub fn rate(&self) -> Rate {
        self.link.plan.rate
    }

    /// The fleet's burst.
    pub fn burst(&self) -> u32 {
        self.link.plan.burst
    }

    /// The longest [`acquire`](Self::acquire) waits.
    pub fn max_wait(&self) -> Duration {
        self.max_wait
    }

    /// The Redis URL.
    pub fn url(&self) -> &'static str {
        self.link.url
    }

    /// Whether the replica leases from the fleet (Redis answered the last
    /// request), rather than admitting its share alone.
    pub fn is_leasing(&self) -> bool {
        self.link.leasing.load(Relaxed)
    }

    /// The replicas Redis counted at its last answer (1 before any).
    pub fn replicas(&self) -> u32 {
        self.link.replicas.load(Relaxed)
    }

    /// Lease requests sent to Redis so far (answered or not).
    pub fn round_trips(&self) -> u64 {
        self.link.round_trips.load(Relaxed)
    }

    /// The tokens of the last lease.
    pub fn last_lease(&self) -> u32 {
        self.link.last_lease.load(Relaxed)
    }

    /// Admits a call of `priority` now from what this replica holds, or
    /// refuses it with [`Overloaded`] and when to come back. Never waits,
    /// never reaches Redis.
    pub fn try_acquire(&self, priority: Priority) -> Result<(), Overloaded> {
        self.start();
        let now = self.link.clock.now();
        self.link.take(now, priority, 0)?;
        self.link.admitted_report();
        Ok(())
    }

    /// Admits a call of `priority`, waiting for its place in what this
    /// replica holds when that is at most [`max_wait`](Self::max_wait)
    /// away and before the caller's [deadline](crate::deadline); otherwise
    /// refuses it at once. Sheddable calls never wait.
    pub async fn acquire(&self, priority: Priority) -> Result<(), Overloaded> {
        self.start();
        let mut wait = if priority == Priority::Sheddable {
            Duration::ZERO
        } else {
            self.max_wait
        };
        if let Some(left) = crate::deadline::remaining() {
            wait = wait.min(left);
        }
        let now = self.link.clock.now();
        let at = self.link.take(now, priority, duration_nanos(wait))?;
        self.link.clock.wait(now, at, &self.link.report).await;
        Ok(())
    }

    fn start(&self) {
        if !self.link.running.load(Relaxed)
            && let Ok(handle) = tokio::runtime::Handle::try_current()
        {
            task::start(&self.link, &handle);
        }
    }
}

#[cfg(test)]
mod tests;
