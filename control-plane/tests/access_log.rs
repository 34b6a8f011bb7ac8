//! The control plane's access log: the real binary writes one JSON line per admin request
//! (method, matched route, path, status, latency, the actor: the admin token's name), never the
//! admin token itself, and none for health, readiness, metrics or the console's static files.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const TOKEN: &str = "access-log-test-admin-token-0123";

/// One HTTP/1.1 request; returns the status code.
async fn call(addr: SocketAddr, method: &str, path: &str, headers: &str) -> u16 {
    call_with_body(addr, method, path, headers, "").await.0
}

/// One HTTP/1.1 request with a JSON body; returns the status code and the raw reply.
async fn call_with_body(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &str,
    body: &str,
) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nhost: {addr}\r\n{headers}content-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut reply = String::new();
    stream.read_to_string(&mut reply).await.unwrap();
    let status = reply
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, reply)
}

#[sqlx::test(migrations = "../migrations")]
async fn every_admin_request_gets_one_access_line_and_the_probes_none(
    _pool: PgPoolOptions,
    opts: PgConnectOptions,
) {
    let url = common::database_url(&opts, &common::postgres_addr(&opts));
    let mut child = Command::new(env!("CARGO_BIN_EXE_switchyard-control-plane"))
        .env_remove("REDIS_URL")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .env("DATABASE_URL", url)
        .env("SWITCHYARD_ADMIN_TOKEN", TOKEN)
        .env("SWITCHYARD_HTTP_ADDR", "127.0.0.1:0")
        .env("SWITCHYARD_GRPC_ADDR", "127.0.0.1:0")
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let next = |deadline: Instant| -> Option<serde_json::Value> {
        let line = rx
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .ok()?;
        Some(serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}")))
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    let http: SocketAddr = loop {
        let log = next(deadline).expect("the control plane never logged its listen address");
        if log["message"] == "listening" {
            break log["http_addr"].as_str().unwrap().parse().unwrap();
        }
    };

    let auth = format!("authorization: Bearer {TOKEN}\r\n");
    // A named viewer token, made before the requests below (its own line is not checked).
    let (status, reply) = call_with_body(
        http,
        "POST",
        "/api/v1/admin-tokens",
        &auth,
        r#"{"name":"oncall-viewer","role":"viewer"}"#,
    )
    .await;
    assert_eq!(status, 201, "{reply}");
    let viewer = reply
        .split("\"token\":\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap()
        .to_owned();
    let viewer_auth = format!("authorization: Bearer {viewer}\r\n");
    // Not logged: the probes, the scrape, the console's files.
    for path in ["/healthz", "/readyz", "/metrics", "/console/"] {
        let status = call(http, "GET", path, "").await;
        assert!(status == 200 || status == 503, "{path}: {status}");
    }
    // Logged, in this order.
    let asked = [
        (
            "GET",
            "/api/v1/channels",
            format!("{auth}x-switchyard-actor: ops-script\r\n"),
            200,
        ),
        ("GET", "/api/v1/routes/7", auth.clone(), 404),
        ("DELETE", "/api/v1/channels", auth.clone(), 405),
        ("GET", "/api/v1/channels", String::new(), 401),
        ("GET", "/no/such/path?secret=x", auth.clone(), 404),
        ("POST", "/api/v1/channels", viewer_auth.clone(), 403),
    ];
    for (method, path, headers, want) in &asked {
        assert_eq!(
            call(http, method, path, headers).await,
            *want,
            "{method} {path}"
        );
    }

    let mut lines = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut skipped_creation = false;
    while lines.len() < asked.len() {
        let Some(log) = next(deadline) else { break };
        assert!(
            !log.to_string().contains(TOKEN) && !log.to_string().contains(&viewer),
            "an admin token reached the log: {log}"
        );
        if log["message"] == "admin request" {
            if !skipped_creation && log["route"] == "/api/v1/admin-tokens" {
                skipped_creation = true;
                continue;
            }
            lines.push(log);
        }
    }
    let seen: Vec<(String, String, u64)> = lines
        .iter()
        .map(|l| {
            (
                l["method"].as_str().unwrap_or_default().to_owned(),
                l["path"].as_str().unwrap_or_default().to_owned(),
                l["status"].as_u64().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("GET".into(), "/api/v1/channels".into(), 200),
            ("GET".into(), "/api/v1/routes/7".into(), 404),
            ("DELETE".into(), "/api/v1/channels".into(), 405),
            ("GET".into(), "/api/v1/channels".into(), 401),
            // The path without its query string.
            ("GET".into(), "/no/such/path".into(), 404),
            ("POST".into(), "/api/v1/channels".into(), 403),
        ],
        "{lines:?}"
    );
    // The token's name, with the optional header as a note; empty when no token was accepted.
    assert_eq!(lines[0]["actor"], "bootstrap (ops-script)");
    assert_eq!(lines[1]["actor"], "bootstrap");
    assert_eq!(lines[3]["actor"], "");
    // A refused named token is named too.
    assert_eq!(lines[5]["actor"], "oncall-viewer");
    assert_eq!(lines[0]["route"], "/api/v1/channels");
    assert_eq!(lines[1]["route"], "/api/v1/routes/{id}");
    assert_eq!(lines[4]["route"], "unmatched");
    assert!(lines[0]["latency_ms"].as_f64().is_some(), "{}", lines[0]);
    // Nothing more: the probes and the console above wrote no line.
    let _ = child.kill();
    let _ = child.wait();
    while let Some(log) = next(Instant::now() + Duration::from_millis(200)) {
        assert_ne!(log["message"], "admin request", "an extra line: {log}");
    }
}
