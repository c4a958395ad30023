//! What both macros need from the fn signature: the parameters each
//! attempt gets its own copy of, the receiver, the idempotency key and the
//! `Result` type.

use proc_macro2::{Span, TokenStream, TokenTree};
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::visit_mut::VisitMut;
use syn::{
    FnArg, GenericArgument, Pat, PathArguments, Receiver, ReceiverKind, ReturnType, Signature, Type,
};

/// The name each attempt binds a by-value `self` to.
pub(crate) const SELF_COPY: &str = "__resilience_self";

/// The receiver's type: `Self` for `self`, the written one for
/// `self: Box<Self>`, `&Self` or `&mut Self` for a borrow.
pub(crate) fn receiver_type(receiver: &Receiver) -> Type {
    match &receiver.kind {
        ReceiverKind::Typed(_, ty) => (**ty).clone(),
        ReceiverKind::Reference(and, lifetime, mutability) => {
            syn::parse_quote!(#and #lifetime #mutability Self)
        }
        _ => syn::parse_quote!(Self),
    }
}

/// The parameters, as the expansion needs them.
pub(crate) struct Params {
    /// `let x = clone_arg(&x);` for each by-value parameter, run at the
    /// start of every attempt.
    pub(crate) per_attempt: Vec<TokenStream>,
    /// The named by-value parameters `per_attempt` copies.
    pub(crate) copied: Vec<syn::Ident>,
    /// The arguments to pass on to a fallback: `self, id, …`.
    pub(crate) forward: Vec<TokenStream>,
    /// A parameter carries an idempotency key (by type or by
    /// `#[idempotency_key]`).
    pub(crate) has_idempotency_key: bool,
    /// The receiver is taken by value and the body must use a copy.
    pub(crate) self_by_value: bool,
}

/// Rewrites the signature for the expansion and describes its parameters.
///
/// The rewrite never changes the fn's type: `#[idempotency_key]` markers
/// are removed, a `mut` binding moves into the attempt, and a pattern
/// parameter (`(a, b): (i32, i32)`) gets a name so that each attempt can
/// destructure its own copy.
pub(crate) fn params(sig: &mut Signature, copies: bool) -> Params {
    let mut params = Params {
        per_attempt: Vec::new(),
        copied: Vec::new(),
        forward: Vec::new(),
        has_idempotency_key: false,
        self_by_value: false,
    };
    for (index, input) in sig.inputs.iter_mut().enumerate() {
        match input {
            FnArg::Receiver(receiver) => {
                params.forward.push(quote!(self));
                let by_reference = crate::item::by_reference(receiver);
                if by_reference || !copies {
                    continue;
                }
                params.self_by_value = true;
                let copy = format_ident!("{}", SELF_COPY);
                let mutability = receiver.mutability.take();
                let clone = clone_arg(&receiver_type(receiver), quote!(self));
                params
                    .per_attempt
                    .push(quote!(let #mutability #copy = #clone;));
            }
            FnArg::Typed(typed) => {
                let before = typed.attrs.len();
                typed
                    .attrs
                    .retain(|attr| !attr.path().is_ident("idempotency_key"));
                if typed.attrs.len() != before || is_idempotency_key(&typed.ty) {
                    params.has_idempotency_key = true;
                }
                let is_reference = matches!(*typed.ty, Type::Reference(_));
                match &mut *typed.pat {
                    Pat::Ident(ident) if ident.by_ref.is_none() && ident.subpat.is_none() => {
                        let name = ident.ident.clone();
                        params.forward.push(quote!(#name));
                        if copies && !is_reference {
                            let mutability = ident.mutability.take();
                            let clone = clone_arg(&typed.ty, quote!(#name));
                            params
                                .per_attempt
                                .push(quote!(let #mutability #name = #clone;));
                            params.copied.push(name);
                        }
                    }
                    pat => {
                        let name = format_ident!("__resilience_arg{}", index);
                        params.forward.push(quote!(#name));
                        if !matches!(pat, Pat::Wild(_)) {
                            let binding = if !copies {
                                quote!(let #pat = #name;)
                            } else if let Type::Reference(reference) = &*typed.ty {
                                if reference.mutability.is_some() {
                                    quote!(let #pat = &mut *#name;)
                                } else {
                                    quote!(let #pat = #name;)
                                }
                            } else {
                                let clone = clone_arg(&typed.ty, quote!(#name));
                                quote!(let #pat = #clone;)
                            };
                            params.per_attempt.push(binding);
                        }
                        *typed.pat = syn::parse_quote!(#name);
                    }
                }
            }
        }
    }
    params
}

/// `clone_arg::<Ty>(&name)`, spanned on the parameter's type so that a type
/// that is not `Clone` is reported there. An `impl Trait` cannot be named
/// in a turbofish and is left to inference.
fn clone_arg(ty: &Type, name: TokenStream) -> TokenStream {
    if contains_impl_trait(ty) {
        quote_spanned!(ty.span()=> ::resilience::__private::clone_arg(&#name))
    } else {
        quote_spanned!(ty.span()=> ::resilience::__private::clone_arg::<#ty>(&#name))
    }
}

/// `IdempotencyKey`, `&IdempotencyKey` or a path ending in it.
fn is_idempotency_key(ty: &Type) -> bool {
    match ty {
        Type::Reference(reference) => is_idempotency_key(&reference.elem),
        Type::Group(group) => is_idempotency_key(&group.elem),
        Type::Paren(paren) => is_idempotency_key(&paren.elem),
        Type::Path(path) => path
            .path
            .segments
            .last()
            .is_some_and(|segment| segment.ident == "IdempotencyKey"),
        _ => false,
    }
}

/// The `Result` a protected fn returns.
pub(crate) struct ResultType {
    /// The whole return type, with the user's spans.
    pub(crate) ty: Type,
    /// Where trait errors about the error type should point: the `E` of
    /// `Result<T, E>`, or the whole type for an alias like `io::Result<T>`.
    pub(crate) error_span: Span,
    /// `false` when the type cannot be written in a `let` (it holds an
    /// `impl Trait`).
    pub(crate) nameable: bool,
}

/// The return type, if it is a `Result<_, _>` (or an alias named
/// `Result`); otherwise the error to report, on the return type or, when
/// there is none, on the parameter list.
pub(crate) fn result_type(sig: &Signature, attribute: &str) -> Result<ResultType, syn::Error> {
    result_type_of(&sig.output, sig, attribute)
}

/// The `Result` type of `item`, looking through a body already rewritten by
/// `#[async_trait]` to the output of its future.
pub(crate) fn result_type_for(
    item: &syn::ItemFn,
    async_trait: Option<&crate::async_trait::AsyncTraitBody>,
    attribute: &str,
) -> Result<ResultType, syn::Error> {
    match async_trait {
        Some(parts) => {
            let output = ReturnType::Type(Default::default(), Box::new(parts.output.clone()));
            result_type_of(&output, &item.sig, attribute)
        }
        None => result_type(&item.sig, attribute),
    }
}

/// Like [`result_type`], for the output of a future (`#[async_trait]`).
pub(crate) fn result_type_of(
    output: &ReturnType,
    sig: &Signature,
    attribute: &str,
) -> Result<ResultType, syn::Error> {
    let ty = match output {
        ReturnType::Type(_, ty) => ty,
        ReturnType::Default => {
            return Err(syn::Error::new(
                sig.paren_token.span.close(),
                format!(
                    "`#[{attribute}]` needs a fn returning `Result<T, E>`: the error type decides what is retried and what opens the breaker\n  = help: return `Result<(), E>` with an error type that implements `resilience::retry::Classify`"
                ),
            ));
        }
    };
    let mut inner = &**ty;
    while let Type::Group(group) = inner {
        inner = &group.elem;
    }
    let last = match inner {
        Type::Path(path) if path.qself.is_none() => path.path.segments.last(),
        _ => None,
    };
    let Some(segment) = last.filter(|segment| segment.ident == "Result") else {
        return Err(syn::Error::new_spanned(
            ty,
            format!(
                "`#[{attribute}]` needs a fn returning `Result<T, E>`, not `{}`: the error type decides what is retried and what opens the breaker\n  = help: return `Result<_, E>` with an error type that implements `resilience::retry::Classify`",
                quote!(#ty)
                    .to_string()
                    .replace(" < ", "<")
                    .replace(" >", ">")
                    .replace(" ,", ",")
            ),
        ));
    };
    let error_span = match &segment.arguments {
        PathArguments::AngleBracketed(args) => match args.args.iter().nth(1) {
            Some(GenericArgument::Type(error)) => error.span(),
            _ => ty.span(),
        },
        _ => ty.span(),
    };
    Ok(ResultType {
        ty: (**ty).clone(),
        error_span,
        nameable: !contains_impl_trait(ty),
    })
}

fn contains_impl_trait(ty: &Type) -> bool {
    fn scan(tokens: TokenStream) -> bool {
        tokens.into_iter().any(|token| match token {
            TokenTree::Ident(ident) => ident == "impl",
            TokenTree::Group(group) => scan(group.stream()),
            _ => false,
        })
    }
    scan(quote!(#ty))
}

/// Replaces `self` with another name (the attempt's copy of a by-value
/// receiver, or `#[async_trait]`'s `__self`), in expressions and in the
/// tokens of macro calls (async-trait's approach). Nested items have their
/// own `self` and are left alone.
pub(crate) struct ReplaceSelf(pub(crate) &'static str);

impl ReplaceSelf {
    /// With the attempt's copy of a by-value receiver.
    pub(crate) fn copy() -> Self {
        ReplaceSelf(SELF_COPY)
    }
}

impl VisitMut for ReplaceSelf {
    fn visit_path_mut(&mut self, path: &mut syn::Path) {
        if path.leading_colon.is_none() && path.segments.len() == 1 {
            let segment = &mut path.segments[0];
            if segment.ident == "self" {
                segment.ident = syn::Ident::new(self.0, segment.ident.span());
            }
        }
        syn::visit_mut::visit_path_mut(self, path);
    }

    fn visit_item_mut(&mut self, _: &mut syn::Item) {}

    fn visit_macro_mut(&mut self, mac: &mut syn::Macro) {
        mac.tokens = replace_self_tokens(std::mem::take(&mut mac.tokens), self.0);
    }
}

fn replace_self_tokens(tokens: TokenStream, name: &str) -> TokenStream {
    let mut out = Vec::new();
    let mut iter = tokens.into_iter().peekable();
    while let Some(token) = iter.next() {
        match token {
            TokenTree::Ident(ident) if ident == "self" => {
                // `self::path` names a module, not the receiver.
                let is_path =
                    matches!(iter.peek(), Some(TokenTree::Punct(p)) if p.as_char() == ':');
                if is_path {
                    out.push(TokenTree::Ident(ident));
                } else {
                    out.push(TokenTree::Ident(syn::Ident::new(name, ident.span())));
                }
            }
            TokenTree::Group(group) => {
                let mut replaced = proc_macro2::Group::new(
                    group.delimiter(),
                    replace_self_tokens(group.stream(), name),
                );
                replaced.set_span(group.span());
                out.push(TokenTree::Group(replaced));
            }
            other => out.push(other),
        }
    }
    out.into_iter().collect()
}
