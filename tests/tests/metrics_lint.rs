//! The `/metrics` pages of both planes, scraped from real processes (a control plane, a proxy
//! following it and a standalone proxy with limits, all on a shared Redis), pass `promtool check
//! metrics` (Prometheus's own lint of names, HELP/TYPE lines and units), and carry every metric
//! family and label the shipped alerting rules (deploy/prometheus/switchyard-rules.yaml) and the
//! Prometheus adapter's rule (deploy/prometheus/prometheus-adapter.yaml) query: a renamed metric
//! or label cannot silently turn an alert off.
//!
//! `SWITCHYARD_PROMTOOL` must name a promtool binary (scripts/test exports the one
//! scripts/check-deploy fetched); without it this test fails rather than skips.
// Helpers outside #[test] fns are test code too: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeSet, HashSet};
use std::io::Write;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use switchyard_e2e::fleet::{self, free_port, http, unique, Proxy};
use switchyard_e2e::process::Process;
use switchyard_e2e::{dechunk, redis_url};

const CONTROL_PLANE: &str = env!("CARGO_BIN_EXE_e2e-control-plane");
const DATA_PLANE: &str = env!("CARGO_BIN_EXE_e2e-data-plane");
const ADMIN_TOKEN: &str = "e2e-admin-token-0123456789abcdef";
const FLEET_TOKEN: &str = "e2e-fleet-token-0123456789abcdef";
const PATIENCE: Duration = Duration::from_secs(60);

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap()
}

fn promtool() -> String {
    std::env::var("SWITCHYARD_PROMTOOL").unwrap_or_else(|_| {
        panic!(
            "SWITCHYARD_PROMTOOL is not set: it must name a promtool binary (scripts/test sets it to \
             the one scripts/check-deploy fetches into ~/.cache/switchyard/deploy-tools/promtool/)"
        )
    })
}

async fn wait_ready(addr: &str, what: &str) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Ok(r) = http(addr, "GET", "/readyz", "", &[]).await {
            if r.status == 200 {
                return;
            }
        }
        assert!(Instant::now() < deadline, "{what} never became ready");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn scrape(addr: &str) -> String {
    let reply = http(addr, "GET", "/metrics", "", &[]).await.unwrap();
    assert_eq!(reply.status, 200, "GET /metrics on {addr}: {}", reply.head);
    if reply
        .head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(&reply.body)
    } else {
        reply.body
    }
}

/// `promtool check metrics` on one page: it must exit 0 and report nothing.
fn lint(name: &str, page: &str) {
    let mut child = Command::new(promtool())
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run promtool: {e}"));
    child
        .stdin
        .take()
        .unwrap()
        .write_all(page.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && report.trim().is_empty(),
        "promtool check metrics on the {name}'s /metrics ({}):\n{report}",
        out.status
    );
}

/// Every `switchyard_*` name in `text`.
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("switchyard_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
            .unwrap_or(tail.len());
        out.insert(tail[..end].to_owned());
        rest = &tail[end..];
    }
    out
}

/// Label names an expression groups by (`by (a, b)`) or matches on (`{a="..."}`), except the
/// ones Prometheus adds (job, instance, le, namespace, pod) and template placeholders.
fn label_names(expr: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = expr;
    while let Some(at) = rest.find("by (") {
        let tail = &rest[at + 4..];
        let end = tail.find(')').unwrap();
        out.extend(tail[..end].split(',').map(|l| l.trim().to_owned()));
        rest = &tail[end..];
    }
    let mut rest = expr;
    while let Some(at) = rest.find('{') {
        let tail = &rest[at + 1..];
        let end = tail.find('}').unwrap();
        for matcher in tail[..end].split(',') {
            if let Some(name) = matcher.split(['=', '!', '~']).next() {
                out.insert(name.trim().to_owned());
            }
        }
        rest = &tail[end..];
    }
    out.retain(|l| {
        !l.is_empty()
            && !l.starts_with('<')
            && !["job", "instance", "le", "namespace", "pod"].contains(&l.as_str())
    });
    out
}

/// The expressions of the rule files (`expr:` values, block scalars included) and the adapter's
/// queries.
fn rule_expressions() -> Vec<String> {
    let mut exprs = Vec::new();
    for file in [
        "deploy/prometheus/switchyard-rules.yaml",
        "deploy/prometheus/prometheus-adapter.yaml",
    ] {
        let text = std::fs::read_to_string(repo().join(file)).unwrap();
        let mut lines = text.lines().peekable();
        while let Some(line) = lines.next() {
            let trimmed = line.trim_start();
            let value = ["expr:", "metricsQuery:", "seriesQuery:"]
                .iter()
                .find_map(|k| trimmed.strip_prefix(k));
            let Some(value) = value else { continue };
            let value = value.trim();
            if value == "|" {
                let indent = line.len() - trimmed.len();
                let mut block = String::new();
                while let Some(next) = lines.peek() {
                    let next_indent = next.len() - next.trim_start().len();
                    if !next.trim().is_empty() && next_indent <= indent {
                        break;
                    }
                    block.push_str(next.trim());
                    block.push('\n');
                    lines.next();
                }
                exprs.push(block);
            } else {
                exprs.push(value.trim_matches('\'').to_owned());
            }
        }
    }
    assert!(exprs.len() > 20, "found only {} expressions", exprs.len());
    exprs
}

#[sqlx::test(migrations = false)]
async fn both_planes_pass_promtool_and_export_what_the_alerts_query(
    _pool: PgPoolOptions,
    opts: PgConnectOptions,
) {
    let redis = redis_url();
    let prefix = unique("metrics-lint");
    let database_url = format!(
        "postgres://{}@{}:{}/{}",
        opts.get_username(),
        opts.get_host(),
        opts.get_port(),
        opts.get_database().unwrap_or("postgres")
    );

    // The control plane, with Redis (its switchyard_redis_* families).
    let mut cp = Process::spawn(
        "control plane",
        Command::new(CONTROL_PLANE)
            .env("DATABASE_URL", &database_url)
            .env("REDIS_URL", &redis)
            .env("SWITCHYARD_REDIS_PREFIX", &prefix)
            .env("SWITCHYARD_ADMIN_TOKEN", ADMIN_TOKEN)
            .env("SWITCHYARD_FLEET_TOKEN", FLEET_TOKEN)
            .env("SWITCHYARD_HTTP_ADDR", "127.0.0.1:0")
            .env("SWITCHYARD_GRPC_ADDR", "127.0.0.1:0")
            .env("RUST_LOG", "info"),
    );
    let (cp_http, cp_grpc): (SocketAddr, SocketAddr) = cp
        .wait_log("listening", |log| {
            (log["message"] == "listening").then(|| {
                (
                    log["http_addr"].as_str().unwrap().parse().unwrap(),
                    log["grpc_addr"].as_str().unwrap().parse().unwrap(),
                )
            })
        })
        .await;
    let cp_http = cp_http.to_string();
    wait_ready(&cp_http, "the control plane").await;

    // A proxy following it.
    let follower_addr = format!("127.0.0.1:{}", free_port());
    let _follower = Process::spawn(
        "following proxy",
        Command::new(DATA_PLANE)
            .args(["--control-plane", &format!("http://{cp_grpc}")])
            .args(["--http-addr", &follower_addr])
            .env("SWITCHYARD_FLEET_TOKEN", FLEET_TOKEN)
            .env("REDIS_URL", &redis)
            .env("SWITCHYARD_REDIS_PREFIX", &prefix)
            .env("RUST_LOG", "warn"),
    );
    wait_ready(&follower_addr, "the following proxy").await;

    // A standalone proxy with a route limit (switchyard_limit_remaining) and a token limit that
    // refuses the second request of the minute (switchyard_limit_refusals_total).
    let config = fleet::write_config(
        "metrics-lint",
        "channels:\n  - name: sim\n    provider: mock\nroutes:\n  - model_pattern: m\n    members:\n      - { channel: sim }\nlimits:\n  - { token: test, metric: requests, window: minute, value: 1 }\n  - { route: m, metric: tokens, window: day, value: 1000000 }\n",
    );
    let standalone_prefix = unique("metrics-lint");
    let standalone = Proxy::start(DATA_PLANE, &config, &redis, &standalone_prefix).await;
    let mut statuses = Vec::new();
    for _ in 0..3 {
        statuses.push(standalone.chat(&[]).await.status);
    }
    // Three requests cannot straddle two minute boundaries: one at least is refused.
    assert!(
        statuses[0] == 200 && statuses.contains(&429),
        "the token limit admits one request a minute: {statuses:?}"
    );

    let pages = [
        ("control plane", scrape(&cp_http).await),
        ("following proxy", scrape(&follower_addr).await),
        ("standalone proxy", scrape(&standalone.url).await),
    ];
    let _ = std::fs::remove_file(&config);
    fleet::cleanup(&redis, &prefix);
    fleet::cleanup(&redis, &standalone_prefix);

    for (name, page) in &pages {
        lint(name, page);
    }

    // Families (from `# TYPE` lines) and, per family, the label names its samples carry.
    let mut families = HashSet::new();
    let mut labels: Vec<(String, String)> = Vec::new();
    for (_, page) in &pages {
        for line in page.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                families.insert(rest.split_whitespace().next().unwrap().to_owned());
            } else if !line.starts_with('#') {
                if let Some((name, rest)) = line.split_once('{') {
                    for pair in rest.split("\",") {
                        if let Some((label, _)) = pair.split_once("=\"") {
                            labels.push((name.to_owned(), label.trim().to_owned()));
                        }
                    }
                }
            }
        }
    }
    let family_of = |name: &str| -> String {
        ["_bucket", "_count", "_sum"]
            .iter()
            .find_map(|suffix| name.strip_suffix(suffix))
            .filter(|base| families.contains(*base))
            .unwrap_or(name)
            .to_owned()
    };

    let mut missing = Vec::new();
    for expr in rule_expressions() {
        let names = metric_names(&expr);
        for name in &names {
            if !families.contains(&family_of(name)) {
                missing.push(format!("metric {name} (in `{}`)", expr.trim()));
            }
        }
        for label in label_names(&expr) {
            let carried = labels
                .iter()
                .any(|(metric, l)| l == &label && names.iter().any(|n| metric == n));
            if !carried {
                missing.push(format!("label {label} (in `{}`)", expr.trim()));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "the alerting rules query what no plane exports:\n{}",
        missing.join("\n")
    );
}
