//! The background task of a fleet limit: one lease every lease period,
//! at a random phase, and at once (at most four times a period) when a
//! call found no stock.
//!
//! A lease request that fails or takes longer than the plan's timeout
//! (shorter than what is left of the last lease) makes the replica decide
//! alone, once said at WARN; its connection is dropped and the next
//! request opens a new one, since a connection whose requests timed out
//! against a frozen Redis may stay stuck on them after it wakes up.

use std::future::{Future, poll_fn};
use std::pin::pin;
use std::sync::atomic::Ordering::*;
use std::sync::{Arc, Weak};
use std::task::Poll;
use std::time::Duration;

use redis::aio::ConnectionManager;
use tokio::runtime::Handle;
use tokio::time::{Instant, sleep_until, timeout};

use super::link::Link;
use super::script;

/// Starts the lease task of `link` on `handle`, unless one runs.
pub(super) fn start(link: &Arc<Link>, handle: &Handle) {
    if link.running.swap(true, AcqRel) {
        return;
    }
    handle.spawn(run(Running(Arc::downgrade(link))));
}

/// Held by the task; its drop (the task ends with its runtime, or its
/// limit was dropped) lets the next call start another.
struct Running(Weak<Link>);

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(link) = self.0.upgrade() {
            link.running.store(false, Release);
        }
    }
}

fn nanos(n: u64) -> Duration {
    Duration::from_nanos(n)
}

async fn run(guard: Running) {
    let mut connection: Option<ConnectionManager> = None;
    let mut warned = false;
    // The first round only announces this replica; the first lease
    // follows at a random phase of the lease period, so that replicas
    // started together do not lease together.
    let mut first = true;
    let mut fresh = true;
    // The last lease granted less than it asked for.
    let mut short = false;
    let mut last_asked = Instant::now();
    let Some(wake) = guard.0.upgrade().map(|link| Arc::clone(&link.wake)) else {
        return;
    };
    loop {
        let Some(link) = guard.0.upgrade() else {
            return;
        };
        let plan = link.plan;
        let asked_at = Instant::now();
        let asked = link.clock.now();
        let offered = link.offered.swap(0, AcqRel);
        let admitted = link.admitted.swap(0, AcqRel);
        let alone_before = link.with_stock(super::stock::Stock::requested);
        let elapsed = crate::clock::duration_nanos(asked_at - last_asked);
        last_asked = asked_at;
        let replicas = link.replicas.load(Relaxed);
        let ask = if first {
            0
        } else {
            plan.ask(elapsed, offered, admitted, replicas, short)
        };
        let mut invocation = script::LEASE.key(&link.prefix);
        invocation
            .arg(format!("{:.3}", plan.interval as f64 / 1000.0))
            .arg(plan.bank / 1000)
            .arg(ask)
            .arg(&link.id)
            .arg(plan.period.saturating_mul(4) / 1000)
            .arg(plan.period / 1000)
            .arg(u8::from(fresh))
            .arg(crate::clock::duration_nanos(plan.span()).saturating_mul(60) / 1_000_000)
            .arg(replicas);
        link.round_trip();
        let answer = timeout(nanos(plan.timeout), async {
            if connection.is_none() {
                connection = Some(
                    crate::redis_link::connect(link.url, crate::redis_link::manager_config())
                        .await?,
                );
            }
            match connection.as_mut() {
                Some(connection) => {
                    let reply: redis::RedisResult<(u32, u32, u64)> =
                        invocation.invoke_async(connection).await;
                    reply
                }
                None => unreachable!("connected above"),
            }
        })
        .await;
        let mut next = asked_at + nanos(plan.period);
        match answer {
            Ok(Ok((granted, replicas, since))) => {
                link.leased(granted, replicas, asked, alone_before);
                short = granted < ask;
                if !first {
                    fresh = false;
                }
                if warned {
                    tracing::info!(
                        target: "resilience",
                        service = link.report.labels().service(),
                        limiter = link.report.name(),
                        "Redis answers again: the fleet rate limit leases its quota again"
                    );
                    warned = false;
                }
                // Spread the phases: a lease that came less than an even
                // spacing (`P ÷ replicas`) after another replica's moves the
                // next one later by half the shortfall, at most half the
                // lease's spare life, so that no gap between two leases
                // outlasts what Redis banks.
                let even = plan.period / u64::from(replicas.max(1));
                let since = since.saturating_mul(1000);
                if !first && replicas > 1 && since < even {
                    next += nanos(((even - since) / 2).min(plan.timeout / 2));
                }
                if first {
                    let phase = crate::retry::thread_rng(rand::RngCore::next_u64) % plan.period;
                    next = asked_at + nanos(phase);
                    first = false;
                }
            }
            failed => {
                connection = None;
                fresh = true;
                link.alone();
                if !warned {
                    let error = match failed {
                        Ok(Err(err)) => err.to_string(),
                        _ => format!("no answer within {:?}", nanos(plan.timeout)),
                    };
                    tracing::warn!(
                        target: "resilience",
                        service = link.report.labels().service(),
                        limiter = link.report.name(),
                        share = plan.share_per_sec(link.replicas.load(Relaxed)),
                        error,
                        "Redis does not answer: the fleet rate limit admits this replica's share of the quota alone until it does"
                    );
                    warned = true;
                }
            }
        }
        link.with_stock(|stock| {
            stock.next_lease =
                link.clock.now() + crate::clock::duration_nanos(next - Instant::now().min(next));
        });
        // A call out of stock may bring the lease forward, to no sooner
        // than a quarter period after this one.
        let soonest = asked_at + nanos(plan.period / 4);
        drop(link);
        // Only a replica that asked for nothing (idle) is woken by a
        // call: one that asked is on its period already.
        let mut woken = pin!(wake.notified());
        if ask > 0 {
            sleep_until(next).await;
            continue;
        }
        let mut sleep = pin!(sleep_until(next));
        let was_woken = poll_fn(|cx| {
            if woken.as_mut().poll(cx).is_ready() {
                Poll::Ready(true)
            } else if sleep.as_mut().poll(cx).is_ready() {
                Poll::Ready(false)
            } else {
                Poll::Pending
            }
        })
        .await;
        if was_woken && !first {
            sleep_until(soonest.min(next)).await;
        }
    }
}
