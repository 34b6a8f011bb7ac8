//! What the exact response cache reads of a request, purely: whether its endpoint can be
//! cached, whether it asks for a reproducible answer, what the client's `Cache-Control` allows,
//! and the key — a SHA-256 over the client's protocol (its endpoint), the route, the model
//! asked for, the scope's part (a team or a token), the provider headers a passed-through
//! request carries upstream (`anthropic-*`, `openai-*`, `x-goog-*`: a beta or an API version
//! can change the answer), the query string (without Gemini's stream format, `alt`) and the
//! body normalised (`canonical.rs`): keys sorted, without what only shapes the transport
//! (`stream`, `stream_options`) or names the caller (`user`, `metadata`). Gemini's stream flag
//! is in its path, never in the body.

use http::HeaderMap;
use serde_json::Value;
use sha2::{Digest, Sha256};
use switchyard_engine::{CacheEndpoint, CacheScope, RouteId, Token};
use switchyard_state::cache::CacheKey;

use super::canonical::{Canonical, TRANSPORT_ONLY};
use crate::endpoint::Endpoint;

/// The cache's name for a proxy endpoint, when answers of that endpoint can be cached.
pub fn cache_endpoint(endpoint: Endpoint) -> Option<CacheEndpoint> {
    Some(match endpoint {
        Endpoint::ChatCompletions => CacheEndpoint::ChatCompletions,
        Endpoint::Completions => CacheEndpoint::Completions,
        Endpoint::Embeddings => CacheEndpoint::Embeddings,
        Endpoint::Messages => CacheEndpoint::Messages,
        Endpoint::GeminiGenerate => CacheEndpoint::GenerateContent,
        Endpoint::Responses => CacheEndpoint::Responses,
        _ => return None,
    })
}

/// Whether a hit can be replayed as a stream for this endpoint: every cached endpoint but
/// embeddings, which never stream. A streamed request of another endpoint is not cached.
pub fn replays_as_stream(endpoint: Endpoint) -> bool {
    endpoint.is_chat() || matches!(endpoint, Endpoint::Completions | Endpoint::Responses)
}

/// How the client asked for its answer; a hit is given to it the same way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// One JSON answer.
    Plain,
    /// Server-sent events.
    Events,
    /// Gemini's `streamGenerateContent` without `alt=sse`: one JSON array of responses.
    JsonArray,
}

/// What a request is, as the cache judges it.
pub struct Asked<'a> {
    pub endpoint: Endpoint,
    /// The body read for the cache; `None`: it is not one JSON object.
    pub body: Option<&'a Canonical>,
    pub stream: bool,
    /// The query string (Gemini's `alt=sse` asks for server-sent events).
    pub query: Option<&'a str>,
}

impl Asked<'_> {
    pub fn shape(&self) -> Shape {
        let sse = self
            .query
            .is_some_and(|q| q.split('&').any(|pair| pair == "alt=sse"));
        match (self.stream, self.endpoint) {
            (false, _) => Shape::Plain,
            (true, Endpoint::GeminiGenerate) if !sse => Shape::JsonArray,
            (true, _) => Shape::Events,
        }
    }
}

/// Why a request a rule covers is not cached; `None`: it can be.
pub fn not_cacheable(asked: &Asked<'_>, deterministic_only: bool) -> Option<&'static str> {
    let endpoint = asked.endpoint;
    let Some(body) = asked.body else {
        return Some("not_json");
    };
    if asked.stream && !replays_as_stream(endpoint) {
        return Some("stream");
    }
    if endpoint == Endpoint::Responses && !stateless(body) {
        return Some("stateful");
    }
    if deterministic_only && !deterministic(endpoint, body) {
        return Some("not_deterministic");
    }
    None
}

/// A Responses request the upstream keeps nothing of: no `previous_response_id` or
/// `conversation`, `store: false`, not in the background.
fn stateless(body: &Canonical) -> bool {
    let absent = |field: &str| body.field(field).is_none_or(|v| v == b"null");
    absent("previous_response_id")
        && absent("conversation")
        && body.field("store") == Some(b"false")
        && body.field("background") != Some(b"true")
}

/// Whether the request asks for a reproducible answer: temperature 0 or a seed (Gemini: in
/// `generationConfig`); embeddings always are.
pub fn deterministic(endpoint: Endpoint, body: &Canonical) -> bool {
    match endpoint {
        Endpoint::Embeddings => true,
        Endpoint::GeminiGenerate => {
            let config = body.value("generationConfig").unwrap_or(Value::Null);
            zero_or_seed(config.get("temperature"), config.get("seed"))
        }
        _ => zero_or_seed(
            body.value("temperature").as_ref(),
            body.value("seed").as_ref(),
        ),
    }
}

/// A temperature of zero, or a seed.
fn zero_or_seed(temperature: Option<&Value>, seed: Option<&Value>) -> bool {
    let zero = temperature
        .and_then(Value::as_f64)
        .is_some_and(|t| t == 0.0);
    zero || seed.is_some_and(|s| !s.is_null())
}

/// What the client's `Cache-Control` allows: (read the cache, write the answer).
/// `no-cache` skips the read, `no-store` the write.
pub fn directives(headers: &HeaderMap) -> (bool, bool) {
    let mut read = true;
    let mut write = true;
    for value in headers.get_all(http::header::CACHE_CONTROL) {
        let Ok(text) = value.to_str() else {
            continue;
        };
        for directive in text.split(',').map(str::trim) {
            if directive.eq_ignore_ascii_case("no-cache") {
                read = false;
            } else if directive.eq_ignore_ascii_case("no-store") {
                write = false;
            }
        }
    }
    (read, write)
}

/// The key of a request.
pub struct KeyParts<'a> {
    pub endpoint: Endpoint,
    pub route: RouteId,
    pub model: &'a str,
    pub scope: CacheScope,
    pub token: &'a Token,
    pub headers: &'a HeaderMap,
    /// The query string, without credentials.
    pub query: Option<&'a str>,
    /// The body normalised ([`Canonical::normalised`], or [`normalised`] of a value).
    pub body: &'a [u8],
}

impl KeyParts<'_> {
    pub fn key(&self) -> CacheKey {
        let mut hash = Sha256::new();
        hash.update(b"switchyard-cache-v1\0");
        hash.update(format!("{:?}\0{}\0", self.endpoint, self.route));
        hash.update(self.model.as_bytes());
        hash.update(b"\0");
        hash.update(self.scope_part().as_bytes());
        hash.update(b"\0");
        for (name, value) in provider_headers(self.headers) {
            hash.update(name.as_bytes());
            hash.update(b":");
            hash.update(value);
            hash.update(b"\n");
        }
        hash.update(b"\0");
        let mut params: Vec<&str> = self
            .query
            .unwrap_or("")
            .split('&')
            .filter(|p| !p.is_empty() && p.split('=').next() != Some("alt"))
            .collect();
        params.sort_unstable();
        hash.update(params.join("&").as_bytes());
        hash.update(b"\0");
        hash.update(self.body);
        CacheKey(hash.finalize().into())
    }

    /// Who shares the entry: everyone (`route`), a team (a token without a team: itself), or
    /// one token.
    fn scope_part(&self) -> String {
        match (self.scope, self.token.team_id) {
            (CacheScope::Route, _) => "route".to_owned(),
            (CacheScope::Team, Some(team)) => format!("team:{team}"),
            (CacheScope::Team | CacheScope::Token, _) => format!("token:{}", self.token.id),
        }
    }
}

/// The headers that can change a provider's answer, sorted: its own prefixes, never a
/// credential.
fn provider_headers(headers: &HeaderMap) -> Vec<(&str, &[u8])> {
    let mut out: Vec<(&str, &[u8])> = headers
        .iter()
        .map(|(name, value)| (name.as_str(), value.as_bytes()))
        .filter(|(name, _)| {
            (name.starts_with("anthropic-")
                || name.starts_with("openai-")
                || name.starts_with("x-goog-"))
                && *name != "x-goog-api-key"
        })
        .collect();
    out.sort_unstable();
    out
}

/// A body value as the key sees it: keys sorted at every depth, the transport-only fields left
/// out (the bytes [`Canonical::normalised`] reads from the body's own).
pub fn normalised(body: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    match body {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map
                .keys()
                .filter(|k| !TRANSPORT_ONLY.contains(&k.as_str()))
                .collect();
            keys.sort();
            write_object(&mut out, keys.into_iter().map(|k| (k, &map[k])));
        }
        other => write_sorted(&mut out, other),
    }
    out
}

fn write_object<'v>(out: &mut Vec<u8>, fields: impl Iterator<Item = (&'v String, &'v Value)>) {
    out.push(b'{');
    for (i, (key, value)) in fields.enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_scalar(out, &Value::String(key.clone()));
        out.push(b':');
        write_sorted(out, value);
    }
    out.push(b'}');
}

fn write_sorted(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::Object(map) => {
            let mut fields: Vec<(&String, &Value)> = map.iter().collect();
            fields.sort_by(|a, b| a.0.cmp(b.0));
            write_object(out, fields.into_iter());
        }
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_sorted(out, item);
            }
            out.push(b']');
        }
        scalar => write_scalar(out, scalar),
    }
}

fn write_scalar(out: &mut Vec<u8>, value: &Value) {
    // Writing a scalar into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, value);
}

/// Whether a 2xx answer (the canonical, plain one) is a refusal, which is never cached: a
/// content filter's or a model's refusal (a Responses answer's `refusal` part, or one cut by a
/// filter), a Gemini answer blocked for safety.
pub fn refused(endpoint: Endpoint, answer: &Value) -> bool {
    match endpoint {
        Endpoint::Messages => answer.get("stop_reason").and_then(Value::as_str) == Some("refusal"),
        Endpoint::Responses => {
            let filtered = answer
                .pointer("/incomplete_details/reason")
                .and_then(Value::as_str)
                == Some("content_filter");
            let refusal = answer
                .get("output")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|item| item.get("content").and_then(Value::as_array))
                .flatten()
                .any(|part| part.get("type").and_then(Value::as_str) == Some("refusal"));
            filtered || refusal
        }
        Endpoint::GeminiGenerate => {
            let blocked = answer
                .get("promptFeedback")
                .and_then(|f| f.get("blockReason"))
                .is_some();
            let unsafe_finish = answer
                .get("candidates")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|c| c.get("finishReason").and_then(Value::as_str))
                .any(|r| {
                    matches!(
                        r,
                        "SAFETY" | "RECITATION" | "BLOCKLIST" | "PROHIBITED_CONTENT" | "SPII"
                    )
                });
            blocked || unsafe_finish
        }
        _ => answer
            .get("choices")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .any(|c| {
                c.get("finish_reason").and_then(Value::as_str) == Some("content_filter")
                    || c.get("message")
                        .and_then(|m| m.get("refusal"))
                        .is_some_and(|r| !r.is_null())
            }),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn token(id: i64, team: Option<i64>) -> Token {
        Token {
            id,
            name: format!("t{id}"),
            hash: String::new(),
            route_group_name: None,
            team_id: team,
            allow_pinning: false,
            enabled: true,
            expires_at: None,
        }
    }

    fn canon(body: &Value) -> Canonical {
        Canonical::read(&serde_json::to_vec(body).unwrap()).unwrap()
    }

    fn key(body: &Value, scope: CacheScope, token: &Token) -> CacheKey {
        KeyParts {
            endpoint: Endpoint::ChatCompletions,
            route: 1,
            model: "m",
            scope,
            token,
            headers: &HeaderMap::new(),
            query: None,
            body: canon(body).normalised(),
        }
        .key()
    }

    #[test]
    fn provider_headers_and_the_query_are_in_the_key_sdk_telemetry_and_credentials_are_not() {
        let t = token(1, None);
        let body = canon(&json!({"model": "m"}));
        let with = |headers: &[(&str, &str)], query: Option<&str>| {
            let mut map = HeaderMap::new();
            for (name, value) in headers {
                map.append(
                    http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                    value.parse().unwrap(),
                );
            }
            KeyParts {
                endpoint: Endpoint::Messages,
                route: 1,
                model: "m",
                scope: CacheScope::Route,
                token: &t,
                headers: &map,
                query,
                body: body.normalised(),
            }
            .key()
        };
        let plain = with(&[], None);
        assert_ne!(plain, with(&[("anthropic-beta", "tools-2024")], None));
        assert_ne!(plain, with(&[("openai-organization", "org-1")], None));
        assert_eq!(
            plain,
            with(
                &[("x-stainless-retry-count", "1"), ("x-goog-api-key", "k")],
                None
            )
        );
        assert_eq!(plain, with(&[], Some("alt=sse")));
        assert_ne!(plain, with(&[], Some("api-version=2024-10-21")));
        assert_eq!(
            with(&[], Some("a=1&b=2")),
            with(&[], Some("b=2&a=1")),
            "parameters in any order"
        );
    }

    #[test]
    fn key_order_and_transport_fields_do_not_change_the_key() {
        let t = token(1, None);
        let a = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}], "temperature": 0});
        let b = json!({"temperature": 0, "stream": true, "stream_options": {"include_usage": true},
            "user": "u-1", "metadata": {"k": "v"}, "messages": [{"content": "hi", "role": "user"}], "model": "m"});
        assert_eq!(
            key(&a, CacheScope::Route, &t),
            key(&b, CacheScope::Route, &t)
        );
    }

    #[test]
    fn the_key_of_a_request_is_the_one_it_has_always_been() {
        // Worked out apart from this code: SHA-256 of "switchyard-cache-v1\0ChatCompletions\0
        // 1\0m\0route\0\0\0" and the body with its keys sorted, `stream` left out.
        let body = br#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}],
            "temperature":0}"#;
        let read = Canonical::read(body).unwrap();
        let key = KeyParts {
            endpoint: Endpoint::ChatCompletions,
            route: 1,
            model: "m",
            scope: CacheScope::Route,
            token: &token(1, None),
            headers: &HeaderMap::new(),
            query: None,
            body: read.normalised(),
        }
        .key();
        assert_eq!(
            key.hex(),
            "4892642aa5867705b4692a93083782421e77fade4b0cf9cc335d68d79ccf6ddf"
        );
    }

    #[test]
    fn a_changed_parameter_changes_the_key() {
        let t = token(1, None);
        let a = json!({"model": "m", "messages": [], "temperature": 0});
        let b = json!({"model": "m", "messages": [], "temperature": 0.5});
        let c = json!({"model": "m", "messages": [], "temperature": 0, "tools": []});
        let k = key(&a, CacheScope::Route, &t);
        assert_ne!(k, key(&b, CacheScope::Route, &t));
        assert_ne!(k, key(&c, CacheScope::Route, &t));
        let none = HeaderMap::new();
        let a = canon(&a);
        let other_model = KeyParts {
            endpoint: Endpoint::ChatCompletions,
            route: 1,
            model: "n",
            scope: CacheScope::Route,
            token: &t,
            headers: &none,
            query: None,
            body: a.normalised(),
        };
        assert_ne!(k, other_model.key());
        let other_protocol = KeyParts {
            endpoint: Endpoint::Messages,
            route: 1,
            model: "m",
            scope: CacheScope::Route,
            token: &t,
            headers: &none,
            query: None,
            body: a.normalised(),
        };
        assert_ne!(k, other_protocol.key());
    }

    #[test]
    fn scopes_keep_teams_and_tokens_apart() {
        let body = json!({"model": "m"});
        let (a1, a2, b1) = (token(1, Some(10)), token(2, Some(10)), token(3, Some(20)));
        assert_eq!(
            key(&body, CacheScope::Route, &a1),
            key(&body, CacheScope::Route, &b1)
        );
        assert_eq!(
            key(&body, CacheScope::Team, &a1),
            key(&body, CacheScope::Team, &a2)
        );
        assert_ne!(
            key(&body, CacheScope::Team, &a1),
            key(&body, CacheScope::Team, &b1)
        );
        assert_ne!(
            key(&body, CacheScope::Token, &a1),
            key(&body, CacheScope::Token, &a2)
        );
        // A token without a team shares with nobody under `team`.
        let (lone, other) = (token(4, None), token(5, None));
        assert_ne!(
            key(&body, CacheScope::Team, &lone),
            key(&body, CacheScope::Team, &other)
        );
    }

    #[test]
    fn deterministic_means_temperature_zero_or_a_seed() {
        let deterministic = |endpoint, body: Value| deterministic(endpoint, &canon(&body));
        let chat = Endpoint::ChatCompletions;
        assert!(deterministic(chat, json!({"temperature": 0})));
        assert!(deterministic(chat, json!({"seed": 7})));
        assert!(!deterministic(chat, json!({"temperature": 0.7})));
        assert!(!deterministic(chat, json!({})));
        let gemini = Endpoint::GeminiGenerate;
        assert!(deterministic(
            gemini,
            json!({"generationConfig": {"temperature": 0.0}})
        ));
        assert!(!deterministic(gemini, json!({"temperature": 0})));
        assert!(deterministic(Endpoint::Embeddings, json!({})));
    }

    #[test]
    fn only_stateless_responses_and_replayable_streams_are_cached() {
        let check = |endpoint, body: Value, stream, query, deterministic_only| {
            let body = Canonical::read(&serde_json::to_vec(&body).unwrap());
            let asked = Asked {
                endpoint,
                body: body.as_ref(),
                stream,
                query,
            };
            not_cacheable(&asked, deterministic_only)
        };
        let r = Endpoint::Responses;
        assert_eq!(check(r, json!({"store": false}), false, None, false), None);
        assert_eq!(check(r, json!({}), false, None, false), Some("stateful"));
        let chained = json!({"store": false, "previous_response_id": "resp_1"});
        assert_eq!(check(r, chained, false, None, false), Some("stateful"));
        assert_eq!(check(r, json!({"store": false}), true, None, false), None);
        let legacy = Endpoint::Completions;
        assert_eq!(check(legacy, json!({}), true, None, false), None);
        assert_eq!(
            check(Endpoint::Embeddings, json!({}), true, None, false),
            Some("stream")
        );
        let chat = Endpoint::ChatCompletions;
        assert_eq!(check(chat, json!({}), true, None, false), None);
        assert_eq!(
            check(chat, json!({}), false, None, true),
            Some("not_deterministic")
        );
        assert_eq!(
            check(chat, json!([1]), false, None, false),
            Some("not_json")
        );
        let gemini = Endpoint::GeminiGenerate;
        assert_eq!(check(gemini, json!({}), true, Some("alt=sse"), false), None);
        assert_eq!(
            check(gemini, json!({}), true, None, false),
            None,
            "a JSON array"
        );
        assert_eq!(check(gemini, json!({}), false, None, false), None);
    }

    #[test]
    fn the_shape_is_plain_events_or_gemini_s_json_array() {
        let body = canon(&json!({}));
        let shape = |endpoint, stream, query| {
            Asked {
                endpoint,
                body: Some(&body),
                stream,
                query,
            }
            .shape()
        };
        let gemini = Endpoint::GeminiGenerate;
        assert_eq!(shape(gemini, false, None), Shape::Plain);
        assert_eq!(shape(gemini, true, Some("key=k&alt=sse")), Shape::Events);
        assert_eq!(shape(gemini, true, None), Shape::JsonArray);
        assert_eq!(shape(gemini, true, Some("alt=json")), Shape::JsonArray);
        assert_eq!(shape(Endpoint::Responses, true, None), Shape::Events);
        assert_eq!(shape(Endpoint::Completions, false, None), Shape::Plain);
    }

    #[test]
    fn cache_control_no_cache_skips_the_read_and_no_store_the_write() {
        let mut headers = HeaderMap::new();
        assert_eq!(directives(&headers), (true, true));
        headers.insert(http::header::CACHE_CONTROL, "No-Cache".parse().unwrap());
        assert_eq!(directives(&headers), (false, true));
        headers.insert(
            http::header::CACHE_CONTROL,
            "max-age=0, no-store".parse().unwrap(),
        );
        assert_eq!(directives(&headers), (true, false));
    }

    #[test]
    fn refusals_are_recognised_in_each_protocol() {
        let chat = Endpoint::ChatCompletions;
        assert!(refused(
            chat,
            &json!({"choices": [{"finish_reason": "content_filter"}]})
        ));
        assert!(refused(
            chat,
            &json!({"choices": [{"message": {"refusal": "no"}, "finish_reason": "stop"}]})
        ));
        assert!(!refused(
            chat,
            &json!({"choices": [{"message": {"refusal": null}, "finish_reason": "stop"}]})
        ));
        assert!(refused(
            Endpoint::Messages,
            &json!({"stop_reason": "refusal"})
        ));
        let r = Endpoint::Responses;
        assert!(refused(
            r,
            &json!({"output": [{"type": "message", "content": [{"type": "refusal", "refusal": "no"}]}]})
        ));
        assert!(refused(
            r,
            &json!({"status": "incomplete", "incomplete_details": {"reason": "content_filter"}, "output": []})
        ));
        assert!(!refused(
            r,
            &json!({"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"},
                "output": [{"type": "message", "content": [{"type": "output_text", "text": "x"}]}]})
        ));
        assert!(refused(
            Endpoint::GeminiGenerate,
            &json!({"candidates": [{"finishReason": "SAFETY"}]})
        ));
        assert!(!refused(
            Endpoint::GeminiGenerate,
            &json!({"candidates": [{"finishReason": "STOP"}]})
        ));
    }
}
