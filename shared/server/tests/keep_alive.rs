//! Keep-alive as a pooled client sees it: an answer given before the request body was read says
//! `connection: close` and the connection then closes cleanly (no reset, even while the client is
//! still sending the body); every other answer keeps the connection open and announces the idle
//! timeout.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use axum::body::Bytes;
use axum::http::StatusCode;
use axum::routing::post;
use axum::Router;
use switchyard_server::{Limits, Server};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

async fn serve() -> (String, CancellationToken) {
    let router = Router::new()
        // Answers at once, never reading the body (an auth failure before the body).
        .route("/early", post(|| async { StatusCode::UNAUTHORIZED }))
        // Reads the whole body, then answers.
        .route(
            "/read",
            post(|body: Bytes| async move { format!("{}", body.len()) }),
        );
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let stop = CancellationToken::new();
    let limits = Limits {
        max_connections: 64,
        header_read_timeout: Duration::from_secs(15),
        ..Limits::default()
    };
    tokio::spawn(Server::new(limits).serve(listener, router, stop.clone()));
    (addr, stop)
}

/// Reads one response head (and its body, by content-length) from `stream`.
async fn read_response(stream: &mut TcpStream) -> String {
    let mut data = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buf))
            .await
            .expect("no answer")
            .expect("read failed");
        assert!(n > 0, "closed before a full answer: {data:?}");
        data.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&data).to_string();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length: usize = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length: ")
                        .map(|v| v.trim().parse().unwrap())
                })
                .unwrap_or(0);
            if body.len() >= length {
                return text;
            }
        }
    }
}

#[tokio::test]
async fn an_answer_before_the_body_announces_the_close_and_the_socket_lingers() {
    let (addr, _stop) = serve().await;
    let mut stream = TcpStream::connect(&addr).await.unwrap();
    // The head first, the body later (as pooled clients write them): the server answers before
    // any body byte has arrived.
    let body = vec![b'x'; 256 * 1024];
    stream
        .write_all(
            format!(
                "POST /early HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\n\r\n",
                body.len()
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    let answer = read_response(&mut stream).await;
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    assert!(
        answer.to_ascii_lowercase().contains("connection: close"),
        "the close is announced: {answer}"
    );
    // The client still sends its body after the answer: the server reads and discards it
    // instead of resetting the connection, then the connection ends with a clean FIN.
    stream.write_all(&body).await.unwrap();
    let mut rest = Vec::new();
    let end = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut rest))
        .await
        .expect("the connection was never closed");
    assert!(end.is_ok(), "the connection was reset: {end:?}");
    assert!(rest.is_empty(), "nothing after the answer: {rest:?}");
}

#[tokio::test]
async fn an_answer_after_the_body_keeps_the_connection_and_announces_the_idle_timeout() {
    let (addr, _stop) = serve().await;
    let mut stream = TcpStream::connect(&addr).await.unwrap();
    for round in 0..3 {
        stream
            .write_all(b"POST /read HTTP/1.1\r\nhost: x\r\ncontent-length: 5\r\n\r\nhello")
            .await
            .unwrap();
        let answer = read_response(&mut stream).await;
        let lower = answer.to_ascii_lowercase();
        assert!(
            answer.starts_with("HTTP/1.1 200"),
            "round {round}: {answer}"
        );
        assert!(!lower.contains("connection: close"), "{answer}");
        // One second short of the 15 s idle timeout.
        assert!(lower.contains("keep-alive: timeout=14"), "{answer}");
        assert!(answer.ends_with("\r\n\r\n5"), "{answer}");
    }
}

#[tokio::test]
async fn an_early_answer_to_a_request_without_a_body_keeps_the_connection() {
    let (addr, _stop) = serve().await;
    let mut stream = TcpStream::connect(&addr).await.unwrap();
    for _ in 0..2 {
        stream
            .write_all(b"POST /early HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n")
            .await
            .unwrap();
        let answer = read_response(&mut stream).await;
        assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
        assert!(
            !answer.to_ascii_lowercase().contains("connection: close"),
            "{answer}"
        );
    }
}

#[test]
fn the_announced_idle_timeout_is_one_second_short_and_never_zero() {
    let at = |ms| Limits {
        header_read_timeout: Duration::from_millis(ms),
        ..Limits::default()
    };
    assert_eq!(at(15_000).keep_alive_value(), "timeout=14");
    assert_eq!(at(60_500).keep_alive_value(), "timeout=59");
    assert_eq!(at(1_000).keep_alive_value(), "timeout=1");
    assert_eq!(at(200).keep_alive_value(), "timeout=1");
}

#[tokio::test]
async fn a_request_hyper_cannot_parse_gets_a_json_error() {
    let (addr, _stop) = serve().await;
    for garbage in [
        &b"\x01\x02 nonsense\r\n\r\n"[..],
        b"POST /read HTTP/1.1\r\nbad header line\r\n\r\n",
    ] {
        let mut stream = TcpStream::connect(&addr).await.unwrap();
        stream.write_all(garbage).await.unwrap();
        let answer = read_response(&mut stream).await;
        assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
        let (head, body) = answer.split_once("\r\n\r\n").unwrap();
        assert!(head.contains("content-type: application/json"), "{head}");
        let json: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(json["error"]["code"], "bad_request", "{body}");
        assert_eq!(json["error"]["type"], "invalid_request_error", "{body}");
    }
}
