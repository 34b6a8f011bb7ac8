//! The hostile-upstream corpus: upstreams that answer what no request asked for — a switch of
//! protocols, an empty or non-JSON success, a content-encoded answer, a plain JSON answer to a
//! stream request. None of them reaches a client as a success, none costs another client
//! anything (a pooled connection is never reused after an answer it cannot be trusted with), and
//! each fails over like any other bad upstream answer, or ends in a clear 502 in the client's
//! protocol when nothing else serves.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use common::*;
use switchyard_mock_upstream::MockUpstream;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const CHAT_PATH: &str = "/v1/chat/completions";
const MESSAGES: &str =
    r#"{"model":"m","max_tokens":64,"messages":[{"role":"user","content":"hello"}]}"#;
const MESSAGES_STREAM: &str =
    r#"{"model":"m","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"hello"}]}"#;
const EMBEDDINGS: &str = r#"{"model":"m","input":"hello"}"#;

/// An upstream on a raw socket, answering what `script` says: given the connection's number
/// (in accept order, from 0), the request's number on that connection (from 0) and the request
/// as text, the bytes to write (none: the connection is closed). Every request is recorded.
struct Raw {
    addr: SocketAddr,
    requests: Arc<Mutex<Vec<String>>>,
}

impl Raw {
    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn requests(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }
}

type Script = dyn Fn(usize, usize, &str) -> Vec<u8> + Send + Sync;

async fn raw_upstream(
    script: impl Fn(usize, usize, &str) -> Vec<u8> + Send + Sync + 'static,
) -> Raw {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let requests = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&requests);
    let script: Arc<Script> = Arc::new(script);
    tokio::spawn(async move {
        for connection in 0.. {
            let Ok((socket, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(serve(
                socket,
                connection,
                Arc::clone(&script),
                Arc::clone(&seen),
            ));
        }
    });
    Raw { addr, requests }
}

async fn serve(
    mut socket: tokio::net::TcpStream,
    connection: usize,
    script: Arc<Script>,
    seen: Arc<Mutex<Vec<String>>>,
) {
    let mut pending = Vec::new();
    let mut buf = [0u8; 8192];
    for nth in 0.. {
        // One request: its head, then its content-length body.
        let (head_end, length) = loop {
            if let Some(at) = pending.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&pending[..at]).to_ascii_lowercase();
                let length: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .map_or(0, |v| v.trim().parse().unwrap());
                break (at + 4, length);
            }
            match socket.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => pending.extend_from_slice(&buf[..n]),
            }
        };
        while pending.len() < head_end + length {
            match socket.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => pending.extend_from_slice(&buf[..n]),
            }
        }
        let request: Vec<u8> = pending.drain(..head_end + length).collect();
        let request = String::from_utf8_lossy(&request).into_owned();
        let answer = script(connection, nth, &request);
        seen.lock().unwrap().push(request);
        if answer.is_empty() || socket.write_all(&answer).await.is_err() {
            return;
        }
    }
}

/// An HTTP/1.1 answer with a `content-length`.
fn http(status: &str, headers: &[(&str, &str)], body: &[u8]) -> Vec<u8> {
    let mut out = format!("HTTP/1.1 {status}\r\n");
    for (name, value) in headers {
        out.push_str(&format!("{name}: {value}\r\n"));
    }
    out.push_str(&format!("content-length: {}\r\n\r\n", body.len()));
    let mut out = out.into_bytes();
    out.extend_from_slice(body);
    out
}

/// A 200 OpenAI chat completion saying `text`.
fn chat_answer(text: &str) -> Vec<u8> {
    let body = format!(
        r#"{{"id":"chatcmpl-raw","object":"chat.completion","created":1,"model":"up","choices":[{{"index":0,"message":{{"role":"assistant","content":"{text}"}},"finish_reason":"stop"}}],"usage":{{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}}}"#
    );
    http(
        "200 OK",
        &[("content-type", "application/json")],
        body.as_bytes(),
    )
}

/// One channel `a` at `url`; no re-send on it.
fn one_channel(url: &str) -> String {
    format!(
        "settings:\n  channel_retry_times: 0\nchannels:\n{}routes:\n  - model_pattern: m\n    members:\n      - {{ id: 1, channel: a, upstream_model: up }}\n",
        channel("a", url, &["ka"])
    )
}

/// `a` at `url` first (priority 10), then the mock `b`.
fn with_fallback(url: &str, b: &MockUpstream) -> String {
    format!(
        "settings:\n  channel_retry_times: 0\nchannels:\n{}{}routes:\n  - model_pattern: m\n    members:\n      - {{ id: 1, channel: a, upstream_model: up, priority: 10 }}\n      - {{ id: 2, channel: b, upstream_model: up, priority: 0 }}\n",
        channel("a", url, &["ka"]),
        channel("b", &b.base_url(), &["kb"]),
    )
}

/// The gateway's 502 in the OpenAI shape, with `code`.
fn assert_openai_502(reply: &Reply, code: &str) {
    assert_eq!(reply.status, 502, "{}", reply.body);
    assert_eq!(reply.json()["error"]["code"], code, "{}", reply.body);
    assert_eq!(reply.json()["error"]["type"], "server_error");
}

/// The gateway's 502 in the Anthropic shape.
fn assert_anthropic_502(reply: &Reply) {
    assert_eq!(reply.status, 502, "{}", reply.body);
    assert_eq!(reply.json()["type"], "error", "{}", reply.body);
    assert_eq!(reply.json()["error"]["type"], "api_error", "{}", reply.body);
}

/// Connection 0 answers its first request with a `101` and anything later on it with
/// `LEFTOVER` (what a switched connection carries belongs to no request); every other
/// connection answers `fresh`.
async fn switching_upstream() -> Raw {
    raw_upstream(|connection, nth, _| match (connection, nth) {
        (0, 0) => {
            b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: upgrade\r\n\r\n"
                .to_vec()
        }
        (0, _) => chat_answer("LEFTOVER"),
        _ => chat_answer("fresh"),
    })
    .await
}

#[tokio::test]
async fn a_switch_of_protocols_is_never_an_answer_and_its_connection_is_never_reused() {
    // Alone: a 502 in the client's protocol, and the next client gets a connection of its own.
    for (path, body, anthropic) in [(CHAT_PATH, CHAT, false), ("/v1/messages", MESSAGES, true)] {
        let up = switching_upstream().await;
        let proxy = start(&one_channel(&up.url())).await;
        let first = post(&proxy, path, body).await;
        if anthropic {
            assert_anthropic_502(&first);
        } else {
            assert_openai_502(&first, "upstream_unreachable");
        }
        let second = post(&proxy, path, body).await;
        assert_eq!(second.status, 200, "{}", second.body);
        assert!(second.body.contains("fresh"), "{}", second.body);
        assert!(!second.body.contains("LEFTOVER"), "{}", second.body);
    }
    // With another member: the request fails over; the switched connection is still not reused.
    let up = switching_upstream().await;
    let b = MockUpstream::start().await.unwrap();
    let proxy = start(&with_fallback(&up.url(), &b)).await;
    let first = post(&proxy, CHAT_PATH, CHAT).await;
    assert_eq!(
        (first.status, first.header("x-switchyard-channel")),
        (200, "b"),
        "{}",
        first.body
    );
    assert_eq!(first.attempts(), 2);
    let second = post(&proxy, CHAT_PATH, CHAT).await;
    assert_eq!(
        second.header("x-switchyard-channel"),
        "a",
        "{}",
        second.body
    );
    assert_eq!(
        second.json()["choices"][0]["message"]["content"],
        "fresh",
        "{}",
        second.body
    );
}

/// 2xx answers a JSON endpoint cannot give: no body, or a body that is not JSON.
fn bodiless_or_not_json() -> Vec<Vec<u8>> {
    vec![
        b"HTTP/1.1 204 No Content\r\n\r\n".to_vec(),
        http("200 OK", &[], b""),
        http("200 OK", &[("content-type", "text/plain")], b""),
        http(
            "200 OK",
            &[("content-type", "text/html")],
            b"<html>maintenance</html>",
        ),
        http("202 Accepted", &[("content-type", "application/json")], b""),
    ]
}

#[tokio::test]
async fn a_2xx_without_a_json_body_to_a_json_endpoint_fails_over_else_is_a_502() {
    for answer in bodiless_or_not_json() {
        let shown = String::from_utf8_lossy(&answer).into_owned();
        for (path, body) in [(CHAT_PATH, CHAT), ("/v1/embeddings", EMBEDDINGS)] {
            let fixed = answer.clone();
            let up = raw_upstream(move |_, _, _| fixed.clone()).await;
            let proxy = start(&one_channel(&up.url())).await;
            let reply = post(&proxy, path, body).await;
            assert_openai_502(&reply, "upstream_invalid_answer");
            assert!(reply.json()["error"]["message"]
                .as_str()
                .unwrap()
                .contains("not valid"));

            let b = MockUpstream::start().await.unwrap();
            let proxy = start(&with_fallback(&up.url(), &b)).await;
            let reply = post(&proxy, path, body).await;
            assert_eq!(
                (reply.status, reply.header("x-switchyard-channel")),
                (200, "b"),
                "{shown} on {path}: {}",
                reply.body
            );
        }
        // An Anthropic client hears it in its own shape.
        let fixed = answer.clone();
        let up = raw_upstream(move |_, _, _| fixed.clone()).await;
        let proxy = start(&one_channel(&up.url())).await;
        assert_anthropic_502(&post(&proxy, "/v1/messages", MESSAGES).await);
    }
}

/// `{"choices":[{"message":{"content":"zipped"}}]}`, gzip-compressed.
const GZIPPED_CHAT: &[u8] = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\x03\x2d\x8c\x41\x0a\xc3\x30\x0c\x04\xff\xb2\x67\xb7\xf4\xec\xaf\x94\x52\x5c\x59\x8d\x55\x12\xcb\x44\x3a\x94\x18\xff\xbd\x0e\xf4\xb4\x30\xcb\x4c\x87\x64\x44\x50\x49\x4e\x5b\x5b\x2f\x07\x02\xf4\xf5\x61\xf2\x3f\xbd\x92\x4e\xce\x2e\x5a\xe7\x45\x45\x85\xd8\x10\xef\x1d\x52\x33\x7f\x11\x6f\x01\x1b\x9b\xa5\x85\x11\x3b\x76\x5d\xe7\x22\x99\x89\x79\xaa\x7e\x3a\x5a\x9d\xeb\xd9\x3b\xa4\x35\xce\x18\x01\x6f\xa9\x62\xe5\xb9\x73\xb2\xd9\x8d\x30\xd7\x86\xf1\x18\x3f\x8d\x16\x97\xf1\x8f\x00\x00\x00";

#[tokio::test]
async fn a_content_encoded_answer_is_never_passed_as_success_and_identity_is_asked() {
    let plain =
        r#"{"choices":[{"index":0,"message":{"role":"assistant","content":"not zipped"}}]}"#;
    let sse =
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"}}]}\n\ndata: [DONE]\n\n";
    let json = ("content-type", "application/json");
    let cases: Vec<(Vec<u8>, &str)> = vec![
        // Labelled gzip, not gzip at all: the bytes a client's decoder would choke on.
        (
            http(
                "200 OK",
                &[json, ("content-encoding", "gzip")],
                plain.as_bytes(),
            ),
            CHAT,
        ),
        // Gzip indeed, though `identity` was asked.
        (
            http(
                "200 OK",
                &[json, ("content-encoding", "gzip")],
                GZIPPED_CHAT,
            ),
            CHAT,
        ),
        (
            http(
                "200 OK",
                &[json, ("content-encoding", "br")],
                b"\x0b\x02\x80",
            ),
            CHAT,
        ),
        (
            http(
                "200 OK",
                &[
                    ("content-type", "text/event-stream"),
                    ("content-encoding", "gzip"),
                ],
                sse.as_bytes(),
            ),
            CHAT_STREAM,
        ),
    ];
    for (answer, body) in cases {
        let shown = String::from_utf8_lossy(&answer).into_owned();
        let fixed = answer.clone();
        let up = raw_upstream(move |_, _, _| fixed.clone()).await;
        let proxy = start(&one_channel(&up.url())).await;
        let reply = post(&proxy, CHAT_PATH, body).await;
        assert_openai_502(&reply, "upstream_invalid_answer");
        assert!(reply.body.contains("encoded"), "{shown}: {}", reply.body);
        assert!(reply.header("content-encoding").is_empty(), "{shown}");
        let asked = up.requests();
        assert!(
            asked[0]
                .to_ascii_lowercase()
                .contains("\r\naccept-encoding: identity\r\n"),
            "{}",
            asked[0]
        );

        let b = MockUpstream::start().await.unwrap();
        let proxy = start(&with_fallback(&up.url(), &b)).await;
        let reply = post(&proxy, CHAT_PATH, body).await;
        assert_eq!(
            (reply.status, reply.header("x-switchyard-channel")),
            (200, "b"),
            "{shown}: {}",
            reply.body
        );
    }
    // Whatever encodings the client accepts, the upstream is asked for none.
    let up = raw_upstream(|_, _, _| chat_answer("plain")).await;
    let proxy = start(&one_channel(&up.url())).await;
    let reply = post_with(&proxy, CHAT_PATH, CHAT, &[("accept-encoding", "gzip, br")]).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let asked = up.requests()[0].to_ascii_lowercase();
    assert!(
        asked.contains("\r\naccept-encoding: identity\r\n"),
        "{asked}"
    );
    assert!(!asked.contains("gzip"), "{asked}");
}

#[tokio::test]
async fn a_json_answer_to_a_stream_request_becomes_a_proper_stream() {
    let up = raw_upstream(|_, _, _| chat_answer("Hello whole")).await;
    let proxy = start(&one_channel(&up.url())).await;
    let reply = post(&proxy, CHAT_PATH, CHAT_STREAM).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert!(reply
        .header("content-type")
        .starts_with("text/event-stream"));
    assert!(
        reply.body.contains(r#""content":"Hello whole""#),
        "{}",
        reply.body
    );
    assert!(
        reply.body.contains(r#""finish_reason":"stop""#),
        "{}",
        reply.body
    );
    assert!(reply.body.ends_with("data: [DONE]\n\n"), "{}", reply.body);
    // An Anthropic client gets its whole event sequence.
    let reply = post(&proxy, "/v1/messages", MESSAGES_STREAM).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert!(reply
        .header("content-type")
        .starts_with("text/event-stream"));
    assert!(
        reply.body.starts_with("event: message_start\n"),
        "{}",
        reply.body
    );
    assert!(reply.body.contains("Hello whole"), "{}", reply.body);
    assert!(
        reply
            .body
            .ends_with("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"),
        "{}",
        reply.body
    );
}

#[tokio::test]
async fn an_error_json_with_a_2xx_to_a_stream_request_fails_over_else_is_a_502() {
    let error = http(
        "200 OK",
        &[("content-type", "application/json")],
        br#"{"error":{"message":"overloaded","type":"server_error"}}"#,
    );
    let fixed = error.clone();
    let up = raw_upstream(move |_, _, _| fixed.clone()).await;
    let proxy = start(&one_channel(&up.url())).await;
    let reply = post(&proxy, CHAT_PATH, CHAT_STREAM).await;
    assert_openai_502(&reply, "upstream_invalid_answer");
    assert_anthropic_502(&post(&proxy, "/v1/messages", MESSAGES_STREAM).await);

    let b = MockUpstream::start().await.unwrap();
    let proxy = start(&with_fallback(&up.url(), &b)).await;
    let reply = post(&proxy, CHAT_PATH, CHAT_STREAM).await;
    assert_eq!(
        (reply.status, reply.header("x-switchyard-channel")),
        (200, "b"),
        "{}",
        reply.body
    );
    assert!(reply.body.ends_with("data: [DONE]\n\n"), "{}", reply.body);
}

/// One Gemini channel `a` at `url`.
fn one_gemini_channel(url: &str) -> String {
    format!(
        "settings:\n  channel_retry_times: 0\nchannels:\n  - name: a\n    provider: gemini\n    base_url: {url}\n    credentials: [\"ka\"]\nroutes:\n  - model_pattern: m\n    members:\n      - {{ id: 1, channel: a, upstream_model: up }}\n"
    )
}

#[tokio::test]
async fn a_gemini_json_array_stream_passes_through_and_a_json_answer_to_sse_becomes_events() {
    const GEMINI: &str = r#"{"contents":[{"role":"user","parts":[{"text":"hello"}]}]}"#;
    const ARRAY: &str = r#"[{"candidates":[{"content":{"role":"model","parts":[{"text":"Hi from the array"}]},"finishReason":"STOP","index":0}]}]"#;
    const OBJECT: &str = r#"{"candidates":[{"content":{"role":"model","parts":[{"text":"Hi whole"}]},"finishReason":"STOP","index":0}],"usageMetadata":{"promptTokenCount":2,"candidatesTokenCount":2,"totalTokenCount":4}}"#;
    let up = raw_upstream(|_, _, request| {
        let json = ("content-type", "application/json");
        if request.contains("alt=sse") {
            http("200 OK", &[json], OBJECT.as_bytes())
        } else {
            http("200 OK", &[json], ARRAY.as_bytes())
        }
    })
    .await;
    let proxy = start(&one_gemini_channel(&up.url())).await;
    // Without `alt=sse` a Gemini client asked for the JSON array: it gets it as it came.
    let path = "/v1beta/models/m:streamGenerateContent";
    let reply = post(&proxy, path, GEMINI).await;
    assert_eq!((reply.status, reply.body.as_str()), (200, ARRAY));
    // With it, the whole answer becomes its event stream.
    let reply = post(&proxy, &format!("{path}?alt=sse"), GEMINI).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert!(reply
        .header("content-type")
        .starts_with("text/event-stream"));
    let events: Vec<serde_json::Value> = reply
        .body
        .split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let last = events.last().unwrap();
    assert_eq!(
        last["candidates"][0]["finishReason"], "STOP",
        "{}",
        reply.body
    );
    assert!(reply.body.contains("Hi whole"), "{}", reply.body);
}

#[tokio::test]
async fn interim_answers_are_read_past_and_a_switch_fails_a_stream_over() {
    // 100, 102 and 103 before the answer: the answer is what the client gets.
    let up = raw_upstream(|_, _, _| {
        let mut answer = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 102 Processing\r\n\r\nHTTP/1.1 103 Early Hints\r\nlink: </x>; rel=preload\r\n\r\n".to_vec();
        answer.extend(chat_answer("after hints"));
        answer
    })
    .await;
    let proxy = start(&one_channel(&up.url())).await;
    let reply = post(&proxy, CHAT_PATH, CHAT).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(
        reply.json()["choices"][0]["message"]["content"],
        "after hints"
    );
    assert!(reply.header("link").is_empty());
    // A 101 to a stream request: the stream fails over before its first byte.
    let up = switching_upstream().await;
    let b = MockUpstream::start().await.unwrap();
    let proxy = start(&with_fallback(&up.url(), &b)).await;
    let reply = post(&proxy, CHAT_PATH, CHAT_STREAM).await;
    assert_eq!(
        (reply.status, reply.header("x-switchyard-channel")),
        (200, "b"),
        "{}",
        reply.body
    );
    assert!(reply.body.ends_with("data: [DONE]\n\n"), "{}", reply.body);
    assert!(!reply.body.contains("LEFTOVER"));
}

#[tokio::test]
async fn a_json_answer_to_a_streamed_responses_or_completions_request_is_converted_or_invalid() {
    let up = raw_upstream(|_, _, _| chat_answer("Hello responses")).await;
    // A Responses request a chat member serves: the Responses event sequence.
    let yaml = one_channel(&up.url()).replace(
        "    credentials: [\"ka\"]\n",
        "    credentials: [\"ka\"]\n    responses_api: false\n",
    );
    let proxy = start(&yaml).await;
    let body = r#"{"model":"m","input":"hello","stream":true}"#;
    let reply = post(&proxy, "/v1/responses", body).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert!(
        reply.body.starts_with("event: response.created\n"),
        "{}",
        reply.body
    );
    assert!(reply.body.contains("Hello responses"), "{}", reply.body);
    assert!(
        reply.body.contains("event: response.completed\n"),
        "{}",
        reply.body
    );
    // A legacy completions stream cannot be made of a chat answer: invalid.
    let proxy = start(&one_channel(&up.url())).await;
    let body = r#"{"model":"m","prompt":"hello","stream":true}"#;
    let reply = post(&proxy, "/v1/completions", body).await;
    assert_openai_502(&reply, "upstream_invalid_answer");
}
