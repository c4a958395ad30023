//! Compile-time behaviour of the macros: what they accept (`ui/pass`) and
//! what they refuse, with the exact message (`ui/fail/*.stderr`).
//!
//! Regenerate the expected output after a deliberate change of wording:
//! `TRYBUILD=overwrite cargo test --all-features --test ui`. With all
//! features, as the README's test command runs it: there rustc prints some
//! paths in full (`std::string::String`, `std::net::IpAddr` in a list of
//! impls, sorted differently) that a default-features run shortens, and an
//! overwrite from such a run rewrites `.stderr` files that CI then
//! rejects.

#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.pass("tests/ui/pass/*.rs");
    cases.compile_fail("tests/ui/fail/*.rs");
}
