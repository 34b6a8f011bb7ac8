//! Comparing a shadow pair's answers: what is read of each answer ([`Facts`]: text, finish
//! reason, tool calls, from a plain answer or read back from a stream's chunks) and how the
//! two compare ([`Comparison`]). Pure: nothing here knows of the proxy's state.

use bytes::Bytes;
use serde_json::Value;
use switchyard_provider::{Protocol, SseDecoder, StreamDigester};

use crate::endpoint::Endpoint;

/// What is compared of one answer (in the client's protocol; a translated shadow answer has been
/// translated back into it).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Facts {
    pub text: String,
    pub finish_reason: Option<String>,
    /// Tool calls in order: name, and whether its arguments are valid JSON.
    pub tools: Vec<(String, bool)>,
}

fn str_of(v: &Value) -> Option<String> {
    v.as_str().map(str::to_owned)
}

/// Arguments as a JSON string (OpenAI) must parse; as an object (Anthropic, Gemini) they are.
fn args_valid(v: &Value) -> bool {
    match v {
        Value::String(s) => serde_json::from_str::<Value>(s).is_ok(),
        Value::Object(_) => true,
        _ => false,
    }
}

/// What is compared of one side: its plain answer, or its stream read back.
pub(crate) fn content(
    endpoint: Endpoint,
    answer: Option<&[u8]>,
    stream: Option<&[Bytes]>,
) -> Option<Facts> {
    match (answer, stream) {
        (Some(answer), _) => facts(endpoint, answer),
        (None, Some(chunks)) => stream_facts(endpoint, chunks),
        (None, None) => None,
    }
}

/// Reads a stream of `endpoint`'s protocol (in chunks as they went out); `None` when it held
/// no answer. A Responses stream's `response.completed` event carries the whole response.
pub fn stream_facts(endpoint: Endpoint, chunks: &[Bytes]) -> Option<Facts> {
    let protocol = match endpoint {
        Endpoint::Responses => return responses_stream_facts(chunks),
        Endpoint::ChatCompletions => Protocol::OpenAi,
        Endpoint::Messages => Protocol::Anthropic,
        Endpoint::GeminiGenerate => Protocol::Gemini,
        _ => return None,
    };
    let mut digester = StreamDigester::new(protocol);
    for chunk in chunks {
        digester.push(chunk);
    }
    let digest = digester.finish();
    // A stream without a finish reason held no whole answer.
    let finish_reason = Some(digest.finish_reason?);
    Some(Facts {
        text: digest.text,
        finish_reason,
        tools: digest
            .tools
            .into_iter()
            .map(|(name, args)| {
                // No argument deltas at all: a call without arguments.
                let valid = args.trim().is_empty() || serde_json::from_str::<Value>(&args).is_ok();
                (name, valid)
            })
            .collect(),
    })
}

fn responses_stream_facts(chunks: &[Bytes]) -> Option<Facts> {
    let mut decoder = SseDecoder::new();
    let mut events = Vec::new();
    for chunk in chunks {
        decoder.push_into(chunk, &mut events);
    }
    events.extend(decoder.finish());
    events.iter().rev().find_map(|event| {
        let v: Value = serde_json::from_str(&event.data).ok()?;
        (v.get("type")?.as_str()? == "response.completed")
            .then(|| v.get("response").and_then(response_facts))
            .flatten()
    })
}

/// Reads an answer of `endpoint`'s protocol; `None` when it is not one.
pub fn facts(endpoint: Endpoint, body: &[u8]) -> Option<Facts> {
    let v: Value = serde_json::from_slice(body).ok()?;
    match endpoint {
        Endpoint::ChatCompletions => chat_completion_facts(&v),
        Endpoint::Messages => message_facts(&v),
        Endpoint::GeminiGenerate => gemini_facts(&v),
        Endpoint::Responses => response_facts(&v),
        _ => None,
    }
}

/// An OpenAI chat completion: its first choice's message.
fn chat_completion_facts(v: &Value) -> Option<Facts> {
    let mut f = Facts::default();
    let choice = v.get("choices")?.get(0)?;
    f.finish_reason = choice.get("finish_reason").and_then(str_of);
    let message = choice.get("message")?;
    f.text = message.get("content").and_then(str_of).unwrap_or_default();
    for call in message
        .get("tool_calls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let function = call.get("function")?;
        f.tools.push((
            function.get("name").and_then(str_of).unwrap_or_default(),
            function.get("arguments").is_some_and(args_valid),
        ));
    }
    Some(f)
}

/// An Anthropic message: its text and tool-use blocks.
fn message_facts(v: &Value) -> Option<Facts> {
    let mut f = Facts {
        finish_reason: v.get("stop_reason").and_then(str_of),
        ..Facts::default()
    };
    for block in v.get("content")?.as_array()? {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => f.text.push_str(block.get("text")?.as_str()?),
            Some("tool_use") => f.tools.push((
                block.get("name").and_then(str_of).unwrap_or_default(),
                block.get("input").is_some_and(args_valid),
            )),
            _ => {}
        }
    }
    Some(f)
}

/// A Gemini answer: its first candidate's text and function-call parts.
fn gemini_facts(v: &Value) -> Option<Facts> {
    let mut f = Facts::default();
    let candidate = v.get("candidates")?.get(0)?;
    f.finish_reason = candidate.get("finishReason").and_then(str_of);
    for part in candidate
        .get("content")
        .and_then(|c| c.get("parts"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if let Some(text) = part.get("text").and_then(Value::as_str) {
            f.text.push_str(text);
        }
        if let Some(call) = part.get("functionCall") {
            f.tools.push((
                call.get("name").and_then(str_of).unwrap_or_default(),
                call.get("args").is_none_or(args_valid),
            ));
        }
    }
    Some(f)
}

/// A Responses answer: its message items' text and its function calls.
fn response_facts(v: &Value) -> Option<Facts> {
    let mut f = Facts {
        finish_reason: v.get("status").and_then(str_of),
        ..Facts::default()
    };
    for item in v.get("output")?.as_array()? {
        match item.get("type").and_then(Value::as_str) {
            Some("message") => {
                for part in item
                    .get("content")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    if let Some(text) = part.get("text").and_then(Value::as_str) {
                        f.text.push_str(text);
                    }
                }
            }
            Some("function_call") => f.tools.push((
                item.get("name").and_then(str_of).unwrap_or_default(),
                item.get("arguments").is_some_and(args_valid),
            )),
            _ => {}
        }
    }
    Some(f)
}

/// Whether the request asked for JSON output (OpenAI `response_format`, Responses
/// `text.format`, Gemini `responseMimeType`; Anthropic has no JSON mode).
pub fn json_mode_asked(endpoint: Endpoint, body: &[u8]) -> bool {
    let Ok(v) = serde_json::from_slice::<Value>(body) else {
        return false;
    };
    let json_type = |t: Option<&Value>| {
        matches!(
            t.and_then(Value::as_str),
            Some("json_object" | "json_schema")
        )
    };
    match endpoint {
        Endpoint::ChatCompletions => json_type(v.pointer("/response_format/type")),
        Endpoint::Responses => json_type(v.pointer("/text/format/type")),
        Endpoint::GeminiGenerate => {
            v.pointer("/generationConfig/responseMimeType")
                .and_then(Value::as_str)
                == Some("application/json")
        }
        _ => false,
    }
}

/// How one pair's answers agree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Comparison {
    pub same_finish_reason: bool,
    pub same_tool_names: bool,
    pub shadow_tool_args_valid: bool,
    pub json_mode_asked: bool,
    pub shadow_json_valid: bool,
    /// Shadow text length / live text length (characters), in thousandths, at most 10 000.
    pub length_ratio_milli: u64,
    /// [`similarity`] in thousandths.
    pub similarity_milli: u64,
}

pub fn compare(live: &Facts, shadow: &Facts, json_mode: bool) -> Comparison {
    let live_len = live.text.chars().count() as u64;
    let shadow_len = shadow.text.chars().count() as u64;
    let length_ratio_milli = match (live_len, shadow_len) {
        (0, 0) => 1000,
        (0, _) => 10_000,
        (l, s) => (s * 1000 / l).min(10_000),
    };
    Comparison {
        same_finish_reason: live.finish_reason == shadow.finish_reason,
        same_tool_names: live
            .tools
            .iter()
            .map(|t| &t.0)
            .eq(shadow.tools.iter().map(|t| &t.0)),
        shadow_tool_args_valid: shadow.tools.iter().all(|t| t.1),
        json_mode_asked: json_mode,
        shadow_json_valid: json_mode && serde_json::from_str::<Value>(shadow.text.trim()).is_ok(),
        length_ratio_milli,
        similarity_milli: (similarity(&live.text, &shadow.text) * 1000.0).round() as u64,
    }
}

/// Text similarity, 0 to 1: the Jaccard index of the two texts' sets of lowercase word tokens
/// (runs of letters and digits). Two empty texts are identical (1).
pub fn similarity(a: &str, b: &str) -> f64 {
    fn words(text: &str) -> std::collections::HashSet<String> {
        text.split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
            .map(str::to_lowercase)
            .collect()
    }
    let (a, b) = (words(a), words(b));
    if a.is_empty() && b.is_empty() {
        return 1.0;
    }
    let common = a.intersection(&b).count();
    let all = a.len() + b.len() - common;
    common as f64 / all as f64
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    #[test]
    fn similarity_is_the_jaccard_index_of_word_sets() {
        assert_eq!(similarity("", ""), 1.0);
        assert_eq!(similarity("The cat sat", "the CAT sat"), 1.0);
        assert_eq!(similarity("a b", "c d"), 0.0);
        assert!((similarity("a b c", "a b d") - 0.5).abs() < 1e-9);
    }

    #[test]
    fn openai_and_anthropic_answers_are_read_and_compared() {
        let openai = br#"{"choices":[{"finish_reason":"tool_calls","message":{"content":"hi there",
            "tool_calls":[{"function":{"name":"get","arguments":"{\"a\":1}"}}]}}]}"#;
        let f = facts(Endpoint::ChatCompletions, openai).unwrap();
        assert_eq!(f.text, "hi there");
        assert_eq!(f.finish_reason.as_deref(), Some("tool_calls"));
        assert_eq!(f.tools, vec![("get".to_owned(), true)]);
        let broken = br#"{"choices":[{"finish_reason":"tool_calls","message":{"content":"hi",
            "tool_calls":[{"function":{"name":"get","arguments":"{nope"}}]}}]}"#;
        let g = facts(Endpoint::ChatCompletions, broken).unwrap();
        let c = compare(&f, &g, false);
        assert!(c.same_finish_reason && c.same_tool_names && !c.shadow_tool_args_valid);
        assert_eq!(c.length_ratio_milli, 250);
        assert_eq!(c.similarity_milli, 500);
        let anthropic =
            br#"{"stop_reason":"end_turn","content":[{"type":"text","text":"{\"x\":1}"}]}"#;
        let a = facts(Endpoint::Messages, anthropic).unwrap();
        assert_eq!(a.finish_reason.as_deref(), Some("end_turn"));
        assert!(compare(&a, &a, true).shadow_json_valid);
    }

    #[test]
    fn json_mode_is_read_from_each_protocols_field() {
        assert!(json_mode_asked(
            Endpoint::ChatCompletions,
            br#"{"response_format":{"type":"json_object"}}"#
        ));
        assert!(!json_mode_asked(Endpoint::ChatCompletions, b"{}"));
        assert!(json_mode_asked(
            Endpoint::GeminiGenerate,
            br#"{"generationConfig":{"responseMimeType":"application/json"}}"#
        ));
    }

    #[test]
    fn streams_of_each_protocol_are_read_back_as_their_plain_answers_are() {
        let chunks = |s: &str| {
            vec![
                Bytes::copy_from_slice(&s.as_bytes()[..7]),
                Bytes::copy_from_slice(&s.as_bytes()[7..]),
            ]
        };
        let openai = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi there\"}}]}\n\ndata: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"t\",\"function\":{\"name\":\"get\",\"arguments\":\"{nope\"}}]}}]}\n\ndata: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\ndata: [DONE]\n\n";
        let f = stream_facts(Endpoint::ChatCompletions, &chunks(openai)).unwrap();
        assert_eq!(f.text, "hi there");
        assert_eq!(f.finish_reason.as_deref(), Some("tool_calls"));
        assert_eq!(f.tools, vec![("get".to_owned(), false)]);
        // A stream cut before its finish holds no answer.
        let cut = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n";
        assert_eq!(stream_facts(Endpoint::ChatCompletions, &chunks(cut)), None);
        // A Responses stream: its completed event's response, read as a plain one.
        let completed = serde_json::json!({"type": "response.completed", "response": {
            "status": "completed", "output": [{"type": "message", "content": [
                {"type": "output_text", "text": "done here"}]}]}});
        let responses = format!("event: response.created\ndata: {{\"type\":\"response.created\"}}\n\nevent: response.completed\ndata: {completed}\n\n");
        let plain = facts(
            Endpoint::Responses,
            completed["response"].to_string().as_bytes(),
        );
        let streamed = stream_facts(Endpoint::Responses, &chunks(&responses));
        assert!(plain.is_some());
        assert_eq!(streamed, plain);
        assert_eq!(streamed.unwrap().text, "done here");
        // Not a shadowed endpoint: nothing.
        assert_eq!(stream_facts(Endpoint::Embeddings, &chunks(openai)), None);
    }
}
