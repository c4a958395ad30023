//! The rules of one retry chain, for code that drives its own attempts.

use std::borrow::Borrow;
use std::fmt;
use std::mem::ManuallyDrop;
use std::ops::ControlFlow;
use std::time::Duration;

use rand::RngCore;
use tokio::time::Instant;

use super::{DefaultRng, Event, FromRuntimeError, GiveUp, Policy, Verdict};
use crate::deadline;
use crate::error::{Cause, Error};

/// What cuts an attempt in flight short.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub(crate) enum CutBy {
    /// The policy's per-attempt timeout: the attempt failed with
    /// [`Error::AttemptTimeout`], a transient error like any other.
    AttemptTimeout(Duration),
    /// The caller's deadline: the chain stops with [`Error::DeadlineExceeded`].
    Deadline,
    /// The chain's time limit, its policy's `max_elapsed`: the chain stops
    /// with [`Error::MaxElapsedExceeded`].
    MaxElapsed,
}

/// What comes after a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Next {
    /// Pause for `delay`, until `until`, then start the next attempt.
    Retry {
        /// The pause.
        delay: Duration,
        /// When the pause ends.
        until: Instant,
    },
    /// Stop. With [`GiveUp::Deadline`] the caller gets
    /// [`Error::DeadlineExceeded`]; otherwise the attempt's own error.
    GiveUp(GiveUp),
}

/// The bookkeeping of one retry chain — attempts made, time spent, jitter
/// drawn — and the rules that decide what comes next, those of the guide's
/// [retry](crate::guide#retry) and
/// [deadlines](crate::guide#deadlines-and-budgets) sections.
///
/// Every loop of the library is built on it: [`Retry`](super::Retry), the
/// [blocking executor](super::BlockingRetry), the code of the `#[retry]`
/// macro (which runs the fn body inline in a loop) and
/// [hedged calls](super::Hedge): a rule fixed here is fixed in all of
/// them. A chain drives it by calling [`begin`](Self::begin) before each
/// attempt, [`pending`](Self::pending) when an attempt without a timer is
/// first pending, and, with its [`Driver`], [`on_cut`](Self::on_cut) when
/// a timer fires and [`on_error`](Self::on_error) when an attempt fails;
/// or the bare decisions, [`cut`](Self::cut) and [`failed`](Self::failed).
/// The async chains, [`Retry`](super::Retry) and the `#[retry]` code, do
/// so through one poll loop, [`Turn`](super::turn::Turn).
///
/// A first attempt without a deadline or an attempt timeout reads no clock
/// unless it is pending, so a call that succeeds at once costs no clock
/// read, no timer and no random number.
///
/// The chain holds its policy by value or, for a policy that outlives it
/// such as one resolved once into a `static`, by reference, which saves
/// copying it for every call ([`with_rng`](Self::with_rng) takes either).
#[derive(Debug)]
pub(crate) struct Attempts<R = DefaultRng, P = Policy, S = Kept> {
    policy: P,
    start: Option<Instant>,
    previous_delay: Duration,
    attempt: u32,
    rng: R,
    /// The last failed attempt's error, kept for the runtime error that may
    /// end the chain later.
    last: S,
}

/// Where a chain keeps its last failed attempt's error, for the runtime
/// error that may end it later (`Attempts::keep`): [`Kept`] keeps it,
/// [`NotKept`] is the slot of a chain that keeps nothing, and costs
/// nothing.
pub trait ErrorSlot: Default + fmt::Debug {
    /// The kept error, leaving the slot empty.
    fn take(&mut self) -> Option<Cause>;
    /// Keeps `cause` in place of what was kept.
    fn set(&mut self, cause: Option<Cause>);
}

/// A slot that keeps the last failed attempt's error.
///
/// Dropped by hand, as `CallScope` drops its span: every protected fn's
/// future holds one, and a slot the compiler drops itself made that
/// future's drop too big to inline into its caller, a cost on the
/// success path, where the slot is always empty. Here the drop is one
/// inline test.
#[derive(Debug, Default)]
pub struct Kept(ManuallyDrop<Option<Cause>>);

impl ErrorSlot for Kept {
    #[inline(always)]
    fn take(&mut self) -> Option<Cause> {
        // What is left is a `None`, which has nothing to drop.
        self.0.take()
    }

    #[inline(always)]
    fn set(&mut self, cause: Option<Cause>) {
        if self.0.is_some() {
            release(self.0.take());
        }
        *self.0 = cause;
    }
}

impl Drop for Kept {
    #[inline(always)]
    fn drop(&mut self) {
        if self.0.is_some() {
            release(self.0.take());
        }
    }
}

// `extern "C"` so that it cannot unwind (a panic in an error's drop
// aborts): a call that may unwind gives every future holding a slot a
// landing pad, and the drop of those futures stopped being inlined.
#[cold]
#[inline(never)]
#[allow(improper_ctypes_definitions)]
extern "C" fn release(cause: Option<Cause>) {
    drop(cause);
}

/// The slot of a chain that keeps no error: a [`Policy::retry`] future
/// until [`keep_last_error`](super::Retry::keep_last_error).
#[derive(Debug, Default, Clone, Copy)]
pub struct NotKept;

impl ErrorSlot for NotKept {
    #[inline(always)]
    fn take(&mut self) -> Option<Cause> {
        None
    }

    #[inline(always)]
    fn set(&mut self, cause: Option<Cause>) {
        drop(cause);
    }
}

impl<R, P: Borrow<Policy>, S: ErrorSlot> Attempts<R, P, S> {
    /// A chain under `policy` (a [`Policy`] or a reference to one) drawing
    /// jitter from `rng`.
    #[inline(always)]
    pub(crate) fn with_rng(policy: P, rng: R) -> Self {
        Self {
            policy,
            attempt: 0,
            start: None,
            previous_delay: Duration::ZERO,
            rng,
            last: S::default(),
        }
    }

    /// The policy in force.
    #[inline]
    pub(crate) fn policy(&self) -> &Policy {
        self.policy.borrow()
    }

    /// The same chain, not started yet, with another slot for its last
    /// error.
    #[inline(always)]
    pub(crate) fn keeping<S2: ErrorSlot>(self) -> Attempts<R, P, S2> {
        Attempts {
            policy: self.policy,
            start: self.start,
            previous_delay: self.previous_delay,
            attempt: self.attempt,
            rng: self.rng,
            last: S2::default(),
        }
    }

    /// What the policy is borrowed from: the `P` the chain was built with.
    #[inline(always)]
    pub(crate) fn policy_source(&self) -> &P {
        &self.policy
    }

    /// Attempts started so far; the current one while it runs.
    #[inline]
    pub(crate) fn attempt(&self) -> u32 {
        self.attempt
    }

    /// When the chain started, once a clock was read.
    #[inline]
    pub(crate) fn started(&self) -> Option<Instant> {
        self.start
    }

    /// Starts the next attempt and says which timer, if any, must cut it:
    /// the earliest of the per-attempt timeout, the caller's deadline and
    /// the chain's `max_elapsed` (on a tie the deadline wins, then
    /// `max_elapsed`).
    ///
    /// `Err(GiveUp::Deadline)` when the caller's deadline has already
    /// passed: no attempt may start, the caller gets
    /// [`Error::DeadlineExceeded`].
    #[inline]
    pub(crate) fn begin(&mut self) -> Result<Option<(Instant, CutBy)>, GiveUp> {
        if self.begin_untimed() {
            return Ok(None);
        }
        self.begin_timed(deadline::current())
    }

    /// Starts the next attempt if no timer cuts it, which is the case of
    /// the first attempt of a call with no deadline in scope under a
    /// policy without an attempt timeout: the path every healthy call
    /// takes, inline. Otherwise returns `false` with nothing changed, and
    /// [`begin`](Self::begin) starts the attempt.
    #[inline]
    pub(crate) fn begin_untimed(&mut self) -> bool {
        if deadline::current().is_none()
            && self.start.is_none()
            && !self.policy().has_attempt_timeout()
        {
            self.deposit();
            self.attempt += 1;
            return true;
        }
        false
    }

    #[inline(never)]
    fn begin_timed(
        &mut self,
        deadline: Option<Instant>,
    ) -> Result<Option<(Instant, CutBy)>, GiveUp> {
        // Inside a `no_retry` region (a transaction opened by
        // `db::transaction`) a deadline is always in scope, so only this
        // timed path needs to look.
        #[cfg(feature = "sqlx-postgres")]
        if deadline.is_some() && super::no_retry::inside() {
            return Err(GiveUp::InTransaction);
        }
        let timeout = self.policy().attempt_timeout();
        let mut timer = None;
        if deadline.is_some() || timeout.is_some() || self.start.is_some() {
            let now = Instant::now();
            let start = *self.start.get_or_insert(now);
            if deadline.is_some_and(|deadline| deadline <= now) {
                return Err(GiveUp::Deadline);
            }
            let mut until = (start + self.policy().max_elapsed(), CutBy::MaxElapsed);
            if let Some(timeout) = timeout
                && now + timeout < until.0
            {
                until = (now + timeout, CutBy::AttemptTimeout(timeout));
            }
            if let Some(deadline) = deadline
                && deadline <= until.0
            {
                until = (deadline, CutBy::Deadline);
            }
            timer = Some(until);
        }
        if self.attempt == 0 {
            self.deposit();
        }
        self.attempt += 1;
        Ok(timer)
    }

    /// A logical call starts: its deposit in the policy's budget, if any.
    #[inline(always)]
    fn deposit(&self) {
        if let Some(budget) = self.policy().budget() {
            budget.deposit();
        }
    }

    /// The attempt in flight is pending and [`begin`](Self::begin) armed no
    /// timer: from now on it runs under the chain's `max_elapsed`.
    #[inline]
    pub(crate) fn pending(&mut self) -> (Instant, CutBy) {
        let start = *self.start.get_or_insert_with(Instant::now);
        (start + self.policy().max_elapsed(), CutBy::MaxElapsed)
    }

    /// Another attempt beside those in flight, for a hedged call: `Err`
    /// when none may start, because the attempts are used up
    /// (`Exhausted`), the call runs inside another chain's attempt
    /// (`Nested`: that one retries), or the retry budget is empty
    /// (`BudgetEmpty`). The call's time and the caller's deadline bound it
    /// as a whole, by the timer [`begin`](Self::begin) armed.
    pub(crate) fn hedge(&mut self) -> Result<(), GiveUp> {
        if self.attempt >= self.policy().max_attempts().min(super::per_call::limit()) {
            return Err(GiveUp::Exhausted);
        }
        if super::layer::outer().is_some() {
            return Err(GiveUp::Nested);
        }
        if self
            .policy()
            .budget()
            .is_some_and(|budget| !budget.withdraw())
        {
            return Err(GiveUp::BudgetEmpty);
        }
        self.attempt += 1;
        Ok(())
    }

    /// A timer fired: the runtime error the attempt ends with, and whether
    /// the chain stops (`Some`) or the error is classified like any other
    /// (`None`, a per-attempt timeout). A chain that stops hands over the
    /// error [kept](Self::keep) of the attempt before, as the error's cause.
    pub(crate) fn cut(&mut self, cut: CutBy) -> (Error, Option<GiveUp>) {
        match cut {
            CutBy::AttemptTimeout(timeout) => (Error::AttemptTimeout(timeout), None),
            CutBy::Deadline => (
                Error::deadline_exceeded(self.attempt).with_last(self.last.take()),
                Some(GiveUp::Deadline),
            ),
            CutBy::MaxElapsed => (
                Error::max_elapsed_exceeded(self.policy().max_elapsed(), self.attempt)
                    .with_last(self.last.take()),
                Some(GiveUp::Elapsed),
            ),
        }
    }

    /// The error for a chain whose next attempt may not start, because
    /// [`begin`](Self::begin) or [`failed`](Self::failed) answered
    /// `GiveUp::Deadline`: [`Error::DeadlineExceeded`] after the attempts
    /// made, with the error [kept](Self::keep) as its cause.
    pub(crate) fn deadline_passed(&mut self) -> Error {
        Error::deadline_exceeded(self.attempt).with_last(self.last.take())
    }

    /// The error for a chain whose attempt [`begin`](Self::begin) refused
    /// to start for `reason`: [`Error::RetryInsideTransaction`] for
    /// `GiveUp::InTransaction`, otherwise
    /// [`deadline_passed`](Self::deadline_passed).
    pub(crate) fn refused(&mut self, reason: GiveUp) -> Error {
        match reason {
            GiveUp::InTransaction => Error::RetryInsideTransaction,
            _ => self.deadline_passed(),
        }
    }

    /// Keeps a failed attempt's error, to hand it over as the cause of a
    /// runtime error that ends the chain later ([`cut`](Self::cut),
    /// [`deadline_passed`](Self::deadline_passed)).
    pub(crate) fn keep(&mut self, cause: Option<Cause>) {
        self.last.set(cause);
    }
}

impl<R: RngCore, P: Borrow<Policy>, S: ErrorSlot> Attempts<R, P, S> {
    /// The current attempt failed with an error judged `verdict`: stop on a
    /// permanent error, after the last attempt, or when the pause would
    /// cross `max_elapsed` or the caller's deadline (never sleep uselessly);
    /// otherwise pause for `max(backoff, Retry-After)`.
    ///
    /// A chain that fails inside another chain's attempt (see
    /// [`layer`](super::layer)) stops too: the outer chain retries.
    pub(crate) fn failed(&mut self, verdict: Verdict) -> Next {
        if !verdict.is_retryable() {
            return Next::GiveUp(GiveUp::Permanent);
        }
        if super::layer::outer().is_some() {
            return Next::GiveUp(GiveUp::Nested);
        }
        if self.attempt >= self.policy().max_attempts().min(super::per_call::limit()) {
            return Next::GiveUp(GiveUp::Exhausted);
        }
        let now = Instant::now();
        let start = *self.start.get_or_insert(now);
        let retry = self.attempt.saturating_sub(1);
        let mut delay =
            self.policy
                .borrow()
                .backoff()
                .delay(retry, self.previous_delay, &mut self.rng);
        self.previous_delay = delay;
        if let Verdict::RetryAfter(asked) = verdict {
            // The server said when to come back: never earlier. A pause
            // longer than the policy allows is not cut short but given up
            // on, as one longer than the time left is below.
            if asked > self.policy().max_retry_after() {
                return Next::GiveUp(GiveUp::RetryAfterTooLong);
            }
            delay = delay.max(asked);
        }
        let time_left = self
            .policy()
            .max_elapsed()
            .saturating_sub(now.saturating_duration_since(start));
        let deadline_left = deadline::current().map(|at| at.saturating_duration_since(now));
        if deadline_left.is_some_and(|left| left <= time_left && delay >= left) {
            return Next::GiveUp(GiveUp::Deadline);
        }
        if delay >= time_left {
            return Next::GiveUp(GiveUp::Elapsed);
        }
        // Last: a retry that would not be made for another reason takes
        // nothing from the budget.
        if self
            .policy()
            .budget()
            .is_some_and(|budget| !budget.withdraw())
        {
            return Next::GiveUp(GiveUp::BudgetEmpty);
        }
        Next::Retry {
            delay,
            until: now + delay,
        }
    }
}

/// What a loop around [`Attempts`] supplies for its failed attempts: how
/// it classifies an error, what it keeps of one, and where the events go.
///
/// [`Attempts::on_error`], [`on_cut`](Attempts::on_cut) and
/// [`on_refused`](Attempts::on_refused) apply the chain's rules with it,
/// so that every driver ([`Retry`](super::Retry), the blocking executor,
/// the attributes' own loop, a loop of yours) pauses, stops and reports
/// alike; a driver writes only its loop.
pub(crate) trait Driver<E> {
    /// The verdict on a failed attempt's error.
    fn judge(&mut self, error: &E) -> Verdict;

    /// Keeps `error`, retried, as the [`Cause`] of a runtime error that
    /// may end the chain later; `None` keeps nothing.
    fn keep(&mut self, error: E) -> Option<Cause>;

    /// Each failure's [`Event`]: a retry, or the end of the chain.
    fn notify(&mut self, event: &Event<'_, E>);

    /// The runtime error that ends an attempt or the chain (a timeout, the
    /// deadline, `max_elapsed`), before it becomes an `E`.
    fn runtime_error(&mut self, error: &Error) {
        let _ = error;
    }

    /// The chain's name, for the warning when it runs inside another.
    fn name(&self) -> &'static str;
}

/// The pause after a failed attempt, from [`Attempts::on_error`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Pause {
    /// How long.
    pub(crate) delay: Duration,
    /// When it ends.
    pub(crate) until: Instant,
}

impl<R: RngCore, P: Borrow<Policy>, S: ErrorSlot> Attempts<R, P, S> {
    /// The current attempt failed with `error`: the driver judges it, and
    /// the rules of [`failed`](Self::failed) decide. `Continue` pauses
    /// before the next attempt; `Break` is the chain's error (the
    /// attempt's own, or [`Error::DeadlineExceeded`] when the caller's
    /// deadline comes first), with its events sent.
    pub(crate) fn on_error<E: FromRuntimeError>(
        &mut self,
        error: E,
        driver: &mut impl Driver<E>,
    ) -> ControlFlow<E, Pause> {
        let verdict = driver.judge(&error);
        match self.failed(verdict) {
            Next::Retry { delay, until } => {
                driver.notify(&Event::Retry {
                    attempt: self.attempt,
                    delay,
                    error: &error,
                    verdict,
                });
                let kept = driver.keep(error);
                self.keep(kept);
                ControlFlow::Continue(Pause { delay, until })
            }
            Next::GiveUp(GiveUp::Deadline) => {
                // The hook sees the real error; the caller learns why the
                // chain stopped, with that error as the cause.
                driver.notify(&Event::GaveUp {
                    attempt: self.attempt,
                    error: &error,
                    reason: GiveUp::Deadline,
                });
                let kept = driver.keep(error);
                self.keep(kept);
                let error = self.deadline_passed();
                driver.runtime_error(&error);
                ControlFlow::Break(E::from_runtime(error))
            }
            Next::GiveUp(GiveUp::Nested) => {
                if let Some(outer) = super::layer::outer() {
                    super::layer::warn_nested(outer, driver.name());
                }
                ControlFlow::Break(self.give_up(error, GiveUp::Nested, driver))
            }
            Next::GiveUp(reason) => ControlFlow::Break(self.give_up(error, reason, driver)),
        }
    }
}

impl<R, P: Borrow<Policy>, S: ErrorSlot> Attempts<R, P, S> {
    /// A timer cut the attempt in flight (drop it first): `Ok` with a
    /// per-attempt timeout's error, to go through
    /// [`on_error`](Self::on_error) like any other; `Err` with the chain's
    /// error when its `max_elapsed` or the caller's deadline ran out, its event
    /// sent.
    pub(crate) fn on_cut<E: FromRuntimeError>(
        &mut self,
        cut: CutBy,
        driver: &mut impl Driver<E>,
    ) -> Result<E, E> {
        let (error, stop) = self.cut(cut);
        driver.runtime_error(&error);
        let error = E::from_runtime(error);
        match stop {
            Some(reason) => Err(self.give_up(error, reason, driver)),
            None => Ok(error),
        }
    }

    /// [`begin`](Self::begin) refused the next attempt for `reason`: the
    /// chain's error, its event sent.
    pub(crate) fn on_refused<E: FromRuntimeError>(
        &mut self,
        reason: GiveUp,
        driver: &mut impl Driver<E>,
    ) -> E {
        let error = self.refused(reason);
        driver.runtime_error(&error);
        self.give_up(E::from_runtime(error), reason, driver)
    }

    fn give_up<E>(&mut self, error: E, reason: GiveUp, driver: &mut impl Driver<E>) -> E {
        driver.notify(&Event::GaveUp {
            attempt: self.attempt,
            error: &error,
            reason,
        });
        error
    }
}

#[cfg(test)]
mod tests {
    use std::ops::ControlFlow;

    use super::{Attempts, Driver, Kept, Next};
    use crate::error::{Cause, Error};
    use crate::retry::{DefaultRng, Event, Policy, Verdict};

    #[test]
    fn the_first_attempt_without_deadline_or_timeout_starts_untimed() {
        let mut attempts = Attempts::<_, _, Kept>::with_rng(Policy::http(), DefaultRng);
        assert!(attempts.begin_untimed());
        assert_eq!(attempts.attempt(), 1);
    }

    #[derive(Debug, PartialEq)]
    enum Failure {
        Unavailable,
        Runtime(Error),
    }

    impl From<Error> for Failure {
        fn from(err: Error) -> Self {
            Failure::Runtime(err)
        }
    }

    /// Classifies everything as transient and logs the failures.
    struct Log(Vec<String>);

    impl Driver<Failure> for Log {
        fn judge(&mut self, _: &Failure) -> Verdict {
            Verdict::Transient
        }
        fn keep(&mut self, _: Failure) -> Option<Cause> {
            None
        }
        fn notify(&mut self, event: &Event<'_, Failure>) {
            self.0.push(format!("attempt {} failed", event.attempt()));
        }
        fn name(&self) -> &'static str {
            "my-loop"
        }
    }

    /// `on_error` pauses after each failure and, after the `http` preset's
    /// 3 attempts, hands the last error back, every failure reported.
    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn a_driver_sees_every_failure_and_gets_the_last_error_back() {
        let mut attempts = Attempts::<_, _, Kept>::with_rng(Policy::http(), DefaultRng);
        let mut log = Log(Vec::new());
        let result: Result<(), Failure> = loop {
            attempts.begin().expect("no deadline in scope");
            match attempts.on_error(Failure::Unavailable, &mut log) {
                ControlFlow::Continue(pause) => tokio::time::sleep_until(pause.until).await,
                ControlFlow::Break(error) => break Err(error),
            }
        };
        assert_eq!(result, Err(Failure::Unavailable));
        assert_eq!(
            log.0,
            ["attempt 1 failed", "attempt 2 failed", "attempt 3 failed"]
        );
    }

    /// The bare decisions: `begin` before each attempt, `failed` after a
    /// failed one, until an attempt succeeds (the guide's `http` preset
    /// allows 3 attempts).
    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn a_loop_driven_by_begin_and_failed_retries_until_success() {
        let mut attempts = Attempts::<_, _, Kept>::with_rng(Policy::http(), DefaultRng);
        let mut statuses = [503, 503, 200].into_iter();
        let status = loop {
            attempts.begin().expect("no deadline in scope");
            match statuses.next() {
                Some(200) => break Ok(200),
                Some(status) => match attempts.failed(Verdict::Transient) {
                    Next::Retry { until, .. } => tokio::time::sleep_until(until).await,
                    Next::GiveUp(reason) => break Err((status, reason)),
                },
                None => unreachable!("three statuses, three attempts at most"),
            }
        };
        assert_eq!(status, Ok(200));
        assert_eq!(attempts.attempt(), 3);
    }
}
