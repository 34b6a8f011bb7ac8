//! The hostile-framing corpus: request heads whose body framing, host or target two HTTP parsers
//! could read two ways (how requests are smuggled past a proxy), and chunk sizes no body could
//! have. Each is refused as nginx refuses it — an answer (400, or 413 for a declared length over
//! any body limit) and the close, nothing after it read as a request — on a fresh connection
//! (the server's own reader) and on one hyper already serves (after a chunked request), with
//! the headers in both orders wherever order could matter.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use axum::body::Body;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::Router;
use switchyard_server::{BodyTimeout, Limits, Server};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

async fn echo(body: Body) -> impl IntoResponse {
    match axum::body::to_bytes(body, usize::MAX).await {
        Ok(bytes) => (StatusCode::OK, format!("echo {}", bytes.len())),
        Err(e) if BodyTimeout::is(&e) => (StatusCode::REQUEST_TIMEOUT, "timeout".to_owned()),
        Err(e) => (StatusCode::BAD_REQUEST, format!("body: {e}")),
    }
}

async fn serve() -> String {
    let router = Router::new()
        .route("/echo", post(echo))
        .route("/smuggled", get(|| async { "SMUGGLED" }));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let limits = Limits {
        max_connections: 64,
        // Far longer than a case may take: an answer only at the deadline is a failure.
        body_read_timeout: Duration::from_secs(30),
        ..Limits::default()
    };
    let stop = tokio_util::sync::CancellationToken::new();
    tokio::spawn(Server::new(limits).serve(listener, router, stop));
    addr
}

/// A request after which the connection is hyper's (a chunked body), answered `echo 3`.
const HANDOVER: &[u8] =
    b"POST /echo HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n";

/// A request smuggled behind each case: it must never be answered.
const SMUGGLED: &str = "GET /smuggled HTTP/1.1\r\nhost: x\r\n\r\n";

/// The heads refused with 400: (what, the head's lines after the request line).
const BAD_REQUESTS: &[(&str, &str)] = &[
    (
        "content-length then transfer-encoding",
        "host: x\r\ncontent-length: 5\r\ntransfer-encoding: chunked\r\n",
    ),
    (
        "transfer-encoding then content-length",
        "host: x\r\ntransfer-encoding: chunked\r\ncontent-length: 5\r\n",
    ),
    (
        "content-length 0 then transfer-encoding",
        "host: x\r\ncontent-length: 0\r\ntransfer-encoding: chunked\r\n",
    ),
    (
        "transfer-encoding then content-length 0",
        "host: x\r\ntransfer-encoding: chunked\r\ncontent-length: 0\r\n",
    ),
    (
        "identity, chunked",
        "host: x\r\ntransfer-encoding: identity, chunked\r\n",
    ),
    (
        "gzip, chunked",
        "host: x\r\ntransfer-encoding: gzip, chunked\r\n",
    ),
    (
        "chunked, chunked",
        "host: x\r\ntransfer-encoding: chunked, chunked\r\n",
    ),
    (
        "two transfer-encodings, chunked first",
        "host: x\r\ntransfer-encoding: chunked\r\ntransfer-encoding: identity\r\n",
    ),
    (
        "two transfer-encodings, chunked last",
        "host: x\r\ntransfer-encoding: identity\r\ntransfer-encoding: chunked\r\n",
    ),
    (
        "two equal content-lengths",
        "host: x\r\ncontent-length: 5\r\ncontent-length: 5\r\n",
    ),
    (
        "two different content-lengths, the larger first",
        "host: x\r\ncontent-length: 5\r\ncontent-length: 0\r\n",
    ),
    (
        "two different content-lengths, the smaller first",
        "host: x\r\ncontent-length: 0\r\ncontent-length: 5\r\n",
    ),
    (
        "content-length and a transfer-encoding other than chunked",
        "host: x\r\ncontent-length: 5\r\ntransfer-encoding: identity\r\n",
    ),
    (
        "a transfer-encoding other than chunked and content-length",
        "host: x\r\ntransfer-encoding: identity\r\ncontent-length: 5\r\n",
    ),
    ("content-length list", "host: x\r\ncontent-length: 5, 5\r\n"),
    ("content-length sign", "host: x\r\ncontent-length: +5\r\n"),
    ("content-length hex", "host: x\r\ncontent-length: 0x5\r\n"),
    ("no host", "content-length: 5\r\n"),
    (
        "two equal hosts",
        "host: x\r\nhost: x\r\ncontent-length: 5\r\n",
    ),
    (
        "two hosts, the other first",
        "host: evil\r\nhost: x\r\ncontent-length: 5\r\n",
    ),
];

/// Sends `prelude` (answered first when not empty), then `case`, then the smuggled request;
/// returns everything answered after the prelude's answer, until the server closed (or 5 s).
async fn exchange(addr: &str, prelude: &[u8], case: &[u8]) -> String {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let mut out = Vec::new();
    if !prelude.is_empty() {
        stream.write_all(prelude).await.unwrap();
        let mut buf = [0u8; 4096];
        while !String::from_utf8_lossy(&out).contains("echo 3") {
            let n = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf))
                .await
                .expect("the prelude was not answered")
                .unwrap();
            assert!(n > 0, "closed after the prelude");
            out.extend_from_slice(&buf[..n]);
        }
        out.clear();
    }
    let mut sent = case.to_vec();
    sent.extend_from_slice(SMUGGLED.as_bytes());
    // A peer may close (and reset) before all of it is written: what matters is the answer.
    let _ = stream.write_all(&sent).await;
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
            Err(_) => {
                out.extend_from_slice(b"\n<still open after 5 s>");
                break;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The status codes of the answers in `text` (a status line may follow a body on its line).
fn statuses(text: &str) -> Vec<&str> {
    text.match_indices("HTTP/1.")
        .filter_map(|(i, _)| text.get(i + 9..i + 13))
        .filter(|s| s.ends_with(' ') && s[..3].bytes().all(|b| b.is_ascii_digit()))
        .map(|s| &s[..3])
        .collect()
}

/// What is wrong with `answer` for a case expected to get `status` and the close.
fn judge(answer: &str, status: u16, refused_by_edge: bool) -> Option<String> {
    let first = answer.lines().next().unwrap_or("");
    if !first.starts_with(&format!("HTTP/1.1 {status} ")) {
        return Some(format!("answered {first:?}"));
    }
    if answer.contains("SMUGGLED") || statuses(answer).len() != 1 {
        return Some("more than one answer".to_owned());
    }
    if answer.contains("<still open") {
        return Some("the connection stayed open".to_owned());
    }
    let lower = answer.to_ascii_lowercase();
    if !lower.contains("connection: close") {
        return Some("no connection: close".to_owned());
    }
    let code = if status == 413 {
        "\"code\":\"request_too_large\""
    } else {
        "\"code\":\"bad_request\""
    };
    if refused_by_edge && !answer.contains(code) {
        return Some(format!("no JSON {code}"));
    }
    None
}

/// Every case, fresh and after the handover: `(what, bytes, status, refused by the edge)`.
fn corpus() -> Vec<(String, Vec<u8>, u16, bool)> {
    let mut cases = Vec::new();
    for (what, lines) in BAD_REQUESTS {
        // Five bytes that are also a whole chunked body: either reading of the framing finds a
        // complete request (then the smuggled one), as a lenient server would.
        let head = format!("POST /echo HTTP/1.1\r\n{lines}\r\n0\r\n\r\n");
        cases.push((what.to_string(), head.into_bytes(), 400, true));
    }
    for (what, head) in [
        ("absolute form with userinfo", "GET http://user:pw@x/smuggled HTTP/1.1\r\nhost: x\r\n\r\n"),
        ("absolute form with a user", "GET http://user@x/smuggled HTTP/1.1\r\nhost: x\r\n\r\n"),
        ("HTTP/1.0 with transfer-encoding", "POST /echo HTTP/1.0\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n5\r\n12345\r\n0\r\n\r\n"),
    ] {
        cases.push((what.to_owned(), head.as_bytes().to_vec(), 400, true));
    }
    for (what, length) in [
        ("content-length of u64::MAX", "18446744073709551615"),
        ("content-length past u64", "99999999999999999999999"),
        (
            "content-length one over the largest body limit",
            "1073741825",
        ),
    ] {
        let head =
            format!("POST /echo HTTP/1.1\r\nhost: x\r\ncontent-length: {length}\r\n\r\n12345");
        cases.push((what.to_owned(), head.into_bytes(), 413, true));
    }
    // Chunk sizes no body could have: the body fails at once (the service's 400).
    for (what, size) in [
        ("a 16-digit chunk size", "ffffffffffffffff"),
        ("a 17-digit chunk size", "10000000000000000"),
        ("a chunk one over the largest body limit", "40000001"),
    ] {
        let head = format!(
            "POST /echo HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n{size}\r\nabc"
        );
        cases.push((what.to_owned(), head.into_bytes(), 400, false));
    }
    cases
}

#[tokio::test]
async fn hostile_framing_is_refused_and_closed_fresh_and_on_a_connection_hyper_serves() {
    let addr = serve().await;
    let mut failures = Vec::new();
    let mut count = 0;
    for (what, bytes, status, by_edge) in corpus() {
        for (prelude, when) in [(&b""[..], "fresh"), (HANDOVER, "after a chunked request")] {
            count += 1;
            let answer = exchange(&addr, prelude, &bytes).await;
            if let Some(problem) = judge(&answer, status, by_edge) {
                failures.push(format!("{what} ({when}): {problem}\n    {answer:?}"));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {count} cases failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Both framings in one head, on the wire: the three framing lines in each of their six orders,
/// the names in lower, Title, UPPER and mixed case and the coding in several cases, the length
/// once or twice. Every one is refused (400) and closed, fresh and on a connection hyper serves
/// — a server that let the length win in one order would answer the five bytes as a body and
/// then the smuggled request.
#[tokio::test]
async fn both_framings_are_refused_in_every_order_and_case_on_the_wire() {
    let addr = serve().await;
    let styles: [(&str, &str, &str); 4] = [
        ("transfer-encoding", "content-length", "chunked"),
        ("Transfer-Encoding", "Content-Length", "Chunked"),
        ("TRANSFER-ENCODING", "CONTENT-LENGTH", "CHUNKED"),
        ("tRaNsFeR-eNcOdInG", "cOnTeNt-LeNgTh", "cHuNkEd"),
    ];
    let mut failures = Vec::new();
    let mut count = 0;
    for (te, cl, coding) in styles {
        for twice in [false, true] {
            let mut lines = vec![
                "host: x".to_owned(),
                format!("{te}: {coding}"),
                format!("{cl}: 5"),
            ];
            if twice {
                lines.push(format!("{cl}: 5"));
            }
            let orders: Vec<Vec<String>> = if twice {
                // Transfer-Encoding first, between the two lengths, and last.
                (0..3)
                    .map(|at| {
                        let mut order = vec![lines[0].clone(), lines[2].clone(), lines[3].clone()];
                        order.insert(at + 1, lines[1].clone());
                        order
                    })
                    .collect()
            } else {
                [
                    [0, 1, 2],
                    [0, 2, 1],
                    [1, 0, 2],
                    [1, 2, 0],
                    [2, 0, 1],
                    [2, 1, 0],
                ]
                .iter()
                .map(|o| o.iter().map(|&i| lines[i].clone()).collect())
                .collect()
            };
            for order in orders {
                let head = format!(
                    "POST /echo HTTP/1.1\r\n{}\r\n\r\n0\r\n\r\n",
                    order.join("\r\n")
                );
                for (prelude, when) in [(&b""[..], "fresh"), (HANDOVER, "after a chunked request")]
                {
                    count += 1;
                    let answer = exchange(&addr, prelude, head.as_bytes()).await;
                    if let Some(problem) = judge(&answer, 400, true) {
                        failures.push(format!("{head:?} ({when}): {problem}\n    {answer:?}"));
                    }
                }
            }
        }
    }
    assert_eq!(count, 4 * (6 + 3) * 2);
    assert!(
        failures.is_empty(),
        "{} of {count} cases failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[tokio::test]
async fn good_neighbours_of_the_corpus_are_still_served() {
    let addr = serve().await;
    for (what, request, answer) in [
        ("a plain body", "POST /echo HTTP/1.1\r\nhost: x\r\ncontent-length: 5\r\n\r\n12345", "echo 5"),
        ("Chunked in any case", "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: Chunked\r\n\r\n5\r\n12345\r\n0\r\n\r\n", "echo 5"),
        ("a zero-padded chunk size and an extension", "POST /echo HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n0000000000000005;x=y\r\n12345\r\n0\r\ntrailer: 1\r\n\r\n", "echo 5"),
        ("a zero-padded length", "POST /echo HTTP/1.1\r\nhost: x\r\ncontent-length: 0000000000000000000005\r\n\r\n12345", "echo 5"),
        ("HTTP/1.0 without a host", "POST /echo HTTP/1.0\r\ncontent-length: 5\r\n\r\n12345", "echo 5"),
        ("absolute form", "POST http://x/echo HTTP/1.1\r\nhost: x\r\ncontent-length: 5\r\n\r\n12345", "echo 5"),
    ] {
        for prelude in [&b""[..], HANDOVER] {
            let mut stream = TcpStream::connect(&addr).await.unwrap();
            let mut sent = prelude.to_vec();
            sent.extend_from_slice(request.as_bytes());
            sent.extend_from_slice(b"GET /smuggled HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
            stream.write_all(&sent).await.unwrap();
            let mut out = Vec::new();
            let _ = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut out)).await;
            let out = String::from_utf8_lossy(&out);
            assert!(out.contains(answer), "{what}: {out}");
            // HTTP/1.0 closes after its answer; every other is followed by the next request's.
            if !what.starts_with("HTTP/1.0") {
                assert!(out.contains("SMUGGLED"), "{what}: the request after it was not served: {out}");
            }
        }
    }
}

#[tokio::test]
async fn a_pipelined_request_before_a_refused_one_is_answered_first() {
    let addr = serve().await;
    for first in [
        &b"POST /echo HTTP/1.1\r\nhost: x\r\ncontent-length: 3\r\n\r\nabc"[..],
        HANDOVER,
    ] {
        let mut stream = TcpStream::connect(&addr).await.unwrap();
        let mut sent = first.to_vec();
        sent.extend_from_slice(b"POST /echo HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\ncontent-length: 5\r\n\r\n0\r\n\r\n");
        sent.extend_from_slice(SMUGGLED.as_bytes());
        stream.write_all(&sent).await.unwrap();
        let mut out = Vec::new();
        tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut out))
            .await
            .expect("not closed")
            .unwrap();
        let out = String::from_utf8_lossy(&out);
        assert_eq!(statuses(&out), ["200", "400"], "{out}");
        assert!(out.contains("echo 3") && !out.contains("SMUGGLED"), "{out}");
    }
}
