//! Token usage in neutral form and in each protocol's shape.
//!
//! Neutral convention: `input_tokens` is the *whole* prompt, cached part included (OpenAI's
//! `prompt_tokens`, Gemini's `promptTokenCount`); `cached_tokens` is the part of it read from a
//! cache. Anthropic reports `input_tokens` *excluding* `cache_read_input_tokens` and
//! `cache_creation_input_tokens`, so those are added on the way in and subtracted on the way out.
//!
//! An upstream is not trusted input: every figure it reports is read with [`count`], which takes
//! only a whole number from 0 to [`MAX_REPORTED_TOKENS`]. Anything else (negative, fractional,
//! a string, a figure near `u64::MAX`) counts as not reported, and a warning names the field
//! (never the answer's content). So one request's neutral figures stay within
//! [`MAX_REQUEST_TOKENS`], and sums of them over any realistic number of requests cannot
//! overflow a 64-bit counter or a Postgres `bigint`.

use serde_json::{json, Value};

use crate::protocol::Protocol;

/// The largest token figure an upstream may report for one request in one field (a billion:
/// far beyond any model's context window or output limit). A larger one is not trusted.
pub const MAX_REPORTED_TOKENS: u64 = 1_000_000_000;

/// The largest figure of a request's neutral [`Usage`]: Anthropic's input is the sum of three
/// reported figures (uncached input, cache reads and cache writes), Gemini's output of two.
pub const MAX_REQUEST_TOKENS: u64 = 3 * MAX_REPORTED_TOKENS;

/// A token figure `key` of the usage object `u`, when it is a whole number within
/// [`MAX_REPORTED_TOKENS`]. An absent or `null` field is simply not reported; any other value is
/// refused with a warning (the field's name and the kind of value only) and also counts as not
/// reported.
fn count(u: &Value, key: &'static str) -> Option<u64> {
    let value = u.get(key)?;
    let figure = match value {
        Value::Null => return None,
        Value::Number(n) => n.as_u64().or_else(|| {
            // `12.0` is a whole number written as a float; `12.5`, `-1` and `1e300` are not
            // token counts.
            n.as_f64()
                .filter(|f| f.fract() == 0.0 && (0.0..=MAX_REPORTED_TOKENS as f64).contains(f))
                .map(|f| f as u64)
        }),
        _ => None,
    };
    match figure {
        Some(n) if n <= MAX_REPORTED_TOKENS => Some(n),
        _ => {
            let kind = match value {
                Value::Number(n) if n.as_u64().is_some() => "a count above the bound",
                Value::Number(n) if n.as_i64().is_some() => "a negative number",
                Value::Number(_) => "not a whole number within the bound",
                Value::String(_) => "a string",
                Value::Bool(_) => "a boolean",
                _ => "not a number",
            };
            tracing::warn!(
                field = key,
                value_kind = kind,
                max = MAX_REPORTED_TOKENS,
                "an upstream reported an impossible token usage figure; counted as not reported"
            );
            None
        }
    }
}

/// Token usage of one request: input includes cached tokens; cached is the cache-read subset.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cached_tokens: u64,
}

/// Usage with the Anthropic cache-write count kept, so Anthropic clients see it again.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct FullUsage {
    pub input: u64,
    pub output: u64,
    pub cached: u64,
    pub cache_creation: u64,
}

impl FullUsage {
    pub fn public(&self) -> Usage {
        Usage {
            input_tokens: self.input,
            output_tokens: self.output,
            cached_tokens: self.cached,
        }
    }

    /// From an OpenAI `usage` object.
    pub fn from_openai(u: &Value) -> FullUsage {
        let cached = u
            .get("prompt_tokens_details")
            .and_then(|d| count(d, "cached_tokens"))
            .unwrap_or(0);
        let input = count(u, "prompt_tokens").unwrap_or(0);
        FullUsage {
            input,
            output: count(u, "completion_tokens").unwrap_or(0),
            // Cached tokens are part of the prompt: never more than it.
            cached: cached.min(input),
            cache_creation: 0,
        }
    }

    /// From a complete Anthropic `usage` object.
    pub fn from_anthropic(u: &Value) -> FullUsage {
        let mut raw = AnthropicUsage::default();
        raw.merge(u);
        raw.neutral()
    }

    /// From a Gemini `usageMetadata` object. Thinking tokens are billed as output.
    pub fn from_gemini(u: &Value) -> FullUsage {
        let input = count(u, "promptTokenCount").unwrap_or(0);
        FullUsage {
            input,
            output: count(u, "candidatesTokenCount")
                .unwrap_or(0)
                .saturating_add(count(u, "thoughtsTokenCount").unwrap_or(0)),
            // Cached tokens are part of the prompt: never more than it.
            cached: count(u, "cachedContentTokenCount").unwrap_or(0).min(input),
            cache_creation: 0,
        }
    }

    pub fn to_openai(self) -> Value {
        json!({
            "prompt_tokens": self.input,
            "completion_tokens": self.output,
            "total_tokens": self.input.saturating_add(self.output),
            "prompt_tokens_details": {"cached_tokens": self.cached},
        })
    }

    /// `input_tokens` excludes cache reads and writes, as Anthropic reports it.
    pub fn to_anthropic(self) -> Value {
        json!({
            "input_tokens": self.input.saturating_sub(self.cached).saturating_sub(self.cache_creation),
            "output_tokens": self.output,
            "cache_read_input_tokens": self.cached,
            "cache_creation_input_tokens": self.cache_creation,
        })
    }

    pub fn to_gemini(self) -> Value {
        let mut v = json!({
            "promptTokenCount": self.input,
            "candidatesTokenCount": self.output,
            "totalTokenCount": self.input.saturating_add(self.output),
        });
        if self.cached > 0 {
            v["cachedContentTokenCount"] = json!(self.cached);
        }
        v
    }
}

/// Anthropic usage as reported, merged field by field (a stream's `message_start` carries the
/// input counts, `message_delta` the cumulative output and sometimes the input counts again).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct AnthropicUsage {
    input: u64,
    output: u64,
    cache_read: u64,
    cache_creation: u64,
}

impl AnthropicUsage {
    pub fn merge(&mut self, u: &Value) {
        if let Some(n) = count(u, "input_tokens") {
            self.input = n;
        }
        if let Some(n) = count(u, "output_tokens") {
            self.output = n;
        }
        if let Some(n) = count(u, "cache_read_input_tokens") {
            self.cache_read = n;
        }
        if let Some(n) = count(u, "cache_creation_input_tokens") {
            self.cache_creation = n;
        }
    }

    pub fn neutral(&self) -> FullUsage {
        FullUsage {
            // Each figure is within `MAX_REPORTED_TOKENS` (see `count`); saturating anyway.
            input: self
                .input
                .saturating_add(self.cache_read)
                .saturating_add(self.cache_creation),
            output: self.output,
            cached: self.cache_read,
            cache_creation: self.cache_creation,
        }
    }
}

/// Usage read from a (non-streamed) response body of `protocol`, for same-protocol passthrough.
/// Zero when the body carries none or is not JSON.
pub fn response_usage(protocol: Protocol, body: &[u8]) -> Usage {
    let key = match protocol {
        Protocol::OpenAi | Protocol::Anthropic => "usage",
        Protocol::Gemini => "usageMetadata",
    };
    let Some(u) = top_level_field(body, key) else {
        return Usage::default();
    };
    let full = match protocol {
        Protocol::OpenAi => FullUsage::from_openai(&u),
        Protocol::Anthropic => FullUsage::from_anthropic(&u),
        Protocol::Gemini => FullUsage::from_gemini(&u),
    };
    full.public()
}

/// The value of the top-level `key` of a JSON object body — the last one when the key repeats,
/// exactly what a full parse into a map and a lookup would give — with every other value
/// skipped unbuilt (an answer's `choices` can be megabytes; its usage is a few numbers). `None`
/// when the body is not one valid JSON object or has no such key.
fn top_level_field(body: &[u8], key: &'static str) -> Option<Value> {
    use serde::de::{DeserializeSeed, IgnoredAny, MapAccess, Visitor};

    struct Field(&'static str);
    impl<'de> Visitor<'de> for Field {
        type Value = Option<Value>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Option<Value>, A::Error> {
            let mut found = None;
            while let Some(wanted) = map.next_key_seed(KeyIs(self.0))? {
                if wanted {
                    found = Some(map.next_value::<Value>()?);
                } else {
                    map.next_value::<IgnoredAny>()?;
                }
            }
            Ok(found)
        }
    }
    impl<'de> DeserializeSeed<'de> for Field {
        type Value = Option<Value>;
        fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Option<Value>, D::Error> {
            d.deserialize_map(self)
        }
    }

    /// A map key compared with the wanted name, never copied.
    struct KeyIs(&'static str);
    impl<'de> Visitor<'de> for KeyIs {
        type Value = bool;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a string key")
        }
        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<bool, E> {
            Ok(v == self.0)
        }
    }
    impl<'de> DeserializeSeed<'de> for KeyIs {
        type Value = bool;
        fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
            d.deserialize_str(self)
        }
    }

    let mut de = serde_json::Deserializer::from_slice(body);
    let found = Field(key).deserialize(&mut de).ok()?;
    de.end().ok()?;
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::util::parse_json_lenient;

    /// What `response_usage` must agree with: the whole body parsed, then the key looked up.
    fn by_full_parse(protocol: Protocol, body: &[u8]) -> Usage {
        let Some(v) = parse_json_lenient(body) else {
            return Usage::default();
        };
        let full = match protocol {
            Protocol::OpenAi => v.get("usage").map(FullUsage::from_openai),
            Protocol::Anthropic => v.get("usage").map(FullUsage::from_anthropic),
            Protocol::Gemini => v.get("usageMetadata").map(FullUsage::from_gemini),
        };
        full.unwrap_or_default().public()
    }

    #[test]
    fn usage_is_read_like_a_full_parse_would_read_it() {
        let bodies: &[&str] = &[
            r#"{"id":"x","choices":[{"message":{"content":"hi \"usage\""}}],"usage":{"prompt_tokens":7,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":2}}}"#,
            // Repeated key: the last one counts, as in a parsed map.
            r#"{"usage":{"prompt_tokens":1},"usage":{"prompt_tokens":9,"completion_tokens":4}}"#,
            // An escaped key is the same key.
            r#"{"us\u0061ge":{"prompt_tokens":5}}"#,
            // Nested "usage" keys do not count; only the top level does.
            r#"{"choices":[{"usage":{"prompt_tokens":100}}]}"#,
            r#"{"usage":{"input_tokens":10,"output_tokens":2,"cache_read_input_tokens":3}}"#,
            r#"{"usageMetadata":{"promptTokenCount":11,"candidatesTokenCount":5,"cachedContentTokenCount":4}}"#,
            r#"{"usage":null}"#,
            r#"{"usage":"lots"}"#,
            r#"{}"#,
            r#"[{"usage":{"prompt_tokens":1}}]"#,
            r#"{"usage":{"prompt_tokens":1}} trailing"#,
            r#"{"usage":{"prompt_tokens":1}"#,
            r#"{"usage":{"prompt_tokens":1},"x":[1,2,}"#,
            "not json",
            "",
        ];
        for body in bodies {
            for protocol in Protocol::ALL {
                assert_eq!(
                    response_usage(protocol, body.as_bytes()),
                    by_full_parse(protocol, body.as_bytes()),
                    "{protocol:?} {body}"
                );
            }
        }
        assert_eq!(
            response_usage(Protocol::OpenAi, bodies[1].as_bytes()).input_tokens,
            9
        );
    }

    /// Found by the `provider_response` fuzz target: counts near `u64::MAX` overflowed the sums
    /// (a panic with overflow checks, a wrapped count without). Such counts are now refused
    /// outright, so the sums of the figures that remain cannot overflow.
    #[test]
    fn huge_counts_are_not_trusted_and_the_sums_stay_in_range() {
        let max = u64::MAX;
        let anthropic = format!(
            r#"{{"usage":{{"input_tokens":{max},"output_tokens":1,"cache_read_input_tokens":2,"cache_creation_input_tokens":3}}}}"#
        );
        let usage = response_usage(Protocol::Anthropic, anthropic.as_bytes());
        assert_eq!(usage.input_tokens, 5, "the cache reads and writes only");
        assert_eq!(usage.cached_tokens, 2);
        let gemini = format!(
            r#"{{"usageMetadata":{{"promptTokenCount":1,"candidatesTokenCount":{max},"thoughtsTokenCount":1}}}}"#
        );
        assert_eq!(
            response_usage(Protocol::Gemini, gemini.as_bytes()).output_tokens,
            1
        );
        // Every field at the bound: the neutral figures stay within `MAX_REQUEST_TOKENS`.
        let b = MAX_REPORTED_TOKENS;
        let anthropic = format!(
            r#"{{"usage":{{"input_tokens":{b},"output_tokens":{b},"cache_read_input_tokens":{b},"cache_creation_input_tokens":{b}}}}}"#
        );
        let usage = response_usage(Protocol::Anthropic, anthropic.as_bytes());
        assert_eq!(usage.input_tokens, MAX_REQUEST_TOKENS);
        assert_eq!((usage.output_tokens, usage.cached_tokens), (b, b));
    }

    /// The issue's poison: `prompt_tokens = 18446744073709551615` was taken as reported (and
    /// stored as `i64::MAX`, breaking the usage report). It is not a token count.
    #[test]
    fn an_impossible_figure_counts_as_not_reported() {
        let usage = |body: &str| response_usage(Protocol::OpenAi, body.as_bytes());
        let with = |prompt: &str| {
            usage(&format!(
                r#"{{"usage":{{"prompt_tokens":{prompt},"completion_tokens":4,"prompt_tokens_details":{{"cached_tokens":2}}}}}}"#
            ))
        };
        let reported = Usage {
            input_tokens: 10,
            output_tokens: 4,
            cached_tokens: 2,
        };
        assert_eq!(with("10"), reported);
        assert_eq!(with("10.0"), reported, "a whole number written as a float");
        let refused = Usage {
            input_tokens: 0,
            output_tokens: 4,
            // Cached tokens are part of the prompt, which counts as 0.
            cached_tokens: 0,
        };
        for bad in [
            "18446744073709551615",
            "9223372036854775807",
            "1000000001",
            "-1",
            "-9223372036854775808",
            "10.5",
            "1e300",
            "-0.5",
            r#""10""#,
            "true",
            "[10]",
            "{}",
        ] {
            assert_eq!(with(bad), refused, "prompt_tokens {bad}");
        }
        assert_eq!(
            with(&MAX_REPORTED_TOKENS.to_string()).input_tokens,
            MAX_REPORTED_TOKENS,
            "the bound itself is a figure"
        );
        // A cached count above the prompt it is part of is cut to the prompt.
        let u = usage(
            r#"{"usage":{"prompt_tokens":3,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":7}}}"#,
        );
        assert_eq!((u.input_tokens, u.cached_tokens), (3, 3));
        // In a stream too (the same reading, event by event).
        let mut scanner = crate::UsageScanner::new(Protocol::OpenAi);
        scanner.push(
            b"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":18446744073709551615,\"completion_tokens\":4}}\n\n",
        );
        assert_eq!(
            scanner.usage(),
            Usage {
                input_tokens: 0,
                output_tokens: 4,
                cached_tokens: 0
            }
        );
    }

    /// The `value_kind` of each warning `f` logs (a subscriber of its own, on this thread only).
    fn warned_kinds(f: impl FnOnce()) -> Vec<String> {
        use std::sync::{Arc, Mutex};
        use tracing::field::{Field, Visit};
        use tracing::span::{Attributes, Id, Record};
        use tracing::{Event, Metadata, Subscriber};

        struct Kinds(Arc<Mutex<Vec<String>>>);
        struct KindOf(String);
        impl Visit for KindOf {
            fn record_str(&mut self, field: &Field, value: &str) {
                if field.name() == "value_kind" {
                    self.0 = value.to_string();
                }
            }
            fn record_debug(&mut self, _: &Field, _: &dyn std::fmt::Debug) {}
        }
        impl Subscriber for Kinds {
            fn enabled(&self, _: &Metadata<'_>) -> bool {
                true
            }
            fn new_span(&self, _: &Attributes<'_>) -> Id {
                Id::from_u64(1)
            }
            fn record(&self, _: &Id, _: &Record<'_>) {}
            fn record_follows_from(&self, _: &Id, _: &Id) {}
            fn event(&self, event: &Event<'_>) {
                let mut kind = KindOf(String::new());
                event.record(&mut kind);
                self.0.lock().unwrap().push(kind.0);
            }
            fn enter(&self, _: &Id) {}
            fn exit(&self, _: &Id) {}
        }
        let kinds = Arc::new(Mutex::new(Vec::new()));
        tracing::subscriber::with_default(Kinds(Arc::clone(&kinds)), f);
        let out = kinds.lock().unwrap().clone();
        out
    }

    #[test]
    fn a_null_figure_is_not_reported_quietly_and_a_refused_one_is_named_by_its_kind() {
        let kinds = warned_kinds(|| {
            for v in [
                json!(null),
                json!(12.5),
                json!(-1),
                json!(1e300),
                json!(MAX_REPORTED_TOKENS + 1),
                json!("7"),
                json!(true),
                json!([1]),
            ] {
                assert_eq!(count(&json!({ "n": v }), "n"), None, "{v}");
            }
        });
        assert_eq!(
            kinds,
            [
                "not a whole number within the bound",
                "a negative number",
                "not a whole number within the bound",
                "a count above the bound",
                "a string",
                "a boolean",
                "not a number",
            ]
        );
    }

    #[test]
    fn gemini_usage_names_cached_tokens_only_when_there_are_some() {
        let none = FullUsage {
            input: 10,
            output: 2,
            cached: 0,
            cache_creation: 0,
        };
        assert_eq!(
            none.to_gemini(),
            json!({"promptTokenCount": 10, "candidatesTokenCount": 2, "totalTokenCount": 12})
        );
        let some = FullUsage { cached: 4, ..none };
        assert_eq!(
            some.to_gemini(),
            json!({"promptTokenCount": 10, "candidatesTokenCount": 2, "totalTokenCount": 12, "cachedContentTokenCount": 4})
        );
    }

    #[test]
    fn usage_is_found_before_other_fields_too() {
        let body = br#"{"usage":{"prompt_tokens":7,"completion_tokens":3},"id":"chatcmpl-1","choices":[]}"#;
        assert_eq!(
            response_usage(Protocol::OpenAi, body),
            Usage {
                input_tokens: 7,
                output_tokens: 3,
                cached_tokens: 0
            }
        );
    }
}
