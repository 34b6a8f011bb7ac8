//! HTTP/1.1 as clients speak it, over raw sockets: the plain requests the server answers itself
//! (keep-alive, pipelining, bodies in pieces, streamed answers, a client leaving, both deadlines)
//! and the ones it hands to hyper on the same connection (a chunked body, `expect`, HTTP/1.0).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::Router;
use http_body::Frame;
use switchyard_server::{BodyTimeout, Limits, Server};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};

async fn serve(limits: Limits, router: Router) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let stop = tokio_util::sync::CancellationToken::new();
    tokio::spawn(Server::new(limits).serve(listener, router, stop));
    addr
}

fn limits() -> Limits {
    Limits {
        max_connections: 64,
        ..Limits::default()
    }
}

/// Echoes the body's length and its last byte; 408 for a body that timed out.
async fn echo(body: Body) -> impl IntoResponse {
    match axum::body::to_bytes(body, usize::MAX).await {
        Ok(bytes) => (
            StatusCode::OK,
            format!(
                "{} {}",
                bytes.len(),
                bytes.last().map_or('-', |b| *b as char)
            ),
        ),
        Err(e) if BodyTimeout::is(&e) => (StatusCode::REQUEST_TIMEOUT, "timeout".to_owned()),
        Err(e) => (StatusCode::BAD_REQUEST, e.to_string()),
    }
}

fn router() -> Router {
    Router::new()
        .route("/echo", post(echo))
        .route("/hello", get(|| async { "hello" }))
        .route("/empty", get(|| async { StatusCode::NO_CONTENT }))
        .route("/stream", get(|| async { paced(["one", "two", "three"]) }))
}

/// A body yielding `parts`, each after a short pause (so each is its own frame).
fn paced(parts: [&'static str; 3]) -> Body {
    struct Paced(mpsc::Receiver<Bytes>);
    impl http_body::Body for Paced {
        type Data = Bytes;
        type Error = Infallible;
        fn poll_frame(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
            self.0
                .poll_recv(cx)
                .map(|part| part.map(|b| Ok(Frame::data(b))))
        }
    }
    let (tx, rx) = mpsc::channel(1);
    tokio::spawn(async move {
        for part in parts {
            tokio::time::sleep(Duration::from_millis(20)).await;
            if tx.send(Bytes::from_static(part.as_bytes())).await.is_err() {
                return;
            }
        }
    });
    Body::new(Paced(rx))
}

/// Reads exactly one answer (framed by content-length or chunked) from `stream`; returns its
/// head and its body (chunks joined).
async fn read_answer(stream: &mut TcpStream, pending: &mut Vec<u8>) -> (String, String) {
    loop {
        if let Some(answer) = take_answer(pending) {
            return answer;
        }
        let mut buf = [0u8; 4096];
        let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buf))
            .await
            .expect("no answer in time")
            .unwrap();
        assert!(
            n > 0,
            "closed before a whole answer: {:?}",
            String::from_utf8_lossy(pending)
        );
        pending.extend_from_slice(&buf[..n]);
    }
}

/// The first whole answer in `data`, removed from it.
fn take_answer(data: &mut Vec<u8>) -> Option<(String, String)> {
    let text = String::from_utf8_lossy(data).to_string();
    let (head, rest) = text.split_once("\r\n\r\n")?;
    let lower = head.to_ascii_lowercase();
    let head_len = head.len() + 4;
    if lower.contains("transfer-encoding: chunked") {
        let mut body = String::new();
        let mut at = 0;
        loop {
            let line_end = rest[at..].find("\r\n")? + at;
            let size = usize::from_str_radix(&rest[at..line_end], 16).unwrap();
            let start = line_end + 2;
            if rest.len() < start + size + 2 {
                return None;
            }
            if size == 0 {
                data.drain(..head_len + start + 2);
                return Some((head.to_owned(), body));
            }
            body.push_str(&rest[start..start + size]);
            at = start + size + 2;
        }
    }
    let length = lower
        .lines()
        .find_map(|l| {
            l.strip_prefix("content-length: ")
                .map(|v| v.trim().parse().unwrap())
        })
        .unwrap_or(0usize);
    if rest.len() < length {
        return None;
    }
    let body = rest[..length].to_owned();
    data.drain(..head_len + length);
    Some((head.to_owned(), body))
}

/// Everything the server sends until it closes the connection (within 10 s).
async fn read_until_closed(stream: &mut TcpStream) -> Vec<u8> {
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut out))
        .await
        .expect("not closed")
        .unwrap();
    out
}

async fn closed(stream: &mut TcpStream) -> bool {
    let mut buf = [0u8; 64];
    matches!(
        tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buf)).await,
        Ok(Ok(0) | Err(_))
    )
}

#[tokio::test]
async fn keep_alive_requests_are_answered_in_turn_with_their_framing_and_a_date() {
    let addr = serve(limits(), router()).await;
    let mut stream = TcpStream::connect(&addr).await.unwrap();
    let mut pending = Vec::new();
    for _ in 0..3 {
        stream
            .write_all(b"GET /hello HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .unwrap();
        let (head, body) = read_answer(&mut stream, &mut pending).await;
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
        let lower = head.to_ascii_lowercase();
        assert!(lower.contains("content-length: 5"), "{head}");
        assert!(lower.contains("\r\ndate: "), "{head}");
        assert!(lower.contains("keep-alive: timeout="), "{head}");
        assert_eq!(body, "hello");
    }
    // A bodiless status has neither a length nor a body, and the connection goes on.
    stream
        .write_all(b"GET /empty HTTP/1.1\r\nhost: x\r\n\r\nGET /hello HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let (head, body) = read_answer(&mut stream, &mut pending).await;
    assert!(head.starts_with("HTTP/1.1 204 No Content"), "{head}");
    assert!(
        !head.to_ascii_lowercase().contains("content-length"),
        "{head}"
    );
    assert_eq!(body, "");
    let (_, body) = read_answer(&mut stream, &mut pending).await;
    assert_eq!(body, "hello");
}

#[tokio::test]
async fn pipelined_requests_are_answered_in_order() {
    let addr = serve(limits(), router()).await;
    let mut stream = TcpStream::connect(&addr).await.unwrap();
    stream
        .write_all(
            b"POST /echo HTTP/1.1\r\nhost: x\r\ncontent-length: 3\r\n\r\nabcGET /hello HTTP/1.1\r\nhost: x\r\n\r\nPOST /echo HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\nyz",
        )
        .await
        .unwrap();
    let mut pending = Vec::new();
    assert_eq!(read_answer(&mut stream, &mut pending).await.1, "3 c");
    assert_eq!(read_answer(&mut stream, &mut pending).await.1, "hello");
    assert_eq!(read_answer(&mut stream, &mut pending).await.1, "2 z");
}

#[tokio::test]
async fn a_body_arriving_in_pieces_reaches_the_service_whole() {
    let addr = serve(limits(), router()).await;
    let mut stream = TcpStream::connect(&addr).await.unwrap();
    let body = vec![b'q'; 40 * 1024];
    stream
        .write_all(
            format!(
                "POST /echo HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\n\r\n",
                body.len() + 1
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    for piece in body.chunks(10 * 1024) {
        tokio::time::sleep(Duration::from_millis(20)).await;
        stream.write_all(piece).await.unwrap();
    }
    stream.write_all(b"!").await.unwrap();
    let mut pending = Vec::new();
    let (head, answer) = read_answer(&mut stream, &mut pending).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert_eq!(answer, format!("{} !", body.len() + 1));
}

#[tokio::test]
async fn a_streamed_answer_is_chunked_frame_by_frame() {
    let addr = serve(limits(), router()).await;
    let mut stream = TcpStream::connect(&addr).await.unwrap();
    stream
        .write_all(b"GET /stream HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let mut pending = Vec::new();
    let (head, body) = read_answer(&mut stream, &mut pending).await;
    assert!(
        head.to_ascii_lowercase()
            .contains("transfer-encoding: chunked"),
        "{head}"
    );
    assert!(
        !head.to_ascii_lowercase().contains("content-length"),
        "{head}"
    );
    assert_eq!(body, "onetwothree");
    // The connection is reusable after the last chunk.
    stream
        .write_all(b"GET /hello HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(read_answer(&mut stream, &mut pending).await.1, "hello");
}

#[tokio::test]
async fn a_client_asking_to_close_gets_connection_close_and_the_close() {
    let addr = serve(limits(), router()).await;
    let mut stream = TcpStream::connect(&addr).await.unwrap();
    stream
        .write_all(b"GET /hello HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut pending = Vec::new();
    let (head, body) = read_answer(&mut stream, &mut pending).await;
    assert!(
        head.to_ascii_lowercase().contains("connection: close"),
        "{head}"
    );
    assert_eq!(body, "hello");
    assert!(closed(&mut stream).await);
}

#[tokio::test]
async fn a_client_that_leaves_mid_request_cancels_it() {
    let (started_tx, started) = oneshot::channel::<()>();
    let (dropped_tx, dropped) = oneshot::channel::<()>();
    let slot = std::sync::Mutex::new(Some((started_tx, dropped_tx)));
    let slot = std::sync::Arc::new(slot);
    let router = Router::new().route(
        "/hold",
        get(move || {
            let (started, dropped) = slot.lock().unwrap().take().unwrap();
            async move {
                struct OnDrop(Option<oneshot::Sender<()>>);
                impl Drop for OnDrop {
                    fn drop(&mut self) {
                        let _ = self.0.take().unwrap().send(());
                    }
                }
                let _guard = OnDrop(Some(dropped));
                let _ = started.send(());
                std::future::pending::<()>().await;
                "never"
            }
        }),
    );
    let addr = serve(limits(), router).await;
    let mut stream = TcpStream::connect(&addr).await.unwrap();
    stream
        .write_all(b"GET /hold HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    started.await.unwrap();
    drop(stream);
    tokio::time::timeout(Duration::from_secs(10), dropped)
        .await
        .expect("the request was not cancelled")
        .unwrap();
}

#[tokio::test]
async fn a_body_late_past_its_deadline_fails_with_the_timeout_and_closes() {
    let limits = Limits {
        body_read_timeout: Duration::from_millis(300),
        ..limits()
    };
    let addr = serve(limits, router()).await;
    let mut stream = TcpStream::connect(&addr).await.unwrap();
    stream
        .write_all(b"POST /echo HTTP/1.1\r\nhost: x\r\ncontent-length: 10\r\n\r\nabc")
        .await
        .unwrap();
    let mut pending = Vec::new();
    let (head, body) = read_answer(&mut stream, &mut pending).await;
    assert!(head.starts_with("HTTP/1.1 408"), "{head}");
    assert!(
        head.to_ascii_lowercase().contains("connection: close"),
        "{head}"
    );
    assert_eq!(body, "timeout");
    assert!(closed(&mut stream).await);
}

#[tokio::test]
async fn a_head_not_finished_within_the_header_deadline_is_closed_unanswered() {
    let limits = Limits {
        header_read_timeout: Duration::from_millis(300),
        ..limits()
    };
    let addr = serve(limits, router()).await;
    let mut stream = TcpStream::connect(&addr).await.unwrap();
    stream
        .write_all(b"GET /hello HTTP/1.1\r\nho")
        .await
        .unwrap();
    let out = read_until_closed(&mut stream).await;
    assert!(out.is_empty(), "{:?}", String::from_utf8_lossy(&out));
}

#[tokio::test]
async fn requests_the_plain_path_does_not_serve_are_hyper_s_on_the_same_connection() {
    let addr = serve(limits(), router()).await;
    let mut stream = TcpStream::connect(&addr).await.unwrap();
    let mut pending = Vec::new();
    // A plain one first, then a chunked body: the connection changes hands mid-way.
    stream
        .write_all(b"GET /hello HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(read_answer(&mut stream, &mut pending).await.1, "hello");
    stream
        .write_all(b"POST /echo HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(read_answer(&mut stream, &mut pending).await.1, "5 e");
    // `expect: 100-continue` gets its interim answer before the body is sent.
    stream
        .write_all(
            b"POST /echo HTTP/1.1\r\nhost: x\r\nexpect: 100-continue\r\ncontent-length: 4\r\n\r\n",
        )
        .await
        .unwrap();
    let (head, _) = read_answer(&mut stream, &mut pending).await;
    assert!(head.starts_with("HTTP/1.1 100 Continue"), "{head}");
    stream.write_all(b"wxyz").await.unwrap();
    assert_eq!(read_answer(&mut stream, &mut pending).await.1, "4 z");
    // And plain requests go on being answered on it.
    stream
        .write_all(b"GET /hello HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(read_answer(&mut stream, &mut pending).await.1, "hello");

    // An HTTP/1.0 client is answered in HTTP/1.0, and closed (it did not ask to keep alive).
    let mut old = TcpStream::connect(&addr).await.unwrap();
    old.write_all(b"GET /hello HTTP/1.0\r\n\r\n").await.unwrap();
    let out = read_until_closed(&mut old).await;
    let out = String::from_utf8(out).unwrap();
    assert!(out.starts_with("HTTP/1.0 200 OK\r\n"), "{out}");
    assert!(out.ends_with("\r\n\r\nhello"), "{out}");
}

#[tokio::test]
async fn a_malformed_head_gets_the_json_400_and_the_close() {
    let addr = serve(limits(), router()).await;
    let mut stream = TcpStream::connect(&addr).await.unwrap();
    stream
        .write_all(b"GET /hello HTTP/1.1\r\nbad header\r\n\r\n")
        .await
        .unwrap();
    let out = read_until_closed(&mut stream).await;
    let out = String::from_utf8(out).unwrap();
    assert!(out.starts_with("HTTP/1.1 400 "), "{out}");
    assert!(out.contains("\"code\":\"bad_request\""), "{out}");
}

#[tokio::test]
async fn a_streamed_answer_s_first_frame_reaches_the_client_before_its_end() {
    let (tx, rx) = mpsc::channel::<Bytes>(1);
    let rx = std::sync::Arc::new(std::sync::Mutex::new(Some(rx)));
    let router = Router::new().route(
        "/live",
        get(move || {
            let rx = rx.lock().unwrap().take().unwrap();
            async move {
                struct Live(mpsc::Receiver<Bytes>);
                impl http_body::Body for Live {
                    type Data = Bytes;
                    type Error = Infallible;
                    fn poll_frame(
                        mut self: Pin<&mut Self>,
                        cx: &mut Context<'_>,
                    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
                        self.0.poll_recv(cx).map(|b| b.map(|b| Ok(Frame::data(b))))
                    }
                }
                Body::new(Live(rx))
            }
        }),
    );
    let addr = serve(limits(), router).await;
    let mut stream = TcpStream::connect(&addr).await.unwrap();
    stream
        .write_all(b"GET /live HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    tx.send(Bytes::from_static(b"first")).await.unwrap();
    // The head and the first frame arrive while the body is still open.
    let mut seen = Vec::new();
    while !String::from_utf8_lossy(&seen).contains("5\r\nfirst\r\n") {
        let mut buf = [0u8; 1024];
        let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buf))
            .await
            .expect("the first frame was held back")
            .unwrap();
        assert!(n > 0);
        seen.extend_from_slice(&buf[..n]);
    }
    tx.send(Bytes::from_static(b"second")).await.unwrap();
    drop(tx);
    let (_, body) = read_answer(&mut stream, &mut seen).await;
    assert_eq!(body, "firstsecond");
}

#[tokio::test]
async fn a_request_in_progress_at_shutdown_is_answered_with_the_close() {
    let (started_tx, started) = oneshot::channel::<()>();
    let release = std::sync::Arc::new(tokio::sync::Notify::new());
    let held = std::sync::Arc::clone(&release);
    let started_tx = std::sync::Arc::new(std::sync::Mutex::new(Some(started_tx)));
    let router = Router::new().route(
        "/hold",
        get(move || {
            let started = started_tx.lock().unwrap().take();
            let release = std::sync::Arc::clone(&held);
            async move {
                if let Some(started) = started {
                    let _ = started.send(());
                }
                release.notified().await;
                "done"
            }
        }),
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    tokio::spawn(Server::new(limits()).serve(listener, router, stop.clone()));
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(b"GET /hold HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    started.await.unwrap();
    stop.cancel();
    tokio::time::sleep(Duration::from_millis(50)).await;
    release.notify_one();
    let mut pending = Vec::new();
    let (head, body) = read_answer(&mut stream, &mut pending).await;
    assert_eq!(body, "done");
    assert!(
        head.to_ascii_lowercase().contains("connection: close"),
        "{head}"
    );
    assert!(closed(&mut stream).await);
}

#[tokio::test]
async fn an_answer_longer_than_its_declared_length_is_cut_and_the_connection_closed() {
    let router = Router::new().route(
        "/liar",
        get(|| async {
            let mut response = axum::response::Response::new(Body::from("hello"));
            response
                .headers_mut()
                .insert("content-length", axum::http::HeaderValue::from_static("3"));
            response
        }),
    );
    let addr = serve(limits(), router).await;
    let mut stream = TcpStream::connect(&addr).await.unwrap();
    stream
        .write_all(b"GET /liar HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let out = read_until_closed(&mut stream).await;
    // Never more bytes than the head declared: nothing that could be read as a next answer.
    let text = String::from_utf8_lossy(&out);
    assert!(!text.contains("hello"), "{text}");
}
