//! Writing the `Classify` impl: nothing here can fail.
//!
//! Input:
//!
//! ```text
//! #[derive(Classify)]
//! enum ApiError {
//!     #[classify(status)] Status(u16, #[classify(retry_after)] Option<Duration>),
//!     #[classify(permanent)] Decode(String),
//!     #[classify(runtime)] Resilience(resilience::Error),
//! }
//! ```
//!
//! Output:
//!
//! ```text
//! impl Classify for ApiError {
//!     fn classify(&self) -> Verdict {
//!         match self {
//!             Self::Status { 0: status, 1: delay, .. } => {
//!                 HttpStatus::with_retry_after(status.as_http_status(), delay.as_retry_after())
//!             }
//!             Self::Decode { .. } => Verdict::Permanent,
//!             Self::Resilience { 0: inner, .. } => Classify::classify(inner),
//!         }
//!     }
//!     fn reason(&self) -> Option<Reason> { … }   // the same arms
//!     fn outcome(&self) -> Outcome { … }         // the field's, or the verdict's
//! }
//! impl From<resilience::Error> for ApiError {
//!     fn from(error: resilience::Error) -> Self { Self::Resilience { 0: error } }
//! }
//! ```

use proc_macro2::TokenStream;
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{DeriveInput, Type};

use super::validate::{Kind, Plan, VariantPlan};

pub(super) fn expand(input: &DeriveInput, plan: Plan) -> TokenStream {
    let ident = &input.ident;
    let (impl_generics, ty_generics, where_clause) = input.generics.split_for_impl();
    let mut bounds: Vec<TokenStream> = where_clause
        .map(|w| w.predicates.iter().map(|p| quote!(#p)).collect())
        .unwrap_or_default();
    // A field of a generic type is classified through a bound, so that the
    // impl says what it needs.
    if !input.generics.params.is_empty() {
        for variant in &plan.variants {
            if let Kind::Through(_, ty) = &variant.kind {
                bounds.push(quote!(#ty: ::resilience::retry::Classify));
            }
        }
    }
    let where_clause = if bounds.is_empty() {
        quote!()
    } else {
        quote!(where #(#bounds),*)
    };

    let classify = arms(&plan.variants, true, classify_arm);
    let reason = arms(&plan.variants, false, reason_arm);
    let outcome = arms(&plan.variants, true, outcome_arm);
    let from = plan.from_runtime.map(|(path, member)| {
        quote! {
            #[automatically_derived]
            impl #impl_generics ::core::convert::From<::resilience::Error> for #ident #ty_generics #where_clause {
                fn from(error: ::resilience::Error) -> Self {
                    #path { #member: error }
                }
            }
        }
    });
    quote! {
        #[automatically_derived]
        impl #impl_generics ::resilience::retry::Classify for #ident #ty_generics #where_clause {
            fn classify(&self) -> ::resilience::retry::Verdict {
                #classify
            }

            fn reason(&self) -> ::core::option::Option<::resilience::retry::Reason> {
                #reason
            }

            fn outcome(&self) -> ::resilience::retry::Outcome {
                #outcome
            }
        }
        #from
    }
}

/// `match self { … }` with one arm per variant, each binding the fields it
/// reads (the delay only where `uses_delay`).
fn arms(
    variants: &[VariantPlan],
    uses_delay: bool,
    arm: fn(&VariantPlan) -> TokenStream,
) -> TokenStream {
    if variants.is_empty() {
        return quote!(match *self {});
    }
    let arms = variants.iter().map(|variant| {
        let path = &variant.path;
        let mut bindings = Vec::new();
        if let Kind::Through(member, _) | Kind::Status(member, _) = &variant.kind {
            bindings.push(quote!(#member: __resilience_field));
        }
        if let Some((member, _)) = variant.retry_after.as_ref().filter(|_| uses_delay) {
            bindings.push(quote!(#member: __resilience_delay));
        }
        let body = arm(variant);
        quote!(#path { #(#bindings,)* .. } => #body,)
    });
    quote! {
        match self {
            #(#arms)*
        }
    }
}

fn field() -> syn::Ident {
    format_ident!("__resilience_field")
}

/// The delay of the `retry_after` field, if any; its type's errors land on
/// the field's type.
fn delay(variant: &VariantPlan) -> TokenStream {
    match &variant.retry_after {
        Some((_, ty)) => quote_spanned! {ty.span()=>
            <#ty as ::resilience::retry::AsRetryAfter>::as_retry_after(__resilience_delay)
        },
        None => quote!(::core::option::Option::None),
    }
}

fn status(ty: &Type) -> TokenStream {
    let field = field();
    quote_spanned! {ty.span()=>
        <#ty as ::resilience::retry::AsHttpStatus>::as_http_status(#field)
    }
}

fn classify_arm(variant: &VariantPlan) -> TokenStream {
    let field = field();
    match &variant.kind {
        Kind::Transient(_) => {
            let delay = delay(variant);
            quote!(::resilience::__private::transient_after(#delay))
        }
        Kind::Permanent => quote!(::resilience::retry::Verdict::Permanent),
        Kind::Through(_, ty) => quote_spanned! {ty.span()=>
            <#ty as ::resilience::retry::Classify>::classify(#field)
        },
        Kind::Status(_, ty) => {
            let status = status(ty);
            let delay = delay(variant);
            quote!(::resilience::retry::HttpStatus::with_retry_after(#status, #delay))
        }
    }
}

fn reason_arm(variant: &VariantPlan) -> TokenStream {
    let field = field();
    match &variant.kind {
        Kind::Transient(reason) => {
            let reason = format_ident!("{}", reason.unwrap_or("Network"));
            quote!(::core::option::Option::Some(::resilience::retry::Reason::#reason))
        }
        Kind::Permanent => quote!(::core::option::Option::None),
        Kind::Through(_, ty) => quote_spanned! {ty.span()=>
            <#ty as ::resilience::retry::Classify>::reason(#field)
        },
        Kind::Status(_, ty) => {
            let status = status(ty);
            quote!(::resilience::retry::Classify::reason(&#status))
        }
    }
}

fn outcome_arm(variant: &VariantPlan) -> TokenStream {
    let field = field();
    match &variant.kind {
        Kind::Through(_, ty) => quote_spanned! {ty.span()=>
            <#ty as ::resilience::retry::Classify>::outcome(#field)
        },
        _ => {
            let verdict = classify_arm(variant);
            quote!(::resilience::retry::Verdict::outcome(#verdict))
        }
    }
}
