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

use serde_json::value::RawValue;
use serde_json::{json, Value};

use crate::protocol::Protocol;

/// The largest token figure an upstream may report for one request in one field (a billion:
/// far beyond any model's context window or output limit). A larger one is not trusted.
pub const MAX_REPORTED_TOKENS: u64 = 1_000_000_000;

/// The largest figure of a request's neutral [`Usage`]: Anthropic's input is the sum of three
/// reported figures (uncached input, cache reads and cache writes), Gemini's output of two.
pub const MAX_REQUEST_TOKENS: u64 = 3 * MAX_REPORTED_TOKENS;

/// A token figure `key` of the usage object `u`, when it is a whole number within
/// [`MAX_REPORTED_TOKENS`] (see [`figure`]).
fn count(u: &Value, key: &'static str) -> Option<u64> {
    figure(u.get(key)?, key)
}

/// The value of token figure `key`, when it is a whole number within [`MAX_REPORTED_TOKENS`].
/// `null` is simply not reported; any other value is refused with a warning (the field's name
/// and the kind of value only) and also counts as not reported.
fn figure(value: &Value, key: &'static str) -> Option<u64> {
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

/// What an OpenAI usage object calls its prompt figure, its completion figure and the details
/// object holding the cached part of the prompt.
type Names = [&'static str; 3];

/// The names of Chat Completions (and completions, embeddings).
const CHAT: Names = [
    "prompt_tokens",
    "completion_tokens",
    "prompt_tokens_details",
];

/// The names of the Responses API: the same figures (its `input_tokens` includes the cached
/// ones, its `output_tokens` the reasoning ones, as their Chat Completions names do).
const RESPONSES: Names = ["input_tokens", "output_tokens", "input_tokens_details"];

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
        FullUsage::named(u, CHAT)
    }

    /// From a Responses API `usage` object.
    pub fn from_responses(u: &Value) -> FullUsage {
        FullUsage::named(u, RESPONSES)
    }

    /// From an OpenAI usage object whose figures are called `names`.
    fn named(u: &Value, [prompt, completion, details]: Names) -> FullUsage {
        let cached = u.get(details).and_then(|d| count(d, "cached_tokens"));
        FullUsage::openai(count(u, prompt), count(u, completion), cached)
    }

    /// OpenAI's figures: the prompt, the completion, and the cached part of the prompt.
    fn openai(input: Option<u64>, output: Option<u64>, cached: Option<u64>) -> FullUsage {
        let input = input.unwrap_or(0);
        FullUsage {
            input,
            output: output.unwrap_or(0),
            // Cached tokens are part of the prompt: never more than it.
            cached: cached.unwrap_or(0).min(input),
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
        FullUsage::gemini([
            count(u, "promptTokenCount"),
            count(u, "candidatesTokenCount"),
            count(u, "thoughtsTokenCount"),
            count(u, "cachedContentTokenCount"),
        ])
    }

    /// Gemini's figures: the prompt, the candidates, the thoughts and the cached content.
    fn gemini([prompt, candidates, thoughts, cached]: [Option<u64>; 4]) -> FullUsage {
        let input = prompt.unwrap_or(0);
        FullUsage {
            input,
            output: candidates
                .unwrap_or(0)
                .saturating_add(thoughts.unwrap_or(0)),
            // Cached tokens are part of the prompt: never more than it.
            cached: cached.unwrap_or(0).min(input),
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
        self.merge_figures([
            count(u, "input_tokens"),
            count(u, "output_tokens"),
            count(u, "cache_read_input_tokens"),
            count(u, "cache_creation_input_tokens"),
        ]);
    }

    /// Each reported figure (input, output, cache reads, cache writes) replaces the one held.
    fn merge_figures(&mut self, [input, output, read, creation]: [Option<u64>; 4]) {
        if let Some(n) = input {
            self.input = n;
        }
        if let Some(n) = output {
            self.output = n;
        }
        if let Some(n) = read {
            self.cache_read = n;
        }
        if let Some(n) = creation {
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
    let key = usage_key(protocol);
    match object_fields(body, [key]) {
        Some([Some(usage)]) => usage_text(protocol, usage.get()),
        _ => Usage::default(),
    }
}

/// Usage read from a (non-streamed) Responses API answer, for passthrough: its `usage` with the
/// figures named as that API names them. Zero when the body carries none or is not JSON.
pub fn responses_answer_usage(body: &[u8]) -> Usage {
    match object_fields(body, ["usage"]) {
        Some([Some(usage)]) => openai_text(usage.get(), RESPONSES).public(),
        _ => Usage::default(),
    }
}

/// Usage read from a rerank answer: its `usage` as OpenAI's figures, else (vLLM and Jina report
/// only `usage.total_tokens`) that total as input tokens. Zero when the answer carries no usage
/// (Cohere reports search units, not tokens) or is not JSON.
pub fn rerank_usage(body: &[u8]) -> Usage {
    let Some([Some(usage)]) = object_fields(body, ["usage"]) else {
        return Usage::default();
    };
    let figures = usage_text(Protocol::OpenAi, usage.get());
    if figures != Usage::default() {
        return figures;
    }
    let total = serde_json::from_str::<Value>(usage.get())
        .ok()
        .and_then(|u| count(&u, "total_tokens"));
    openai_usage(total, None, None)
}

/// The top-level key of `protocol`'s answers that holds their usage.
pub fn usage_key(protocol: Protocol) -> &'static str {
    match protocol {
        Protocol::OpenAi | Protocol::Anthropic => "usage",
        Protocol::Gemini => "usageMetadata",
    }
}

/// The usage of an OpenAI usage object whose figures were read already (each a whole number
/// within [`MAX_REPORTED_TOKENS`], or not reported): what [`usage_text`] gives for that object.
pub fn openai_usage(prompt: Option<u64>, completion: Option<u64>, cached: Option<u64>) -> Usage {
    FullUsage::openai(prompt, completion, cached).public()
}

/// Usage from the raw text of an answer's usage object (the value of [`usage_key`]): the same
/// figures as parsing it into a map and looking them up. Zero when it is not an object.
pub fn usage_text(protocol: Protocol, text: &str) -> Usage {
    if !text.starts_with('{') {
        return Usage::default();
    }
    // The figures read straight into their fields; an object the fields cannot take (a figure
    // repeated, a details value that is not an object) is read the general way, as a map.
    let full = match protocol {
        Protocol::OpenAi => openai_text(text, CHAT),
        Protocol::Anthropic => match serde_json::from_str::<AnthropicFigures>(text) {
            Ok(f) => {
                let mut raw = AnthropicUsage::default();
                raw.merge_figures([
                    figure_of(f.input_tokens, "input_tokens"),
                    figure_of(f.output_tokens, "output_tokens"),
                    figure_of(f.cache_read_input_tokens, "cache_read_input_tokens"),
                    figure_of(f.cache_creation_input_tokens, "cache_creation_input_tokens"),
                ]);
                raw.neutral()
            }
            Err(_) => by_map(text, FullUsage::from_anthropic),
        },
        Protocol::Gemini => match serde_json::from_str::<GeminiFigures>(text) {
            Ok(f) => FullUsage::gemini([
                figure_of(f.prompt_token_count, "promptTokenCount"),
                figure_of(f.candidates_token_count, "candidatesTokenCount"),
                figure_of(f.thoughts_token_count, "thoughtsTokenCount"),
                figure_of(f.cached_content_token_count, "cachedContentTokenCount"),
            ]),
            Err(_) => by_map(text, FullUsage::from_gemini),
        },
    };
    full.public()
}

/// The usage of the raw text of an OpenAI usage object whose figures are called `names`.
fn openai_text(text: &str, names: Names) -> FullUsage {
    use serde::de::DeserializeSeed;

    let mut de = serde_json::Deserializer::from_str(text);
    let read = OpenAiFigures(names)
        .deserialize(&mut de)
        .and_then(|figures| de.end().map(|()| figures));
    let [prompt, completion, _] = names;
    match read {
        Ok([p, c, cached]) => FullUsage::openai(
            figure_of(p, prompt),
            figure_of(c, completion),
            figure_of(cached, "cached_tokens"),
        ),
        Err(_) => by_map(text, |u| FullUsage::named(u, names)),
    }
}

/// A usage object parsed whole into a map, then read by `read`.
fn by_map(text: &str, read: impl Fn(&Value) -> FullUsage) -> FullUsage {
    serde_json::from_str::<Value>(text)
        .map(|v| read(&v))
        .unwrap_or_default()
}

/// A figure read into its field (a number is a `Value` without allocation; `null` is `None`).
fn figure_of(value: Option<Value>, key: &'static str) -> Option<u64> {
    figure(&value?, key)
}

/// Reads an OpenAI usage object's figures under the names it holds: the prompt, the completion
/// and the details' `cached_tokens` (`None`: not there or `null`), every other value skipped
/// unbuilt. Like typed fields it refuses a repeated figure (the caller then reads
/// the object as a map, where the last one counts). Only a details object's `cached_tokens`
/// counts; anything else but `null` makes the read fail, and the object is then read as a map
/// (where any other value has no cached tokens).
struct OpenAiFigures(Names);

impl<'de> serde::de::Visitor<'de> for OpenAiFigures {
    type Value = [Option<Value>; 3];

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a usage object")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        use serde::de::{Error, IgnoredAny};

        let mut figures = [None, None, None];
        let mut seen = [false; 3];
        while let Some(key) = map.next_key_seed(KeyIndex(&self.0))? {
            let Some(i) = key else {
                map.next_value::<IgnoredAny>()?;
                continue;
            };
            if std::mem::replace(&mut seen[i], true) {
                return Err(A::Error::duplicate_field(self.0[i]));
            }
            figures[i] = if i == 2 {
                map.next_value::<Option<CachedTokens>>()?.and_then(|d| d.0)
            } else {
                map.next_value()?
            };
        }
        Ok(figures)
    }
}

impl<'de> serde::de::DeserializeSeed<'de> for OpenAiFigures {
    type Value = [Option<Value>; 3];

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

/// The `cached_tokens` of an OpenAI `prompt_tokens_details` object, every other value skipped
/// unbuilt (a details object parsed into a map cost a string and a value per key). Read from an
/// object only — not from an array, which a derived struct would read by position; a repeated
/// `cached_tokens` keeps the last one, as a map does.
struct CachedTokens(Option<Value>);

impl<'de> serde::Deserialize<'de> for CachedTokens {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<CachedTokens, D::Error> {
        use serde::de::{IgnoredAny, MapAccess, Visitor};

        struct Details;
        impl<'de> Visitor<'de> for Details {
            type Value = CachedTokens;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a details object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<CachedTokens, A::Error> {
                let mut cached = None;
                while let Some(key) = map.next_key_seed(KeyIndex(&["cached_tokens"]))? {
                    if key.is_some() {
                        cached = Some(map.next_value::<Value>()?);
                    } else {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
                Ok(CachedTokens(cached))
            }
        }
        d.deserialize_map(Details)
    }
}

#[derive(serde::Deserialize)]
struct AnthropicFigures {
    #[serde(default)]
    input_tokens: Option<Value>,
    #[serde(default)]
    output_tokens: Option<Value>,
    #[serde(default)]
    cache_read_input_tokens: Option<Value>,
    #[serde(default)]
    cache_creation_input_tokens: Option<Value>,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct GeminiFigures {
    #[serde(default)]
    prompt_token_count: Option<Value>,
    #[serde(default)]
    candidates_token_count: Option<Value>,
    #[serde(default)]
    thoughts_token_count: Option<Value>,
    #[serde(default)]
    cached_content_token_count: Option<Value>,
}

/// The raw text of the values of `keys` in the JSON object `json` — the last one when a key
/// repeats, exactly what a full parse into a map and a lookup would give — with every other
/// value skipped unbuilt (an answer's `choices` can be megabytes; its usage is a few numbers).
/// `None` when `json` is not one valid JSON object.
fn object_fields<'a, const N: usize>(
    json: &'a [u8],
    keys: [&'static str; N],
) -> Option<[Option<&'a RawValue>; N]> {
    use serde::de::{DeserializeSeed, IgnoredAny, MapAccess, Visitor};

    struct Fields<const N: usize>([&'static str; N]);
    impl<'de, const N: usize> Visitor<'de> for Fields<N> {
        type Value = [Option<&'de RawValue>; N];
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut found = [None; N];
            while let Some(wanted) = map.next_key_seed(KeyIndex(&self.0))? {
                match wanted {
                    Some(i) => found[i] = Some(map.next_value::<&'de RawValue>()?),
                    None => {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
            }
            Ok(found)
        }
    }
    impl<'de, const N: usize> DeserializeSeed<'de> for Fields<N> {
        type Value = [Option<&'de RawValue>; N];
        fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_map(self)
        }
    }

    let mut de = serde_json::Deserializer::from_slice(json);
    let found = Fields(keys).deserialize(&mut de).ok()?;
    de.end().ok()?;
    Some(found)
}

/// A map key as the index of the wanted name it equals (unescaped first), never copied.
pub struct KeyIndex<'k, const N: usize>(pub &'k [&'static str; N]);

impl<'de, const N: usize> serde::de::Visitor<'de> for KeyIndex<'_, N> {
    type Value = Option<usize>;
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a string key")
    }
    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Option<usize>, E> {
        Ok(self.0.iter().position(|k| *k == v))
    }
}

impl<'de, const N: usize> serde::de::DeserializeSeed<'de> for KeyIndex<'_, N> {
    type Value = Option<usize>;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Option<usize>, D::Error> {
        d.deserialize_str(self)
    }
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
    fn rerank_usage_takes_the_total_when_no_prompt_figure_is_given() {
        let input = |body: &str| rerank_usage(body.as_bytes()).input_tokens;
        // vLLM and Jina: only the total.
        assert_eq!(input(r#"{"results":[],"usage":{"total_tokens":12}}"#), 12);
        // OpenAI's figures, when given, are read as for any answer.
        assert_eq!(
            input(r#"{"usage":{"prompt_tokens":7,"total_tokens":12}}"#),
            7
        );
        // Cohere's search units are no tokens; no usage, or no JSON, is zero.
        assert_eq!(
            input(r#"{"results":[],"meta":{"billed_units":{"search_units":1}}}"#),
            0
        );
        assert_eq!(input(r#"{"usage":{"total_tokens":"x"}}"#), 0);
        assert_eq!(input("not json"), 0);
        assert_eq!(
            rerank_usage(br#"{"usage":{"total_tokens":3}}"#).output_tokens,
            0
        );
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
            // Inside the usage object too: the last of a repeated figure, escaped names,
            // a details object that is not one, figures of every protocol at once.
            r#"{"usage":{"prompt_tokens":1,"prompt_tokens":5,"completion_tokens":2,"completion_tokens":null}}"#,
            r#"{"usage":{"pr\u006fmpt_tokens":8,"prompt_tokens_details":{"cached_tokens":3,"cached_tokens":1}}}"#,
            r#"{"usage":{"prompt_tokens":8,"prompt_tokens_details":[{"cached_tokens":3}]}}"#,
            r#"{"usage":{"prompt_tokens":8,"prompt_tokens_details":{"cached_tokens":"3"}}}"#,
            r#"{"usage":{"input_tokens":4,"input_tokens":6,"cache_creation_input_tokens":2,"output_tokens":1.0}}"#,
            r#"{"usageMetadata":{"promptTokenCount":9,"thoughtsTokenCount":3,"candidatesTokenCount":-1},"usage":{"prompt_tokens":2,"input_tokens":3}}"#,
            r#"{"usage":{"prompt_tokens":3,"prompt_tokens_details":null,"completion_tokens":1e400}}"#,
            r#"{"usage":{"prompt_tokens":3,"prompt_tokens_details":{"cached_tokens":2,"audio_tokens":1}}}"#,
            // Details that a struct read by position, or not read at all, would get wrong: an
            // array holding the count, a bare number, a nested `cached_tokens`, an escaped key.
            r#"{"usage":{"prompt_tokens":8,"prompt_tokens_details":[3]}}"#,
            r#"{"usage":{"prompt_tokens":8,"prompt_tokens_details":5}}"#,
            r#"{"usage":{"prompt_tokens":8,"prompt_tokens_details":{"audio":{"cached_tokens":7},"cached_tokens":1}}}"#,
            r#"{"usage":{"prompt_tokens":8,"prompt_tokens_details":{"cached\u005ftokens":4}}}"#,
            r#"{"usage":{"prompt_tokens":8,"prompt_tokens_details":{"cached_tokens":null}}}"#,
            r#"{"usageMetadata":{"promptTokenCount":9,"promptTokenCount":4,"cachedContentTokenCount":5}}"#,
            r#"{"usage":{"input_tokens":"4","output_tokens":[],"cache_read_input_tokens":{}}}"#,
            r#"{"usage":[1,2]}"#,
            r#"{"usage":{}}"#,
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

    /// A Responses API answer's usage names the same figures its own way; it is read like a full
    /// parse of the answer would read it, cached tokens included.
    #[test]
    fn responses_usage_is_read_like_a_full_parse_would_read_it() {
        let by_full_parse = |body: &[u8]| {
            parse_json_lenient(body)
                .and_then(|v| v.get("usage").map(FullUsage::from_responses))
                .unwrap_or_default()
                .public()
        };
        let bodies: &[&str] = &[
            r#"{"object":"response","output":[{"content":[{"text":"\"usage\""}]}],"usage":{"input_tokens":30,"input_tokens_details":{"cached_tokens":12},"output_tokens":9,"output_tokens_details":{"reasoning_tokens":4},"total_tokens":39}}"#,
            r#"{"usage":{"input_tokens":1},"usage":{"input_tokens":9,"output_tokens":4}}"#,
            r#"{"usage":{"input_tokens":1,"input_tokens":5,"output_tokens":2}}"#,
            r#"{"usage":{"inp\u0075t_tokens":8,"input_tokens_details":{"cached_tokens":3,"cached_tokens":1}}}"#,
            r#"{"usage":{"input_tokens":8,"input_tokens_details":[3]}}"#,
            r#"{"usage":{"input_tokens":8,"input_tokens_details":null,"output_tokens":"2"}}"#,
            r#"{"usage":{"input_tokens":3,"input_tokens_details":{"cached_tokens":7}}}"#,
            // Chat Completions names are not the Responses API's.
            r#"{"usage":{"prompt_tokens":7,"completion_tokens":3}}"#,
            r#"{"usage":[1,2]}"#,
            r#"{"usage":null}"#,
            r#"{}"#,
            r#"{"usage":{"input_tokens":1}} trailing"#,
            "not json",
        ];
        for body in bodies {
            assert_eq!(
                responses_answer_usage(body.as_bytes()),
                by_full_parse(body.as_bytes()),
                "{body}"
            );
        }
        assert_eq!(
            responses_answer_usage(bodies[0].as_bytes()),
            Usage {
                input_tokens: 30,
                output_tokens: 9,
                cached_tokens: 12
            }
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

    /// A details object is where the cached figure is read from, not a figure itself: a usage
    /// object holding only the details charges nothing and refuses nothing, and a refused
    /// cached figure is named by its own kind.
    #[test]
    fn a_details_object_is_read_for_its_cached_figure_and_is_no_figure_itself() {
        for text in [
            r#"{"prompt_tokens_details":{"cached_tokens":3}}"#,
            r#"{"prompt_tokens":null,"completion_tokens":null,"prompt_tokens_details":{}}"#,
            r#"{"prompt_tokens_details":{"audio_tokens":2}}"#,
        ] {
            let kinds = warned_kinds(|| {
                assert_eq!(
                    usage_text(Protocol::OpenAi, text),
                    Usage::default(),
                    "{text}"
                );
            });
            assert!(kinds.is_empty(), "{text}: {kinds:?}");
        }
        let kinds = warned_kinds(|| {
            assert_eq!(
                responses_answer_usage(
                    br#"{"usage":{"input_tokens_details":{"cached_tokens":3}}}"#
                ),
                Usage::default()
            );
        });
        assert!(kinds.is_empty(), "{kinds:?}");
        let kinds = warned_kinds(|| {
            usage_text(
                Protocol::OpenAi,
                r#"{"prompt_tokens_details":{"cached_tokens":"3"}}"#,
            );
        });
        assert_eq!(kinds, ["a string"]);
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
