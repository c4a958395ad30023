//! What every fuzz target asserts about one input, shared by the
//! `cargo fuzz` targets (`fuzz/fuzz_targets/`) and by the corpus replay
//! that runs in the default `cargo test` (`tests/fuzz_corpus.rs`).
//!
//! Each check asserts more than "no panic" where it can: a parsed duration
//! prints back to itself and the config file reads the same value; a
//! refused input's error names it; a key accepted by the layer is what the
//! rules allow, and a refused one is echoed capped.

use std::sync::OnceLock;
use std::time::{Duration, SystemTime};

use resilience::registry::{Registry, parse_duration};
use resilience::retry::{HttpStatus, Policy, PolicyBuilder, Verdict, parse_retry_after_bytes};
use resilience_rules::duration as grammar;

/// One target's check of one input.
pub type Check = fn(&[u8]);

/// The targets by name, the folders of `fuzz/corpus/`.
pub const TARGETS: &[(&str, Check)] = &[
    ("duration", duration),
    ("config", config),
    ("retry_after", retry_after),
    ("idempotency_key", idempotency_key),
    ("http_classify", http_classify),
];

/// The one duration grammar (`resilience_rules::duration`, which the
/// attributes and the config file both use) on any text: no panic, an
/// accepted duration prints back to itself, and the config file reads the
/// value the grammar reads, or refuses the text with an error that names it.
pub fn duration(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let parsed = grammar::parse(text);
    if let Ok(d) = parsed {
        let shown = grammar::display(d);
        assert_eq!(
            grammar::parse(&shown),
            Ok(d),
            "{text:?} printed as {shown:?}"
        );
    }
    match parse_duration(text) {
        Ok(d) => assert_eq!(parsed, Ok(d), "{text:?}"),
        Err(err) => {
            assert!(parsed.is_err(), "{text:?}: {parsed:?}, the file: {err}");
            assert_eq!(err.value(), format!("{text:?}"), "the error names the text");
        }
    }
}

/// Any text as a config file: refused with an error that names the file,
/// never a panic; accepted files build a registry.
pub fn config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match Registry::builder().config_str(text, "fuzz.toml") {
        Ok(builder) => {
            if let Err(err) = builder.build() {
                assert!(!err.to_string().is_empty());
            }
        }
        Err(err) => {
            for one in err.errors() {
                assert!(
                    one.to_string().contains("fuzz.toml"),
                    "an error without its file: {one}"
                );
            }
        }
    }
}

/// `Retry-After` values: delta-seconds are read exactly, a date is never
/// read as a delay past the year 9999, the executor's pause stays within
/// the policy's bounds, and a hint is honoured on 429 and 503 (and 409,
/// the idempotency draft's "in flight"), not on a 404.
pub fn retry_after(data: &[u8]) {
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let parsed = parse_retry_after_bytes(data, now);
    if let (Some(delay), Ok(text)) = (parsed, std::str::from_utf8(data)) {
        let digits = text.trim_matches(|c| c == ' ' || c == '\t');
        if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
            if let Ok(secs) = digits.parse::<u64>() {
                assert_eq!(delay, Duration::from_secs(secs), "{text:?}");
            }
        } else {
            // An HTTP-date: at most until the year 9999.
            assert!(delay < Duration::from_secs(253_402_300_800), "{text:?}");
        }
    }
    if let Some(hint) = parsed {
        // The executor's use of it: however long the hint, the pause stays
        // within the policy's `max_retry_after` and the chain's budget, or
        // the chain gives up at once (a hint once asked for 18,446,725,547 s).
        let bounded = Policy::http();
        // No time bound at all: only `max_retry_after` stands in the way.
        let unbounded = PolicyBuilder::http()
            .with_max_elapsed(Duration::MAX)
            .build()
            .expect("a valid policy");
        for policy in [bounded, unbounded] {
            // One failed attempt through the public blocking executor, its
            // pause recorded rather than slept: the same rules decide it as
            // every other chain's.
            let mut first = true;
            let mut paused = None;
            let result = policy
                .retry_blocking(|| {
                    if std::mem::take(&mut first) {
                        Err(std::io::Error::other("throttled"))
                    } else {
                        Ok(())
                    }
                })
                .when(|_: &std::io::Error| Verdict::RetryAfter(hint))
                .sleep(|delay| paused = Some(delay))
                .call();
            match paused {
                Some(delay) => {
                    assert!(result.is_ok(), "{hint:?}: paused, then {result:?}");
                    // A longer hint than allowed is given up on, never cut.
                    assert!(
                        hint <= policy.max_retry_after(),
                        "{hint:?} was shortened to {delay:?}"
                    );
                    // The http preset's own pauses end by 2 s (+25 % jitter).
                    let most = policy.max_retry_after().max(Duration::from_millis(2500));
                    assert!(delay <= most, "{hint:?} paused {delay:?}");
                    assert!(delay <= policy.max_elapsed(), "{hint:?} paused {delay:?}");
                    if hint <= policy.max_retry_after() && hint < Duration::from_secs(4) {
                        assert!(delay >= hint, "{hint:?} paused only {delay:?}");
                    }
                }
                None => {
                    assert!(result.is_err(), "{hint:?}: no pause, yet a second attempt");
                    assert!(hint > Duration::ZERO, "a zero hint gave up");
                }
            }
        }
    }
    for code in [429, 503] {
        match HttpStatus(code).with_retry_after(parsed) {
            Verdict::RetryAfter(delay) => assert_eq!(Some(delay), parsed),
            Verdict::Transient => assert!(parsed.is_none()),
            other => panic!("{code} with {parsed:?}: {other:?}"),
        }
    }
    assert!(matches!(
        HttpStatus(404).with_retry_after(parsed),
        Verdict::Permanent
    ));
}

/// Any header value as an `Idempotency-Key` through the server layer: the
/// handler runs exactly for a valid key, a refused key gets `400` and is
/// echoed capped, and nothing panics.
pub fn idempotency_key(data: &[u8]) {
    use http::{HeaderValue, Method, Request, StatusCode};
    use resilience::IdempotencyKey;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tower::{Service, ServiceExt};

    let Ok(value) = HeaderValue::from_bytes(data) else {
        return;
    };
    let valid = value
        .to_str()
        .ok()
        .and_then(|text| IdempotencyKey::from_header(text).ok());
    if let Some(key) = &valid {
        let text = key.as_str();
        assert!((1..=255).contains(&text.len()), "{text:?}");
        assert!(text.bytes().all(|b| b.is_ascii_graphic()), "{text:?}");
    }

    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    let runtime = RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a current-thread runtime")
    });
    let calls = Arc::new(AtomicUsize::new(0));
    let handler = {
        let calls = Arc::clone(&calls);
        tower::service_fn(move |_: Request<http_body_util::Full<bytes::Bytes>>| {
            calls.fetch_add(1, Ordering::SeqCst);
            async {
                Ok::<_, std::convert::Infallible>(
                    http::Response::builder()
                        .status(StatusCode::CREATED)
                        .body(http_body_util::Full::new(bytes::Bytes::from_static(
                            b"done",
                        )))
                        .expect("a response"),
                )
            }
        })
    };
    let store = resilience::idempotency::server::MemoryStore::default();
    // One caller: the check is about the key, not whose it is.
    let layer = resilience::idempotency::server::IdempotencyLayer::new(
        store,
        resilience::idempotency::server::Scope::unscoped(),
    );
    let mut service = tower::Layer::layer(&layer, handler);
    let request = Request::builder()
        .method(Method::POST)
        .uri("/payments")
        .header("idempotency-key", value)
        .body(http_body_util::Full::new(bytes::Bytes::from_static(b"{}")))
        .expect("a request");
    let (status, body) = runtime.block_on(async {
        let response = service
            .ready()
            .await
            .expect("ready")
            .call(request)
            .await
            .expect("the layer answers");
        let status = response.status();
        let body = http_body_util::BodyExt::collect(response.into_body())
            .await
            .map(|collected| collected.to_bytes())
            .unwrap_or_default();
        (status, body)
    });
    if valid.is_some() {
        assert_eq!(status, StatusCode::CREATED, "{data:?}");
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    } else {
        assert_eq!(status, StatusCode::BAD_REQUEST, "{data:?}");
        assert_eq!(calls.load(Ordering::SeqCst), 0);
        // The echo is capped: a 10 KB key does not come back whole.
        assert!(body.len() < 1024, "{} bytes echoed", body.len());
    }
}

/// Every status code with any `Retry-After`: 408, 429, 500, 502, 503 and
/// 504 are retried, other 4xx are not (but a 409 with a hint: another
/// request with the key is in flight), only 409, 429 and 503 honour a
/// hint, and no code panics.
pub fn http_classify(data: &[u8]) {
    let Some((&[high, low], hint)) = data.split_first_chunk::<2>() else {
        return;
    };
    let code = u16::from_be_bytes([high, low]);
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let hint = parse_retry_after_bytes(hint, now);
    let verdict = HttpStatus(code).with_retry_after(hint);
    let retried = matches!(verdict, Verdict::Transient | Verdict::RetryAfter(_));
    match code {
        408 | 429 | 500 | 502 | 503 | 504 => assert!(retried, "{code}: {verdict:?}"),
        409 => assert_eq!(retried, hint.is_some(), "{code}: {verdict:?}"),
        400..=499 => assert!(!retried, "{code}: {verdict:?}"),
        _ => {}
    }
    if let Verdict::RetryAfter(delay) = verdict {
        assert!(matches!(code, 409 | 429 | 503), "{code} honoured a hint");
        assert_eq!(Some(delay), hint);
    }
}
