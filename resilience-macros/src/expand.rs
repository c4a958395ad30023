//! Code generation, from arguments and a signature that were validated:
//! nothing here can fail.

use std::time::Duration;

use proc_macro2::{Literal, Span, TokenStream, TokenTree};
use quote::{quote, quote_spanned};
use resilience_rules::jitter::Kind;
use syn::ItemFn;
use syn::visit_mut::VisitMut;

use crate::args::{
    Arg, BreakerArgs, BreakerPreset, LimitPriority, RateArg, RetryArgs, RetryPreset,
};
use crate::async_trait::AsyncTraitBody;
use crate::sig::{Params, ReplaceSelf, ResultType};

/// Everything `expand` needs about one protected fn.
pub(crate) struct Plan<'a> {
    pub(crate) item: ItemFn,
    pub(crate) retry: Option<&'a RetryArgs>,
    pub(crate) breaker: Option<&'a BreakerArgs>,
    pub(crate) params: Params,
    pub(crate) result: ResultType,
    /// The method was rewritten by `#[async_trait]` first.
    pub(crate) async_trait: Option<AsyncTraitBody>,
}

/// Input:
///
/// ```text
/// #[circuit_breaker(name = "user")]
/// #[retry(max = 3)]
/// async fn get_user(&self, id: i64) -> Result<User, Error> { body }
/// ```
///
/// Output:
///
/// ```text
/// async fn get_user(&self, id: i64) -> Result<User, Error> {
///     static BREAKER: BreakerSite = BreakerSite::new("user", <config>);
///     let permit = match admit(&BREAKER) {
///         Ok(permit) => permit,
///         Err(down) => return reject(down),
///     };
///     let result = {
///         static RETRY: RetrySite = RetrySite::new("<module>::get_user", <policy>);
///         let mut chain = retry(&RETRY);
///         loop {
///             let attempt = async { let id = clone_arg(&id); let ret: Result<User, Error> = { body }; ret };
///             match chain.attempt(attempt).await { Break(result) => break result, Continue(()) => {} }
///         }
///     };
///     settle(permit, result)
/// }
/// ```
pub(crate) fn expand(plan: Plan<'_>) -> TokenStream {
    let Plan {
        mut item,
        retry,
        breaker,
        mut params,
        result,
        async_trait,
    } = plan;
    if params.self_by_value {
        ReplaceSelf::copy().visit_block_mut(&mut item.block);
    }
    let ItemFn {
        attrs,
        vis,
        // Only `default` (specialization), which `ItemFn` does not print
        // either.
        modifiers: _,
        sig,
        mut block,
    } = item;
    let mut wrap = None;
    if let Some(parts) = async_trait {
        // `#[async_trait]` moved `self` into `__self`.
        for arg in &mut params.forward {
            if arg.to_string() == "self" {
                *arg = quote!(__self);
            }
        }
        params.per_attempt = parts.per_attempt;
        *block = parts.block;
        wrap = Some((parts.box_pin, parts.prelude));
    }
    if let Some(root) = breaker
        .and_then(|args| args.key.as_ref())
        .and_then(|key| crate::validate::key_root(&key.value))
        .filter(|root| *root != "self")
    {
        // An argument read only by the key is still copied for each
        // attempt, like every by-value argument: that copy is not unused.
        if params.copied.contains(root) {
            params.per_attempt.push(quote!(let _ = &#root;));
        }
    }
    let per_attempt = &params.per_attempt;
    let ret = &result.ty;
    // The body keeps its own spans and is checked against the user's
    // return type, so a type error lands where the user wrote it.
    let attempt = if result.nameable {
        quote! {
            async {
                #(#per_attempt)*
                let __resilience_ret: #ret = #block;
                #[allow(unreachable_code)]
                __resilience_ret
            }
        }
    } else {
        quote!(async { #(#per_attempt)* #block })
    };

    let error_span = result.error_span;
    // `limit = "…"`: each attempt takes a slot of the registry's limiter of
    // that name (a slot per attempt, not per call); without a `#[retry]`,
    // the breaker's one call is the attempt.
    let limit = match (retry, breaker) {
        (Some(args), _) => args.limit.as_ref().map(|l| {
            (
                l,
                args.priority.as_ref(),
                limit_rate(args.rate.as_ref(), args.burst.as_ref()),
            )
        }),
        (None, Some(args)) => args.limit.as_ref().map(|l| {
            (
                l,
                args.priority.as_ref(),
                limit_rate(args.rate.as_ref(), args.burst.as_ref()),
            )
        }),
        (None, None) => None,
    };
    // `rate = "…"`: declared to the registry by the site (checked against
    // the limiter's other sites when it is built) and kept by the limit
    // site, which builds the limiter from it when nothing else configures
    // the name.
    let with_limit_rate = match &limit {
        Some((_, _, Some(rate))) => quote!(.with_limit_rate(#rate)),
        _ => TokenStream::new(),
    };
    let (limit_site, attempt) = match limit {
        Some((limit, priority, rate)) => {
            let limit = &limit.value;
            let priority = match priority.map(|p| p.get()) {
                Some(LimitPriority::Critical) => quote!(Critical),
                Some(LimitPriority::Sheddable) => quote!(Sheddable),
                Some(LimitPriority::Default) | None => quote!(Default),
            };
            let with_rate = rate.map(|rate| quote!(.with_rate(#rate)));
            (
                quote! {
                    static __RESILIENCE_LIMIT: ::resilience::__private::LimitSite =
                        ::resilience::__private::LimitSite::new(
                            #limit,
                            ::resilience::limit::Priority::#priority,
                        )#with_rate;
                },
                quote!(::resilience::__private::limited(&__RESILIENCE_LIMIT, #attempt)),
            )
        }
        None => (TokenStream::new(), attempt),
    };
    let mut body = match retry {
        Some(args) => {
            let name = site_name(args.name.as_ref().map(|n| n.value.as_str()), &sig.ident);
            let policy = policy(args);
            let mut site = quote!(::resilience::__private::RetrySite::new(#name, #policy));
            if args.name.is_none() {
                site.extend(quote!(.with_default_name()));
                if sig.receiver().is_some() {
                    site.extend(quote!(.in_impl()));
                }
            }
            if let Some(breaker) = breaker.and_then(|b| b.name.as_ref()) {
                let breaker = &breaker.value;
                site.extend(quote!(.with_target(#breaker)));
            }
            if let Some(budget) = &args.budget {
                let budget = &budget.value;
                site.extend(quote!(.with_budget(#budget)));
            }
            if let Some(limit) = &args.limit {
                let limit = &limit.value;
                site.extend(quote!(.with_limit(#limit)#with_limit_rate));
            }
            // A method names its impl's type, for the site's default name.
            let owner = if sig.receiver().is_some() {
                quote!(|| ::core::option::Option::Some(::core::any::type_name::<Self>()))
            } else {
                quote!(|| ::core::option::Option::None)
            };
            // The chain classifies with `when`, or else the error's
            // `Classify` impl.
            let when = match &args.when {
                Some(when) => {
                    let when = &when.value;
                    quote!(#when)
                }
                None => quote!(::resilience::__private::ByClassify),
            };
            // An error type that is a `std::error::Error + Send + Sync +
            // 'static` is kept by the chain as the cause of the runtime
            // error that may end it, chosen by autoref at this site.
            let when = if result.nameable {
                quote! {{
                    #[allow(unused_imports)]
                    use ::resilience::__private::{ProbeAny as _, ProbeError as _};
                    (&&::resilience::__private::Probe::<
                        <#ret as ::resilience::__private::ResultError>::Error,
                    >::NEW)
                        .keeping(#when)
                }}
            } else {
                when
            };
            let chain = quote!(::resilience::__private::retry(&__RESILIENCE_RETRY, #owner, #when));
            // Trait errors on the error type (not `Classify`, not
            // `From<resilience::Error>`) point at the user's `E`; without
            // `when`, the chain's bounds name `Classify` itself.
            let attempt_fn = match &args.when {
                Some(_) => quote_spanned!(error_span=> attempt),
                None => quote_spanned!(error_span=> attempt_classified),
            };
            let run = quote_spanned! {error_span=>
                __resilience_chain.#attempt_fn(__resilience_attempt).await
            };
            quote! {
                static __RESILIENCE_RETRY: ::resilience::__private::RetrySite = #site;
                ::resilience::__private::register_site!(__RESILIENCE_RETRY_SITE = __RESILIENCE_RETRY);
                #limit_site
                let mut __resilience_chain = #chain;
                loop {
                    let __resilience_attempt = #attempt;
                    match #run {
                        ::core::ops::ControlFlow::Break(__resilience_result) => break __resilience_result,
                        ::core::ops::ControlFlow::Continue(()) => {}
                    }
                }
            }
        }
        None => quote!(#attempt.await),
    };

    if let Some(args) = breaker {
        let name = site_name(args.name.as_ref().map(|n| n.value.as_str()), &sig.ident);
        let config = breaker_config(args);
        // A `#[retry]` below declared the limit at its own site.
        let (limit_site, with_limit) = match (&args.limit, retry) {
            (Some(limit), None) => {
                let limit = &limit.value;
                (
                    limit_site.clone(),
                    quote!(.with_limit(#limit)#with_limit_rate),
                )
            }
            _ => (TokenStream::new(), TokenStream::new()),
        };
        // The breaker is asked inline, at the first poll: its permit lives
        // in the fn's own future, and dropping the call drops the permit,
        // which counts nothing (a cancelled call).
        // Without a chain, the breaker's cut bounds the call (the caller's
        // deadline, the call or probe timeout); with one, `max_elapsed`.
        let inner = match retry {
            Some(_) => quote!({ #body }),
            None => quote!(__resilience_permit.bound(#attempt).await),
        };
        let (site, admit, alone) = match &args.key {
            None => (
                quote! {
                    static __RESILIENCE_BREAKER: ::resilience::__private::BreakerSite =
                        ::resilience::__private::BreakerSite::new(#name, #config)#with_limit;
                    #limit_site
                    ::resilience::__private::register_site!(__RESILIENCE_BREAKER_SITE = __RESILIENCE_BREAKER);
                },
                quote!(::resilience::__private::admit(&__RESILIENCE_BREAKER)),
                quote_spanned! {error_span=>
                    ::resilience::__private::breaker(&__RESILIENCE_BREAKER, __resilience_attempt).await
                },
            ),
            Some(key) => {
                let family = family_config(args, config);
                let mut key = key.value.clone();
                if wrap.is_some() {
                    // `#[async_trait]` moved `self` into `__self`.
                    ReplaceSelf("__self").visit_expr_mut(&mut key);
                }
                // A key of the wrong type is reported at the key.
                let key_span = syn::spanned::Spanned::span(&key);
                let member = quote_spanned! {key_span=>
                    ::resilience::__private::member(&__RESILIENCE_BREAKER, &(#key))
                };
                (
                    // The member is taken before the body runs, which may
                    // move the argument the key is read from.
                    quote! {
                        static __RESILIENCE_BREAKER: ::resilience::__private::FamilySite =
                            ::resilience::__private::FamilySite::new(#name, #family)#with_limit;
                        #limit_site
                        ::resilience::__private::register_site!(__RESILIENCE_BREAKER_SITE = __RESILIENCE_BREAKER);
                        let __resilience_member = #member;
                    },
                    quote!(::resilience::__private::admit_member(&__resilience_member)),
                    quote_spanned! {error_span=>
                        ::resilience::__private::member_call(&__resilience_member, __resilience_attempt).await
                    },
                )
            }
        };
        body = match &args.fallback {
            Some(fallback) => {
                let fallback = &fallback.value;
                let forward = &params.forward;
                let settle = quote_spanned! {error_span=>
                    ::resilience::__private::settle_or_fallback(&__RESILIENCE_BREAKER, __resilience_permit, __resilience_result)
                };
                // A fallback that does not take the error last is reported
                // at its path, the callee's span, by `FallbackFn`'s
                // message. The arguments are located at the attribute: at
                // the parameters' own spans rustc suggests a "fix" that
                // deletes part of the signature.
                let forward = forward
                    .iter()
                    .map(|arg| respan(arg.clone(), Span::call_site()));
                let call = quote_spanned! {syn::spanned::Spanned::span(fallback)=>
                    ::resilience::__private::fallback(__resilience_error, #fallback, (#(#forward,)*))
                };
                quote! {
                    #site
                    let __resilience_outcome = match #admit {
                        ::core::result::Result::Ok(__resilience_permit) => {
                            let __resilience_result = #inner;
                            #settle
                        }
                        ::core::result::Result::Err(__resilience_down) => {
                            ::resilience::__private::rejected(&__RESILIENCE_BREAKER, __resilience_down)
                        }
                    };
                    match __resilience_outcome {
                        ::resilience::__private::Answer::Done(__resilience_result) => __resilience_result,
                        ::resilience::__private::Answer::Fallback(__resilience_error) => {
                            let __resilience_answer = #call.await;
                            // The answer's type says which fallback it is: a
                            // value marked stale, a part marked unavailable.
                            ::resilience::__private::fell_back(&__RESILIENCE_BREAKER, {
                                use ::resilience::__private::FallbackKind as _;
                                (&__resilience_answer).fallback_kind()
                            });
                            __resilience_answer
                        }
                    }
                }
            }
            // Alone, the breaker's own `Call` future measured faster than
            // the permit held across the attempt's `.await`.
            None if retry.is_none() => {
                quote! {
                    #site
                    let __resilience_attempt = #attempt;
                    #alone
                }
            }
            None => {
                let settle = quote_spanned! {error_span=>
                    ::resilience::__private::settle(__resilience_permit, __resilience_result)
                };
                let reject = quote_spanned! {error_span=>
                    ::resilience::__private::reject(__resilience_down)
                };
                // The permit is bound by a `let` of its own: a `match`
                // scrutinee would live across the `.await`, and the permit
                // would be copied out of it into the fn's future.
                quote! {
                    #site
                    let __resilience_permit = match #admit {
                        ::core::result::Result::Ok(__resilience_permit) => __resilience_permit,
                        ::core::result::Result::Err(__resilience_down) => return #reject,
                    };
                    let __resilience_result = #inner;
                    #settle
                }
            }
        };
    }

    let classified = breaker.is_some() || retry.is_some_and(|args| args.when.is_none());
    let checks = error_checks(&result, classified);
    body = quote!(#checks #body);

    if let Some((box_pin, prelude)) = wrap {
        body = quote! {
            #box_pin(async move {
                #(#prelude)*
                #body
            })
        };
    }
    quote! {
        #(#attrs)*
        #vis #sig {
            #body
        }
    }
}

/// What the expansion needs of the error type `E`, asked through the
/// traits' own paths at the user's `E`: `E: Classify` (unless a `when`
/// classifies), and `E: From<resilience::Error>`. A missing impl is then
/// reported there, once, with the trait's message, rather than as a bound
/// of the runtime's internal fns (the same error at the same place is not
/// repeated). Nothing runs: the fns take the trait methods and do nothing.
pub(crate) fn error_checks(result: &ResultType, classified: bool) -> TokenStream {
    if !result.nameable {
        return TokenStream::new();
    }
    let (ret, span) = (&result.ty, result.error_span);
    let classify = classified.then(|| {
        quote_spanned! {span=>
            ::resilience::__private::classified::<#ret>(::resilience::retry::Classify::classify);
        }
    });
    quote_spanned! {span=>
        #classify
        ::resilience::__private::carries_runtime_errors::<#ret>(::resilience::retry::FromRuntimeError::from_runtime);
    }
}

/// `rate = "100/s", burst = 20` as the runtime's `LimitRate`, in a const
/// expression: the rate was read and checked at compile time.
fn limit_rate(rate: Option<&Arg<RateArg>>, burst: Option<&Arg<u32>>) -> Option<TokenStream> {
    let rate = rate?.get();
    let count = rate.count;
    let nanos = u64::try_from(rate.period.as_nanos()).unwrap_or(u64::MAX);
    let burst = match burst {
        Some(burst) => {
            let burst = burst.get();
            quote!(::core::option::Option::Some(#burst))
        }
        None => quote!(::core::option::Option::None),
    };
    Some(quote! {
        ::resilience::__private::LimitRate::new(
            ::resilience::limit::Rate::new(#count, ::core::time::Duration::from_nanos(#nanos)),
            #burst,
        )
    })
}

/// The name the startup config and the metrics know the site by: the one
/// given, or `module::path::fn_name`.
fn site_name(name: Option<&str>, ident: &syn::Ident) -> TokenStream {
    match name {
        Some(name) => quote!(#name),
        None => {
            let ident = ident.to_string();
            quote!(::core::concat!(::core::module_path!(), "::", #ident))
        }
    }
}

fn duration(value: Duration) -> TokenStream {
    let secs = Literal::u64_suffixed(value.as_secs());
    let nanos = Literal::u32_suffixed(value.subsec_nanos());
    quote!(::core::time::Duration::new(#secs, #nanos))
}

fn policy(args: &RetryArgs) -> TokenStream {
    let preset = args.preset.as_ref().map_or(RetryPreset::Http, |p| p.get());
    let mut builder = match preset {
        RetryPreset::Http => quote!(::resilience::retry::PolicyBuilder::http()),
        RetryPreset::Background => quote!(::resilience::retry::PolicyBuilder::background()),
        RetryPreset::DbTx => quote!(::resilience::retry::PolicyBuilder::db_tx()),
    };
    if let Some(max) = &args.max {
        let max = Literal::u32_suffixed(max.get());
        builder.extend(quote!(.with_max_attempts(#max)));
    }
    if let Some(initial) = &args.initial {
        let initial = duration(initial.get());
        builder.extend(quote!(.with_initial(#initial)));
    }
    if let Some(multiplier) = &args.multiplier {
        let multiplier = Literal::f64_suffixed(multiplier.get());
        builder.extend(quote!(.with_multiplier(#multiplier)));
    }
    if let Some(max_interval) = &args.max_interval {
        let max_interval = duration(max_interval.get());
        builder.extend(quote!(.with_max_interval(#max_interval)));
    }
    if let Some(arg) = &args.jitter
        && let Ok((kind, amount)) = crate::validate::jitter(&arg.value, preset)
    {
        let amount = Literal::f64_suffixed(amount);
        let jitter = match kind {
            Kind::Symmetric => quote!(::resilience::retry::Jitter::Symmetric(#amount)),
            Kind::Additive => quote!(::resilience::retry::Jitter::Additive(#amount)),
            Kind::Full => quote!(::resilience::retry::Jitter::Full),
            Kind::Decorrelated => quote!(::resilience::retry::Jitter::Decorrelated),
        };
        builder.extend(quote!(.with_jitter(#jitter)));
    }
    if let Some(max_elapsed) = &args.max_elapsed {
        let max_elapsed = duration(max_elapsed.get());
        builder.extend(quote!(.with_max_elapsed(#max_elapsed)));
    }
    if let Some(timeout) = &args.attempt_timeout {
        let timeout = duration(timeout.get());
        builder.extend(quote!(.with_attempt_timeout(#timeout)));
    }
    builder
}

fn breaker_config(args: &BreakerArgs) -> TokenStream {
    let mut config = match args.preset.as_ref().map(|p| p.get()) {
        None => quote!(::resilience::breaker::BreakerConfig::new()),
        Some(BreakerPreset::Critical) => quote!(::resilience::breaker::BreakerConfig::critical()),
        Some(BreakerPreset::Relaxed) => quote!(::resilience::breaker::BreakerConfig::relaxed()),
    };
    if let Some(min) = &args.min {
        let min = Literal::u32_suffixed(min.get());
        config.extend(quote!(.with_min_requests(#min)));
    }
    if let Some(ratio) = &args.ratio {
        let ratio = Literal::f64_suffixed(ratio.get());
        config.extend(quote!(.with_failure_ratio(#ratio)));
    }
    if let Some(window) = &args.window {
        let window = duration(window.get());
        config.extend(quote!(.with_window(#window)));
    }
    if let Some(calls) = &args.window_calls {
        let calls = Literal::u32_suffixed(calls.get());
        config.extend(quote!(.with_count_window(#calls)));
    }
    if let Some(cooldown) = &args.cooldown {
        let cooldown = duration(cooldown.get());
        config.extend(quote!(.with_cooldown(#cooldown)));
    }
    if let Some(half_open) = &args.half_open {
        let half_open = Literal::u32_suffixed(half_open.get());
        config.extend(quote!(.with_half_open(#half_open)));
    }
    if let Some(timeout) = &args.probe_timeout {
        let timeout = duration(timeout.get());
        config.extend(quote!(.with_probe_timeout(#timeout)));
    }
    if let Some(timeout) = &args.call_timeout {
        let timeout = duration(timeout.get());
        config.extend(quote!(.with_call_timeout(#timeout)));
    }
    if let Some(slow) = &args.slow_call {
        let slow = slow.get();
        let threshold = duration(slow.threshold);
        let ratio = Literal::f64_suffixed(slow.ratio);
        config.extend(quote!(.with_slow_call(#threshold, #ratio)));
    }
    config
}

/// The family of a keyed breaker: the members' `config` and the family's
/// own bounds.
fn family_config(args: &BreakerArgs, config: TokenStream) -> TokenStream {
    let mut family = quote!(::resilience::breaker::FamilyConfig::new().with_breaker(#config));
    if let Some(max) = &args.max_members {
        let max = Literal::u32_suffixed(max.get());
        family.extend(quote!(.with_max_members(#max)));
    }
    if let Some(idle) = &args.idle {
        let idle = duration(idle.get());
        family.extend(quote!(.with_idle(#idle)));
    }
    family
}

/// `tokens`, every one located at `span` (groups and their contents too),
/// each keeping its own hygiene.
fn respan(tokens: TokenStream, span: Span) -> TokenStream {
    tokens
        .into_iter()
        .map(|mut token| {
            if let TokenTree::Group(group) = &token {
                let mut inner =
                    proc_macro2::Group::new(group.delimiter(), respan(group.stream(), span));
                inner.set_span(group.span().located_at(span));
                token = TokenTree::Group(inner);
            }
            token.set_span(token.span().located_at(span));
            token
        })
        .collect()
}
