//! Gemini native answers (`/v1beta/models/{model}:generateContent`,
//! `:streamGenerateContent` and `:countTokens`).

use serde_json::{json, Value};

use crate::answer::Answer;
use crate::wire::{next_id, split_content, sse_data_crlf};

/// `usageMetadata` of an [`Answer`]; `cachedContentTokenCount` only when some were cached, as
/// Gemini omits it otherwise.
fn usage_metadata(answer: &Answer) -> Value {
    let prompt = answer.input_tokens();
    let output = answer.output_tokens();
    let mut usage = json!({
        "promptTokenCount": prompt,
        "candidatesTokenCount": output,
        "totalTokenCount": prompt + output
    });
    if answer.cached_tokens > 0 {
        if let Some(obj) = usage.as_object_mut() {
            obj.insert(
                "cachedContentTokenCount".into(),
                json!(answer.cached_tokens),
            );
        }
    }
    usage
}

fn function_call_parts(answer: &Answer) -> Vec<Value> {
    answer
        .tool_calls
        .iter()
        .map(|call| {
            json!({"functionCall": {
                "id": format!("fc_mock_{}", next_id()),
                "name": call.name,
                "args": call.arguments_object()
            }})
        })
        .collect()
}

/// One `GenerateContentResponse` with a single candidate holding `parts`; `last` adds
/// `finishReason` and `usageMetadata`.
fn response(answer: &Answer, response_id: &str, parts: Vec<Value>, last: bool) -> Value {
    let mut candidate = json!({
        "content": {"role": "model", "parts": parts},
        "index": 0
    });
    let mut body = json!({
        "candidates": [],
        "modelVersion": answer.model,
        "responseId": response_id
    });
    if let (Some(candidate), Some(body)) = (candidate.as_object_mut(), body.as_object_mut()) {
        if last {
            candidate.insert("finishReason".into(), json!("STOP"));
            body.insert("usageMetadata".into(), usage_metadata(answer));
        }
        body.insert("candidates".into(), json!([candidate]));
    }
    body
}

fn response_id() -> String {
    format!("mock-{}", next_id())
}

/// A `GenerateContentResponse` saying `answer`: one candidate whose `content` (`role: "model"`)
/// has a `text` part (when there is text) then one `functionCall` part (`{id, name, args}`) per
/// tool call, `finishReason: "STOP"`, and `usageMetadata` (`promptTokenCount`,
/// `candidatesTokenCount`, `totalTokenCount`, `cachedContentTokenCount`). An empty answer has
/// `parts: []`.
pub fn gemini_response_json(answer: &Answer) -> String {
    let mut parts = Vec::new();
    if !answer.text.is_empty() {
        parts.push(json!({"text": answer.text}));
    }
    parts.extend(function_call_parts(answer));
    response(answer, &response_id(), parts, true).to_string()
}

/// The `GenerateContentResponse` bodies of a `streamGenerateContent` answer, as JSON text: the
/// text in `n` responses (one `text` part each), then one response with the `functionCall`
/// parts when there are tool calls (Gemini never splits a call). The last response carries
/// `finishReason` and `usageMetadata`. An empty answer is a single response with `parts: []`.
pub fn gemini_stream_responses(answer: &Answer, n: usize) -> Vec<String> {
    stream_values(answer, n)
        .iter()
        .map(Value::to_string)
        .collect()
}

fn stream_values(answer: &Answer, n: usize) -> Vec<Value> {
    let id = response_id();
    let mut part_groups: Vec<Vec<Value>> = Vec::new();
    if !answer.text.is_empty() {
        part_groups.extend(
            split_content(&answer.text, n.max(1))
                .into_iter()
                .map(|piece| vec![json!({"text": piece})]),
        );
    }
    if !answer.tool_calls.is_empty() {
        part_groups.push(function_call_parts(answer));
    }
    if part_groups.is_empty() {
        part_groups.push(Vec::new());
    }
    let last = part_groups.len() - 1;
    part_groups
        .into_iter()
        .enumerate()
        .map(|(i, parts)| response(answer, &id, parts, i == last))
        .collect()
}

/// [`gemini_stream_responses`] as the SSE events of `streamGenerateContent?alt=sse`:
/// `data: {GenerateContentResponse}\r\n\r\n` each.
pub fn gemini_events(answer: &Answer, n: usize) -> Vec<String> {
    stream_values(answer, n).iter().map(sse_data_crlf).collect()
}

/// `:countTokens`: `{"totalTokens": N}`.
pub fn gemini_count_tokens_json(total_tokens: u64) -> String {
    json!({"totalTokens": total_tokens}).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{gemini_error_json, gemini_error_status};

    fn parse(s: &str) -> Value {
        serde_json::from_str(s).unwrap()
    }

    #[test]
    fn response_has_candidates_usage_and_function_calls() {
        let answer = Answer::new("gemini-2.0-flash", "Sure")
            .tool_call("get_weather", r#"{"city":"Paris"}"#)
            .prompt_tokens(12)
            .cached_tokens(4);
        let v = parse(&gemini_response_json(&answer));
        let candidate = &v["candidates"][0];
        assert_eq!(candidate["content"]["role"], "model");
        assert_eq!(candidate["content"]["parts"][0]["text"], "Sure");
        let call = &candidate["content"]["parts"][1]["functionCall"];
        assert_eq!(call["name"], "get_weather");
        assert_eq!(call["args"], json!({"city": "Paris"}));
        assert!(call["id"].is_string());
        assert_eq!(candidate["finishReason"], "STOP");
        assert_eq!(candidate["index"], 0);
        let usage = &v["usageMetadata"];
        assert_eq!(usage["promptTokenCount"], 12);
        assert_eq!(usage["cachedContentTokenCount"], 4);
        assert_eq!(
            usage["totalTokenCount"].as_u64().unwrap(),
            12 + usage["candidatesTokenCount"].as_u64().unwrap()
        );
        assert_eq!(v["modelVersion"], "gemini-2.0-flash");
        assert!(v["responseId"].is_string());
        let plain = parse(&gemini_response_json(&Answer::new("g", "x")));
        assert!(plain["usageMetadata"]
            .get("cachedContentTokenCount")
            .is_none());
    }

    #[test]
    fn stream_splits_text_and_ends_with_finish_and_usage() {
        let events = gemini_events(&Answer::new("g", "Hello from mock"), 3);
        assert_eq!(events.len(), 3);
        let mut text = String::new();
        for (i, e) in events.iter().enumerate() {
            assert!(e.starts_with("data: ") && e.ends_with("\r\n\r\n"));
            let v = parse(e.trim_start_matches("data: ").trim_end());
            text.push_str(
                v["candidates"][0]["content"]["parts"][0]["text"]
                    .as_str()
                    .unwrap(),
            );
            let last = i == 2;
            assert_eq!(v["candidates"][0].get("finishReason").is_some(), last);
            assert_eq!(v.get("usageMetadata").is_some(), last);
        }
        assert_eq!(text, "Hello from mock");

        let calls = gemini_stream_responses(&Answer::new("g", "").tool_call("f", "{}"), 3);
        assert_eq!(calls.len(), 1);
        let v = parse(&calls[0]);
        assert_eq!(
            v["candidates"][0]["content"]["parts"][0]["functionCall"]["name"],
            "f"
        );
        assert_eq!(v["candidates"][0]["finishReason"], "STOP");
    }

    #[test]
    fn each_answer_has_its_own_id_and_a_stream_keeps_one() {
        let answer = Answer::new("g", "one two three");
        let first = parse(&gemini_response_json(&answer));
        let second = parse(&gemini_response_json(&answer));
        let id = first["responseId"].as_str().unwrap();
        assert!(id.starts_with("mock-") && id.len() > "mock-".len(), "{id}");
        assert_ne!(first["responseId"], second["responseId"]);
        let stream = gemini_stream_responses(&answer, 3);
        let ids: Vec<Value> = stream
            .iter()
            .map(|r| parse(r)["responseId"].clone())
            .collect();
        assert!(ids.iter().all(|i| *i == ids[0]), "{ids:?}");
        assert_ne!(ids[0], first["responseId"]);
    }

    #[test]
    fn a_stream_asked_for_no_pieces_still_says_the_text() {
        let events = gemini_stream_responses(&Answer::new("g", "one two"), 0);
        assert_eq!(events.len(), 1);
        let v = parse(&events[0]);
        assert_eq!(v["candidates"][0]["content"]["parts"][0]["text"], "one two");
        assert_eq!(v["candidates"][0]["finishReason"], "STOP");

        let empty = gemini_stream_responses(&Answer::new("g", ""), 3);
        assert_eq!(empty.len(), 1);
        let v = parse(&empty[0]);
        assert_eq!(v["candidates"][0]["content"]["parts"], json!([]));
        assert_eq!(v["usageMetadata"]["candidatesTokenCount"], 0);
    }

    #[test]
    fn errors_and_count_tokens_have_their_shapes() {
        let e = parse(&gemini_error_json(429, "slow", gemini_error_status(429)));
        assert_eq!(e["error"]["code"], 429);
        assert_eq!(e["error"]["status"], "RESOURCE_EXHAUSTED");
        assert_eq!(gemini_error_status(503), "UNAVAILABLE");
        assert_eq!(parse(&gemini_count_tokens_json(9))["totalTokens"], 9);
    }
}
