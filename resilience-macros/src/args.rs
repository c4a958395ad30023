//! Parsing the attribute arguments: syntax and literal types only. Ranges
//! and rules between arguments are checked in `validate`.
//!
//! Every error is collected rather than returned at once, so that one build
//! shows every mistake in the attribute.

use std::time::Duration;

use proc_macro2::TokenStream;
use quote::{ToTokens, quote};
use syn::meta::ParseNestedMeta;
use syn::parse::Parser;
use syn::{Expr, ExprLit, ExprUnary, Lit, Token, UnOp};

use crate::duration;
use crate::errors::Errors;
use resilience_rules::suggest::did_you_mean;

/// A parsed value with the tokens of its whole `key = value`, so that an
/// error underlines the argument at fault.
pub(crate) struct Arg<T> {
    pub(crate) value: T,
    tokens: TokenStream,
}

impl<T> Arg<T> {
    pub(crate) fn error(&self, message: impl std::fmt::Display) -> syn::Error {
        syn::Error::new_spanned(&self.tokens, message)
    }
}

impl<T: Copy> Arg<T> {
    pub(crate) fn get(&self) -> T {
        self.value
    }
}

/// The arguments of `#[retry]`.
#[derive(Default)]
pub(crate) struct RetryArgs {
    pub(crate) max: Option<Arg<u32>>,
    pub(crate) initial: Option<Arg<Duration>>,
    pub(crate) multiplier: Option<Arg<f64>>,
    pub(crate) max_interval: Option<Arg<Duration>>,
    pub(crate) jitter: Option<Arg<JitterArg>>,
    pub(crate) max_elapsed: Option<Arg<Duration>>,
    pub(crate) attempt_timeout: Option<Arg<Duration>>,
    pub(crate) preset: Option<Arg<RetryPreset>>,
    pub(crate) name: Option<Arg<String>>,
    pub(crate) budget: Option<Arg<String>>,
    /// The load limiter each attempt goes through (`resilience::limit`).
    pub(crate) limit: Option<Arg<String>>,
    /// The attempts' priority in that limiter.
    pub(crate) priority: Option<Arg<LimitPriority>>,
    /// The rate limit of that limiter (`rate = "100/s"`).
    pub(crate) rate: Option<Arg<RateArg>>,
    /// Its burst.
    pub(crate) burst: Option<Arg<u32>>,
    pub(crate) when: Option<Arg<syn::Path>>,
    pub(crate) method: Option<Arg<Method>>,
    pub(crate) idempotent: Option<Arg<()>>,
    /// How the client the fn calls retries by itself, declared for a fn
    /// that fails with an AWS SDK error (`validate::client_retry`).
    pub(crate) client_retry: Option<Arg<ClientRetry>>,
}

/// `client_retry = "…"`: how the client inside a retried fn retries on its
/// own, so that a call has one retry loop.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum ClientRetry {
    /// The client runs a policy through `resilience::aws::AwsRetry`, which
    /// makes one attempt inside another chain's.
    AwsRetry,
    /// The client's own retry is off (`RetryConfig::disabled()`).
    Disabled,
}

/// The arguments of `#[circuit_breaker]`.
#[derive(Default)]
pub(crate) struct BreakerArgs {
    pub(crate) name: Option<Arg<String>>,
    pub(crate) ratio: Option<Arg<f64>>,
    pub(crate) min: Option<Arg<u32>>,
    pub(crate) window: Option<Arg<Duration>>,
    pub(crate) window_calls: Option<Arg<u32>>,
    pub(crate) cooldown: Option<Arg<Duration>>,
    pub(crate) half_open: Option<Arg<u32>>,
    pub(crate) probe_timeout: Option<Arg<Duration>>,
    pub(crate) call_timeout: Option<Arg<Duration>>,
    pub(crate) slow_call: Option<Arg<SlowCall>>,
    pub(crate) preset: Option<Arg<BreakerPreset>>,
    pub(crate) fallback: Option<Arg<syn::Path>>,
    /// The expression of `key = …`: the breaker is a family's member.
    pub(crate) key: Option<Arg<Expr>>,
    pub(crate) max_members: Option<Arg<u32>>,
    pub(crate) idle: Option<Arg<Duration>>,
    /// The load limiter each call goes through, without a `#[retry]`
    /// below (with one, each attempt takes the slot: `#[retry(limit)]`).
    pub(crate) limit: Option<Arg<String>>,
    /// The calls' priority in that limiter.
    pub(crate) priority: Option<Arg<LimitPriority>>,
    /// The rate limit of that limiter (`rate = "100/s"`).
    pub(crate) rate: Option<Arg<RateArg>>,
    /// Its burst.
    pub(crate) burst: Option<Arg<u32>>,
}

/// `rate = "100/s"`: read by `resilience_rules::rate`, the config file's
/// grammar, so the attribute and the file accept the same texts.
#[derive(Clone, Copy)]
pub(crate) struct RateArg {
    pub(crate) count: u32,
    pub(crate) period: Duration,
}

/// `jitter = 0.3` or `jitter = "full"`, read by `resilience_rules::jitter`
/// in `validate`.
#[derive(Clone)]
pub(crate) enum JitterArg {
    /// A bare number: the amount of the preset's kind.
    Amount(f64),
    /// A string: a kind, with an optional amount.
    Named(String),
}

/// `slow_call(threshold = "2s", ratio = 0.5)`.
#[derive(Clone, Copy)]
pub(crate) struct SlowCall {
    pub(crate) threshold: Duration,
    pub(crate) ratio: f64,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum RetryPreset {
    Http,
    Background,
    DbTx,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum BreakerPreset {
    Critical,
    Relaxed,
}

/// An HTTP method, as declared by `method = "…"`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Method {
    Get,
    Head,
    Options,
    Trace,
    Put,
    Delete,
    Post,
    Patch,
}

impl Method {
    const ALL: &[(&str, Method)] = &[
        ("GET", Method::Get),
        ("HEAD", Method::Head),
        ("OPTIONS", Method::Options),
        ("TRACE", Method::Trace),
        ("PUT", Method::Put),
        ("DELETE", Method::Delete),
        ("POST", Method::Post),
        ("PATCH", Method::Patch),
    ];

    pub(crate) fn as_str(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(_, method)| *method == self)
            .map_or("?", |(name, _)| name)
    }

    /// GET, HEAD, OPTIONS and TRACE are safe; PUT and DELETE idempotent by
    /// contract; POST and PATCH neither (`resilience_rules::idempotency`).
    pub(crate) fn is_idempotent(self) -> bool {
        !resilience_rules::idempotency::needs_key(self.as_str())
    }
}

const RETRY_KEYS: &[&str] = &[
    "max",
    "max_attempts",
    "initial",
    "multiplier",
    "max_interval",
    "jitter",
    "max_elapsed",
    "attempt_timeout",
    "preset",
    "name",
    "budget",
    "limit",
    "priority",
    "rate",
    "burst",
    "when",
    "method",
    "idempotent",
    "client_retry",
];

const BREAKER_KEYS: &[&str] = &[
    "name",
    "ratio",
    "min",
    "window",
    "window_calls",
    "cooldown",
    "half_open",
    "probe_timeout",
    "call_timeout",
    "slow_call",
    "preset",
    "fallback",
    "key",
    "max_members",
    "idle",
    "limit",
    "priority",
    "rate",
    "burst",
];

/// Names other libraries use, mapped to ours.
const ALIASES: &[(&str, &str)] = &[
    ("attempts", "max"),
    ("retries", "max"),
    ("max_retries", "max"),
    ("times", "max"),
    ("delay", "initial"),
    ("initial_interval", "initial"),
    ("initial_delay", "initial"),
    ("factor", "multiplier"),
    ("max_delay", "max_interval"),
    ("timeout", "attempt_timeout"),
    ("per_attempt_timeout", "attempt_timeout"),
    ("deadline", "max_elapsed"),
    ("max_elapsed_time", "max_elapsed"),
    ("failure_ratio", "ratio"),
    ("failure_rate", "ratio"),
    ("threshold", "ratio"),
    ("min_requests", "min"),
    ("minimum_requests", "min"),
    ("open_for", "cooldown"),
    ("wait_duration_in_open_state", "cooldown"),
    ("probes", "half_open"),
    ("half_open_probes", "half_open"),
    ("retry_if", "when"),
    ("classifier", "when"),
    ("sdk_retry", "client_retry"),
    ("rate_limit", "rate"),
    ("max_burst", "burst"),
];

/// Keys that ask for an unbounded chain, refused outright.
const UNBOUNDED_KEYS: &[&str] = &["unbounded", "forever", "infinite", "unlimited", "endless"];

/// Parses `#[retry(...)]`'s arguments. Errors are added to `errors`; the
/// arguments that parsed are returned either way.
pub(crate) fn parse_retry(tokens: TokenStream, errors: &mut Errors) -> RetryArgs {
    let mut args = RetryArgs::default();
    let parser = syn::meta::parser(|meta| {
        let Some(key) = key_of(&meta) else {
            return Err(meta.error("expected an argument name such as `max` or `initial`"));
        };
        match key.as_str() {
            // One argument, two spellings: the config file's `max_attempts`
            // is accepted here too.
            "max" | "max_attempts" => one(&mut args.max, &meta, errors, |v| attempts(v, &key)),
            "initial" => one(&mut args.initial, &meta, errors, duration_value),
            "multiplier" => one(&mut args.multiplier, &meta, errors, float),
            "max_interval" => one(&mut args.max_interval, &meta, errors, duration_value),
            "jitter" => one(&mut args.jitter, &meta, errors, jitter),
            "max_elapsed" => one(&mut args.max_elapsed, &meta, errors, elapsed_value),
            "attempt_timeout" => one(&mut args.attempt_timeout, &meta, errors, duration_value),
            "preset" => one(&mut args.preset, &meta, errors, |v| {
                choice(
                    v,
                    "preset",
                    &[
                        ("http", RetryPreset::Http),
                        ("background", RetryPreset::Background),
                        ("db_tx", RetryPreset::DbTx),
                    ],
                )
            }),
            "name" => one(&mut args.name, &meta, errors, name),
            "budget" => one(&mut args.budget, &meta, errors, budget_name),
            "limit" => one(&mut args.limit, &meta, errors, limit_name),
            "priority" => one(&mut args.priority, &meta, errors, priority),
            "rate" => one(&mut args.rate, &meta, errors, rate),
            "burst" => one(&mut args.burst, &meta, errors, |v| count(v, "burst")),
            "when" => one(&mut args.when, &meta, errors, |v| {
                path(v, "when", "my_classifier")
            }),
            "method" => one(&mut args.method, &meta, errors, method),
            "idempotent" => flag(&mut args.idempotent, &meta, errors, "idempotent"),
            "client_retry" => one(&mut args.client_retry, &meta, errors, |v| {
                choice(
                    v,
                    "client_retry",
                    &[
                        ("AwsRetry", ClientRetry::AwsRetry),
                        ("disabled", ClientRetry::Disabled),
                    ],
                )
            }),
            _ => unknown(&meta, &key, errors, "retry", RETRY_KEYS, BREAKER_KEYS),
        }
    });
    if let Err(err) = parser.parse2(tokens) {
        errors.push(err);
    }
    args
}

/// Parses `#[circuit_breaker(...)]`'s arguments, like [`parse_retry`].
pub(crate) fn parse_breaker(tokens: TokenStream, errors: &mut Errors) -> BreakerArgs {
    let mut args = BreakerArgs::default();
    let parser = syn::meta::parser(|meta| {
        let Some(key) = key_of(&meta) else {
            return Err(meta.error("expected an argument name such as `name` or `ratio`"));
        };
        match key.as_str() {
            "name" => one(&mut args.name, &meta, errors, name),
            "ratio" => one(&mut args.ratio, &meta, errors, float),
            "min" => one(&mut args.min, &meta, errors, |v| count(v, "min")),
            "window" => one(&mut args.window, &meta, errors, duration_value),
            "window_calls" => one(&mut args.window_calls, &meta, errors, |v| {
                count(v, "window_calls")
            }),
            "cooldown" => one(&mut args.cooldown, &meta, errors, duration_value),
            "half_open" => one(&mut args.half_open, &meta, errors, |v| {
                count(v, "half_open")
            }),
            "probe_timeout" => one(&mut args.probe_timeout, &meta, errors, duration_value),
            "call_timeout" => one(&mut args.call_timeout, &meta, errors, duration_value),
            "slow_call" => slow_call(&mut args.slow_call, &meta, errors),
            "preset" => one(&mut args.preset, &meta, errors, |v| {
                choice(
                    v,
                    "preset",
                    &[
                        ("critical", BreakerPreset::Critical),
                        ("relaxed", BreakerPreset::Relaxed),
                    ],
                )
            }),
            "fallback" => one(&mut args.fallback, &meta, errors, |v| {
                path(v, "fallback", "cached_user")
            }),
            "key" => one(&mut args.key, &meta, errors, family_key),
            "max_members" => one(&mut args.max_members, &meta, errors, |v| {
                count(v, "max_members")
            }),
            "idle" => one(&mut args.idle, &meta, errors, duration_value),
            "limit" => one(&mut args.limit, &meta, errors, limit_name),
            "priority" => one(&mut args.priority, &meta, errors, priority),
            "rate" => one(&mut args.rate, &meta, errors, rate),
            "burst" => one(&mut args.burst, &meta, errors, |v| count(v, "burst")),
            _ => unknown(
                &meta,
                &key,
                errors,
                "circuit_breaker",
                BREAKER_KEYS,
                RETRY_KEYS,
            ),
        }
    });
    if let Err(err) = parser.parse2(tokens) {
        errors.push(err);
    }
    args
}

pub(crate) fn key_of(meta: &ParseNestedMeta<'_>) -> Option<String> {
    meta.path.get_ident().map(|ident| ident.to_string())
}

/// Parses `key = value` into `slot`, reporting a duplicate key or a value
/// of the wrong kind without stopping.
pub(crate) fn one<T>(
    slot: &mut Option<Arg<T>>,
    meta: &ParseNestedMeta<'_>,
    errors: &mut Errors,
    convert: impl FnOnce(&Expr) -> syn::Result<T>,
) -> syn::Result<()> {
    let key = &meta.path;
    if !meta.input.peek(Token![=]) {
        let name = key.to_token_stream();
        return Err(meta.error(format!("`{name}` needs a value: `{name} = …`")));
    }
    let value: Expr = meta.value()?.parse()?;
    let tokens = quote!(#key = #value);
    if slot.is_some() {
        let name = key.to_token_stream().to_string();
        let message = match name.as_str() {
            "max" | "max_attempts" => {
                "`max` specified more than once (`max_attempts` is the same argument)".to_owned()
            }
            _ => format!("`{name}` specified more than once"),
        };
        errors.push(syn::Error::new_spanned(&tokens, message));
        return Ok(());
    }
    match convert(&value) {
        Ok(value) => *slot = Some(Arg { value, tokens }),
        Err(err) => errors.push(err),
    }
    Ok(())
}

pub(crate) fn flag(
    slot: &mut Option<Arg<()>>,
    meta: &ParseNestedMeta<'_>,
    errors: &mut Errors,
    name: &str,
) -> syn::Result<()> {
    let key = &meta.path;
    let mut tokens = key.to_token_stream();
    if meta.input.peek(Token![=]) {
        let value: Expr = meta.value()?.parse()?;
        tokens = quote!(#key = #value);
        errors.push(syn::Error::new_spanned(
            &tokens,
            format!("`{name}` takes no value: write `{name}` alone to assert that retrying this fn is safe"),
        ));
        return Ok(());
    }
    if slot.is_some() {
        errors.push(syn::Error::new_spanned(
            &tokens,
            format!("`{name}` specified more than once"),
        ));
        return Ok(());
    }
    *slot = Some(Arg { value: (), tokens });
    Ok(())
}

pub(crate) fn unknown(
    meta: &ParseNestedMeta<'_>,
    key: &str,
    errors: &mut Errors,
    attribute: &str,
    keys: &[&'static str],
    other_keys: &[&str],
) -> syn::Result<()> {
    let key_tokens = meta.path.to_token_stream();
    // Consume the value, whatever its form, to go on with the next argument.
    let mut tokens = key_tokens.clone();
    if meta.input.peek(Token![=]) {
        let value: Expr = meta.value()?.parse()?;
        tokens = quote!(#key_tokens = #value);
    } else if meta.input.peek(syn::token::Paren) {
        let content;
        syn::parenthesized!(content in meta.input);
        let inner: TokenStream = content.parse()?;
        tokens = quote!(#key_tokens(#inner));
    }
    let message = if UNBOUNDED_KEYS.contains(&key) {
        format!(
            "`{key}`: a retry chain is always bounded, by attempts (`max`) and by time (`max_elapsed`); an unbounded retry turns an outage into a self-inflicted denial of service"
        )
    } else if key == "clock" {
        "`clock` picks the clock a rate limit reads, and that is set where the limiter is configured, not at a call site\n  = note: the same fn runs in tests, where tokio's paused clock must drive the limit, and in production, where the CPU's counter makes an admission cheaper: the choice belongs to the build, not to one call's code\n  = help: write `clock = \"tsc\"` in the limiter's `[limits.<name>]` section of the config file, or give `RegistryBuilder::limit` a `LimitConfig::with_clock`".to_owned()
    } else if other_keys.contains(&key) {
        let other = if attribute == "retry" {
            "circuit_breaker"
        } else {
            "retry"
        };
        format!("`{key}` is an argument of `#[{other}]`, not of `#[{attribute}]`; move it there")
    } else {
        let suggestion = ALIASES
            .iter()
            .find(|(alias, target)| *alias == key && keys.contains(target))
            .map(|(_, target)| *target)
            .or_else(|| did_you_mean(key, keys.iter().copied()));
        let accepted = keys
            .iter()
            .map(|key| format!("`{key}`"))
            .collect::<Vec<_>>()
            .join(", ");
        match suggestion {
            Some(near) => format!(
                "unknown argument `{key}` of `#[{attribute}]`; did you mean `{near}`? (accepted: {accepted})"
            ),
            None => format!("unknown argument `{key}` of `#[{attribute}]` (accepted: {accepted})"),
        }
    };
    errors.push(syn::Error::new_spanned(tokens, message));
    Ok(())
}

fn literal(value: &Expr) -> Option<&Lit> {
    match value {
        Expr::Lit(ExprLit { lit, .. }) => Some(lit),
        Expr::Group(group) => literal(&group.expr),
        _ => None,
    }
}

fn is_negative(value: &Expr) -> bool {
    matches!(
        value,
        Expr::Unary(ExprUnary {
            op: UnOp::Neg(_),
            ..
        })
    )
}

const UNBOUNDED_WORDS: &[&str] = &[
    "infinite",
    "inf",
    "unlimited",
    "unbounded",
    "forever",
    "none",
];

fn attempts(value: &Expr, key: &str) -> syn::Result<u32> {
    let unbounded = || {
        syn::Error::new_spanned(
            value,
            format!(
                "`{key}` must be a positive number of attempts: a retry chain is always bounded (an unbounded retry turns an outage into a self-inflicted denial of service); the default is {}",
                resilience_rules::presets::HTTP.max_attempts
            ),
        )
    };
    match literal(value) {
        Some(Lit::Str(text)) if UNBOUNDED_WORDS.contains(&text.value().to_lowercase().as_str()) => {
            Err(unbounded())
        }
        _ if is_negative(value) => Err(unbounded()),
        _ => count(value, key),
    }
}

pub(crate) fn count(value: &Expr, key: &str) -> syn::Result<u32> {
    match literal(value) {
        Some(Lit::Int(int)) => int.base10_parse::<u32>().map_err(|_| {
            syn::Error::new_spanned(value, format!("`{key}` does not fit in a `u32`"))
        }),
        Some(Lit::Str(text)) => Err(syn::Error::new_spanned(
            value,
            format!(
                "`{key}` is a number, not a string: write `{key} = {}`",
                text.value()
            ),
        )),
        _ => Err(syn::Error::new_spanned(
            value,
            format!("`{key}` must be an integer literal, e.g. `{key} = 3`"),
        )),
    }
}

fn float(value: &Expr) -> syn::Result<f64> {
    let parsed = match literal(value) {
        Some(Lit::Float(float)) => float.base10_parse::<f64>(),
        Some(Lit::Int(int)) => int.base10_parse::<f64>(),
        _ if is_negative(value) => {
            return Err(syn::Error::new_spanned(
                value,
                "a negative value is never valid here",
            ));
        }
        _ => {
            return Err(syn::Error::new_spanned(
                value,
                "expected a number literal, e.g. `0.5`",
            ));
        }
    };
    parsed.map_err(|err| syn::Error::new_spanned(value, err))
}

fn jitter(value: &Expr) -> syn::Result<JitterArg> {
    match literal(value) {
        Some(Lit::Str(text)) => Ok(JitterArg::Named(text.value())),
        Some(Lit::Float(_) | Lit::Int(_)) => float(value).map(JitterArg::Amount),
        _ if is_negative(value) => float(value).map(JitterArg::Amount),
        _ => Err(syn::Error::new_spanned(
            value,
            "`jitter` is an amount such as `0.3` (±30 %) or a kind as a string: \"symmetric\", \"additive\", \"full\", \"decorrelated\", with an optional amount for the first two (`\"additive 0.3\"`)",
        )),
    }
}

pub(crate) fn duration_value(value: &Expr) -> syn::Result<Duration> {
    match literal(value) {
        Some(Lit::Str(text)) => duration::parse(&text.value()).map_err(|reason| {
            syn::Error::new_spanned(
                value,
                format!("invalid duration \"{}\": {reason}", text.value()),
            )
        }),
        Some(Lit::Int(int)) => Err(syn::Error::new_spanned(
            value,
            format!(
                "a duration is a string with a unit: write `\"{}ms\"` or `\"{}s\"`",
                int.base10_digits(),
                int.base10_digits()
            ),
        )),
        _ => Err(syn::Error::new_spanned(
            value,
            "a duration is a string literal with a unit, e.g. `\"100ms\"`, `\"2s\"` or `\"1.5s\"`",
        )),
    }
}

fn elapsed_value(value: &Expr) -> syn::Result<Duration> {
    match literal(value) {
        Some(Lit::Str(text)) if UNBOUNDED_WORDS.contains(&text.value().to_lowercase().as_str()) => {
            Err(syn::Error::new_spanned(
                value,
                "`max_elapsed` bounds the whole retry chain and cannot be unbounded: every retry loop is bounded by attempts and by elapsed time; the default is \"5s\"",
            ))
        }
        _ => duration_value(value),
    }
}

pub(crate) fn name(value: &Expr) -> syn::Result<String> {
    match literal(value) {
        Some(Lit::Str(text)) if !text.value().trim().is_empty() => Ok(text.value()),
        Some(Lit::Str(_)) => Err(syn::Error::new_spanned(
            value,
            "`name` cannot be empty: it names the policy or breaker in the startup config and in metrics",
        )),
        _ => Err(syn::Error::new_spanned(
            value,
            "`name` is a string literal, e.g. `name = \"user-service\"`",
        )),
    }
}

/// A call's priority in a load limiter: `resilience::limit::Priority`.
#[derive(Clone, Copy)]
pub(crate) enum LimitPriority {
    Critical,
    Default,
    Sheddable,
}

/// The words of `resilience::limit::Priority::as_str`.
fn priority(value: &Expr) -> syn::Result<LimitPriority> {
    choice(
        value,
        "priority",
        &[
            ("critical", LimitPriority::Critical),
            ("default", LimitPriority::Default),
            ("sheddable", LimitPriority::Sheddable),
        ],
    )
}

/// `rate = "100/s"`, by the rule the config file's `rate` is read with.
fn rate(value: &Expr) -> syn::Result<RateArg> {
    let text = match literal(value) {
        Some(Lit::Str(text)) => text.value(),
        Some(Lit::Int(int)) => {
            return Err(syn::Error::new_spanned(
                value,
                format!(
                    "`rate` is a number of calls per period, written as a string: `rate = \"{}/s\"`",
                    int.base10_digits()
                ),
            ));
        }
        _ => {
            return Err(syn::Error::new_spanned(
                value,
                "`rate` is a string literal `<calls>/<period>`, e.g. `rate = \"100/s\"`",
            ));
        }
    };
    resilience_rules::rate::parse(&text)
        .map(|(count, period)| RateArg { count, period })
        .map_err(|reason| {
            syn::Error::new_spanned(
                value,
                format!(
                    "invalid rate {text:?}: {reason}\n  = note: the rate limit admits at most that many calls per period to the dependency, with `burst` of them at once; the config file's `[limits.<name>]` reads `rate` by the same rule\n  = help: e.g. `rate = \"100/s\"`, `rate = \"6000/m\"` or `rate = \"25/100ms\"`"
                ),
            )
        })
}

fn limit_name(value: &Expr) -> syn::Result<String> {
    match literal(value) {
        Some(Lit::Str(text)) if !text.value().trim().is_empty() => Ok(text.value()),
        _ => Err(syn::Error::new_spanned(
            value,
            "`limit` is a string literal naming the load limiter of the dependency, shared by every call to it, e.g. `limit = \"user-service\"`",
        )),
    }
}

fn budget_name(value: &Expr) -> syn::Result<String> {
    match literal(value) {
        Some(Lit::Str(text)) if !text.value().trim().is_empty() => Ok(text.value()),
        Some(Lit::Str(_)) => Err(syn::Error::new_spanned(
            value,
            "`budget` cannot be empty: it names the retry budget shared by every call to one dependency, e.g. `budget = \"user-service\"`",
        )),
        _ => Err(syn::Error::new_spanned(
            value,
            "`budget` is a string literal naming a retry budget, e.g. `budget = \"user-service\"`",
        )),
    }
}

/// `key = host`: an expression of the fn's arguments, evaluated once per
/// call. A literal would key every call alike: that is a `name`.
fn family_key(value: &Expr) -> syn::Result<Expr> {
    match literal(value) {
        Some(Lit::Str(text)) => Err(syn::Error::new_spanned(
            value,
            format!(
                "`key` takes an argument of the fn, not text: one key for every call is a breaker of its own, `name = \"{}\"`; a key from the call is written `key = host`, with `host` a parameter",
                text.value()
            ),
        )),
        Some(_) => Err(syn::Error::new_spanned(
            value,
            "`key` takes an argument of the fn, not a constant: a key from the call is written `key = host`, with `host` a parameter",
        )),
        None => Ok(value.clone()),
    }
}

fn path(value: &Expr, key: &str, example: &str) -> syn::Result<syn::Path> {
    match value {
        Expr::Path(path) if path.qself.is_none() => Ok(path.path.clone()),
        Expr::Lit(ExprLit {
            lit: Lit::Str(text),
            ..
        }) => Err(syn::Error::new_spanned(
            value,
            format!(
                "`{key}` takes a path, not a string: write `{key} = {}`",
                text.value()
            ),
        )),
        _ => Err(syn::Error::new_spanned(
            value,
            format!("`{key}` takes the path of a fn, e.g. `{key} = {example}`"),
        )),
    }
}

fn choice<T: Copy>(value: &Expr, key: &str, choices: &[(&'static str, T)]) -> syn::Result<T> {
    let listed = choices
        .iter()
        .map(|(name, _)| format!("\"{name}\""))
        .collect::<Vec<_>>()
        .join(", ");
    let Some(Lit::Str(text)) = literal(value) else {
        return Err(syn::Error::new_spanned(
            value,
            format!("`{key}` is one of {listed}"),
        ));
    };
    let text = text.value();
    if let Some((_, found)) = choices.iter().find(|(name, _)| *name == text) {
        return Ok(*found);
    }
    let hint = match did_you_mean(&text, choices.iter().map(|(name, _)| *name)) {
        Some(near) => format!("; did you mean \"{near}\"?"),
        None => String::new(),
    };
    Err(syn::Error::new_spanned(
        value,
        format!("unknown {key} \"{text}\": expected one of {listed}{hint}"),
    ))
}

pub(crate) fn method(value: &Expr) -> syn::Result<Method> {
    let Some(Lit::Str(text)) = literal(value) else {
        return Err(syn::Error::new_spanned(
            value,
            "`method` is an HTTP method as a string, e.g. `method = \"GET\"`",
        ));
    };
    let upper = text.value().to_ascii_uppercase();
    if let Some((_, method)) = Method::ALL.iter().find(|(name, _)| *name == upper) {
        return Ok(*method);
    }
    let hint = match did_you_mean(&upper, Method::ALL.iter().map(|(name, _)| *name)) {
        Some(near) => format!("; did you mean \"{near}\"?"),
        None => String::new(),
    };
    Err(syn::Error::new_spanned(
        value,
        format!(
            "unknown HTTP method \"{}\": expected GET, HEAD, OPTIONS, TRACE, PUT, DELETE, POST or PATCH{hint}",
            text.value()
        ),
    ))
}

fn slow_call(
    slot: &mut Option<Arg<SlowCall>>,
    meta: &ParseNestedMeta<'_>,
    errors: &mut Errors,
) -> syn::Result<()> {
    const FORM: &str = "`slow_call(threshold = \"2s\", ratio = 0.5)`";
    let key = meta.path.clone();
    if !meta.input.peek(syn::token::Paren) {
        if meta.input.peek(Token![=]) {
            let value: Expr = meta.value()?.parse()?;
            errors.push(syn::Error::new_spanned(
                quote!(#key = #value),
                format!("`slow_call` takes two values: write {FORM}"),
            ));
            return Ok(());
        }
        return Err(meta.error(format!("`slow_call` takes two values: write {FORM}")));
    }
    let mut threshold = None;
    let mut ratio = None;
    let start = errors.len();
    let content;
    syn::parenthesized!(content in meta.input);
    let inner: TokenStream = content.parse()?;
    let tokens = quote!(#key(#inner));
    let parser = syn::meta::parser(|inner| match key_of(&inner).as_deref() {
        Some("threshold") => one(&mut threshold, &inner, errors, duration_value),
        Some("ratio") => one(&mut ratio, &inner, errors, float),
        _ => Err(inner.error(format!(
            "`slow_call` has two arguments, `threshold` and `ratio`: {FORM}"
        ))),
    });
    if let Err(err) = parser.parse2(inner) {
        errors.push(err);
    }
    if errors.len() > start {
        return Ok(());
    }
    let (Some(threshold), Some(ratio)) = (threshold, ratio) else {
        errors.push(syn::Error::new_spanned(
            &tokens,
            format!("`slow_call` needs both `threshold` and `ratio`: {FORM}"),
        ));
        return Ok(());
    };
    if slot.is_some() {
        errors.push(syn::Error::new_spanned(
            &tokens,
            "`slow_call` specified more than once",
        ));
        return Ok(());
    }
    *slot = Some(Arg {
        value: SlowCall {
            threshold: threshold.value,
            ratio: ratio.value,
        },
        tokens,
    });
    Ok(())
}
