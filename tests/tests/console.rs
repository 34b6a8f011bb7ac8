//! The web console in a real headless Chromium, against a real control plane and a real proxy
//! (Postgres, Redis). `tests/console/drive.mjs` (playwright-core driving the system's
//! `/usr/bin/chromium`; `scripts/test` installs both) signs in, creates a route with two members
//! through the forms, reads explain's probabilities, edits a weight and checks its dry run before
//! saving, makes a failing trial call and finds the cooldown in the live state, creates a token
//! with an expiry, a price and a spend limit (each after its dry run), edits and deletes prices
//! and limits, signs in again as a viewer (no write control shown, values read-only) and as an
//! operator (dry runs and trial calls, no save or confirmed delete), creates a webhook pointing at
//! a receiver it runs and finds a finished trial's delivery to it shown delivered, then deletes it,
//! sends traffic through the proxy (another token's before the price exists, so it is unpriced;
//! then that token's) and, once the proxy's usage reports have reached the control plane, finds it
//! in the usage chart and table and in the budget; creates a response cache rule in the Cache page,
//! sends identical requests through the proxy until one is a hit and finds the hit counted on
//! that page; makes a shadow-mode guardrail, sends a request it would block and finds the rule
//! (marked as only reporting) and its report (the count, the finding's kind, masked examples) on
//! the Guardrails page; sends a tagged request and finds it on the Requests page (the request log), with
//! no console error or CSP violation. This test then checks through the REST API that the UI
//! really did it.
//!
//! Missing node, Chromium or the driver is a failure, not a skip. Screenshots of the main views
//! are written when `SWITCHYARD_CONSOLE_SCREENSHOTS` names a directory (`docs/console`).
// Helpers outside #[test] fns are test code too: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::Read;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use switchyard_e2e::control::database_url;
use switchyard_e2e::process::Process;

const CONTROL_PLANE: &str = env!("CARGO_BIN_EXE_e2e-control-plane");
const DATA_PLANE: &str = env!("CARGO_BIN_EXE_e2e-data-plane");
const ADMIN_TOKEN: &str = "console-admin-token-0123456789abcdef";
const FLEET_TOKEN: &str = "console-fleet-token-0123456789abcdef";
const PATIENCE: Duration = Duration::from_secs(60);
/// The whole browser session (a loaded 2-core machine starts Chromium slowly).
const BROWSER_PATIENCE: Duration = Duration::from_secs(300);

/// A minimal HTTP/1.1 call with the admin token: (status, JSON body).
async fn call(addr: SocketAddr, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let auth = format!("authorization: Bearer {ADMIN_TOKEN}\r\n");
    switchyard_e2e::raw_call(addr, method, path, &auth, body).await
}

/// What the browser test needs, or a failure naming what is missing.
struct Browser {
    node: PathBuf,
    chromium: PathBuf,
    driver: PathBuf,
}

fn find_in_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(name))
            .find(|p| p.is_file())
    })
}

fn browser() -> Browser {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("console");
    let node = find_in_path("node").unwrap_or_else(|| {
        panic!("node is not installed; scripts/test installs it (apt-get install nodejs npm)")
    });
    let chromium = std::env::var_os("SWITCHYARD_CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"));
    assert!(
        chromium.is_file(),
        "{} is missing; scripts/test installs Debian's chromium package",
        chromium.display()
    );
    assert!(
        dir.join("node_modules/playwright-core/package.json")
            .is_file(),
        "playwright-core is not installed in {}; scripts/test runs `npm ci` there",
        dir.display()
    );
    Browser {
        node,
        chromium,
        driver: dir.join("drive.mjs"),
    }
}

#[sqlx::test(migrations = false)]
async fn the_console_drives_a_real_fleet_in_headless_chromium(
    _pool: PgPoolOptions,
    opts: PgConnectOptions,
) {
    let browser = browser();
    let url = database_url(&opts);
    let redis = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let prefix = format!("console-{}-{nanos:x}", std::process::id());

    let mut cp = Process::spawn(
        "control plane",
        Command::new(CONTROL_PLANE)
            .env("DATABASE_URL", &url)
            .env("SWITCHYARD_ADMIN_TOKEN", ADMIN_TOKEN)
            .env("SWITCHYARD_FLEET_TOKEN", FLEET_TOKEN)
            .env("SWITCHYARD_HTTP_ADDR", "127.0.0.1:0")
            .env("SWITCHYARD_GRPC_ADDR", "127.0.0.1:0")
            .env("REDIS_URL", &redis)
            .env("SWITCHYARD_REDIS_PREFIX", &prefix)
            // Notification rounds often: the webhook's delivery is waited for.
            .env("SWITCHYARD_NOTIFY_TICK_MS", "200")
            .env("RUST_LOG", "info"),
    );
    let (http, grpc): (SocketAddr, SocketAddr) = cp
        .wait_log("listening", |log| {
            (log["message"] == "listening").then(|| {
                (
                    log["http_addr"].as_str().unwrap().parse().unwrap(),
                    log["grpc_addr"].as_str().unwrap().parse().unwrap(),
                )
            })
        })
        .await;
    let mut proxy = Process::spawn(
        "proxy",
        Command::new(DATA_PLANE)
            .env_remove("SWITCHYARD_CONFIG")
            .env_remove("SWITCHYARD_SNAPSHOT_CACHE")
            .env("SWITCHYARD_CONTROL_PLANE", format!("http://{grpc}"))
            .env("SWITCHYARD_FLEET_TOKEN", FLEET_TOKEN)
            .env("SWITCHYARD_HTTP_ADDR", "127.0.0.1:0")
            .env("REDIS_URL", &redis)
            .env("SWITCHYARD_REDIS_PREFIX", &prefix)
            .env("RUST_LOG", "info"),
    );
    let proxy_addr: SocketAddr = proxy
        .wait_log("proxy listening", |log| {
            (log["message"] == "listening").then(|| log["addr"].as_str().unwrap().parse().unwrap())
        })
        .await;

    // Two channels to build the route from: one healthy, one whose every call fails.
    let mut channels = Vec::new();
    for (name, base_url) in [
        ("healthy", "mock://sim?latency_ms=0&failure_rate=0"),
        (
            "failing",
            "mock://sim?latency_ms=0&failure_rate=1&failure_status=503",
        ),
    ] {
        let (status, body) = call(
            http,
            "POST",
            "/api/v1/channels",
            Some(json!({"name": name, "provider": "mock", "base_url": base_url})),
        )
        .await;
        assert_eq!(status, 201, "{body}");
        channels.push(body["id"].as_i64().unwrap());
    }
    // A cooldown outlasting the browser session: the one the trial call starts is checked after it.
    let (status, body) = call(
        http,
        "PATCH",
        "/api/v1/settings",
        Some(json!({"cooldown_seconds": 600})),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    // A second client token, made here: its traffic is the usage chart's second series.
    let (status, batch) = call(
        http,
        "POST",
        "/api/v1/tokens",
        Some(json!({"name": "batch-token"})),
    )
    .await;
    assert_eq!(status, 201, "{batch}");
    // A viewer's and an operator's admin tokens: the console hides what each may not do.
    let mut role_tokens = Vec::new();
    for (name, role) in [
        ("console-viewer", "viewer"),
        ("console-operator", "operator"),
    ] {
        let (status, created) = call(
            http,
            "POST",
            "/api/v1/admin-tokens",
            Some(json!({"name": name, "role": role})),
        )
        .await;
        assert_eq!(status, 201, "{created}");
        role_tokens.push(created["token"].as_str().unwrap().to_owned());
    }
    // The proxy is connected before the browser looks for it in the live state.
    let deadline = Instant::now() + PATIENCE;
    loop {
        let (_, state) = call(http, "GET", "/api/v1/state", None).await;
        if state["proxies"].as_array().is_some_and(|p| !p.is_empty()) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the proxy never connected: {state}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let mut command = Command::new(&browser.node);
    command
        .arg(&browser.driver)
        .env("CONSOLE_URL", format!("http://{http}"))
        .env("ADMIN_TOKEN", ADMIN_TOKEN)
        .env("CHANNEL_OK", channels[0].to_string())
        .env("CHANNEL_BAD", channels[1].to_string())
        .env("PROXY_URL", format!("http://{proxy_addr}"))
        .env("OTHER_TOKEN", batch["token"].as_str().unwrap())
        .env("VIEWER_TOKEN", &role_tokens[0])
        .env("OPERATOR_TOKEN", &role_tokens[1])
        .env("CHROMIUM", &browser.chromium)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Ok(dir) = std::env::var("SWITCHYARD_CONSOLE_SCREENSHOTS") {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(dir);
        command.env("SCREENSHOTS", dir);
    }
    let mut driver = command.spawn().expect("cannot run node");
    let read = |pipe: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_string(&mut text);
            }
            text
        })
    };
    let out = read(driver.stdout.take().map(|p| Box::new(p) as _));
    let err = read(driver.stderr.take().map(|p| Box::new(p) as _));
    let deadline = Instant::now() + BROWSER_PATIENCE;
    let status = loop {
        if let Some(status) = driver.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = driver.kill();
            let _ = driver.wait();
            panic!(
                "the browser test did not finish in time:\n{}\n{}",
                out.join().unwrap(),
                err.join().unwrap()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let (stdout, stderr) = (out.join().unwrap(), err.join().unwrap());
    println!("{stdout}");
    assert!(
        status.success(),
        "the browser test failed ({status}):\n{stdout}\n{stderr}"
    );

    // What the UI did is what the API holds: one route with two members, the edited weight, and a
    // cooldown on the failing member.
    let (_, routes) = call(http, "GET", "/api/v1/routes", None).await;
    let route = routes["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["model_pattern"] == "console-model")
        .unwrap_or_else(|| panic!("no route console-model: {routes}"))
        .clone();
    let (_, members) = call(
        http,
        "GET",
        &format!("/api/v1/routes/{}/members", route["id"]),
        None,
    )
    .await;
    let members = members["data"].as_array().unwrap().clone();
    assert_eq!(members.len(), 2, "{members:?}");
    let ok = members
        .iter()
        .find(|m| m["channel_id"] == channels[0])
        .unwrap();
    let bad = members
        .iter()
        .find(|m| m["channel_id"] == channels[1])
        .unwrap();
    assert_eq!(ok["weight"], 3, "{ok}");
    assert_eq!(bad["weight"], 1, "{bad}");
    // The browser saw the cooldown while it lasted; by now it may have run out (the session
    // outlasts it on a loaded machine), but the trial call's failure is still counted.
    let (_, state) = call(http, "GET", "/api/v1/state", None).await;
    let of_bad = |list: &str| {
        state[list]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["member_id"] == bad["id"])
    };
    assert!(
        of_bad("cooldowns") || of_bad("member_failures"),
        "no cooldown or failure for the failing member: {state}"
    );

    // The token made through the form, with its expiry; the price and the spend limit made and
    // edited through the forms; the request limit the UI deleted is gone.
    let (_, tokens) = call(http, "GET", "/api/v1/tokens", None).await;
    let token = tokens["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "console-token")
        .unwrap_or_else(|| panic!("no token console-token: {tokens}"))
        .clone();
    assert!(
        token["expires_at"]
            .as_str()
            .is_some_and(|at| at.starts_with("2099-01-31T23:59:59")),
        "{token}"
    );
    let (_, prices) = call(http, "GET", "/api/v1/prices", None).await;
    let prices = prices["data"].as_array().unwrap().clone();
    assert_eq!(prices.len(), 1, "{prices:?}");
    assert_eq!(prices[0]["channel_id"], channels[0], "{prices:?}");
    assert_eq!(prices[0]["model_pattern"], "model-ok", "{prices:?}");
    assert_eq!(prices[0]["input_per_million"], "30", "{prices:?}");
    assert_eq!(prices[0]["output_per_million"], "60", "{prices:?}");
    assert_eq!(prices[0]["cached_input_per_million"], "15", "{prices:?}");
    let (_, limits) = call(http, "GET", "/api/v1/limits", None).await;
    let limits = limits["data"].as_array().unwrap().clone();
    assert_eq!(limits.len(), 2, "the deleted limit is gone: {limits:?}");
    let limit = &limits[0];
    let concurrent = &limits[1];
    assert_eq!(
        (
            &concurrent["scope"],
            &concurrent["scope_id"],
            &concurrent["metric"],
            &concurrent["window"],
            &concurrent["value"]
        ),
        (
            &json!("member"),
            &bad["id"],
            &json!("concurrent"),
            &json!("none"),
            &json!(4)
        ),
        "{concurrent}"
    );
    assert_eq!(
        (
            &limit["scope"],
            &limit["scope_id"],
            &limit["metric"],
            &limit["window"],
            &limit["value"],
            &limit["mode"]
        ),
        (
            &json!("token"),
            &token["id"],
            &json!("spend"),
            &json!("day"),
            &json!("0.02"),
            &json!("hard")
        ),
        "{limit}"
    );

    // The traffic the browser test sent through the proxy with that token is priced, and the
    // spend limit counts it.
    let (_, usage) = call(
        http,
        "GET",
        "/api/v1/usage?from=2000-01-01T00:00:00Z&to=2100-01-01T00:00:00Z&group_by=token",
        None,
    )
    .await;
    let group = usage["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["key"] == "console-token")
        .unwrap_or_else(|| panic!("no usage of console-token: {usage}"))
        .clone();
    assert!(group["requests"].as_i64().unwrap() >= 5, "{usage}");
    assert_eq!(group["unpriced_requests"], 0, "{usage}");
    let cost: f64 = group["cost_usd"].as_str().unwrap().parse().unwrap();
    assert!(cost > 0.0, "{usage}");
    // The batch token's requests were served before the price existed: unpriced, not free.
    let batch = usage["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["key"] == "batch-token")
        .unwrap_or_else(|| panic!("no usage of batch-token: {usage}"));
    assert_eq!(batch["cost_usd"], Value::Null, "{usage}");
    assert_eq!(batch["unpriced_requests"], batch["requests"], "{usage}");
    // The cache rule made in the Cache page, and the hit it served.
    let (_, rules) = call(http, "GET", "/api/v1/cache_rules", None).await;
    let rules = rules["data"].as_array().unwrap().clone();
    assert_eq!(rules.len(), 1, "{rules:?}");
    assert_eq!(
        (
            &rules[0]["name"],
            &rules[0]["model_pattern"],
            &rules[0]["endpoints"],
            &rules[0]["ttl_seconds"],
            &rules[0]["scope"]
        ),
        (
            &json!("console-cache"),
            &json!("console-model"),
            &json!(["chat_completions"]),
            &json!(600),
            &json!("route")
        ),
        "{rules:?}"
    );
    let (_, by_route) = call(
        http,
        "GET",
        "/api/v1/usage?from=2000-01-01T00:00:00Z&to=2100-01-01T00:00:00Z&group_by=route",
        None,
    )
    .await;
    let route_usage = by_route["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["key"] == "console-model")
        .unwrap_or_else(|| panic!("no usage of console-model: {by_route}"));
    assert!(
        route_usage["cache_hits"].as_i64().unwrap() >= 1,
        "{by_route}"
    );
    let (_, budgets) = call(http, "GET", "/api/v1/budgets", None).await;
    let budget = &budgets["data"][0];
    assert_eq!(budget["limit_id"], limit["id"], "{budgets}");
    let spent: f64 = budget["spent_usd"].as_str().unwrap().parse().unwrap();
    assert!(spent > 0.0, "{budgets}");
}
