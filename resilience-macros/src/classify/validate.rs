//! The rules between keys: one verdict per variant, each field key on a
//! field, `retry_after` and `reason` only where they mean something, one
//! variant for the runtime's errors.

use proc_macro2::TokenStream;
use quote::quote;
use syn::spanned::Spanned;
use syn::{DeriveInput, Member, Type};

use super::parse::{Field, Key, KeyKind, Variant};
use crate::errors::Errors;
use resilience_rules::suggest::did_you_mean;

/// What `expand` writes for one variant.
pub(super) struct VariantPlan {
    /// `Self::Variant`, or `Self` for a struct.
    pub(super) path: TokenStream,
    pub(super) kind: Kind,
    /// The field holding a `Retry-After` delay.
    pub(super) retry_after: Option<(Member, Type)>,
}

/// The verdict of one variant.
pub(super) enum Kind {
    /// Worth another attempt; `reason` is the metric label's variant name.
    Transient(Option<&'static str>),
    /// Another attempt would get the same answer.
    Permanent,
    /// Classified as this field's type classifies it.
    Through(Member, Type),
    /// Classified as the HTTP status in this field.
    Status(Member, Type),
}

/// Everything `expand` needs.
pub(super) struct Plan {
    pub(super) variants: Vec<VariantPlan>,
    /// The `runtime` variant, when the derive writes its
    /// `From<resilience::Error>` (no `#[from]` on the field).
    pub(super) from_runtime: Option<(TokenStream, Member)>,
}

/// `reason = "…"`: the metric label, and the `Reason` variant it names.
const REASONS: &[(&str, &str)] = &[
    ("timeout", "Timeout"),
    ("5xx", "ServerError"),
    ("network", "Network"),
    ("circuit_open", "CircuitOpen"),
];

const HELP: &str = "add `#[classify(transient)]` when a later attempt may succeed (a timeout, a reset connection, a 5xx), `#[classify(permanent)]` when another attempt would get the same answer (a 404, a validation error), or classify through a field: `#[classify(source)]` (an error that implements `Classify`), `#[classify(runtime)]` (the runtime's `resilience::Error`), `#[classify(status)]` (an HTTP status)";

pub(super) fn validate(
    input: &DeriveInput,
    variants: Vec<Variant<'_>>,
    errors: &mut Errors,
) -> Plan {
    let mut plan = Plan {
        variants: Vec::new(),
        from_runtime: None,
    };
    let mut runtime_seen: Option<String> = None;
    for variant in &variants {
        let path = match variant.ident {
            Some(ident) => quote!(Self::#ident),
            None => quote!(Self),
        };
        let what = match variant.ident {
            Some(ident) => format!("variant `{ident}`"),
            None => format!("`{}`", input.ident),
        };
        let Some(found) = kind_of(variant, &what, errors) else {
            continue;
        };
        let retry_after = retry_after(variant, &found, &what, errors);
        let kind = match &found {
            Found::Transient(_) => Kind::Transient(reason(variant, &found, &what, errors)),
            Found::Permanent(_) => {
                reason(variant, &found, &what, errors);
                Kind::Permanent
            }
            Found::Field { key, field } => {
                reason(variant, &found, &what, errors);
                let member = member(field);
                let ty = field.field.ty.clone();
                match key.kind {
                    KeyKind::Status => Kind::Status(member, ty),
                    KeyKind::Runtime => {
                        if let Some(first) = &runtime_seen {
                            errors.push(key.error(format!(
                                "{first} already takes the runtime's errors: `#[classify(runtime)]` marks the one variant that `resilience::Error` becomes"
                            )));
                        } else {
                            runtime_seen = Some(what.clone());
                            if !field.has_from {
                                if variant.fields.len() == 1 {
                                    plan.from_runtime = Some((path.clone(), member.clone()));
                                } else {
                                    errors.push(key.error(format!(
                                        "{what} has other fields besides the runtime's error, so `From<resilience::Error>` cannot build it\n  = help: give the runtime's error a variant of its own: `Resilience(#[classify(runtime)] resilience::Error)`"
                                    )));
                                }
                            }
                        }
                        Kind::Through(member, ty)
                    }
                    _ => Kind::Through(member, ty),
                }
            }
        };
        plan.variants.push(VariantPlan {
            path,
            kind,
            retry_after,
        });
    }
    plan
}

/// The key that gives a variant its verdict, and the field it names.
enum Found<'v, 'a> {
    Transient(&'v Key),
    Permanent(&'v Key),
    Field { key: &'v Key, field: &'v Field<'a> },
}

impl Found<'_, '_> {
    fn key(&self) -> &Key {
        match self {
            Found::Transient(key) | Found::Permanent(key) | Found::Field { key, .. } => key,
        }
    }
}

fn is_field_kind(kind: &KeyKind) -> bool {
    matches!(kind, KeyKind::Source | KeyKind::Runtime | KeyKind::Status)
}

/// The one verdict of `variant`, from its own keys and its fields'.
fn kind_of<'v, 'a>(
    variant: &'v Variant<'a>,
    what: &str,
    errors: &mut Errors,
) -> Option<Found<'v, 'a>> {
    let mut found: Vec<Found<'v, 'a>> = Vec::new();
    for key in &variant.keys {
        match &key.kind {
            KeyKind::Transient => found.push(Found::Transient(key)),
            KeyKind::Permanent => found.push(Found::Permanent(key)),
            kind if is_field_kind(kind) => {
                if let Some(field) = field_for(variant, key, what, errors) {
                    found.push(Found::Field { key, field });
                }
            }
            KeyKind::RetryAfter => errors.push(key.error(format!(
                "`retry_after` marks the field that holds the delay: write `#[classify(retry_after)]` on a field of {what}"
            ))),
            _ => {}
        }
    }
    for field in &variant.field_keys {
        for key in &field.keys {
            match &key.kind {
                kind if is_field_kind(kind) => found.push(Found::Field { key, field }),
                KeyKind::Transient | KeyKind::Permanent | KeyKind::Reason(..) => {
                    errors.push(key.error(format!(
                        "`{}` says what all of {what} is: write it on the variant, `#[classify({})]`, not on a field",
                        key.kind.name(),
                        key.tokens,
                    )))
                }
                _ => {}
            }
        }
    }
    let mut found = found.into_iter();
    let Some(first) = found.next() else {
        if !errors_already_about(variant) {
            errors.push(syn::Error::new_spanned(
                variant.name,
                format!("{what} does not say whether it may be retried\n  = help: {HELP}"),
            ));
        }
        return None;
    };
    if let Some(second) = found.next() {
        let (one, two) = (first.key().kind.name(), second.key().kind.name());
        let message = if one == two {
            format!("{what} says `{one}` twice, on the variant and on a field: keep one")
        } else {
            format!("{what} is classified twice, as `{one}` and as `{two}`: keep one")
        };
        errors.push(second.key().error(message));
        return None;
    }
    Some(first)
}

/// Whether the variant has keys that were refused, here or while parsing:
/// then "does not say" would be a second error about the same mistake.
fn errors_already_about(variant: &Variant<'_>) -> bool {
    variant.refused
        || !variant.keys.is_empty()
        || variant
            .field_keys
            .iter()
            .any(|field| !field.keys.is_empty())
}

/// The field a variant-level `source`, `runtime` or `status` names: the
/// only field, or the one thiserror's `#[from]` or `#[source]` marks.
fn field_for<'v, 'a>(
    variant: &'v Variant<'a>,
    key: &Key,
    what: &str,
    errors: &mut Errors,
) -> Option<&'v Field<'a>> {
    let name = key.kind.name();
    match variant.field_keys.as_slice() {
        [] => {
            errors.push(key.error(format!(
                "`{name}` classifies through a field, and {what} has none\n  = help: {HELP}"
            )));
            None
        }
        [only] => Some(only),
        fields => {
            let mut sources = fields.iter().filter(|f| f.is_source);
            match (
                sources.next(),
                sources.next(),
                matches!(key.kind, KeyKind::Source),
            ) {
                (Some(source), None, true) => Some(source),
                _ => {
                    errors.push(key.error(format!(
                        "{what} has {} fields: write `#[classify({name})]` on the field to classify through",
                        fields.len()
                    )));
                    None
                }
            }
        }
    }
}

/// The `retry_after` field of `variant`, refused where the verdict has no
/// use for a delay.
fn retry_after(
    variant: &Variant<'_>,
    found: &Found<'_, '_>,
    what: &str,
    errors: &mut Errors,
) -> Option<(Member, Type)> {
    let mut marked = variant
        .field_keys
        .iter()
        .flat_map(|field| field.keys.iter().map(move |key| (field, key)))
        .filter(|(_, key)| matches!(key.kind, KeyKind::RetryAfter));
    let (field, key) = marked.next()?;
    if let Some((_, second)) = marked.next() {
        errors.push(second.error(format!(
            "{what} has two `retry_after` fields: one delay is honoured, keep one"
        )));
        return None;
    }
    let fits = match found {
        Found::Transient(_) => true,
        Found::Field { key, .. } => matches!(key.kind, KeyKind::Status),
        Found::Permanent(_) => false,
    };
    if !fits {
        errors.push(key.error(format!(
            "`retry_after` goes with `transient` or `status`: {what} is `{}`, {}",
            found.key().kind.name(),
            match found {
                Found::Permanent(_) => "which is never retried, so it has no use for a delay",
                _ => "whose field gives its own verdict, delay included",
            }
        )));
        return None;
    }
    Some((member(field), field.field.ty.clone()))
}

/// The `reason = "…"` of a variant, refused unless it is `transient`.
fn reason(
    variant: &Variant<'_>,
    found: &Found<'_, '_>,
    what: &str,
    errors: &mut Errors,
) -> Option<&'static str> {
    let key = variant
        .keys
        .iter()
        .find(|key| matches!(key.kind, KeyKind::Reason(..)))?;
    let KeyKind::Reason(value, span) = &key.kind else {
        return None;
    };
    match found {
        Found::Transient(_) => {}
        Found::Permanent(_) => {
            errors.push(key.error(format!(
                "`reason` says why the dependency failed, and a `permanent` error is an answer, not a failure: remove `reason` from {what}"
            )));
            return None;
        }
        Found::Field { key: through, .. } => {
            errors.push(key.error(format!(
                "`reason` goes with `transient`: {what} is classified through its field (`{}`), whose type gives the reason",
                through.kind.name()
            )));
            return None;
        }
    }
    match REASONS.iter().find(|(label, _)| label == value) {
        Some((_, variant)) => Some(variant),
        None => {
            let labels = REASONS
                .iter()
                .map(|(label, _)| format!("`\"{label}\"`"))
                .collect::<Vec<_>>()
                .join(", ");
            let mut message = format!("unknown reason `\"{value}\"`");
            if let Some(near) = did_you_mean(value, REASONS.iter().map(|(label, _)| *label)) {
                message.push_str(&format!("; did you mean `\"{near}\"`?"));
            }
            message.push_str(&format!(
                "\n  = note: the reasons are the values of the `reason` label of `dependency_errors_total`: {labels}"
            ));
            errors.push(syn::Error::new(*span, message));
            None
        }
    }
}

fn member(field: &Field<'_>) -> Member {
    match &field.field.ident {
        Some(ident) => Member::Named(ident.clone()),
        None => Member::Unnamed(syn::Index {
            index: field.index as u32,
            span: field.field.ty.span(),
        }),
    }
}
