//! The conformance suite: what the guide and the peers' own test suites
//! assert, ported test by test against the public API of `resilience`.
//!
//! Each test names its source (repository, file and test name) and keeps
//! the source's numbers. Where the library deliberately differs from a
//! peer, the test pins our behaviour and its doc comment says how and why
//! (the same reasons are in the user-facing docs). `RELIABILITY.md` lists
//! the count of ported tests per source.
//!
//! Run it alone with `cargo test --all-features --test conformance`.

#[path = "../../examples/common/mod.rs"]
mod common;

mod backoff;
mod budget;
mod gobreaker;
mod guide;
mod ietf_idempotency;
mod polly_hedging;
mod reqwest_retry;
mod resilience4j;

use resilience::retry::{Classify, HttpStatus, Verdict};

/// The error of the ported tests: a status, an error the test says to
/// ignore (gobreaker's `IsExcluded`, resilience4j's `ignoreExceptions`), or
/// the runtime's own.
#[derive(Debug)]
pub enum TestError {
    Status(u16),
    Excluded,
    Runtime(resilience::Error),
}

impl Classify for TestError {
    fn classify(&self) -> Verdict {
        match self {
            TestError::Status(status) => HttpStatus(*status).classify(),
            TestError::Excluded => Verdict::Ignored,
            TestError::Runtime(error) => error.classify(),
        }
    }
}

impl From<resilience::Error> for TestError {
    fn from(error: resilience::Error) -> Self {
        TestError::Runtime(error)
    }
}

impl TestError {
    /// The breaker's rejection, with the state it names.
    pub fn rejected_as(&self) -> Option<&'static str> {
        match self {
            TestError::Runtime(resilience::Error::DependencyDown(down)) => Some(down.state()),
            _ => None,
        }
    }
}
