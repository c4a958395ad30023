//! Compile-time behaviour of the macros: what they accept (`ui/pass`) and
//! what they refuse, with the exact message (`ui/fail/*.stderr`).
//!
//! Regenerate the expected output after a deliberate change of wording:
//! `TRYBUILD=overwrite cargo test --test ui`.

#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.pass("tests/ui/pass/*.rs");
    cases.compile_fail("tests/ui/fail/*.rs");
}
