//! Each scripted behaviour, observed by a real HTTP client over loopback.

#![allow(clippy::unwrap_used)] // helpers outside #[test] fns are test code too

mod support;

use std::time::{Duration, Instant};

use serde_json::json;
use support::{chat, chat_stream, get, post};
use switchyard_mock_upstream::{Behavior, Matcher, MockUpstream};

const CHAT: &str = "/v1/chat/completions";

fn data_events(events: &[String]) -> Vec<String> {
    events
        .iter()
        .map(|e| e.strip_prefix("data: ").unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn default_chat_answer_echoes_the_model() {
    let mock = MockUpstream::start().await.unwrap();
    assert!(mock.base_url().starts_with("http://127.0.0.1:"));
    assert_eq!(mock.base_url(), format!("http://{}", mock.addr()));
    let reply = post(&mock.base_url(), CHAT, chat("gpt-x")).ok().await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.headers["content-type"], "application/json");
    let v = reply.json();
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["model"], "gpt-x");
    assert_eq!(v["choices"][0]["message"]["role"], "assistant");
    assert_eq!(v["choices"][0]["message"]["content"], "Hello from mock");
    assert!(v["id"].as_str().unwrap().starts_with("chatcmpl-mock-"));
    assert!(v["usage"]["total_tokens"].as_u64().unwrap() > 0);
}

#[tokio::test]
async fn status_rule_answers_with_openai_error_json() {
    let mock = MockUpstream::start().await.unwrap();
    mock.on(Matcher::any(), Behavior::status(500));
    for _ in 0..3 {
        let reply = post(&mock.base_url(), CHAT, chat("m")).ok().await;
        assert_eq!(reply.status, 500);
        let v = reply.json();
        assert!(v["error"]["message"].is_string());
        assert_eq!(v["error"]["type"], "server_error");
        assert!(v["error"]["code"].is_string());
    }
}

#[tokio::test]
async fn anthropic_errors_use_the_anthropic_shape() {
    let mock = MockUpstream::start().await.unwrap();
    mock.on(Matcher::path("/v1/messages"), Behavior::status(429));
    let reply = post(&mock.base_url(), "/v1/messages", chat("claude"))
        .ok()
        .await;
    assert_eq!(reply.status, 429);
    let v = reply.json();
    assert_eq!(v["type"], "error");
    assert_eq!(v["error"]["type"], "rate_limit_error");
}

#[tokio::test]
async fn retry_after_times_and_credential_matching() {
    let mock = MockUpstream::start().await.unwrap();
    mock.on(
        Matcher::path(CHAT).credential("sk-a"),
        Behavior::status(429).retry_after(7).times(2),
    );
    let base = mock.base_url();
    // Another credential, or another path, is not matched.
    assert_eq!(
        post(&base, CHAT, chat("m"))
            .bearer("sk-b")
            .ok()
            .await
            .status,
        200
    );
    assert_eq!(
        post(&base, "/v1/embeddings", json!({"model": "e", "input": "x"}))
            .bearer("sk-a")
            .ok()
            .await
            .status,
        200
    );
    // Bearer and x-api-key both name the credential.
    let first = post(&base, CHAT, chat("m")).bearer("sk-a").ok().await;
    assert_eq!(first.status, 429);
    assert_eq!(first.headers["retry-after"], "7");
    let second = post(&base, CHAT, chat("m")).api_key("sk-a").ok().await;
    assert_eq!(second.status, 429);
    // Exhausted after two uses: the default answer again.
    let third = post(&base, CHAT, chat("m")).bearer("sk-a").ok().await;
    assert_eq!(third.status, 200);
    assert!(third.headers.get("retry-after").is_none());
    assert_eq!(mock.hits(), 5);
    assert_eq!(mock.hits_matching(&Matcher::any().credential("sk-a")), 4);
    assert_eq!(
        mock.hits_matching(&Matcher::path(CHAT).credential("sk-a")),
        3
    );
}

#[tokio::test]
async fn rules_apply_in_insertion_order_and_match_models() {
    let mock = MockUpstream::start().await.unwrap();
    mock.on(Matcher::any().model("bad"), Behavior::status(503));
    mock.on(Matcher::any(), Behavior::status(400).times(1));
    mock.on(Matcher::any(), Behavior::status(502));
    let base = mock.base_url();
    assert_eq!(post(&base, CHAT, chat("bad")).ok().await.status, 503);
    assert_eq!(post(&base, CHAT, chat("good")).ok().await.status, 400);
    assert_eq!(post(&base, CHAT, chat("good")).ok().await.status, 502);
    assert_eq!(post(&base, CHAT, chat("bad")).ok().await.status, 503);
}

#[tokio::test]
async fn body_and_header_overrides_are_verbatim() {
    let mock = MockUpstream::start().await.unwrap();
    mock.on(
        Matcher::any(),
        Behavior::status(400)
            .body(r#"{"error":{"message":"quota exceeded"}}"#)
            .header("x-custom", "yes"),
    );
    let reply = post(&mock.base_url(), CHAT, chat("m")).ok().await;
    assert_eq!(reply.status, 400);
    assert_eq!(reply.text(), r#"{"error":{"message":"quota exceeded"}}"#);
    assert_eq!(reply.headers["x-custom"], "yes");
}

#[tokio::test]
async fn latency_delays_the_answer() {
    let mock = MockUpstream::start().await.unwrap();
    mock.on(
        Matcher::any(),
        Behavior::ok().latency(Duration::from_millis(200)),
    );
    let started = Instant::now();
    let reply = post(&mock.base_url(), CHAT, chat("m")).ok().await;
    assert_eq!(reply.status, 200);
    assert!(started.elapsed() >= Duration::from_millis(200));
}

#[tokio::test]
async fn hang_holds_until_the_client_gives_up() {
    let mock = MockUpstream::start().await.unwrap();
    mock.on(Matcher::any(), Behavior::ok().hang());
    let call = post(&mock.base_url(), CHAT, chat("m")).send();
    let outcome = tokio::time::timeout(Duration::from_millis(300), call).await;
    assert!(outcome.is_err(), "a hung request must not be answered");
    assert_eq!(mock.hits(), 1);
}

#[tokio::test]
async fn malformed_is_200_with_a_body_that_is_not_json() {
    let mock = MockUpstream::start().await.unwrap();
    mock.on(Matcher::any(), Behavior::ok().malformed());
    let reply = post(&mock.base_url(), CHAT, chat("m")).ok().await;
    assert_eq!(reply.status, 200);
    assert!(serde_json::from_slice::<serde_json::Value>(&reply.body).is_err());
}

#[tokio::test]
async fn empty_completion_has_empty_content() {
    let mock = MockUpstream::start().await.unwrap();
    mock.on(Matcher::any(), Behavior::ok().empty_completion());
    let v = post(&mock.base_url(), CHAT, chat("m")).ok().await.json();
    assert_eq!(v["choices"][0]["message"]["content"], "");
}

#[tokio::test]
async fn stream_true_gets_three_chunks_and_done() {
    let mock = MockUpstream::start().await.unwrap();
    let reply = post(&mock.base_url(), CHAT, chat_stream("gpt-s"))
        .ok()
        .await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.headers["content-type"], "text/event-stream");
    let events = data_events(&reply.events());
    // 3 content chunks, the finish chunk, [DONE].
    assert_eq!(events.len(), 5);
    assert_eq!(events.last().unwrap(), "[DONE]");
    let mut text = String::new();
    for e in &events[..4] {
        let v: serde_json::Value = serde_json::from_str(e).unwrap();
        assert_eq!(v["object"], "chat.completion.chunk");
        assert_eq!(v["model"], "gpt-s");
        text.push_str(v["choices"][0]["delta"]["content"].as_str().unwrap_or(""));
    }
    assert_eq!(text, "Hello from mock");
}

#[tokio::test]
async fn forced_stream_has_the_chunk_count_and_gap() {
    let mock = MockUpstream::start().await.unwrap();
    mock.on(
        Matcher::any(),
        Behavior::ok().stream(6, Duration::from_millis(20)),
    );
    let started = Instant::now();
    let reply = post(&mock.base_url(), CHAT, chat("m")).ok().await;
    let events = data_events(&reply.events());
    assert_eq!(events.len(), 6 + 2);
    assert_eq!(events.last().unwrap(), "[DONE]");
    // 8 events, 7 gaps.
    assert!(started.elapsed() >= Duration::from_millis(7 * 20));
}

#[tokio::test]
async fn cut_before_first_byte_is_a_transport_error() {
    let mock = MockUpstream::start().await.unwrap();
    mock.on(
        Matcher::any(),
        Behavior::ok().cut_before_first_byte().times(1),
    );
    let outcome = post(&mock.base_url(), CHAT, chat("m")).send().await;
    assert!(
        outcome.is_err(),
        "expected a transport error, got {outcome:?}"
    );
    // The next request is answered normally.
    assert_eq!(
        post(&mock.base_url(), CHAT, chat("m")).ok().await.status,
        200
    );
}

#[tokio::test]
async fn cut_after_chunks_delivers_n_events_then_breaks() {
    let mock = MockUpstream::start().await.unwrap();
    mock.on(Matcher::any(), Behavior::ok().cut_after_chunks(2));
    let reply = post(&mock.base_url(), CHAT, chat_stream("m"))
        .send()
        .await
        .unwrap();
    assert_eq!(reply.status, 200);
    let events = data_events(&reply.events());
    assert_eq!(events.len(), 2, "{events:?}");
    assert!(events.iter().all(|e| e != "[DONE]"));
    assert!(
        reply.body_error.is_some(),
        "the stream must end in an error"
    );
}

#[tokio::test]
async fn cut_after_chunks_with_gaps_and_more_chunks_than_the_stream() {
    let mock = MockUpstream::start().await.unwrap();
    mock.on(
        Matcher::any(),
        Behavior::ok()
            .stream(2, Duration::from_millis(5))
            .cut_after_chunks(50),
    );
    let reply = post(&mock.base_url(), CHAT, chat("m"))
        .send()
        .await
        .unwrap();
    let events = data_events(&reply.events());
    // Everything but [DONE], then the cut.
    assert_eq!(events.len(), 3);
    assert!(reply.body_error.is_some());
}

#[tokio::test]
async fn counters_record_and_reset() {
    let mock = MockUpstream::start().await.unwrap();
    mock.on(Matcher::any(), Behavior::status(500));
    let base = mock.base_url();
    post(&base, CHAT, chat("m1")).bearer("sk-1").ok().await;
    get(&base, "/v1/models").api_key("sk-2").ok().await;
    assert_eq!(mock.hits(), 2);
    let requests = mock.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0].method, "POST");
    assert_eq!(requests[0].path, CHAT);
    assert_eq!(requests[0].credential.as_deref(), Some("sk-1"));
    assert_eq!(requests[0].model.as_deref(), Some("m1"));
    assert_eq!(requests[0].json()["messages"][0]["content"], "hi");
    assert_eq!(requests[0].headers["content-type"], "application/json");
    assert_eq!(requests[1].credential.as_deref(), Some("sk-2"));
    assert_eq!(requests[1].model, None);
    assert_eq!(mock.hits_matching(&Matcher::path("/v1/models")), 1);
    assert_eq!(mock.counts().by_credential["sk-1"], 1);

    mock.reset();
    assert_eq!(mock.hits(), 0);
    assert!(mock.requests().is_empty());
    // The rule is gone too.
    assert_eq!(post(&base, CHAT, chat("m")).ok().await.status, 200);
}

#[tokio::test]
async fn dropping_the_mock_stops_the_server() {
    let mock = MockUpstream::start().await.unwrap();
    let addr = mock.addr();
    drop(mock);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
}

#[tokio::test]
async fn graceful_shutdown_releases_hanging_requests() {
    let mock = MockUpstream::start().await.unwrap();
    mock.on(Matcher::any(), Behavior::ok().hang());
    let call = tokio::spawn(post(&mock.base_url(), CHAT, chat("m")).send());
    tokio::time::sleep(Duration::from_millis(100)).await;
    tokio::time::timeout(
        Duration::from_secs(5),
        mock.shutdown(Duration::from_secs(5)),
    )
    .await
    .unwrap();
    let outcome = tokio::time::timeout(Duration::from_secs(5), call)
        .await
        .unwrap()
        .unwrap();
    assert!(outcome.is_err());
}
