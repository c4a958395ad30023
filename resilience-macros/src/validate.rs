//! The rules between arguments and on the fn itself, checked against the
//! values in effect (the preset's, overridden by the arguments), so that
//! what compiles is a valid policy and a valid breaker.

use std::time::Duration;

use syn::{Attribute, ItemFn, Signature};

use resilience_rules::limits::{
    MAX_ATTEMPTS, MAX_BURST, MAX_CALLS, MAX_IDLE, MAX_JITTER, MAX_MEMBERS, MAX_MULTIPLIER,
    MAX_PROBES, MIN_BREAKER_TIMEOUT, MIN_IDLE, MIN_JITTER, MIN_WINDOW,
};

use resilience_rules::jitter::{self as rules_jitter, JitterError, Kind};
use resilience_rules::presets;

use crate::args::{Arg, BreakerArgs, BreakerPreset, JitterArg, RateArg, RetryArgs, RetryPreset};
use crate::duration::display;
use crate::errors::Errors;

/// The values a retry preset starts from, the runtime's own.
fn retry_defaults(preset: RetryPreset) -> presets::RetryPreset {
    match preset {
        RetryPreset::Http => presets::HTTP,
        RetryPreset::Background => presets::BACKGROUND,
        RetryPreset::DbTx => presets::DB_TX,
    }
}

/// The jitter `jitter = …` gives under `preset`: a bare number is the
/// amount of the preset's own kind (additive for `db_tx`, symmetric
/// otherwise), a string names the kind (`resilience_rules::jitter`).
pub(crate) fn jitter(arg: &JitterArg, preset: RetryPreset) -> Result<(Kind, f64), JitterError> {
    let (kind, amount) = match arg {
        JitterArg::Amount(amount) => {
            let kind = match preset {
                RetryPreset::DbTx => Kind::Additive,
                RetryPreset::Http | RetryPreset::Background => Kind::Symmetric,
            };
            rules_jitter::amount_of(kind, *amount)?
        }
        JitterArg::Named(text) => rules_jitter::parse(text)?,
    };
    Ok((kind, amount.unwrap_or(rules_jitter::DEFAULT_AMOUNT)))
}

fn jitter_message(arg: &JitterArg, err: JitterError) -> String {
    let written = match arg {
        JitterArg::Amount(amount) => amount.to_string(),
        JitterArg::Named(text) => format!("{text:?}"),
    };
    const KINDS: &str = "\"symmetric\", \"additive\", \"full\" or \"decorrelated\"";
    let default = match presets::HTTP.jitter {
        presets::PresetJitter::Symmetric(amount) | presets::PresetJitter::Additive(amount) => {
            amount
        }
    };
    match err {
        JitterError::BelowMin => format!(
            "`jitter = {written}` is below {MIN_JITTER:?}: clients that failed together would retry together, in waves that keep the dependency down (thundering herd)\n  = help: use a jitter between {MIN_JITTER:?} and {MAX_JITTER:?}; the default is {default}, i.e. ±{} %",
            default * 100.0
        ),
        JitterError::AboveMax => format!(
            "`jitter = {written}` is above {MAX_JITTER:?}: the jitter is a fraction of the pause (0.25 means ±25 %)\n  = help: use a jitter between {MIN_JITTER:?} and {MAX_JITTER:?}"
        ),
        JitterError::Disabled => format!(
            "`jitter = {written}` would retry without jitter: clients that failed together would retry together, in waves that keep the dependency down (thundering herd); every retry is jittered\n  = help: remove `jitter` (the default is ±25 %), or choose a kind: {KINDS}"
        ),
        JitterError::Unknown { near } => {
            let help = match near {
                Some(near) => format!("did you mean `jitter = \"{near}\"`?"),
                None => "`symmetric` and `additive` take an optional amount after a space, e.g. `jitter = \"additive 0.3\"`".to_owned(),
            };
            format!(
                "unknown jitter {written}: a jitter is an amount such as `0.3` or a kind, {KINDS}\n  = help: {help}"
            )
        }
        JitterError::NoAmount(kind) => {
            format!(
                "`jitter = {written}`: a \"{}\" jitter has no amount: it draws the whole pause at random\n  = help: write `jitter = \"{}\"`, or `jitter = \"symmetric 0.3\"` for ±30 %",
                kind.as_str(),
                kind.as_str()
            )
        }
        JitterError::NotANumber => format!(
            "`jitter = {written}`: the amount after the kind is not a number\n  = help: write a number between {MIN_JITTER:?} and {MAX_JITTER:?} after the kind, e.g. `jitter = \"additive 0.3\"`"
        ),
    }
}

/// Checks `#[retry]`'s values one by one and against each other.
pub(crate) fn retry(args: &RetryArgs, errors: &mut Errors) {
    let preset = args.preset.as_ref().map_or(RetryPreset::Http, |p| p.get());
    let defaults = retry_defaults(preset);

    if let (Some(priority), None) = (&args.priority, &args.limit) {
        errors.push(priority.error(
            "`priority` orders the calls of a load limiter, and this chain goes through none\n  = help: add `limit = \"<dependency>\"`: each attempt then takes a slot of that limiter, and calls of a lower priority are shed first",
        ));
    }
    limit_rate(
        args.limit.as_ref(),
        args.rate.as_ref(),
        args.burst.as_ref(),
        "this chain goes",
        errors,
    );

    if let Some(max) = &args.max {
        if max.get() == 0 {
            errors.push(max.error(
                format!("`max = 0` allows no attempt at all, and 0 means \"unbounded\" in some libraries: a retry chain is always bounded\n  = help: `max` counts every attempt, the first included: use `max = 1` to disable retries, the default is {}", defaults.max_attempts),
            ));
        } else if max.get() > MAX_ATTEMPTS {
            errors.push(max.error(format!(
                "`max = {}` is more than the limit of {MAX_ATTEMPTS} attempts: each one is another request to a dependency that is failing\n  = help: the default is {}; to retry for longer, raise `max_elapsed`",
                max.get(),
                defaults.max_attempts
            )));
        }
    }
    if let Some(initial) = &args.initial
        && initial.get().is_zero()
    {
        errors.push(initial.error(
                format!("`initial = \"0s\"` retries at once and hammers a dependency that is already failing\n  = help: use at least \"1ms\"; the default is \"{}\"", display(defaults.initial)),
            ));
    }
    // Read once: the multiplier's rule depends on its kind.
    let parsed_jitter = args
        .jitter
        .as_ref()
        .map(|arg| (arg, jitter(&arg.value, preset)));
    if let Some(multiplier) = &args.multiplier {
        let value = multiplier.get();
        if preset == RetryPreset::DbTx {
            errors.push(multiplier.error(
                "`multiplier` has no effect with `preset = \"db_tx\"`, whose pauses grow as `initial · attempt²`\n  = help: remove `multiplier`, or use another preset",
            ));
        } else if let Some((_, Ok((Kind::Decorrelated, _)))) = parsed_jitter {
            errors.push(multiplier.error(
                "`multiplier` has no effect with `jitter = \"decorrelated\"`, whose pauses grow by themselves, each up to three times the previous one\n  = help: remove `multiplier`, or use another jitter",
            ));
        } else if !value.is_finite() || value < 1.0 {
            errors.push(multiplier.error(format!(
                "`multiplier = {value}` would shrink the pauses: the multiplier must be at least 1.0\n  = help: 2.0 (the default) doubles each pause: 100ms, 200ms, 400ms"
            )));
        } else if value > MAX_MULTIPLIER {
            errors.push(multiplier.error(format!(
                "`multiplier = {value}` is more than the limit of {MAX_MULTIPLIER}: the pauses would jump from `initial` to the cap in a step or two, a fixed wait rather than a backoff\n  = help: 2.0 (the default) doubles each pause: 100ms, 200ms, 400ms"
            )));
        }
    }
    if let Some((arg, Err(err))) = parsed_jitter {
        errors.push(arg.error(jitter_message(&arg.value, err)));
    }
    if let Some(max_elapsed) = &args.max_elapsed
        && max_elapsed.get().is_zero()
    {
        errors.push(max_elapsed.error(
                format!("`max_elapsed = \"0s\"` would leave the chain without a time bound (0 means \"unbounded\" in some libraries): every retry chain is bounded by attempts AND elapsed time\n  = help: the default is \"{}\"; keep it well below the caller's deadline", display(defaults.max_elapsed)),
            ));
    }

    let initial = args.initial.as_ref().map_or(defaults.initial, |a| a.get());
    let max_interval = args
        .max_interval
        .as_ref()
        .map_or(defaults.max_interval, |a| a.get());
    if !initial.is_zero() && initial > max_interval {
        let message = format!(
            "the first pause (`initial = \"{}\"`) is longer than the cap on every pause (`max_interval = \"{}\"`)\n  = help: lower `initial` or raise `max_interval`",
            display(initial),
            display(max_interval)
        );
        match (&args.initial, &args.max_interval) {
            (Some(arg), _) => errors.push(arg.error(message)),
            (None, Some(arg)) => errors.push(arg.error(message)),
            (None, None) => {}
        }
    }

    let max_elapsed = args
        .max_elapsed
        .as_ref()
        .map_or(defaults.max_elapsed, |a| a.get());
    if let Some(timeout) = &args.attempt_timeout {
        let value = timeout.get();
        if value.is_zero() {
            errors.push(timeout.error(
                "`attempt_timeout = \"0s\"` gives an attempt no time to run\n  = help: remove it (attempts are then bounded by `max_elapsed` only) or give a fraction of `max_elapsed`",
            ));
        } else if !max_elapsed.is_zero() && value >= max_elapsed {
            errors.push(timeout.error(format!(
                "`attempt_timeout = \"{}\"` is not shorter than `max_elapsed = \"{}\"`: a first attempt that times out uses all of `max_elapsed`, so the second attempt could never run\n  = help: make the attempt timeout a fraction of `max_elapsed`, e.g. `attempt_timeout = \"{}\"`",
                display(value),
                display(max_elapsed),
                display(Duration::from_millis((max_elapsed.as_millis() / 5).max(1) as u64))
            )));
        }
    }
}

/// Checks `#[circuit_breaker]`'s values.
pub(crate) fn breaker(args: &BreakerArgs, errors: &mut Errors) {
    if args.name.is_none() {
        errors.push(syn::Error::new(
            proc_macro2::Span::call_site(),
            "`#[circuit_breaker]` needs a `name`: fns that call the same dependency share one breaker by name, and the startup config and the metrics refer to it\n  = help: `#[circuit_breaker(name = \"user-service\")]`",
        ));
    }
    if let (Some(priority), None) = (&args.priority, &args.limit) {
        errors.push(priority.error(
            "`priority` orders the calls of a load limiter, and this breaker's calls go through none\n  = help: add `limit = \"<dependency>\"`: each call then takes a slot of that limiter, and calls of a lower priority are shed first",
        ));
    }
    limit_rate(
        args.limit.as_ref(),
        args.rate.as_ref(),
        args.burst.as_ref(),
        "this breaker's calls go",
        errors,
    );
    if let Some(ratio) = &args.ratio {
        let value = ratio.get();
        if !(value > 0.0 && value <= 1.0) {
            errors.push(ratio.error(format!(
                "`ratio = {value}` is outside (0, 1]: it is the share of failed calls that opens the breaker\n  = help: {} (the default) opens at half the calls failing; {} for a critical dependency, {} for a relaxed one",
                presets::BREAKER.failure_ratio,
                presets::CRITICAL.failure_ratio,
                presets::RELAXED.failure_ratio
            )));
        }
    }
    if let Some(min) = &args.min {
        let min_defaults = format!(
            "the default is {}; {} for a critical dependency, {} for a relaxed one",
            presets::BREAKER.min_requests,
            presets::CRITICAL.min_requests,
            presets::RELAXED.min_requests
        );
        if min.get() == 0 {
            errors.push(min.error(
                format!("`min = 0` would open the breaker on the very first failure: `min` is how many calls the window needs before the ratio means anything\n  = help: {min_defaults}"),
            ));
        } else if min.get() > MAX_CALLS {
            errors.push(min.error(format!(
                "`min = {}` is more than the limit of {MAX_CALLS} calls: a breaker that needs more to judge a dependency reacts only after it has sent them all\n  = help: {min_defaults}",
                min.get()
            )));
        }
    }
    if let Some(half_open) = &args.half_open {
        if half_open.get() == 0 {
            errors.push(half_open.error(format!(
                "`half_open = 0` admits no probe, so an open breaker could never close again\n  = help: the default is {} probe",
                presets::BREAKER.half_open
            )));
        } else if half_open.get() > MAX_PROBES {
            errors.push(half_open.error(format!(
                "`half_open = {}` is more than the limit of {MAX_PROBES} probes: the probe counter holds no more, so the breaker could never close again\n  = help: the default is {} probe; a few (1 to 10) are enough to see a dependency recover",
                half_open.get(),
                presets::BREAKER.half_open
            )));
        }
    }
    if let Some(calls) = &args.window_calls {
        let min = args.min.as_ref().map_or(
            match args.preset.as_ref().map(|p| p.get()) {
                None => presets::BREAKER.min_requests,
                Some(BreakerPreset::Critical) => presets::CRITICAL.min_requests,
                Some(BreakerPreset::Relaxed) => presets::RELAXED.min_requests,
            },
            |min| min.get(),
        );
        if args.window.is_some() {
            errors.push(calls.error(
                "`window` (a time window) and `window_calls` (a count window: the last n calls) exclude each other\n  = help: keep one of them",
            ));
        } else if calls.get() > MAX_CALLS {
            errors.push(calls.error(format!(
                "`window_calls = {}` is more than the limit of {MAX_CALLS} calls: a window that long remembers failures long after the dependency recovered\n  = help: a count window of 100 calls judges the last 100",
                calls.get()
            )));
        } else if calls.get() < min {
            errors.push(calls.error(format!(
                "`window_calls = {}` holds fewer calls than `min = {min}`: the window could never hold enough calls to trip the breaker\n  = help: make `window_calls` at least `min`",
                calls.get()
            )));
        }
    }
    let floors = [
        (
            &args.window,
            "window",
            MIN_WINDOW,
            "it is made of ten buckets of at least 1ms",
            presets::BREAKER.window,
        ),
        (
            &args.cooldown,
            "cooldown",
            MIN_BREAKER_TIMEOUT,
            "an open breaker waits that long before it probes",
            presets::BREAKER.cooldown,
        ),
        (
            &args.probe_timeout,
            "probe_timeout",
            MIN_BREAKER_TIMEOUT,
            "a half-open probe gets that long to answer before it counts as failed",
            presets::BREAKER.probe_timeout,
        ),
        (
            &args.call_timeout,
            "call_timeout",
            MIN_BREAKER_TIMEOUT,
            "a call gets that long to answer before it is cut and counts as failed",
            presets::BREAKER.call_timeout,
        ),
    ];
    for (arg, key, floor, why, default) in floors {
        if let Some(arg) = arg
            && arg.get() < floor
        {
            errors.push(arg.error(format!(
                "`{key} = \"{}\"` is shorter than {}: {why}\n  = help: the default is \"{}\"",
                display(arg.get()),
                display(floor),
                display(default)
            )));
        }
    }
    family(args, errors);
    if let Some(slow) = &args.slow_call {
        let value = slow.get();
        if value.threshold.is_zero() {
            errors.push(slow.error(
                "`slow_call` needs a threshold longer than zero: calls slower than it count as slow",
            ));
        }
        if !(value.ratio > 0.0 && value.ratio <= 1.0) {
            errors.push(slow.error(format!(
                "`slow_call` ratio {} is outside (0, 1]: it is the share of slow calls that opens the breaker",
                value.ratio
            )));
        }
    }
}

/// `max_members` and `idle` bound a family, so they need a `key`; both
/// within the runtime's limits.
fn family(args: &BreakerArgs, errors: &mut Errors) {
    if args.key.is_none() {
        let message = |key: &str| {
            format!(
                "`{key}` bounds a family of breakers, one per key, and this breaker has no `key`: it is one breaker\n  = help: add `key = host` (a parameter of the fn) for a breaker per host, or remove `{key}`"
            )
        };
        if let Some(max) = &args.max_members {
            errors.push(max.error(message("max_members")));
        }
        if let Some(idle) = &args.idle {
            errors.push(idle.error(message("idle")));
        }
    }
    if let Some(max) = &args.max_members
        && (max.get() == 0 || max.get() > MAX_MEMBERS)
    {
        errors.push(max.error(format!(
                "`max_members = {}` is outside 1 to {MAX_MEMBERS}: it caps how many breakers the family holds at once, each 250 B to 1 KiB\n  = help: the default is {}",
                max.get(),
                presets::FAMILY.max_members
            )));
    }
    if let Some(idle) = &args.idle {
        let value = idle.get();
        if value < MIN_IDLE || value > MAX_IDLE {
            errors.push(idle.error(format!(
                "`idle = \"{}\"` is outside {} to {}: a member unused that long, closed and without failures, is removed to make room\n  = help: the default is \"{}\"",
                display(value),
                display(MIN_IDLE),
                display(MAX_IDLE),
                display(presets::FAMILY.idle)
            )));
        }
    }
}

/// The root of `key = …` must be a parameter of the fn (or `self`): the
/// key is evaluated from the call's arguments before the body runs. An
/// expression that names none (a method call on a constant, a literal)
/// is left to the compiler.
pub(crate) fn breaker_key(
    key: &crate::args::Arg<syn::Expr>,
    sig: &syn::Signature,
) -> syn::Result<()> {
    let Some(root) = key_root(&key.value) else {
        return Ok(());
    };
    let mut names = Vec::new();
    for input in &sig.inputs {
        match input {
            syn::FnArg::Receiver(_) => names.push("self".to_owned()),
            syn::FnArg::Typed(typed) => {
                if let syn::Pat::Ident(ident) = &*typed.pat {
                    names.push(ident.ident.to_string());
                }
            }
        }
    }
    let name = root.to_string();
    if names.contains(&name) {
        return Ok(());
    }
    let listed = if names.is_empty() {
        "the fn has none".to_owned()
    } else {
        format!(
            "its parameters are {}",
            names
                .iter()
                .map(|n| format!("`{n}`"))
                .collect::<Vec<_>>()
                .join(", ")
        )
    };
    let hint =
        match resilience_rules::suggest::did_you_mean(&name, names.iter().map(String::as_str)) {
            Some(near) => format!("did you mean `{near}`? "),
            None => String::new(),
        };
    Err(syn::Error::new_spanned(
        root,
        format!(
            "`{name}` names no parameter of `{}`: the key of each call is read from its arguments\n  = help: {hint}{listed}",
            sig.ident
        ),
    ))
}

/// The variable an expression starts from: `host` of `host`,
/// `req.host.as_str()` or `&host`.
pub(crate) fn key_root(expr: &syn::Expr) -> Option<&syn::Ident> {
    match expr {
        syn::Expr::Path(path) if path.qself.is_none() => path.path.get_ident(),
        syn::Expr::Field(field) => key_root(&field.base),
        syn::Expr::MethodCall(call) => key_root(&call.receiver),
        syn::Expr::Reference(reference) => key_root(&reference.expr),
        syn::Expr::Paren(paren) => key_root(&paren.expr),
        syn::Expr::Group(group) => key_root(&group.expr),
        _ => None,
    }
}

/// The attempts a chain makes under `args`: `max`, else its preset's.
fn max_attempts(args: &RetryArgs) -> u32 {
    match (&args.max, args.preset.as_ref().map(|preset| preset.get())) {
        (Some(max), _) => max.get(),
        (None, Some(RetryPreset::Background)) => 6,
        (None, _) => 3,
    }
}

/// The attempts the AWS SDK's standard retry mode makes by default.
const SDK_ATTEMPTS: u32 = 3;

/// `#[retry]` over a call whose client retries by itself is refused unless
/// the attribute says how that client retries: the signal is the AWS SDK's
/// error type, `SdkError<…>`, anywhere in the fn's return type. The SDK
/// retries each request 3 times by default (its standard mode), so each
/// attempt of the chain would be 3 requests: one retry loop per call.
pub(crate) fn client_retry(args: &RetryArgs, ty: &syn::Type) -> syn::Result<()> {
    if args.client_retry.is_some() {
        return Ok(());
    }
    let Some(error) = sdk_error(ty) else {
        return Ok(());
    };
    let written = quote::quote!(#error)
        .to_string()
        .replace(" < ", "<")
        .replace("< ", "<")
        .replace(" <", "<")
        .replace(" >", ">")
        .replace(" ,", ",")
        .replace(" :: ", "::");
    let attempts = max_attempts(args);
    Err(syn::Error::new_spanned(
        error,
        format!(
            "`#[retry]` around an AWS SDK call: the fn fails with `{written}`, and an SDK client retries each request by itself unless it is told otherwise\n  = note: a call must have one retry loop: with the SDK's standard retry (its default, {SDK_ATTEMPTS} attempts) every one of this chain's {attempts} attempts is a whole SDK loop, so a throttled S3 receives {SDK_ATTEMPTS} × {attempts} = {} requests for one call, and the pauses of both loops add up past the caller's deadline\n  = help: either make the policy the client's retry, each SDK attempt then one of this chain's: build the client with `let retry = resilience::aws::AwsRetry::new(\"s3\", Policy::http());` and `config.retry_config(retry.retry_config()).retry_partition(retry.retry_partition()).retry_classifier(retry.clone()).interceptor(retry)`, and write `#[retry(client_retry = \"AwsRetry\")]`\n  = help: or turn the client's retry off, `config.retry_config(RetryConfig::disabled())`, and write `#[retry(client_retry = \"disabled\")]`\n  = help: or keep the SDK's own loop: remove `#[retry]`, bound the loop with `RetryConfig` and `TimeoutConfig`, and put only `#[circuit_breaker]` around the call",
            SDK_ATTEMPTS * attempts
        ),
    ))
}

/// The first type in `ty` named `SdkError` (written with any path, with
/// its generic arguments or not): the error of every AWS SDK operation.
fn sdk_error(ty: &syn::Type) -> Option<&syn::Type> {
    match ty {
        syn::Type::Path(path) => {
            if path
                .path
                .segments
                .last()
                .is_some_and(|last| last.ident == "SdkError")
            {
                return Some(ty);
            }
            path.path.segments.iter().find_map(|segment| {
                let syn::PathArguments::AngleBracketed(args) = &segment.arguments else {
                    return None;
                };
                args.args.iter().find_map(|arg| match arg {
                    syn::GenericArgument::Type(inner) => sdk_error(inner),
                    _ => None,
                })
            })
        }
        syn::Type::Reference(reference) => sdk_error(&reference.elem),
        syn::Type::Paren(paren) => sdk_error(&paren.elem),
        syn::Type::Group(group) => sdk_error(&group.elem),
        syn::Type::Tuple(tuple) => tuple.elems.iter().find_map(sdk_error),
        syn::Type::Array(array) => sdk_error(&array.elem),
        syn::Type::Slice(slice) => sdk_error(&slice.elem),
        _ => None,
    }
}

/// Crates whose errors come from a database client: a fn that fails with
/// one of them calls a database, through its pool.
const DATABASE_CRATES: &[&str] = &[
    "sqlx",
    "tokio_postgres",
    "postgres",
    "deadpool_postgres",
    "bb8_postgres",
    "diesel",
    "diesel_async",
    "sea_orm",
    "mysql_async",
];

/// A breaker around the database pool is refused: the pool already queues
/// the calls and fails fast when it is exhausted, so the breaker is one
/// layer too many; the database's protection is the pool's size and
/// `statement_timeout`. The signal is the error type: `sqlx::Error`,
/// `sqlx::Result<T>`, `tokio_postgres::Error`… (written with its crate's
/// path).
pub(crate) fn breaker_target(ty: &syn::Type) -> syn::Result<()> {
    let Some((error, alias)) = database_error(ty) else {
        return Ok(());
    };
    let written = quote::quote!(#error).to_string().replace(' ', "");
    let what = if alias {
        format!("the error of `{written}`")
    } else {
        format!("`{written}`")
    };
    Err(syn::Error::new_spanned(
        error,
        format!(
            "`#[circuit_breaker]` around a database: the fn fails with {what}, a database client's error, and a breaker does not belong in front of a database pool\n  = note: the pool already queues the calls and fails fast when it is exhausted; a breaker on top adds nothing but a second, blind way to fail\n  = help: protect the database with the pool's size and `statement_timeout`, and remove `#[circuit_breaker]`; keep `#[retry(preset = \"db_tx\")]` for serialization failures and deadlocks"
        ),
    ))
}

/// The database client's error in `ty`, a fn's return type: the `E` of
/// `Result<T, E>`, or the whole type for a crate's own `Result<T>` alias.
/// `true` with it when `ty` is such an alias.
fn database_error(ty: &syn::Type) -> Option<(&syn::Type, bool)> {
    let syn::Type::Path(path) = ty else {
        return None;
    };
    let segments = &path.path.segments;
    if from_database_crate(&path.path) {
        return Some((ty, true));
    }
    let last = segments.last()?;
    let syn::PathArguments::AngleBracketed(args) = &last.arguments else {
        return None;
    };
    match args.args.iter().nth(1) {
        Some(syn::GenericArgument::Type(error @ syn::Type::Path(error_path)))
            if from_database_crate(&error_path.path) =>
        {
            Some((error, false))
        }
        _ => None,
    }
}

fn from_database_crate(path: &syn::Path) -> bool {
    path.segments.len() > 1
        && path
            .segments
            .first()
            .is_some_and(|first| DATABASE_CRATES.iter().any(|name| first.ident == name))
}

/// Macros that never await: a body whose only macros are these and that has
/// no `.await` of its own runs nothing the async way.
const NON_AWAITING_MACROS: &[&str] = &[
    "assert",
    "assert_eq",
    "assert_ne",
    "concat",
    "dbg",
    "debug",
    "debug_assert",
    "debug_assert_eq",
    "debug_assert_ne",
    "eprint",
    "eprintln",
    "error",
    "event",
    "format",
    "format_args",
    "info",
    "matches",
    "panic",
    "print",
    "println",
    "stringify",
    "todo",
    "trace",
    "unimplemented",
    "unreachable",
    "vec",
    "warn",
    "write",
    "writeln",
];

/// A breaker around in-process code is refused: the signal is a body that
/// awaits nothing (no `.await`, and no macro that could hide one), so it
/// makes no network call the async way.
pub(crate) fn breaker_body(item: &ItemFn) -> syn::Result<()> {
    if awaits(quote::ToTokens::to_token_stream(&item.block)) {
        return Ok(());
    }
    Err(syn::Error::new(
        item.sig.ident.span(),
        format!(
            "`#[circuit_breaker]` on `{}`, whose body awaits nothing: a breaker protects calls over the network, and this fn runs in-process code\n  = note: a breaker opens when a remote dependency keeps failing or hanging, to stop calling it for a while; in-process code (a cache, a local file, a computation) is not overloaded by its callers and does not recover by being left alone\n  = help: remove `#[circuit_breaker]`, or put it on the fn that awaits the network call",
            item.sig.ident
        ),
    ))
}

/// `rate` and `burst` declare the rate limit of the site's `limit`: they
/// need one, `burst` needs a `rate`, and a burst is from 1 to
/// [`MAX_BURST`] (`resilience_rules::rate::burst`, the runtime's rule).
fn limit_rate(
    limit: Option<&Arg<String>>,
    rate: Option<&Arg<RateArg>>,
    burst: Option<&Arg<u32>>,
    calls: &str,
    errors: &mut Errors,
) {
    if limit.is_none() {
        if let Some(rate) = rate {
            errors.push(rate.error(format!(
                "`rate` sets the rate limit of a load limiter, and {calls} through none\n  = note: a rate limit belongs to the dependency, shared by every fn that calls it: it is named by `limit`, and each site of that name declares the same `rate`\n  = help: add `limit = \"<dependency>\"` beside `rate`, e.g. `limit = \"partner\", rate = \"100/s\"`"
            )));
        }
        if let Some(burst) = burst {
            errors.push(burst.error(format!(
                "`burst` tunes the rate limit of a load limiter, and {calls} through none\n  = help: add `limit = \"<dependency>\"` and `rate`, e.g. `limit = \"partner\", rate = \"100/s\", burst = 20`"
            )));
        }
    } else if let (Some(burst), None) = (burst, rate) {
        errors.push(burst.error(
            "`burst` tunes a rate limit, and this limiter is given no `rate`: the burst is how many of the rate's calls may go at once\n  = help: add `rate = \"<calls>/<period>\"`, e.g. `rate = \"100/s\", burst = 20`",
        ));
    }
    if let Some(burst) = burst
        && let Err(reason) = resilience_rules::rate::burst(burst.get())
    {
        let help = match rate {
            Some(rate) if rate.get().count <= MAX_BURST => format!(
                "remove `burst` to admit one period's worth at once ({}), or keep a small share of it, e.g. `burst = {}`",
                rate.get().count,
                (rate.get().count / 5).max(1)
            ),
            _ => format!("use a burst from 1 to {MAX_BURST}"),
        };
        errors.push(burst.error(format!(
            "`burst = {}` is refused: {reason}\n  = help: {help}",
            burst.get()
        )));
    }
}

/// `#[circuit_breaker(limit = …)]` above a `#[retry]`: a slot is held per
/// attempt, so the limit belongs to the retry, whose attempts take it.
pub(crate) fn limit_above_retry(limit: &crate::args::Arg<String>) -> syn::Error {
    limit.error(format!(
        "`limit` on a `#[circuit_breaker]` above a `#[retry]`: the breaker's call lasts the whole retry chain, and a slot held through the pauses between attempts fills the limit with calls that are not running\n  = note: each attempt takes a slot of its own, freed when it ends, and a retry must get one like any new call: that is what keeps retries from multiplying the load on an overloaded dependency\n  = help: move `limit = {:?}` (and `priority`, `rate`, `burst`, if any) to the `#[retry(…)]` below",
        limit.value
    ))
}

/// `#[retry(limit = …)]` on a fn whose body awaits nothing: a load limiter
/// holds back calls to an overloaded dependency, which in-process code is
/// not.
pub(crate) fn limit_body(item: &ItemFn, limit: &crate::args::Arg<String>) -> syn::Result<()> {
    if awaits(quote::ToTokens::to_token_stream(&item.block)) {
        return Ok(());
    }
    Err(limit.error(format!(
        "`limit` on `{}`, whose body awaits nothing: a load limiter holds back calls to a dependency that is overloaded, and this fn runs in-process code\n  = note: the limiter learns from how long each call waits on the dependency; code that awaits nothing never waits, so its slots and its latencies mean nothing\n  = help: remove `limit`, or put it on the fn that awaits the network call",
        item.sig.ident
    )))
}

/// Whether `tokens` hold an `.await`, or a macro call that may hide one.
fn awaits(tokens: proc_macro2::TokenStream) -> bool {
    use proc_macro2::TokenTree;
    let tokens: Vec<TokenTree> = tokens.into_iter().collect();
    tokens.iter().enumerate().any(|(i, token)| match token {
        TokenTree::Group(group) => awaits(group.stream()),
        TokenTree::Ident(ident) if ident == "await" => {
            i > 0 && matches!(&tokens[i - 1], TokenTree::Punct(p) if p.as_char() == '.')
        }
        TokenTree::Ident(ident) => {
            matches!(tokens.get(i + 1), Some(TokenTree::Punct(p)) if p.as_char() == '!')
                && matches!(tokens.get(i + 2), Some(TokenTree::Group(_)))
                && !NON_AWAITING_MACROS.iter().any(|name| ident == name)
        }
        _ => false,
    })
}

/// `#[retry]` and `#[circuit_breaker]` rewrite the body to run it once per
/// attempt: only an `async fn` has a body that can run again.
/// Both attributes rewrite the same kind of fn: written applied more than
/// once, they would nest two chains.
pub(crate) const RETRY_TWICE: &str = "`#[retry]` is applied more than once; one chain is bounded, two nested chains multiply the attempts";

/// The rules both attributes check on the fn itself: it is `async` (unless
/// `#[async_trait]` already rewrote it) and `#[tracing::instrument]` is
/// written below it.
pub(crate) fn fn_shape(
    item: &ItemFn,
    rewritten_by_async_trait: bool,
    attribute: &str,
    errors: &mut Errors,
) {
    if !rewritten_by_async_trait && let Err(err) = asyncness(&item.sig, attribute) {
        errors.push(err);
    }
    if let Err(err) = instrument_order(item, attribute) {
        errors.push(err);
    }
}

pub(crate) fn asyncness(sig: &Signature, attribute: &str) -> syn::Result<()> {
    if sig.asyncness.is_some() {
        return Ok(());
    }
    if let Some(output) = future_output(sig) {
        return Err(syn::Error::new(
            sig.fn_token.span,
            format!(
                "`#[{attribute}]` can only be applied to an `async fn`, and `{name}` returns `impl Future`\n  = note: the attribute runs the fn's body once per attempt; a fn that builds a future and returns it has no body to run again\n  = help: write it as `async fn {name}(…) -> {output}`, with the future's code as its body",
                name = sig.ident,
                output = quote::ToTokens::to_token_stream(output)
                    .to_string()
                    .replace(" <", "<")
                    .replace("< ", "<")
                    .replace(" >", ">")
                    .replace(" ,", ",")
                    .replace(" :: ", "::"),
            ),
        ));
    }
    Err(syn::Error::new(
        sig.fn_token.span,
        format!(
            "`#[{attribute}]` can only be applied to an `async fn`\n  = help: write `async fn {}(…)`; the attribute awaits every attempt and pauses between them on tokio's timer, which a blocking fn cannot do",
            sig.ident
        ),
    ))
}

/// The `Output` of a return type written `impl Future<Output = …>`.
pub(crate) fn future_output(sig: &Signature) -> Option<&syn::Type> {
    let syn::ReturnType::Type(_, ty) = &sig.output else {
        return None;
    };
    let syn::Type::ImplTrait(imp) = &**ty else {
        return None;
    };
    imp.bounds.iter().find_map(|bound| {
        let syn::TypeParamBound::Trait(bound) = bound else {
            return None;
        };
        let last = bound.path.segments.last()?;
        if last.ident != "Future" {
            return None;
        }
        let syn::PathArguments::AngleBracketed(args) = &last.arguments else {
            return None;
        };
        args.args.iter().find_map(|arg| match arg {
            syn::GenericArgument::AssocType(assoc) if assoc.ident == "Output" => Some(&assoc.ty),
            _ => None,
        })
    })
}

/// Is `attr` the attribute `name`, written bare or through `resilience`?
pub(crate) fn is_attribute(attr: &Attribute, name: &str) -> bool {
    let segments: Vec<String> = attr
        .path()
        .segments
        .iter()
        .map(|segment| segment.ident.to_string())
        .collect();
    match segments.as_slice() {
        [only] => only == name,
        [krate, last] => krate == "resilience" && last == name,
        _ => false,
    }
}

/// The layers must nest caller → breaker → retry, as the guide's circuit
/// breaker section says (`resilience::guide`): `#[retry]` is expanded
/// first when it is written above `#[circuit_breaker]`, and then finds the
/// breaker below it.
pub(crate) fn order(item: &ItemFn) -> syn::Result<()> {
    match item
        .attrs
        .iter()
        .find(|attr| is_attribute(attr, "circuit_breaker"))
    {
        Some(attr) => Err(syn::Error::new_spanned(
            attr,
            "`#[circuit_breaker]` must be written above `#[retry]`, not below it\n  = note: the breaker must wrap the retry chain (caller → breaker → retry): it counts one logical call once, whatever the number of attempts, and when it is open no attempt runs; below `#[retry]` it would count every attempt and retry its own rejections\n  = help: move `#[circuit_breaker(…)]` above `#[retry(…)]`",
        )),
        None => Ok(()),
    }
}

/// `#[tracing::instrument]` written above our attributes expands first and
/// opens its span inside the body, so every attempt would get its own
/// span; the guide's metrics section (`resilience::guide`) wants one span
/// per logical call.
pub(crate) fn instrument_order(item: &ItemFn, attribute: &str) -> syn::Result<()> {
    let instrumented = item.block.stmts.iter().any(|stmt| match stmt {
        syn::Stmt::Local(local) => match &local.pat {
            syn::Pat::Ident(ident) => ident.ident.to_string().starts_with("__tracing_attr_span"),
            _ => false,
        },
        _ => false,
    });
    if !instrumented {
        return Ok(());
    }
    Err(syn::Error::new(
        item.sig.ident.span(),
        format!(
            "`#[tracing::instrument]` must be written below `#[{attribute}]`\n  = note: above it, the span is opened inside the body, so every attempt would open its own span; all attempts of one logical call belong to one span\n  = help: move `#[tracing::instrument]` below `#[{attribute}]`"
        ),
    ))
}
