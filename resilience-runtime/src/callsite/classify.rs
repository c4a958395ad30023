//! What `#[derive(Classify)]` expands to calls: the verdicts its
//! attributes stand for, written once here rather than in every impl.

use std::time::Duration;

use crate::retry::Verdict;

/// The verdict of a `#[classify(transient)]` variant: after its
/// `retry_after` field's delay when it has one.
#[inline]
pub fn transient_after(delay: Option<Duration>) -> Verdict {
    match delay {
        Some(delay) => Verdict::RetryAfter(delay),
        None => Verdict::Transient,
    }
}
