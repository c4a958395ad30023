//! `cargo fuzz run idempotency_key`: see `fuzz/checks/mod.rs` for what it asserts.
#![no_main]

#[allow(dead_code)]
#[path = "../checks/mod.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::idempotency_key(data));
