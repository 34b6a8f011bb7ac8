//! `deploy/grafana/switchyard.json` is a well-formed Grafana dashboard whose queries name metric
//! families the binaries export.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use serde_json::Value;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Every `switchyard_*` name in the Rust sources of the binaries and shared crates.
fn exported_names() -> HashSet<String> {
    let mut names = HashSet::new();
    let mut stack: Vec<PathBuf> = ["data-plane/src", "control-plane/src", "shared"]
        .iter()
        .map(|p| repo().join(p))
        .collect();
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                names.extend(metric_names(&std::fs::read_to_string(&path).unwrap()));
            }
        }
    }
    names
}

fn metric_names(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("switchyard_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
            .unwrap_or(tail.len());
        out.push(tail[..end].to_owned());
        rest = &tail[end..];
    }
    out
}

/// Families the data plane's request path exports with the observability work
/// (docs/src/reference/metrics.md).
const REQUEST_PATH_FAMILIES: &[&str] = &[
    "switchyard_tokens_total",
    "switchyard_channel_in_flight",
    "switchyard_channel_breaker_open",
    "switchyard_snapshot_revision",
    "switchyard_snapshot_age_seconds",
];

#[test]
fn the_dashboard_parses_and_queries_known_metrics() {
    let path = repo().join("deploy/grafana/switchyard.json");
    let text = std::fs::read_to_string(&path).unwrap();
    let dashboard: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(dashboard["uid"], "switchyard-overview");
    assert!(dashboard["schemaVersion"].as_u64().unwrap() >= 36);
    let variables: Vec<&str> = dashboard["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    for name in ["datasource", "job", "channel", "route"] {
        assert!(variables.contains(&name), "variable {name}");
    }

    let mut known = exported_names();
    known.extend(REQUEST_PATH_FAMILIES.iter().map(|s| (*s).to_owned()));
    let mut ids = HashSet::new();
    let mut queried = HashSet::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        let title = panel["title"].as_str().unwrap();
        assert!(
            ids.insert(panel["id"].as_u64().unwrap()),
            "duplicate id: {title}"
        );
        let grid = &panel["gridPos"];
        assert!(
            grid["x"].as_u64().unwrap() + grid["w"].as_u64().unwrap() <= 24,
            "{title}"
        );
        if panel["type"] == "row" {
            continue;
        }
        assert_eq!(panel["datasource"]["uid"], "${datasource}", "{title}");
        let targets = panel["targets"].as_array().unwrap();
        assert!(!targets.is_empty(), "{title} has no query");
        for target in targets {
            let expr = target["expr"].as_str().unwrap();
            assert_eq!(
                expr.matches('(').count(),
                expr.matches(')').count(),
                "{expr}"
            );
            assert_eq!(
                expr.matches('{').count(),
                expr.matches('}').count(),
                "{expr}"
            );
            for name in metric_names(expr) {
                let family = ["_bucket", "_count", "_sum"]
                    .iter()
                    .find_map(|suffix| name.strip_suffix(suffix))
                    .filter(|base| known.contains(*base))
                    .map_or(name.clone(), str::to_owned);
                assert!(known.contains(&family), "{title}: unknown metric {name}");
                queried.insert(family);
            }
        }
    }
    // What the dashboard is for.
    for family in [
        "switchyard_requests_total",
        "switchyard_attempts_total",
        "switchyard_failovers_total",
        "switchyard_gateway_overhead_seconds",
        "switchyard_channel_breaker_open",
        "switchyard_tokens_total",
        "switchyard_usage_batches_total",
        "switchyard_time_to_first_token_seconds",
        "switchyard_upstream_latency_seconds",
        "switchyard_spend_micro_usd_total",
        "switchyard_team_spend_micro_usd_total",
    ] {
        assert!(queried.contains(family), "no panel shows {family}");
    }
}
