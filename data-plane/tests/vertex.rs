//! Google Vertex AI channels (`provider: vertex`) against a mock upstream on loopback: Gemini's
//! protocol at Vertex's project/location model paths, authorized with an access token the proxy
//! obtains from the credential's service-account key at the key's token endpoint (the mock's,
//! which verifies the signed assertion). OpenAI, Anthropic and Gemini clients, plain and
//! streamed, tools; token caching, refresh and refusal; 429 failover with Retry-After; the
//! recovery probe; and the assertion checked by another JWT library (PyJWT) than the signer.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::*;
use serde_json::Value;
use switchyard_data_plane::probe::probe_round;
use switchyard_mock_upstream::{vertex, Behavior, Matcher, MockUpstream, RecordedRequest};

const GEMINI: &str = r#"{"contents":[{"role":"user","parts":[{"text":"hello"}]}]}"#;
const MESSAGES: &str =
    r#"{"model":"gemini-pro","max_tokens":64,"messages":[{"role":"user","content":"hello"}]}"#;
const MESSAGES_STREAM: &str = r#"{"model":"gemini-pro","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"hello"}]}"#;
const CHAT: &str = r#"{"model":"gemini-pro","messages":[{"role":"user","content":"hello"}]}"#;
const CHAT_STREAM: &str =
    r#"{"model":"gemini-pro","stream":true,"messages":[{"role":"user","content":"hello"}]}"#;
const MODEL: &str = "gemini-2.5-pro";

/// A Vertex channel block: `base_url`, one credential (a key file, YAML single-quoted).
fn vertex_channel(name: &str, base_url: &str, key_file: &str) -> String {
    assert!(!key_file.contains('\''));
    format!("  - name: {name}\n    provider: vertex\n    base_url: {base_url}\n    credentials: ['{key_file}']\n")
}

/// One Vertex channel `vertex` at `mock` with its registered key; route `gemini-pro` →
/// `gemini-2.5-pro`.
fn config(mock: &MockUpstream) -> String {
    format!(
        "settings:\n  channel_retry_times: 0\nchannels:\n{}routes:\n  - model_pattern: gemini-pro\n    members: [{{ channel: vertex, upstream_model: {MODEL} }}]\n",
        vertex_channel("vertex", &mock.base_url(), &mock.vertex_service_account())
    )
}

/// Checks what Vertex received: the model path for `action` in the key's project and the
/// default location, a bearer token the mock issued, and no client token or API key.
fn assert_vertex_request(r: &RecordedRequest, action: &str) {
    assert_eq!(
        r.path,
        format!(
            "/v1/projects/{}/locations/us-central1/publishers/google/models/{MODEL}:{action}",
            vertex::TEST_PROJECT
        ),
        "{r:?}"
    );
    assert!(
        r.credential
            .as_deref()
            .is_some_and(|c| c.starts_with("ya29.mock-")),
        "{r:?}"
    );
    assert!(!r.headers.contains_key("x-goog-api-key"), "{r:?}");
    let leaked = r
        .headers
        .iter()
        .any(|(_, v)| v.to_str().is_ok_and(|v| v.contains(TOKEN)))
        || r.query.as_deref().is_some_and(|q| q.contains(TOKEN));
    assert!(!leaked, "the client's token reached Vertex: {r:?}");
    assert_eq!(r.model.as_deref(), Some(MODEL));
}

fn sse_data(body: &str) -> Vec<Value> {
    body.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

#[tokio::test]
async fn gemini_clients_reach_the_vertex_model_path_with_one_access_token() {
    let mock = MockUpstream::start().await.unwrap();
    mock.on(Matcher::any(), Behavior::ok().text("Bonjour from Vertex"));
    let proxy = start(&config(&mock)).await;

    // The client's own Gemini key is not forwarded.
    let reply = post_with(
        &proxy,
        "/v1beta/models/gemini-pro:generateContent",
        GEMINI,
        &[("x-goog-api-key", "AIza-client")],
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.header("x-switchyard-channel"), "vertex");
    assert_eq!(
        reply.json()["candidates"][0]["content"]["parts"][0]["text"],
        "Bonjour from Vertex"
    );
    assert_vertex_request(&mock.requests()[0], "generateContent");

    let reply = post(
        &proxy,
        "/v1beta/models/gemini-pro:streamGenerateContent?alt=sse",
        GEMINI,
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let text: String = sse_data(&reply.body)
        .iter()
        .filter_map(|d| d["candidates"][0]["content"]["parts"][0]["text"].as_str())
        .collect();
    assert_eq!(text, "Bonjour from Vertex");
    let r = &mock.requests()[1];
    assert_vertex_request(r, "streamGenerateContent");
    assert_eq!(r.query_param("alt"), Some("sse"));

    // countTokens has the same path on Vertex.
    let reply = post(&proxy, "/v1beta/models/gemini-pro:countTokens", GEMINI).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_vertex_request(&mock.requests()[2], "countTokens");
    // One exchange for all of them: the token is cached.
    assert_eq!(mock.vertex_token_exchanges(), 1);
}

#[tokio::test]
async fn openai_and_anthropic_clients_are_translated_to_gemini_at_vertex() {
    let mock = MockUpstream::start().await.unwrap();
    mock.on(
        Matcher::any().model(MODEL),
        Behavior::ok().text("Bonjour from Vertex").times(4),
    );
    mock.on(
        Matcher::any().model(MODEL),
        Behavior::ok().tool_call("get_weather", r#"{"city":"Paris"}"#),
    );
    let proxy = start(&config(&mock)).await;

    let reply = post(&proxy, "/v1/chat/completions", CHAT).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let v = reply.json();
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["model"], "gemini-pro");
    assert_eq!(v["choices"][0]["message"]["content"], "Bonjour from Vertex");
    let r = &mock.requests()[0];
    assert_vertex_request(r, "generateContent");
    assert_eq!(r.json()["contents"][0]["parts"][0]["text"], "hello");

    let reply = post(&proxy, "/v1/chat/completions", CHAT_STREAM).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert!(reply.body.trim_end().ends_with("data: [DONE]"));
    let text: String = sse_data(&reply.body)
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(text, "Bonjour from Vertex");
    assert_vertex_request(&mock.requests()[1], "streamGenerateContent");

    let reply = post(&proxy, "/v1/messages", MESSAGES).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let v = reply.json();
    assert_eq!(v["type"], "message");
    assert_eq!(v["content"][0]["text"], "Bonjour from Vertex");
    assert_vertex_request(&mock.requests()[2], "generateContent");

    let reply = post(&proxy, "/v1/messages", MESSAGES_STREAM).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let text: String = sse_data(&reply.body)
        .iter()
        .filter(|d| d["type"] == "content_block_delta")
        .filter_map(|d| d["delta"]["text"].as_str())
        .collect();
    assert_eq!(text, "Bonjour from Vertex");
    assert_vertex_request(&mock.requests()[3], "streamGenerateContent");

    // Tools: declared in Gemini's shape upstream, the call back in OpenAI's.
    let tools = r#"{"model":"gemini-pro","messages":[{"role":"user","content":"weather in Paris?"}],"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}]}"#;
    let reply = post(&proxy, "/v1/chat/completions", tools).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let v = reply.json();
    let call = &v["choices"][0]["message"]["tool_calls"][0];
    assert_eq!(call["function"]["name"], "get_weather");
    let args: Value =
        serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(args["city"], "Paris");
    let sent = mock.requests()[4].json();
    assert_eq!(
        sent["tools"][0]["functionDeclarations"][0]["name"],
        "get_weather"
    );
    assert_eq!(mock.vertex_token_exchanges(), 1);

    // Embeddings are not offered on Vertex (its `:predict` is another protocol): the member is
    // skipped as it is for Gemini, and with nothing else left the client hears why.
    let reply = post(
        &proxy,
        "/v1/embeddings",
        r#"{"model":"gemini-pro","input":"a"}"#,
    )
    .await;
    assert_eq!(reply.status, 400, "{}", reply.body);
    assert!(reply.body.contains("embeddings"), "{}", reply.body);
    assert_eq!(mock.requests().len(), 5, "nothing sent");
}

#[tokio::test]
async fn concurrent_requests_share_one_token_exchange() {
    let mock = MockUpstream::start().await.unwrap();
    let proxy = start(&config(&mock)).await;
    let replies = futures_util::future::join_all(
        (0..24).map(|_| post(&proxy, "/v1beta/models/gemini-pro:generateContent", GEMINI)),
    )
    .await;
    assert!(replies.iter().all(|r| r.status == 200));
    assert_eq!(mock.vertex_token_exchanges(), 1);
    let tokens: std::collections::HashSet<_> =
        mock.requests().into_iter().map(|r| r.credential).collect();
    assert_eq!(tokens.len(), 1, "{tokens:?}");
}

#[tokio::test]
async fn a_token_is_refreshed_before_it_expires() {
    let mock = MockUpstream::start().await.unwrap();
    mock.set_vertex_token_lifetime(Duration::from_secs(1));
    let proxy = start(&config(&mock)).await;
    // Requests keep succeeding while the one-second tokens are replaced.
    let mut refreshed = false;
    for _ in 0..200 {
        let reply = post(&proxy, "/v1beta/models/gemini-pro:generateContent", GEMINI).await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        if mock.vertex_token_exchanges() >= 2 {
            refreshed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(refreshed, "no second exchange");
    let tokens: std::collections::HashSet<_> =
        mock.requests().into_iter().map(|r| r.credential).collect();
    // Every request above got a 200: each token was used before it expired.
    assert!(tokens.len() >= 2, "{tokens:?}");
}

/// Two Vertex channels, `first` (tried first) and `second`, each with its key file.
fn two_channels(first: (&str, &str), second: (&str, &str)) -> String {
    format!(
        "settings:\n  channel_retry_times: 0\nchannels:\n{}{}routes:\n  - model_pattern: gemini-pro\n    members:\n      - {{ channel: first, upstream_model: {MODEL}, priority: 10 }}\n      - {{ channel: second, upstream_model: {MODEL}, priority: 0 }}\n",
        vertex_channel("first", first.0, first.1),
        vertex_channel("second", second.0, second.1),
    )
}

#[tokio::test]
async fn a_refused_key_fails_over_and_is_never_the_clients_401() {
    let (bad, good) = (
        MockUpstream::start().await.unwrap(),
        MockUpstream::start().await.unwrap(),
    );
    let proxy = start(&two_channels(
        (&bad.base_url(), &bad.vertex_unregistered_service_account()),
        (&good.base_url(), &good.vertex_service_account()),
    ))
    .await;
    let reply = post(&proxy, "/v1beta/models/gemini-pro:generateContent", GEMINI).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.header("x-switchyard-channel"), "second");
    assert_eq!(reply.attempts(), 2);
    assert_eq!(
        (bad.vertex_token_refusals(), bad.vertex_token_exchanges()),
        (1, 0)
    );
    assert!(
        bad.requests().is_empty(),
        "no model request without a token"
    );
    assert_vertex_request(&good.requests()[0], "generateContent");

    // Only the refused key left: the client gets a 502 naming the channel, the service account
    // and the endpoint's reason (never the provider's 401, which it would take for its own key's
    // refusal), never the key or an assertion.
    let bad = MockUpstream::start().await.unwrap();
    let yaml = format!(
        "settings:\n  channel_retry_times: 0\nchannels:\n{}routes:\n  - model_pattern: gemini-pro\n    members: [{{ channel: vertex, upstream_model: {MODEL} }}]\n",
        vertex_channel(
            "vertex",
            &bad.base_url(),
            &bad.vertex_unregistered_service_account()
        )
    );
    let proxy = start(&yaml).await;
    let reply = post(&proxy, "/v1beta/models/gemini-pro:generateContent", GEMINI).await;
    assert_eq!(reply.status, 502, "{}", reply.body);
    let v = reply.json();
    assert_eq!(v["error"]["status"], "INTERNAL");
    let message = v["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(vertex::TEST_CLIENT_EMAIL)
            && message.contains("invalid_grant: Invalid JWT Signature."),
        "{message}"
    );
    let assertion = bad.vertex_last_assertion().unwrap();
    for secret in ["PRIVATE KEY", "MII", &assertion[..40]] {
        assert!(!reply.body.contains(secret), "{}", reply.body);
    }
    // An OpenAI client hears it in OpenAI's shape.
    let reply = post(&proxy, "/v1/chat/completions", CHAT).await;
    assert_eq!(reply.status, 502, "{}", reply.body);
    assert_eq!(reply.json()["error"]["code"], "upstream_auth_failed");
    assert!(reply.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("token exchange"));
}

#[tokio::test]
async fn an_unreachable_token_endpoint_fails_over_like_an_unreachable_upstream() {
    let good = MockUpstream::start().await.unwrap();
    let gone =
        vertex::service_account_json("http://127.0.0.1:9/token", vertex::TEST_PRIVATE_KEY_PEM);
    let proxy = start(&two_channels(
        (&good.base_url(), &gone),
        (&good.base_url(), &good.vertex_service_account()),
    ))
    .await;
    let reply = post(&proxy, "/v1/chat/completions", CHAT).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.header("x-switchyard-channel"), "second");
    assert_eq!(good.requests().len(), 1);
}

#[tokio::test]
async fn a_429_fails_over_and_the_last_answer_keeps_retry_after() {
    let (first, second) = (
        MockUpstream::start().await.unwrap(),
        MockUpstream::start().await.unwrap(),
    );
    first.on(Matcher::any(), Behavior::status(429).retry_after(7));
    let proxy = start(&two_channels(
        (&first.base_url(), &first.vertex_service_account()),
        (&second.base_url(), &second.vertex_service_account()),
    ))
    .await;
    let reply = post(&proxy, "/v1beta/models/gemini-pro:generateContent", GEMINI).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.header("x-switchyard-channel"), "second");
    assert_vertex_request(&first.requests()[0], "generateContent");
    assert_vertex_request(&second.requests()[0], "generateContent");

    // Both limited: the last answer, Retry-After and Vertex's error shape kept (translated for
    // an Anthropic client).
    let (first, second) = (
        MockUpstream::start().await.unwrap(),
        MockUpstream::start().await.unwrap(),
    );
    for upstream in [&first, &second] {
        upstream.on(
            Matcher::any(),
            Behavior::status(429).retry_after(7).body(
                r#"{"error":{"code":429,"message":"Resource exhausted. Please try again later.","status":"RESOURCE_EXHAUSTED"}}"#,
            ),
        );
    }
    let proxy = start(&two_channels(
        (&first.base_url(), &first.vertex_service_account()),
        (&second.base_url(), &second.vertex_service_account()),
    ))
    .await;
    let reply = post(&proxy, "/v1beta/models/gemini-pro:generateContent", GEMINI).await;
    assert_eq!(reply.status, 429, "{}", reply.body);
    assert_eq!(reply.header("retry-after"), "7");
    assert_eq!(reply.json()["error"]["status"], "RESOURCE_EXHAUSTED");
    let reply = post(&proxy, "/v1/messages", MESSAGES).await;
    assert_eq!(reply.status, 429, "{}", reply.body);
    assert_eq!(reply.header("retry-after"), "7");
    assert_eq!(reply.json()["error"]["type"], "rate_limit_error");
}

#[tokio::test]
async fn the_base_url_may_name_the_project_and_location() {
    let mock = MockUpstream::start().await.unwrap();
    let yaml = format!(
        "channels:\n{}routes:\n  - model_pattern: gemini-pro\n    members: [{{ channel: vertex, upstream_model: {MODEL} }}]\n",
        vertex_channel(
            "vertex",
            &format!(
                "{}/v1/projects/other-project/locations/europe-west4/",
                mock.base_url()
            ),
            &mock.vertex_service_account()
        )
    );
    let proxy = start(&yaml).await;
    let reply = post(&proxy, "/v1beta/models/gemini-pro:generateContent", GEMINI).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(
        mock.requests()[0].path,
        format!(
            "/v1/projects/other-project/locations/europe-west4/publishers/google/models/{MODEL}:generateContent"
        )
    );
}

fn breaker_open(proxy: &Proxy) -> bool {
    proxy
        .dump()
        .channels
        .iter()
        .any(|c| c.channel_id == 1 && c.breaker_open)
}

#[tokio::test]
async fn the_recovery_probe_asks_the_model_path_with_an_access_token() {
    let mock = MockUpstream::start().await.unwrap();
    let proxy = start(&config(&mock)).await;
    proxy
        .store
        .trip_breaker(1, "test", switchyard_data_plane::unix_ms());
    assert!(breaker_open(&proxy));
    assert_eq!(probe_round(&proxy.state).await.channels, vec![1]);
    let requests = mock.requests();
    assert_eq!(requests.len(), 1, "{requests:?}");
    assert_vertex_request(&requests[0], "generateContent");
    assert_eq!(requests[0].json()["generationConfig"]["maxOutputTokens"], 1);
    assert!(!breaker_open(&proxy));

    // A key the token endpoint refuses fails the probe: the breaker stays open.
    let bad = MockUpstream::start().await.unwrap();
    let yaml = format!(
        "channels:\n{}routes:\n  - model_pattern: gemini-pro\n    members: [{{ channel: vertex, upstream_model: {MODEL} }}]\n",
        vertex_channel(
            "vertex",
            &bad.base_url(),
            &bad.vertex_unregistered_service_account()
        )
    );
    let proxy = start(&yaml).await;
    proxy
        .store
        .trip_breaker(1, "test", switchyard_data_plane::unix_ms());
    probe_round(&proxy.state).await;
    assert!(breaker_open(&proxy));
    assert_eq!(bad.vertex_token_refusals(), 1);
    assert!(bad.requests().is_empty());
}

#[tokio::test]
async fn the_assertion_verifies_with_another_jwt_library() {
    let mock = MockUpstream::start().await.unwrap();
    let proxy = start(&config(&mock)).await;
    let reply = post(&proxy, "/v1beta/models/gemini-pro:generateContent", GEMINI).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let assertion = mock.vertex_last_assertion().unwrap();
    let python = std::env::var("SWITCHYARD_TEST_PYTHON").unwrap_or_else(|_| {
        panic!("SWITCHYARD_TEST_PYTHON is not set: it must name a python with PyJWT[crypto] (scripts/test sets it up)")
    });
    // PyJWT with `cryptography` checks the RS256 signature with the service account's public
    // key, the audience (the token endpoint) and the expiry, then prints the header and claims.
    let script = r#"
import json, sys, jwt
token, key, audience = sys.argv[1], sys.argv[2], sys.argv[3]
claims = jwt.decode(token, key, algorithms=["RS256"], audience=audience,
                    options={"require": ["iss", "sub", "aud", "iat", "exp"]})
print(json.dumps({"header": jwt.get_unverified_header(token), "claims": claims}))
"#;
    let output = std::process::Command::new(python)
        .args([
            "-c",
            script,
            &assertion,
            vertex::TEST_PUBLIC_KEY_PEM,
            &mock.vertex_token_uri(),
        ])
        .output()
        .expect("run SWITCHYARD_TEST_PYTHON");
    assert!(
        output.status.success(),
        "PyJWT refused the assertion: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let checked: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(checked["header"]["alg"], "RS256");
    assert_eq!(checked["header"]["typ"], "JWT");
    assert_eq!(
        checked["header"]["kid"],
        "0123456789abcdef0123456789abcdef01234567"
    );
    let claims = &checked["claims"];
    assert_eq!(claims["iss"], vertex::TEST_CLIENT_EMAIL);
    assert_eq!(claims["sub"], vertex::TEST_CLIENT_EMAIL);
    assert_eq!(claims["aud"], mock.vertex_token_uri());
    assert_eq!(claims["scope"], vertex::SCOPE);
    assert_eq!(
        claims["exp"].as_u64().unwrap() - claims["iat"].as_u64().unwrap(),
        3600
    );
    // A tampered assertion is refused by PyJWT too (the check is real).
    let at = assertion.rfind('.').unwrap() + 10;
    let flipped = if &assertion[at..=at] == "A" { "B" } else { "A" };
    let tampered = format!("{}{flipped}{}", &assertion[..at], &assertion[at + 1..]);
    let output = std::process::Command::new(std::env::var("SWITCHYARD_TEST_PYTHON").unwrap())
        .args([
            "-c",
            script,
            &tampered,
            vertex::TEST_PUBLIC_KEY_PEM,
            &mock.vertex_token_uri(),
        ])
        .output()
        .unwrap();
    assert!(!output.status.success());
}

/// A Vertex channel with `auth: workload` at `mock`, its project in the base URL; route
/// `gemini-pro` → `gemini-2.5-pro`.
fn workload_config(mock: &MockUpstream) -> String {
    format!(
        "settings:\n  channel_retry_times: 0\nchannels:\n  - name: vertex\n    provider: vertex\n    base_url: {}/v1/projects/{}/locations/us-central1\n    auth: workload\nroutes:\n  - model_pattern: gemini-pro\n    members: [{{ channel: vertex, upstream_model: {MODEL} }}]\n",
        mock.base_url(),
        vertex::TEST_PROJECT
    )
}

#[tokio::test]
async fn a_workload_channel_uses_the_application_default_service_account() {
    let mock = MockUpstream::start().await.unwrap();
    mock.on(Matcher::any(), Behavior::ok().text("Hello from ADC"));
    let file = temp_file("adc-service-account", &mock.vertex_service_account());
    let proxy = {
        let _env = identity_env().lock().await;
        set_env(
            &[("GOOGLE_APPLICATION_CREDENTIALS", &file)],
            &["GCE_METADATA_HOST"],
        );
        start(&workload_config(&mock)).await
    };
    let reply = post(&proxy, "/v1/chat/completions", CHAT).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_vertex_request(&mock.requests()[0], "generateContent");
    assert_eq!(mock.vertex_token_exchanges(), 1);
}

#[tokio::test]
async fn a_workload_channel_uses_the_metadata_servers_token() {
    let mock = MockUpstream::start().await.unwrap();
    mock.on(Matcher::any(), Behavior::ok().text("Hello from GKE"));
    // A token the mock issued, as the metadata server of a GKE node would hand one out.
    let source = switchyard_upstream::vertex::token_source(&mock.vertex_service_account()).unwrap();
    let client = switchyard_upstream::build_client(Duration::from_secs(5));
    let bearer = source
        .bearer(&client, Duration::from_secs(5))
        .await
        .unwrap();
    let token = bearer
        .to_str()
        .unwrap()
        .trim_start_matches("Bearer ")
        .to_owned();
    let metadata = FakeIdentity::start(move |_, _| {
        let body =
            format!(r#"{{"access_token":"{token}","expires_in":3599,"token_type":"Bearer"}}"#);
        (200, "application/json", body)
    })
    .await;
    let proxy = {
        let _env = identity_env().lock().await;
        let host = metadata.url.trim_start_matches("http://").to_owned();
        set_env(
            &[("GCE_METADATA_HOST", &host)],
            &["GOOGLE_APPLICATION_CREDENTIALS"],
        );
        start(&workload_config(&mock)).await
    };
    for _ in 0..2 {
        let reply = post(&proxy, "/v1/chat/completions", CHAT).await;
        assert_eq!(reply.status, 200, "{}", reply.body);
    }
    assert_vertex_request(&mock.requests()[0], "generateContent");
    let asked = metadata.requests();
    assert_eq!(asked.len(), 1, "the token is cached");
    assert_eq!(asked[0].method, "GET");
    assert_eq!(
        asked[0].path,
        "/computeMetadata/v1/instance/service-accounts/default/token"
    );
    assert_eq!(asked[0].headers["metadata-flavor"], "Google");
}
