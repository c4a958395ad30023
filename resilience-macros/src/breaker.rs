//! `#[circuit_breaker]`: parse → validate → expand.
//!
//! A `#[retry]` written below is expanded here too, inside the breaker:
//! attribute macros expand from the outside in, so left to itself `#[retry]`
//! would wrap the breaker instead of the other way round.

use proc_macro2::TokenStream;
use syn::{ItemFn, Meta};

use crate::errors::Errors;
use crate::expand::{self, Plan};
use crate::{args, idempotency, item, sig, validate};

pub(crate) fn expand(args: TokenStream, input: TokenStream) -> TokenStream {
    let mut errors = Errors::default();
    let mut item: ItemFn = match item::parse(input, "circuit_breaker") {
        Ok(item) => item,
        Err(output) => return output,
    };
    let breaker = args::parse_breaker(args, &mut errors);
    validate::breaker(&breaker, &mut errors);
    if let Some(key) = &breaker.key
        && let Err(err) = validate::breaker_key(key, &item.sig)
    {
        errors.push(err);
    }
    for attr in item
        .attrs
        .iter()
        .filter(|attr| validate::is_attribute(attr, "circuit_breaker"))
    {
        errors.push(syn::Error::new_spanned(
            attr,
            "`#[circuit_breaker]` is applied more than once; one fn calls one dependency, behind one breaker",
        ));
    }

    // Take the `#[retry]` below, if any, and expand it here.
    let mut retry = None;
    let mut passed: Vec<syn::Attribute> = Vec::new();
    let mut kept = Vec::with_capacity(item.attrs.len());
    for attr in std::mem::take(&mut item.attrs) {
        if !validate::is_attribute(&attr, "retry") {
            kept.push(attr);
            continue;
        }
        if retry.is_some() {
            errors.push(syn::Error::new_spanned(&attr, validate::RETRY_TWICE));
            continue;
        }
        let tokens = match &attr.meta {
            Meta::Path(_) => TokenStream::new(),
            Meta::List(list) => list.tokens.clone(),
            Meta::NameValue(_) => {
                errors.push(syn::Error::new_spanned(
                    &attr,
                    "write `#[retry(…)]` with its arguments in parentheses",
                ));
                continue;
            }
        };
        let args = args::parse_retry(tokens, &mut errors);
        validate::retry(&args, &mut errors);
        retry = Some(args);
        // Keep the user's path to `retry` in the output, so that its import
        // stays used; the marker makes that expansion a no-op.
        let path = attr.path();
        passed.push(syn::parse_quote!(#[#path(__resilience_expanded)]));
    }
    item.attrs = kept;
    if let (Some(limit), Some(_)) = (&breaker.limit, &retry) {
        errors.push(validate::limit_above_retry(limit));
    }

    let async_trait = crate::async_trait::detect(&item);
    validate::fn_shape(&item, async_trait.is_some(), "circuit_breaker", &mut errors);
    let result = sig::result_type_for(&item, async_trait.as_ref(), "circuit_breaker");
    if let Ok(result) = &result
        && let Err(err) = validate::breaker_target(&result.ty)
    {
        errors.push(err);
    }
    if let (Ok(result), Some(retry)) = (&result, &retry)
        && let Err(err) = validate::client_retry(retry, &result.ty)
    {
        errors.push(err);
    }
    // A fn that is not async was refused already, and awaits nothing
    // for that reason.
    let is_async = async_trait.is_some() || item.sig.asyncness.is_some();
    if is_async {
        if let Err(err) = validate::breaker_body(&item) {
            errors.push(err);
        }
        if let Some(limit) = retry.as_ref().and_then(|retry| retry.limit.as_ref())
            && let Err(err) = validate::limit_body(&item, limit)
        {
            errors.push(err);
        }
    }
    let copies = retry.is_some() || breaker.fallback.is_some();
    let mut rewritten = item.clone();
    let params = sig::params(&mut rewritten.sig, copies && async_trait.is_none());
    if let Some(retry) = &retry
        && let Err(err) = idempotency::check(retry, &item.sig.ident, params.has_idempotency_key)
    {
        errors.push(err);
    }
    rewritten.attrs.extend(passed.iter().cloned());
    // Refused, the fn keeps the marker of its `#[retry]`, so that the
    // import of `retry` stays used and no warning joins the errors.
    item.attrs.extend(passed);
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
    expand::expand(Plan {
        item: rewritten,
        retry: retry.as_ref(),
        breaker: Some(&breaker),
        params,
        result,
        async_trait,
    })
}
