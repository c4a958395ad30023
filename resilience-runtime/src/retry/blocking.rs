//! The retry executor for blocking code: a plain fn called in a loop on the
//! caller's thread, pausing with [`std::thread::sleep`]. No runtime needed.

use std::fmt;
use std::time::Duration;

use rand::RngCore;

use std::ops::ControlFlow;

use super::attempts::{Attempts, NotKept};
use super::executor::{ByClassify, Classifier, Hooks, NoNotify, Notify};
use super::{DefaultRng, Event};
use super::{FromRuntimeError, Policy, Verdict};

/// Pauses a blocking chain between attempts: [`ThreadSleep`] by default; a
/// closure `FnMut(Duration)` replaces it, e.g. to record the pauses in a
/// test instead of sleeping.
pub trait Sleeper {
    /// Blocks the calling thread for `delay`.
    fn sleep(&mut self, delay: Duration);
}

/// The default [`Sleeper`]: [`std::thread::sleep`].
#[derive(Debug, Clone, Copy, Default)]
pub struct ThreadSleep;

impl Sleeper for ThreadSleep {
    fn sleep(&mut self, delay: Duration) {
        std::thread::sleep(delay);
    }
}

impl<F: FnMut(Duration)> Sleeper for F {
    fn sleep(&mut self, delay: Duration) {
        self(delay)
    }
}

/// A retry chain around a blocking operation, built by
/// [`Policy::retry_blocking`]; run it with [`call`](Self::call).
///
/// The same rules as [`Retry`](super::Retry), decided by the same code:
/// the policy's attempts, backoff and jitter, `Retry-After`,
/// its `max_elapsed`, the caller's [`deadline`](crate::deadline), its retry
/// [`Budget`](super::Budget), the [`Classify`](super::Classify) verdicts
/// and a chain nested in another's attempt stopping at once. What differs:
///
/// - an attempt in flight cannot be cut, so the policy's attempt timeout
///   does not apply, and the elapsed time and the deadline are looked at
///   when an attempt fails: no pause that would cross either is made;
/// - `max_elapsed` bounds the retrying, counted from the chain's first
///   clock read: when its first attempt fails, or before that attempt
///   when the caller's deadline is in scope (the deadline is checked
///   then). No pause is made that would end more than `max_elapsed` after
///   it. A first attempt's own time is bounded by the caller's deadline,
///   not by `max_elapsed`: counting it would cost every call that succeeds
///   a clock read, which is most of what the chain costs (BENCHMARKS.md,
///   "Retry executor"). `Retry` does the same with the first poll of an
///   attempt, whose time counts from the attempt's first `Pending` on.
///
/// ```
/// use resilience::retry::{HttpStatus, Policy};
/// use std::time::Duration;
///
/// let mut statuses = [503, 503, 200].into_iter();
/// let mut pauses = Vec::new();
/// let status = Policy::http()
///     .retry_blocking(|| match statuses.next() {
///         Some(200) => Ok(200),
///         Some(status) => Err(Failed(HttpStatus(status))),
///         None => unreachable!(),
///     })
///     // The default sleeps the thread; this test records the pauses.
///     .sleep(|delay: Duration| pauses.push(delay))
///     .call();
/// assert_eq!(status.unwrap(), 200);
/// assert_eq!(pauses.len(), 2);
/// assert!(pauses[0] >= Duration::from_millis(75) && pauses[0] <= Duration::from_millis(125));
/// # #[derive(Debug)] struct Failed(HttpStatus);
/// # impl resilience::retry::Classify for Failed {
/// #     fn classify(&self) -> resilience::retry::Verdict { self.0.classify() }
/// # }
/// # impl From<resilience::Error> for Failed {
/// #     fn from(_: resilience::Error) -> Self { Failed(HttpStatus(504)) }
/// # }
/// ```
#[must_use = "a blocking retry chain does nothing until `call`ed"]
pub struct BlockingRetry<F, N = NoNotify, W = ByClassify, Z = ThreadSleep, R = DefaultRng> {
    attempts: Attempts<R, Policy, NotKept>,
    op: F,
    notify: N,
    when: W,
    sleep: Z,
}

impl Policy {
    /// Runs the blocking `op` under this policy, on the calling thread; see
    /// [`BlockingRetry`]. `op` is called once per attempt.
    pub fn retry_blocking<F, T, E>(self, op: F) -> BlockingRetry<F>
    where
        F: FnMut() -> Result<T, E>,
    {
        BlockingRetry {
            attempts: Attempts::with_rng(self, DefaultRng),
            op,
            notify: NoNotify,
            when: ByClassify,
            sleep: ThreadSleep,
        }
    }
}

impl<F, T, E, N, W, Z, R> BlockingRetry<F, N, W, Z, R>
where
    F: FnMut() -> Result<T, E>,
{
    /// Calls `notify` with every attempt's outcome (see [`Event`]).
    pub fn notify<N2>(self, notify: N2) -> BlockingRetry<F, N2, W, Z, R>
    where
        N2: FnMut(&Event<'_, E>),
    {
        self.notify_with(notify)
    }

    /// Like [`notify`](Self::notify), for any [`Notify`] implementation.
    pub fn notify_with<N2: Notify<E>>(self, notify: N2) -> BlockingRetry<F, N2, W, Z, R> {
        let BlockingRetry {
            attempts,
            op,
            when,
            sleep,
            ..
        } = self;
        BlockingRetry {
            attempts,
            op,
            notify,
            when,
            sleep,
        }
    }

    /// Classifies errors with `when` instead of their [`Classify`](super::Classify)
    /// impl; `when` returns a [`Verdict`], or a `bool` where `true` means retry.
    pub fn when<W2, V>(self, when: W2) -> BlockingRetry<F, N, W2, Z, R>
    where
        W2: FnMut(&E) -> V,
        V: Into<Verdict>,
    {
        let BlockingRetry {
            attempts,
            op,
            notify,
            sleep,
            ..
        } = self;
        BlockingRetry {
            attempts,
            op,
            notify,
            when,
            sleep,
        }
    }

    /// Pauses with `sleep` instead of [`std::thread::sleep`].
    pub fn sleep<Z2: Sleeper>(self, sleep: Z2) -> BlockingRetry<F, N, W, Z2, R> {
        let BlockingRetry {
            attempts,
            op,
            notify,
            when,
            ..
        } = self;
        BlockingRetry {
            attempts,
            op,
            notify,
            when,
            sleep,
        }
    }

    /// Draws jitter from `rng`: a seeded generator makes a schedule
    /// reproducible in tests. Never share one seed between processes in
    /// production: identical jitter is no jitter.
    pub fn with_rng<R2: RngCore>(self, rng: R2) -> BlockingRetry<F, N, W, Z, R2> {
        let BlockingRetry {
            attempts,
            op,
            notify,
            when,
            sleep,
        } = self;
        BlockingRetry {
            attempts: Attempts::with_rng(*attempts.policy(), rng),
            op,
            notify,
            when,
            sleep,
        }
    }

    /// Runs the chain to its end: the first success, or the error it stops
    /// on (the last attempt's, or `E::from(Error::DeadlineExceeded)` when
    /// the caller's deadline passed).
    pub fn call(mut self) -> Result<T, E>
    where
        E: FromRuntimeError,
        N: Notify<E>,
        W: Classifier<E>,
        Z: Sleeper,
        R: RngCore,
    {
        let mut hooks = Hooks {
            when: &mut self.when,
            notify: &mut self.notify,
        };
        loop {
            if let Err(reason) = self.attempts.begin() {
                return Err(self.attempts.on_refused(reason, &mut hooks));
            }
            let result = {
                let _polling = super::layer::polling(&super::layer::UNNAMED);
                (self.op)()
            };
            let error = match result {
                Ok(value) => {
                    let attempt = self.attempts.attempt();
                    hooks.notify.notify(&Event::Success { attempt });
                    return Ok(value);
                }
                Err(error) => error,
            };
            match self.attempts.on_error(error, &mut hooks) {
                ControlFlow::Continue(pause) => self.sleep.sleep(pause.delay),
                ControlFlow::Break(error) => return Err(error),
            }
        }
    }

    /// The policy this chain runs under.
    pub fn policy(&self) -> &Policy {
        self.attempts.policy()
    }
}

impl<F, N, W, Z, R> fmt::Debug for BlockingRetry<F, N, W, Z, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BlockingRetry")
            .field("policy", self.attempts.policy())
            .field("attempt", &self.attempts.attempt())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::time::Duration;

    use rand::SeedableRng;
    use rand::rngs::StdRng;

    use super::*;
    use crate::error::Error;
    use crate::retry::GiveUp;
    use crate::retry::{Budget, BudgetConfig, Classify, HttpStatus};

    #[derive(Debug, PartialEq)]
    enum TestError {
        Status(u16),
        Runtime(String),
    }

    impl Classify for TestError {
        fn classify(&self) -> Verdict {
            match self {
                TestError::Status(code) => HttpStatus(*code).classify(),
                TestError::Runtime(_) => Verdict::Permanent,
            }
        }
    }

    impl From<Error> for TestError {
        fn from(err: Error) -> Self {
            TestError::Runtime(err.to_string())
        }
    }

    #[test]
    fn it_retries_transient_errors_with_the_policys_backoff_and_stops_after_max() {
        let pauses = RefCell::new(Vec::<Duration>::new());
        let mut calls = 0;
        let policy = Policy::builder()
            .with_max_elapsed(Duration::from_secs(3600))
            .build()
            .unwrap();
        let mut events = Vec::new();
        let result: Result<(), _> = policy
            .retry_blocking(|| {
                calls += 1;
                Err(TestError::Status(503))
            })
            .sleep(|delay| pauses.borrow_mut().push(delay))
            .with_rng(StdRng::seed_from_u64(7))
            .notify(|event: &Event<'_, TestError>| events.push(format!("{event:?}")))
            .call();
        assert_eq!(result, Err(TestError::Status(503)));
        assert_eq!(calls, 3, "Policy::http: 3 attempts");
        let pauses = pauses.into_inner();
        assert_eq!(pauses.len(), 2);
        // 100 ms then 200 ms, each ±25 %.
        assert!((75..=125).contains(&pauses[0].as_millis()), "{pauses:?}");
        assert!((150..=250).contains(&pauses[1].as_millis()), "{pauses:?}");
        assert_eq!(events.len(), 3);
        assert!(events[2].contains("Exhausted"), "{events:?}");
    }

    #[test]
    fn a_permanent_error_is_not_retried_and_a_success_ends_the_chain() {
        let pauses = RefCell::new(Vec::<Duration>::new());
        let mut calls = 0;
        let result: Result<(), _> = Policy::http()
            .retry_blocking(|| {
                calls += 1;
                Err(TestError::Status(404))
            })
            .sleep(|delay| pauses.borrow_mut().push(delay))
            .call();
        assert_eq!((result, calls), (Err(TestError::Status(404)), 1));
        let mut statuses = [502, 200].into_iter();
        let result = Policy::http()
            .retry_blocking(|| match statuses.next() {
                Some(200) => Ok(200),
                Some(status) => Err(TestError::Status(status)),
                None => unreachable!(),
            })
            .sleep(|delay| pauses.borrow_mut().push(delay))
            .call();
        assert_eq!(result, Ok(200));
        assert_eq!(pauses.into_inner().len(), 1);
    }

    #[test]
    fn no_pause_crosses_the_budget_and_retry_after_is_honoured_within_it() {
        let pauses = RefCell::new(Vec::<Duration>::new());
        let policy = Policy::builder()
            .with_max_elapsed(Duration::from_secs(2))
            .build()
            .unwrap();
        let mut calls = 0;
        let result: Result<(), _> = policy
            .retry_blocking(|| {
                calls += 1;
                Err(TestError::Status(503))
            })
            .when(|_: &TestError| Verdict::RetryAfter(Duration::from_secs(1)))
            .sleep(|delay| pauses.borrow_mut().push(delay))
            .call();
        assert_eq!(result, Err(TestError::Status(503)));
        assert_eq!(
            pauses.into_inner(),
            [Duration::from_secs(1), Duration::from_secs(1)]
        );
        assert_eq!(calls, 3);
        // A 3 s Retry-After would cross the 2 s budget: no pause at all.
        let pauses = RefCell::new(Vec::<Duration>::new());
        let result: Result<(), _> = policy
            .retry_blocking(|| Err(TestError::Status(503)))
            .when(|_: &TestError| Verdict::RetryAfter(Duration::from_secs(3)))
            .sleep(|delay| pauses.borrow_mut().push(delay))
            .call();
        assert_eq!(result, Err(TestError::Status(503)));
        assert!(pauses.into_inner().is_empty());
    }

    /// A first attempt that fails after `took`, then one that succeeds: the
    /// result and the calls made.
    fn slow_first_attempt(policy: Policy, took: Duration) -> (Result<u16, TestError>, u32) {
        let mut calls = 0;
        let result = policy
            .retry_blocking(|| {
                calls += 1;
                if calls == 1 {
                    std::thread::sleep(took);
                    return Err(TestError::Status(503));
                }
                Ok(200)
            })
            .sleep(|_| ())
            .call();
        (result, calls)
    }

    #[test]
    fn max_elapsed_counts_from_the_first_failure_or_from_the_start_under_a_deadline() {
        // 100 ms ± 25 % before the second attempt: within 150 ms.
        let policy = Policy::builder()
            .with_max_elapsed(Duration::from_millis(150))
            .build()
            .unwrap();
        use std::future::Future as _;
        let took = Duration::from_millis(160);
        // No clock is read before the first attempt: its 160 ms are not
        // counted, the retry is made.
        assert_eq!(slow_first_attempt(policy, took), (Ok(200), 2));
        // Under a deadline the clock is read before the first attempt, to
        // check the deadline: its 160 ms count, no pause fits any more.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        let mut scoped = std::pin::pin!(crate::deadline::with_deadline(deadline, async {
            slow_first_attempt(policy, took)
        }));
        let polled = scoped
            .as_mut()
            .poll(&mut std::task::Context::from_waker(std::task::Waker::noop()));
        assert_eq!(
            polled,
            std::task::Poll::Ready((Err(TestError::Status(503)), 1))
        );
    }

    #[test]
    fn an_empty_retry_budget_stops_the_chain_with_its_attempts_error() {
        let budget: &'static Budget = Box::leak(Box::new(
            BudgetConfig::new()
                .with_ratio(0.0)
                .with_min_per_second(1)
                .build()
                .unwrap(),
        ));
        while budget.withdraw() {}
        let policy = Policy::http().with_budget(budget);
        let mut calls = 0;
        let mut reasons = Vec::new();
        let result: Result<(), _> = policy
            .retry_blocking(|| {
                calls += 1;
                Err(TestError::Status(503))
            })
            .sleep(|_| panic!("no pause: the budget is empty"))
            .notify(|event: &Event<'_, TestError>| {
                if let Event::GaveUp { reason, .. } = event {
                    reasons.push(*reason);
                }
            })
            .call();
        assert_eq!((result, calls), (Err(TestError::Status(503)), 1));
        assert_eq!(reasons, [GiveUp::BudgetEmpty]);
    }

    #[test]
    fn a_blocking_chain_inside_another_chains_attempt_stops_at_once() {
        let mut inner_calls = 0;
        let pauses = RefCell::new(Vec::<Duration>::new());
        let outer: Result<(), _> = Policy::http()
            .retry_blocking(|| {
                Policy::http()
                    .retry_blocking(|| {
                        inner_calls += 1;
                        Err(TestError::Status(503))
                    })
                    .sleep(|_| panic!("the inner chain does not pause"))
                    .call()
            })
            .sleep(|delay| pauses.borrow_mut().push(delay))
            .call();
        assert_eq!(outer, Err(TestError::Status(503)));
        assert_eq!(inner_calls, 3, "one inner attempt per outer attempt");
        assert_eq!(pauses.into_inner().len(), 2);
    }
}
