//! What an answer says about itself, for traces: its id, the model that produced it and why each
//! choice ended. Read from a non-streamed answer body in the upstream's protocol, with borrowed
//! fields and everything else skipped unbuilt; never the content.

use serde::Deserialize;

use crate::protocol::Protocol;

/// An answer's id, model and finish reasons (in the upstream's own words: `stop`, `end_turn`,
/// `STOP`...). Fields the answer lacks are `None` / empty.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct AnswerMeta {
    pub id: Option<String>,
    pub model: Option<String>,
    pub finish_reasons: Vec<String>,
}

/// The largest id or model name taken from an answer: anything longer is not kept (an upstream
/// is not trusted input, and a trace attribute is no place for a megabyte).
const MAX_NAME: usize = 256;

#[derive(Deserialize)]
struct OpenAi<'a> {
    #[serde(borrow, default)]
    id: Option<&'a str>,
    #[serde(borrow, default)]
    model: Option<&'a str>,
    #[serde(borrow, default)]
    choices: Option<Vec<OpenAiChoice<'a>>>,
    /// The Responses API: `status` (`completed`, `incomplete`...) is its finish reason.
    #[serde(borrow, default)]
    status: Option<&'a str>,
}

#[derive(Deserialize)]
struct OpenAiChoice<'a> {
    #[serde(borrow, default)]
    finish_reason: Option<&'a str>,
}

#[derive(Deserialize)]
struct Anthropic<'a> {
    #[serde(borrow, default)]
    id: Option<&'a str>,
    #[serde(borrow, default)]
    model: Option<&'a str>,
    #[serde(borrow, default)]
    stop_reason: Option<&'a str>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Gemini<'a> {
    #[serde(borrow, default)]
    response_id: Option<&'a str>,
    #[serde(borrow, default)]
    model_version: Option<&'a str>,
    #[serde(borrow, default)]
    candidates: Option<Vec<GeminiCandidate<'a>>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct GeminiCandidate<'a> {
    #[serde(borrow, default)]
    finish_reason: Option<&'a str>,
}

fn name(value: Option<&str>) -> Option<String> {
    value
        .filter(|v| !v.is_empty() && v.len() <= MAX_NAME)
        .map(str::to_owned)
}

fn names<'a>(values: impl Iterator<Item = Option<&'a str>>) -> Vec<String> {
    values.filter_map(name).collect()
}

/// The [`AnswerMeta`] of a non-streamed answer `body` in `protocol`; empty when the body is not
/// such an answer (an error, not JSON, another endpoint's shape).
pub fn answer_meta(protocol: Protocol, body: &[u8]) -> AnswerMeta {
    // A JSON string with escapes cannot be borrowed: such an answer is read as having no meta
    // rather than copied (ids and model names never need escapes).
    match protocol {
        Protocol::OpenAi => serde_json::from_slice::<OpenAi>(body)
            .map(|a| AnswerMeta {
                id: name(a.id),
                model: name(a.model),
                finish_reasons: match a.choices {
                    Some(choices) => names(choices.iter().map(|c| c.finish_reason)),
                    None => names(std::iter::once(a.status)),
                },
            })
            .unwrap_or_default(),
        Protocol::Anthropic => serde_json::from_slice::<Anthropic>(body)
            .map(|a| AnswerMeta {
                id: name(a.id),
                model: name(a.model),
                finish_reasons: names(std::iter::once(a.stop_reason)),
            })
            .unwrap_or_default(),
        Protocol::Gemini => serde_json::from_slice::<Gemini>(body)
            .map(|a| AnswerMeta {
                id: name(a.response_id),
                model: name(a.model_version),
                finish_reasons: names(a.candidates.iter().flatten().map(|c| c.finish_reason)),
            })
            .unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(id: &str, model: &str, reasons: &[&str]) -> AnswerMeta {
        AnswerMeta {
            id: Some(id.to_owned()),
            model: Some(model.to_owned()),
            finish_reasons: reasons.iter().map(|r| (*r).to_owned()).collect(),
        }
    }

    #[test]
    fn each_protocol_names_its_id_model_and_finish_reasons() {
        let chat = br#"{"id":"chatcmpl-1","object":"chat.completion","model":"gpt-x","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"},{"index":1,"finish_reason":"length"}],"usage":{"prompt_tokens":1}}"#;
        assert_eq!(
            answer_meta(Protocol::OpenAi, chat),
            meta("chatcmpl-1", "gpt-x", &["stop", "length"])
        );
        let responses = br#"{"id":"resp_1","object":"response","model":"gpt-x","status":"completed","output":[]}"#;
        assert_eq!(
            answer_meta(Protocol::OpenAi, responses),
            meta("resp_1", "gpt-x", &["completed"])
        );
        let anthropic = br#"{"id":"msg_1","type":"message","model":"claude-x","content":[{"type":"text","text":"hi"}],"stop_reason":"end_turn"}"#;
        assert_eq!(
            answer_meta(Protocol::Anthropic, anthropic),
            meta("msg_1", "claude-x", &["end_turn"])
        );
        let gemini = br#"{"candidates":[{"content":{"parts":[{"text":"hi"}]},"finishReason":"STOP"}],"modelVersion":"gemini-x","responseId":"abc"}"#;
        assert_eq!(
            answer_meta(Protocol::Gemini, gemini),
            meta("abc", "gemini-x", &["STOP"])
        );
    }

    #[test]
    fn garbage_errors_and_oversized_names_give_nothing() {
        for protocol in [Protocol::OpenAi, Protocol::Anthropic, Protocol::Gemini] {
            assert_eq!(answer_meta(protocol, b"not json"), AnswerMeta::default());
            assert_eq!(answer_meta(protocol, b"[1,2]"), AnswerMeta::default());
            assert_eq!(
                answer_meta(protocol, br#"{"error":{"message":"no"}}"#),
                AnswerMeta::default()
            );
        }
        let longest = "m".repeat(MAX_NAME);
        let body = format!(r#"{{"id":"","model":"{longest}","choices":[]}}"#);
        assert_eq!(
            answer_meta(Protocol::OpenAi, body.as_bytes()).model,
            Some(longest),
            "a name of exactly the bound is kept"
        );
        let long = "m".repeat(MAX_NAME + 1);
        let body = format!(r#"{{"id":"","model":"{long}","choices":[{{"finish_reason":null}}]}}"#);
        assert_eq!(
            answer_meta(Protocol::OpenAi, body.as_bytes()),
            AnswerMeta::default()
        );
        // A wrongly typed field makes the whole answer unreadable as meta, not a panic.
        assert_eq!(
            answer_meta(Protocol::OpenAi, br#"{"id":7,"model":"gpt-x"}"#),
            AnswerMeta::default()
        );
    }
}
