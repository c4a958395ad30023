//! `#[hedge]`: parse → validate → expand, in one module (the attribute is
//! small, and shares the parsing helpers of `args` and the checks of
//! `idempotency`, `sig` and `validate`).

use std::time::Duration;

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use resilience_rules::limits::MIN_HEDGE_DELAY;
use syn::visit_mut::VisitMut;
use syn::{FnArg, ItemFn, Type};

use crate::args::{self, Arg, Method};
use crate::errors::Errors;
use crate::sig::ReplaceSelf;
use crate::{duration, idempotency, item, sig, validate};

/// The arguments of `#[hedge]`.
#[derive(Default)]
struct HedgeArgs {
    delay: Option<Arg<Duration>>,
    max: Option<Arg<u32>>,
    name: Option<Arg<String>>,
    method: Option<Arg<Method>>,
    idempotent: Option<Arg<()>>,
}

const HEDGE_KEYS: &[&str] = &["delay", "max", "name", "method", "idempotent"];

/// The most attempts in all.
const MAX: u32 = resilience_rules::limits::MAX_HEDGED_ATTEMPTS;

fn parse(tokens: TokenStream, errors: &mut Errors) -> HedgeArgs {
    use syn::parse::Parser;
    let mut hedge = HedgeArgs::default();
    let parser = syn::meta::parser(|meta| {
        let Some(key) = args::key_of(&meta) else {
            return Err(meta.error("expected an argument name such as `delay` or `max`"));
        };
        match key.as_str() {
            "delay" => args::one(&mut hedge.delay, &meta, errors, args::duration_value),
            "max" => args::one(&mut hedge.max, &meta, errors, |v| args::count(v, "max")),
            "name" => args::one(&mut hedge.name, &meta, errors, args::name),
            "method" => args::one(&mut hedge.method, &meta, errors, args::method),
            "idempotent" => args::flag(&mut hedge.idempotent, &meta, errors, "idempotent"),
            _ => args::unknown(&meta, &key, errors, "hedge", HEDGE_KEYS, &[]),
        }
    });
    if let Err(err) = parser.parse2(tokens) {
        errors.push(err);
    }
    hedge
}

fn check(hedge: &HedgeArgs, item: &ItemFn, errors: &mut Errors) {
    match &hedge.delay {
        None => errors.push(syn::Error::new(
            proc_macro2::Span::call_site(),
            "`#[hedge]` needs a `delay`: how long an attempt may go unanswered before another starts beside it, e.g. `#[hedge(delay = \"50ms\")]` (about the dependency's 95th-percentile latency)",
        )),
        Some(delay) if delay.get() < MIN_HEDGE_DELAY => errors.push(delay.error(format!(
            "`delay` must be at least {}, not {}: a shorter delay sends every call twice at once",
            duration::display(MIN_HEDGE_DELAY),
            duration::display(delay.get())
        ))),
        Some(_) => {}
    }
    if let Some(max) = &hedge.max
        && !(2..=MAX).contains(&max.get())
    {
        errors.push(max.error(format!(
                "`max = {}`: a hedged call makes 2 to {MAX} attempts in all, the first included (1 would never hedge; each more is one more request in flight at once)",
                max.get()
            )));
    }
    for attr in &item.attrs {
        for (other, why) in [
            ("hedge", "`#[hedge]` is written twice on this fn; keep one"),
            (
                "retry",
                "`#[hedge]` and `#[retry]` on one fn: both send the request again, and together they multiply the attempts; a hedge already starts another attempt after a transient failure, so keep one of them",
            ),
            (
                "circuit_breaker",
                "`#[hedge]` with `#[circuit_breaker]` on one fn is not supported yet: the breaker must count one outcome per hedged call, not one per attempt; put the breaker on a fn that calls this one",
            ),
        ] {
            if validate::is_attribute(attr, other) {
                errors.push(syn::Error::new_spanned(attr, why));
            }
        }
    }
    if let Some(FnArg::Receiver(receiver)) = item.sig.inputs.first()
        && matches!(receiver.kind, syn::ReceiverKind::Reference(_, _, Some(_)))
    {
        errors.push(syn::Error::new_spanned(
                receiver,
                "`#[hedge]` on a fn taking `&mut self`: its attempts run at the same time, and only one of them could hold `&mut self`\n  = help: take `&self` (keep what the attempts change behind a `Mutex` or an atomic), or use `#[retry]`, whose attempts run one after the other",
            ));
    }
}

/// Whether `tokens` hold `ident` (what another attribute of ours, expanded
/// first, leaves in the body).
fn mentions(tokens: TokenStream, ident: &str) -> bool {
    tokens.into_iter().any(|token| match token {
        proc_macro2::TokenTree::Ident(i) => i == ident,
        proc_macro2::TokenTree::Group(group) => mentions(group.stream(), ident),
        _ => false,
    })
}

pub(crate) fn expand(tokens: TokenStream, input: TokenStream) -> TokenStream {
    let mut errors = Errors::default();
    let item: ItemFn = match item::parse(input, "hedge") {
        Ok(item) => item,
        Err(output) => return output,
    };
    let hedge = parse(tokens, &mut errors);
    check(&hedge, &item, &mut errors);
    let block = quote!(#item);
    for (ident, attribute) in [
        ("__RESILIENCE_RETRY", "retry"),
        ("__RESILIENCE_BREAKER", "circuit_breaker"),
    ] {
        if mentions(block.clone(), ident) {
            errors.push(syn::Error::new_spanned(
                &item.sig.ident,
                format!("`#[hedge]` below `#[{attribute}]` on one fn is not supported: a `#[{attribute}]` above it would see every hedged attempt as a call of its own; put `#[hedge]` on a fn that the `#[{attribute}]` fn calls"),
            ));
        }
    }
    validate::fn_shape(&item, false, "hedge", &mut errors);
    let result = sig::result_type(&item.sig, "hedge");
    let mut rewritten = item.clone();
    let params = sig::params(&mut rewritten.sig, true);
    if let Err(err) = idempotency::check_for(
        "hedge",
        hedge.method.as_ref(),
        hedge.idempotent.is_some(),
        &item.sig.ident,
        params.has_idempotency_key,
    ) {
        errors.push(err);
    }
    let result = match result {
        Ok(result) if errors.len() == 0 => result,
        Ok(_) => return item::with_errors(item, errors),
        Err(err) => {
            if item.sig.asyncness.is_some() {
                errors.push(err);
            }
            return item::with_errors(item, errors);
        }
    };
    if params.self_by_value {
        ReplaceSelf::copy().visit_block_mut(&mut rewritten.block);
    }
    let ItemFn {
        attrs,
        vis,
        modifiers: _,
        sig,
        block,
    } = rewritten;
    let name = match &hedge.name {
        Some(name) => {
            let name = &name.value;
            quote!(#name)
        }
        None => {
            let ident = sig.ident.to_string();
            quote!(::core::concat!(::core::module_path!(), "::", #ident))
        }
    };
    let delay = hedge.delay.as_ref().map_or(Duration::ZERO, Arg::get);
    let (secs, nanos) = (delay.as_secs(), delay.subsec_nanos());
    let max = hedge.max.as_ref().map_or(2, Arg::get);
    let per_attempt = &params.per_attempt;
    let checks = crate::expand::error_checks(&result, true);
    let body = match result.nameable {
        true => {
            let ret: &Type = &result.ty;
            quote!({ #(#per_attempt)* let __resilience_ret: #ret = #block; #[allow(unreachable_code)] __resilience_ret })
        }
        false => quote!({ #(#per_attempt)* #block }),
    };
    let call = quote_spanned! {result.error_span=>
        ::resilience::__private::hedge(&__RESILIENCE_HEDGE, async || #body).await
    };
    quote! {
        #(#attrs)*
        #vis #sig {
            static __RESILIENCE_HEDGE: ::resilience::__private::HedgeSite =
                ::resilience::__private::HedgeSite::new(#name, ::core::time::Duration::new(#secs, #nanos), #max);
            #checks
            #call
        }
    }
}
