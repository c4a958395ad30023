//! One retrying layer: a chain started inside another chain's attempt
//! makes one attempt, and the outer chain does the retrying.
//!
//! An annotated fn that calls another annotated fn on the same task would
//! otherwise retry at both layers: 3 × 3 = 9 attempts reach the dependency
//! for one logical call, against a dependency that is already failing. The
//! advice of the AWS Builders' Library is to retry at one layer, and the
//! outer one knows the caller's budget: so the inner chain gives up after
//! its first failed attempt ([`GiveUp::Nested`](super::GiveUp::Nested)),
//! hands its error to the outer chain, which classifies it and retries
//! under its own policy, and a WARN says so once per pair of chains.
//!
//! Detection is by task, through the thread the attempt is polled on: a
//! chain marks the thread while it polls its attempt, and an inner chain
//! that fails while a mark is up knows it is nested. A chain in a task
//! spawned from an attempt is not nested: it runs on its own.

use std::cell::Cell;
use std::collections::HashSet;
use std::sync::Mutex;

std::thread_local! {
    /// The name of the chain whose attempt is being polled on this thread.
    static OUTER: Cell<Option<&'static &'static str>> = const { Cell::new(None) };
}

/// The name of a chain driven by hand ([`Policy::retry`](super::Policy::retry)).
pub(crate) static UNNAMED: &str = "a `Policy::retry` chain";

/// Marks the thread while a chain's attempt is polled; restores the outer
/// mark on drop.
#[derive(Debug)]
pub(crate) struct Polling {
    previous: Option<&'static &'static str>,
}

/// Marks the thread as polling an attempt of the chain `name` until the
/// returned guard drops: call it around every poll of an attempt, as
/// [`Retry`](super::Retry) and the attributes do.
#[inline(always)]
pub(crate) fn polling(name: &'static &'static str) -> Polling {
    Polling {
        // `with`, not `LocalKey::replace`/`set`: those go through the
        // lazy-init path out of line, 14 instructions per attempt.
        previous: OUTER.with(|outer| outer.replace(Some(name))),
    }
}

impl Drop for Polling {
    #[inline(always)]
    fn drop(&mut self) {
        OUTER.with(|outer| outer.set(self.previous));
    }
}

/// The chain whose attempt is being polled on this thread, if any: a chain
/// that fails while one is, is nested in it.
#[inline]
pub(crate) fn outer() -> Option<&'static str> {
    OUTER.with(Cell::get).copied()
}

/// Says once, at WARN, that `inner` runs inside `outer` and leaves the
/// retrying to it.
#[cold]
pub(crate) fn warn_nested(outer: &'static str, inner: &'static str) {
    static SAID: Mutex<Option<HashSet<(&'static str, &'static str)>>> = Mutex::new(None);
    let first = match SAID.lock() {
        Ok(mut said) => said.get_or_insert_with(HashSet::new).insert((outer, inner)),
        // A panic elsewhere poisoned it: say it again rather than never.
        Err(_) => true,
    };
    if first {
        tracing::warn!(
            target: "resilience",
            outer,
            inner,
            "a retry chain runs inside another one's attempt: it makes one attempt and the outer chain retries (retry at one layer)"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::{outer, polling};

    #[test]
    fn the_mark_is_up_while_polling_and_restored_on_drop() {
        static OUTER: &str = "users";
        static INNER: &str = "orders";
        assert_eq!(outer(), None);
        {
            let _outer = polling(&OUTER);
            assert_eq!(outer(), Some("users"));
            {
                let _inner = polling(&INNER);
                assert_eq!(outer(), Some("orders"));
            }
            assert_eq!(outer(), Some("users"));
        }
        assert_eq!(outer(), None);
    }
}
