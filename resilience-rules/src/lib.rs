//! The rules that the `resilience` macros check at compile time and its
//! runtime checks when a value comes from code or a config file, written
//! once so that the two can never disagree:
//!
//! - [`duration`]: the duration grammar (`"100ms"`, `"1.5s"`), read
//!   exactly, and its shortest printed form;
//! - [`limits`]: the bounds on attempts, jitter, breakers, families and
//!   bursts;
//! - [`rate`]: the rate grammar (`"100/s"`, `"25/100ms"`) and the
//!   bounds on a burst;
//! - [`presets`]: the values of the retry and breaker presets;
//! - [`jitter`]: the jitter vocabulary (`0.3`, `"full"`, `"additive 0.3"`);
//! - [`suggest`]: "did you mean" for near misses;
//! - [`idempotency`]: which HTTP methods and which fn names may be sent
//!   twice.
//!
//! A plain crate with no dependencies: the proc-macro crate
//! `resilience-macros` can depend on it as well as the runtime can.
//! Applications use the `resilience` facade, not this crate; the messages
//! that explain a broken rule belong to each side (a compile error, a
//! `ConfigError`).
#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

pub mod duration;
pub mod idempotency;
pub mod jitter;
pub mod limits;
pub mod presets;
pub mod rate;
pub mod suggest;
