//! Pass-through routes (`ANY /passthrough/{channel}/{path}`) against a mock upstream on
//! loopback: the channel's credential reaches the upstream and the client's key never does
//! (whichever way the client sent it), the method, path, query and body arrive as sent, the
//! answer comes back as it was (an SSE stream included), Bedrock's signature and Vertex's
//! access token are made for the very request; a path the channel does not list is a 403, a
//! channel that allows none (or is unknown, or out of a team's reach) a 404, a path that could
//! resolve elsewhere upstream a 400; the key's request limits apply; an unreachable upstream
//! and an upstream refusing the channel's key are the gateway's 502s.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;
use http::Method;
use switchyard_mock_upstream::{bedrock, vertex, Behavior, Matcher, MockUpstream};

const UPSTREAM_KEY: &str = "sk-upstream-key-1";
const JOBS: &str =
    r#"{"object":"list","data":[{"id":"ftjob-1","object":"fine_tuning.job"}],"has_more":false}"#;

/// Channel `up` (OpenAI, at `mock`) allowing fine-tuning and files, channel `closed` (no
/// pass-through), a route `m` on `up`; `extra` appended (teams, tokens, limits).
fn config(mock: &MockUpstream, extra: &str) -> String {
    let url = mock.base_url();
    format!(
        "channels:\n{}    passthrough: [\"/v1/fine_tuning/*\", \"/v1/files*\", \"/v1/chat/completions\"]\n{}routes:\n  - model_pattern: m\n    members: [{{ channel: up, upstream_model: gpt-4o-mini }}]\n  - model_pattern: other\n    members: [{{ channel: closed, upstream_model: gpt-4o-mini }}]\n{extra}",
        channel("up", &url, &[UPSTREAM_KEY]),
        channel("closed", &url, &["sk-closed"]),
    )
}

/// `method` on `path` of the proxy with `headers` (no bearer token unless they carry one).
async fn call(
    proxy: &Proxy,
    method: Method,
    path: &str,
    body: &str,
    headers: &[(&str, &str)],
) -> Reply {
    send(
        method,
        &format!("{}{path}", proxy.url),
        None,
        body.as_bytes().to_vec(),
        headers,
    )
    .await
}

fn bearer() -> String {
    format!("Bearer {TOKEN}")
}

/// `GET path` of the proxy with the test key as a bearer token.
async fn get(proxy: &Proxy, path: &str) -> Reply {
    call(
        proxy,
        Method::GET,
        path,
        "",
        &[("authorization", &bearer())],
    )
    .await
}

/// The gateway's error message in `reply` (OpenAI shape).
fn message(reply: &Reply) -> String {
    reply.json()["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// No header value and no query of what the upstream received holds the client's key.
fn assert_no_client_key(r: &switchyard_mock_upstream::RecordedRequest) {
    let leaked = r
        .headers
        .iter()
        .any(|(_, v)| v.to_str().is_ok_and(|v| v.contains(TOKEN)))
        || r.query.as_deref().is_some_and(|q| q.contains(TOKEN));
    assert!(!leaked, "the client's key reached the upstream: {r:?}");
}

#[tokio::test]
async fn the_channels_key_arrives_and_the_clients_never_does_in_any_form() {
    let mock = MockUpstream::start().await.unwrap();
    mock.on(
        Matcher::path("/v1/fine_tuning/jobs"),
        Behavior::ok().body(JOBS),
    );
    let proxy = start(&config(&mock, "")).await;
    let bearer = bearer();
    let forms: [(&[(&str, &str)], &str); 4] = [
        (
            &[("authorization", &bearer)],
            "/passthrough/up/v1/fine_tuning/jobs?limit=2",
        ),
        (
            &[("x-api-key", TOKEN)],
            "/passthrough/up/v1/fine_tuning/jobs?limit=2",
        ),
        (
            &[("x-goog-api-key", TOKEN)],
            "/passthrough/up/v1/fine_tuning/jobs?limit=2",
        ),
        (
            &[],
            &format!("/passthrough/up/v1/fine_tuning/jobs?key={TOKEN}&limit=2"),
        ),
    ];
    for (headers, path) in forms {
        mock.reset();
        mock.on(
            Matcher::path("/v1/fine_tuning/jobs"),
            Behavior::ok().body(JOBS),
        );
        let mut with_cookie = headers.to_vec();
        with_cookie.push(("cookie", "session=client-secret"));
        with_cookie.push(("openai-beta", "assistants=v2"));
        let reply = call(&proxy, Method::GET, path, "", &with_cookie).await;
        assert_eq!(reply.status, 200, "{headers:?}: {}", reply.body);
        assert_eq!(reply.body, JOBS);
        assert_eq!(reply.header("x-switchyard-channel"), "up");
        let requests = mock.requests();
        assert_eq!(requests.len(), 1, "{headers:?}");
        let r = &requests[0];
        assert_eq!(r.method, "GET");
        assert_eq!(r.path, "/v1/fine_tuning/jobs");
        assert_eq!(r.query.as_deref(), Some("limit=2"), "{headers:?}");
        assert_eq!(r.credential.as_deref(), Some(UPSTREAM_KEY), "{headers:?}");
        assert_eq!(
            r.headers["authorization"],
            format!("Bearer {UPSTREAM_KEY}").as_str()
        );
        assert!(!r.headers.contains_key("x-api-key"), "{r:?}");
        assert!(!r.headers.contains_key("x-goog-api-key"), "{r:?}");
        assert!(!r.headers.contains_key("cookie"), "{r:?}");
        assert_eq!(
            r.headers["openai-beta"], "assistants=v2",
            "other headers pass"
        );
        assert_no_client_key(r);
    }
}

#[tokio::test]
async fn a_post_with_a_body_and_a_delete_arrive_as_sent() {
    let mock = MockUpstream::start().await.unwrap();
    let created = r#"{"id":"file-1","object":"file","purpose":"fine-tune"}"#;
    mock.on(
        Matcher::path("/v1/files"),
        Behavior::status(201).body(created),
    );
    mock.on(
        Matcher::path("/v1/files/file-1"),
        Behavior::ok().body(r#"{"id":"file-1","object":"file","deleted":true}"#),
    );
    let proxy = start(&config(&mock, "")).await;
    let body = r#"{"purpose":"fine-tune","note":"kept byte for byte"}"#;
    let reply = post(&proxy, "/passthrough/up/v1/files", body).await;
    assert_eq!(reply.status, 201, "{}", reply.body);
    assert_eq!(reply.body, created);
    assert_eq!(reply.header("content-type"), "application/json");
    let reply = call(
        &proxy,
        Method::DELETE,
        "/passthrough/up/v1/files/file-1",
        "",
        &[("authorization", &bearer())],
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.json()["deleted"], true);
    let requests = mock.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0].method, "POST");
    assert_eq!(&requests[0].body[..], body.as_bytes());
    assert_eq!(requests[0].headers["content-type"], "application/json");
    assert_eq!(requests[1].method, "DELETE");
    assert_eq!(requests[1].path, "/v1/files/file-1");
    for r in &requests {
        assert_eq!(r.credential.as_deref(), Some(UPSTREAM_KEY));
        assert_no_client_key(r);
    }
}

#[tokio::test]
async fn a_path_the_channel_does_not_list_is_403_and_a_closed_or_unknown_channel_404() {
    let mock = MockUpstream::start().await.unwrap();
    let proxy = start(&config(&mock, "")).await;
    let reply = get(&proxy, "/passthrough/up/v1/assistants").await;
    assert_eq!(reply.status, 403, "{}", reply.body);
    assert_eq!(
        reply.json()["error"]["code"],
        "passthrough_path_not_allowed"
    );
    // `/v1/fine_tuning/*` does not cover `/v1/fine_tuning` itself.
    let reply = get(&proxy, "/passthrough/up/v1/fine_tuning").await;
    assert_eq!(reply.status, 403, "{}", reply.body);
    let closed = get(&proxy, "/passthrough/closed/v1/files").await;
    let unknown = get(&proxy, "/passthrough/nope/v1/files").await;
    for reply in [&closed, &unknown] {
        assert_eq!(reply.status, 404, "{}", reply.body);
        assert_eq!(reply.json()["error"]["code"], "passthrough_not_found");
    }
    assert_eq!(closed.body, unknown.body, "which one is never said");
    // A key is needed before anything is said about channels.
    let reply = call(&proxy, Method::GET, "/passthrough/up/v1/files", "", &[]).await;
    assert_eq!(reply.status, 401, "{}", reply.body);
    assert_eq!(mock.hits(), 0, "nothing reached the upstream");
}

#[tokio::test]
async fn a_path_that_could_resolve_elsewhere_upstream_is_refused() {
    let mock = MockUpstream::start().await.unwrap();
    let proxy = start(&config(&mock, "")).await;
    for path in [
        "/passthrough/up/v1/fine_tuning/%2e%2e/%2e%2e/admin",
        "/passthrough/up/v1/fine_tuning/jobs%2F..%2Fx",
        "/passthrough/up/v1/files/./x",
        "/passthrough/up/v1/files//x",
    ] {
        let reply = get(&proxy, path).await;
        assert_eq!(reply.status, 400, "{path}: {}", reply.body);
        assert_eq!(reply.json()["error"]["code"], "invalid_path", "{path}");
    }
    assert_eq!(mock.hits(), 0);
}

#[tokio::test]
async fn a_team_key_reaches_only_the_channels_of_its_routes() {
    let mock = MockUpstream::start().await.unwrap();
    mock.on(
        Matcher::path("/v1/fine_tuning/jobs"),
        Behavior::ok().body(JOBS),
    );
    let extra = "teams:\n  - { name: builders, models: [m] }\n  - { name: others, models: [other] }\ntokens:\n  - { name: builder, token: sk-builder, team: builders }\n  - { name: outsider, token: sk-outsider, team: others }\n";
    let proxy = start(&config(&mock, extra)).await;
    let path = "/passthrough/up/v1/fine_tuning/jobs";
    let reply = call(
        &proxy,
        Method::GET,
        path,
        "",
        &[("authorization", "Bearer sk-builder")],
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let reply = call(
        &proxy,
        Method::GET,
        path,
        "",
        &[("authorization", "Bearer sk-outsider")],
    )
    .await;
    assert_eq!(reply.status, 404, "{}", reply.body);
    assert_eq!(reply.json()["error"]["code"], "passthrough_not_found");
    assert_eq!(mock.hits(), 1);
}

#[tokio::test]
async fn an_sse_answer_passes_through_as_it_came() {
    let mock = MockUpstream::start().await.unwrap();
    let proxy = start(&config(&mock, "")).await;
    let body =
        r#"{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"hello"}]}"#;
    let reply = post(&proxy, "/passthrough/up/v1/chat/completions", body).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert!(
        reply
            .header("content-type")
            .starts_with("text/event-stream"),
        "{:?}",
        reply.headers
    );
    let events: Vec<&str> = reply
        .body
        .lines()
        .filter(|l| l.starts_with("data: "))
        .collect();
    assert!(events.len() > 2, "{}", reply.body);
    assert_eq!(events.last(), Some(&"data: [DONE]"));
    // The model is the one the client named, untouched (no route, no rewrite).
    assert!(events[0].contains("gpt-4o-mini"), "{}", events[0]);
    let requests = mock.requests();
    assert_eq!(&requests[0].body[..], body.as_bytes());
}

/// A pass-through answer whose upstream stalls longer than the idle timeout is cut: the
/// client never gets the rest of it (the gateway does not speak inside a body it passes).
#[tokio::test]
async fn a_stalled_pass_through_answer_is_cut_at_the_idle_timeout() {
    let mock = MockUpstream::start().await.unwrap();
    mock.on(
        Matcher::path("/v1/chat/completions"),
        Behavior::ok().stream(3, std::time::Duration::from_secs(5)),
    );
    let yaml = format!(
        "settings:\n  stream_idle_timeout_ms: 200\n{}",
        config(&mock, "")
    );
    let proxy = start(&yaml).await;
    let body =
        r#"{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
    let reply = post(&proxy, "/passthrough/up/v1/chat/completions", body).await;
    assert_eq!(reply.status, 200, "the head had come");
    assert!(!reply.body.contains("[DONE]"), "{}", reply.body);
}

#[tokio::test]
async fn the_keys_request_limit_counts_pass_through_requests() {
    let mock = MockUpstream::start().await.unwrap();
    mock.on(
        Matcher::path("/v1/fine_tuning/jobs"),
        Behavior::ok().body(JOBS),
    );
    clear_of_a_window_end(std::time::Duration::from_secs(10)).await;
    let extra = format!("tokens:\n  - {{ name: app, token: {TOKEN} }}\nlimits:\n  - {{ token: app, metric: requests, window: minute, value: 1 }}\n");
    let proxy = start(&config(&mock, &extra)).await;
    let path = "/passthrough/up/v1/fine_tuning/jobs";
    let first = get(&proxy, path).await;
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(first.header("x-ratelimit-remaining-requests"), "0");
    let second = get(&proxy, path).await;
    assert_eq!(second.status, 429, "{}", second.body);
    assert_eq!(second.json()["error"]["code"], "rate_limit_exceeded");
    assert_eq!(mock.hits(), 1);
}

#[tokio::test]
async fn an_unreachable_upstream_and_a_refused_channel_key_are_the_gateways_502() {
    let mock = MockUpstream::start().await.unwrap();
    mock.on(Matcher::path("/v1/files"), Behavior::status(401));
    // A port nothing listens on.
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let yaml = format!(
        "channels:\n{}    passthrough: [\"/*\"]\n{}    passthrough: [\"/*\"]\n",
        channel("gone", &format!("http://{closed}"), &["k"]),
        channel("up", &mock.base_url(), &[UPSTREAM_KEY]),
    );
    let proxy = start(&yaml).await;
    let reply = get(&proxy, "/passthrough/gone/v1/files").await;
    assert_eq!(reply.status, 502, "{}", reply.body);
    assert_eq!(reply.json()["error"]["code"], "upstream_unreachable");
    assert!(message(&reply).contains("`refused`"), "{}", reply.body);
    let reply = get(&proxy, "/passthrough/up/v1/files").await;
    assert_eq!(reply.status, 502, "{}", reply.body);
    assert_eq!(reply.json()["error"]["code"], "upstream_auth_failed");
    assert!(message(&reply).contains("`up`"), "{}", reply.body);
    // Counted under the endpoint label `passthrough` and the channel.
    let metrics = proxy.state.metrics.render();
    assert!(
        metrics.contains(r#"switchyard_requests_total{endpoint="passthrough",route="",channel="up",code="5xx"} 1"#),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_bedrock_channel_signs_the_very_request_passed_through() {
    let mock = MockUpstream::start().await.unwrap();
    let model = "anthropic.claude-3-5-haiku-20241022-v1%3A0";
    let yaml = format!(
        "channels:\n  - name: aws\n    provider: bedrock\n    base_url: {}\n    credentials: ['{}']\n    passthrough: [\"/model/*\"]\n",
        mock.base_url(),
        mock.bedrock_credential()
    );
    let proxy = start(&yaml).await;
    let body = r#"{"messages":[{"role":"user","content":[{"text":"hello"}]}],"inferenceConfig":{"maxTokens":16}}"#;
    let path = format!("/passthrough/aws/model/{model}/converse");
    let reply = post(&proxy, &path, body).await;
    // The mock verifies the signature: a wrong one is Bedrock's 403, which would be a 502 here.
    assert_eq!(reply.status, 200, "{}", reply.body);
    let requests = mock.requests();
    let r = &requests[0];
    assert_eq!(r.path, format!("/model/{model}/converse"));
    assert_eq!(r.credential.as_deref(), Some(bedrock::TEST_ACCESS_KEY_ID));
    assert_eq!(
        &r.body[..],
        body.as_bytes(),
        "the body is the client's, not a translation"
    );
    assert_no_client_key(r);
}

#[tokio::test]
async fn a_vertex_channel_sends_an_access_token_from_its_key() {
    let mock = MockUpstream::start().await.unwrap();
    let yaml = format!(
        "channels:\n  - name: gcp\n    provider: vertex\n    base_url: {}\n    credentials: ['{}']\n    passthrough: [\"/v1/projects/*\"]\n",
        mock.base_url(),
        mock.vertex_service_account()
    );
    let proxy = start(&yaml).await;
    let path = format!(
        "/passthrough/gcp/v1/projects/{}/locations/us-central1/publishers/google/models/gemini-2.5-pro:countTokens",
        vertex::TEST_PROJECT
    );
    let body = r#"{"contents":[{"role":"user","parts":[{"text":"hello"}]}]}"#;
    let reply = call(
        &proxy,
        Method::POST,
        &path,
        body,
        &[("x-goog-api-key", TOKEN)],
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert!(reply.json()["totalTokens"].is_number(), "{}", reply.body);
    let requests = mock.requests();
    let r = requests
        .iter()
        .find(|r| r.path.ends_with(":countTokens"))
        .unwrap();
    assert!(
        r.credential
            .as_deref()
            .is_some_and(|c| c.starts_with("ya29.mock-")),
        "{r:?}"
    );
    assert_no_client_key(r);
    assert_eq!(mock.vertex_token_exchanges(), 1);
}

const SDK_SCRIPT: &str = r#"
import json, sys
from openai import OpenAI

client = OpenAI(base_url=sys.argv[1] + "/passthrough/up/v1", api_key=sys.argv[2], max_retries=0)
jobs = client.fine_tuning.jobs.list(limit=2)
raw = client.fine_tuning.jobs.with_raw_response.list(limit=2)
try:
    client.batches.list()
    denied = None
except Exception as e:
    denied = [getattr(e, "status_code", None), getattr(e, "code", None)]
print(json.dumps({
    "ids": [job.id for job in jobs.data],
    "channel": raw.headers.get("x-switchyard-channel"),
    "denied": denied,
}))
"#;

/// The official OpenAI Python SDK reaches an endpoint the gateway does not model (fine-tuning
/// jobs) through a pass-through base URL, and gets the refusal of an unlisted path as its own
/// `PermissionDeniedError`. `SWITCHYARD_TEST_PYTHON` must name a python with `openai`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_python_sdk_lists_fine_tuning_jobs_through_a_pass_through_base_url() {
    let mock = MockUpstream::start().await.unwrap();
    mock.on(
        Matcher::path("/v1/fine_tuning/jobs"),
        Behavior::ok().body(JOBS),
    );
    let proxy = start(&config(&mock, "")).await;
    let result = run_python(&proxy, SDK_SCRIPT).await;
    assert_eq!(result["ids"], serde_json::json!(["ftjob-1"]));
    assert_eq!(result["channel"], "up");
    assert_eq!(
        result["denied"],
        serde_json::json!([403, "passthrough_path_not_allowed"])
    );
    let requests = mock.requests();
    assert_eq!(
        requests.len(),
        2,
        "two listings; the refused path never left"
    );
    for r in &requests {
        assert_eq!(r.path, "/v1/fine_tuning/jobs");
        assert_eq!(r.query.as_deref(), Some("limit=2"));
        assert_eq!(r.credential.as_deref(), Some(UPSTREAM_KEY));
        assert_no_client_key(r);
    }
}
