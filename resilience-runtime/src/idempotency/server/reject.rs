//! The layer's own answers, as `{"error": code, "message": text}` JSON.

use std::fmt::Write as _;

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};

use super::body::ResponseBody;

/// Why the layer answered instead of the handler.
#[derive(Debug)]
pub(crate) enum Rejection {
    MissingKey,
    InvalidKey(String),
    RequestTooLarge { limit: usize },
    RequestUnreadable(String),
    KeyInUse,
    KeyReused,
    NotStored { status: StatusCode, why: String },
    StoreUnavailable,
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
            Rejection::StoreUnavailable => (
                StatusCode::SERVICE_UNAVAILABLE,
                "idempotency_store_unavailable",
                "the idempotency store is unavailable, so the request was not processed; retry later".into(),
            ),
        }
    }

    pub(crate) fn code(&self) -> &'static str {
        self.parts().1
    }

    pub(crate) fn into_response<B>(self) -> Response<ResponseBody<B>> {
        let (status, code, message) = self.parts();
        let mut json = String::with_capacity(32 + code.len() + message.len());
        json.push_str("{\"error\":");
        push_json_string(&mut json, code);
        json.push_str(",\"message\":");
        push_json_string(&mut json, &message);
        json.push('}');
        let mut response = Response::new(ResponseBody::full(Bytes::from(json)));
        *response.status_mut() = status;
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if matches!(self, Rejection::KeyInUse | Rejection::StoreUnavailable) {
            headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
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
