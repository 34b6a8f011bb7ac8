//! Token usage in neutral form and in each protocol's shape.
//!
//! Neutral convention: `input_tokens` is the *whole* prompt, cached part included (OpenAI's
//! `prompt_tokens`, Gemini's `promptTokenCount`); `cached_tokens` is the part of it read from a
//! cache. Anthropic reports `input_tokens` *excluding* `cache_read_input_tokens` and
//! `cache_creation_input_tokens`, so those are added on the way in and subtracted on the way out.

use serde_json::{json, Value};

use crate::protocol::Protocol;
use crate::util::get_u64;

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
            .and_then(|d| get_u64(d, "cached_tokens"))
            .unwrap_or(0);
        FullUsage {
            input: get_u64(u, "prompt_tokens").unwrap_or(0),
            output: get_u64(u, "completion_tokens").unwrap_or(0),
            cached,
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
        FullUsage {
            input: get_u64(u, "promptTokenCount").unwrap_or(0),
            output: get_u64(u, "candidatesTokenCount")
                .unwrap_or(0)
                .saturating_add(get_u64(u, "thoughtsTokenCount").unwrap_or(0)),
            cached: get_u64(u, "cachedContentTokenCount").unwrap_or(0),
            cache_creation: 0,
        }
    }

    pub fn to_openai(self) -> Value {
        json!({
            "prompt_tokens": self.input,
            "completion_tokens": self.output,
            "total_tokens": self.input + self.output,
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
            "totalTokenCount": self.input + self.output,
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
        if let Some(n) = get_u64(u, "input_tokens") {
            self.input = n;
        }
        if let Some(n) = get_u64(u, "output_tokens") {
            self.output = n;
        }
        if let Some(n) = get_u64(u, "cache_read_input_tokens") {
            self.cache_read = n;
        }
        if let Some(n) = get_u64(u, "cache_creation_input_tokens") {
            self.cache_creation = n;
        }
    }

    pub fn neutral(&self) -> FullUsage {
        FullUsage {
            // Saturating: the counts are the upstream's, and may be anything up to u64::MAX.
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
    /// (a panic with overflow checks, a wrapped count without).
    #[test]
    fn huge_counts_saturate_instead_of_overflowing() {
        let max = u64::MAX;
        let anthropic = format!(
            r#"{{"usage":{{"input_tokens":{max},"output_tokens":1,"cache_read_input_tokens":2,"cache_creation_input_tokens":3}}}}"#
        );
        let usage = response_usage(Protocol::Anthropic, anthropic.as_bytes());
        assert_eq!(usage.input_tokens, max);
        assert_eq!(usage.cached_tokens, 2);
        let gemini = format!(
            r#"{{"usageMetadata":{{"promptTokenCount":1,"candidatesTokenCount":{max},"thoughtsTokenCount":1}}}}"#
        );
        assert_eq!(
            response_usage(Protocol::Gemini, gemini.as_bytes()).output_tokens,
            max
        );
    }
}
