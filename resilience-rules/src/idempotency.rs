//! Idempotency first, retry second: which calls may be sent more than
//! once. An HTTP method says it when one is declared (POST and PATCH need
//! an idempotency key); otherwise the verb that starts a fn's name does
//! (`get_user` reads, `create_order` creates, `save_order` may create:
//! [`verb`], then [`IDEMPOTENT`], [`CREATING`] or [`MAY_CREATE`]), and a
//! name that says nothing is for the caller to declare.

/// The HTTP methods that are not idempotent: a second request may apply
/// them twice, so they are retried only with an `Idempotency-Key` that is
/// the same on every attempt. GET, HEAD, OPTIONS and TRACE are safe; PUT
/// and DELETE idempotent by contract.
pub const NEED_A_KEY: &[&str] = &["POST", "PATCH"];

/// Whether a request of `method` (upper case, as HTTP writes it) needs an
/// idempotency key to be sent more than once.
///
/// ```
/// use resilience_rules::idempotency::needs_key;
///
/// assert!(needs_key("POST") && needs_key("PATCH"));
/// assert!(!needs_key("GET") && !needs_key("PUT") && !needs_key("DELETE"));
/// ```
pub fn needs_key(method: &str) -> bool {
    NEED_A_KEY.contains(&method)
}

/// Verbs that create or trigger something: a second run is a second
/// effect (a second order, a second payment, a second message).
pub const CREATING: &[&str] = &[
    "create",
    "post",
    "add",
    "insert",
    "submit",
    "send",
    "charge",
    "pay",
    "transfer",
    "enqueue",
    "publish",
    "push",
    "append",
    "emit",
    "register",
    "book",
    "order",
    "place",
    "purchase",
    "buy",
    "sell",
    "refund",
    "withdraw",
    "deposit",
    "reserve",
    "allocate",
    "issue",
    "increment",
    "incr",
    "decrement",
    "decr",
    "patch",
    "produce",
    "notify",
    "trigger",
    "invoke",
    "execute",
    "exec",
    "process",
    "upload",
    "import",
    "generate",
    "new",
    "make",
    "start",
    "spawn",
    "schedule",
    "dispatch",
    "mint",
    "open",
    "signup",
    "subscribe",
    "checkout",
    "commit",
];

/// Verbs that write a record which may not exist yet: `save_payment`,
/// `store_event`, `upsert_user`, `set_limit`. Whether a repeat is harmless
/// depends on what the fn does, not on its name: an UPDATE, or an INSERT
/// under a key the caller chose, leaves the same state when run twice; an
/// INSERT under a fresh id creates a second record. So they are treated
/// like [`CREATING`] verbs (an idempotency key, or a declaration from the
/// author), never assumed safe.
pub const MAY_CREATE: &[&str] = &["save", "store", "upsert", "set"];

/// Verbs that read, or write a whole state that a repeat leaves the same
/// (PUT and DELETE semantics).
pub const IDEMPOTENT: &[&str] = &[
    "get",
    "fetch",
    "list",
    "find",
    "read",
    "head",
    "options",
    "query",
    "search",
    "lookup",
    "load",
    "check",
    "count",
    "exists",
    "is",
    "has",
    "describe",
    "show",
    "view",
    "download",
    "resolve",
    "ping",
    "probe",
    "poll",
    "scan",
    "select",
    "retrieve",
    "stat",
    "watch",
    "put",
    "replace",
    "delete",
    "remove",
    "del",
    "unset",
    "clear",
    "cancel",
    "ack",
    "acknowledge",
    "close",
    "ensure",
    "sync",
    "refresh",
    "reload",
    "disable",
    "enable",
    "overwrite",
    "evict",
    "invalidate",
    "expire",
    "release",
    "unsubscribe",
];

/// Leading words that say nothing about the effect.
pub const PREFIXES: &[&str] = &["try", "do", "async", "maybe", "inner", "raw"];

/// The verb of a fn name: its first snake_case word, lower case, after
/// prefixes such as `try_`.
///
/// ```
/// use resilience_rules::idempotency::{CREATING, IDEMPOTENT, verb};
///
/// assert_eq!(verb("try_get_user").as_deref(), Some("get"));
/// assert!(IDEMPOTENT.contains(&"get"));
/// assert!(CREATING.contains(&verb("create_order").unwrap().as_str()));
/// ```
pub fn verb(name: &str) -> Option<String> {
    name.trim_start_matches('_')
        .split('_')
        .filter(|word| !word.is_empty())
        .map(str::to_ascii_lowercase)
        .find(|word| !PREFIXES.contains(&word.as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_verb_is_the_first_meaningful_word() {
        assert_eq!(verb("get_user").as_deref(), Some("get"));
        assert_eq!(verb("try_create_order").as_deref(), Some("create"));
        assert_eq!(verb("_send").as_deref(), Some("send"));
        assert_eq!(verb("GetUser").as_deref(), Some("getuser"));
        assert_eq!(verb("try"), None);
    }

    #[test]
    fn the_lists_do_not_overlap() {
        for verb in CREATING {
            assert!(!IDEMPOTENT.contains(verb), "{verb}");
            assert!(!MAY_CREATE.contains(verb), "{verb}");
        }
        for verb in MAY_CREATE {
            assert!(!IDEMPOTENT.contains(verb), "{verb}");
        }
    }

    #[test]
    fn a_verb_that_may_create_is_not_idempotent() {
        for name in [
            "save_payment",
            "store_event",
            "upsert_user",
            "set_limit",
            "try_save",
        ] {
            let verb = verb(name).unwrap();
            assert!(MAY_CREATE.contains(&verb.as_str()), "{name}");
            assert!(!IDEMPOTENT.contains(&verb.as_str()), "{name}");
        }
    }
}
