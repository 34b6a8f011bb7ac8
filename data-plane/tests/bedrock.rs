//! AWS Bedrock channels (`provider: bedrock`) against a mock upstream on loopback: the Converse
//! API at `/model/{modelId}/converse` and `/converse-stream` (AWS's binary event stream), every
//! request signed with AWS Signature Version 4 from the credential's access key, which the mock
//! verifies. Anthropic, OpenAI and Gemini clients, plain and streamed, tools with a tool-result
//! round trip, token counts; errors with their status and Retry-After; a refused signature fails
//! over; the recovery probe; and the signature checked by AWS's own Python signer (botocore).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;
use serde_json::{json, Value};
use switchyard_data_plane::probe::probe_round;
use switchyard_mock_upstream::{bedrock, Behavior, Matcher, MockUpstream, RecordedRequest};

const MODEL: &str = "anthropic.claude-3-5-haiku-20241022-v1:0";
const MODEL_IN_PATH: &str = "anthropic.claude-3-5-haiku-20241022-v1%3A0";
const MESSAGES: &str =
    r#"{"model":"claude-haiku","max_tokens":64,"messages":[{"role":"user","content":"hello"}]}"#;
const MESSAGES_STREAM: &str = r#"{"model":"claude-haiku","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"hello"}]}"#;
const CHAT: &str = r#"{"model":"claude-haiku","messages":[{"role":"user","content":"hello"}]}"#;
const CHAT_STREAM: &str =
    r#"{"model":"claude-haiku","stream":true,"messages":[{"role":"user","content":"hello"}]}"#;
const GEMINI: &str = r#"{"contents":[{"role":"user","parts":[{"text":"hello"}]}]}"#;

/// A Bedrock channel block: `base_url`, one credential (JSON, YAML single-quoted).
fn bedrock_channel(name: &str, base_url: &str, credential: &str) -> String {
    assert!(!credential.contains('\''));
    format!("  - name: {name}\n    provider: bedrock\n    base_url: {base_url}\n    credentials: ['{credential}']\n")
}

fn route(members: &str) -> String {
    format!("routes:\n  - model_pattern: claude-haiku\n    members:\n{members}")
}

/// One Bedrock channel `bedrock` at `mock` with its first test key.
fn config(mock: &MockUpstream) -> String {
    format!(
        "settings:\n  channel_retry_times: 0\nchannels:\n{}{}",
        bedrock_channel("bedrock", &mock.base_url(), &mock.bedrock_credential()),
        route(&format!(
            "      - {{ channel: bedrock, upstream_model: \"{MODEL}\" }}\n"
        ))
    )
}

/// Two Bedrock channels, `first` (tried first) and `second`, each with its credential.
fn two_channels(first: (&str, &str), second: (&str, &str)) -> String {
    format!(
        "settings:\n  channel_retry_times: 0\nchannels:\n{}{}{}",
        bedrock_channel("first", first.0, first.1),
        bedrock_channel("second", second.0, second.1),
        route(&format!(
            "      - {{ channel: first, upstream_model: \"{MODEL}\", priority: 10 }}\n      - {{ channel: second, upstream_model: \"{MODEL}\", priority: 0 }}\n"
        ))
    )
}

/// Checks what Bedrock received: the model path for `operation`, a SigV4 signature by the test
/// key for `bedrock` in us-east-1 (the mock verified it), no client token or API key.
fn assert_bedrock_request(r: &RecordedRequest, operation: &str) {
    assert_eq!(
        r.path,
        format!("/model/{MODEL_IN_PATH}/{operation}"),
        "{r:?}"
    );
    assert_eq!(r.method, "POST");
    assert_eq!(
        r.credential.as_deref(),
        Some(bedrock::TEST_ACCESS_KEY_ID),
        "{r:?}"
    );
    let auth = r.headers["authorization"].to_str().unwrap();
    assert!(
        auth.starts_with(&format!(
            "AWS4-HMAC-SHA256 Credential={}/",
            bedrock::TEST_ACCESS_KEY_ID
        )) && auth.contains("/us-east-1/bedrock/aws4_request"),
        "{auth}"
    );
    assert!(!auth.contains(bedrock::TEST_SECRET_ACCESS_KEY));
    assert!(!r.headers.contains_key("x-api-key"), "{r:?}");
    let leaked = r
        .headers
        .iter()
        .any(|(_, v)| v.to_str().is_ok_and(|v| v.contains(TOKEN)));
    assert!(!leaked, "the client's token reached Bedrock: {r:?}");
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
async fn anthropic_clients_reach_converse_signed() {
    let mock = MockUpstream::start().await.unwrap();
    mock.on(Matcher::any(), Behavior::ok().text("Hello from Bedrock"));
    let proxy = start(&config(&mock)).await;

    // The client's own Anthropic key is not forwarded.
    let reply = post_with(
        &proxy,
        "/v1/messages",
        MESSAGES,
        &[("x-api-key", "sk-ant-client")],
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.header("x-switchyard-channel"), "bedrock");
    let v = reply.json();
    assert_eq!(v["type"], "message");
    assert_eq!(v["content"][0]["text"], "Hello from Bedrock");
    assert_eq!(v["stop_reason"], "end_turn");
    assert!(v["id"].as_str().unwrap().starts_with("msg_bdrk_"), "{v}");
    assert!(v["usage"]["output_tokens"].as_u64().unwrap() > 0, "{v}");
    let r = &mock.requests()[0];
    assert_bedrock_request(r, "converse");
    assert!(!r.headers.contains_key("x-api-key"));
    assert_eq!(
        r.json(),
        json!({"messages": [{"role": "user", "content": [{"text": "hello"}]}], "inferenceConfig": {"maxTokens": 64}})
    );

    let reply = post(&proxy, "/v1/messages", MESSAGES_STREAM).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert!(reply
        .header("content-type")
        .starts_with("text/event-stream"));
    let events = sse_data(&reply.body);
    let text: String = events
        .iter()
        .filter(|d| d["type"] == "content_block_delta")
        .filter_map(|d| d["delta"]["text"].as_str())
        .collect();
    assert_eq!(text, "Hello from Bedrock");
    assert_eq!(events.first().unwrap()["type"], "message_start");
    assert_eq!(events.last().unwrap()["type"], "message_stop");
    let delta = events
        .iter()
        .find(|d| d["type"] == "message_delta")
        .unwrap();
    assert_eq!(delta["delta"]["stop_reason"], "end_turn");
    assert!(
        delta["usage"]["input_tokens"].as_u64().unwrap() > 0,
        "{delta}"
    );
    let r = &mock.requests()[1];
    assert_bedrock_request(r, "converse-stream");
    assert_eq!(r.headers["accept"], "application/vnd.amazon.eventstream");

    // Token counts go to CountTokens.
    let reply = post(
        &proxy,
        "/v1/messages/count_tokens",
        r#"{"model":"claude-haiku","messages":[{"role":"user","content":"hello"}]}"#,
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert!(reply.json()["input_tokens"].as_u64().unwrap() > 0);
    let r = &mock.requests()[2];
    assert_bedrock_request(r, "count-tokens");
    assert_eq!(
        r.json()["input"]["converse"]["messages"][0]["content"][0]["text"],
        "hello"
    );
}

#[tokio::test]
async fn openai_and_gemini_clients_are_translated_to_converse() {
    let mock = MockUpstream::start().await.unwrap();
    mock.on(
        Matcher::any().model(MODEL),
        Behavior::ok().text("Hello from Bedrock").times(4),
    );
    let proxy = start(&config(&mock)).await;

    let reply = post(&proxy, "/v1/chat/completions", CHAT).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let v = reply.json();
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["model"], "claude-haiku");
    assert_eq!(v["choices"][0]["message"]["content"], "Hello from Bedrock");
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    assert!(v["usage"]["prompt_tokens"].as_u64().unwrap() > 0);
    assert_bedrock_request(&mock.requests()[0], "converse");

    let reply = post(&proxy, "/v1/chat/completions", CHAT_STREAM).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert!(reply.body.trim_end().ends_with("data: [DONE]"));
    let text: String = sse_data(&reply.body)
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(text, "Hello from Bedrock");
    assert_bedrock_request(&mock.requests()[1], "converse-stream");

    let reply = post(
        &proxy,
        "/v1beta/models/claude-haiku:generateContent",
        GEMINI,
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(
        reply.json()["candidates"][0]["content"]["parts"][0]["text"],
        "Hello from Bedrock"
    );
    assert_bedrock_request(&mock.requests()[2], "converse");

    let reply = post(
        &proxy,
        "/v1beta/models/claude-haiku:streamGenerateContent?alt=sse",
        GEMINI,
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let text: String = sse_data(&reply.body)
        .iter()
        .filter_map(|d| d["candidates"][0]["content"]["parts"][0]["text"].as_str())
        .collect();
    assert_eq!(text, "Hello from Bedrock");
    assert_bedrock_request(&mock.requests()[3], "converse-stream");
}

#[tokio::test]
async fn tools_and_tool_results_round_trip() {
    let mock = MockUpstream::start().await.unwrap();
    mock.on(
        Matcher::any().model(MODEL),
        Behavior::ok()
            .tool_call("get_weather", r#"{"city":"Paris"}"#)
            .times(2),
    );
    let proxy = start(&config(&mock)).await;
    let tools = r#"[{"type":"function","function":{"name":"get_weather","description":"Weather of a city","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}]"#;
    let ask = format!(
        r#"{{"model":"claude-haiku","messages":[{{"role":"user","content":"weather in Paris?"}}],"tools":{tools}}}"#
    );
    let reply = post(&proxy, "/v1/chat/completions", &ask).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let v = reply.json();
    assert_eq!(v["choices"][0]["finish_reason"], "tool_calls");
    let call = &v["choices"][0]["message"]["tool_calls"][0];
    assert_eq!(call["function"]["name"], "get_weather");
    let args: Value =
        serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(args["city"], "Paris");
    let sent = mock.requests()[0].json();
    let spec = &sent["toolConfig"]["tools"][0]["toolSpec"];
    assert_eq!(spec["name"], "get_weather");
    assert_eq!(spec["description"], "Weather of a city");
    assert_eq!(spec["inputSchema"]["json"]["required"][0], "city");

    // Streamed: the call's arguments arrive as deltas.
    let ask_stream = ask.replacen('{', r#"{"stream":true,"#, 1);
    let reply = post(&proxy, "/v1/chat/completions", &ask_stream).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let chunks = sse_data(&reply.body);
    let streamed_args: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"].as_str())
        .collect();
    assert_eq!(
        serde_json::from_str::<Value>(&streamed_args).unwrap()["city"],
        "Paris"
    );
    assert!(chunks
        .iter()
        .any(|c| c["choices"][0]["finish_reason"] == "tool_calls"));

    // The result goes back as a toolResult after the assistant's toolUse.
    let id = call["id"].as_str().unwrap();
    let answer = json!({
        "model": "claude-haiku",
        "messages": [
            {"role": "user", "content": "weather in Paris?"},
            {"role": "assistant", "content": null, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": id, "content": "18°C, sunny"},
        ],
        "tools": serde_json::from_str::<Value>(tools).unwrap(),
    });
    mock.on(
        Matcher::any(),
        Behavior::ok().text("It is 18°C and sunny in Paris."),
    );
    let reply = post(&proxy, "/v1/chat/completions", &answer.to_string()).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(
        reply.json()["choices"][0]["message"]["content"],
        "It is 18°C and sunny in Paris."
    );
    let sent = mock.requests()[2].json();
    let messages = sent["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 3, "{sent}");
    let tool_use = &messages[1]["content"][0]["toolUse"];
    assert_eq!(messages[1]["role"], "assistant");
    assert_eq!(tool_use["toolUseId"], id);
    assert_eq!(tool_use["name"], "get_weather");
    assert_eq!(tool_use["input"]["city"], "Paris");
    let result = &messages[2]["content"][0]["toolResult"];
    assert_eq!(messages[2]["role"], "user");
    assert_eq!(result["toolUseId"], id);
    assert_eq!(result["content"][0]["text"], "18°C, sunny");
}

#[tokio::test]
async fn a_429_fails_over_and_the_last_answer_keeps_retry_after() {
    let (first, second) = (
        MockUpstream::start().await.unwrap(),
        MockUpstream::start().await.unwrap(),
    );
    first.on(Matcher::any(), Behavior::status(429).retry_after(7));
    let proxy = start(&two_channels(
        (&first.base_url(), &first.bedrock_credential()),
        (&second.base_url(), &second.bedrock_credential_2()),
    ))
    .await;
    let reply = post(&proxy, "/v1/messages", MESSAGES).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.header("x-switchyard-channel"), "second");
    assert_eq!(reply.attempts(), 2);
    assert_eq!(
        second.requests()[0].credential.as_deref(),
        Some(bedrock::TEST_ACCESS_KEY_ID_2)
    );

    // Both throttled: the last answer, its status and Retry-After, in the client's shape.
    let (first, second) = (
        MockUpstream::start().await.unwrap(),
        MockUpstream::start().await.unwrap(),
    );
    for upstream in [&first, &second] {
        upstream.on(
            Matcher::any(),
            Behavior::status(429)
                .retry_after(7)
                .body(r#"{"message":"Too many requests, please wait before trying again."}"#),
        );
    }
    let proxy = start(&two_channels(
        (&first.base_url(), &first.bedrock_credential()),
        (&second.base_url(), &second.bedrock_credential()),
    ))
    .await;
    let reply = post(&proxy, "/v1/messages", MESSAGES).await;
    assert_eq!(reply.status, 429, "{}", reply.body);
    assert_eq!(reply.header("retry-after"), "7");
    let v = reply.json();
    assert_eq!(v["type"], "error");
    assert_eq!(v["error"]["type"], "rate_limit_error");
    assert_eq!(
        v["error"]["message"],
        "ThrottlingException: Too many requests, please wait before trying again."
    );
    let reply = post(&proxy, "/v1/chat/completions", CHAT).await;
    assert_eq!(reply.status, 429, "{}", reply.body);
    assert_eq!(reply.header("retry-after"), "7");
    assert!(reply.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("ThrottlingException"));

    // A validation error is the client's: 400, not retried elsewhere as a throttle would be.
    let only = MockUpstream::start().await.unwrap();
    only.on(Matcher::any(), Behavior::status(400));
    let proxy = start(&config(&only)).await;
    let reply = post(&proxy, "/v1/messages", MESSAGES).await;
    assert_eq!(reply.status, 400, "{}", reply.body);
    assert_eq!(reply.json()["error"]["type"], "invalid_request_error");
    assert!(reply.body.contains("ValidationException"), "{}", reply.body);
}

#[tokio::test]
async fn a_refused_signature_fails_over_and_is_never_the_clients_403() {
    let (bad, good) = (
        MockUpstream::start().await.unwrap(),
        MockUpstream::start().await.unwrap(),
    );
    let proxy = start(&two_channels(
        (&bad.base_url(), &bad.bedrock_wrong_secret_credential()),
        (&good.base_url(), &good.bedrock_credential()),
    ))
    .await;
    let reply = post(&proxy, "/v1/messages", MESSAGES).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.header("x-switchyard-channel"), "second");
    assert_eq!(reply.attempts(), 2);
    assert_eq!(bad.requests().len(), 1, "refused before any rule");
    assert_bedrock_request(&good.requests()[0], "converse");

    // Only the refused key left: a 502 naming the channel and what Bedrock said (never its 403,
    // which the client would take for its own key's refusal), no secret in it.
    let bad = MockUpstream::start().await.unwrap();
    bad.on(Matcher::any(), Behavior::ok().text("never"));
    let yaml = format!(
        "settings:\n  channel_retry_times: 0\nchannels:\n{}{}",
        bedrock_channel(
            "bedrock",
            &bad.base_url(),
            &bad.bedrock_wrong_secret_credential()
        ),
        route(&format!(
            "      - {{ channel: bedrock, upstream_model: \"{MODEL}\" }}\n"
        ))
    );
    let proxy = start(&yaml).await;
    let reply = post(&proxy, "/v1/chat/completions", CHAT).await;
    assert_eq!(reply.status, 502, "{}", reply.body);
    assert_eq!(reply.json()["error"]["code"], "upstream_auth_failed");
    let message = reply.json()["error"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        message.contains(
            "channel `bedrock` (HTTP 403: InvalidSignatureException: The request signature we calculated"
        ),
        "{message}"
    );
    assert!(!reply.body.contains("wrongBedrockSecret"), "{}", reply.body);
    assert_eq!(
        bad.requests().len(),
        1,
        "refused, not retried on the same key"
    );

    // An access key Bedrock does not know.
    let unknown = MockUpstream::start().await.unwrap();
    let credential = bedrock::credential_json("AKIAUNKNOWNKEY000000", "whatever/secret", None);
    let yaml = format!(
        "channels:\n{}{}",
        bedrock_channel("bedrock", &unknown.base_url(), &credential),
        route(&format!(
            "      - {{ channel: bedrock, upstream_model: \"{MODEL}\" }}\n"
        ))
    );
    let proxy = start(&yaml).await;
    let reply = post(&proxy, "/v1/messages", MESSAGES).await;
    assert_eq!(reply.status, 502, "{}", reply.body);
    assert_eq!(reply.json()["error"]["type"], "api_error");
    assert!(
        reply.body.contains("UnrecognizedClientException"),
        "{}",
        reply.body
    );
}

#[tokio::test]
async fn a_stream_cut_mid_way_breaks_the_clients_stream() {
    let mock = MockUpstream::start().await.unwrap();
    mock.on(
        Matcher::any(),
        Behavior::ok()
            .text("one two three four five six")
            .cut_after_chunks(3),
    );
    let proxy = start(&config(&mock)).await;
    let reply = post(&proxy, "/v1/messages", MESSAGES_STREAM).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let events = sse_data(&reply.body);
    assert_eq!(events.first().unwrap()["type"], "message_start");
    assert!(
        events.iter().all(|e| e["type"] != "message_stop"),
        "a cut stream never ends cleanly: {}",
        reply.body
    );
}

#[tokio::test]
async fn an_exception_mid_stream_is_a_mid_stream_error_in_the_clients_protocol() {
    let mock = MockUpstream::start().await.unwrap();
    mock.on(
        Matcher::any(),
        Behavior::ok()
            .text("one two three four five six")
            .exception_after_chunks(3, "throttlingException"),
    );
    let proxy = start(&config(&mock)).await;
    // Anthropic's own error event, after the text already sent; no message_stop.
    let reply = post(&proxy, "/v1/messages", MESSAGES_STREAM).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let events = sse_data(&reply.body);
    let last = events.last().unwrap();
    assert_eq!(last["type"], "error", "{}", reply.body);
    assert_eq!(last["error"]["type"], "rate_limit_error");
    assert_eq!(
        last["error"]["message"],
        "throttlingException: mock upstream scripted throttlingException"
    );
    assert!(events.iter().any(|e| e["type"] == "content_block_delta"));
    assert!(events.iter().all(|e| e["type"] != "message_stop"));

    // An OpenAI client: the text so far, then an error, never a clean finish.
    let reply = post(&proxy, "/v1/chat/completions", CHAT_STREAM).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert!(reply.body.contains("throttlingException"), "{}", reply.body);
    assert!(
        !sse_data(&reply.body)
            .iter()
            .any(|c| c["choices"][0]["finish_reason"] == "stop"),
        "{}",
        reply.body
    );
}

#[tokio::test]
async fn an_image_url_is_bedrocks_400_and_nothing_is_sent() {
    let mock = MockUpstream::start().await.unwrap();
    let proxy = start(&config(&mock)).await;
    let body = json!({"model": "claude-haiku", "messages": [{"role": "user", "content": [
        {"type": "text", "text": "what is this?"},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
    ]}]});
    let reply = post(&proxy, "/v1/chat/completions", &body.to_string()).await;
    assert_eq!(reply.status, 400, "{}", reply.body);
    let message = reply.json()["error"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        message.contains("ValidationException") && message.contains("base64"),
        "{message}"
    );
    assert!(mock.requests().is_empty(), "nothing reached Bedrock");
    assert!(
        !breaker_open(&proxy),
        "a refused request is not the channel's failure"
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
async fn the_recovery_probe_asks_converse_signed() {
    let mock = MockUpstream::start().await.unwrap();
    let proxy = start(&config(&mock)).await;
    proxy
        .store
        .trip_breaker(1, "test", switchyard_data_plane::unix_ms());
    assert!(breaker_open(&proxy));
    assert_eq!(probe_round(&proxy.state).await.channels, vec![1]);
    let requests = mock.requests();
    assert_eq!(requests.len(), 1, "{requests:?}");
    assert_bedrock_request(&requests[0], "converse");
    assert_eq!(requests[0].json()["inferenceConfig"]["maxTokens"], 1);
    assert!(!breaker_open(&proxy));

    // A key whose signatures are refused fails the probe: the breaker stays open.
    let bad = MockUpstream::start().await.unwrap();
    let yaml = format!(
        "channels:\n{}{}",
        bedrock_channel(
            "bedrock",
            &bad.base_url(),
            &bad.bedrock_wrong_secret_credential()
        ),
        route(&format!(
            "      - {{ channel: bedrock, upstream_model: \"{MODEL}\" }}\n"
        ))
    );
    let proxy = start(&yaml).await;
    proxy
        .store
        .trip_breaker(1, "test", switchyard_data_plane::unix_ms());
    probe_round(&proxy.state).await;
    assert!(breaker_open(&proxy));
    assert_eq!(bad.requests().len(), 1);
}

/// Recomputes a recorded request's signature with botocore's `SigV4Auth` for the same method,
/// URL, signed headers, body, time and credentials; prints the signature and signed headers.
const BOTOCORE_CHECK: &str = r#"
import json, sys
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
r = json.loads(sys.stdin.read())
request = AWSRequest(method=r["method"], url=r["url"], data=r["body"].encode("utf-8"),
                     headers=dict(r["headers"]))
request.context["timestamp"] = r["amz_date"]
auth = SigV4Auth(Credentials(r["access_key_id"], r["secret_access_key"], r.get("session_token")),
                 "bedrock", r["region"])
canonical = auth.canonical_request(request)
signature = auth.signature(auth.string_to_sign(request, canonical), request)
print(json.dumps({"signature": signature,
                  "signed_headers": auth.signed_headers(auth.headers_to_sign(request))}))
"#;

fn botocore_signature(
    r: &RecordedRequest,
    secret: &str,
    token: Option<&str>,
    region: &str,
) -> Value {
    let auth = r.headers["authorization"].to_str().unwrap();
    let signed = auth
        .split("SignedHeaders=")
        .nth(1)
        .unwrap()
        .split(',')
        .next()
        .unwrap();
    let headers: Vec<(String, String)> = signed
        .split(';')
        .map(|name| {
            (
                name.to_owned(),
                r.headers[name].to_str().unwrap().to_owned(),
            )
        })
        .collect();
    let input = json!({
        "method": r.method,
        "url": format!("http://{}{}", r.headers["host"].to_str().unwrap(), r.path),
        "headers": headers,
        "body": String::from_utf8(r.body.to_vec()).unwrap(),
        "amz_date": r.headers["x-amz-date"].to_str().unwrap(),
        "access_key_id": bedrock::TEST_ACCESS_KEY_ID,
        "secret_access_key": secret,
        "session_token": token,
        "region": region,
    });
    let python = std::env::var("SWITCHYARD_TEST_PYTHON").unwrap_or_else(|_| {
        panic!("SWITCHYARD_TEST_PYTHON is not set: it must name a python with botocore (scripts/test sets it up)")
    });
    let mut child = std::process::Command::new(python)
        .args(["-c", BOTOCORE_CHECK])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run SWITCHYARD_TEST_PYTHON");
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.to_string().as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "botocore failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

#[tokio::test]
async fn the_signature_verifies_with_botocore() {
    let mock = MockUpstream::start().await.unwrap();
    // Temporary credentials in eu-central-1 (from the credential: the mock's URL names none).
    let credential = json!({
        "access_key_id": bedrock::TEST_ACCESS_KEY_ID,
        "secret_access_key": bedrock::TEST_SECRET_ACCESS_KEY,
        "session_token": "FwoGZXIvYXdzEMockSessionToken/+=",
        "region": "eu-central-1",
    })
    .to_string();
    let yaml = format!(
        "channels:\n{}{}",
        bedrock_channel("bedrock", &mock.base_url(), &credential),
        route(&format!(
            "      - {{ channel: bedrock, upstream_model: \"{MODEL}\" }}\n"
        ))
    );
    let proxy = start(&yaml).await;
    let reply = post(&proxy, "/v1/messages", MESSAGES_STREAM).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let r = &mock.requests()[0];
    let auth = r.headers["authorization"].to_str().unwrap().to_owned();
    assert!(
        auth.contains("/eu-central-1/bedrock/aws4_request"),
        "{auth}"
    );
    assert_eq!(
        r.headers["x-amz-security-token"],
        "FwoGZXIvYXdzEMockSessionToken/+="
    );
    let checked = botocore_signature(
        r,
        bedrock::TEST_SECRET_ACCESS_KEY,
        Some("FwoGZXIvYXdzEMockSessionToken/+="),
        "eu-central-1",
    );
    let signature = auth.rsplit("Signature=").next().unwrap();
    assert_eq!(
        checked["signature"], signature,
        "botocore disagrees: {auth}"
    );
    let signed = checked["signed_headers"].as_str().unwrap();
    assert!(
        auth.contains(&format!("SignedHeaders={signed},")),
        "{signed} vs {auth}"
    );
    assert!(signed.contains("x-amz-security-token") && signed.contains("host"));
    // The check is real: another secret gives another signature.
    let other = botocore_signature(
        r,
        "another/secret",
        Some("FwoGZXIvYXdzEMockSessionToken/+="),
        "eu-central-1",
    );
    assert_ne!(other["signature"], signature);
}

/// A session token STS hands out in these tests.
const STS_SESSION_TOKEN: &str = "FwoGZXIvYXdzEWorkloadSessionToken/+=";

/// STS's `AssumeRoleWithWebIdentity` answer with the mock's first test key and a session
/// token.
fn sts_answer() -> String {
    format!(
        "<AssumeRoleWithWebIdentityResponse xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\"><AssumeRoleWithWebIdentityResult><Credentials><AccessKeyId>{}</AccessKeyId><SecretAccessKey>{}</SecretAccessKey><SessionToken>{STS_SESSION_TOKEN}</SessionToken><Expiration>2099-01-01T00:00:00Z</Expiration></Credentials></AssumeRoleWithWebIdentityResult></AssumeRoleWithWebIdentityResponse>",
        bedrock::TEST_ACCESS_KEY_ID,
        bedrock::TEST_SECRET_ACCESS_KEY
    )
}

/// A Bedrock channel block with `auth: workload`.
fn workload_channel(name: &str, base_url: &str) -> String {
    format!(
        "  - name: {name}\n    provider: bedrock\n    base_url: {base_url}\n    auth: workload\n"
    )
}

/// The web identity environment: the token file, the role, STS at `sts`, region eu-west-3.
fn web_identity_env(sts: &str) -> String {
    let file = temp_file("web-identity", "eyJhbGciOi.web-identity.token\n");
    set_env(
        &[
            ("AWS_WEB_IDENTITY_TOKEN_FILE", &file),
            ("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/switchyard"),
            ("AWS_ENDPOINT_URL_STS", sts),
            ("AWS_REGION", "eu-west-3"),
        ],
        &[
            "AWS_CONTAINER_CREDENTIALS_FULL_URI",
            "AWS_ROLE_SESSION_NAME",
        ],
    );
    file
}

#[tokio::test]
async fn a_workload_channel_signs_with_temporary_keys_from_sts() {
    let mock = MockUpstream::start().await.unwrap();
    mock.on(Matcher::any(), Behavior::ok().text("Hello from a role"));
    let sts = FakeIdentity::start(|_, _| (200, "text/xml", sts_answer())).await;
    let proxy = {
        let _env = identity_env().lock().await;
        web_identity_env(&sts.url);
        start(&format!(
            "settings:\n  channel_retry_times: 0\nchannels:\n{}{}",
            workload_channel("bedrock", &mock.base_url()),
            route(&format!(
                "      - {{ channel: bedrock, upstream_model: \"{MODEL}\" }}\n"
            ))
        ))
        .await
    };
    // Concurrent first requests share one exchange.
    let replies =
        futures_util::future::join_all((0..4).map(|_| post(&proxy, "/v1/messages", MESSAGES)))
            .await;
    for reply in &replies {
        assert_eq!(reply.status, 200, "{}", reply.body);
    }
    assert_eq!(
        sts.requests().len(),
        1,
        "one STS exchange for every request"
    );
    let exchange = &sts.requests()[0];
    assert_eq!(
        (exchange.method.as_str(), exchange.path.as_str()),
        ("POST", "/")
    );
    for part in [
        "Action=AssumeRoleWithWebIdentity",
        "RoleArn=arn%3Aaws%3Aiam%3A%3A123456789012%3Arole%2Fswitchyard",
        "RoleSessionName=switchyard",
        "WebIdentityToken=eyJhbGciOi.web-identity.token",
    ] {
        assert!(exchange.body.contains(part), "{}", exchange.body);
    }
    // Every request signed (the mock verified it) with the temporary key and its session token,
    // in the environment's region (the mock's URL names none).
    let r = &mock.requests()[0];
    assert_eq!(r.credential.as_deref(), Some(bedrock::TEST_ACCESS_KEY_ID));
    assert_eq!(r.headers["x-amz-security-token"], STS_SESSION_TOKEN);
    let auth = r.headers["authorization"].to_str().unwrap().to_owned();
    assert!(auth.contains("/eu-west-3/bedrock/aws4_request"), "{auth}");
    assert!(
        auth.contains("x-amz-security-token"),
        "the token is signed: {auth}"
    );
    let checked = botocore_signature(
        r,
        bedrock::TEST_SECRET_ACCESS_KEY,
        Some(STS_SESSION_TOKEN),
        "eu-west-3",
    );
    let signature = auth.rsplit("Signature=").next().unwrap();
    assert_eq!(
        checked["signature"], signature,
        "botocore disagrees: {auth}"
    );
}

#[tokio::test]
async fn an_identity_endpoint_down_garbled_or_silent_fails_over_to_the_next_member() {
    let mock = MockUpstream::start().await.unwrap();
    mock.on(
        Matcher::any(),
        Behavior::ok().text("from the keyed channel"),
    );
    let garbage = FakeIdentity::start(|_, _| (200, "text/html", "<html>".to_owned())).await;
    let down = nothing_listens().await;
    // Takes connections, never answers: the attempt's first-byte budget bounds the wait.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hang = format!("http://{}", silent.local_addr().unwrap());
    for sts in [down.as_str(), garbage.url.as_str(), hang.as_str()] {
        let proxy = {
            let _env = identity_env().lock().await;
            web_identity_env(sts);
            start(&format!(
                "settings:\n  channel_retry_times: 0\n  first_byte_timeout_ms: 1000\nchannels:\n{}{}{}",
                workload_channel("workload", &mock.base_url()),
                bedrock_channel("keyed", &mock.base_url(), &mock.bedrock_credential()),
                route(&format!(
                    "      - {{ channel: workload, upstream_model: \"{MODEL}\", priority: 10 }}\n      - {{ channel: keyed, upstream_model: \"{MODEL}\", priority: 0 }}\n"
                ))
            ))
            .await
        };
        let reply = post(&proxy, "/v1/messages", MESSAGES).await;
        assert_eq!(reply.status, 200, "{sts}: {}", reply.body);
        assert_eq!(reply.header("x-switchyard-channel"), "keyed", "{sts}");
        assert_eq!(reply.attempts(), 2, "{sts}");
    }
    // The workload channel never reached Bedrock: no request without its keys.
    assert!(mock
        .requests()
        .iter()
        .all(|r| !r.headers.contains_key("x-amz-security-token")));
    assert_eq!(garbage.requests().len(), 1);
    drop(silent);
}
