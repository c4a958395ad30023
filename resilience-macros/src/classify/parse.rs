//! Reading the `#[classify(…)]` attributes: syntax only. Which keys go
//! together, and where, is checked in `validate`.

use proc_macro2::{Span, TokenStream};
use quote::{ToTokens, quote};
use syn::meta::ParseNestedMeta;
use syn::{Attribute, Data, DeriveInput, Fields, Ident, LitStr, Token};

use crate::errors::Errors;
use resilience_rules::suggest::did_you_mean;

/// Every key `#[classify(…)]` accepts, on a variant or on a field.
pub(super) const KEYS: &[&str] = &[
    "transient",
    "permanent",
    "source",
    "runtime",
    "status",
    "retry_after",
    "reason",
];

/// Names other libraries (or a first guess) use, mapped to ours.
const ALIASES: &[(&str, &str)] = &[
    ("retryable", "transient"),
    ("retry", "transient"),
    ("temporary", "transient"),
    ("fatal", "permanent"),
    ("non_retryable", "permanent"),
    ("terminal", "permanent"),
    ("transparent", "source"),
    ("from", "source"),
    ("inner", "source"),
    ("resilience", "runtime"),
    ("status_code", "status"),
    ("http_status", "status"),
    ("delay", "retry_after"),
];

/// One key as written, with its tokens for the error that underlines it.
pub(super) struct Key {
    pub(super) kind: KeyKind,
    pub(super) tokens: TokenStream,
}

impl Key {
    pub(super) fn error(&self, message: impl std::fmt::Display) -> syn::Error {
        syn::Error::new_spanned(&self.tokens, message)
    }
}

#[derive(Clone)]
pub(super) enum KeyKind {
    Transient,
    Permanent,
    Source,
    Runtime,
    Status,
    RetryAfter,
    Reason(String, Span),
}

impl KeyKind {
    pub(super) fn name(&self) -> &'static str {
        match self {
            KeyKind::Transient => "transient",
            KeyKind::Permanent => "permanent",
            KeyKind::Source => "source",
            KeyKind::Runtime => "runtime",
            KeyKind::Status => "status",
            KeyKind::RetryAfter => "retry_after",
            KeyKind::Reason(..) => "reason",
        }
    }
}

/// One field and the keys written on it.
pub(super) struct Field<'a> {
    pub(super) field: &'a syn::Field,
    pub(super) index: usize,
    pub(super) keys: Vec<Key>,
    /// thiserror's `#[from]` is on the field: thiserror writes the `From`
    /// impl.
    pub(super) has_from: bool,
    /// thiserror's `#[from]` or `#[source]` is on the field.
    pub(super) is_source: bool,
}

/// One variant (or the struct itself) and the keys written on it and on
/// its fields.
pub(super) struct Variant<'a> {
    /// `None` for a struct.
    pub(super) ident: Option<&'a Ident>,
    /// The variant's name, or the struct's, for messages and spans.
    pub(super) name: &'a Ident,
    pub(super) fields: &'a Fields,
    pub(super) keys: Vec<Key>,
    pub(super) field_keys: Vec<Field<'a>>,
    /// A `#[classify(…)]` of the variant or of its fields was refused.
    pub(super) refused: bool,
}

/// The variants of `input` with their keys; an enum's own
/// `#[classify(…)]` and a union are refused here.
pub(super) fn parse<'a>(input: &'a DeriveInput, errors: &mut Errors) -> Vec<Variant<'a>> {
    match &input.data {
        Data::Struct(data) => {
            vec![variant(
                None,
                &input.ident,
                &input.attrs,
                &data.fields,
                errors,
            )]
        }
        Data::Enum(data) => {
            for attr in classify_attrs(&input.attrs) {
                errors.push(syn::Error::new_spanned(
                    attr,
                    format!(
                        "`#[classify(…)]` goes on each variant of `{}`, not on the enum: every variant says for itself whether it may be retried",
                        input.ident
                    ),
                ));
            }
            data.variants
                .iter()
                .map(|v| variant(Some(&v.ident), &v.ident, &v.attrs, &v.fields, errors))
                .collect()
        }
        Data::Union(data) => {
            errors.push(syn::Error::new_spanned(
                data.union_token,
                "`#[derive(Classify)]` works on an enum or a struct, not on a union",
            ));
            Vec::new()
        }
    }
}

fn variant<'a>(
    ident: Option<&'a Ident>,
    name: &'a Ident,
    attrs: &'a [Attribute],
    fields: &'a Fields,
    errors: &mut Errors,
) -> Variant<'a> {
    let before = errors.len();
    let own = keys(attrs, errors);
    let field_keys = fields
        .iter()
        .enumerate()
        .map(|(index, field)| {
            let has_from = field.attrs.iter().any(|a| a.path().is_ident("from"));
            Field {
                field,
                index,
                keys: keys(&field.attrs, errors),
                has_from,
                is_source: has_from || field.attrs.iter().any(|a| a.path().is_ident("source")),
            }
        })
        .collect();
    let refused = errors.len() != before;
    Variant {
        ident,
        name,
        fields,
        keys: own,
        field_keys,
        refused,
    }
}

fn classify_attrs(attrs: &[Attribute]) -> impl Iterator<Item = &Attribute> {
    attrs.iter().filter(|attr| attr.path().is_ident("classify"))
}

/// The keys of every `#[classify(…)]` in `attrs`, duplicates reported.
fn keys(attrs: &[Attribute], errors: &mut Errors) -> Vec<Key> {
    let mut keys: Vec<Key> = Vec::new();
    for attr in classify_attrs(attrs) {
        if let syn::Meta::Path(path) = &attr.meta {
            errors.push(syn::Error::new_spanned(
                path,
                "`#[classify]` needs a key: `#[classify(transient)]`, `#[classify(permanent)]`, `#[classify(source)]`, `#[classify(runtime)]` or `#[classify(status)]`",
            ));
            continue;
        }
        let result = attr.parse_nested_meta(|meta| {
            let Some(key) = meta.path.get_ident().map(Ident::to_string) else {
                return Err(meta.error("expected a key such as `transient` or `source`"));
            };
            let parsed = match key.as_str() {
                "transient" => flag(&meta, KeyKind::Transient)?,
                "permanent" => flag(&meta, KeyKind::Permanent)?,
                "source" => flag(&meta, KeyKind::Source)?,
                "runtime" => flag(&meta, KeyKind::Runtime)?,
                "status" => flag(&meta, KeyKind::Status)?,
                "retry_after" => flag(&meta, KeyKind::RetryAfter)?,
                "reason" => reason(&meta)?,
                _ => return unknown(&meta, &key),
            };
            if keys.iter().any(|k| k.kind.name() == parsed.kind.name()) {
                errors.push(
                    parsed.error(format!("`{}` specified more than once", parsed.kind.name())),
                );
            } else {
                keys.push(parsed);
            }
            Ok(())
        });
        if let Err(err) = result {
            errors.push(err);
        }
    }
    keys
}

fn flag(meta: &ParseNestedMeta<'_>, kind: KeyKind) -> syn::Result<Key> {
    let name = kind.name();
    if !meta.input.is_empty() && !meta.input.peek(Token![,]) {
        return Err(meta.error(format!("`{name}` takes no value: write `{name}` alone")));
    }
    Ok(Key {
        kind,
        tokens: meta.path.to_token_stream(),
    })
}

fn reason(meta: &ParseNestedMeta<'_>) -> syn::Result<Key> {
    let path = &meta.path;
    if !meta.input.peek(Token![=]) {
        return Err(meta.error(
            "`reason` needs a value: `reason = \"timeout\"`, `\"5xx\"`, `\"network\"` or `\"circuit_open\"`",
        ));
    }
    let value: LitStr = meta.value()?.parse()?;
    Ok(Key {
        kind: KeyKind::Reason(value.value(), value.span()),
        tokens: quote!(#path = #value),
    })
}

fn unknown(meta: &ParseNestedMeta<'_>, key: &str) -> syn::Result<()> {
    let suggestion = ALIASES
        .iter()
        .find(|(alias, _)| *alias == key)
        .map(|(_, target)| *target)
        .or_else(|| did_you_mean(key, KEYS.iter().copied()));
    let accepted = KEYS
        .iter()
        .map(|key| format!("`{key}`"))
        .collect::<Vec<_>>()
        .join(", ");
    let mut message = format!("unknown key `{key}` in `#[classify(…)]`");
    if let Some(suggestion) = suggestion {
        message.push_str(&format!("; did you mean `{suggestion}`?"));
    }
    message.push_str(&format!("\n  = note: the keys are {accepted}"));
    Err(meta.error(message))
}
