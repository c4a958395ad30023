//! The quickstart demo, run on a paused clock: its story's key lines must
//! keep showing, so that the demo cannot rot.

#[allow(dead_code)] // `main` is the example's
#[path = "../examples/quickstart.rs"]
mod quickstart;

use std::time::Duration;

#[tokio::test(start_paused = true)]
async fn the_quickstart_tells_the_whole_story() {
    let report = quickstart::run(true).await;
    let story = report.lines.join("\n");

    for line in [
        // The config, installed and checked against every site.
        "config: quickstart.toml installed; sites: ",
        // 1. 502, 502 → 200
        "✓ user 42 = \"Ada Lovelace\" after 3 attempts",
        // 2. 400 once; 429 + Retry-After: 1
        "✓ not retried (1 attempt): 400 Bad Request",
        "← 429 Too Many Requests, Retry-After: 1",
        "(after a 1000 ms pause)",
        "Retry-After honoured",
        // 3. one key, one payment, a replay
        "✗ body cut short",
        "← 201 Created, X-Idempotency-Replay: true",
        "✓ \"payment 1 created\" (replayed); 2 attempts, same key on each: true; payments created on the server: 1",
        // 4. failed calls and then rejected ones are answered by the
        // `fallback =` fn with the last good value, marked stale by the
        // library (the header comes from its axum response)
        "; serving stale \"Ada Lovelace\" (X-From-Cache: stale, Age: ",
        "⚡ breaker `users`: closed → open",
        "↺ dependency down, failed fast in 0 ms; serving stale \"Ada Lovelace\" (X-From-Cache: stale, Age: ",
        // 5. half-open probe, closed
        "⚡ breaker `users`: open → half-open",
        "⚡ breaker `users`: half-open → closed",
        "✓ probe succeeded: \"Ada Lovelace (v2)\"; breaker `users` is closed",
        "| calls | attempts | breaker trips | failed fast | a failed call took (avg) | a fast fail took (max) | total time |",
    ] {
        assert!(report.shows(line), "missing {line:?} in:\n{story}");
    }
    for line in report.lines.iter().filter(|line| line.contains('✗')) {
        assert!(
            line.contains("body cut short"),
            "unexpected failure {line:?} in:\n{story}"
        );
    }

    assert_eq!(report.trips, 1, "{story}");
    assert!(report.rejected >= 3, "{story}");
    // Measured: a failed call waited through its retries, a rejected one
    // not at all; the estimate derived from them says so.
    assert!(report.failed_call >= Duration::from_millis(200), "{story}");
    assert!(report.fast_fail < Duration::from_millis(50), "{story}");
    assert!(report.time_saved >= Duration::from_millis(600), "{story}");
    assert!(report.shows("estimate, not measured"), "{story}");
    assert!(report.elapsed < Duration::from_secs(15), "{story}");
    assert!(report.shows("↺ failed after the retries in "), "{story}");
    // Every attempt of every call reached the server, none of the rejected.
    assert!(report.attempts >= report.calls as usize, "{story}");

    // The config file is shown, and the metrics the run recorded: one
    // trip, a stale answer for each failed or rejected call of scene 4.
    assert!(report.shows("   | [breakers.users]"), "{story}");
    assert!(report.shows("   | cooldown = \"2s\""), "{story}");
    if !cfg!(feature = "metrics") {
        return;
    }
    let series = |line: &str| report.lines.iter().any(|shown| shown.trim() == line);
    assert!(
        series("circuit_breaker_trips_total{service=\"quickstart\",target=\"users\"} 1"),
        "{story}"
    );
    let stale = 3 + report.rejected;
    assert!(
        series(&format!(
            "http_client_fallbacks_total{{service=\"quickstart\",target=\"users\",kind=\"stale\"}} {stale}"
        )),
        "{story}"
    );
    assert!(
        series(&format!(
            "dependency_errors_total{{service=\"quickstart\",target=\"users\",reason=\"circuit_open\"}} {}",
            report.rejected
        )),
        "{story}"
    );
}
