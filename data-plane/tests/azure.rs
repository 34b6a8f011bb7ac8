//! Azure OpenAI channels (`provider: azure`) against a mock upstream on loopback: OpenAI's
//! protocol at Azure's URLs (the member's upstream model is the deployment in the path, the
//! channel's `api-version` in the query, the channel's key in `api-key`), OpenAI, Anthropic and
//! Gemini clients, errors and failover, the Responses API, the v1 surface, and the recovery probe.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;
use serde_json::{json, Value};
use switchyard_data_plane::probe::probe_round;
use switchyard_mock_upstream::{Behavior, Matcher, MockUpstream, RecordedRequest};

const KEY: &str = "azure-key-eastus-0001";
const DEFAULT_VERSION: &str = "2024-10-21";
const MESSAGES: &str =
    r#"{"model":"gpt-4o","max_tokens":64,"messages":[{"role":"user","content":"hello"}]}"#;
const MESSAGES_STREAM: &str = r#"{"model":"gpt-4o","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"hello"}]}"#;
const GEMINI: &str = r#"{"contents":[{"role":"user","parts":[{"text":"hello"}]}]}"#;

/// An Azure channel block named `name` at `url`, with `extra` YAML lines under it.
fn azure_channel(name: &str, url: &str, key: &str, extra: &str) -> String {
    format!("  - name: {name}\n    provider: azure\n    base_url: {url}\n    credentials: [\"{key}\"]\n{extra}")
}

/// One Azure channel `azure` at `mock`; routes `gpt-4o` (deployment `gpt-4o-prod`),
/// `text-embedding` (`embed-large`) and `instruct` (`instruct-prod`).
fn config(mock: &MockUpstream, extra: &str) -> String {
    format!(
        "settings:\n  channel_retry_times: 0\nchannels:\n{}routes:\n  - model_pattern: gpt-4o\n    members: [{{ channel: azure, upstream_model: gpt-4o-prod }}]\n  - model_pattern: text-embedding\n    members: [{{ channel: azure, upstream_model: embed-large }}]\n  - model_pattern: instruct\n    members: [{{ channel: azure, upstream_model: instruct-prod }}]\n",
        azure_channel("azure", &mock.base_url(), KEY, extra)
    )
}

/// Checks what Azure received: the deployment's path for `operation`, `version`, the channel's
/// key in `api-key` and nowhere else, and the client's token nowhere at all.
fn assert_azure_request(r: &RecordedRequest, deployment: &str, operation: &str, version: &str) {
    assert_eq!(
        r.path,
        format!("/openai/deployments/{deployment}/{operation}"),
        "{r:?}"
    );
    assert_eq!(r.query_param("api-version"), Some(version), "{r:?}");
    assert_eq!(r.credential.as_deref(), Some(KEY));
    assert_eq!(r.headers["api-key"], KEY);
    assert!(!r.headers.contains_key("authorization"), "{r:?}");
    assert!(!r.headers.contains_key("api-version"), "{r:?}");
    let token_leaked = r
        .headers
        .iter()
        .any(|(_, v)| v.to_str().is_ok_and(|v| v.contains(TOKEN)))
        || r.query.as_deref().is_some_and(|q| q.contains(TOKEN));
    assert!(!token_leaked, "the client's token reached Azure: {r:?}");
    // The body's model is the deployment too (Azure ignores it; OpenAI's shape keeps it).
    assert_eq!(r.model.as_deref(), Some(deployment));
    assert_eq!(r.json()["model"], deployment);
}

/// The `data:` JSON of each SSE event (without `[DONE]`).
fn sse_data(body: &str) -> Vec<Value> {
    body.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

/// The `event:` names of an SSE body.
fn sse_events(body: &str) -> Vec<&str> {
    body.lines()
        .filter_map(|l| l.strip_prefix("event: "))
        .collect()
}

#[tokio::test]
async fn openai_clients_reach_the_deployment_with_the_channels_key() {
    let mock = MockUpstream::start().await.unwrap();
    mock.on(
        Matcher::any().model("gpt-4o-prod"),
        Behavior::ok().text("Bonjour from Azure"),
    );
    let proxy = start(&config(&mock, "")).await;
    let chat = r#"{"model":"gpt-4o","messages":[{"role":"user","content":"hello"}]}"#;

    // Plain: the client's own `api-key` (an Azure SDK habit) is not forwarded either.
    let reply = post_with(
        &proxy,
        "/v1/chat/completions",
        chat,
        &[("api-key", "client-azure-key")],
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.header("x-switchyard-channel"), "azure");
    let v = reply.json();
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["choices"][0]["message"]["content"], "Bonjour from Azure");
    let requests = mock.requests();
    assert_azure_request(
        &requests[0],
        "gpt-4o-prod",
        "chat/completions",
        DEFAULT_VERSION,
    );
    assert_eq!(requests[0].json()["messages"][0]["content"], "hello");

    // Stream: OpenAI's SSE passed through, the usage chunk the gateway asked for kept back.
    let stream =
        r#"{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"hello"}]}"#;
    let reply = post(&proxy, "/v1/chat/completions", stream).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert!(reply
        .header("content-type")
        .starts_with("text/event-stream"));
    assert!(
        reply.body.trim_end().ends_with("data: [DONE]"),
        "{}",
        reply.body
    );
    let chunks = sse_data(&reply.body);
    let text: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(text, "Bonjour from Azure");
    assert!(
        chunks.iter().all(|c| c["usage"].is_null()),
        "{}",
        reply.body
    );
    let sent = &mock.requests()[1];
    assert_azure_request(sent, "gpt-4o-prod", "chat/completions", DEFAULT_VERSION);
    assert_eq!(sent.json()["stream"], true);
    assert_eq!(sent.json()["stream_options"]["include_usage"], true);

    // Embeddings and completions: their deployments' paths.
    let reply = post(
        &proxy,
        "/v1/embeddings",
        r#"{"model":"text-embedding","input":["a","b"]}"#,
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.json()["data"].as_array().unwrap().len(), 2);
    assert_azure_request(
        &mock.requests()[2],
        "embed-large",
        "embeddings",
        DEFAULT_VERSION,
    );
    let reply = post(
        &proxy,
        "/v1/completions",
        r#"{"model":"instruct","prompt":"once upon"}"#,
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.json()["object"], "text_completion");
    assert_azure_request(
        &mock.requests()[3],
        "instruct-prod",
        "completions",
        DEFAULT_VERSION,
    );
    assert_eq!(mock.hits(), 4);
}

#[tokio::test]
async fn the_channels_api_version_entry_is_the_query_parameter_not_a_header() {
    let mock = MockUpstream::start().await.unwrap();
    let extra = "    headers: {api-version: 2025-04-01-preview, x-ms-client-request-id: run-7}\n";
    let proxy = start(&config(&mock, extra)).await;
    let reply = post(
        &proxy,
        "/v1/chat/completions",
        r#"{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}"#,
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let r = &mock.requests()[0];
    assert_azure_request(r, "gpt-4o-prod", "chat/completions", "2025-04-01-preview");
    assert_eq!(r.headers["x-ms-client-request-id"], "run-7");

    // The Responses API is per resource: `/openai/responses`, the deployment in the body.
    let reply = post(
        &proxy,
        "/v1/responses",
        r#"{"model":"gpt-4o","input":"hi"}"#,
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.json()["object"], "response");
    let r = &mock.requests()[1];
    assert_eq!(r.path, "/openai/responses");
    assert_eq!(r.query_param("api-version"), Some("2025-04-01-preview"));
    assert_eq!(r.json()["model"], "gpt-4o-prod");
    assert_eq!(r.headers["api-key"], KEY);
}

#[tokio::test]
async fn the_api_version_is_chosen_per_kind_of_endpoint() {
    let mock = MockUpstream::start().await.unwrap();
    let chat = r#"{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}"#;
    let responses = r#"{"model":"gpt-4o","input":"hi"}"#;
    let embeddings = r#"{"model":"text-embedding","input":"hi"}"#;
    // No entry: the Responses API gets a version that has it, every other kind the default.
    let proxy = start(&config(&mock, "")).await;
    for (path, body) in [("/v1/responses", responses), ("/v1/chat/completions", chat)] {
        let reply = post(&proxy, path, body).await;
        assert_eq!(reply.status, 200, "{path}: {}", reply.body);
    }
    let sent = mock.requests();
    assert_eq!(sent[0].path, "/openai/responses");
    assert_eq!(
        sent[0].query_param("api-version"),
        Some("2025-04-01-preview")
    );
    assert_azure_request(&sent[1], "gpt-4o-prod", "chat/completions", DEFAULT_VERSION);

    // A kind's own entry beats the plain one, which every other kind takes.
    let mock = MockUpstream::start().await.unwrap();
    let extra = "    headers: {api-version: 2024-06-01, api-version-responses: 2025-05-01-preview, api-version-embeddings: 2023-05-15}\n";
    let proxy = start(&config(&mock, extra)).await;
    for (path, body) in [
        ("/v1/responses", responses),
        ("/v1/chat/completions", chat),
        ("/v1/embeddings", embeddings),
    ] {
        let reply = post(&proxy, path, body).await;
        assert_eq!(reply.status, 200, "{path}: {}", reply.body);
    }
    let sent = mock.requests();
    assert_eq!(
        sent[0].query_param("api-version"),
        Some("2025-05-01-preview")
    );
    assert!(
        sent[0]
            .headers
            .keys()
            .all(|k| !k.as_str().starts_with("api-version")),
        "{:?}",
        sent[0]
    );
    assert_azure_request(&sent[1], "gpt-4o-prod", "chat/completions", "2024-06-01");
    assert_azure_request(&sent[2], "embed-large", "embeddings", "2023-05-15");
}

#[tokio::test]
async fn a_base_url_ending_in_openai_v1_uses_azures_v1_surface() {
    let mock = MockUpstream::start().await.unwrap();
    let yaml = format!(
        "channels:\n{}routes:\n  - model_pattern: gpt-4o\n    members: [{{ channel: azure, upstream_model: gpt-4o-prod }}]\n",
        azure_channel(
            "azure",
            &format!("{}/openai/v1/", mock.base_url()),
            KEY,
            ""
        )
    );
    let proxy = start(&yaml).await;
    let reply = post(
        &proxy,
        "/v1/chat/completions",
        r#"{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}"#,
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let r = &mock.requests()[0];
    assert_eq!(r.path, "/openai/v1/chat/completions");
    assert_eq!(r.query, None, "no api-version on the v1 surface");
    assert_eq!(r.json()["model"], "gpt-4o-prod");
    assert_eq!(r.headers["api-key"], KEY);
    assert!(!r.headers.contains_key("authorization"));
}

#[tokio::test]
async fn anthropic_clients_are_translated_to_openais_protocol_at_the_deployment() {
    let mock = MockUpstream::start().await.unwrap();
    mock.on(Matcher::any(), Behavior::ok().text("Bonjour from Azure"));
    let proxy = start(&config(&mock, "")).await;

    let reply = post(&proxy, "/v1/messages", MESSAGES).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let v = reply.json();
    assert_eq!(v["type"], "message");
    assert_eq!(v["model"], "gpt-4o", "the client's model is echoed");
    assert_eq!(v["content"][0]["text"], "Bonjour from Azure");
    assert_eq!(v["stop_reason"], "end_turn");
    assert!(v["usage"]["output_tokens"].as_u64().unwrap() > 0);
    let r = &mock.requests()[0];
    assert_azure_request(r, "gpt-4o-prod", "chat/completions", DEFAULT_VERSION);
    let body = r.json();
    assert_eq!(body["messages"][0]["role"], "user");
    assert_eq!(body["messages"][0]["content"], "hello");
    assert_eq!(body["max_completion_tokens"], 64);

    let reply = post(&proxy, "/v1/messages", MESSAGES_STREAM).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let events = sse_events(&reply.body);
    assert_eq!(events.first(), Some(&"message_start"), "{}", reply.body);
    assert!(
        events.ends_with(&["message_delta", "message_stop"]),
        "{events:?}"
    );
    let text: String = sse_data(&reply.body)
        .iter()
        .filter(|d| d["type"] == "content_block_delta")
        .filter_map(|d| d["delta"]["text"].as_str())
        .collect();
    assert_eq!(text, "Bonjour from Azure");
    let r = &mock.requests()[1];
    assert_azure_request(r, "gpt-4o-prod", "chat/completions", DEFAULT_VERSION);
    assert_eq!(r.json()["stream"], true);
}

#[tokio::test]
async fn gemini_clients_are_translated_to_openais_protocol_at_the_deployment() {
    let mock = MockUpstream::start().await.unwrap();
    mock.on(Matcher::any(), Behavior::ok().text("Bonjour from Azure"));
    let proxy = start(&config(&mock, "")).await;

    let reply = post(&proxy, "/v1beta/models/gpt-4o:generateContent", GEMINI).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let v = reply.json();
    assert_eq!(
        v["candidates"][0]["content"]["parts"][0]["text"],
        "Bonjour from Azure"
    );
    assert_eq!(v["candidates"][0]["finishReason"], "STOP");
    let r = &mock.requests()[0];
    assert_azure_request(r, "gpt-4o-prod", "chat/completions", DEFAULT_VERSION);
    assert_eq!(r.json()["messages"][0]["content"], "hello");
    assert!(r.query_param("alt").is_none());

    let reply = post(
        &proxy,
        "/v1beta/models/gpt-4o:streamGenerateContent?alt=sse",
        GEMINI,
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let text: String = sse_data(&reply.body)
        .iter()
        .filter_map(|d| d["candidates"][0]["content"]["parts"][0]["text"].as_str())
        .collect();
    assert_eq!(text, "Bonjour from Azure", "{}", reply.body);
    let r = &mock.requests()[1];
    assert_azure_request(r, "gpt-4o-prod", "chat/completions", DEFAULT_VERSION);
    assert_eq!(r.json()["stream"], true);
    assert!(
        r.query_param("alt").is_none(),
        "Gemini's alt=sse is not Azure's"
    );
}

/// Two Azure channels (two regions): `eastus` (tried first) and `westus`.
fn two_regions(east: &MockUpstream, west: &MockUpstream) -> String {
    format!(
        "settings:\n  channel_retry_times: 0\nchannels:\n{}{}routes:\n  - model_pattern: gpt-4o\n    members:\n      - {{ channel: eastus, upstream_model: gpt-4o-east, priority: 10 }}\n      - {{ channel: westus, upstream_model: gpt-4o-west, priority: 0 }}\n",
        azure_channel("eastus", &east.base_url(), KEY, ""),
        azure_channel("westus", &west.base_url(), KEY, ""),
    )
}

#[tokio::test]
async fn a_429_fails_over_to_the_next_region_and_the_last_answer_keeps_retry_after() {
    let (east, west) = (
        MockUpstream::start().await.unwrap(),
        MockUpstream::start().await.unwrap(),
    );
    east.on(Matcher::any(), Behavior::status(429).retry_after(7));
    let proxy = start(&two_regions(&east, &west)).await;
    let chat = r#"{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}"#;
    let reply = post(&proxy, "/v1/chat/completions", chat).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.header("x-switchyard-channel"), "westus");
    assert_eq!(reply.attempts(), 2);
    assert_azure_request(
        &east.requests()[0],
        "gpt-4o-east",
        "chat/completions",
        DEFAULT_VERSION,
    );
    assert_azure_request(
        &west.requests()[0],
        "gpt-4o-west",
        "chat/completions",
        DEFAULT_VERSION,
    );

    // Both regions rate limited: the client gets the last answer, Retry-After included, in its
    // own protocol.
    let (east, west) = (
        MockUpstream::start().await.unwrap(),
        MockUpstream::start().await.unwrap(),
    );
    for region in [&east, &west] {
        region.on(
            Matcher::any(),
            Behavior::status(429)
                .retry_after(7)
                .body(r#"{"error":{"code":"429","message":"Requests to the ChatCompletions_Create Operation have exceeded the token rate limit"}}"#),
        );
    }
    let proxy = start(&two_regions(&east, &west)).await;
    let reply = post(&proxy, "/v1/chat/completions", chat).await;
    assert_eq!(reply.status, 429, "{}", reply.body);
    assert_eq!(reply.header("retry-after"), "7");
    assert_eq!(reply.attempts(), 2);
    assert!(reply.body.contains("token rate limit"), "{}", reply.body);
    let proxy = start(&two_regions(&east, &west)).await;
    let reply = post(&proxy, "/v1/messages", MESSAGES).await;
    assert_eq!(reply.status, 429, "{}", reply.body);
    assert_eq!(reply.header("retry-after"), "7");
    let v = reply.json();
    assert_eq!(
        (v["type"].as_str(), v["error"]["type"].as_str()),
        (Some("error"), Some("rate_limit_error")),
        "{v}"
    );
}

#[tokio::test]
async fn azure_client_errors_are_rejected_like_openais() {
    // A content filter refusal: rejected (the next member is tried, the channel's breaker does
    // not count it); with no member left the client gets Azure's own answer.
    let (east, west) = (
        MockUpstream::start().await.unwrap(),
        MockUpstream::start().await.unwrap(),
    );
    let content_filter = json!({"error": {"code": "content_filter", "status": 400,
        "message": "The response was filtered due to the prompt triggering Azure OpenAI's content management policy."}});
    for region in [&east, &west] {
        region.on(
            Matcher::any(),
            Behavior::status(400).body(content_filter.to_string()),
        );
    }
    let proxy = start(&two_regions(&east, &west)).await;
    let chat = r#"{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}"#;
    let reply = post(&proxy, "/v1/chat/completions", chat).await;
    assert_eq!(reply.status, 400, "{}", reply.body);
    assert_eq!(reply.json(), content_filter);
    assert_eq!((reply.attempts(), east.hits(), west.hits()), (2, 1, 1));
    assert!(
        proxy
            .dump()
            .channels
            .iter()
            .all(|c| c.consecutive_failures == 0),
        "a rejection is never counted for the breaker"
    );

    // A deployment the resource does not have is Azure's "model not found": the member is
    // cooled and the next one serves.
    let (east, west) = (
        MockUpstream::start().await.unwrap(),
        MockUpstream::start().await.unwrap(),
    );
    east.on(
        Matcher::any(),
        Behavior::status(404).body(r#"{"error":{"code":"DeploymentNotFound","message":"The API deployment for this resource does not exist. If you created the deployment within the last 5 minutes, please wait a moment and try again."}}"#),
    );
    let proxy = start(&two_regions(&east, &west)).await;
    let reply = post(&proxy, "/v1/chat/completions", chat).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.header("x-switchyard-channel"), "westus");
    let cooled: Vec<i64> = proxy.dump().cooldowns.iter().map(|c| c.member_id).collect();
    assert_eq!(cooled.len(), 1, "{cooled:?}");
    let reply = post(&proxy, "/v1/chat/completions", chat).await;
    assert_eq!(reply.header("x-switchyard-channel"), "westus");
    assert_eq!(east.hits(), 1, "the cooled deployment is not asked again");
}

fn breaker_open(proxy: &Proxy) -> bool {
    proxy
        .dump()
        .channels
        .iter()
        .any(|c| c.channel_id == 1 && c.breaker_open)
}

#[tokio::test]
async fn the_recovery_probe_asks_the_deployment_with_the_channels_key() {
    let mock = MockUpstream::start().await.unwrap();
    let proxy = start(&config(&mock, "")).await;
    proxy
        .store
        .trip_breaker(1, "test", switchyard_data_plane::unix_ms());
    assert!(breaker_open(&proxy));
    assert_eq!(probe_round(&proxy.state).await.channels, vec![1]);
    let requests = mock.requests();
    assert_eq!(requests.len(), 1, "{requests:?}");
    let probe = &requests[0];
    assert_azure_request(probe, "gpt-4o-prod", "chat/completions", DEFAULT_VERSION);
    let body = probe.json();
    assert_eq!(body["messages"][0]["content"], "ping");
    assert_eq!(body["max_completion_tokens"], 1);
    assert!(!breaker_open(&proxy));

    // A failing probe keeps the breaker open.
    mock.on(Matcher::any(), Behavior::status(503));
    proxy
        .store
        .trip_breaker(1, "test", switchyard_data_plane::unix_ms());
    probe_round(&proxy.state).await;
    assert!(breaker_open(&proxy));
    assert_eq!(
        mock.requests()[1].path,
        "/openai/deployments/gpt-4o-prod/chat/completions"
    );
}

#[tokio::test]
async fn a_workload_channel_sends_an_entra_token_refreshed_before_it_expires() {
    let mock = MockUpstream::start().await.unwrap();
    mock.on(
        Matcher::any().credential("entra-1"),
        Behavior::ok().text("first token"),
    );
    mock.on(
        Matcher::any().credential("entra-2"),
        Behavior::ok().text("second token"),
    );
    mock.on(Matcher::any(), Behavior::status(401));
    // Each token lives one second: it is refreshed a fifth of that (200 ms) before it expires.
    let entra = FakeIdentity::start(|n, _| {
        let body =
            format!(r#"{{"token_type":"Bearer","expires_in":1,"access_token":"entra-{n}"}}"#);
        (200, "application/json", body)
    })
    .await;
    let file = temp_file("azure-federated", "federated.assertion.jwt\n");
    let proxy = {
        let _env = identity_env().lock().await;
        set_env(
            &[
                ("AZURE_CLIENT_ID", "11111111-2222-3333-4444-555555555555"),
                ("AZURE_TENANT_ID", "tenant-1"),
                ("AZURE_AUTHORITY_HOST", &entra.url),
                ("AZURE_FEDERATED_TOKEN_FILE", &file),
            ],
            &["AZURE_CLIENT_SECRET"],
        );
        start(&format!(
            "settings:\n  channel_retry_times: 0\nchannels:\n  - name: azure\n    provider: azure\n    base_url: {}\n    auth: workload\nroutes:\n  - model_pattern: gpt-4o\n    members: [{{ channel: azure, upstream_model: gpt-4o-prod }}]\n",
            mock.base_url()
        ))
        .await
    };
    // Concurrent first requests share one token request.
    let replies = futures_util::future::join_all(
        (0..3).map(|_| post(&proxy, "/v1/chat/completions", CHAT_4O)),
    )
    .await;
    for reply in &replies {
        assert_eq!(reply.status, 200, "{}", reply.body);
        assert_eq!(
            reply.json()["choices"][0]["message"]["content"],
            "first token"
        );
    }
    let asked = entra.requests();
    assert_eq!(asked.len(), 1, "one token request for every request");
    assert_eq!(asked[0].path, "/tenant-1/oauth2/v2.0/token");
    for part in [
        "client_id=11111111-2222-3333-4444-555555555555",
        "scope=https%3A%2F%2Fcognitiveservices.azure.com%2F.default",
        "grant_type=client_credentials",
        "client_assertion_type=urn%3Aietf%3Aparams%3Aoauth%3Aclient-assertion-type%3Ajwt-bearer",
        "client_assertion=federated.assertion.jwt",
    ] {
        assert!(asked[0].body.contains(part), "{}", asked[0].body);
    }
    // The token went as a bearer token, no key anywhere.
    let r = &mock.requests()[0];
    assert_eq!(r.headers["authorization"], "Bearer entra-1");
    assert!(!r.headers.contains_key("api-key"), "{r:?}");
    assert_eq!(r.path, "/openai/deployments/gpt-4o-prod/chat/completions");
    // Past its refresh time, before its expiry: the next request gets a new token.
    let refresh_due = asked[0].at + std::time::Duration::from_millis(850);
    tokio::time::sleep_until(refresh_due.into()).await;
    let reply = post(&proxy, "/v1/chat/completions", CHAT_4O).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(
        reply.json()["choices"][0]["message"]["content"],
        "second token"
    );
    let asked = entra.requests();
    assert_eq!(asked.len(), 2);
    assert!(
        asked[1].at < asked[0].at + std::time::Duration::from_secs(1),
        "the token was refreshed before the first one expired"
    );
}

const CHAT_4O: &str = r#"{"model":"gpt-4o","messages":[{"role":"user","content":"hello"}]}"#;
