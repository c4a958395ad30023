use std::future::{Future, poll_fn};
use std::pin::{Pin, pin};
use std::task::Poll;
use std::time::Duration;

use resilience_rules::limits::MIN_HEDGE_DELAY;
use tokio::time::{Instant, sleep_until};

use super::{Attempts, Classify, DefaultRng, FromRuntimeError, GiveUp, NotKept, Policy, layer};
use crate::error::ConfigError;

/// The most attempts a hedged call may make: each is one more request to
/// the dependency, all of them in flight at once.
pub const MAX_HEDGED_ATTEMPTS: u32 = resilience_rules::limits::MAX_HEDGED_ATTEMPTS;

/// Hedged calls: when an attempt has not answered after `delay`, another
/// one starts beside it; the first success wins and the others are dropped.
///
/// A retry waits for a failure; a hedge does not: it bounds the tail of a
/// dependency whose answers are usually fast and sometimes very slow (a
/// replica stuck in a GC pause, a lost packet). It is for idempotent
/// calls only: two attempts are two requests, and both may be applied.
///
/// The rules, after Polly's hedging strategy and gRPC's `hedgingPolicy`
/// (gRFC A6):
///
/// - the first attempt starts at once; each `delay` without a success
///   starts one more, until `max` attempts were made in all (the first
///   included), as gRPC's `maxAttempts`;
/// - a success ends the call: the attempts still in flight are dropped,
///   which cancels them;
/// - a transient failure (see [`Classify`]) starts the next attempt at
///   once rather than after the rest of its delay, as gRPC's
///   non-fatal status codes do; `Retry-After` is not waited for;
/// - any other error is an answer: it ends the call, as a fatal status
///   does in gRPC;
/// - every attempt after the first withdraws from the policy's retry
///   [`Budget`](super::Budget), as gRPC's throttling counts hedges; with
///   the budget empty no more attempts start, and the call waits for those
///   in flight;
/// - the whole call is bounded by the policy's `max_elapsed` and the
///   caller's [`deadline`](crate::deadline): when either passes, the
///   attempts in flight are dropped and the caller gets
///   [`Error::MaxElapsedExceeded`](crate::Error::MaxElapsedExceeded) or [`Error::DeadlineExceeded`](crate::Error::DeadlineExceeded);
/// - when every attempt failed, the caller gets the last failure;
/// - like a retry chain, a hedged call that runs inside another chain's
///   attempt makes one attempt and leaves the retrying to the outer chain
///   ([`GiveUp::Nested`]), and one inside a transaction opened by
///   the transaction helper is refused.
///
/// The rules a hedged call shares with a retry chain are decided by the
/// same code for both.
///
/// Each attempt after the first is logged at DEBUG (target
/// `resilience::hedge`) and counted in
/// [`http_client_hedges_total{service,target}`](crate::telemetry::HEDGES_TOTAL)
/// (by [`Policy::hedge`], through a hook: the count is `telemetry`'s).
/// A breaker around the call counts one outcome: the hedged call's.
///
/// ```
/// use std::time::Duration;
/// use resilience::retry::{Hedge, Policy};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let hedge = Hedge::new("search", Duration::from_millis(50), 2)?;
/// let started = tokio::time::Instant::now();
/// let calls = std::cell::Cell::new(0);
/// let answer = Policy::http()
///     .hedge(hedge, || {
///         calls.set(calls.get() + 1);
///         // The first replica hangs for a second; the second answers in 10 ms.
///         let slow = calls.get() == 1;
///         async move {
///             let took = if slow { 1000 } else { 10 };
///             tokio::time::sleep(Duration::from_millis(took)).await;
///             Ok::<_, resilience::Error>("results")
///         }
///     })
///     .await?;
/// assert_eq!(answer, "results");
/// assert_eq!(started.elapsed(), Duration::from_millis(60));
/// # Ok(()) }
/// ```
///
/// A [`Hedge`] says how a call is hedged: its name (the `target` of its metrics), the delay
/// after which another attempt starts, and the most attempts in all.
///
/// ```
/// use std::time::Duration;
/// use resilience::retry::Hedge;
///
/// let hedge = Hedge::new("search", Duration::from_millis(50), 3)?;
/// assert_eq!((hedge.delay(), hedge.max()), (Duration::from_millis(50), 3));
/// let err = Hedge::new("search", Duration::from_millis(50), 1).unwrap_err();
/// assert_eq!((err.field(), err.value()), ("max", "1"));
/// # Ok::<(), resilience::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hedge {
    name: &'static str,
    delay: Duration,
    max: u32,
}

impl Hedge {
    /// Hedges after `delay` (at least 1 ms), up to `max` attempts in all
    /// (2 to [`MAX_HEDGED_ATTEMPTS`]).
    pub fn new(name: &'static str, delay: Duration, max: u32) -> Result<Self, ConfigError> {
        let subject = format!("hedge `{name}`");
        if delay < MIN_HEDGE_DELAY {
            return Err(ConfigError::new(
                subject,
                "delay",
                format!("{delay:?}"),
                format!(
                    "at least {MIN_HEDGE_DELAY:?}: a shorter delay sends every call twice at once"
                ),
            ));
        }
        if !(2..=MAX_HEDGED_ATTEMPTS).contains(&max) {
            return Err(ConfigError::new(
                subject,
                "max",
                max,
                format!(
                    "2 to {MAX_HEDGED_ATTEMPTS}: the attempts in all, the first included (1 would never hedge; each more is one more request in flight)"
                ),
            ));
        }
        Ok(Self { name, delay, max })
    }

    /// A hedge whose values were checked already: what a `#[hedge]` site
    /// builds, its values refused at compile time. Never public: it
    /// bypasses every rule of [`new`](Self::new).
    pub(crate) const fn new_unchecked(name: &'static str, delay: Duration, max: u32) -> Self {
        Self { name, delay, max }
    }

    /// The name given to [`new`](Self::new).
    pub const fn name(&self) -> &'static str {
        self.name
    }

    /// How long an attempt may go unanswered before the next one starts.
    pub const fn delay(&self) -> Duration {
        self.delay
    }

    /// The most attempts in all.
    pub const fn max(&self) -> u32 {
        self.max
    }
}

impl Policy {
    /// Runs `op` hedged by `hedge`, calling `on_hedge` for each attempt
    /// after the first: the core of [`Policy::hedge`], which is
    /// `telemetry`'s, since it counts each hedge in a metric.
    pub(crate) async fn hedge_with<F, Fut, T, E>(
        &self,
        hedge: Hedge,
        mut op: F,
        mut on_hedge: impl FnMut(),
    ) -> Result<T, E>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: Classify + FromRuntimeError,
    {
        // The rules of a retry chain, with the hedge's attempts: its
        // deposit, the caller's deadline and `max_elapsed`, the refusal
        // inside a transaction, the budget and the one retrying layer.
        //
        // Not the poll loop of `Retry` and the attributes (`turn.rs`):
        // that one has one attempt in flight, cut by its own timer, and
        // pauses by the backoff after a failure before starting the next.
        // A hedged call has several attempts in flight at once, under one
        // timer for the whole call; it starts the next attempt when the
        // hedge's delay passes with no answer, or at once after a
        // transient failure, never after a pause; and a failure ends
        // nothing while other attempts may still answer.
        let mut attempts: Attempts<DefaultRng, Policy, NotKept> =
            Attempts::with_rng(self.hedged(hedge.max), DefaultRng);
        let timer = match attempts.begin() {
            Ok(timer) => timer,
            Err(reason) => return Err(E::from_runtime(attempts.refused(reason))),
        };
        // The first attempt lives in this future, and is polled once before
        // any clock read, timer or allocation: a call answered at once
        // costs what a retry chain's does.
        let mut first = pin!(Some(op()));
        let mut first_event = match poll_first(first.as_mut()).await {
            Poll::Ready(Ok(value)) => return Ok(value),
            Poll::Ready(result) => {
                first.set(None);
                Some(Event::Done(result))
            }
            Poll::Pending => None,
        };
        let (end, cut) = timer.unwrap_or_else(|| attempts.pending());
        let start = attempts.started().unwrap_or_else(Instant::now);
        let mut others: Vec<Pin<Box<Fut>>> = Vec::new();
        let mut more = true;
        let mut last: Option<E> = None;
        let mut hedge_timer = pin!(sleep_until(start + hedge.delay));
        let mut end_timer = pin!(sleep_until(end));
        loop {
            let event = match first_event.take() {
                Some(event) => event,
                None => {
                    poll_fn(|cx| {
                        // A chain inside an attempt makes one attempt: the
                        // hedges are this call's only extra requests.
                        let _polling = layer::polling(&HEDGED);
                        if let Some(fut) = first.as_mut().as_pin_mut()
                            && let Poll::Ready(result) = fut.poll(cx)
                        {
                            first.set(None);
                            return Poll::Ready(Event::Done(result));
                        }
                        let mut i = 0;
                        while i < others.len() {
                            if let Poll::Ready(result) = others[i].as_mut().poll(cx) {
                                drop(others.swap_remove(i));
                                return Poll::Ready(Event::Done(result));
                            }
                            i += 1;
                        }
                        if end_timer.as_mut().poll(cx).is_ready() {
                            return Poll::Ready(Event::End);
                        }
                        if more && hedge_timer.as_mut().poll(cx).is_ready() {
                            return Poll::Ready(Event::Hedge);
                        }
                        Poll::Pending
                    })
                    .await
                }
            };
            match event {
                Event::Done(Ok(value)) => return Ok(value),
                Event::Done(Err(error)) if error.classify().is_retryable() => last = Some(error),
                Event::Done(Err(error)) => return Err(error),
                Event::End => {
                    first.set(None);
                    drop(others);
                    return Err(E::from_runtime(attempts.cut(cut).0));
                }
                Event::Hedge => {}
            }
            let in_flight = usize::from(first.is_some()) + others.len();
            if more {
                match attempts.hedge() {
                    Ok(()) => {
                        tracing::debug!(target: "resilience::hedge", name = hedge.name, attempt = attempts.attempt(), in_flight = in_flight + 1, "hedging: another attempt");
                        on_hedge();
                        others.push(Box::pin(op()));
                        hedge_timer.as_mut().reset(Instant::now() + hedge.delay);
                        continue;
                    }
                    Err(reason) => {
                        more = false;
                        match reason {
                            GiveUp::BudgetEmpty => {
                                tracing::debug!(target: "resilience::hedge", name = hedge.name, attempt = attempts.attempt() + 1, "no hedge: the retry budget is empty");
                            }
                            GiveUp::Nested => {
                                if let Some(outer) = layer::outer() {
                                    layer::warn_nested(outer, hedge.name);
                                }
                            }
                            _ => {}
                        }
                    }
                }
            }
            if in_flight == 0 {
                // Every attempt made failed, and no more may start.
                return Err(last.unwrap_or_else(|| E::from_runtime(attempts.cut(cut).0)));
            }
        }
    }
}

/// Polls the first attempt once, marked as a hedged call's.
fn poll_first<Fut: Future>(
    mut first: Pin<&mut Option<Fut>>,
) -> impl Future<Output = Poll<Fut::Output>> + '_ {
    poll_fn(move |cx| {
        let _polling = layer::polling(&HEDGED);
        Poll::Ready(match first.as_mut().as_pin_mut() {
            Some(fut) => fut.poll(cx),
            None => Poll::Pending,
        })
    })
}

/// What the attempts of a hedged call are polled under, for a chain
/// inside one.
static HEDGED: &str = "a hedged call";

enum Event<T, E> {
    Done(Result<T, E>),
    Hedge,
    End,
}
