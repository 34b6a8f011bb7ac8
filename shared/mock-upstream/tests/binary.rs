//! The `switchyard-mock-upstream` binary: listens where told, is scripted over HTTP, stops on
//! SIGTERM.

#![allow(clippy::unwrap_used)] // helpers outside #[test] fns are test code too

mod support;

use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::json;
use support::{get, post};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[tokio::test]
async fn binary_serves_the_control_api_and_stops_on_sigterm() {
    let port = free_port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_switchyard-mock-upstream"))
        .env("MOCK_LISTEN", format!("127.0.0.1:{port}"))
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let base = format!("http://127.0.0.1:{port}");
    let mut up = false;
    for _ in 0..100 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            up = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(up, "binary did not start listening");

    post(
        &base,
        "/__mock/rules",
        json!({"matcher": {"model": "down"}, "behavior": {"status": 503}}),
    )
    .ok()
    .await;
    let down = post(
        &base,
        "/v1/chat/completions",
        json!({"model": "down", "messages": []}),
    )
    .ok()
    .await;
    assert_eq!(down.status, 503);
    let hits = get(&base, "/__mock/hits").ok().await.json();
    assert_eq!(hits["hits"]["total"], 1);

    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let mut exited = None;
    for _ in 0..100 {
        if let Some(code) = child.try_wait().unwrap() {
            exited = Some(code);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let Some(code) = exited else {
        child.kill().unwrap();
        panic!("binary did not exit on SIGTERM");
    };
    assert!(code.success(), "{code:?}");
    let out = child.wait_with_output().unwrap();
    let logs = String::from_utf8_lossy(&out.stdout);
    let first = logs.lines().next().unwrap();
    let line: serde_json::Value = serde_json::from_str(first).unwrap();
    assert_eq!(line["level"], "INFO", "logs are JSON: {first}");
}
