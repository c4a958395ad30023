//! The permit: the right to make one call, and the settling of its
//! outcome into the breaker's window and state.

use super::cut::CutTimer;
use super::*;

/// The right to make one call through a breaker, from
/// [`CircuitBreaker::try_acquire`].
///
/// Record the outcome with [`success`](Self::success),
/// [`failure`](Self::failure) or [`record`](Self::record). Dropping it
/// unrecorded counts as a cancelled call: nothing is counted and a probe
/// slot is freed.
#[must_use = "a permit records nothing unless its outcome is recorded"]
pub struct Permit<'a> {
    pub(super) breaker: &'a CircuitBreaker,
    /// A packed [`Admission`], or `TAKEN` once recorded.
    pub(super) admission: u64,
    /// When the call started, for the slow-call rule (0 without one).
    pub(super) started: u64,
}

impl Permit<'_> {
    /// The call succeeded (or failed with a permanent error: the
    /// dependency answered).
    #[inline]
    pub fn success(self) {
        self.finish(false);
    }

    /// The call failed because of the dependency.
    #[inline]
    pub fn failure(self) {
        self.finish(true);
    }

    /// Records `outcome`: [`Outcome::Ignored`] counts nothing, like a
    /// permit dropped unrecorded.
    ///
    /// ```
    /// use resilience::breaker::{BreakerConfig, CircuitBreaker};
    /// use resilience::Outcome;
    ///
    /// let breaker = CircuitBreaker::new("ledger", BreakerConfig::new())?;
    /// breaker.try_acquire()?.settle(Outcome::Failure);
    /// breaker.try_acquire()?.settle(Outcome::Ignored);
    /// assert_eq!((breaker.snapshot().calls, breaker.snapshot().failures), (1, 1));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn settle(self, outcome: Outcome) {
        match outcome {
            Outcome::Success => self.finish(false),
            Outcome::Failure => self.finish(true),
            Outcome::Ignored => drop(self),
        }
    }

    /// Records `result`, through the error's [`Classify::outcome`]: a
    /// transient or fatal error (a hung dependency whose time ran out) is
    /// a failure, a permanent one a success, an ignored one nothing.
    #[inline]
    pub fn record<T, E: Classify>(self, result: &Result<T, E>) {
        match result {
            Ok(_) => self.finish(false),
            Err(error) => self.settle(error.outcome()),
        }
    }

    /// Asks the breaker; an idle permit becomes a live one, or a rejection.
    /// Always inline: out of line, its prologue and epilogue cost more than
    /// the closed path itself.
    #[inline(always)]
    pub(super) fn start(&mut self) -> Result<(), DependencyDown> {
        match self.breaker.admit() {
            Ok(admission) => {
                self.admission = admission.pack();
                if self.breaker.machine.setup.config.slow_call().is_some() {
                    self.started = self.breaker.machine.now();
                    self.admission |= TIMED;
                }
                Ok(())
            }
            Err(down) => {
                self.admission = TAKEN;
                Err(down)
            }
        }
    }

    /// Settles a permit taken by value; `ManuallyDrop` since a settled
    /// permit has nothing to drop, so that nothing of it is kept in memory.
    #[inline]
    pub(super) fn finish(self, failed: bool) {
        let this = std::mem::ManuallyDrop::new(self);
        settle(this.breaker, this.admission, this.started, failed);
    }

    #[inline]
    pub(super) fn settle_in_place(&mut self, failed: bool) {
        let packed = std::mem::replace(&mut self.admission, TAKEN);
        settle(self.breaker, packed, self.started, failed);
    }

    /// Runs `call` under this permit's cut, as [`CircuitBreaker::call`]
    /// does: the caller's deadline, the probe timeout of a probe, the call
    /// timeout of any other call. A cut call ends with the runtime's error
    /// (which the permit's outcome then counts as a failure). For the
    /// attributes' expansion, where the permit is settled by the fallback.
    #[doc(hidden)]
    pub async fn bound<Fut, T, E>(&self, call: Fut) -> Result<T, E>
    where
        Fut: Future<Output = Result<T, E>>,
        E: FromRuntimeError,
    {
        let mut call = std::pin::pin!(call);
        let mut cut: Option<Pin<Box<CutTimer>>> = None;
        std::future::poll_fn(|cx| {
            if let Poll::Ready(result) = call.as_mut().poll(cx) {
                return Poll::Ready(result);
            }
            let armed = cut.get_or_insert_with(|| {
                Box::pin(CutTimer::of(
                    &self.breaker.machine.setup.config,
                    self.admission,
                ))
            });
            let by = armed.by;
            ready!(armed.as_mut().project().sleep.poll(cx));
            Poll::Ready(Err(E::from_runtime(by.error())))
        })
        .await
    }

    /// Counts nothing and frees a probe slot, as a drop does.
    pub(super) fn ignore_in_place(&mut self) {
        let packed = std::mem::replace(&mut self.admission, TAKEN);
        if let Some(admission) = Admission::unpack(packed) {
            self.breaker.on_outcome(CallOutcome::Cancelled(admission));
        }
    }
}

/// Records the outcome of a call admitted as `packed` at `started`.
#[inline(always)]
pub(super) fn settle(breaker: &CircuitBreaker, packed: u64, started: u64, failed: bool) {
    // The path of a healthy dependency, inline: a load of the state word
    // (its generation still the one that admitted the call) and one
    // stripe store.
    if packed & !GENERATION == 0 && !failed {
        // Relaxed: the generation gates the count and publishes nothing to
        // read; and an acquire load here, after the call's result is
        // written, would keep the optimizer from seeing through it (24
        // instructions per call through `CircuitBreaker::call`).
        if StateWord(breaker.machine.state.load(Relaxed)).generation() == packed as u32 {
            breaker.machine.window.add_success();
        }
        return;
    }
    settle_rest(breaker, packed, started, failed);
}

#[inline(never)]
pub(super) fn settle_rest(breaker: &CircuitBreaker, packed: u64, started: u64, failed: bool) {
    let Some(admission) = Admission::unpack(packed) else {
        return;
    };
    let machine = &*breaker.machine;
    let slow = match machine.setup.config.slow_call() {
        Some(rule) if packed & TIMED != 0 => {
            machine.now().saturating_sub(started) >= duration_nanos(rule.threshold)
        }
        _ => false,
    };
    breaker.on_outcome(CallOutcome::Done {
        admission,
        failed,
        slow,
    });
}

impl Drop for Permit<'_> {
    #[inline]
    fn drop(&mut self) {
        if let Some(admission) = Admission::unpack(self.admission) {
            // Dropped while its thread unwinds: the call panicked (or the
            // code holding it did). A failure, as gobreaker counts a panic
            // in the request, and the panic goes on.
            if std::thread::panicking() {
                self.settle_in_place(true);
            } else {
                self.breaker.on_outcome(CallOutcome::Cancelled(admission));
            }
        }
    }
}

impl fmt::Debug for Permit<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Permit")
            .field("breaker", &self.breaker.machine.setup.labels.target())
            .field("admission", &Admission::unpack(self.admission))
            .finish()
    }
}
