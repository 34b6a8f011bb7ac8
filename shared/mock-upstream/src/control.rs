//! The HTTP control API under `/__mock/`, so tests in other languages and failover drills can
//! script a running mock: `POST /__mock/rules`, `GET /__mock/rules`, `GET /__mock/hits`,
//! `GET /__mock/requests`, `POST /__mock/reset`. Control requests are never counted as hits.
//!
//! A rule is `{"matcher": {...}, "behavior": {...}}`; [`BehaviorSpec`] maps each JSON field to
//! the [`Behavior`] refinement of the same name, e.g.
//!
//! ```json
//! {"matcher": {"path": "/v1/messages", "credential": "sk-ant-a"},
//!  "behavior": {"text": "Let me check.",
//!               "tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}],
//!               "cached_tokens": 1024, "stream": {"chunks": 4, "gap_ms": 20}}}
//! ```
//!
//! A tool call's `arguments` is the arguments' JSON text or any JSON object (sent as its text).

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use http::{Response, StatusCode};
use serde::Deserialize;
use serde_json::json;
use switchyard_sim as sim;

use crate::respond::{full, MockBody};
use crate::script::{Behavior, Matcher, RealtimeLog, Script};
use crate::vertex::TokenIssuer;

pub(crate) const PREFIX: &str = "/__mock/";

/// `POST /__mock/rules` body.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleSpec {
    #[serde(default)]
    pub matcher: MatcherSpec,
    #[serde(default)]
    pub behavior: BehaviorSpec,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MatcherSpec {
    pub path: Option<String>,
    pub credential: Option<String>,
    pub model: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BehaviorSpec {
    pub status: Option<u16>,
    pub body: Option<String>,
    #[serde(default)]
    pub headers: std::collections::BTreeMap<String, String>,
    pub retry_after: Option<u64>,
    pub latency_ms: Option<u64>,
    #[serde(default)]
    pub hang: bool,
    #[serde(default)]
    pub malformed: bool,
    #[serde(default)]
    pub empty_completion: bool,
    /// [`Behavior::text`].
    pub text: Option<String>,
    /// [`Behavior::tool_call`], in order.
    #[serde(default)]
    pub tool_calls: Vec<ToolCallSpec>,
    /// [`Behavior::cached_tokens`].
    pub cached_tokens: Option<u64>,
    pub stream: Option<StreamSpec>,
    #[serde(default)]
    pub cut_before_first_byte: bool,
    pub cut_after_chunks: Option<usize>,
    pub times: Option<usize>,
}

/// One scripted tool call: `{"name": "get_weather", "arguments": {"city": "Paris"}}`;
/// `arguments` may also be the JSON text (`"{\"city\":\"Paris\"}"`) and defaults to `{}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolCallSpec {
    pub name: String,
    #[serde(default)]
    pub arguments: serde_json::Value,
}

impl ToolCallSpec {
    /// The arguments as JSON text: a string verbatim, `{}` when absent, any other value
    /// serialized.
    pub fn arguments_text(&self) -> String {
        match &self.arguments {
            serde_json::Value::String(text) => text.clone(),
            serde_json::Value::Null => "{}".to_owned(),
            other => other.to_string(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamSpec {
    pub chunks: usize,
    #[serde(default)]
    pub gap_ms: u64,
}

impl From<MatcherSpec> for Matcher {
    fn from(spec: MatcherSpec) -> Self {
        let mut matcher = Matcher::any();
        if let Some(path) = &spec.path {
            matcher = matcher.and_path(path);
        }
        if let Some(credential) = &spec.credential {
            matcher = matcher.credential(credential);
        }
        if let Some(model) = &spec.model {
            matcher = matcher.model(model);
        }
        matcher
    }
}

impl From<BehaviorSpec> for Behavior {
    fn from(spec: BehaviorSpec) -> Self {
        let mut b = match spec.status {
            Some(status) => Behavior::status(status),
            None => Behavior::ok(),
        };
        if let Some(body) = spec.body {
            b = b.body(body);
        }
        for (name, value) in spec.headers {
            b = b.header(name, value);
        }
        if let Some(secs) = spec.retry_after {
            b = b.retry_after(secs);
        }
        if let Some(ms) = spec.latency_ms {
            b = b.latency(Duration::from_millis(ms));
        }
        if spec.hang {
            b = b.hang();
        }
        if spec.malformed {
            b = b.malformed();
        }
        if spec.empty_completion {
            b = b.empty_completion();
        }
        if let Some(text) = spec.text {
            b = b.text(text);
        }
        for call in &spec.tool_calls {
            b = b.tool_call(call.name.clone(), call.arguments_text());
        }
        if let Some(n) = spec.cached_tokens {
            b = b.cached_tokens(n);
        }
        if let Some(stream) = spec.stream {
            b = b.stream(stream.chunks, Duration::from_millis(stream.gap_ms));
        }
        if spec.cut_before_first_byte {
            b = b.cut_before_first_byte();
        }
        if let Some(n) = spec.cut_after_chunks {
            b = b.cut_after_chunks(n);
        }
        if let Some(n) = spec.times {
            b = b.times(n);
        }
        b
    }
}

/// State shared by the handle, every connection task and the control API.
pub(crate) struct Shared {
    pub(crate) script: Mutex<Script>,
    /// Vertex AI's token endpoint.
    pub(crate) vertex: Mutex<TokenIssuer>,
    /// The token endpoint's URL, the audience its assertions must name.
    pub(crate) token_uri: String,
    pub(crate) models: Vec<String>,
    pub(crate) control_api: bool,
    /// What the realtime sessions received.
    pub(crate) realtime: Mutex<RealtimeLog>,
    /// OpenAI's Files and Batch APIs' state.
    pub(crate) files: Mutex<crate::files::Store>,
}

impl Shared {
    pub(crate) fn script(&self) -> MutexGuard<'_, Script> {
        // A panic while holding the lock cannot leave the script half-updated in a way that
        // matters to a mock, so a poisoned lock is still used.
        self.script.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn realtime(&self) -> MutexGuard<'_, RealtimeLog> {
        self.realtime.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn files(&self) -> MutexGuard<'_, crate::files::Store> {
        self.files.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn vertex(&self) -> MutexGuard<'_, TokenIssuer> {
        self.vertex.lock().unwrap_or_else(|e| e.into_inner())
    }
}

pub(crate) fn handle(shared: &Shared, method: &str, path: &str, body: &[u8]) -> Response<MockBody> {
    let route = path.trim_start_matches(PREFIX);
    match (method, route) {
        ("POST", "rules") => match serde_json::from_slice::<RuleSpec>(body) {
            Ok(spec) => {
                let behavior = Behavior::from(spec.behavior);
                if let Some(status) = behavior.status {
                    if !(100..=999).contains(&status) {
                        return bad_request(&format!(
                            "behavior.status: {status} is not an HTTP status"
                        ));
                    }
                }
                let index = shared.script().add_rule(spec.matcher.into(), behavior);
                tracing::info!(index, "mock upstream: rule added");
                ok(json!({"index": index}))
            }
            Err(error) => bad_request(&format!("invalid rule: {error}")),
        },
        ("GET", "rules") => ok(json!({"rules": shared.script().rule_reports()})),
        ("GET", "hits") => {
            let script = shared.script();
            ok(json!({"hits": script.counts(), "rules": script.rule_reports()}))
        }
        ("GET", "requests") => {
            let requests: Vec<_> = shared
                .script()
                .requests()
                .iter()
                .map(|r| {
                    json!({
                        "method": r.method, "path": r.path, "credential": r.credential,
                        "model": r.model, "body": String::from_utf8_lossy(&r.body)
                    })
                })
                .collect();
            ok(json!({"requests": requests}))
        }
        ("POST", "reset") => {
            shared.script().reset();
            tracing::info!("mock upstream: reset");
            ok(json!({"reset": true}))
        }
        _ => {
            let body = sim::openai_error_json(
                &format!("no control endpoint {method} {path}"),
                "invalid_request_error",
                "not_found",
            );
            full(StatusCode::NOT_FOUND, "application/json", body)
        }
    }
}

fn ok(value: serde_json::Value) -> Response<MockBody> {
    full(StatusCode::OK, "application/json", value.to_string())
}

fn bad_request(message: &str) -> Response<MockBody> {
    let body = sim::openai_error_json(message, "invalid_request_error", "invalid_rule");
    full(StatusCode::BAD_REQUEST, "application/json", body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rule_spec_builds_the_same_behavior_as_the_builder() {
        let spec: RuleSpec = serde_json::from_str(
            r#"{"matcher":{"path":"/v1/chat/completions","credential":"sk-a"},
                "behavior":{"status":429,"retry_after":7,"times":2,"latency_ms":5,
                            "stream":{"chunks":4,"gap_ms":10},"cut_after_chunks":2}}"#,
        )
        .unwrap();
        assert_eq!(
            Matcher::from(spec.matcher),
            Matcher::path("/v1/chat/completions").credential("sk-a")
        );
        assert_eq!(
            Behavior::from(spec.behavior),
            Behavior::status(429)
                .retry_after(7)
                .latency(Duration::from_millis(5))
                .stream(4, Duration::from_millis(10))
                .cut_after_chunks(2)
                .times(2)
        );
    }

    #[test]
    fn tool_calls_text_and_cached_tokens_map_to_the_refinements() {
        let spec: BehaviorSpec = serde_json::from_str(
            r#"{"text":"Checking.","cached_tokens":64,
                "tool_calls":[{"name":"get_weather","arguments":{"city":"Paris"}},
                              {"name":"raw","arguments":"{\"a\":1}"},
                              {"name":"none"}]}"#,
        )
        .unwrap();
        assert_eq!(
            Behavior::from(spec),
            Behavior::ok()
                .text("Checking.")
                .tool_call("get_weather", r#"{"city":"Paris"}"#)
                .tool_call("raw", r#"{"a":1}"#)
                .tool_call("none", "{}")
                .cached_tokens(64)
        );
    }

    #[test]
    fn unknown_fields_are_rejected() {
        let err = serde_json::from_str::<RuleSpec>(r#"{"behavior":{"statuss":500}}"#).unwrap_err();
        assert!(err.to_string().contains("statuss"), "{err}");
    }
}
