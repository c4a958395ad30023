//! The declared minimum supported Rust version is the one CI builds with.
//!
//! `rust-version` in `Cargo.toml` is a promise to users that the crates
//! build with that toolchain. Only a version that CI actually builds with is
//! verified (a "1.85" was once declared while let-chains need 1.88), and
//! CI has one toolchain: this test compares the two, so that the claim
//! moves with the toolchain, or an older one is installed in CI to keep it.
#![deny(warnings)]

use std::process::Command;

/// `major.minor` of a version such as `1.95.0` or `rustc 1.95.0 (… )`.
fn major_minor(version: &str) -> (u32, u32) {
    let mut parts = version.split(['.', '-', ' ']);
    let mut next = || {
        parts
            .next()
            .and_then(|part| part.parse().ok())
            .unwrap_or_else(|| panic!("no version in {version:?}"))
    };
    (next(), next())
}

#[test]
fn the_declared_rust_version_is_the_toolchain_ci_builds_with() {
    let declared = env!("CARGO_PKG_RUST_VERSION");
    assert!(!declared.is_empty(), "Cargo.toml declares no rust-version");
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_owned());
    let output = Command::new(&rustc)
        .arg("--version")
        .output()
        .unwrap_or_else(|err| panic!("cannot run `{rustc} --version`: {err}"));
    let text = String::from_utf8_lossy(&output.stdout);
    let building = major_minor(text.trim_start_matches("rustc "));
    assert_eq!(
        major_minor(declared),
        building,
        "Cargo.toml declares rust-version = {declared:?}, but CI builds with {}: declare the \
         version CI builds with, or build with {declared} in CI to keep the older promise",
        text.trim()
    );
}

#[test]
fn versions_are_read_as_major_and_minor() {
    assert_eq!(major_minor("1.95"), (1, 95));
    assert_eq!(major_minor("1.88.0"), (1, 88));
    assert_eq!(major_minor("1.95.0-nightly"), (1, 95));
}
