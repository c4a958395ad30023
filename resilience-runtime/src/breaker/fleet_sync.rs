//! The background task of a shared breaker: one sync with the fleet every
//! sync interval, and at once after each local transition.
//!
//! A sync is one Lua script ([`script::SYNC`]): it adds the counts made
//! here since the last sync to the fleet's current bucket, reads the
//! fleet's window, trips the fleet on its totals, publishes an opening of
//! this replica, reports probe successes, takes probe tokens, and answers
//! with the fleet's state. The task then moves the local breaker to that
//! state (open for the cooldown the fleet has left, half-open, closed).
//!
//! When Redis does not answer (a refused connection, a 500 ms response
//! timeout), the breaker decides alone: the task says so once at WARN,
//! sets `circuit_breaker_shared_fallback` to 1, and tries again at the
//! next interval; counts made meanwhile are added at the first sync that
//! succeeds, unless they are older than the window.

use std::future::{Future, poll_fn};
use std::pin::pin;
use std::sync::{Arc, Weak};
use std::task::Poll;
use std::time::Duration;

use redis::aio::ConnectionManager;
use tokio::runtime::Handle;
use tokio::time::{Instant, sleep_until};

use super::Machine;
use super::config::BUCKETS;
use super::shared::{Link, script};
use super::state::{CLOSED, HALF_OPEN, OPEN, Probes, StateWord};
use super::sync::Ordering::*;
use crate::clock::duration_nanos;
use crate::striped::window::Counts;

/// How long the fleet's state outlives its last opening: a day.
const STATE_TTL: Duration = Duration::from_secs(24 * 3600);

/// Starts the sync task of `machine` on `handle`, unless one runs.
pub(in crate::breaker) fn start(machine: &Arc<Machine>, handle: &Handle) {
    let Some(link) = machine.shared().map(|link| &**link) else {
        return;
    };
    if link.syncing.swap(true, AcqRel) {
        return;
    }
    let guard = Syncing(Arc::downgrade(machine));
    // The counts so far, before the call that starts the task is counted.
    let engine = Engine::new(machine.window.totals());
    handle.spawn(run(guard, engine));
}

/// Held by the task; its drop (the task ends with its runtime, or its
/// breaker was dropped) lets the next call start another.
struct Syncing(Weak<Machine>);

impl Drop for Syncing {
    fn drop(&mut self) {
        if let Some(link) = self
            .0
            .upgrade()
            .as_deref()
            .and_then(|i| i.shared().map(|link| &**link))
        {
            link.syncing.store(false, Release);
        }
    }
}

async fn run(guard: Syncing, mut engine: Engine) {
    let Some(link) = guard
        .0
        .upgrade()
        .and_then(|machine| machine.shared().cloned())
    else {
        return;
    };
    loop {
        // Armed before the sync, so a transition during it wakes the next.
        let mut woken = pin!(link.wake.notified());
        woken.as_mut().enable();
        let Some(machine) = guard.0.upgrade() else {
            return;
        };
        let next = engine.round(&machine, &link).await;
        // Not kept while waiting: a dropped breaker ends its task.
        drop(machine);
        let mut sleep = pin!(sleep_until(next));
        poll_fn(|cx| {
            if woken.as_mut().poll(cx).is_ready() || sleep.as_mut().poll(cx).is_ready() {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
        .await;
    }
}

/// A grant of probe tokens by the fleet.
#[derive(Debug, Clone, Copy)]
struct Grant {
    /// The local half-open generation it is for.
    local: u32,
    /// When it was taken.
    at: Instant,
    /// How many tokens.
    taken: u32,
    /// Successes of its probes already reported.
    reported: u16,
    /// The unused tokens were given back.
    released: bool,
}

struct Engine {
    /// Names this replica's probe tokens.
    id: String,
    connection: Option<ConnectionManager>,
    /// Local totals already added to the fleet's window.
    sent: Counts,
    /// When Redis last answered (or the task started).
    answered: Instant,
    /// The fleet's opening the local state follows.
    fleet_gen: Option<i64>,
    /// The local generation of the last open state the fleet knows of.
    published: Option<u32>,
    grant: Option<Grant>,
    /// Said at WARN that the breaker decides alone.
    warned: bool,
}

/// The fleet's answer.
#[derive(Debug, Clone, Copy)]
struct Reply {
    counts: Counts,
    opening: i64,
    closed: bool,
    /// Milliseconds left of the fleet's cooldown; negative when not open.
    open_ms: i64,
    taken: u32,
}

impl Engine {
    fn new(sent: Counts) -> Engine {
        Engine {
            id: format!("{:016x}", crate::retry::thread_rng(rand::RngCore::next_u64)),
            connection: None,
            sent,
            answered: Instant::now(),
            fleet_gen: None,
            published: None,
            grant: None,
            warned: false,
        }
    }

    /// One sync; returns when the next one is due.
    async fn round(&mut self, machine: &Machine, link: &Link) -> Instant {
        let started = Instant::now();
        let interval = link.interval();
        let mut next = started + interval;
        let word = StateWord(machine.state.load(Acquire));
        let totals = machine.window.totals();
        let window =
            Duration::from_nanos(machine.setup.bucket_width.saturating_mul(BUCKETS as u64));
        if started.saturating_duration_since(self.answered) > window {
            // Counts older than the window are no news to the fleet.
            self.sent = totals;
        }
        let delta = Counts {
            calls: totals.calls.wrapping_sub(self.sent.calls),
            failures: totals.failures.wrapping_sub(self.sent.failures),
            slow: totals.slow.wrapping_sub(self.sent.slow),
        };
        let forced = word.forced();
        let opened = !forced && word.is_open() && self.published != Some(word.generation());
        let (ok, ok_gen, mut release) = self.probe_report(machine, word);
        if let (true, Some(grant)) = (release, self.grant) {
            // No more probes here from now on; unless one just started.
            let probes = Probes(machine.probes.load(Acquire));
            link.set_grant(grant.local, u32::from(probes.successes()));
            let probes = Probes(machine.probes.load(Acquire));
            if probes.generation() == grant.local && probes.in_flight() > 0 {
                link.set_grant(grant.local, grant.taken);
                release = false;
            }
        }
        let wants = !forced
            && word.kind() != CLOSED
            && self.grant.is_none()
            && (opened || self.published.is_some_and(|g| follows(word, g)));
        let config = &machine.setup.config;
        let mut invocation = script::SYNC.key(&link.prefix);
        invocation
            .arg(delta.calls)
            .arg(delta.failures)
            .arg(delta.slow)
            .arg((machine.setup.bucket_width / 1_000_000).max(1))
            .arg(BUCKETS)
            .arg(config.min_requests())
            .arg(config.failure_ratio())
            .arg(config.slow_call().map_or(2.0, |rule| rule.ratio))
            .arg(millis(config.cooldown()))
            .arg(config.half_open())
            .arg(millis(config.probe_timeout() + 2 * interval))
            .arg(&self.id)
            .arg(u8::from(opened))
            .arg(u8::from(wants))
            .arg(ok)
            .arg(ok_gen)
            .arg(u8::from(release))
            .arg(millis(STATE_TTL));
        let reply = match self.connect(link).await {
            Ok(connection) => {
                let answer: redis::RedisResult<(u64, u64, u64, i64, i64, i64, u32)> =
                    invocation.invoke_async(connection).await;
                answer
            }
            Err(err) => Err(err),
        };
        let reply = match reply {
            Ok((calls, failures, slow, opening, closed, open_ms, taken)) => Reply {
                counts: Counts {
                    calls,
                    failures,
                    slow,
                },
                opening,
                closed: closed != 0,
                open_ms,
                taken,
            },
            Err(err) => {
                self.alone(machine, link, &err);
                return next;
            }
        };
        tracing::debug!(
            target: "resilience",
            breaker = machine.setup.labels.target(),
            calls = reply.counts.calls,
            failures = reply.counts.failures,
            slow = reply.counts.slow,
            opening = reply.opening,
            closed = reply.closed,
            open_ms = reply.open_ms,
            tokens = reply.taken,
            "synced with the fleet"
        );
        self.sent = totals;
        self.answered = Instant::now();
        if release && let Some(grant) = &mut self.grant {
            grant.released = true;
        }
        if let Some(grant) = &mut self.grant {
            grant.reported = grant.reported.saturating_add(ok as u16);
        }
        if opened {
            self.published = Some(word.generation());
        }
        self.follow(machine, link, word, reply);
        if !link.joined.swap(true, AcqRel) {
            crate::breaker::report::breaker_shared_fallback(machine.setup.labels, false);
            if self.warned {
                tracing::warn!(
                    target: "resilience",
                    service = machine.setup.labels.service(),
                    breaker = machine.setup.labels.target(),
                    "Redis answers again: the shared circuit breaker follows its fleet again"
                );
                self.warned = false;
            }
        }
        // Soon after the fleet's cooldown ends, to take probe tokens.
        if reply.open_ms > 0 && !reply.closed {
            next = next.min(Instant::now() + Duration::from_millis(reply.open_ms as u64 + 1));
        }
        next
    }

    /// Probe successes to report, for which opening, and whether to give
    /// the unused tokens back (none in flight a probe timeout after they
    /// were taken: this replica has no traffic to probe with).
    fn probe_report(&self, machine: &Machine, word: StateWord) -> (u32, i64, bool) {
        let (Some(grant), Some(opening)) = (self.grant, self.fleet_gen) else {
            return (0, self.fleet_gen.unwrap_or(0), false);
        };
        let probes = Probes(machine.probes.load(Acquire));
        let successes = if probes.generation() == grant.local {
            probes.successes()
        } else {
            0
        };
        let ok = u32::from(successes.saturating_sub(grant.reported));
        let idle = probes.generation() != grant.local || probes.in_flight() == 0;
        let release = !grant.released
            && idle
            && word.is_half_open()
            && word.generation() == grant.local
            && grant.at.elapsed() >= machine.setup.config.probe_timeout();
        (ok, opening, release)
    }

    async fn connect(&mut self, link: &Link) -> redis::RedisResult<&mut ConnectionManager> {
        if self.connection.is_none() {
            let connection =
                crate::redis_link::connect(link.sharing.url(), crate::redis_link::manager_config())
                    .await?;
            self.connection = Some(connection);
        }
        Ok(self
            .connection
            .as_mut()
            .unwrap_or_else(|| unreachable!("connected above")))
    }

    /// Redis did not answer: the breaker decides alone until it does.
    fn alone(&mut self, machine: &Machine, link: &Link, err: &redis::RedisError) {
        let was_joined = link.joined.swap(false, AcqRel);
        if !self.warned {
            tracing::warn!(
                target: "resilience",
                service = machine.setup.labels.service(),
                breaker = machine.setup.labels.target(),
                error = %err,
                "Redis does not answer: the shared circuit breaker decides alone until it does"
            );
            self.warned = true;
        }
        if was_joined {
            crate::breaker::report::breaker_shared_fallback(machine.setup.labels, true);
        }
    }

    /// Moves the local breaker, last seen as `word`, to the fleet's state.
    /// A transition from `word` fails when the breaker moved meanwhile;
    /// the next sync looks again.
    fn follow(&mut self, machine: &Machine, link: &Link, word: StateWord, reply: Reply) {
        let new_episode = self.fleet_gen != Some(reply.opening);
        if new_episode {
            self.fleet_gen = Some(reply.opening);
            self.grant = None;
        }
        if word.forced() {
            return;
        }
        if reply.closed {
            if word.kind() != CLOSED {
                machine.follow(word, CLOSED, None);
            }
            self.published = None;
            self.grant = None;
            return;
        }
        let ours = self.published.is_some_and(|g| follows(word, g));
        if reply.open_ms > 0 {
            // Open: for the cooldown the fleet has left.
            let left = duration_nanos(Duration::from_millis(reply.open_ms as u64));
            match word.kind() {
                OPEN => {
                    machine.follow(word, OPEN, Some(left));
                    self.published = Some(word.generation());
                }
                // Half-open a few milliseconds before the fleet's cooldown
                // ends (the clocks differ): the next sync takes the tokens.
                HALF_OPEN if ours && !new_episode => {}
                _ => {
                    if machine.follow(word, OPEN, Some(left)) {
                        self.published = Some(word.generation().wrapping_add(1));
                    }
                }
            }
            return;
        }
        // Half-open fleet-wide.
        let current = if word.is_half_open() {
            if !ours {
                self.published = Some(word.generation().wrapping_sub(1));
            }
            word
        } else {
            if !machine.follow(word, HALF_OPEN, None) {
                return;
            }
            self.published = Some(word.generation());
            StateWord(machine.state.load(Acquire))
        };
        if reply.taken > 0 && current.is_half_open() {
            link.set_grant(current.generation(), reply.taken);
            self.grant = Some(Grant {
                local: current.generation(),
                at: Instant::now(),
                taken: reply.taken,
                reported: 0,
                released: false,
            });
        }
    }
}

/// `word` is the open state of local generation `open`, or the half-open
/// state that followed it.
fn follows(word: StateWord, open: u32) -> bool {
    (word.is_open() && word.generation() == open)
        || (word.is_half_open() && word.generation() == open.wrapping_add(1))
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis())
        .unwrap_or(u64::MAX)
        .max(1)
}
