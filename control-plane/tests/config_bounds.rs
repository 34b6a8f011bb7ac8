//! A hostile configuration file against the control plane: an alias bomb, a value of megabytes,
//! a nesting thousands deep and a body too long, through `POST /api/v1/config/plan` and
//! `…/apply` (with an operator's token, as the issue had it) and through the
//! `switchyard-control-plane config` binary. Each is refused naming what is too large, quickly
//! and without allocating what the file stands for, and nothing changes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use common::{database_url, postgres_addr, test_app, TestApp};
use serde_json::{json, Value};
use sqlx::PgPool;

const BASE: &str = "channels:\n- name: a\n  provider: mock\n  retry_error_patterns: ";

/// `[&s "<value>", *s, *s, …]`: 3 400 repetitions of a 60 KB value, 74 KB of text that stands
/// for 200 MB (the parser before the bound built all of it, so this is sized to finish).
fn alias_bomb() -> String {
    format!(
        "{BASE}[&s \"{}\"{}]\n",
        "x".repeat(60 * 1024),
        ", *s".repeat(3_400)
    )
}

/// The issue's: one retry error pattern of `bytes` bytes.
fn long_pattern(bytes: usize) -> String {
    format!("{BASE}[\"{}\"]\n", "x".repeat(bytes))
}

/// The issue's: an unknown map 10 000 levels deep under `capabilities`.
fn deep_map() -> String {
    format!(
        "channels:\n- name: a\n  provider: mock\n  capabilities: {}1{}\n",
        "{a: ".repeat(10_000),
        "}".repeat(10_000)
    )
}

/// The hostile files, each with (the start of) the error `param` and a part of the message.
fn hostile() -> Vec<(&'static str, String, &'static str, &'static str)> {
    vec![
        (
            "alias bomb",
            alias_bomb(),
            "file",
            "once its aliases are expanded",
        ),
        (
            "value of 100 KB",
            long_pattern(100 * 1024),
            "channels[0].retry_error_patterns[0]",
            "a value may be at most 65536 bytes",
        ),
        (
            "retry pattern of 2 KB",
            long_pattern(2 * 1024),
            "channels[0].retry_error_patterns[0]",
            "at most 1024 are allowed",
        ),
        (
            "deep map",
            deep_map(),
            "channels[0].capabilities.a.a.a",
            "deeper than 32 levels",
        ),
    ]
}

async fn post_yaml(app: &TestApp, path: &str, token: &str, body: String) -> (StatusCode, Value) {
    let reply = app.post_yaml(path, &body, token).await;
    let body = serde_json::from_str(&reply.text).unwrap_or(Value::String(reply.text));
    (reply.status, body)
}

async fn state(app: &TestApp) -> (i64, String) {
    let revision = app.revision().await;
    (revision, app.get("/api/v1/config").await.text)
}

#[sqlx::test(migrations = "../migrations")]
async fn hostile_files_are_refused_over_the_api_naming_what_is_too_large(pool: PgPool) {
    let app = test_app(pool);
    let reply = app
        .post(
            "/api/v1/admin-tokens",
            json!({"name": "sre", "role": "operator"}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    let operator = reply.body["token"].as_str().unwrap().to_owned();
    let before = state(&app).await;
    for (what, file, param, message) in hostile() {
        for (path, token) in [
            ("/api/v1/config/plan", operator.as_str()),
            ("/api/v1/config/apply", common::ADMIN_TOKEN),
        ] {
            let started = Instant::now();
            let (status, body) = post_yaml(&app, path, token, file.clone()).await;
            assert_eq!(
                status,
                StatusCode::UNPROCESSABLE_ENTITY,
                "{what} {path}: {body}"
            );
            let got = body["error"]["param"].as_str().unwrap_or_default();
            assert!(got.starts_with(param), "{what} {path}: {body}");
            let text = body["error"]["message"].as_str().unwrap();
            assert!(text.contains(message), "{what} {path}: {text}");
            assert!(text.len() < 1024, "{what} {path}: the value is not echoed");
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "{what} {path}: {:?}",
                started.elapsed()
            );
        }
    }
    // A body longer than the longest file: 413 in the API's error shape.
    let (status, body) = post_yaml(
        &app,
        "/api/v1/config/plan",
        &operator,
        long_pattern(50 * 1024 * 1024),
    )
    .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
    assert!(body["error"]["message"].is_string(), "{body}");
    assert_eq!(state(&app).await, before, "nothing changed");
}

/// The channel API holds retry error patterns to the file's bounds.
#[sqlx::test(migrations = "../migrations")]
async fn the_channel_api_bounds_retry_error_patterns(pool: PgPool) {
    let app = test_app(pool);
    for (patterns, param) in [
        (json!(["x".repeat(1025)]), "retry_error_patterns[0]"),
        (json!(vec!["x"; 65]), "retry_error_patterns"),
    ] {
        let reply = app
            .post(
                "/api/v1/channels",
                json!({"name": "a", "provider": "mock", "retry_error_patterns": patterns}),
            )
            .await;
        assert_eq!(
            reply.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{}",
            reply.text
        );
        assert_eq!(reply.param(), Some(param), "{}", reply.text);
    }
    let reply = app
        .post(
            "/api/v1/channels",
            json!({"name": "a", "provider": "mock",
                   "retry_error_patterns": vec!["x".repeat(1024); 64]}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
}

fn cli(url: &str, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_switchyard-control-plane"))
        .arg("config")
        .args(args)
        .env("DATABASE_URL", url)
        .env_remove("SWITCHYARD_ADMIN_TOKEN")
        .output()
        .unwrap()
}

#[sqlx::test(migrations = "../migrations")]
async fn hostile_files_are_refused_by_the_binary_naming_what_is_too_large(pool: PgPool) {
    let app = test_app(pool.clone());
    let opts = pool.connect_options();
    let url = database_url(&opts, &postgres_addr(&opts));
    let before = state(&app).await;
    let dir = std::env::temp_dir().join(format!("switchyard-bounds-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut files = hostile();
    files.push((
        "file of 50 MB",
        long_pattern(50 * 1024 * 1024),
        "",
        "the file is longer than 1 MiB",
    ));
    for (n, (what, file, param, message)) in files.into_iter().enumerate() {
        let path = dir.join(format!("{n}.yaml"));
        std::fs::write(&path, file).unwrap();
        for command in ["plan", "apply"] {
            let output = cli(&url, &[command, "-f", path.to_str().unwrap()]);
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert_eq!(output.status.code(), Some(1), "{what} {command}: {stderr}");
            assert!(stderr.contains(message), "{what} {command}: {stderr}");
            assert!(stderr.contains(param), "{what} {command}: {stderr}");
            assert!(
                stderr.len() < 2048,
                "{what} {command}: the value is not echoed"
            );
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(state(&app).await, before, "nothing changed");
}
