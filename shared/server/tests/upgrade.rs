//! Upgraded connections (a WebSocket's `101 Switching Protocols`): the bytes after the upgrade
//! reach the handler as the client sent them (even bytes shaped like a request head the
//! framing rules would refuse); the connection keeps its place under the cap, busy, until it
//! closes, and then gives it back; an upgrade answered with anything but `101` closes its
//! connection after the answer.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use http::StatusCode;
use hyper_util::rt::TokioIo;
use switchyard_server::{Limits, Server};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// `/echo` upgrades and echoes what it reads; `/refuse` answers 404 to the same request.
fn router() -> Router {
    Router::new()
        .route(
            "/echo",
            get(|mut request: Request| async move {
                let upgrade = hyper::upgrade::on(&mut request);
                tokio::spawn(async move {
                    let mut io = TokioIo::new(upgrade.await.unwrap());
                    let mut buf = [0u8; 1024];
                    loop {
                        let n = io.read(&mut buf).await.unwrap_or(0);
                        if n == 0 || io.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                    }
                });
                let mut response = Response::new(Body::empty());
                *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
                response
                    .headers_mut()
                    .insert("connection", "upgrade".parse().unwrap());
                response
                    .headers_mut()
                    .insert("upgrade", "echo".parse().unwrap());
                response
            }),
        )
        .route(
            "/refuse",
            get(|| async { (StatusCode::NOT_FOUND, "no upgrade here") }),
        )
}

async fn serve(limits: Limits) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let stop = tokio_util::sync::CancellationToken::new();
    tokio::spawn(Server::new(limits).serve(listener, router(), stop));
    addr
}

const UPGRADE: &str = "HTTP/1.1\r\nhost: x\r\nconnection: upgrade\r\nupgrade: echo\r\n\r\n";

/// Reads until `want` bytes came.
async fn read_exactly(stream: &mut TcpStream, want: usize) -> String {
    let mut out = vec![0u8; want];
    tokio::time::timeout(Duration::from_secs(10), stream.read_exact(&mut out))
        .await
        .expect("nothing came")
        .unwrap();
    String::from_utf8(out).unwrap()
}

/// The answer head (up to its blank line).
async fn read_head(stream: &mut TcpStream) -> String {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut byte))
            .await
            .expect("no answer")
            .unwrap();
        assert_eq!(n, 1, "closed before the head ended: {head:?}");
        head.push(byte[0]);
    }
    String::from_utf8(head).unwrap()
}

#[tokio::test]
async fn an_upgraded_connection_carries_raw_bytes_and_holds_its_place_until_it_closes() {
    let limits = Limits {
        max_connections: 1,
        ..Limits::default()
    };
    let addr = serve(limits).await;
    let mut upgraded = TcpStream::connect(&addr).await.unwrap();
    upgraded
        .write_all(format!("GET /echo {UPGRADE}").as_bytes())
        .await
        .unwrap();
    let head = read_head(&mut upgraded).await;
    assert!(head.starts_with("HTTP/1.1 101 "), "{head}");
    // A request head without a host would be refused before a handler; after the upgrade it is
    // only bytes.
    let raw = "GET / HTTP/1.1\r\n\r\n";
    upgraded.write_all(raw.as_bytes()).await.unwrap();
    assert_eq!(read_exactly(&mut upgraded, raw.len()).await, raw);

    // The upgraded connection is busy: a newcomer cannot evict it and is refused.
    let mut newcomer = TcpStream::connect(&addr).await.unwrap();
    let mut answer = String::new();
    tokio::time::timeout(
        Duration::from_secs(10),
        newcomer.read_to_string(&mut answer),
    )
    .await
    .unwrap()
    .unwrap();
    assert!(answer.starts_with("HTTP/1.1 503 "), "{answer}");
    upgraded.write_all(b"still here").await.unwrap();
    assert_eq!(read_exactly(&mut upgraded, 10).await, "still here");

    // Once it closes, its place is free again.
    drop(upgraded);
    for _ in 0..200 {
        let mut next = TcpStream::connect(&addr).await.unwrap();
        next.write_all(b"GET /refuse HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .unwrap();
        let head = read_head(&mut next).await;
        if head.starts_with("HTTP/1.1 404 ") {
            return;
        }
        assert!(head.starts_with("HTTP/1.1 503 "), "{head}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("the upgraded connection's place was never given back");
}

#[tokio::test]
async fn an_upgrade_answered_otherwise_closes_its_connection() {
    let addr = serve(Limits::default()).await;
    let mut stream = TcpStream::connect(&addr).await.unwrap();
    stream
        .write_all(format!("GET /refuse {UPGRADE}").as_bytes())
        .await
        .unwrap();
    let mut answer = String::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_string(&mut answer))
        .await
        .expect("the connection stayed open")
        .unwrap();
    assert!(answer.starts_with("HTTP/1.1 404 "), "{answer}");
    assert!(answer.contains("connection: close\r\n"), "{answer}");
    assert!(answer.ends_with("no upgrade here"), "{answer}");
}
