//! The `#[retry]`, `#[hedge]` and `#[circuit_breaker]` attribute macros and the
//! `#[derive(Classify)]` of the `resilience` crate. Use them through
//! `resilience`, not directly: the code they generate calls
//! `::resilience::__private`.
//!
//! Each macro is a thin shim over its module: `args` parses, `validate`
//! checks the rules between arguments and on the fn, `expand` generates
//! the code. `sig`, `idempotency` and `duration` hold what both attributes
//! share; the derive has its own folder, `classify/`, with the same three
//! phases.
#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

use proc_macro::TokenStream;

mod args;
mod async_trait;
mod breaker;
mod classify;
mod duration;
mod errors;
mod expand;
mod hedge;
mod idempotency;
mod item;
mod retry;
mod sig;
mod validate;

#[doc = include_str!("../doc/retry.md")]
#[proc_macro_attribute]
pub fn retry(args: TokenStream, item: TokenStream) -> TokenStream {
    retry::expand(args.into(), item.into()).into()
}

#[doc = include_str!("../doc/classify.md")]
#[proc_macro_derive(Classify, attributes(classify))]
pub fn derive_classify(item: TokenStream) -> TokenStream {
    classify::derive(item.into()).into()
}

#[doc = include_str!("../doc/hedge.md")]
#[proc_macro_attribute]
pub fn hedge(args: TokenStream, item: TokenStream) -> TokenStream {
    hedge::expand(args.into(), item.into()).into()
}

#[doc = include_str!("../doc/circuit_breaker.md")]
#[proc_macro_attribute]
pub fn circuit_breaker(args: TokenStream, item: TokenStream) -> TokenStream {
    breaker::expand(args.into(), item.into()).into()
}
