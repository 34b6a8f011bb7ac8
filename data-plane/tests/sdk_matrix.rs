//! The three official client SDKs (OpenAI, Anthropic, Google GenAI) against upstreams of the
//! three protocols, plus Azure OpenAI (OpenAI's protocol at Azure's URLs), Google Vertex AI
//! (Gemini's protocol at Vertex's URLs, with access tokens from a service-account key) and AWS
//! Bedrock (the Converse API, requests signed with SigV4): 18 (ingress SDK × upstream provider)
//! pairs, each one test.
//!
//! Each pair starts a [`MockUpstream`] (it answers every protocol by path), a proxy whose
//! channels `up-openai`, `up-azure`, `up-anthropic`, `up-gemini`, `up-vertex` and `up-bedrock`
//! all point at it (the Vertex channel's key file names the mock's token endpoint, the Bedrock
//! channel's access key is one whose signatures the mock verifies), and one
//! python process
//! running every scenario of `tests/sdk/<sdk>_client.py` (text, stream, tools, tools_stream,
//! tool_result, image, errors). It checks what the SDK saw (text, tool calls, stop reasons,
//! usage with cached tokens, stream pieces, errors with status and Retry-After) and what the
//! upstream received (path, auth header with the channel's credential and never the client's
//! token, required headers and fields, the system prompt, tools, tool results and images in the
//! upstream protocol's shape, the model rewritten). Every failed check of a pair is reported at
//! once, named by the pair and scenario.
//!
//! Plus: cross-protocol failover (Anthropic 503 → Gemini), `protocol_unsupported` (OpenAI `n: 2`),
//! and the Gemini `?key=` credential.
//!
//! `SWITCHYARD_TEST_PYTHON` must name a python with `openai`, `anthropic` and `google-genai`
//! installed (scripts/test sets it); without it these tests fail rather than skip.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::fmt::Write as _;
use std::process::Command;
use std::time::Duration;

use http::Method;
use serde_json::{json, Value};
use switchyard_mock_upstream::{Behavior, Matcher, MockUpstream, RecordedRequest};

use common::{send, start, TOKEN};

const SYSTEM_MARK: &str = "SYSTEM-PROMPT-MARK";
const TOOL_RESULT_MARK: &str = "TOOL-RESULT-MARK";
const IMAGE_URL: &str = "https://example.com/IMAGE-URL-MARK.png";
/// The start of the base64 of the 1×1 PNG the scripts send.
const PNG_B64_START: &str = "iVBORw0KGgo";
const TEXT_CACHED: u64 = 42;
const TOOLS_CACHED: u64 = 7;
const SCENARIOS: &str = "text,stream,tools,tools_stream,tool_result,image,errors";
/// Only the Anthropic and Gemini SDKs count tokens.
const COUNT_SCENARIO: &str = "count_tokens";

/// A wire protocol: of a client SDK (ingress) or of a channel (upstream). `Azure` and `Vertex`
/// are upstreams only: OpenAI's protocol behind Azure's URLs and `api-key` header, Gemini's
/// behind Vertex's URLs and access tokens. `Bedrock` is an upstream only too: the Converse API.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum P {
    OpenAi,
    Azure,
    Anthropic,
    Gemini,
    Vertex,
    Bedrock,
}

/// Every upstream provider of the matrix.
const UPSTREAMS: [P; 6] = [
    P::OpenAi,
    P::Azure,
    P::Anthropic,
    P::Gemini,
    P::Vertex,
    P::Bedrock,
];

impl P {
    fn name(self) -> &'static str {
        match self {
            P::OpenAi => "openai",
            P::Azure => "azure",
            P::Anthropic => "anthropic",
            P::Gemini => "gemini",
            P::Vertex => "vertex",
            P::Bedrock => "bedrock",
        }
    }

    /// The python client script of this protocol's SDK (Azure's clients are OpenAI's).
    fn script(self) -> &'static str {
        match self {
            P::OpenAi | P::Azure => "openai_client.py",
            P::Anthropic | P::Bedrock => "anthropic_client.py",
            P::Gemini | P::Vertex => "genai_client.py",
        }
    }

    fn channel(self) -> String {
        format!("up-{}", self.name())
    }

    fn credential(self) -> String {
        format!("upstream-key-{}", self.name())
    }

    /// The client-side model of this upstream's routes (`suffix`: "", "-tools", "-429", "-503").
    fn route(self, suffix: &str) -> String {
        format!("via-{}{suffix}", self.name())
    }

    fn upstream_model(self, suffix: &str) -> String {
        format!("real-{}-model{suffix}", self.name())
    }

    /// What this upstream says in text answers.
    fn text(self) -> String {
        format!("Bonjour from {}", self.name())
    }

    /// The SDK's stop reason of a plain text answer.
    fn normal_stop(self) -> &'static str {
        match self {
            P::OpenAi | P::Azure => "stop",
            P::Anthropic | P::Bedrock => "end_turn",
            P::Gemini | P::Vertex => "STOP",
        }
    }

    /// The SDK's stop reason of an answer that calls a tool (Gemini says STOP).
    fn tool_stop(self) -> &'static str {
        match self {
            P::OpenAi | P::Azure => "tool_calls",
            P::Anthropic | P::Bedrock => "tool_use",
            P::Gemini | P::Vertex => "STOP",
        }
    }
}

/// Every channel on the mock, and per upstream the routes `via-X`, `via-X-tools`, `via-X-429` and
/// `via-X-503` on its channel, plus `extra_routes` (YAML list items).
fn yaml(mock: &MockUpstream, extra_routes: &str) -> String {
    let mut y = String::from("settings:\n  channel_retry_times: 0\nchannels:\n");
    for p in UPSTREAMS {
        // A Vertex credential is a service-account key file (JSON, YAML single-quoted).
        let credential = match p {
            P::Vertex => format!("'{}'", mock.vertex_service_account()),
            // A Bedrock credential is an access key (JSON, YAML single-quoted).
            P::Bedrock => format!("'{}'", mock.bedrock_credential()),
            _ => format!("\"{}\"", p.credential()),
        };
        write!(
            y,
            "  - name: {}\n    provider: {}\n    base_url: {}\n    credentials: [{credential}]\n",
            p.channel(),
            p.name(),
            mock.base_url(),
        )
        .unwrap();
    }
    y.push_str("routes:\n");
    for p in UPSTREAMS {
        for suffix in ["", "-tools", "-429", "-503"] {
            write!(
                y,
                "  - model_pattern: {}\n    members:\n      - {{ channel: {}, upstream_model: {} }}\n",
                p.route(suffix),
                p.channel(),
                p.upstream_model(suffix)
            )
            .unwrap();
        }
    }
    y.push_str(extra_routes);
    y
}

/// Scripts the mock for upstream `up`: text with cached tokens, a tool call, a 429 with
/// Retry-After and a 503 on the dedicated upstream models.
fn script_mock(mock: &MockUpstream, up: P) {
    mock.on(
        Matcher::any().model(&up.upstream_model("-tools")),
        Behavior::ok()
            .tool_call("get_weather", r#"{"city":"Paris"}"#)
            .cached_tokens(TOOLS_CACHED),
    );
    mock.on(
        Matcher::any().model(&up.upstream_model("-429")),
        Behavior::status(429).retry_after(3),
    );
    mock.on(
        Matcher::any().model(&up.upstream_model("-503")),
        Behavior::status(503),
    );
    mock.on(
        Matcher::any().model(&up.upstream_model("")),
        Behavior::ok().text(up.text()).cached_tokens(TEXT_CACHED),
    );
}

/// Runs `scenarios` of `sdk`'s client script against the proxy at `url`; returns its JSON.
async fn run_sdk(sdk: P, url: &str, model: &str, scenarios: &str) -> Value {
    run_sdk_env(sdk, url, model, scenarios, None).await
}

/// [`run_sdk`] with one extra environment variable for the script.
async fn run_sdk_env(
    sdk: P,
    url: &str,
    model: &str,
    scenarios: &str,
    env: Option<(&'static str, &'static str)>,
) -> Value {
    let python = std::env::var("SWITCHYARD_TEST_PYTHON").unwrap_or_else(|_| {
        panic!(
            "SWITCHYARD_TEST_PYTHON is not set: it must name a python with the `openai`, \
             `anthropic` and `google-genai` packages (scripts/test sets it up)"
        )
    });
    let script = format!("{}/tests/sdk/{}", env!("CARGO_MANIFEST_DIR"), sdk.script());
    let args = [
        script,
        url.to_owned(),
        TOKEN.to_owned(),
        model.to_owned(),
        scenarios.to_owned(),
    ];
    let run = tokio::task::spawn_blocking(move || {
        let mut command = Command::new(&python);
        // The SDK's own default path generation unless the test pins one.
        command
            .args(&args)
            .env_remove("GENAI_API_VERSION")
            .env_remove("GOOGLE_GENAI_API_VERSION");
        if let Some((name, value)) = env {
            command.env(name, value);
        }
        command.output()
    });
    let output = tokio::time::timeout(Duration::from_secs(120), run)
        .await
        .expect("python client timed out")
        .unwrap()
        .unwrap_or_else(|e| panic!("cannot run SWITCHYARD_TEST_PYTHON: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{} client failed:\n{stdout}\n{}",
        sdk.script(),
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("{} client printed no JSON ({e}):\n{stdout}", sdk.script()))
}

/// Collects failed checks so that one run reports all of them.
struct Checks {
    pair: String,
    failures: Vec<String>,
}

impl Checks {
    fn new(pair: impl Into<String>) -> Self {
        Self {
            pair: pair.into(),
            failures: Vec::new(),
        }
    }

    fn check(&mut self, ok: bool, scenario: &str, what: impl std::fmt::Display) {
        if !ok {
            self.failures
                .push(format!("[{}] {scenario}: {what}", self.pair));
        }
    }

    fn eq(&mut self, scenario: &str, what: &str, got: &Value, want: impl Into<Value>) {
        let want = want.into();
        let ok = *got == want;
        self.check(ok, scenario, format_args!("{what}: got {got}, want {want}"));
    }

    /// Panics with every failed check, then `context`; with `SDK_MATRIX_VERBOSE` set, prints
    /// `context` on success too.
    fn finish(self, context: &str) {
        if std::env::var_os("SDK_MATRIX_VERBOSE").is_some() {
            eprintln!("[{}]\n{context}", self.pair);
        }
        assert!(
            self.failures.is_empty(),
            "{} failed check(s):\n{}\n\n{context}",
            self.failures.len(),
            self.failures.join("\n")
        );
    }
}

/// The text of a JSON string, or of every string nested in it (content arrays, parts).
fn all_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(items) => items.iter().map(all_text).collect::<Vec<_>>().join(" "),
        Value::Object(map) => map.values().map(all_text).collect::<Vec<_>>().join(" "),
        _ => String::new(),
    }
}

/// `v[camel]`, else `v[snake]` (Gemini accepts both spellings).
fn field<'a>(v: &'a Value, camel: &str, snake: &str) -> &'a Value {
    match &v[camel] {
        Value::Null => &v[snake],
        found => found,
    }
}

/// The upstream requests whose body mentions `marker`.
fn requests_with<'a>(requests: &'a [RecordedRequest], marker: &str) -> Vec<&'a RecordedRequest> {
    requests
        .iter()
        .filter(|r| String::from_utf8_lossy(&r.body).contains(marker))
        .collect()
}

fn describe_path(r: &RecordedRequest) -> String {
    match &r.query {
        Some(q) => format!("{}?{q}", r.path),
        None => r.path.clone(),
    }
}

fn describe(r: &RecordedRequest) -> String {
    format!(
        "{} {} {}",
        r.method,
        describe_path(r),
        String::from_utf8_lossy(&r.body)
    )
}

/// Names an upstream request by the scenario marker in its body (and its model).
fn label(r: &RecordedRequest) -> String {
    let body = String::from_utf8_lossy(&r.body);
    let scenario = body
        .split("scenario=")
        .nth(1)
        .and_then(|rest| rest.split(':').next())
        .unwrap_or("?");
    let turn = if body.contains(TOOL_RESULT_MARK) {
        " (2nd turn)"
    } else {
        ""
    };
    format!(
        "upstream request of {scenario}{turn} for {}",
        r.model.as_deref().unwrap_or("?")
    )
}

/// Checks every request the upstream received: path, auth, protocol headers, model.
fn check_upstream_request(c: &mut Checks, up: P, r: &RecordedRequest, scenario: &str) {
    let seen = describe(r);
    let model = r.model.clone().unwrap_or_default();
    c.check(
        model.starts_with("real-"),
        scenario,
        format_args!(
            "upstream model not rewritten to a member's upstream_model: {model:?} in {seen}"
        ),
    );
    let header = |name: &str| {
        r.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let leaked = r
        .headers
        .iter()
        .any(|(_, v)| v.to_str().is_ok_and(|v| v.contains(TOKEN)))
        || r.query.as_deref().is_some_and(|q| q.contains(TOKEN));
    c.check(
        !leaked,
        scenario,
        format_args!("the client's Switchyard token reached the upstream: {seen}"),
    );
    let body = r.json();
    match up {
        P::OpenAi => {
            c.check(
                r.path == "/v1/chat/completions",
                scenario,
                format_args!("path {} (want /v1/chat/completions)", describe_path(r)),
            );
            c.check(
                header("authorization") == Some(format!("Bearer {}", up.credential())),
                scenario,
                format_args!("authorization {:?}", header("authorization")),
            );
            c.eq(scenario, "body.model", &body["model"], model.clone());
        }
        P::Azure => {
            // The deployment (the member's upstream model) is in the path, the version in the
            // query, the key in `api-key`; the body is OpenAI's.
            let want = format!("/openai/deployments/{model}/chat/completions");
            c.check(
                r.path == want && r.query_param("api-version") == Some("2024-10-21"),
                scenario,
                format_args!(
                    "path {} (want {want}?api-version=2024-10-21)",
                    describe_path(r)
                ),
            );
            c.check(
                header("api-key") == Some(up.credential()),
                scenario,
                format_args!("api-key {:?}", header("api-key")),
            );
            c.check(
                header("authorization").is_none(),
                scenario,
                format_args!(
                    "Azure request with an authorization header {:?}",
                    header("authorization")
                ),
            );
            c.eq(scenario, "body.model", &body["model"], model.clone());
        }
        P::Anthropic => {
            let count = r.path == "/v1/messages/count_tokens";
            c.check(
                r.path == "/v1/messages" || count,
                scenario,
                format_args!(
                    "path {} (want /v1/messages or /v1/messages/count_tokens)",
                    describe_path(r)
                ),
            );
            c.check(
                header("x-api-key") == Some(up.credential()),
                scenario,
                format_args!("x-api-key {:?}", header("x-api-key")),
            );
            c.check(
                header("authorization").is_none(),
                scenario,
                format_args!(
                    "Anthropic request with an authorization header {:?}",
                    header("authorization")
                ),
            );
            c.check(
                header("anthropic-version").is_some_and(|v| !v.is_empty()),
                scenario,
                "anthropic-version header missing",
            );
            c.check(
                count || body["max_tokens"].as_u64().is_some_and(|n| n > 0),
                scenario,
                format_args!("max_tokens missing or 0: {}", body["max_tokens"]),
            );
            c.eq(scenario, "body.model", &body["model"], model.clone());
        }
        P::Vertex => {
            // The model path in the key file's project and the default location; an access
            // token the mock's token endpoint issued, no API key.
            let base = format!(
                "/v1/projects/{}/locations/us-central1/publishers/google/models/{model}",
                switchyard_mock_upstream::vertex::TEST_PROJECT
            );
            let (generate, stream, count) = (
                format!("{base}:generateContent"),
                format!("{base}:streamGenerateContent"),
                format!("{base}:countTokens"),
            );
            c.check(
                r.path == generate
                    || r.path == count
                    || (r.path == stream && r.query_param("alt") == Some("sse")),
                scenario,
                format_args!(
                    "path {} (want {generate}, {count} or {stream}?alt=sse)",
                    describe_path(r)
                ),
            );
            let token = r.credential.clone().unwrap_or_default();
            c.check(
                token.starts_with("ya29.mock-")
                    && header("authorization") == Some(format!("Bearer {token}")),
                scenario,
                format_args!("authorization {:?}", header("authorization")),
            );
            c.check(
                header("x-goog-api-key").is_none() && r.query_param("key").is_none(),
                scenario,
                format_args!("Vertex request with an API key: {seen}"),
            );
            c.check(
                body["model"].is_null(),
                scenario,
                format_args!("Vertex body carries a model field {}", body["model"]),
            );
        }
        P::Bedrock => {
            // Converse at the model's path, signed with the test key; no API key, no model
            // in the body.
            let ok = ["converse", "converse-stream", "count-tokens"]
                .iter()
                .any(|op| r.path == format!("/model/{model}/{op}"));
            c.check(
                ok,
                scenario,
                format_args!(
                    "path {} (want /model/{model}/converse, converse-stream or count-tokens)",
                    describe_path(r)
                ),
            );
            c.check(
                r.credential.as_deref()
                    == Some(switchyard_mock_upstream::bedrock::TEST_ACCESS_KEY_ID)
                    && header("authorization")
                        .is_some_and(|a| a.starts_with("AWS4-HMAC-SHA256 Credential=")),
                scenario,
                format_args!("authorization {:?}", header("authorization")),
            );
            c.check(
                header("x-api-key").is_none() && header("anthropic-version").is_none(),
                scenario,
                format_args!("Bedrock request with Anthropic's headers: {seen}"),
            );
            c.check(
                body["model"].is_null(),
                scenario,
                format_args!("Converse body carries a model field {}", body["model"]),
            );
        }
        P::Gemini => {
            let generate = format!("/v1beta/models/{model}:generateContent");
            let stream = format!("/v1beta/models/{model}:streamGenerateContent");
            let count = format!("/v1beta/models/{model}:countTokens");
            c.check(
                r.path == generate
                    || r.path == count
                    || (r.path == stream && r.query_param("alt") == Some("sse")),
                scenario,
                format_args!(
                    "path {} (want {generate}, {count} or {stream}?alt=sse)",
                    describe_path(r)
                ),
            );
            let key = header("x-goog-api-key").or_else(|| r.query_param("key").map(str::to_owned));
            c.check(
                key == Some(up.credential()),
                scenario,
                format_args!("x-goog-api-key / ?key= {key:?}"),
            );
            c.check(
                body["model"].is_null(),
                scenario,
                format_args!(
                    "Gemini body carries a model field {} (the model is in the path)",
                    body["model"]
                ),
            );
        }
    }
}

/// Checks that the system prompt is in the upstream protocol's place (and not a turn).
fn check_system(c: &mut Checks, up: P, body: &Value, scenario: &str) {
    let ok = match up {
        P::OpenAi | P::Azure => {
            let first = &body["messages"][0];
            matches!(first["role"].as_str(), Some("system" | "developer"))
                && all_text(&first["content"]).contains(SYSTEM_MARK)
        }
        P::Anthropic => {
            all_text(&body["system"]).contains(SYSTEM_MARK)
                && !all_text(&body["messages"]).contains(SYSTEM_MARK)
        }
        P::Gemini | P::Vertex => {
            all_text(field(body, "systemInstruction", "system_instruction")).contains(SYSTEM_MARK)
                && !all_text(&body["contents"]).contains(SYSTEM_MARK)
        }
        P::Bedrock => {
            all_text(&body["system"]).contains(SYSTEM_MARK)
                && !all_text(&body["messages"]).contains(SYSTEM_MARK)
        }
    };
    c.check(
        ok,
        scenario,
        format_args!("system prompt not in the {} place: {body}", up.name()),
    );
}

/// Checks `get_weather` in the upstream protocol's tool shape (JSON Schema types lowercase for
/// OpenAI and Anthropic, which refuse Gemini's `OBJECT`).
fn check_tools(c: &mut Checks, up: P, body: &Value, scenario: &str) {
    let (name, schema) = match up {
        P::OpenAi | P::Azure => {
            let t = &body["tools"][0];
            c.eq(scenario, "tools[0].type", &t["type"], "function");
            (&t["function"]["name"], &t["function"]["parameters"])
        }
        P::Anthropic => {
            let t = &body["tools"][0];
            (&t["name"], &t["input_schema"])
        }
        P::Bedrock => {
            let t = &body["toolConfig"]["tools"][0]["toolSpec"];
            (&t["name"], &t["inputSchema"]["json"])
        }
        P::Gemini | P::Vertex => {
            let d = &field(
                &body["tools"][0],
                "functionDeclarations",
                "function_declarations",
            )[0];
            let schema = match &d["parameters"] {
                Value::Null => field(d, "parametersJsonSchema", "parameters_json_schema"),
                s => s,
            };
            (&d["name"], schema)
        }
    };
    c.eq(scenario, "tool name", name, "get_weather");
    let ty = schema["type"].as_str().unwrap_or("");
    let type_ok = if matches!(up, P::Gemini | P::Vertex) {
        ty.eq_ignore_ascii_case("object")
    } else {
        ty == "object"
    };
    c.check(
        type_ok && !schema["properties"]["city"].is_null(),
        scenario,
        format_args!(
            "tool parameters not a {} JSON schema object with `city`: {schema}",
            up.name()
        ),
    );
}

/// Checks that the second turn of `tool_result` carries the call and its result, with
/// matching ids, in the upstream protocol's shape.
fn check_tool_result(c: &mut Checks, up: P, body: &Value, scenario: &str) {
    let ok = match up {
        P::OpenAi | P::Azure => {
            let msgs = body["messages"].as_array().cloned().unwrap_or_default();
            let call = msgs
                .iter()
                .find(|m| m["role"] == "assistant" && m["tool_calls"].is_array());
            let result = msgs.iter().find(|m| m["role"] == "tool");
            match (call, result) {
                (Some(call), Some(result)) => {
                    let call = &call["tool_calls"][0];
                    call["function"]["name"] == "get_weather"
                        && call["id"].as_str().is_some_and(|id| !id.is_empty())
                        && result["tool_call_id"] == call["id"]
                        && all_text(&result["content"]).contains(TOOL_RESULT_MARK)
                }
                _ => false,
            }
        }
        P::Anthropic => {
            let blocks = |role: &str| -> Vec<Value> {
                body["messages"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|m| m["role"] == role)
                    .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
                    .collect()
            };
            let call = blocks("assistant")
                .into_iter()
                .find(|b| b["type"] == "tool_use");
            let result = blocks("user")
                .into_iter()
                .find(|b| b["type"] == "tool_result");
            match (call, result) {
                (Some(call), Some(result)) => {
                    call["name"] == "get_weather"
                        && call["id"].as_str().is_some_and(|id| !id.is_empty())
                        && result["tool_use_id"] == call["id"]
                        && all_text(&result["content"]).contains(TOOL_RESULT_MARK)
                }
                _ => false,
            }
        }
        P::Bedrock => {
            let blocks = |role: &str| -> Vec<Value> {
                body["messages"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|m| m["role"] == role)
                    .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
                    .collect()
            };
            let call = blocks("assistant")
                .into_iter()
                .find(|b| b["toolUse"].is_object());
            let result = blocks("user")
                .into_iter()
                .find(|b| b["toolResult"].is_object());
            match (call, result) {
                (Some(call), Some(result)) => {
                    let (call, result) = (&call["toolUse"], &result["toolResult"]);
                    call["name"] == "get_weather"
                        && call["toolUseId"].as_str().is_some_and(|id| !id.is_empty())
                        && result["toolUseId"] == call["toolUseId"]
                        && all_text(&result["content"]).contains(TOOL_RESULT_MARK)
                }
                _ => false,
            }
        }
        P::Gemini | P::Vertex => {
            let parts: Vec<(Value, Value)> = body["contents"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|content| {
                    content["parts"]
                        .as_array()
                        .cloned()
                        .unwrap_or_default()
                        .into_iter()
                        .map(|p| (content["role"].clone(), p))
                        .collect::<Vec<_>>()
                })
                .collect();
            let call = parts
                .iter()
                .find(|(_, p)| !field(p, "functionCall", "function_call").is_null());
            let result = parts
                .iter()
                .find(|(_, p)| !field(p, "functionResponse", "function_response").is_null());
            match (call, result) {
                (Some((call_role, call)), Some((_, result))) => {
                    let call = field(call, "functionCall", "function_call");
                    let result = field(result, "functionResponse", "function_response");
                    *call_role == "model"
                        && call["name"] == "get_weather"
                        && result["name"] == "get_weather"
                        && result["response"].is_object()
                        && all_text(&result["response"]).contains(TOOL_RESULT_MARK)
                }
                _ => false,
            }
        }
    };
    c.check(
        ok,
        scenario,
        format_args!(
            "tool call + tool result (same id, result text) not in the {} shape: {body}",
            up.name()
        ),
    );
}

/// Checks the base64 PNG and the image URL in the upstream protocol's shape.
fn check_image(c: &mut Checks, up: P, body: &Value, scenario: &str) {
    let parts: Vec<Value> = match up {
        P::OpenAi | P::Azure | P::Anthropic | P::Bedrock => body["messages"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|m| m["role"] == "user")
            .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
            .collect(),
        P::Gemini | P::Vertex => body["contents"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|m| m["parts"].as_array().cloned().unwrap_or_default())
            .collect(),
    };
    let (inline, url) = match up {
        P::OpenAi | P::Azure => (
            parts.iter().any(|p| {
                p["type"] == "image_url"
                    && p["image_url"]["url"].as_str().is_some_and(|u| {
                        u.starts_with(&format!("data:image/png;base64,{PNG_B64_START}"))
                    })
            }),
            parts
                .iter()
                .any(|p| p["type"] == "image_url" && p["image_url"]["url"] == IMAGE_URL),
        ),
        // Converse takes image bytes, never URLs: the image scenario is not run against Bedrock.
        P::Bedrock => (
            parts.iter().any(|p| {
                p["image"]["format"] == "png"
                    && p["image"]["source"]["bytes"]
                        .as_str()
                        .is_some_and(|d| d.starts_with(PNG_B64_START))
            }),
            false,
        ),
        P::Anthropic => (
            parts.iter().any(|p| {
                p["type"] == "image"
                    && p["source"]["type"] == "base64"
                    && p["source"]["media_type"] == "image/png"
                    && p["source"]["data"]
                        .as_str()
                        .is_some_and(|d| d.starts_with(PNG_B64_START))
            }),
            parts.iter().any(|p| {
                p["type"] == "image"
                    && p["source"]["type"] == "url"
                    && p["source"]["url"] == IMAGE_URL
            }),
        ),
        P::Gemini | P::Vertex => (
            parts.iter().any(|p| {
                let d = field(p, "inlineData", "inline_data");
                field(d, "mimeType", "mime_type") == "image/png"
                    && d["data"]
                        .as_str()
                        .is_some_and(|d| d.starts_with(PNG_B64_START))
            }),
            parts.iter().any(|p| {
                let d = field(p, "fileData", "file_data");
                field(d, "fileUri", "file_uri") == IMAGE_URL
            }),
        ),
    };
    c.check(
        inline,
        scenario,
        format_args!("base64 image not in the {} shape: {body}", up.name()),
    );
    c.check(
        url,
        scenario,
        format_args!("image URL not in the {} shape: {body}", up.name()),
    );
}

/// Checks one non-error answer as the SDK saw it.
fn check_answer(
    c: &mut Checks,
    sdk: P,
    up: P,
    got: &Value,
    scenario: &str,
    tools: bool,
    stream: bool,
) {
    if let Some(e) = got["exception"].as_str() {
        c.check(
            false,
            scenario,
            format_args!(
                "the SDK raised {e}\n{}",
                got["traceback"].as_str().unwrap_or("")
            ),
        );
        return;
    }
    c.eq(
        scenario,
        "x-switchyard-channel",
        &got["channel"],
        up.channel(),
    );
    c.eq(scenario, "x-switchyard-attempts", &got["attempts"], "1");
    let (stop, cached) = if tools {
        (sdk.tool_stop(), TOOLS_CACHED)
    } else {
        (sdk.normal_stop(), TEXT_CACHED)
    };
    c.eq(scenario, "stop reason", &got["stop"], stop);
    c.eq(scenario, "usage.cached", &got["usage"]["cached"], cached);
    c.check(
        got["usage"]["output"].as_u64().is_some_and(|n| n > 0),
        scenario,
        format_args!("usage.output not > 0: {}", got["usage"]),
    );
    if tools {
        let calls = got["tool_calls"].as_array().cloned().unwrap_or_default();
        c.check(
            calls.len() == 1,
            scenario,
            format_args!("want 1 tool call, got {}", got["tool_calls"]),
        );
        if let Some(call) = calls.first() {
            c.eq(scenario, "tool call name", &call["name"], "get_weather");
            c.eq(
                scenario,
                "tool call arguments",
                &call["arguments"],
                json!({"city": "Paris"}),
            );
            // Gemini function calls may come without an id; OpenAI and Anthropic need one.
            if sdk != P::Gemini {
                c.check(
                    call["id"].as_str().is_some_and(|id| !id.is_empty()),
                    scenario,
                    format_args!("tool call without an id: {call}"),
                );
            }
        }
    } else {
        c.eq(scenario, "text", &got["text"], up.text());
    }
    if stream {
        c.eq(scenario, "stream completed", &got["completed"], true);
        if !tools {
            let pieces = got["pieces"].as_array().map_or(0, Vec::len);
            c.check(
                pieces >= 2,
                scenario,
                format_args!(
                    "want the text in several stream pieces, got {}",
                    got["pieces"]
                ),
            );
        }
        if sdk == P::Anthropic {
            let events: Vec<&str> = got["events"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            let ordered = events.first() == Some(&"message_start")
                && events.ends_with(&["message_delta", "message_stop"])
                && events.iter().position(|e| *e == "content_block_start")
                    < events.iter().position(|e| *e == "content_block_delta")
                && events.iter().rposition(|e| *e == "content_block_delta")
                    < events.iter().rposition(|e| *e == "content_block_stop");
            c.check(
                ordered,
                scenario,
                format_args!("Anthropic event order: {events:?}"),
            );
        }
    }
}

/// Checks the SDK's error for `case` (bad_token, unknown_model, rate_limited, unavailable).
fn check_error(c: &mut Checks, sdk: P, got: &Value, case: &str, status: u16) {
    let e = &got[case];
    let scenario = format!("errors.{case}");
    c.eq(&scenario, "status", &e["status"], status);
    let want_type = match (sdk, status) {
        (P::Anthropic, 401) => Some("authentication_error"),
        (P::Anthropic, 404) => Some("not_found_error"),
        (P::Anthropic, 429) => Some("rate_limit_error"),
        (P::Gemini, 401) => Some("UNAUTHENTICATED"),
        (P::Gemini, 404) => Some("NOT_FOUND"),
        (P::Gemini, 429) => Some("RESOURCE_EXHAUSTED"),
        (P::Gemini, 503) => Some("UNAVAILABLE"),
        _ => None,
    };
    match want_type {
        Some(t) => c.eq(&scenario, "error type", &e["type"], t),
        None => c.check(
            e["type"].as_str().is_some_and(|t| !t.is_empty()),
            &scenario,
            format_args!("no error type in the {} error shape: {e}", sdk.name()),
        ),
    }
    if sdk == P::Anthropic {
        c.eq(
            &scenario,
            "Anthropic error envelope type",
            &e["envelope"],
            "error",
        );
    }
    c.check(
        e["message"].as_str().is_some_and(|m| !m.is_empty()),
        &scenario,
        format_args!("no error message: {e}"),
    );
    if status == 429 {
        c.eq(&scenario, "Retry-After", &e["retry_after"], "3");
    }
}

/// Checks a token count: a positive count from the route's channel; what reaches the upstream (if
/// anything: the gateway may count by itself) is a count request, never a generation.
fn check_count_tokens(c: &mut Checks, up: P, got: &Value, requests: &[RecordedRequest]) {
    let scenario = COUNT_SCENARIO;
    if let Some(e) = got["exception"].as_str() {
        c.check(
            false,
            scenario,
            format_args!(
                "the SDK raised {e}\n{}",
                got["traceback"].as_str().unwrap_or("")
            ),
        );
        return;
    }
    c.check(
        got["input_tokens"].as_u64().is_some_and(|n| n > 0),
        scenario,
        format_args!("input tokens not > 0: {}", got["input_tokens"]),
    );
    c.eq(
        scenario,
        "x-switchyard-channel",
        &got["channel"],
        up.channel(),
    );
    for r in requests_with(requests, "scenario=count_tokens:") {
        let counted = match up {
            P::OpenAi | P::Azure => !r.path.ends_with("/chat/completions"),
            P::Anthropic => r.path == "/v1/messages/count_tokens",
            P::Bedrock => r.path.ends_with("/count-tokens"),
            P::Gemini | P::Vertex => r.path.ends_with(":countTokens"),
        };
        c.check(
            counted,
            scenario,
            format_args!("a token count reached the upstream as {}", describe_path(r)),
        );
    }
}

/// One (ingress SDK × upstream provider) pair: every scenario, every check.
async fn pair(sdk: P, up: P) {
    let mock = MockUpstream::start().await.unwrap();
    script_mock(&mock, up);
    let proxy = start(&yaml(&mock, "")).await;
    let mut scenarios = match sdk {
        P::OpenAi | P::Azure => SCENARIOS.to_owned(),
        P::Anthropic | P::Gemini | P::Vertex | P::Bedrock => {
            format!("{SCENARIOS},{COUNT_SCENARIO}")
        }
    };
    if up == P::Bedrock {
        // The image scenario sends an image URL, which Converse cannot take (bytes or S3 only).
        scenarios = scenarios.replace(",image", "");
    }
    let got = run_sdk(sdk, &proxy.url, &up.route(""), &scenarios).await;
    let requests = mock.requests();
    let mut c = Checks::new(format!("{} SDK -> {} upstream", sdk.name(), up.name()));

    for r in &requests {
        check_upstream_request(&mut c, up, r, &label(r));
    }

    for (scenario, tools, stream) in [
        ("text", false, false),
        ("stream", false, true),
        ("tools", true, false),
        ("tools_stream", true, true),
        ("image", false, false),
    ] {
        if scenario == "image" && up == P::Bedrock {
            continue;
        }
        check_answer(&mut c, sdk, up, &got[scenario], scenario, tools, stream);
        let sent = requests_with(&requests, &format!("scenario={scenario}:"));
        c.check(
            sent.len() == 1,
            scenario,
            format_args!("want 1 upstream request, got {}", sent.len()),
        );
        let Some(r) = sent.first() else { continue };
        let body = r.json();
        if scenario != "image" {
            check_system(&mut c, up, &body, scenario);
        }
        let want_model = up.upstream_model(if tools { "-tools" } else { "" });
        c.check(
            r.model.as_deref() == Some(want_model.as_str()),
            scenario,
            format_args!("upstream model {:?}, want {want_model}", r.model),
        );
        let streamed = match up {
            P::Gemini | P::Vertex => r.path.ends_with(":streamGenerateContent"),
            P::Bedrock => r.path.ends_with("/converse-stream"),
            _ => body["stream"] == true,
        };
        c.check(
            streamed == stream,
            scenario,
            format_args!("upstream request streamed: {streamed}, want {stream}"),
        );
        if tools {
            check_tools(&mut c, up, &body, scenario);
        }
        if scenario == "image" {
            check_image(&mut c, up, &body, scenario);
        }
    }

    let tr = &got["tool_result"];
    if let Some(e) = tr["exception"].as_str() {
        c.check(
            false,
            "tool_result",
            format_args!(
                "the SDK raised {e}\n{}",
                tr["traceback"].as_str().unwrap_or("")
            ),
        );
    } else {
        c.eq("tool_result", "second turn text", &tr["text"], up.text());
        c.eq(
            "tool_result",
            "x-switchyard-channel",
            &tr["channel"],
            up.channel(),
        );
        if sdk != P::Gemini {
            c.check(
                tr["first_id"].as_str().is_some_and(|id| !id.is_empty()),
                "tool_result",
                format_args!("first turn's tool call has no id: {}", tr["first"]),
            );
        }
        let second = requests_with(&requests, TOOL_RESULT_MARK);
        c.check(
            second.len() == 1,
            "tool_result",
            format_args!(
                "want 1 upstream request with the tool result, got {}",
                second.len()
            ),
        );
        if let Some(r) = second.first() {
            check_tool_result(&mut c, up, &r.json(), "tool_result");
        }
    }

    if sdk != P::OpenAi {
        check_count_tokens(&mut c, up, &got[COUNT_SCENARIO], &requests);
    }

    let errors = &got["errors"];
    if let Some(e) = errors["exception"].as_str() {
        c.check(false, "errors", format_args!("the script raised {e}"));
    } else {
        check_error(&mut c, sdk, errors, "bad_token", 401);
        check_error(&mut c, sdk, errors, "unknown_model", 404);
        check_error(&mut c, sdk, errors, "rate_limited", 429);
        check_error(&mut c, sdk, errors, "unavailable", 503);
        let reached: Vec<String> = requests_with(&requests, "scenario=errors:")
            .iter()
            .map(|r| r.model.clone().unwrap_or_default())
            .collect();
        c.check(
            reached == [up.upstream_model("-429"), up.upstream_model("-503")],
            "errors",
            format_args!(
                "only the 429 and 503 requests should reach the upstream (bad token and unknown model stop at the gateway); reached: {reached:?}"
            ),
        );
    }

    c.finish(&format!(
        "SDK output: {got:#}\n\nupstream requests:\n{}",
        requests.iter().map(describe).collect::<Vec<_>>().join("\n")
    ));
}

macro_rules! pairs {
    ($($name:ident: $sdk:expr => $up:expr;)*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            pair($sdk, $up).await;
        }
    )*};
}

pairs! {
    openai_sdk_to_openai_upstream: P::OpenAi => P::OpenAi;
    openai_sdk_to_anthropic_upstream: P::OpenAi => P::Anthropic;
    openai_sdk_to_gemini_upstream: P::OpenAi => P::Gemini;
    openai_sdk_to_azure_upstream: P::OpenAi => P::Azure;
    anthropic_sdk_to_openai_upstream: P::Anthropic => P::OpenAi;
    anthropic_sdk_to_anthropic_upstream: P::Anthropic => P::Anthropic;
    anthropic_sdk_to_gemini_upstream: P::Anthropic => P::Gemini;
    anthropic_sdk_to_azure_upstream: P::Anthropic => P::Azure;
    genai_sdk_to_openai_upstream: P::Gemini => P::OpenAi;
    genai_sdk_to_anthropic_upstream: P::Gemini => P::Anthropic;
    genai_sdk_to_gemini_upstream: P::Gemini => P::Gemini;
    genai_sdk_to_azure_upstream: P::Gemini => P::Azure;
    openai_sdk_to_vertex_upstream: P::OpenAi => P::Vertex;
    anthropic_sdk_to_vertex_upstream: P::Anthropic => P::Vertex;
    genai_sdk_to_vertex_upstream: P::Gemini => P::Vertex;
    openai_sdk_to_bedrock_upstream: P::OpenAi => P::Bedrock;
    anthropic_sdk_to_bedrock_upstream: P::Anthropic => P::Bedrock;
    genai_sdk_to_bedrock_upstream: P::Gemini => P::Bedrock;
}

/// An Anthropic member failing with 503 at higher priority, a Gemini member below it: the OpenAI
/// SDK gets the Gemini answer after two attempts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_sdk_fails_over_from_anthropic_to_gemini() {
    let mock = MockUpstream::start().await.unwrap();
    mock.on(
        Matcher::any().model("real-anthropic-down"),
        Behavior::status(503),
    );
    mock.on(
        Matcher::any().model(&P::Gemini.upstream_model("")),
        Behavior::ok().text(P::Gemini.text()),
    );
    let route = "  - model_pattern: failover\n    members:\n      - { channel: up-anthropic, upstream_model: real-anthropic-down, priority: 10 }\n      - { channel: up-gemini, upstream_model: real-gemini-model, priority: 0 }\n";
    let proxy = start(&yaml(&mock, route)).await;
    let got = run_sdk(P::OpenAi, &proxy.url, "failover", "text").await;
    let requests = mock.requests();
    let seen: Vec<String> = requests.iter().map(describe).collect();
    let mut c = Checks::new("failover: openai SDK -> anthropic 503 -> gemini");
    let text = &got["text"];
    c.check(
        text["exception"].is_null(),
        "text",
        format_args!("the SDK raised {}", text["exception"]),
    );
    c.eq("text", "text", &text["text"], P::Gemini.text());
    c.eq(
        "text",
        "x-switchyard-channel",
        &text["channel"],
        "up-gemini",
    );
    c.eq("text", "x-switchyard-attempts", &text["attempts"], "2");
    let paths: Vec<&str> = requests.iter().map(|r| r.path.as_str()).collect();
    c.check(
        paths
            == [
                "/v1/messages",
                "/v1beta/models/real-gemini-model:generateContent",
            ],
        "text",
        format_args!("upstream paths {paths:?}"),
    );
    if let Some(r) = requests.first() {
        check_upstream_request(&mut c, P::Anthropic, r, "anthropic attempt");
    }
    if let Some(r) = requests.get(1) {
        check_upstream_request(&mut c, P::Gemini, r, "gemini attempt");
    }
    c.finish(&format!("SDK output: {got:#}\nupstream: {seen:#?}"));
}

/// OpenAI `n: 2` cannot be said to Anthropic: a route with only an Anthropic member refuses it
/// with a 400 naming the feature (the upstream never called); with an OpenAI member as well, that
/// member serves it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_n_2_is_protocol_unsupported_on_anthropic() {
    let mock = MockUpstream::start().await.unwrap();
    let routes = "  - model_pattern: n2-anthropic-only\n    members:\n      - { channel: up-anthropic, upstream_model: real-anthropic-model }\n  - model_pattern: n2-mixed\n    members:\n      - { channel: up-anthropic, upstream_model: real-anthropic-model, priority: 10 }\n      - { channel: up-openai, upstream_model: real-openai-model, priority: 0 }\n";
    let proxy = start(&yaml(&mock, routes)).await;
    let refused = run_sdk(P::OpenAi, &proxy.url, "n2-anthropic-only", "n2_error").await;
    let refused_hits = mock.hits();
    let served = run_sdk(P::OpenAi, &proxy.url, "n2-mixed", "n2").await;
    let requests = mock.requests();
    let seen: Vec<String> = requests.iter().map(describe).collect();
    let mut c = Checks::new("protocol_unsupported: openai SDK n=2");

    let e = &refused["n2_error"];
    c.eq("anthropic only", "status", &e["status"], 400);
    let message = e["message"].as_str().unwrap_or("");
    let names_n = message
        .split(|ch: char| !ch.is_ascii_alphanumeric() && ch != '_')
        .any(|word| word == "n");
    c.check(
        names_n,
        "anthropic only",
        format_args!("the 400 does not name the feature `n`: {message:?}"),
    );
    c.eq(
        "anthropic only",
        "upstream requests",
        &json!(refused_hits),
        0,
    );

    let s = &served["n2"];
    c.check(
        s["exception"].is_null(),
        "mixed",
        format_args!("the SDK raised {}", s["exception"]),
    );
    c.eq("mixed", "x-switchyard-channel", &s["channel"], "up-openai");
    c.eq("mixed", "x-switchyard-attempts", &s["attempts"], "1");
    let paths: Vec<&str> = requests.iter().map(|r| r.path.as_str()).collect();
    c.check(
        paths == ["/v1/chat/completions"],
        "mixed",
        format_args!("upstream paths {paths:?} (the Anthropic member must be skipped)"),
    );
    if let Some(r) = requests.first() {
        c.eq("mixed", "upstream n", &r.json()["n"], 2);
        check_upstream_request(&mut c, P::OpenAi, r, "mixed");
    }
    c.finish(&format!(
        "refused: {refused:#}\nserved: {served:#}\nupstream: {seen:#?}"
    ));
}

/// Gemini clients may put the key in `?key=` instead of `x-goog-api-key`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_key_query_parameter_authenticates() {
    let mock = MockUpstream::start().await.unwrap();
    script_mock(&mock, P::OpenAi);
    let proxy = start(&yaml(&mock, "")).await;
    let body = json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]});
    let url = format!(
        "{}/v1beta/models/via-openai:generateContent?key={TOKEN}",
        proxy.url
    );
    let reply = send(Method::POST, &url, None, body.to_string().into_bytes(), &[]).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let v = reply.json();
    assert_eq!(
        v["candidates"][0]["content"]["parts"][0]["text"],
        P::OpenAi.text(),
        "{v}"
    );
    assert_eq!(reply.header("x-switchyard-channel"), "up-openai");
    let requests = mock.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(
        requests[0].credential.as_deref(),
        Some(P::OpenAi.credential().as_str())
    );
    assert!(
        !requests[0].query.as_deref().unwrap_or("").contains(TOKEN),
        "the client's key reached the upstream"
    );
}

/// The google-genai SDK on both Gemini path generations: `/v1beta/models/{model}:{action}` (SDK
/// 1.x/2.x, or pinned) and `/v1/models/{model}:{action}` (the 3.x default), and on whatever its
/// installed version calls by default — a new SDK version that moves to a path the gateway does
/// not serve fails here, naming the version and the path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn genai_sdk_works_on_both_gemini_path_generations() {
    let mock = MockUpstream::start().await.unwrap();
    script_mock(&mock, P::Gemini);
    let proxy = start(&yaml(&mock, "")).await;
    let mut c = Checks::new("google-genai SDK path generations");
    let mut seen = String::new();
    let generations = ["/v1beta/models/", "/v1/models/"];
    for (pin, want) in [
        (Some("v1beta"), Some(generations[0])),
        (Some("v1"), Some(generations[1])),
        (None, None),
    ] {
        let got = run_sdk_env(
            P::Gemini,
            &proxy.url,
            &P::Gemini.route(""),
            "text,stream,count_tokens",
            pin.map(|v| ("GENAI_API_VERSION", v)),
        )
        .await;
        let label = pin.unwrap_or("the SDK's default");
        let version = got["_sdk"]["version"].as_str().unwrap_or("?");
        let paths: Vec<&str> = got["_sdk"]["paths"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        c.check(
            paths.len() == 3,
            label,
            format_args!("want 3 calls, the SDK made {paths:?}"),
        );
        for path in &paths {
            let ok = match want {
                Some(prefix) => path.starts_with(prefix),
                None => generations.iter().any(|g| path.starts_with(g)),
            };
            c.check(
                ok,
                label,
                format_args!(
                    "google-genai {version} called {path}, not under {}",
                    want.map_or_else(|| generations.join(" or "), str::to_owned)
                ),
            );
        }
        for scenario in ["text", "stream"] {
            c.eq(
                label,
                &format!("{scenario} text"),
                &got[scenario]["text"],
                P::Gemini.text(),
            );
            c.eq(
                label,
                &format!("{scenario} x-switchyard-channel"),
                &got[scenario]["channel"],
                P::Gemini.channel(),
            );
        }
        c.check(
            got["count_tokens"]["input_tokens"].as_u64().is_some(),
            label,
            format_args!("count_tokens: {}", got["count_tokens"]),
        );
        writeln!(seen, "{label}: {got:#}").unwrap();
    }
    // Upstream, the Gemini channel is always called on its own API (the generation the client
    // used is not passed on).
    let upstream: Vec<String> = mock.requests().iter().map(describe_path).collect();
    c.check(
        upstream
            .iter()
            .all(|p| p.contains("/v1beta/models/real-gemini-model:")),
        "upstream",
        format_args!("upstream paths {upstream:?}"),
    );
    c.finish(&seen);
}

/// A Responses request using what only OpenAI can do (`previous_response_id`) towards a route
/// with no member able to serve it (only Anthropic here) is a 400 `protocol_unsupported` naming
/// the feature, which the SDK does not retry, the upstream never called; with an OpenAI member
/// as well, that member serves it at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_sdk_responses_without_a_capable_member_is_protocol_unsupported() {
    let mock = MockUpstream::start().await.unwrap();
    mock.on(
        Matcher::any().model(&P::OpenAi.upstream_model("")),
        Behavior::ok().text(P::OpenAi.text()),
    );
    let routes = "  - model_pattern: responses-anthropic-only\n    members:\n      - { channel: up-anthropic, upstream_model: real-anthropic-model }\n  - model_pattern: responses-mixed\n    members:\n      - { channel: up-anthropic, upstream_model: real-anthropic-model, priority: 10 }\n      - { channel: up-openai, upstream_model: real-openai-model, priority: 0 }\n";
    let proxy = start(&yaml(&mock, routes)).await;
    let refused = run_sdk(
        P::OpenAi,
        &proxy.url,
        "responses-anthropic-only",
        "responses_previous",
    )
    .await;
    let refused_hits = mock.hits();
    let served = run_sdk(
        P::OpenAi,
        &proxy.url,
        "responses-mixed",
        "responses_continued",
    )
    .await;
    let requests = mock.requests();
    let seen: Vec<String> = requests.iter().map(describe).collect();
    let mut c = Checks::new("responses: protocol_unsupported");

    let e = &refused["responses_previous"];
    c.eq("anthropic only", "status", &e["status"], 400);
    c.eq(
        "anthropic only",
        "type",
        &e["type"],
        "invalid_request_error",
    );
    c.eq("anthropic only", "code", &e["code"], "protocol_unsupported");
    c.eq(
        "anthropic only",
        "x-should-retry",
        &e["should_retry"],
        "false",
    );
    c.check(
        e["message"]
            .as_str()
            .is_some_and(|m| m.contains("previous_response_id")),
        "anthropic only",
        format_args!(
            "the 400 does not name previous_response_id: {}",
            e["message"]
        ),
    );
    c.eq(
        "anthropic only",
        "upstream requests",
        &json!(refused_hits),
        0,
    );

    let s = &served["responses_continued"];
    c.check(
        s["exception"].is_null(),
        "mixed",
        format_args!("the SDK raised {}", s["exception"]),
    );
    c.eq("mixed", "text", &s["text"], P::OpenAi.text());
    c.eq("mixed", "x-switchyard-channel", &s["channel"], "up-openai");
    c.eq("mixed", "x-switchyard-attempts", &s["attempts"], "1");
    let paths: Vec<&str> = requests.iter().map(|r| r.path.as_str()).collect();
    c.check(
        paths == ["/v1/responses"],
        "mixed",
        format_args!("upstream paths {paths:?} (the Anthropic member must be skipped)"),
    );
    c.finish(&format!(
        "refused: {refused:#}\nserved: {served:#}\nupstream: {seen:#?}"
    ));
}

/// The official OpenAI SDK's `client.responses.create` through a route whose only member is
/// Anthropic or Gemini: instructions, `max_output_tokens`, function tools, the call and its
/// output translated; the answer a `response` object (`store: false`, usage with cached
/// tokens); streamed, the Responses event sequence the SDK's stream helper accepts.
async fn responses_translated(up: P) {
    let mock = MockUpstream::start().await.unwrap();
    script_mock(&mock, up);
    let proxy = start(&yaml(&mock, "")).await;
    let got = run_sdk(
        P::OpenAi,
        &proxy.url,
        &up.route(""),
        "responses,responses_tools,responses_tool_result,responses_stream,responses_tools_stream",
    )
    .await;
    let requests = mock.requests();
    let mut c = Checks::new(format!("openai SDK responses -> {} upstream", up.name()));
    for r in &requests {
        check_upstream_request(&mut c, up, r, &label(r));
    }

    let r = &got["responses"];
    c.check(
        r["exception"].is_null(),
        "responses",
        format_args!("the SDK raised {}", r["exception"]),
    );
    c.eq("responses", "text", &r["text"], up.text());
    c.eq("responses", "status", &r["status"], "completed");
    c.eq("responses", "object", &r["object"], "response");
    c.eq("responses", "store", &r["store"], false);
    c.eq(
        "responses",
        "x-switchyard-channel",
        &r["channel"],
        up.channel(),
    );
    c.eq(
        "responses",
        "cached tokens",
        &r["usage"]["cached"],
        TEXT_CACHED,
    );
    c.check(
        r["usage"]["input"].as_u64() >= Some(TEXT_CACHED)
            && r["usage"]["output"].as_u64().is_some_and(|n| n > 0),
        "responses",
        format_args!("usage {}", r["usage"]),
    );
    let sent = requests_with(&requests, "scenario=responses:");
    c.check(
        sent.len() == 1,
        "responses",
        format_args!("want 1 upstream request, got {}", sent.len()),
    );
    if let Some(req) = sent.first() {
        let body = req.json();
        check_system(&mut c, up, &body, "responses");
        let max = match up {
            P::Gemini => &body["generationConfig"]["maxOutputTokens"],
            _ => &body["max_tokens"],
        };
        c.eq("responses", "max output tokens", max, 300);
    }

    let t = &got["responses_tools"];
    c.check(
        t["exception"].is_null(),
        "responses_tools",
        format_args!("the SDK raised {}", t["exception"]),
    );
    c.eq(
        "responses_tools",
        "call name",
        &t["calls"][0]["name"],
        "get_weather",
    );
    c.eq(
        "responses_tools",
        "call arguments",
        &t["calls"][0]["arguments"],
        json!({"city": "Paris"}),
    );
    c.eq(
        "responses_tools",
        "cached tokens",
        &t["usage"]["cached"],
        TOOLS_CACHED,
    );
    if let Some(req) = requests_with(&requests, "scenario=responses_tools:").first() {
        check_tools(&mut c, up, &req.json(), "responses_tools");
    }

    let tr = &got["responses_tool_result"];
    c.check(
        tr["exception"].is_null(),
        "responses_tool_result",
        format_args!("the SDK raised {}", tr["exception"]),
    );
    c.eq(
        "responses_tool_result",
        "second turn text",
        &tr["text"],
        up.text(),
    );
    let second = requests_with(&requests, TOOL_RESULT_MARK);
    c.check(
        second.len() == 1,
        "responses_tool_result",
        format_args!(
            "want 1 upstream request with the tool result, got {}",
            second.len()
        ),
    );
    if let Some(req) = second.first() {
        check_tool_result(&mut c, up, &req.json(), "responses_tool_result");
    }

    for (scenario, tools) in [
        ("responses_stream", false),
        ("responses_tools_stream", true),
    ] {
        let st = &got[scenario];
        c.check(
            st["exception"].is_null(),
            scenario,
            format_args!(
                "the SDK raised {}\n{}",
                st["exception"],
                st["traceback"].as_str().unwrap_or("")
            ),
        );
        let types: Vec<&str> = st["types"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        c.check(
            types.first() == Some(&"response.created")
                && types.last() == Some(&"response.completed"),
            scenario,
            format_args!("event order {types:?}"),
        );
        c.eq(scenario, "store", &st["store"], false);
        c.eq(scenario, "status", &st["status"], "completed");
        let sent = requests_with(&requests, &format!("scenario={scenario}:"));
        let streamed = sent.first().is_some_and(|r| match up {
            P::Gemini => r.path.ends_with(":streamGenerateContent"),
            _ => r.json()["stream"] == true,
        });
        c.check(
            sent.len() == 1 && streamed,
            scenario,
            format_args!("want 1 streamed upstream request, got {}", sent.len()),
        );
        if tools {
            c.eq(
                scenario,
                "call name",
                &st["calls"][0]["name"],
                "get_weather",
            );
            c.eq(
                scenario,
                "call arguments",
                &st["calls"][0]["arguments"],
                json!({"city": "Paris"}),
            );
            c.check(
                types.contains(&"response.function_call_arguments.delta"),
                scenario,
                format_args!("no argument deltas in {types:?}"),
            );
        } else {
            c.eq(scenario, "text", &st["text"], up.text());
            c.check(
                st["pieces"].as_array().is_some_and(|p| !p.is_empty()),
                scenario,
                "no output_text deltas",
            );
            c.eq(
                scenario,
                "cached tokens",
                &st["usage"]["cached"],
                TEXT_CACHED,
            );
        }
    }
    c.finish(&format!(
        "SDK output: {got:#}\n\nupstream requests:\n{}",
        requests.iter().map(describe).collect::<Vec<_>>().join("\n")
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_sdk_responses_translated_to_anthropic() {
    responses_translated(P::Anthropic).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_sdk_responses_translated_to_gemini() {
    responses_translated(P::Gemini).await;
}

/// Two OpenAI channels, the higher-priority one answering 503: a stateless Responses request
/// (no `background`, no `Idempotency-Key`, as the SDK sends it) fails over to the healthy one;
/// a `background: true` request without an `Idempotency-Key` is not retried (the 503 reaches
/// the client after one attempt).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_sdk_stateless_responses_request_fails_over_to_a_healthy_member() {
    let mock = MockUpstream::start().await.unwrap();
    mock.on(
        Matcher::any().model("real-openai-down"),
        Behavior::status(503),
    );
    mock.on(
        Matcher::any().model(&P::OpenAi.upstream_model("")),
        Behavior::ok().text(P::OpenAi.text()),
    );
    let yaml = format!(
        "settings:\n  channel_retry_times: 0\nchannels:\n  - name: down\n    provider: openai\n    base_url: {url}\n    credentials: [\"k-down\"]\n  - name: up-openai\n    provider: openai\n    base_url: {url}\n    credentials: [\"k-up\"]\nroutes:\n  - model_pattern: responses-failover\n    members:\n      - {{ channel: down, upstream_model: real-openai-down, priority: 10 }}\n      - {{ channel: up-openai, upstream_model: real-openai-model, priority: 0 }}\n",
        url = mock.base_url()
    );
    let proxy = start(&yaml).await;
    let got = run_sdk(P::OpenAi, &proxy.url, "responses-failover", "responses").await;
    let stateless: Vec<String> = requests_with(&mock.requests(), "scenario=responses:")
        .iter()
        .map(|r| describe_path(r))
        .collect();
    let mut c = Checks::new("responses: failover");
    let r = &got["responses"];
    c.check(
        r["exception"].is_null(),
        "stateless",
        format_args!("the SDK raised {}", r["exception"]),
    );
    c.eq("stateless", "text", &r["text"], P::OpenAi.text());
    c.eq(
        "stateless",
        "x-switchyard-channel",
        &r["channel"],
        "up-openai",
    );
    c.eq("stateless", "x-switchyard-attempts", &r["attempts"], "2");
    c.check(
        stateless.len() == 2,
        "stateless",
        format_args!(
            "want 2 upstream requests (the 503, then the healthy member), got {stateless:?}"
        ),
    );

    // The failing member is cooling down now; a fresh proxy starts from clean health.
    let proxy = start(&yaml).await;
    let bg = run_sdk(
        P::OpenAi,
        &proxy.url,
        "responses-failover",
        "responses_background",
    )
    .await;
    let background = requests_with(&mock.requests(), "scenario=responses_background:").len();
    let e = &bg["responses_background"];
    c.eq("background", "status", &e["status"], 503);
    c.eq("background", "x-switchyard-attempts", &e["attempts"], "1");
    c.eq("background", "upstream requests", &json!(background), 1);
    c.finish(&format!("stateless: {got:#}\nbackground: {bg:#}"));
}

/// The official OpenAI SDK's `client.responses.create` through a route whose only member is an
/// OpenAI channel without the Responses API (`responses_api: false`): plain, streamed, function
/// tools with the tool result sent back, and a JSON schema for the text, all sent upstream as
/// Chat Completions and answered as `response` objects. `previous_response_id` is refused for
/// it (400 `protocol_unsupported`, nothing sent), while an OpenAI member with the Responses API
/// next to it serves it passed through; a stateless request fails over from a failing member
/// without the Responses API to a healthy one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_sdk_responses_on_a_chat_completions_only_member() {
    let mock = MockUpstream::start().await.unwrap();
    script_mock(&mock, P::OpenAi);
    let routes = "  - model_pattern: via-chat\n    members:\n      - { channel: up-chat, upstream_model: real-openai-model }\n  - model_pattern: via-chat-tools\n    members:\n      - { channel: up-chat, upstream_model: real-openai-model-tools }\n  - model_pattern: chat-next-to-openai\n    members:\n      - { channel: up-chat, upstream_model: real-openai-model, priority: 10 }\n      - { channel: up-openai, upstream_model: real-openai-model, priority: 0 }\n  - model_pattern: chat-failover\n    members:\n      - { channel: up-chat, upstream_model: real-openai-model-503, priority: 10 }\n      - { channel: up-openai, upstream_model: real-openai-model, priority: 0 }\n";
    let chat_channel = format!(
        "  - name: up-chat\n    provider: openai\n    base_url: {}\n    credentials: [\"upstream-key-chat\"]\n    responses_api: false\nroutes:\n",
        mock.base_url()
    );
    let proxy = start(&yaml(&mock, routes).replacen("routes:\n", &chat_channel, 1)).await;
    let mut c = Checks::new("openai SDK responses -> chat-completions-only openai upstream");

    let got = run_sdk(
        P::OpenAi,
        &proxy.url,
        "via-chat",
        "responses,responses_tools,responses_tool_result,responses_stream,responses_tools_stream,responses_schema",
    )
    .await;
    let served = mock.requests();
    let paths: Vec<&str> = served.iter().map(|r| r.path.as_str()).collect();
    c.check(
        !paths.is_empty() && paths.iter().all(|p| *p == "/v1/chat/completions"),
        "all",
        format_args!("upstream paths {paths:?} (never /v1/responses)"),
    );
    for r in &served {
        c.check(
            r.json()["messages"].is_array() && r.json()["input"].is_null(),
            &label(r),
            format_args!("not a Chat Completions body: {}", r.json()),
        );
    }
    let r = &got["responses"];
    c.check(
        r["exception"].is_null(),
        "responses",
        format_args!("the SDK raised {}", r["exception"]),
    );
    c.eq("responses", "text", &r["text"], P::OpenAi.text());
    c.eq("responses", "status", &r["status"], "completed");
    c.eq("responses", "object", &r["object"], "response");
    c.eq("responses", "store", &r["store"], false);
    c.eq(
        "responses",
        "x-switchyard-channel",
        &r["channel"],
        "up-chat",
    );
    c.eq(
        "responses",
        "cached tokens",
        &r["usage"]["cached"],
        TEXT_CACHED,
    );
    if let Some(req) = requests_with(&served, "scenario=responses:").first() {
        let body = req.json();
        c.eq(
            "responses",
            "upstream model",
            &body["model"],
            "real-openai-model",
        );
        c.eq(
            "responses",
            "system",
            &body["messages"][0]["role"],
            "system",
        );
        c.eq(
            "responses",
            "max tokens",
            &body["max_completion_tokens"],
            300,
        );
    } else {
        c.check(false, "responses", "no upstream request");
    }

    let t = &got["responses_tools"];
    c.check(
        t["exception"].is_null(),
        "responses_tools",
        format_args!("the SDK raised {}", t["exception"]),
    );
    c.eq(
        "responses_tools",
        "call name",
        &t["calls"][0]["name"],
        "get_weather",
    );
    c.eq(
        "responses_tools",
        "call arguments",
        &t["calls"][0]["arguments"],
        json!({"city": "Paris"}),
    );
    if let Some(req) = requests_with(&served, "scenario=responses_tools:").first() {
        let body = req.json();
        c.eq(
            "responses_tools",
            "tool",
            &body["tools"][0]["function"]["name"],
            "get_weather",
        );
    }

    let tr = &got["responses_tool_result"];
    c.check(
        tr["exception"].is_null(),
        "responses_tool_result",
        format_args!("the SDK raised {}", tr["exception"]),
    );
    c.eq(
        "responses_tool_result",
        "second turn text",
        &tr["text"],
        P::OpenAi.text(),
    );
    let second = requests_with(&served, TOOL_RESULT_MARK);
    c.check(
        second.len() == 1,
        "responses_tool_result",
        format_args!(
            "want 1 upstream request with the tool result, got {}",
            second.len()
        ),
    );
    if let Some(req) = second.first() {
        let body = req.json();
        let messages = body["messages"].as_array().cloned().unwrap_or_default();
        let tool = messages.iter().find(|m| m["role"] == "tool");
        c.check(
            tool.is_some_and(|m| {
                m["tool_call_id"] == tr["first_call_id"]
                    && m["content"]
                        .as_str()
                        .is_some_and(|s| s.contains(TOOL_RESULT_MARK))
            }),
            "responses_tool_result",
            format_args!("no tool message with the call's output: {body}"),
        );
        c.check(
            messages
                .iter()
                .any(|m| m["tool_calls"][0]["id"] == tr["first_call_id"]),
            "responses_tool_result",
            format_args!("no assistant tool call in the history: {body}"),
        );
    }

    for (scenario, tools) in [
        ("responses_stream", false),
        ("responses_tools_stream", true),
    ] {
        let st = &got[scenario];
        c.check(
            st["exception"].is_null(),
            scenario,
            format_args!("the SDK raised {}", st["exception"]),
        );
        let types: Vec<&str> = st["types"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        c.check(
            types.first() == Some(&"response.created")
                && types.last() == Some(&"response.completed"),
            scenario,
            format_args!("event order {types:?}"),
        );
        c.eq(scenario, "store", &st["store"], false);
        if tools {
            c.eq(
                scenario,
                "call name",
                &st["calls"][0]["name"],
                "get_weather",
            );
        } else {
            c.eq(scenario, "text", &st["text"], P::OpenAi.text());
        }
        if let Some(req) = requests_with(&served, &format!("scenario={scenario}:")).first() {
            c.eq(scenario, "stream", &req.json()["stream"], true);
        }
    }

    let s = &got["responses_schema"];
    c.check(
        s["exception"].is_null(),
        "responses_schema",
        format_args!("the SDK raised {}", s["exception"]),
    );
    c.eq("responses_schema", "text", &s["text"], P::OpenAi.text());
    if let Some(req) = requests_with(&served, "scenario=responses_schema:").first() {
        let format = &req.json()["response_format"];
        c.eq(
            "responses_schema",
            "format type",
            &format["type"],
            "json_schema",
        );
        c.eq(
            "responses_schema",
            "schema name",
            &format["json_schema"]["name"],
            "weather",
        );
        c.eq(
            "responses_schema",
            "schema",
            &format["json_schema"]["schema"]["required"],
            json!(["summary"]),
        );
    } else {
        c.check(false, "responses_schema", "no upstream request");
    }

    // previous_response_id: Chat Completions has no stored responses.
    mock.reset();
    script_mock(&mock, P::OpenAi);
    let refused = run_sdk(P::OpenAi, &proxy.url, "via-chat", "responses_previous").await;
    let e = &refused["responses_previous"];
    c.eq("previous", "status", &e["status"], 400);
    c.eq("previous", "code", &e["code"], "protocol_unsupported");
    c.check(
        e["message"]
            .as_str()
            .is_some_and(|m| m.contains("previous_response_id")),
        "previous",
        format_args!(
            "the 400 does not name previous_response_id: {}",
            e["message"]
        ),
    );
    c.eq("previous", "upstream requests", &json!(mock.hits()), 0);

    // The same next to a member with the Responses API: that member serves it, passed through.
    let continued = run_sdk(
        P::OpenAi,
        &proxy.url,
        "chat-next-to-openai",
        "responses_continued",
    )
    .await;
    let s = &continued["responses_continued"];
    c.check(
        s["exception"].is_null(),
        "continued",
        format_args!("the SDK raised {}", s["exception"]),
    );
    c.eq(
        "continued",
        "x-switchyard-channel",
        &s["channel"],
        "up-openai",
    );
    c.eq("continued", "x-switchyard-attempts", &s["attempts"], "1");
    let paths: Vec<String> = mock.requests().iter().map(|r| r.path.clone()).collect();
    c.check(
        paths == ["/v1/responses"],
        "continued",
        format_args!("upstream paths {paths:?}"),
    );

    // A stateless request fails over from the failing member without the Responses API.
    mock.reset();
    script_mock(&mock, P::OpenAi);
    let failover = run_sdk(P::OpenAi, &proxy.url, "chat-failover", "responses").await;
    let f = &failover["responses"];
    c.check(
        f["exception"].is_null(),
        "failover",
        format_args!("the SDK raised {}", f["exception"]),
    );
    c.eq(
        "failover",
        "x-switchyard-channel",
        &f["channel"],
        "up-openai",
    );
    c.eq("failover", "x-switchyard-attempts", &f["attempts"], "2");
    c.eq("failover", "text", &f["text"], P::OpenAi.text());
    let paths: Vec<String> = mock.requests().iter().map(|r| r.path.clone()).collect();
    c.check(
        paths == ["/v1/chat/completions", "/v1/responses"],
        "failover",
        format_args!("upstream paths {paths:?}"),
    );
    c.finish(&format!(
        "served: {got:#}\nrefused: {refused:#}\ncontinued: {continued:#}\nfailover: {failover:#}"
    ));
}
