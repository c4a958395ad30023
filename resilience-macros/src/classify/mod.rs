//! `#[derive(Classify)]`: parse → validate → expand.
//!
//! Each variant (or the struct itself) says what its errors are:
//! `transient`, `permanent`, or a field to classify through (`source`,
//! `runtime`, `status`). `parse` reads the `#[classify(…)]` attributes,
//! `validate` turns them into one [`Kind`](validate::Kind) per variant, and
//! `expand` writes the `Classify` impl (and `From<resilience::Error>` for a
//! `runtime` variant that has no `#[from]`).

mod expand;
mod parse;
mod validate;

use proc_macro2::TokenStream;
use syn::DeriveInput;

use crate::errors::Errors;

pub(crate) fn derive(input: TokenStream) -> TokenStream {
    let input: DeriveInput = match syn::parse2(input) {
        Ok(input) => input,
        Err(err) => return err.to_compile_error(),
    };
    let mut errors = Errors::default();
    let parsed = parse::parse(&input, &mut errors);
    let plan = validate::validate(&input, parsed, &mut errors);
    match errors.finish() {
        Some(err) => err.to_compile_error(),
        None => expand::expand(&input, plan),
    }
}
