//! The Realtime API (`GET /v1/realtime`, a WebSocket) through the proxy's own accept loop, with a
//! WebSocket client (tokio-tungstenite) against the mock upstream's realtime endpoint: events
//! both ways and each `response.done`'s usage reported; errors before the upgrade in OpenAI's
//! JSON; failover only until an upstream handshake succeeds; a message over the size limit
//! closed with 1009; a `concurrent` limit counting an open session; drain closing both sides;
//! the channel's credential upstream and the client's key nowhere there. The official Python
//! SDK's realtime client is `the_openai_sdk_realtime_client_talks_through_the_proxy`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::run_python_at;
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use switchyard_data_plane::config::parse_yaml;
use switchyard_data_plane::usage::{UsageConfig, UsageReporter};
use switchyard_data_plane::{app, AppState};
use switchyard_engine::Snapshot;
use switchyard_mock_upstream::{Behavior, Matcher, MockUpstream};
use switchyard_server::{Limits, Server};
use switchyard_state::InMemoryStore;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};
use tokio_tungstenite::WebSocketStream;
use tokio_util::sync::CancellationToken;

const TOKEN: &str = "sk-realtime-client-0001";
const CHANNEL_KEY: &str = "sk-upstream-channel-key-0001";

struct Proxy {
    addr: std::net::SocketAddr,
    state: Arc<AppState>,
    usage: Arc<UsageReporter>,
    _stop: tokio_util::sync::DropGuard,
    _snapshots: watch::Sender<Option<Arc<Snapshot>>>,
}

/// A proxy serving `yaml` (a token `TOKEN` named `app` added) through the real accept loop, its
/// usage waiting in a reporter nobody sends.
async fn start(yaml: &str) -> Proxy {
    let yaml = format!("{yaml}tokens:\n  - name: app\n    token: {TOKEN}\n");
    let parts = parse_yaml(&yaml, 1).unwrap_or_else(|e| panic!("test yaml: {e}\n{yaml}"));
    let (snapshots, rx) = watch::channel(Some(Arc::new(Snapshot::new(parts))));
    let usage = Arc::new(UsageReporter::unstarted(&UsageConfig::default()));
    let state = AppState::with_usage(rx, Arc::new(InMemoryStore::new()), Some(usage.clone()));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = CancellationToken::new();
    tokio::spawn(Server::new(Limits::default()).serve(listener, app(state.clone()), stop.clone()));
    Proxy {
        addr,
        state,
        usage,
        _stop: stop.drop_guard(),
        _snapshots: snapshots,
    }
}

/// One OpenAI channel `name` at `mock` with the channel key.
fn openai_channel(name: &str, mock: &MockUpstream) -> String {
    format!(
        "  - name: {name}\n    provider: openai\n    base_url: {}\n    credentials: [\"{CHANNEL_KEY}\"]\n",
        mock.base_url()
    )
}

/// Channels, then route `gpt-realtime` over `members` (YAML flow mappings), then `extra`.
fn config(channels: &[String], members: &[&str], extra: &str) -> String {
    format!(
        "settings:\n  channel_retry_times: 0\nchannels:\n{}routes:\n  - model_pattern: gpt-realtime\n    members:\n{}{extra}",
        channels.concat(),
        members
            .iter()
            .map(|m| format!("      - {m}\n"))
            .collect::<String>()
    )
}

type Client = WebSocketStream<TcpStream>;

/// A WebSocket handshake to the proxy for `model` with `token` (as `Authorization: Bearer`)
/// and extra headers.
async fn connect(
    proxy: &Proxy,
    model: &str,
    token: Option<&str>,
    headers: &[(&str, &str)],
) -> Result<(Client, http::Response<Option<Vec<u8>>>), WsError> {
    let url = format!("ws://{}/v1/realtime?model={model}", proxy.addr);
    let mut request = url.into_client_request().unwrap();
    if let Some(token) = token {
        request
            .headers_mut()
            .insert("authorization", format!("Bearer {token}").parse().unwrap());
    }
    for (name, value) in headers {
        request.headers_mut().insert(
            http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            value.parse().unwrap(),
        );
    }
    let tcp = TcpStream::connect(proxy.addr).await.unwrap();
    tokio::time::timeout(
        Duration::from_secs(20),
        tokio_tungstenite::client_async(request, tcp),
    )
    .await
    .expect("the handshake hung")
}

/// The refusal of a handshake: its status and JSON body.
async fn refused(proxy: &Proxy, model: &str, token: Option<&str>) -> (u16, Value) {
    match connect(proxy, model, token, &[]).await {
        Err(WsError::Http(response)) => {
            let status = response.status().as_u16();
            let body = response.body().clone().unwrap_or_default();
            let json = serde_json::from_slice(&body)
                .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&body)));
            (status, json)
        }
        Ok(_) => panic!("the handshake was accepted"),
        Err(e) => panic!("the handshake failed without an answer: {e}"),
    }
}

/// The next event the client receives, as JSON (a close frame or the end is a failure).
async fn next_event(client: &mut Client) -> Value {
    loop {
        let message = tokio::time::timeout(Duration::from_secs(20), client.next())
            .await
            .expect("no event came")
            .expect("the session ended")
            .expect("the session broke");
        match message {
            Message::Text(text) => return serde_json::from_str(text.as_str()).unwrap(),
            Message::Ping(_) | Message::Pong(_) => continue,
            other => panic!("not an event: {other:?}"),
        }
    }
}

/// The close code the client receives next (events before it skipped).
async fn close_code(client: &mut Client) -> u16 {
    loop {
        let message = tokio::time::timeout(Duration::from_secs(20), client.next())
            .await
            .expect("no close came");
        match message {
            Some(Ok(Message::Close(Some(frame)))) => return u16::from(frame.code),
            Some(Ok(Message::Close(None))) => return 1005,
            Some(Ok(_)) => continue,
            other => panic!("the session ended without a close frame: {other:?}"),
        }
    }
}

async fn send(client: &mut Client, event: Value) {
    client.send(Message::text(event.to_string())).await.unwrap();
}

/// Runs a conversation turn: a session update, a user item and a response; returns the
/// response's text and its `response.done` event.
async fn one_turn(client: &mut Client) -> (String, Value) {
    assert_eq!(next_event(client).await["type"], "session.created");
    send(client, json!({"type": "session.update", "session": {"type": "realtime", "instructions": "be brief"}})).await;
    assert_eq!(next_event(client).await["type"], "session.updated");
    let item = json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Say hello, please"}]});
    send(
        client,
        json!({"type": "conversation.item.create", "item": item}),
    )
    .await;
    assert_eq!(next_event(client).await["type"], "conversation.item.added");
    assert_eq!(next_event(client).await["type"], "conversation.item.done");
    send(client, json!({"type": "response.create"})).await;
    assert_eq!(next_event(client).await["type"], "response.created");
    let mut text = String::new();
    loop {
        let event = next_event(client).await;
        match event["type"].as_str().unwrap() {
            "response.output_text.delta" => text.push_str(event["delta"].as_str().unwrap()),
            "response.output_text.done" => {}
            "response.done" => return (text, event),
            other => panic!("unexpected event {other}: {event}"),
        }
    }
}

/// Waits (bounded) until `check` holds.
async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    for _ in 0..200 {
        if check() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("never happened: {what}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_relays_both_ways_and_reports_each_responses_usage() {
    let mock = MockUpstream::start().await.unwrap();
    mock.on(
        Matcher::path("/v1/realtime"),
        Behavior::ok()
            .text("Hello from the realtime mock")
            .cached_tokens(2),
    );
    let proxy = start(&config(
        &[openai_channel("openai", &mock)],
        &["{ channel: openai, upstream_model: gpt-realtime-2025 }"],
        "",
    ))
    .await;
    let (mut client, response) = connect(&proxy, "gpt-realtime", Some(TOKEN), &[])
        .await
        .unwrap();
    assert_eq!(response.status(), 101);
    assert_eq!(response.headers()["x-switchyard-channel"], "openai");
    let (text, done) = one_turn(&mut client).await;
    assert_eq!(text, "Hello from the realtime mock");
    // A ping is answered by the proxy itself.
    client
        .send(Message::Ping("are you there".into()))
        .await
        .unwrap();
    let pong = tokio::time::timeout(Duration::from_secs(20), client.next())
        .await
        .unwrap();
    assert!(
        matches!(&pong, Some(Ok(Message::Pong(p))) if &p[..] == b"are you there"),
        "{pong:?}"
    );
    let usage = &done["response"]["usage"];
    assert_eq!(usage["input_token_details"]["cached_tokens"], 2);
    // A second response in the same session is accounted on its own.
    send(&mut client, json!({"type": "response.create"})).await;
    while next_event(&mut client).await["type"] != "response.done" {}
    let bye = CloseFrame {
        code: CloseCode::Normal,
        reason: "bye".into(),
    };
    client.close(Some(bye)).await.unwrap();
    // The close, with its code, reaches the upstream.
    eventually("the upstream got the client's close", || {
        mock.realtime().closes == vec![1000]
    })
    .await;
    let log = mock.realtime();
    assert_eq!(
        log.events,
        [
            "session.update",
            "conversation.item.create",
            "response.create",
            "response.create"
        ]
    );
    // What the upstream saw of the handshake: the channel's key, the member's model, and the
    // client's token nowhere.
    let handshake = &mock.requests()[0];
    assert_eq!(handshake.path, "/v1/realtime");
    assert_eq!(handshake.query_param("model"), Some("gpt-realtime-2025"));
    assert_eq!(handshake.credential.as_deref(), Some(CHANNEL_KEY));
    let leaked = handshake
        .headers
        .iter()
        .any(|(_, v)| v.to_str().is_ok_and(|v| v.contains(TOKEN)))
        || handshake
            .query
            .as_deref()
            .is_some_and(|q| q.contains(TOKEN));
    assert!(
        !leaked,
        "the client's token reached the upstream: {handshake:?}"
    );
    // Each response.done is one request's usage under token, route, channel and model.
    let reported = mock.reported_usage();
    assert_eq!(reported.answers, 2);
    eventually("the session's usage was recorded", || {
        proxy.usage.pending_keys() == 1
    })
    .await;
    let batch = proxy.usage.take_batch().unwrap();
    let record = &batch.records[0];
    assert_eq!(record.requests, 2);
    assert_eq!(
        (
            record.input_tokens,
            record.output_tokens,
            record.cached_tokens
        ),
        (
            reported.input_tokens,
            reported.output_tokens,
            reported.cached_tokens
        )
    );
    assert_eq!(record.cached_tokens, 4);
    assert_eq!(
        (
            record.token.as_str(),
            record.route.as_str(),
            record.channel.as_str(),
            record.model.as_str()
        ),
        ("app", "gpt-realtime", "openai", "gpt-realtime-2025")
    );
    eventually("the session gauge went back to 0", || {
        proxy
            .state
            .metrics
            .realtime_sessions
            .load(std::sync::atomic::Ordering::Relaxed)
            == 0
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_before_the_upgrade_are_openai_errors() {
    let mock = MockUpstream::start().await.unwrap();
    let yaml = config(
        &[
            openai_channel("openai", &mock),
            format!(
                "  - name: claude\n    provider: anthropic\n    base_url: {}\n    credentials: [\"k\"]\n",
                mock.base_url()
            ),
        ],
        &["{ channel: openai }"],
        "  - model_pattern: claude-only\n    members: [{ channel: claude }]\n",
    );
    let proxy = start(&yaml).await;
    let (status, body) = refused(&proxy, "gpt-realtime", Some("sk-wrong")).await;
    assert_eq!(status, 401, "{body}");
    assert_eq!(body["error"]["type"], "invalid_request_error", "{body}");
    let (status, body) = refused(&proxy, "gpt-realtime", None).await;
    assert_eq!(status, 401, "{body}");
    let (status, body) = refused(&proxy, "no-such-model", Some(TOKEN)).await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["error"]["code"], "model_not_found", "{body}");
    // A route whose only channel cannot hold a realtime session.
    let (status, body) = refused(&proxy, "claude-only", Some(TOKEN)).await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("realtime sessions"),
        "{body}"
    );
    // A plain GET is no WebSocket handshake.
    let plain = hyper_get(&proxy, "/v1/realtime?model=gpt-realtime").await;
    assert_eq!(plain.0, 400, "{}", plain.1);
    assert!(plain.1.contains("WebSocket"), "{}", plain.1);
    // Nothing reached the upstream.
    assert_eq!(mock.hits(), 0);
}

/// A plain `GET` with the client's token: status and body.
async fn hyper_get(proxy: &Proxy, path: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut tcp = TcpStream::connect(proxy.addr).await.unwrap();
    let head = format!(
        "GET {path} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {TOKEN}\r\nconnection: close\r\n\r\n"
    );
    tcp.write_all(head.as_bytes()).await.unwrap();
    let mut out = String::new();
    tokio::time::timeout(Duration::from_secs(20), tcp.read_to_string(&mut out))
        .await
        .unwrap()
        .unwrap();
    let status = out[9..12].parse().unwrap();
    let body = out
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_handshake_fails_over_and_an_open_session_is_never_retried() {
    let first = MockUpstream::start().await.unwrap();
    first.on(Matcher::path("/v1/realtime"), Behavior::status(503));
    let second = MockUpstream::start().await.unwrap();
    let proxy = start(&config(
        &[
            openai_channel("first", &first),
            openai_channel("second", &second),
        ],
        &[
            "{ channel: first, priority: 10 }",
            "{ channel: second, priority: 0 }",
        ],
        "",
    ))
    .await;
    let (mut client, response) = connect(&proxy, "gpt-realtime", Some(TOKEN), &[])
        .await
        .unwrap();
    assert_eq!(response.headers()["x-switchyard-channel"], "second");
    assert_eq!(response.headers()["x-switchyard-attempts"], "2");
    assert_eq!(next_event(&mut client).await["type"], "session.created");
    assert_eq!((first.hits(), second.hits()), (1, 1));
    assert_eq!(first.realtime().sessions, 0);
    // Every handshake refused: the last upstream answer, as it came.
    second.on(Matcher::path("/v1/realtime"), Behavior::status(503));
    let (status, body) = refused(&proxy, "gpt-realtime", Some(TOKEN)).await;
    assert_eq!(status, 503, "{body}");
    // An upstream refusing the channel's key is the gateway's fault, not the client's.
    second.reset();
    second.on(Matcher::path("/v1/realtime"), Behavior::status(401));
    first.reset();
    first.on(Matcher::path("/v1/realtime"), Behavior::status(401));
    let (status, body) = refused(&proxy, "gpt-realtime", Some(TOKEN)).await;
    assert_eq!(status, 502, "{body}");
    assert_eq!(body["error"]["code"], "upstream_auth_failed", "{body}");
    // The session opened before all this is still served by its upstream.
    send(&mut client, json!({"type": "response.create"})).await;
    assert_eq!(next_event(&mut client).await["type"], "response.created");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_over_the_limit_closes_the_session_with_1009() {
    let mock = MockUpstream::start().await.unwrap();
    let proxy = start(
        &format!(
            "{}\n",
            config(
                &[openai_channel("openai", &mock)],
                &["{ channel: openai }"],
                ""
            )
        )
        .replace(
            "settings:\n",
            "settings:\n  max_request_body_bytes: 65536\n",
        ),
    )
    .await;
    let (mut client, _) = connect(&proxy, "gpt-realtime", Some(TOKEN), &[])
        .await
        .unwrap();
    assert_eq!(next_event(&mut client).await["type"], "session.created");
    // At the limit it passes (the mock answers an unknown event with an error event).
    let at_limit = format!("{{\"type\":\"x\",\"pad\":\"{}\"}}", "a".repeat(65536 - 21));
    assert_eq!(at_limit.len(), 65536);
    client.send(Message::text(at_limit)).await.unwrap();
    assert_eq!(next_event(&mut client).await["type"], "error");
    let over = format!("{{\"type\":\"x\",\"pad\":\"{}\"}}", "a".repeat(65536));
    client.send(Message::text(over)).await.unwrap();
    assert_eq!(close_code(&mut client).await, u16::from(CloseCode::Size));
    eventually("the upstream side was closed", || {
        mock.realtime().closes == vec![1000]
    })
    .await;
    assert_eq!(mock.realtime().events, ["x"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_concurrency_limit_counts_an_open_session_until_it_closes() {
    let mock = MockUpstream::start().await.unwrap();
    let proxy = start(&config(
        &[openai_channel("openai", &mock)],
        &["{ channel: openai }"],
        "limits:\n  - { token: app, metric: concurrent, value: 1 }\n",
    ))
    .await;
    let (mut first, _) = connect(&proxy, "gpt-realtime", Some(TOKEN), &[])
        .await
        .unwrap();
    assert_eq!(next_event(&mut first).await["type"], "session.created");
    let (status, body) = refused(&proxy, "gpt-realtime", Some(TOKEN)).await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["error"]["code"], "rate_limit_exceeded", "{body}");
    // An abrupt disconnect (no close frame) gives the slot back too.
    drop(first);
    let mut reopened = None;
    for _ in 0..200 {
        match connect(&proxy, "gpt-realtime", Some(TOKEN), &[]).await {
            Ok((client, _)) => {
                reopened = Some(client);
                break;
            }
            Err(WsError::Http(r)) if r.status() == 429 => {
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
            Err(e) => panic!("{e}"),
        }
    }
    let mut second = reopened.expect("the slot was never given back");
    assert_eq!(next_event(&mut second).await["type"], "session.created");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn draining_closes_both_sides_with_going_away() {
    let mock = MockUpstream::start().await.unwrap();
    let proxy = start(&config(
        &[openai_channel("openai", &mock)],
        &["{ channel: openai }"],
        "",
    ))
    .await;
    let (mut client, _) = connect(&proxy, "gpt-realtime", Some(TOKEN), &[])
        .await
        .unwrap();
    assert_eq!(next_event(&mut client).await["type"], "session.created");
    proxy.state.draining.cancel();
    assert_eq!(close_code(&mut client).await, u16::from(CloseCode::Away));
    eventually("the upstream got the proxy's close", || {
        mock.realtime().closes == vec![1001]
    })
    .await;
    // A draining proxy opens no new session.
    let (status, body) = refused(&proxy, "gpt-realtime", Some(TOKEN)).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["code"], "shutting_down", "{body}");
    assert_eq!(mock.realtime().sessions, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_browser_key_azure_and_the_simulator_open_sessions_too() {
    let mock = MockUpstream::start().await.unwrap();
    let yaml = format!(
        "channels:\n  - name: azure\n    provider: azure\n    base_url: {}\n    credentials: [\"{CHANNEL_KEY}\"]\n  - name: sim\n    provider: mock\nroutes:\n  - model_pattern: gpt-realtime\n    members: [{{ channel: azure, upstream_model: rt-deploy }}]\n  - model_pattern: simulated\n    members: [{{ channel: sim }}]\n",
        mock.base_url()
    );
    let proxy = start(&yaml).await;
    let protocols = format!("realtime, openai-insecure-api-key.{TOKEN}, openai-beta.realtime-v1");
    let (mut client, response) = connect(
        &proxy,
        "gpt-realtime",
        None,
        &[("sec-websocket-protocol", &protocols)],
    )
    .await
    .unwrap();
    assert_eq!(response.headers()["sec-websocket-protocol"], "realtime");
    let (text, _) = one_turn(&mut client).await;
    assert_eq!(text, "Hello from mock");
    let handshake = &mock.requests()[0];
    assert_eq!(handshake.path, "/openai/realtime");
    assert_eq!(handshake.query_param("deployment"), Some("rt-deploy"));
    assert_eq!(
        handshake.query_param("api-version"),
        Some("2024-10-01-preview")
    );
    assert_eq!(handshake.headers["api-key"], CHANNEL_KEY);
    assert!(
        !handshake.headers.contains_key("sec-websocket-protocol")
            || !handshake.headers["sec-websocket-protocol"]
                .to_str()
                .unwrap()
                .contains(TOKEN)
    );
    let (mut simulated, _) = connect(&proxy, "simulated", Some(TOKEN), &[])
        .await
        .unwrap();
    let (text, done) = one_turn(&mut simulated).await;
    assert_eq!(text, "Hello from mock");
    assert!(done["response"]["usage"]["output_tokens"].as_u64().unwrap() > 0);
    eventually("both sessions' usage was recorded", || {
        proxy.usage.pending_keys() == 2
    })
    .await;
}

const SDK_SCRIPT: &str = r#"
import json, sys
from openai import OpenAI

client = OpenAI(base_url=sys.argv[1] + "/v1", api_key=sys.argv[2], max_retries=0)
events, text, usage = [], [], None
with client.realtime.connect(model="gpt-realtime") as connection:
    connection.session.update(session={"type": "realtime", "output_modalities": ["text"], "instructions": "be brief"})
    connection.conversation.item.create(item={"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Say hello"}]})
    connection.response.create()
    for event in connection:
        events.append(event.type)
        if event.type == "response.output_text.delta":
            text.append(event.delta)
        if event.type == "response.done":
            u = event.response.usage
            usage = {"input": u.input_tokens, "output": u.output_tokens, "cached": u.input_token_details.cached_tokens}
            break
print(json.dumps({"events": events, "text": "".join(text), "usage": usage}))
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_sdk_realtime_client_talks_through_the_proxy() {
    let mock = MockUpstream::start().await.unwrap();
    mock.on(
        Matcher::path("/v1/realtime"),
        Behavior::ok().cached_tokens(1),
    );
    let proxy = start(&config(
        &[openai_channel("openai", &mock)],
        &["{ channel: openai }"],
        "",
    ))
    .await;
    let url = format!("http://{}", proxy.addr);
    let result = run_python_at(&url, TOKEN, SDK_SCRIPT).await;
    let events: Vec<&str> = result["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap())
        .collect();
    assert_eq!(events[0], "session.created");
    for kind in [
        "session.updated",
        "conversation.item.added",
        "response.output_text.delta",
    ] {
        assert!(events.contains(&kind), "{kind} not in {events:?}");
    }
    assert_eq!(events.last(), Some(&"response.done"));
    assert_eq!(result["text"], "Hello from mock");
    // The SDK's events reached the upstream in order.
    assert_eq!(
        mock.realtime().events[..3],
        [
            "session.update",
            "conversation.item.create",
            "response.create"
        ]
    );
    // The usage the SDK saw is the usage the proxy reports.
    eventually("the session's usage was recorded", || {
        proxy.usage.pending_keys() == 1
    })
    .await;
    let batch = proxy.usage.take_batch().unwrap();
    let record = &batch.records[0];
    assert_eq!(record.requests, 1);
    assert_eq!(result["usage"]["input"], record.input_tokens);
    assert_eq!(result["usage"]["output"], record.output_tokens);
    assert_eq!(result["usage"]["cached"], record.cached_tokens);
    assert_eq!(record.cached_tokens, 1);
    assert_eq!(
        (record.token.as_str(), record.channel.as_str()),
        ("app", "openai")
    );
}

/// A Realtime session cannot be inspected: a guardrail on its route that says
/// `uninspectable: block` refuses the handshake before any upstream is asked; one that allows it
/// (the default) lets it open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guardrail_that_blocks_what_it_cannot_inspect_refuses_the_session() {
    let mock = MockUpstream::start().await.unwrap();
    let rule = |extra: &str| {
        format!("guardrails:\n  - {{ name: pii, route: gpt-realtime, stage: request, action: redact, checks: {{ detectors: [email] }}{extra} }}\n")
    };
    let proxy = start(&config(
        &[openai_channel("openai", &mock)],
        &["{ channel: openai }"],
        &rule(", uninspectable: block"),
    ))
    .await;
    let (status, body) = refused(&proxy, "gpt-realtime", Some(TOKEN)).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], "guardrail_blocked", "{body}");
    assert_eq!(mock.hits(), 0);

    let proxy = start(&config(
        &[openai_channel("openai", &mock)],
        &["{ channel: openai }"],
        &rule(""),
    ))
    .await;
    let (mut client, _) = connect(&proxy, "gpt-realtime", Some(TOKEN), &[])
        .await
        .unwrap();
    assert_eq!(next_event(&mut client).await["type"], "session.created");
}
