//! The `#[retry]` and `#[circuit_breaker]` attribute macros of the
//! `resilience` crate. Use them through `resilience`, not directly.
