//! The layer's own answers, as `{"error": code, "message": text}` JSON.

use std::fmt::Write as _;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Response, StatusCode, header};

use super::body::ResponseBody;
use super::store::StoredResponse;

/// Why the layer answered instead of the handler.
#[derive(Debug)]
pub(crate) enum Rejection {
    MissingKey,
    InvalidKey(String),
    /// The request's caller [scope](super::Scope) is missing: why.
    MissingScope(String),
    RequestTooLarge {
        limit: usize,
    },
    RequestUnreadable(String),
    KeyInUse,
    KeyReused,
    NotStored {
        status: StatusCode,
        why: String,
    },
    StoreUnavailable {
        /// The store's [name](super::IdempotencyStore::name).
        store: String,
        /// The call that failed: `begin`.
        call: &'static str,
        /// What went wrong: a timeout, or the store's error.
        what: String,
    },
    /// The handler panicked after it began: its effect may be applied.
    HandlerPanicked,
    /// The inner service returned an error after it began.
    ServiceFailed,
    /// The layer's own task ended without an answer (runtime shut down).
    Internal,
}

impl Rejection {
    fn parts(&self) -> (StatusCode, &'static str, String) {
        match self {
            Rejection::MissingKey => (
                StatusCode::BAD_REQUEST,
                "missing_idempotency_key",
                "Idempotency-Key header is required".into(),
            ),
            Rejection::InvalidKey(reason) => (
                StatusCode::BAD_REQUEST,
                "invalid_idempotency_key",
                format!("Idempotency-Key header is invalid: {reason}"),
            ),
            Rejection::MissingScope(why) => (
                StatusCode::BAD_REQUEST,
                "missing_idempotency_scope",
                why.clone(),
            ),
            Rejection::RequestTooLarge { limit } => (
                StatusCode::PAYLOAD_TOO_LARGE,
                "request_body_too_large",
                format!(
                    "the request body exceeds {limit} bytes, the most this server fingerprints for idempotency"
                ),
            ),
            Rejection::RequestUnreadable(reason) => (
                StatusCode::BAD_REQUEST,
                "request_body_unreadable",
                format!("the request body could not be read: {reason}"),
            ),
            Rejection::KeyInUse => (
                StatusCode::CONFLICT,
                "idempotency_key_in_use",
                "a request with this Idempotency-Key is still being processed; retry later".into(),
            ),
            Rejection::KeyReused => (
                StatusCode::UNPROCESSABLE_ENTITY,
                "idempotency_key_reused",
                "this Idempotency-Key was used for a different request (method, path or body); use a new key for a new request".into(),
            ),
            Rejection::NotStored { status, why } => (
                StatusCode::CONFLICT,
                "idempotency_response_not_stored",
                format!(
                    "the request with this Idempotency-Key was already processed (status {}), but its response {why} and was not kept; fetch the result instead of retrying",
                    status.as_u16()
                ),
            ),
            Rejection::StoreUnavailable { store, call, what } => (
                StatusCode::SERVICE_UNAVAILABLE,
                "idempotency_store_unavailable",
                format!(
                    "the idempotency store `{store}` failed on `{call}` ({what}), so the request was not processed; retry later with the same Idempotency-Key"
                ),
            ),
            Rejection::HandlerPanicked => (
                StatusCode::INTERNAL_SERVER_ERROR,
                "idempotency_handler_failed",
                "the handler for this Idempotency-Key failed after it began and may have applied its effect, so it will not run again for this key; check the result before retrying with a new key".into(),
            ),
            Rejection::ServiceFailed => (
                StatusCode::INTERNAL_SERVER_ERROR,
                "idempotency_handler_failed",
                "the service for this Idempotency-Key returned an error after it began and may have applied its effect, so it will not run again for this key; check the result before retrying with a new key".into(),
            ),
            Rejection::Internal => (
                StatusCode::INTERNAL_SERVER_ERROR,
                "idempotency_layer_failed",
                "the idempotency layer stopped before the request finished (the server is shutting down?); retry later with the same Idempotency-Key".into(),
            ),
        }
    }

    pub(crate) fn code(&self) -> &'static str {
        self.parts().1
    }

    /// The answer as a response that can be stored and replayed.
    pub(crate) fn stored(&self) -> StoredResponse {
        let (status, code, message) = self.parts();
        let mut json = String::with_capacity(32 + code.len() + message.len());
        json.push_str("{\"error\":");
        push_json_string(&mut json, code);
        json.push_str(",\"message\":");
        push_json_string(&mut json, &message);
        json.push('}');
        let mut headers = HeaderMap::new();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if matches!(
            self,
            Rejection::KeyInUse | Rejection::StoreUnavailable { .. } | Rejection::Internal
        ) {
            headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        StoredResponse::new(status, headers, Bytes::from(json))
    }

    pub(crate) fn into_response<B>(self) -> Response<ResponseBody<B>> {
        let stored = self.stored();
        let mut response = Response::new(ResponseBody::full(stored.body().clone()));
        *response.status_mut() = stored.status();
        *response.headers_mut() = stored.headers().clone();
        response
    }
}

/// Appends `text` as a JSON string literal (RFC 8259 §7).
fn push_json_string(out: &mut String, text: &str) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_strings_are_escaped() {
        let mut out = String::new();
        push_json_string(&mut out, "a \"b\" \\ \n\t\u{1} é");
        assert_eq!(out, r#""a \"b\" \\ \n\t\u0001 é""#);
    }
}
