//! The Grafana dashboard (`deploy/grafana/resilience-dashboard.json`) and
//! the Prometheus alert rules (`deploy/prometheus/resilience-rules.yml`)
//! query only metrics the code emits (`telemetry::METRICS`, histograms by
//! their `_bucket`, `_sum` and `_count` series), and the dashboard shows
//! every one of them: a renamed metric, or one added without a panel,
//! fails here rather than in a user's empty graph.

use std::collections::BTreeSet;

use resilience::telemetry::METRICS;

const DASHBOARD: &str = include_str!("../deploy/grafana/resilience-dashboard.json");
const RULES: &str = include_str!("../deploy/prometheus/resilience-rules.yml");

/// The metric names of the crate's namespaces in a PromQL expression,
/// histogram series named by their histogram.
fn metrics_in(expr: &str) -> Vec<String> {
    expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .filter(|token| {
            ["http_client_", "circuit_breaker_", "dependency_"]
                .iter()
                .any(|prefix| token.starts_with(prefix))
        })
        .map(|token| {
            ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|suffix| {
                    token
                        .strip_suffix(suffix)
                        .filter(|base| METRICS.contains(base))
                })
                .unwrap_or(token)
                .to_owned()
        })
        .collect()
}

fn dashboard_exprs() -> Vec<String> {
    let dashboard: serde_json::Value = serde_json::from_str(DASHBOARD).expect("valid JSON");
    let mut exprs = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        let targets = panel["targets"].as_array().expect("targets");
        assert!(
            !targets.is_empty(),
            "panel {} queries nothing",
            panel["title"]
        );
        for target in targets {
            exprs.push(target["expr"].as_str().expect("expr").to_owned());
        }
    }
    for variable in dashboard["templating"]["list"]
        .as_array()
        .expect("variables")
    {
        if variable["type"] == "query" {
            exprs.push(variable["query"].as_str().expect("query").to_owned());
        }
    }
    exprs
}

#[test]
fn the_dashboard_queries_only_metrics_the_code_emits_and_shows_them_all() {
    let known: BTreeSet<&str> = METRICS.iter().copied().collect();
    let mut shown = BTreeSet::new();
    for expr in dashboard_exprs() {
        for metric in metrics_in(&expr) {
            assert!(
                known.contains(metric.as_str()),
                "`{metric}` in `{expr}` is no metric of the crate"
            );
            shown.insert(metric);
        }
    }
    let missing: Vec<_> = known.iter().filter(|m| !shown.contains(**m)).collect();
    assert!(missing.is_empty(), "no panel shows {missing:?}");
}

#[test]
fn the_panels_have_unique_ids_and_a_data_source_each() {
    let dashboard: serde_json::Value = serde_json::from_str(DASHBOARD).unwrap();
    let mut ids = BTreeSet::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        assert!(
            ids.insert(panel["id"].as_u64().unwrap()),
            "id {} twice",
            panel["id"]
        );
        assert_eq!(
            panel["datasource"]["uid"], "${datasource}",
            "{}",
            panel["title"]
        );
    }
}

#[test]
fn the_alert_rules_query_only_metrics_the_code_emits() {
    let known: BTreeSet<&str> = METRICS.iter().copied().collect();
    let exprs: Vec<&str> = RULES
        .lines()
        .filter_map(|line| line.trim().strip_prefix("expr:"))
        .collect();
    assert!(exprs.len() >= 6, "{exprs:?}");
    for expr in exprs {
        let metrics = metrics_in(expr);
        assert!(
            !metrics.is_empty(),
            "`{expr}` queries no metric of the crate"
        );
        for metric in metrics {
            assert!(
                known.contains(metric.as_str()),
                "`{metric}` in `{expr}` is no metric of the crate"
            );
        }
    }
}
