//! The HTTP edge and streaming: auth, limits, errors, headers, stickiness, pinning, SSE passthrough
//! and stream failures, reload, the in-process mock provider.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::*;
use http::Method;
use switchyard_mock_upstream::{Behavior, Matcher, MockUpstream};

const CHAT_PATH: &str = "/v1/chat/completions";

fn one_channel(url: &str, settings: &str) -> String {
    format!(
        "settings:\n{settings}\nchannels:\n{}routes:\n  - model_pattern: m\n    members:\n      - {{ id: 1, channel: a, upstream_model: up }}\n",
        channel("a", url, &["ka"])
    )
}

fn two_channels(a: &MockUpstream, b: &MockUpstream, settings: &str) -> String {
    format!(
        "settings:\n{settings}\nchannels:\n{}{}routes:\n  - model_pattern: m\n    members:\n      - {{ id: 1, channel: a, priority: 10 }}\n      - {{ id: 2, channel: b, priority: 0 }}\n",
        channel("a", &a.base_url(), &["ka"]),
        channel("b", &b.base_url(), &["kb"]),
    )
}

/// Waits (10 s at most) until the proxy has cooled a member: a broken stream is reported when
/// the relay sees the break, just after the client's last byte.
async fn wait_until_a_member_cools(proxy: &Proxy) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while proxy.dump().cooldowns.is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the member was never cooled"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn auth_is_required_and_errors_have_the_right_shape() {
    let up = MockUpstream::start().await.unwrap();
    let proxy = start(&one_channel(&up.base_url(), "  retry_times: 2")).await;
    let url = format!("{}{CHAT_PATH}", proxy.url);
    let none = send(Method::POST, &url, None, CHAT.into(), &[]).await;
    assert_eq!(none.status, 401);
    assert_eq!(none.json()["error"]["code"], "invalid_api_key");
    let wrong = send(Method::POST, &url, Some("sk-wrong"), CHAT.into(), &[]).await;
    assert_eq!(wrong.status, 401);
    // x-api-key works too.
    let ok = send(
        Method::POST,
        &url,
        None,
        CHAT.into(),
        &[("x-api-key", TOKEN)],
    )
    .await;
    assert_eq!(ok.status, 200);
    // Anthropic endpoints answer in the Anthropic error shape.
    let messages = format!("{}/v1/messages", proxy.url);
    let anthropic = send(Method::POST, &messages, None, CHAT.into(), &[]).await;
    assert_eq!(anthropic.status, 401);
    assert_eq!(anthropic.json()["type"], "error");
    assert_eq!(anthropic.json()["error"]["type"], "authentication_error");
    assert_eq!(up.hits(), 1);
}

#[tokio::test]
async fn bad_requests_are_refused_before_any_upstream_call() {
    let up = MockUpstream::start().await.unwrap();
    let proxy = start(&one_channel(
        &up.base_url(),
        "  max_request_body_bytes: 2048",
    ))
    .await;
    let big = format!(
        r#"{{"model":"m","messages":[{{"role":"user","content":"{}"}}]}}"#,
        "x".repeat(4000)
    );
    let oversize = post(&proxy, CHAT_PATH, &big).await;
    assert_eq!(oversize.status, 413);
    assert_eq!(oversize.json()["error"]["code"], "request_too_large");
    let malformed = post(&proxy, CHAT_PATH, r#"{"model":"m","messages":["#).await;
    assert_eq!(malformed.status, 400);
    assert_eq!(malformed.json()["error"]["type"], "invalid_request_error");
    let missing = post(&proxy, CHAT_PATH, r#"{"messages":[]}"#).await;
    assert_eq!(
        (missing.status, missing.json()["error"]["code"].as_str()),
        (400, Some("missing_model"))
    );
    let unknown = post(&proxy, CHAT_PATH, r#"{"model":"nope"}"#).await;
    assert_eq!(unknown.status, 404);
    assert_eq!(unknown.json()["error"]["code"], "model_not_found");
    assert!(!unknown.header("x-switchyard-request-id").is_empty());
    assert_eq!(up.hits(), 0);
}

#[tokio::test]
async fn no_eligible_member_is_a_clear_503() {
    let up = MockUpstream::start().await.unwrap();
    let yaml = one_channel(&up.base_url(), "  retry_times: 2").replace(
        "upstream_model: up }",
        "upstream_model: up, enabled: false }",
    );
    let proxy = start(&yaml).await;
    let reply = post(&proxy, CHAT_PATH, CHAT).await;
    assert_eq!(reply.status, 503);
    assert_eq!(reply.json()["error"]["code"], "no_eligible_member");
}

#[tokio::test]
async fn sse_streams_pass_through_byte_for_byte() {
    let up = MockUpstream::start().await.unwrap();
    up.on(
        Matcher::any(),
        Behavior::ok().stream(5, Duration::from_millis(5)),
    );
    let proxy = start(&one_channel(&up.base_url(), "  retry_times: 2")).await;
    let reply = post(&proxy, CHAT_PATH, CHAT_STREAM).await;
    assert_eq!(reply.status, 200);
    assert!(reply
        .header("content-type")
        .starts_with("text/event-stream"));
    let direct = send(
        Method::POST,
        &format!("{}{CHAT_PATH}", up.base_url()),
        Some("ka"),
        CHAT_STREAM.replace("\"m\"", "\"up\"").into_bytes(),
        &[],
    )
    .await;
    // Same event structure (the mock's ids differ per response).
    let shape = |body: &str| body.matches("data: ").count();
    assert_eq!(shape(&reply.body), shape(&direct.body));
    assert!(reply.body.ends_with("data: [DONE]\n\n"), "{}", reply.body);

    // Byte for byte: an upstream that writes a fixed SSE body in awkward pieces (events split
    // mid-line and mid-UTF-8 character, comments, CRLF and LF line ends, an event without a
    // `data:` field) reaches the client exactly as written.
    let sse: &[u8] = "data: {\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"h\u{e9}llo \u{2603}\"}}]}\n\n\
                      : a comment line\r\n\r\n\
                      event: ping\r\n\r\n\
                      data: {\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n\
                      data: [DONE]\n\n"
        .as_bytes();
    let upstream = raw_sse_upstream(sse, &[7, 1, 40, 3, 90, 2, 17]).await;
    let proxy = start(&one_channel(
        &format!("http://{upstream}"),
        "  retry_times: 0",
    ))
    .await;
    let reply = post(&proxy, CHAT_PATH, CHAT_STREAM).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.body.as_bytes(), sse, "{:?}", reply.body);
}

/// An upstream on a raw socket: answers every request with `body` as a chunked SSE response,
/// cut into chunks of the given sizes (cycled), each written and flushed on its own.
async fn raw_sse_upstream(body: &'static [u8], sizes: &'static [usize]) -> std::net::SocketAddr {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                // Read the request head and its body.
                let mut request = Vec::new();
                let mut buf = [0u8; 4096];
                let head_end = loop {
                    let n = socket.read(&mut buf).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    request.extend_from_slice(&buf[..n]);
                    if let Some(at) = request.windows(4).position(|w| w == b"\r\n\r\n") {
                        break at + 4;
                    }
                };
                let head = String::from_utf8_lossy(&request[..head_end]).to_ascii_lowercase();
                let length: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .map_or(0, |v| v.trim().parse().unwrap());
                while request.len() < head_end + length {
                    let n = socket.read(&mut buf).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    request.extend_from_slice(&buf[..n]);
                }
                let start = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
                              transfer-encoding: chunked\r\nconnection: close\r\n\r\n";
                if socket.write_all(start).await.is_err() {
                    return;
                }
                let mut rest = body;
                for size in sizes.iter().cycle() {
                    if rest.is_empty() {
                        break;
                    }
                    let (piece, tail) = rest.split_at((*size).min(rest.len()));
                    rest = tail;
                    let mut chunk = format!("{:x}\r\n", piece.len()).into_bytes();
                    chunk.extend_from_slice(piece);
                    chunk.extend_from_slice(b"\r\n");
                    if socket.write_all(&chunk).await.is_err() || socket.flush().await.is_err() {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                let _ = socket.write_all(b"0\r\n\r\n").await;
            });
        }
    });
    addr
}

#[tokio::test]
async fn stream_cut_before_first_byte_fails_over_transparently() {
    let (a, b) = (
        MockUpstream::start().await.unwrap(),
        MockUpstream::start().await.unwrap(),
    );
    a.on(Matcher::any(), Behavior::ok().cut_before_first_byte());
    let proxy = start(&two_channels(&a, &b, "  channel_retry_times: 0")).await;
    let reply = post(&proxy, CHAT_PATH, CHAT_STREAM).await;
    assert_eq!(
        (reply.status, reply.header("x-switchyard-channel")),
        (200, "b")
    );
    assert!(reply.body.ends_with("data: [DONE]\n\n"));
    assert!(!reply.body.contains("error"));
    assert_eq!((a.hits(), b.hits()), (1, 1));
}

#[tokio::test]
async fn stream_cut_after_first_byte_ends_with_an_error_event_and_no_retry() {
    let (a, b) = (
        MockUpstream::start().await.unwrap(),
        MockUpstream::start().await.unwrap(),
    );
    a.on(Matcher::any(), Behavior::ok().cut_after_chunks(2));
    let proxy = start(&two_channels(&a, &b, "  channel_retry_times: 1")).await;
    let reply = post(&proxy, CHAT_PATH, CHAT_STREAM).await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.header("x-switchyard-channel"), "a");
    let events: Vec<&str> = reply.body.split("\n\n").filter(|e| !e.is_empty()).collect();
    assert_eq!(
        events.len(),
        3,
        "two relayed events and the error event: {}",
        reply.body
    );
    assert!(events[2].starts_with("data: {\"error\""), "{}", events[2]);
    assert!(!reply.body.contains("[DONE]"));
    assert_eq!((a.hits(), b.hits()), (1, 0), "never a second upstream call");
    wait_until_a_member_cools(&proxy).await;
    assert_eq!(proxy.dump().cooldowns.len(), 1);
}

/// A translated stream whose upstream body ends cleanly but without its protocol's final event
/// (an Anthropic stream with no `message_stop`) was cut, not answered: the OpenAI client gets an
/// error event instead of a finish and `[DONE]`, and the member is cooled.
#[tokio::test]
async fn a_translated_stream_ending_before_its_final_event_ends_with_an_error_event() {
    let up = MockUpstream::start().await.unwrap();
    let cut = concat!(
        "event: message_start\n",
        "data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"up\",\"content\":[],\"stop_reason\":null,\"usage\":{\"input_tokens\":3,\"output_tokens\":0}}}\n\n",
        "event: content_block_start\n",
        "data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
        "event: content_block_delta\n",
        "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n",
    );
    up.on(Matcher::any(), Behavior::ok().body(cut));
    let yaml = one_channel(&up.base_url(), "  channel_retry_times: 1")
        .replace("provider: openai", "provider: anthropic");
    let proxy = start(&yaml).await;
    let reply = post(&proxy, CHAT_PATH, CHAT_STREAM).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert!(reply.body.contains("\"content\":\"Hi\""), "{}", reply.body);
    let last = reply
        .body
        .split("\n\n")
        .filter(|e| !e.is_empty())
        .last()
        .unwrap();
    assert!(last.starts_with("data: {\"error\""), "{}", reply.body);
    assert!(!reply.body.contains("[DONE]"), "{}", reply.body);
    assert!(
        !reply.body.contains("\"finish_reason\":\"stop\""),
        "{}",
        reply.body
    );
    assert_eq!(up.hits(), 1, "never a second upstream call");
    wait_until_a_member_cools(&proxy).await;
}

#[tokio::test]
async fn idle_stream_is_ended_with_an_error_event() {
    let up = MockUpstream::start().await.unwrap();
    up.on(
        Matcher::any(),
        Behavior::ok().stream(3, Duration::from_millis(800)),
    );
    let proxy = start(&one_channel(
        &up.base_url(),
        "  stream_idle_timeout_ms: 200",
    ))
    .await;
    let reply = post(&proxy, CHAT_PATH, CHAT_STREAM).await;
    assert_eq!(reply.status, 200);
    assert!(reply.body.contains("idle timeout"), "{}", reply.body);
}

#[tokio::test]
async fn sticky_sessions_stick_and_pins_do_not_bind() {
    let (a, b) = (
        MockUpstream::start().await.unwrap(),
        MockUpstream::start().await.unwrap(),
    );
    let yaml = format!(
        "settings:\n  sticky_enabled: true\nchannels:\n{}{}routes:\n  - model_pattern: m\n    members:\n      - {{ id: 1, channel: a }}\n      - {{ id: 2, channel: b }}\n",
        channel("a", &a.base_url(), &["ka"]),
        channel("b", &b.base_url(), &["kb"]),
    );
    let proxy = start(&yaml).await;
    let first = post_with(&proxy, CHAT_PATH, CHAT, &[("x-session-id", "s-1")]).await;
    let bound = first.header("x-switchyard-channel").to_owned();
    for _ in 0..10 {
        let again = post_with(&proxy, CHAT_PATH, CHAT, &[("x-session-id", "s-1")]).await;
        assert_eq!(again.header("x-switchyard-channel"), bound);
    }
    // Body fields work too (here the hash of the first user message).
    let c1 = post(&proxy, CHAT_PATH, CHAT)
        .await
        .header("x-switchyard-channel")
        .to_owned();
    for _ in 0..5 {
        assert_eq!(
            post(&proxy, CHAT_PATH, CHAT)
                .await
                .header("x-switchyard-channel"),
            c1
        );
    }
    assert_eq!(proxy.dump().sticky_bindings, 2);
    // A pinned request is served by its pin and binds nothing.
    let pinned = post_with(
        &proxy,
        CHAT_PATH,
        CHAT,
        &[("x-session-id", "s-2"), ("x-switchyard-pin-member", "2")],
    )
    .await;
    assert_eq!(pinned.header("x-switchyard-channel"), "b");
    assert_eq!(proxy.dump().sticky_bindings, 2);
    let metrics = send(
        Method::GET,
        &format!("{}/metrics", proxy.url),
        None,
        vec![],
        &[],
    )
    .await;
    assert!(
        metrics.body.contains("switchyard_sticky_hits_total 15"),
        "{}",
        metrics.body
    );
}

/// A session binds only on a successful (2xx) forward: a request whose every attempt failed, or
/// that was refused upstream, binds nothing; the first 200 binds the member that served it.
#[tokio::test]
async fn sticky_binding_is_made_only_on_a_2xx() {
    let a = MockUpstream::start().await.unwrap();
    a.on(Matcher::any(), Behavior::status(503).times(2));
    a.on(Matcher::any(), Behavior::status(400).times(1));
    let yaml = format!(
        "settings:\n  sticky_enabled: true\n  retry_times: 0\n  channel_retry_times: 1\nchannels:\n{}routes:\n  - model_pattern: m\n    members:\n      - {{ id: 1, channel: a }}\n",
        channel("a", &a.base_url(), &["ka"]),
    );
    let proxy = start(&yaml).await;
    let session = [("x-session-id", "s-only-on-2xx")];
    let failed = post_with(&proxy, CHAT_PATH, CHAT, &session).await;
    assert_eq!(failed.status, 503, "{}", failed.body);
    assert_eq!(a.hits(), 2);
    assert_eq!(proxy.dump().sticky_bindings, 0, "bound on a 503");
    // The member is cooling now; the cooling fallback still sends to it.
    let refused = post_with(&proxy, CHAT_PATH, CHAT, &session).await;
    assert_eq!(refused.status, 400, "{}", refused.body);
    assert_eq!(proxy.dump().sticky_bindings, 0, "bound on a 400");
    let served = post_with(&proxy, CHAT_PATH, CHAT, &session).await;
    assert_eq!(served.status, 200, "{}", served.body);
    assert_eq!(proxy.dump().sticky_bindings, 1);
}

#[tokio::test]
async fn pinning_needs_allow_pinning() {
    let up = MockUpstream::start().await.unwrap();
    let yaml = format!(
        "{}tokens:\n  - name: plain\n    token: {TOKEN}\n",
        one_channel(&up.base_url(), "  retry_times: 2")
    );
    let proxy = start(&yaml).await;
    let reply = post_with(&proxy, CHAT_PATH, CHAT, &[("x-switchyard-pin-member", "1")]).await;
    assert_eq!(reply.status, 403);
    assert_eq!(reply.json()["error"]["code"], "pinning_not_allowed");
}

#[tokio::test]
async fn models_lists_what_the_token_may_call() {
    let up = MockUpstream::start().await.unwrap();
    let proxy = start(&one_channel(&up.base_url(), "  retry_times: 2")).await;
    let reply = send(
        Method::GET,
        &format!("{}/v1/models", proxy.url),
        Some(TOKEN),
        vec![],
        &[],
    )
    .await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.json()["data"][0]["id"], "m");
    let health = send(
        Method::GET,
        &format!("{}/healthz", proxy.url),
        None,
        vec![],
        &[],
    )
    .await;
    let ready = send(
        Method::GET,
        &format!("{}/readyz", proxy.url),
        None,
        vec![],
        &[],
    )
    .await;
    assert_eq!((health.status, ready.status), (200, 200));
}

#[tokio::test]
async fn reload_swaps_the_snapshot_without_a_restart() {
    let up = MockUpstream::start().await.unwrap();
    let yaml = one_channel(&up.base_url(), "  retry_times: 2");
    let proxy = start(&yaml).await;
    assert_eq!(
        post(&proxy, CHAT_PATH, r#"{"model":"m2"}"#).await.status,
        404
    );
    let next = format!(
        "{}  - model_pattern: m2\n    members:\n      - {{ channel: a }}\ntokens:\n  - name: t\n    token: {TOKEN}\n",
        yaml
    );
    proxy.reload(&next, 2);
    for _ in 0..50 {
        if post(&proxy, CHAT_PATH, r#"{"model":"m2"}"#).await.status == 200 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the new route never became visible");
}

#[tokio::test]
async fn mock_provider_simulates_every_endpoint_and_failures() {
    let yaml = "channels:\n  - name: sim\n    provider: mock\n    mock: { stream_chunks: 3 }\n  - name: broken\n    provider: mock\n    mock: { failure_rate: 1.0, failure_status: 503 }\nroutes:\n  - model_pattern: m\n    members:\n      - { channel: broken, priority: 1 }\n      - { channel: sim, priority: 0 }\n";
    let proxy = start(yaml).await;
    let reply = post(&proxy, CHAT_PATH, CHAT).await;
    assert_eq!(
        (reply.status, reply.header("x-switchyard-channel")),
        (200, "sim")
    );
    assert_eq!(reply.json()["object"], "chat.completion");
    let stream = post(&proxy, CHAT_PATH, CHAT_STREAM).await;
    assert!(stream.body.ends_with("data: [DONE]\n\n"));
    assert_eq!(stream.body.matches("data: [DONE]").count(), 1);
    let emb = post(
        &proxy,
        "/v1/embeddings",
        r#"{"model":"m","input":["a","b"]}"#,
    )
    .await;
    assert_eq!(emb.json()["data"].as_array().map(Vec::len), Some(2));
    let msg = post(
        &proxy,
        "/v1/messages",
        r#"{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}"#,
    )
    .await;
    assert_eq!(msg.json()["type"], "message");
    let speech = post_with(
        &proxy,
        "/v1/audio/speech",
        r#"{"model":"m","input":"hi","voice":"x"}"#,
        &[("idempotency-key", "1")],
    )
    .await;
    assert_eq!(
        (speech.status, speech.header("content-type")),
        (200, "audio/mpeg")
    );
}

#[tokio::test]
async fn standalone_recovery_probe_closes_a_tripped_breaker() {
    let up = MockUpstream::start().await.unwrap();
    let yaml = format!(
        "channels:\n{}  - name: manual\n    provider: mock\n    status: enabled\nroutes:\n  - model_pattern: m\n    members:\n      - {{ id: 1, channel: a }}\n      - {{ id: 2, channel: manual }}\n",
        channel("a", &up.base_url(), &["ka"])
    );
    let proxy = start(&yaml).await;
    proxy
        .store
        .trip_breaker(1, "test", switchyard_data_plane::unix_ms());
    proxy.store.extend_cooldown(1, u64::MAX / 2);
    up.on(
        Matcher::path("/v1/chat/completions"),
        Behavior::status(500).times(1),
    );
    // First probe fails (500), the channel stays open; the second passes.
    assert!(switchyard_data_plane::probe::probe_once(&proxy.state)
        .await
        .is_empty());
    assert_eq!(
        switchyard_data_plane::probe::probe_once(&proxy.state).await,
        vec![1]
    );
    let dump = proxy.dump();
    assert!(dump.channels.iter().all(|c| !c.breaker_open));
    assert!(
        dump.cooldowns.is_empty(),
        "the channel's members are cleared"
    );
    assert_eq!(up.hits_matching(&Matcher::path("/v1/chat/completions")), 2);
    // The probe is a one-token generation of the member's upstream model, not a model listing.
    let probe = &up.requests()[0];
    assert_eq!(probe.method, "POST");
    assert_eq!(probe.credential.as_deref(), Some("ka"));
    let body: serde_json::Value = serde_json::from_slice(&probe.body).unwrap();
    assert_eq!(body["model"], "m");
    assert_eq!(body["max_completion_tokens"], 1);
    assert_eq!(body["messages"][0]["role"], "user");
}

#[tokio::test]
async fn standalone_recovery_probe_fails_when_models_list_but_generation_does_not() {
    let up = MockUpstream::start().await.unwrap();
    let yaml = format!(
        "channels:\n{}routes:\n  - model_pattern: m\n    members:\n      - {{ id: 1, channel: a }}\n",
        channel("a", &up.base_url(), &["ka"])
    );
    let proxy = start(&yaml).await;
    proxy
        .store
        .trip_breaker(1, "test", switchyard_data_plane::unix_ms());
    up.on(Matcher::path("/v1/models"), Behavior::ok());
    up.on(Matcher::path("/v1/chat/completions"), Behavior::status(503));
    assert!(switchyard_data_plane::probe::probe_once(&proxy.state)
        .await
        .is_empty());
    assert!(proxy.dump().channels.iter().any(|c| c.breaker_open));
    assert_eq!(up.hits_matching(&Matcher::path("/v1/models")), 0);
    assert_eq!(up.hits_matching(&Matcher::path("/v1/chat/completions")), 1);
}

#[tokio::test]
async fn standalone_recovery_probe_re_enables_a_runtime_disabled_credential() {
    use switchyard_data_plane::probe::{probe_round, Recovered};
    let up = MockUpstream::start().await.unwrap();
    let yaml = format!(
        "channels:\n{}routes:\n  - model_pattern: m\n    members:\n      - {{ id: 1, channel: a }}\n",
        channel("a", &up.base_url(), &["ka", "kb"])
    );
    let proxy = start(&yaml).await;
    let ids: Vec<i64> = proxy
        .state
        .views
        .load_full()
        .unwrap()
        .snapshot
        .channels()
        .flat_map(|c| c.credentials.iter().map(|k| k.id))
        .collect();
    assert_eq!(ids.len(), 2, "{ids:?}");
    let ka = ids[0];
    // A keyword rule disabled `ka` only (multi-key channel); its quota is still out at the first
    // probe and back at the second.
    proxy
        .store
        .disable_credential(ka, "insufficient_quota", switchyard_data_plane::unix_ms());
    let ka_probes = Matcher::path("/v1/chat/completions").credential("ka");
    let kb_probes = Matcher::path("/v1/chat/completions").credential("kb");
    up.on(ka_probes.clone(), Behavior::status(429).times(1));
    let disabled = |proxy: &Proxy| {
        proxy
            .dump()
            .credentials_disabled
            .iter()
            .map(|c| c.credential_id)
            .collect::<Vec<_>>()
    };

    assert_eq!(probe_round(&proxy.state).await, Recovered::default());
    assert_eq!(
        disabled(&proxy),
        vec![ka],
        "a failed probe leaves it disabled"
    );
    assert_eq!(
        probe_round(&proxy.state).await,
        Recovered {
            channels: Vec::new(),
            credentials: vec![ka]
        }
    );
    assert!(disabled(&proxy).is_empty());
    // Only the disabled credential was probed, once per round; the channel (breaker closed) not.
    assert_eq!(up.hits_matching(&ka_probes), 2);
    assert_eq!(up.hits_matching(&kb_probes), 0);
    // Nothing left to probe.
    assert_eq!(probe_round(&proxy.state).await, Recovered::default());
    assert_eq!(up.hits_matching(&ka_probes), 2);
}

#[tokio::test]
async fn unknown_paths_and_methods_answer_json_in_the_protocol_of_their_prefix() {
    let up = MockUpstream::start().await.unwrap();
    let proxy = start(&one_channel(&up.base_url(), "")).await;
    let base = proxy.url.clone();
    let get = |path: &str| {
        let url = format!("{base}{path}");
        async move { send(Method::GET, &url, Some(TOKEN), Vec::new(), &[]).await }
    };

    let openai = get("/v1/nope").await;
    assert_eq!(openai.status, 404);
    assert_eq!(openai.json()["error"]["type"], "invalid_request_error");
    let anthropic = post(&proxy, "/v1/messages/nope", "{}").await;
    assert_eq!(anthropic.status, 404);
    assert_eq!(anthropic.json()["type"], "error");
    assert_eq!(anthropic.json()["error"]["type"], "not_found_error");
    let gemini = post(&proxy, "/v1beta/models/m:unknownAction", "{}").await;
    assert_eq!(gemini.status, 404);
    assert_eq!(gemini.json()["error"]["status"], "NOT_FOUND");
    // Gemini's newer path generation (`/v1/models/{model}:{action}`) is Gemini's too.
    let gemini_v1 = post(&proxy, "/v1/models/m:unknownAction", "{}").await;
    assert_eq!(gemini_v1.status, 404);
    assert_eq!(gemini_v1.json()["error"]["status"], "NOT_FOUND");
    let method = get(CHAT_PATH).await;
    assert_eq!(method.status, 405);
    assert_eq!(method.json()["error"]["code"], "method_not_allowed");
    for reply in [&openai, &anthropic, &gemini, &gemini_v1, &method] {
        assert_eq!(reply.header("content-type"), "application/json");
        assert_eq!(reply.header("x-should-retry"), "false");
    }

    // One model by id: served, or a 404 in the OpenAI shape.
    let one = get("/v1/models/m").await;
    assert_eq!(one.status, 200, "{}", one.body);
    assert_eq!(one.json()["id"], "m");
    let missing = get("/v1/models/other").await;
    assert_eq!(missing.status, 404);
    assert_eq!(missing.json()["error"]["code"], "model_not_found");
}

/// While the proxy drains, every answer asks its client to close the connection — a proxied
/// `POST` (which the gateway hands straight to its handler) as much as any path of the router.
#[tokio::test]
async fn while_draining_every_answer_asks_the_client_to_close() {
    let up = MockUpstream::start().await.unwrap();
    let proxy = start(&one_channel(&up.base_url(), "  retry_times: 0")).await;
    let health = format!("{}/healthz", proxy.url);
    let before = post(&proxy, CHAT_PATH, CHAT).await;
    assert_eq!(before.status, 200);
    assert_eq!(before.header("connection"), "");
    proxy.state.draining.cancel();
    let chat = post(&proxy, CHAT_PATH, CHAT).await;
    assert_eq!(chat.status, 200, "{}", chat.body);
    assert_eq!(chat.header("connection"), "close");
    let messages = post(&proxy, "/v1/messages", "not json").await;
    assert_eq!(messages.status, 400, "{}", messages.body);
    assert_eq!(messages.header("connection"), "close");
    let routed = send(Method::GET, &health, None, Vec::new(), &[]).await;
    assert_eq!(routed.status, 200);
    assert_eq!(routed.header("connection"), "close");
}

/// The token's route group and its team reach selection: a token bound to group `vip` is served
/// by that group's member, a team allowed only member 4 never reaches member 3 (the higher
/// tier), and a token with neither is served by the top tier as usual.
#[tokio::test]
async fn a_tokens_route_group_and_team_decide_which_member_serves_it() {
    let (a, b) = (
        MockUpstream::start().await.unwrap(),
        MockUpstream::start().await.unwrap(),
    );
    let yaml = format!(
        "channels:\n{}{}routes:\n  - model_pattern: m\n    members:\n      - {{ id: 1, channel: a, priority: 10 }}\n      - {{ id: 2, channel: b, priority: 0, group: vip }}\n  - model_pattern: t\n    members:\n      - {{ id: 3, channel: a, priority: 10 }}\n      - {{ id: 4, channel: b, priority: 0 }}\nteams:\n  - {{ name: only-b, models: ['*'], members: [4] }}\ntokens:\n  - {{ name: plain, token: {TOKEN} }}\n  - {{ name: vip, token: sk-vip, route_group: vip }}\n  - {{ name: team, token: sk-team, team: only-b }}\n",
        channel("a", &a.base_url(), &["ka"]),
        channel("b", &b.base_url(), &["kb"]),
    );
    let proxy = start(&yaml).await;
    let url = format!("{}{CHAT_PATH}", proxy.url);
    let on_t = r#"{"model":"t","messages":[{"role":"user","content":"hello"}]}"#;
    for (token, body, served) in [
        (TOKEN, CHAT, "a"),
        ("sk-vip", CHAT, "b"),
        (TOKEN, on_t, "a"),
        ("sk-team", on_t, "b"),
    ] {
        let reply = send(Method::POST, &url, Some(token), body.into(), &[]).await;
        assert_eq!(reply.status, 200, "{token}: {}", reply.body);
        assert_eq!(reply.header("x-switchyard-channel"), served, "{token}");
    }
}

/// A transcription form with these `model` parts (each a `content-disposition` parameter list).
fn form_with_models(models: &[(&str, &str)]) -> Vec<u8> {
    let mut body = String::from(
        "--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"model\"\r\nContent-Type: audio/wav\r\n\r\nRIFF....\r\n",
    );
    for (disposition, value) in models {
        body.push_str(&format!(
            "--b\r\nContent-Disposition: form-data; {disposition}\r\n\r\n{value}\r\n"
        ));
    }
    body.push_str("--b--\r\n");
    body.into_bytes()
}

#[tokio::test]
async fn a_multipart_body_naming_model_twice_is_refused_before_any_upstream_call() {
    let up = MockUpstream::start().await.unwrap();
    let proxy = start(&one_channel(&up.base_url(), "  retry_times: 0")).await;
    let url = format!("{}/v1/audio/transcriptions", proxy.url);
    let form = [("content-type", "multipart/form-data; boundary=b")];
    // One `model` (a file part merely *called* "model" is not a field named so): served.
    let one = form_with_models(&[("name=\"model\"", "m")]);
    let ok = send(Method::POST, &url, Some(TOKEN), one, &form).await;
    assert_eq!(ok.status, 200, "{}", ok.body);
    assert_eq!(up.hits(), 1);
    // Routing would read one of them and the upstream perhaps the other: refused, whichever
    // comes first and however the second spells its name.
    for models in [
        [
            ("name=\"model\"", "m"),
            ("name=\"model\"", "gpt-4o-transcribe"),
        ],
        [
            ("name=\"model\"", "gpt-4o-transcribe"),
            ("name=\"model\"", "m"),
        ],
        [("name=\"model\"", "m"), ("NAME=model", "gpt-4o-transcribe")],
        [
            ("name*=UTF-8''model", "gpt-4o-transcribe"),
            ("name=\"model\"", "m"),
        ],
    ] {
        let reply = send(
            Method::POST,
            &url,
            Some(TOKEN),
            form_with_models(&models),
            &form,
        )
        .await;
        assert_eq!(reply.status, 400, "{models:?}: {}", reply.body);
        let error = &reply.json()["error"];
        assert_eq!(error["type"], "invalid_request_error", "{}", reply.body);
        assert_eq!(error["code"], "invalid_request", "{}", reply.body);
        assert!(
            error["message"].as_str().unwrap().contains("`model`"),
            "{}",
            reply.body
        );
    }
    assert_eq!(up.hits(), 1, "no refused form reached the upstream");
}

#[tokio::test]
async fn no_address_claim_expectation_or_hop_header_of_the_client_reaches_the_upstream() {
    let up = MockUpstream::start().await.unwrap();
    let proxy = start(&one_channel(&up.base_url(), "  retry_times: 0")).await;
    let sent = [
        ("x-forwarded-for", "10.0.0.7, 203.0.113.9"),
        ("X-Forwarded-Host", "internal.example"),
        ("x-forwarded-proto", "http"),
        ("forwarded", "for=10.0.0.7;proto=http"),
        ("x-real-ip", "10.0.0.7"),
        ("via", "1.1 internal-lb"),
        ("expect", "100-continue"),
        ("proxy-authorization", "Basic Y2xpZW50OnNlY3JldA=="),
        ("proxy-anything", "1"),
        ("connection", "keep-alive, x-hop"),
        ("x-hop", "named in connection"),
        ("keep-alive", "timeout=5"),
        ("te", "trailers"),
        ("trailer", "x-checksum"),
        ("openai-beta", "assistants=v2"),
    ];
    let reply = post_with(&proxy, CHAT_PATH, CHAT, &sent).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let requests = up.requests();
    let received = &requests.last().unwrap().headers;
    for (name, _) in &sent[..sent.len() - 1] {
        assert!(
            !received.contains_key(*name),
            "{name} reached the upstream: {received:?}"
        );
    }
    // An ordinary client header still goes through.
    assert_eq!(received["openai-beta"], "assistants=v2");
}
