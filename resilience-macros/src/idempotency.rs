//! May this fn be retried? Idempotency first, retry second, as the guide
//! says (`resilience::guide`).
//!
//! A fn is safe to retry when its HTTP method is idempotent, when it takes
//! an idempotency key that every attempt sends, or when the author asserts
//! `idempotent`. Without a declared method the verb that starts the fn's
//! name decides (a verb that may create, such as `save_`, needs a key like
//! one that creates); a name that says nothing is refused rather than
//! guessed.

use resilience_rules::idempotency::{CREATING, IDEMPOTENT, MAY_CREATE, verb};
use syn::Ident;

use crate::args::{Arg, Method, RetryArgs};

/// Refuses a retried fn that may not be idempotent. The error points at the
/// fn name and says the rule and the fixes.
pub(crate) fn check(args: &RetryArgs, name: &Ident, has_key: bool) -> syn::Result<()> {
    check_for(
        "retry",
        args.method.as_ref(),
        args.idempotent.is_some(),
        name,
        has_key,
    )
}

/// [`check`] for the attribute `attribute` (`retry` or `hedge`: both send
/// the same request more than once).
pub(crate) fn check_for(
    attribute: &str,
    method: Option<&Arg<Method>>,
    idempotent: bool,
    name: &Ident,
    has_key: bool,
) -> syn::Result<()> {
    if idempotent || has_key {
        return Ok(());
    }
    let fix = format!(
        "  = help: add a parameter `key: resilience::IdempotencyKey` that the caller creates once per logical call (every attempt sends the same key), or mark the parameter that already carries the key with `#[idempotency_key]`\n  = help: if a repeat is harmless anyway, assert it: `#[{attribute}(idempotent, …)]`"
    );
    let (safe, again) = match attribute {
        "hedge" => ("send twice", "a second request"),
        _ => ("retry", "a retry"),
    };
    let rule = match attribute {
        "hedge" => {
            "  = note: a hedged call sends the same request again while the first is still running, and both may be applied; a POST or PATCH is safe to send twice only with an `Idempotency-Key` that is the same on every attempt"
        }
        _ => {
            "  = note: a retried request may run twice on the server: the first attempt can succeed and only its response be lost; a POST or PATCH is safe to retry only with an `Idempotency-Key` that is the same on every attempt"
        }
    };
    let may_create = match attribute {
        "hedge" => {
            "a hedged call sends the same request again while the first is still running, and both may be applied: an operation that may create a record (an INSERT under a fresh id, a POST) can create it twice, unless every attempt carries the same idempotency key"
        }
        _ => {
            "a retried call may run twice: the first attempt can succeed and only its response be lost, so retrying an operation that may create a record (an INSERT under a fresh id, a POST) can create it twice, unless every attempt carries the same idempotency key"
        }
    };
    if let Some(method) = method {
        let value = method.get();
        if value.is_idempotent() {
            return Ok(());
        }
        return Err(syn::Error::new(
            name.span(),
            format!(
                "`#[{attribute}]` on `{name}`, declared `method = \"{}\"`, needs an idempotency key\n{rule}\n{fix}",
                value.as_str()
            ),
        ));
    }
    let text = name.to_string();
    match verb(&text) {
        Some(verb) if IDEMPOTENT.contains(&verb.as_str()) => Ok(()),
        Some(verb) if CREATING.contains(&verb.as_str()) => Err(syn::Error::new(
            name.span(),
            format!(
                "`#[{attribute}]` on `{name}` needs an idempotency key: `{verb}` creates or triggers something, like a POST, and {again} may do it twice\n{rule}\n{fix}"
            ),
        )),
        Some(verb) if MAY_CREATE.contains(&verb.as_str()) => Err(syn::Error::new(
            name.span(),
            format!(
                "`#[{attribute}]` on `{name}` needs an idempotency key: `{verb}` may create a record, and {again} may create it twice\n  = note: {may_create}\n{fix}\n  = help: if `{name}` only overwrites a record the caller names (an UPDATE, or an upsert by a key the caller chose), declare it: `#[{attribute}(method = \"PUT\", …)]`"
            ),
        )),
        _ => Err(syn::Error::new(
            name.span(),
            format!(
                "`#[{attribute}]` cannot tell whether `{name}` is safe to {safe}: its name does not start with a known verb (get, list, put, delete … or create, send, pay …)\n{rule}\n  = help: declare the HTTP method it performs, e.g. `#[{attribute}(method = \"GET\")]`; POST and PATCH also need an idempotency key\n  = help: or add a parameter `key: resilience::IdempotencyKey` (or mark one with `#[idempotency_key]`), or assert `#[{attribute}(idempotent)]`"
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use crate::args::Method;

    #[test]
    fn a_declared_method_needs_a_key_as_the_rules_say() {
        assert!(Method::Put.is_idempotent() && Method::Delete.is_idempotent());
        assert!(Method::Get.is_idempotent());
        assert!(!Method::Post.is_idempotent() && !Method::Patch.is_idempotent());
    }
}
