//! `cargo fuzz run retry_after`: see `fuzz/checks/mod.rs` for what it asserts.
#![no_main]

#[allow(dead_code)]
#[path = "../checks/mod.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::retry_after(data));
