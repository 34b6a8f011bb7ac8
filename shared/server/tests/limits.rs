//! The connection cap and the head limit as a client meets them: a connection over the cap while
//! every connection is busy gets a complete JSON 503; a head over the limit gets the gateway's
//! own JSON 431 (naming the limit) for any head up to twice the limit (or 16 KiB), beyond which
//! the parser's own 431 is answered.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::Duration;

use axum::routing::get;
use axum::Router;
use switchyard_server::{Limits, Server};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Notify};

async fn serve(limits: Limits, router: Router) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let stop = tokio_util::sync::CancellationToken::new();
    tokio::spawn(Server::new(limits).serve(listener, router, stop));
    addr
}

/// Everything the server sends until it closes the connection.
async fn read_to_close(stream: &mut TcpStream) -> String {
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut out))
        .await
        .expect("the server did not close")
        .unwrap();
    String::from_utf8(out).unwrap()
}

fn json_body(answer: &str) -> serde_json::Value {
    let (_, body) = answer
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no head in {answer:?}"));
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {answer:?}"))
}

#[tokio::test]
async fn over_the_cap_with_every_connection_busy_a_newcomer_gets_a_json_503() {
    let (started_tx, mut started) = mpsc::unbounded_channel();
    let release = Arc::new(Notify::new());
    let held = Arc::clone(&release);
    let router = Router::new().route(
        "/hold",
        get(move || {
            let started = started_tx.clone();
            let release = Arc::clone(&held);
            async move {
                let _ = started.send(());
                release.notified().await;
                "done"
            }
        }),
    );
    let limits = Limits {
        max_connections: 1,
        ..Limits::default()
    };
    let addr = serve(limits, router).await;
    let mut busy = TcpStream::connect(&addr).await.unwrap();
    busy.write_all(b"GET /hold HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    started.recv().await.unwrap();

    let mut newcomer = TcpStream::connect(&addr).await.unwrap();
    let answer = read_to_close(&mut newcomer).await;
    assert!(answer.starts_with("HTTP/1.1 503 "), "{answer}");
    assert!(answer.contains("retry-after: 1\r\n"), "{answer}");
    assert_eq!(json_body(&answer)["error"]["code"], "overloaded");

    release.notify_one();
    let mut buf = [0u8; 256];
    let n = busy.read(&mut buf).await.unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200 "));
}

/// Sends a GET whose head is about `size` bytes (one padding header) and returns the answer.
async fn head_of(addr: &str, size: usize) -> String {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let pad = "p".repeat(size);
    stream
        .write_all(format!("GET /ok HTTP/1.1\r\nhost: x\r\nx-pad: {pad}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    read_to_close(&mut stream).await
}

async fn ok_server(max_header_bytes: usize) -> String {
    let router = Router::new().route("/ok", get(|| async { "ok" }));
    let limits = Limits {
        max_connections: 16,
        max_header_bytes,
        ..Limits::default()
    };
    serve(limits, router).await
}

#[tokio::test]
async fn a_head_up_to_twice_the_limit_gets_the_gateways_431_naming_the_limit() {
    let addr = ok_server(20_000).await;
    let answer = head_of(&addr, 30_000).await;
    assert!(answer.starts_with("HTTP/1.1 431 "), "{answer}");
    assert!(answer.contains("connection: close\r\n"), "{answer}");
    let json = json_body(&answer);
    assert_eq!(json["error"]["code"], "request_header_too_large");
    assert!(
        json["error"]["message"]
            .as_str()
            .unwrap()
            .contains("exceeds 20000 bytes"),
        "{json}"
    );
}

#[tokio::test]
async fn a_small_limit_still_reads_heads_up_to_16_kib_before_the_parser_refuses() {
    let addr = ok_server(2_000).await;
    let answer = head_of(&addr, 10_000).await;
    let json = json_body(&answer);
    assert!(
        json["error"]["message"]
            .as_str()
            .unwrap()
            .contains("exceeds 2000 bytes"),
        "{json}"
    );
    // Far beyond the buffer, the parser answers itself (with the same JSON code).
    let answer = head_of(&addr, 64_000).await;
    assert!(answer.starts_with("HTTP/1.1 431 "), "{answer}");
    let json = json_body(&answer);
    assert_eq!(json["error"]["code"], "request_header_too_large");
    assert_eq!(json["error"]["message"], "The request head is too large.");
}
