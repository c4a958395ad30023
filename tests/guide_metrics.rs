//! The guide's metric table (`resilience::guide`, "Metrics and alerts")
//! names exactly the metrics the code emits: `telemetry::METRICS`, the
//! list `telemetry::describe` describes.

use std::collections::BTreeSet;

use resilience::telemetry::METRICS;

const GUIDE: &str = include_str!("../resilience-runtime/src/guide.md");

/// The metric names of the table under the guide's "Metrics and alerts"
/// heading: the first cell of each row, in backticks.
fn guide_metrics() -> Vec<&'static str> {
    let section = GUIDE
        .split("\n# ")
        .find(|section| section.starts_with("Metrics and alerts"))
        .expect("the guide has a \"Metrics and alerts\" section");
    let rows: Vec<&str> = section
        .lines()
        .skip_while(|line| !line.starts_with('|'))
        .take_while(|line| line.starts_with('|'))
        .collect();
    assert!(rows.len() > 2, "no table in the metrics section");
    // The header row and the delimiter row, then one row a metric.
    rows[2..]
        .iter()
        .map(|row| {
            let cell = row.split('|').nth(1).expect("a first cell").trim();
            cell.strip_prefix('`')
                .and_then(|cell| cell.strip_suffix('`'))
                .unwrap_or_else(|| panic!("the first cell is not a `metric_name`: {row}"))
        })
        .collect()
}

#[test]
fn the_guide_lists_every_metric_the_code_emits_and_no_other() {
    let listed = guide_metrics();
    let guide: BTreeSet<&str> = listed.iter().copied().collect();
    assert_eq!(
        guide.len(),
        listed.len(),
        "a metric listed twice: {listed:?}"
    );
    let code: BTreeSet<&str> = METRICS.iter().copied().collect();
    assert_eq!(
        guide.difference(&code).collect::<Vec<_>>(),
        Vec::<&&str>::new(),
        "in the guide, not emitted"
    );
    assert_eq!(
        code.difference(&guide).collect::<Vec<_>>(),
        Vec::<&&str>::new(),
        "emitted, not in the guide"
    );
}

#[test]
fn the_guide_names_the_metrics_of_the_spec() {
    // SPEC §7: the five the source guide asks for, by these exact names.
    for name in [
        "http_client_retries_total",
        "http_client_request_duration_seconds",
        "circuit_breaker_state",
        "circuit_breaker_trips_total",
        "dependency_errors_total",
    ] {
        assert!(guide_metrics().contains(&name), "{name}");
    }
}
