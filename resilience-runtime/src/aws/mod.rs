//! The AWS SDK for Rust (S3 and every other AWS client): its errors
//! classified by the SDK's own lists, and the library's retry policy as
//! the SDK client's retry, so that a call has one retry loop (cargo
//! feature `aws`).
//!
//! - [`Classify`](crate::Classify) for `SdkError<E, HttpResponse>`, the
//!   error of every SDK operation: throttling (`SlowDown`) and transient
//!   codes, 500/502/503/504, timeouts and I/O failures transient; other
//!   4xx permanent (see the table on the impl);
//! - [`AwsRetry`]: the policy plugged into the SDK client, each SDK
//!   attempt one of the policy's, under the caller's deadline, the
//!   policy's budget and the breaker around the call.
//!
//! [Clients that retry by themselves](crate::clients_that_retry) says
//! when to choose this, and when to keep the SDK's own loop instead.

mod classify;
mod retry;

pub use classify::{THROTTLING_ERRORS, TRANSIENT_ERRORS, TRANSIENT_STATUS_CODES, runtime_error};
pub use retry::AwsRetry;
