//! What a retry chain tells its caller and its hooks: why it stopped
//! ([`GiveUp`]) and each attempt's outcome ([`Event`]). The chain's
//! decision core and every loop over it speak these words.

use std::time::Duration;

use super::Verdict;

/// Why a retry chain stopped on an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum GiveUp {
    /// The error was classified permanent.
    Permanent,
    /// The policy's attempts were used up.
    Exhausted,
    /// The next pause would have crossed the policy's `max_elapsed`.
    Elapsed,
    /// The caller's deadline passed, or the next pause would have crossed it.
    Deadline,
    /// The dependency asked for a pause (`Retry-After`) longer than the
    /// policy's [`max_retry_after`](super::Policy::max_retry_after): the
    /// chain gives up at once rather than retry before the server said it
    /// may (the guide: never retry earlier than asked). The caller gets the
    /// error of the attempt made, which carries the hint.
    RetryAfterTooLong,
    /// The chain runs inside another chain's attempt on the same task:
    /// it made one attempt and leaves the retrying to the outer chain, so
    /// that one failing call is not retried at two layers (3 × 3
    /// attempts); a WARN says so once per pair of chains.
    Nested,
    /// The chain was started inside a database transaction opened by the
    /// transaction helper, and refused before its first attempt
    /// ([`Error::RetryInsideTransaction`](crate::Error::RetryInsideTransaction)).
    InTransaction,
    /// The next retry would have been made, but the chain's retry
    /// [`Budget`](super::Budget) was empty: the caller gets the error of
    /// the attempt made.
    BudgetEmpty,
}

impl GiveUp {
    /// A short label: `permanent`, `exhausted`, `elapsed`, `deadline`,
    /// `retry_after_too_long`, `nested`, `in_transaction` or
    /// `budget_empty`.
    pub const fn as_str(self) -> &'static str {
        match self {
            GiveUp::Permanent => "permanent",
            GiveUp::Exhausted => "exhausted",
            GiveUp::Elapsed => "elapsed",
            GiveUp::Deadline => "deadline",
            GiveUp::RetryAfterTooLong => "retry_after_too_long",
            GiveUp::Nested => "nested",
            GiveUp::InTransaction => "in_transaction",
            GiveUp::BudgetEmpty => "budget_empty",
        }
    }
}

/// What a [`Notify`](super::Notify) hook sees: the outcome of each attempt.
#[derive(Debug)]
#[non_exhaustive]
pub enum Event<'a, E> {
    /// Attempt `attempt` (1-based) succeeded.
    Success {
        /// The attempt number, from 1.
        attempt: u32,
    },
    /// Attempt `attempt` failed with a retryable error; the next attempt
    /// starts after `delay`.
    Retry {
        /// The attempt number, from 1.
        attempt: u32,
        /// The pause before the next attempt.
        delay: Duration,
        /// The error of this attempt.
        error: &'a E,
        /// How the error was classified.
        verdict: Verdict,
    },
    /// Attempt `attempt` failed and the chain stops.
    GaveUp {
        /// The attempt number, from 1; 0 when the caller's deadline had
        /// passed before the first attempt could start.
        attempt: u32,
        /// The last error of the operation (or the runtime's own, when the
        /// deadline passed before an attempt could start).
        error: &'a E,
        /// Why the chain stops.
        reason: GiveUp,
    },
}

impl<E> Event<'_, E> {
    /// The attempt the event is about, from 1.
    pub fn attempt(&self) -> u32 {
        match self {
            Event::Success { attempt }
            | Event::Retry { attempt, .. }
            | Event::GaveUp { attempt, .. } => *attempt,
        }
    }
}
