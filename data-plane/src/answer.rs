//! The check of a plain (non-streamed) 2xx answer before it is committed: is it the JSON it
//! should be, and does it have any content? The usage of a passed-through chat answer is read in
//! the same pass over the body (the body is read once, whatever its size).

use std::borrow::Cow;

use serde::de::{DeserializeSeed, Error as _, IgnoredAny, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;
use switchyard_provider::{
    openai_usage, rerank_usage, response_usage, responses_answer_usage, usage_key, usage_text,
    KeyIndex, Protocol, Usage,
};

use crate::endpoint::Endpoint;

mod scan;

/// What the check found.
#[derive(Debug, PartialEq, Eq)]
pub enum BodyCheck {
    /// A good answer, with its usage when it was asked for.
    Fine(Option<Usage>),
    Malformed,
    Empty,
}

/// Checks `body`, an answer of `upstream` to `endpoint`; with `read_usage`, a fine answer's
/// usage as `upstream` reports it (zero when it reports none).
pub fn check_body(
    endpoint: Endpoint,
    upstream: Protocol,
    body: &[u8],
    read_usage: bool,
) -> BodyCheck {
    let native =
        (endpoint.is_chat() || endpoint == Endpoint::Responses) && upstream != Protocol::OpenAi;
    let completion = matches!(endpoint, Endpoint::ChatCompletions | Endpoint::Completions);
    if !native && !completion {
        if serde_json::from_slice::<IgnoredAny>(body).is_err() {
            return BodyCheck::Malformed;
        }
        return BodyCheck::Fine(read_usage.then(|| match endpoint {
            Endpoint::Rerank => rerank_usage(body),
            // Here the Responses API answers itself (another protocol answers as its chat).
            Endpoint::Responses => responses_answer_usage(body),
            _ => response_usage(upstream, body),
        }));
    }
    if !native {
        if let Some(check) = scanned_check(upstream, body, read_usage) {
            return check;
        }
    }
    typed_check(native, upstream, body, read_usage)
}

/// The check of a completion answer in one pass over its bytes, when that pass gives a verdict
/// (else the typed read decides).
fn scanned_check(upstream: Protocol, body: &[u8], read_usage: bool) -> Option<BodyCheck> {
    let text = std::str::from_utf8(body).ok()?;
    let scanned = scan::completion(text, usage_key(upstream))?;
    if scanned.empty {
        return Some(BodyCheck::Empty);
    }
    Some(BodyCheck::Fine(read_usage.then(|| {
        match (scanned.figures, scanned.usage) {
            (Some([prompt, completion, cached]), _) if upstream == Protocol::OpenAi => {
                openai_usage(prompt, completion, cached)
            }
            (_, Some(usage)) => usage_text(upstream, usage),
            (_, None) => Usage::default(),
        }
    })))
}

/// The verdicts on an OpenAI completion answer of the one-pass check (when it gives one) and of
/// the typed read, usage included: the fuzz target `answer_check` holds them equal.
#[doc(hidden)]
pub fn completion_verdicts(body: &[u8]) -> (Option<BodyCheck>, BodyCheck) {
    (
        scanned_check(Protocol::OpenAi, body, true),
        typed_check(false, Protocol::OpenAi, body, true),
    )
}

/// The check of a chat answer by reading its parts into types (any answer the one-pass scan
/// gives no verdict on, and every Anthropic or Gemini one).
fn typed_check(native: bool, upstream: Protocol, body: &[u8], read_usage: bool) -> BodyCheck {
    let shape = Shape {
        native,
        usage: usage_key(upstream),
    };
    // Checked as UTF-8 once, the body's keys and raw values borrow without each being checked
    // again; a body that is not UTF-8 is read as bytes, as before (a stray byte inside a string
    // the check skips does not make an answer malformed).
    let parts = match std::str::from_utf8(body) {
        Ok(text) => shape.read(serde_json::Deserializer::from_str(text)),
        Err(_) => shape.read(serde_json::Deserializer::from_slice(body)),
    };
    let Some(parts) = parts else {
        return BodyCheck::Malformed;
    };
    let empty = if native {
        match upstream {
            Protocol::Anthropic => blank(parts.content),
            _ => parts.candidates.as_ref().is_none_or(|c| {
                c.iter().all(|c| {
                    c.content
                        .as_ref()
                        .is_none_or(|content| blank(content.parts))
                })
            }),
        }
    } else {
        parts.choices.as_ref().is_some_and(|choices| {
            choices.iter().all(|c| match (&c.message, &c.text) {
                (Some(m), _) => {
                    blank(m.content)
                        && blank(m.tool_calls)
                        && blank(m.function_call)
                        && blank(m.refusal)
                        && blank(m.audio)
                }
                (None, Some(text)) => text.is_empty(),
                (None, None) => true,
            })
        })
    };
    if empty {
        return BodyCheck::Empty;
    }
    let usage = read_usage.then(|| {
        parts
            .usage
            .map_or_else(Usage::default, |u| usage_text(upstream, u.get()))
    });
    BodyCheck::Fine(usage)
}

/// The parts of an answer the check reads: an OpenAI answer's `choices`, an Anthropic answer's
/// `content`, a Gemini answer's `candidates`, and the raw usage object.
#[derive(Default)]
struct Parts<'a> {
    choices: Option<Vec<Choice<'a>>>,
    content: Option<&'a RawValue>,
    candidates: Option<Vec<GeminiCandidate<'a>>>,
    usage: Option<&'a RawValue>,
}

/// Reads [`Parts`] from a top-level object: the parts of the answer's protocol (a repeated one
/// is malformed, as for any typed field), its usage (the last one when the key repeats, as a
/// parsed map would have it), every other value skipped unbuilt.
struct Shape {
    /// An Anthropic or Gemini answer (`content` and `candidates`), else an OpenAI one.
    native: bool,
    /// The key of the usage object in the answer's protocol.
    usage: &'static str,
}

impl<'de> Visitor<'de> for Shape {
    type Value = Parts<'de>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Parts<'de>, A::Error> {
        const CHOICES: usize = 0;
        const CONTENT: usize = 1;
        const CANDIDATES: usize = 2;
        const USAGE: usize = 3;
        let keys = ["choices", "content", "candidates", self.usage];
        let mut parts = Parts::default();
        // Which of the typed parts were present (`null` included), as for any typed field.
        let mut seen = [false; 3];
        while let Some(key) = map.next_key_seed(KeyIndex(&keys))? {
            let part = match key {
                Some(USAGE) => {
                    parts.usage = Some(map.next_value::<&'de RawValue>()?);
                    continue;
                }
                Some(CHOICES) if !self.native => CHOICES,
                Some(part @ (CONTENT | CANDIDATES)) if self.native => part,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                    continue;
                }
            };
            if std::mem::replace(&mut seen[part], true) {
                return Err(A::Error::duplicate_field(keys[part]));
            }
            match part {
                CHOICES => parts.choices = map.next_value()?,
                CONTENT => parts.content = map.next_value()?,
                _ => parts.candidates = map.next_value()?,
            }
        }
        Ok(parts)
    }
}

impl Shape {
    /// The parts of the one JSON value `de` holds (`None` when it is not one valid object).
    fn read<'de, R: serde_json::de::Read<'de>>(
        self,
        mut de: serde_json::Deserializer<R>,
    ) -> Option<Parts<'de>> {
        let parts = self.deserialize(&mut de).ok()?;
        de.end().ok()?;
        Some(parts)
    }
}

impl<'de> DeserializeSeed<'de> for Shape {
    type Value = Parts<'de>;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Parts<'de>, D::Error> {
        d.deserialize_map(self)
    }
}

#[derive(Deserialize)]
struct Choice<'a> {
    #[serde(borrow, default)]
    message: Option<ChoiceMessage<'a>>,
    #[serde(borrow, default)]
    text: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct ChoiceMessage<'a> {
    #[serde(borrow, default)]
    content: Option<&'a RawValue>,
    #[serde(borrow, default)]
    tool_calls: Option<&'a RawValue>,
    #[serde(borrow, default)]
    function_call: Option<&'a RawValue>,
    #[serde(borrow, default)]
    refusal: Option<&'a RawValue>,
    #[serde(borrow, default)]
    audio: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct GeminiCandidate<'a> {
    #[serde(borrow, default)]
    content: Option<GeminiContent<'a>>,
}

#[derive(Deserialize)]
struct GeminiContent<'a> {
    #[serde(borrow, default)]
    parts: Option<&'a RawValue>,
}

fn blank(raw: Option<&RawValue>) -> bool {
    raw.is_none_or(|r| matches!(r.get(), "null" | "\"\"" | "[]"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(endpoint: Endpoint, upstream: Protocol, body: &str) -> &'static str {
        match check_body(endpoint, upstream, body.as_bytes(), false) {
            BodyCheck::Fine(_) => "fine",
            BodyCheck::Malformed => "malformed",
            BodyCheck::Empty => "empty",
        }
    }

    #[test]
    fn empty_and_malformed_completions_are_detected() {
        let check = |b: &str| check(Endpoint::ChatCompletions, Protocol::OpenAi, b);
        assert_eq!(
            check(r#"{"choices":[{"message":{"role":"assistant","content":"hi"}}]}"#),
            "fine"
        );
        assert_eq!(
            check(r#"{"choices":[{"message":{"role":"assistant","content":""}}]}"#),
            "empty"
        );
        assert_eq!(check(r#"{"choices":[]}"#), "empty");
        assert_eq!(
            check(r#"{"choices":[{"message":{"content":null,"tool_calls":[{"id":"1"}]}}]}"#),
            "fine"
        );
        assert_eq!(check(r#"{"choices":[<<"#), "malformed");
        assert_eq!(check(r#"{"object":"list"}"#), "fine");
        // `null` choices say nothing; a repeated `choices` is malformed, even after a `null`.
        assert_eq!(check(r#"{"choices":null}"#), "fine");
        assert_eq!(
            check(r#"{"choices":null,"choices":[{"text":"x"}]}"#),
            "malformed"
        );
        assert_eq!(check(r#"{"ch\u006fices":[]}"#), "empty", "an escaped key");
        assert_eq!(check(r#"{"choices":[{"text":""}]}"#), "empty");
        assert_eq!(check(r#"{"choices":[{"text":"x"}]}"#), "fine");
        assert_eq!(check(r#"{"choices":[{}]}"#), "empty");
        // Another protocol's parts are not an OpenAI answer's content.
        assert_eq!(check(r#"{"choices":[],"content":"x"}"#), "empty");
        // ... and are not read at all: neither their shape nor their repetition matters.
        assert_eq!(
            check(r#"{"choices":[{"text":"x"}],"candidates":"x","content":1,"content":2}"#),
            "fine"
        );
        assert_eq!(check(r#"{"choices":[]} trailing"#), "malformed");
        assert_eq!(check(r#"[{"choices":[]}]"#), "malformed", "not an object");
        assert_eq!(check(""), "malformed");
    }

    #[test]
    fn anthropic_and_gemini_answers_without_content_are_empty() {
        let anthropic = |b: &str| check(Endpoint::Messages, Protocol::Anthropic, b);
        assert_eq!(
            anthropic(r#"{"content":[{"type":"text","text":"hi"}]}"#),
            "fine"
        );
        for empty in [
            r#"{"content":[]}"#,
            r#"{"content":null}"#,
            "{}",
            r#"{"content":""}"#,
        ] {
            assert_eq!(anthropic(empty), "empty", "{empty}");
        }
        assert_eq!(anthropic(r#"{"content":[],"content":[1]}"#), "malformed");
        // An OpenAI answer's `choices` is not read in a native answer, whatever its shape.
        assert_eq!(
            anthropic(r#"{"content":[{"type":"text","text":"hi"}],"choices":"x","choices":1}"#),
            "fine"
        );
        let gemini = |b: &str| check(Endpoint::GeminiGenerate, Protocol::Gemini, b);
        assert_eq!(
            gemini(r#"{"candidates":[{"content":{"parts":[{"text":"hi"}]}}]}"#),
            "fine"
        );
        for empty in [
            r#"{"candidates":[]}"#,
            r#"{"candidates":[{"content":{"parts":[]}}]}"#,
            r#"{"candidates":[{}]}"#,
            "{}",
        ] {
            assert_eq!(gemini(empty), "empty", "{empty}");
        }
        assert_eq!(gemini(r#"{"candidates":[],"candidates":[]}"#), "malformed");
        // A Responses request answered natively by another protocol is checked as that
        // protocol's chat answer.
        assert_eq!(
            check(
                Endpoint::Responses,
                Protocol::Anthropic,
                r#"{"content":[]}"#
            ),
            "empty"
        );
        assert_eq!(
            check(
                Endpoint::Responses,
                Protocol::Gemini,
                r#"{"candidates":[]}"#
            ),
            "empty"
        );
        assert_eq!(
            check(
                Endpoint::Responses,
                Protocol::Anthropic,
                r#"{"content":[{"text":"x"}]}"#
            ),
            "fine"
        );
        // Not a chat answer: only whether it is JSON, whichever protocol answers.
        assert_eq!(
            check(
                Endpoint::Embeddings,
                Protocol::Gemini,
                r#"{"candidates":[]}"#
            ),
            "fine"
        );
        assert_eq!(
            check(Endpoint::Embeddings, Protocol::OpenAi, "[1,2]"),
            "fine"
        );
        assert_eq!(
            check(Endpoint::Embeddings, Protocol::OpenAi, "[1,"),
            "malformed"
        );
        assert_eq!(
            check(Endpoint::Rerank, Protocol::OpenAi, r#"{"results":[]"#),
            "malformed"
        );
    }

    /// A rerank answer's usage is its token total when it reports no prompt figure (vLLM,
    /// Jina); a moderations answer, which reports none, is fine with zero usage.
    #[test]
    fn rerank_and_moderations_answers_are_accounted() {
        let rerank =
            r#"{"results":[{"index":0,"relevance_score":0.5}],"usage":{"total_tokens":9}}"#;
        let BodyCheck::Fine(Some(usage)) =
            check_body(Endpoint::Rerank, Protocol::OpenAi, rerank.as_bytes(), true)
        else {
            panic!("a rerank answer is fine");
        };
        assert_eq!((usage.input_tokens, usage.output_tokens), (9, 0));
        let moderation = r#"{"id":"modr-1","model":"m","results":[{"flagged":false}]}"#;
        assert_eq!(
            check_body(
                Endpoint::Moderations,
                Protocol::OpenAi,
                moderation.as_bytes(),
                true
            ),
            BodyCheck::Fine(Some(Usage::default()))
        );
    }

    /// A Responses API answer passed through is accounted with its usage, whose figures that
    /// API names its own way.
    #[test]
    fn a_responses_answer_is_accounted_with_its_own_usage_names() {
        let answer = r#"{"object":"response","output":[],"usage":{"input_tokens":30,"input_tokens_details":{"cached_tokens":12},"output_tokens":9,"output_tokens_details":{"reasoning_tokens":4},"total_tokens":39}}"#;
        assert_eq!(
            check_body(
                Endpoint::Responses,
                Protocol::OpenAi,
                answer.as_bytes(),
                true
            ),
            BodyCheck::Fine(Some(Usage {
                input_tokens: 30,
                output_tokens: 9,
                cached_tokens: 12
            }))
        );
    }

    /// A body that is not UTF-8 is read as bytes: a stray byte inside a string the check skips
    /// leaves the answer fine (with its usage), one inside a part the check reads makes it
    /// malformed — the same verdicts as for the same body read as text, where it can be.
    #[test]
    fn a_body_that_is_not_utf8_is_checked_as_bytes() {
        let body = |id: &[u8], content: &[u8]| {
            [
                &br#"{"id":""#[..],
                id,
                br#"","choices":[{"message":{"content":""#,
                content,
                br#""}}],"usage":{"prompt_tokens":7,"completion_tokens":3}}"#,
            ]
            .concat()
        };
        let read = |b: &[u8]| check_body(Endpoint::ChatCompletions, Protocol::OpenAi, b, true);
        let usage = Usage {
            input_tokens: 7,
            output_tokens: 3,
            cached_tokens: 0,
        };
        assert_eq!(read(&body(b"c1", b"hi")), BodyCheck::Fine(Some(usage)));
        assert_eq!(read(&body(b"c\xff1", b"hi")), BodyCheck::Fine(Some(usage)));
        assert_eq!(read(&body(b"c1", b"h\xffi")), BodyCheck::Malformed);
        assert_eq!(read(&body(b"c1", b"")), BodyCheck::Empty);
        assert_eq!(read(&body(b"c\xff1", b"")), BodyCheck::Empty);
    }

    /// The usage read in the checking pass is the one a separate read of the body gives.
    #[test]
    fn the_usage_read_while_checking_is_the_usage_of_the_answer() {
        let cases = [
            (
                Endpoint::ChatCompletions,
                Protocol::OpenAi,
                r#"{"choices":[{"message":{"content":"hi \"usage\""}}],"usage":{"prompt_tokens":7,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":2}}}"#,
            ),
            (
                Endpoint::ChatCompletions,
                Protocol::OpenAi,
                r#"{"usage":{"prompt_tokens":1},"choices":[{"text":"x"}],"usage":{"prompt_tokens":9,"completion_tokens":4}}"#,
            ),
            (
                Endpoint::ChatCompletions,
                Protocol::OpenAi,
                r#"{"choices":[{"text":"x","usage":{"prompt_tokens":100}}],"usage":{"completion_tokens":1}}"#,
            ),
            (
                Endpoint::Messages,
                Protocol::Anthropic,
                r#"{"content":[{"text":"x"}],"usage":{"input_tokens":10,"output_tokens":2,"cache_read_input_tokens":3}}"#,
            ),
            (
                Endpoint::GeminiGenerate,
                Protocol::Gemini,
                r#"{"candidates":[{"content":{"parts":[{"text":"x"}]}}],"usage":{"promptTokenCount":1},"usageMetadata":{"promptTokenCount":11,"candidatesTokenCount":5,"thoughtsTokenCount":2}}"#,
            ),
            (
                Endpoint::Embeddings,
                Protocol::OpenAi,
                r#"{"usage":{"prompt_tokens":6}}"#,
            ),
        ];
        for (endpoint, upstream, body) in cases {
            let BodyCheck::Fine(Some(usage)) =
                check_body(endpoint, upstream, body.as_bytes(), true)
            else {
                panic!("{body}: not fine");
            };
            assert_eq!(usage, response_usage(upstream, body.as_bytes()), "{body}");
            assert_ne!(usage, Usage::default(), "{body}");
        }
        let (_, _, first) = cases[0];
        assert_eq!(
            check_body(
                Endpoint::ChatCompletions,
                Protocol::OpenAi,
                first.as_bytes(),
                true
            ),
            BodyCheck::Fine(Some(Usage {
                input_tokens: 7,
                output_tokens: 3,
                cached_tokens: 2
            }))
        );
        assert_eq!(
            check_body(
                Endpoint::ChatCompletions,
                Protocol::OpenAi,
                first.as_bytes(),
                false
            ),
            BodyCheck::Fine(None)
        );
        assert_eq!(
            check_body(
                Endpoint::ChatCompletions,
                Protocol::OpenAi,
                br#"{"choices":null}"#,
                true
            ),
            BodyCheck::Fine(Some(Usage::default()))
        );
    }
}
