//! The annotated item: parsing it, and giving it back untouched next to
//! the errors when the attribute is refused.

use proc_macro2::TokenStream;
use quote::quote;
use syn::{FnArg, ItemFn, Receiver, ReceiverKind, Type};

use crate::errors::Errors;

/// Parses the fn, or returns what to emit instead: the item unchanged and
/// an error saying where the attribute belongs.
pub(crate) fn parse(input: TokenStream, attribute: &str) -> Result<ItemFn, TokenStream> {
    match syn::parse2::<ItemFn>(input.clone()) {
        Ok(item) => Ok(item),
        Err(err) => {
            let err = match syn::parse2::<syn::TraitItemFn>(input.clone()) {
                Ok(declaration) if declaration.default.is_none() => syn::Error::new_spanned(
                    &declaration.sig,
                    format!(
                        "`#[{attribute}]` needs a body to protect: put it on the fn in each `impl` of the trait, not on its declaration"
                    ),
                ),
                _ => syn::Error::new(
                    err.span(),
                    format!("`#[{attribute}]` can only be applied to an `async fn`: {err}"),
                ),
            };
            let error = err.to_compile_error();
            Err(quote!(#input #error))
        }
    }
}

/// The fn as written (minus the `#[idempotency_key]` markers, which are not
/// attributes of their own) followed by the errors, so that callers of the
/// fn get no knock-on errors.
pub(crate) fn with_errors(mut item: ItemFn, errors: Errors) -> TokenStream {
    for input in &mut item.sig.inputs {
        if let FnArg::Typed(typed) = input {
            typed
                .attrs
                .retain(|attr| !attr.path().is_ident("idempotency_key"));
        }
    }
    let errors = errors.finish().map(|err| err.to_compile_error());
    quote!(#item #errors)
}

/// Whether a method borrows its receiver: `&self`, `&mut self`,
/// `self: &Self`.
pub(crate) fn by_reference(receiver: &Receiver) -> bool {
    match &receiver.kind {
        ReceiverKind::Reference(..) => true,
        ReceiverKind::Typed(_, ty) => matches!(**ty, Type::Reference(_)),
        _ => false,
    }
}
