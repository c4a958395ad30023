//! `#[retry]`: parse → validate → expand.

use proc_macro2::TokenStream;
use quote::quote;
use syn::ItemFn;

use crate::errors::Errors;
use crate::expand::{self, Plan};
use crate::{args, idempotency, item, sig, validate};

/// What `#[circuit_breaker]` leaves in place of the `#[retry]` it expanded.
const EXPANDED: &str = "__resilience_expanded";

pub(crate) fn expand(args: TokenStream, input: TokenStream) -> TokenStream {
    if is_marker(&args) {
        return input;
    }
    let mut errors = Errors::default();
    let item: ItemFn = match item::parse(input, "retry") {
        Ok(item) => item,
        Err(output) => return output,
    };
    let args = args::parse_retry(args, &mut errors);
    validate::retry(&args, &mut errors);
    for attr in item
        .attrs
        .iter()
        .filter(|attr| validate::is_attribute(attr, "retry"))
    {
        errors.push(syn::Error::new_spanned(attr, validate::RETRY_TWICE));
    }
    let async_trait = crate::async_trait::detect(&item);
    if let Err(err) = validate::order(&item) {
        errors.push(err);
    }
    validate::fn_shape(&item, async_trait.is_some(), "retry", &mut errors);
    // A fn that is not async was refused already, and awaits nothing for
    // that reason.
    if let Some(limit) = &args.limit
        && (async_trait.is_some() || item.sig.asyncness.is_some())
        && let Err(err) = validate::limit_body(&item, limit)
    {
        errors.push(err);
    }
    let result = sig::result_type_for(&item, async_trait.as_ref(), "retry");
    let mut rewritten = item.clone();
    let params = sig::params(&mut rewritten.sig, async_trait.is_none());
    if let Err(err) = idempotency::check(&args, &item.sig.ident, params.has_idempotency_key) {
        errors.push(err);
    }
    if let Ok(result) = &result
        && let Err(err) = validate::client_retry(&args, &result.ty)
    {
        errors.push(err);
    }
    let result = match result {
        Ok(result) if errors.len() == 0 => result,
        Ok(_) => return item::with_errors(item, errors),
        // A fn that is not async was refused already: its return type is
        // a second symptom of the same mistake.
        Err(err) => {
            if async_trait.is_some() || item.sig.asyncness.is_some() {
                errors.push(err);
            }
            return item::with_errors(item, errors);
        }
    };
    let output = expand::expand(Plan {
        item: rewritten,
        retry: Some(&args),
        breaker: None,
        params,
        result,
        async_trait,
    });
    quote!(#output)
}

fn is_marker(args: &TokenStream) -> bool {
    let mut tokens = args.clone().into_iter();
    matches!(
        (tokens.next(), tokens.next()),
        (Some(proc_macro2::TokenTree::Ident(ident)), None) if ident == EXPANDED
    )
}
