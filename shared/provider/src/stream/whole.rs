//! The streams [`super::StreamAssembler`] does not read — legacy Completions, the Responses API
//! and Gemini's JSON-array stream (`streamGenerateContent` without `alt=sse`) — read back into
//! their plain answer, and made again from it: the events a live stream of that answer gives.
//! The response cache keeps the plain answer and replays it through these.

use serde_json::{json, Map, Value};

use crate::error::{malformed, TranslateError};
use crate::protocol::Protocol;
use crate::sse::{write_event, SseDecoder, SseEvent};
use crate::usage::Usage;

use super::assemble::StreamAssembler;
use super::StreamTranslator;

/// Every event of a whole SSE stream, the last one without its blank line included.
fn events(stream: &[u8]) -> Vec<SseEvent> {
    let mut decoder = SseDecoder::new();
    let mut events = decoder.push(stream);
    events.extend(decoder.finish());
    events
}

/// One choice of a legacy completion as its chunks build it.
#[derive(Default)]
struct CompletionChoice {
    text: String,
    finish: Option<Value>,
}

/// A legacy Completions stream (`text_completion` chunks, then `data: [DONE]`) as its plain
/// answer; `usage` stands in when the stream carried none. `None` when the stream did not end
/// with `[DONE]`, carried an error or log probabilities (which the answer would not keep), or
/// held no choice.
pub fn completion_answer(stream: &[u8], usage: Usage) -> Option<Vec<u8>> {
    let mut head = Map::new();
    let mut choices: Vec<CompletionChoice> = Vec::new();
    let mut seen_usage = None;
    let mut done = false;
    for event in events(stream) {
        if event.data.trim() == "[DONE]" {
            done = true;
            continue;
        }
        let chunk: Value = serde_json::from_str(&event.data).ok()?;
        if chunk.get("error").is_some() {
            return None;
        }
        for field in ["id", "object", "created", "model"] {
            if let Some(value) = chunk.get(field) {
                head.insert(field.to_owned(), value.clone());
            }
        }
        if let Some(u) = chunk.get("usage").filter(|u| u.is_object()) {
            seen_usage = Some(u.clone());
        }
        for choice in chunk
            .get("choices")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if choice.get("logprobs").is_some_and(|l| !l.is_null()) {
                return None;
            }
            let index = choice.get("index").and_then(Value::as_u64).unwrap_or(0);
            let index = usize::try_from(index).ok().filter(|i| *i < 128)?;
            if choices.len() <= index {
                choices.resize_with(index + 1, CompletionChoice::default);
            }
            let at = &mut choices[index];
            at.text
                .push_str(choice.get("text").and_then(Value::as_str).unwrap_or(""));
            if let Some(finish) = choice.get("finish_reason").filter(|f| !f.is_null()) {
                at.finish = Some(finish.clone());
            }
        }
    }
    if !done || choices.is_empty() {
        return None;
    }
    let choices: Vec<Value> = (0..).zip(choices).map(|(index, c)| {
        json!({"text": c.text, "index": index, "logprobs": null, "finish_reason": c.finish})
    }).collect();
    head.insert("object".to_owned(), json!("text_completion"));
    head.insert("choices".to_owned(), Value::Array(choices));
    let usage = seen_usage.unwrap_or_else(|| {
        json!({"prompt_tokens": usage.input_tokens, "completion_tokens": usage.output_tokens,
            "total_tokens": usage.input_tokens.saturating_add(usage.output_tokens)})
    });
    head.insert("usage".to_owned(), usage);
    serde_json::to_vec(&Value::Object(head)).ok()
}

/// A plain legacy completion as the stream a live one gives: a chunk with each choice's text,
/// a chunk with its finish reason, the usage chunk (`choices: []`) when `include_usage`, then
/// `data: [DONE]`.
pub fn completion_stream(answer: &[u8], include_usage: bool) -> Result<Vec<u8>, TranslateError> {
    let answer: Value = serde_json::from_slice(answer).map_err(|e| malformed(e.to_string()))?;
    let choices = answer
        .get("choices")
        .and_then(Value::as_array)
        .filter(|c| !c.is_empty())
        .ok_or_else(|| malformed("the completion has no choices"))?;
    let chunk = |choices: Value| {
        let mut chunk = json!({"id": answer.get("id"), "object": "text_completion",
            "created": answer.get("created"), "model": answer.get("model"), "choices": choices});
        if include_usage {
            chunk["usage"] = Value::Null;
        }
        chunk
    };
    let mut out = Vec::new();
    for choice in choices {
        let index = choice.get("index").cloned().unwrap_or(json!(0));
        let text = choice.get("text").cloned().unwrap_or(json!(""));
        let piece =
            json!([{"text": text, "index": index, "logprobs": null, "finish_reason": null}]);
        write_event(&mut out, None, &chunk(piece).to_string());
        let finish = choice.get("finish_reason").cloned().unwrap_or(Value::Null);
        let end = json!([{"text": "", "index": index, "logprobs": null, "finish_reason": finish}]);
        write_event(&mut out, None, &chunk(end).to_string());
    }
    if include_usage {
        let mut last = chunk(json!([]));
        last["usage"] = answer.get("usage").cloned().unwrap_or(Value::Null);
        write_event(&mut out, None, &last.to_string());
    }
    write_event(&mut out, None, "[DONE]");
    Ok(out)
}

/// A Responses API stream as its plain answer: the `response` of its last
/// `response.completed` (or `response.incomplete`) event. `None` when the stream has no such
/// event, or failed (`response.failed`, an `error` event).
pub fn responses_answer(stream: &[u8]) -> Option<Vec<u8>> {
    let mut answer = None;
    for event in events(stream) {
        let data: Value = serde_json::from_str(&event.data).ok()?;
        let kind = data.get("type").and_then(Value::as_str).unwrap_or_default();
        match kind {
            "response.completed" | "response.incomplete" => {
                answer = data.get("response").filter(|r| r.is_object()).cloned();
            }
            "response.failed" | "error" => return None,
            _ => {}
        }
    }
    serde_json::to_vec(&answer?).ok()
}

/// A plain Responses API answer as the events a live stream of it gives, its ids kept:
/// `response.created`, `response.in_progress`, per output item `response.output_item.added`,
/// its content (a message's parts as `content_part.added`, one text or refusal delta and its
/// `.done`, `content_part.done`; a function call's arguments as one delta and its `.done`),
/// `response.output_item.done`, and last `response.completed` (`response.incomplete`) with
/// the whole answer. Every event carries its `sequence_number`.
pub fn responses_stream(answer: &[u8]) -> Result<Vec<u8>, TranslateError> {
    let answer: Value = serde_json::from_slice(answer).map_err(|e| malformed(e.to_string()))?;
    let output = answer
        .get("output")
        .and_then(Value::as_array)
        .ok_or_else(|| malformed("the response has no output"))?;
    let mut events = ResponsesEvents::default();
    let mut opening = answer.clone();
    opening["status"] = json!("in_progress");
    opening["output"] = json!([]);
    opening["usage"] = Value::Null;
    opening["incomplete_details"] = Value::Null;
    events.emit("response.created", json!({"response": opening}));
    events.emit("response.in_progress", json!({"response": opening}));
    for (index, item) in output.iter().enumerate() {
        events.item(index, item);
    }
    let last = match answer.get("status").and_then(Value::as_str) {
        Some("incomplete") => "response.incomplete",
        _ => "response.completed",
    };
    events.emit(last, json!({"response": answer}));
    Ok(events.out)
}

#[derive(Default)]
struct ResponsesEvents {
    out: Vec<u8>,
    sequence: u64,
}

impl ResponsesEvents {
    fn emit(&mut self, name: &str, mut data: Value) {
        data["type"] = json!(name);
        data["sequence_number"] = json!(self.sequence);
        self.sequence += 1;
        write_event(&mut self.out, Some(name), &data.to_string());
    }

    /// One output item: added (in progress, without its content), its content, done. (Items
    /// and parts that are not objects are passed over: no answer has them.)
    fn item(&mut self, index: usize, item: &Value) {
        if !item.is_object() {
            return;
        }
        let mut added = item.clone();
        added["status"] = json!("in_progress");
        let id = item.get("id").cloned().unwrap_or(Value::Null);
        match item.get("type").and_then(Value::as_str) {
            Some("message") => added["content"] = json!([]),
            Some("function_call") => added["arguments"] = json!(""),
            _ => {}
        }
        self.emit(
            "response.output_item.added",
            json!({"output_index": index, "item": added}),
        );
        match item.get("type").and_then(Value::as_str) {
            Some("message") => {
                let parts = item.get("content").and_then(Value::as_array);
                for (part_index, part) in parts.into_iter().flatten().enumerate() {
                    let at =
                        json!({"item_id": id, "output_index": index, "content_index": part_index});
                    self.part(&at, part);
                }
            }
            Some("function_call") => {
                let args = item.get("arguments").cloned().unwrap_or(json!(""));
                let at = json!({"item_id": id, "output_index": index});
                self.emit(
                    "response.function_call_arguments.delta",
                    with(&at, [("delta", args.clone())]),
                );
                let name = item.get("name").cloned().unwrap_or(Value::Null);
                self.emit(
                    "response.function_call_arguments.done",
                    with(&at, [("name", name), ("arguments", args)]),
                );
            }
            _ => {}
        }
        self.emit(
            "response.output_item.done",
            json!({"output_index": index, "item": item}),
        );
    }

    /// One content part of a message: added empty, its text (or refusal) as one delta, done.
    fn part(&mut self, at: &Value, part: &Value) {
        if !part.is_object() {
            return;
        }
        let kind = part.get("type").and_then(Value::as_str).unwrap_or_default();
        let (field, prefix) = match kind {
            "output_text" => ("text", "response.output_text"),
            "refusal" => ("refusal", "response.refusal"),
            _ => ("", ""),
        };
        let mut empty = part.clone();
        if !field.is_empty() {
            empty[field] = json!("");
            if kind == "output_text" {
                empty["annotations"] = json!([]);
            }
        }
        self.emit("response.content_part.added", with(at, [("part", empty)]));
        if !field.is_empty() {
            let text = part.get(field).cloned().unwrap_or(json!(""));
            let logprobs = || (kind == "output_text").then(|| ("logprobs", json!([])));
            let delta = [("delta", text.clone())].into_iter().chain(logprobs());
            self.emit(&format!("{prefix}.delta"), with(at, delta));
            let done = [(field, text)].into_iter().chain(logprobs());
            self.emit(&format!("{prefix}.done"), with(at, done));
        }
        self.emit(
            "response.content_part.done",
            with(at, [("part", part.clone())]),
        );
    }
}

/// `at` (an object) with `fields` added.
fn with<'a>(at: &Value, fields: impl IntoIterator<Item = (&'a str, Value)>) -> Value {
    let mut value = at.clone();
    for (name, field) in fields {
        value[name] = field;
    }
    value
}

/// Gemini's JSON-array stream (`[{GenerateContentResponse}, …]`) as its plain answer, naming
/// `model`; `usage` stands in when it carried none. `None` when it is not a whole array or does
/// not end with a finish reason (read as [`StreamAssembler`] reads the `alt=sse` stream).
pub fn gemini_array_answer(stream: &[u8], model: &str, usage: Usage) -> Option<Vec<u8>> {
    let pieces: Vec<Box<serde_json::value::RawValue>> = serde_json::from_slice(stream).ok()?;
    let mut assembler = StreamAssembler::new(Protocol::Gemini);
    let mut event = Vec::new();
    for piece in &pieces {
        event.clear();
        write_event(&mut event, None, piece.get());
        assembler.push(&event);
    }
    assembler.finish(model, usage)
}

/// A plain Gemini answer as the JSON-array stream a live one gives: the responses of its
/// `alt=sse` stream as the elements of one array.
pub fn gemini_array_stream(answer: &[u8], model: &str) -> Result<Vec<u8>, TranslateError> {
    let mut sse = Vec::new();
    StreamTranslator::new(Protocol::Gemini, Protocol::Gemini, model, false)
        .whole_answer(answer, &mut sse)?;
    let mut out = Vec::with_capacity(sse.len());
    out.push(b'[');
    for (i, event) in events(&sse).iter().enumerate() {
        if i > 0 {
            out.extend_from_slice(b",\r\n");
        }
        out.extend_from_slice(event.data.as_bytes());
    }
    out.push(b']');
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn parse(bytes: &[u8]) -> Value {
        serde_json::from_slice(bytes).unwrap()
    }

    const COMPLETION: &str = concat!(
        "data: {\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"created\":7,\"model\":\"m\",\"choices\":[{\"index\":0,\"text\":\"Hel\",\"logprobs\":null,\"finish_reason\":null}]}\n\n",
        "data: {\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"created\":7,\"model\":\"m\",\"choices\":[{\"index\":0,\"text\":\"lo\",\"logprobs\":null,\"finish_reason\":null}]}\n\n",
        "data: {\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"created\":7,\"model\":\"m\",\"choices\":[{\"index\":0,\"text\":\"\",\"logprobs\":null,\"finish_reason\":\"stop\"}]}\n\n",
        "data: [DONE]\n\n",
    );

    fn usage(input: u64, output: u64) -> Usage {
        Usage {
            input_tokens: input,
            output_tokens: output,
            cached_tokens: 0,
        }
    }

    #[test]
    fn a_completion_stream_reads_back_to_its_answer_and_replays_to_the_same_stream_content() {
        let answer = completion_answer(COMPLETION.as_bytes(), usage(4, 2)).unwrap();
        let v = parse(&answer);
        assert_eq!(v["id"], "cmpl-1");
        assert_eq!(v["object"], "text_completion");
        assert_eq!(v["choices"][0]["text"], "Hello");
        assert_eq!(v["choices"][0]["finish_reason"], "stop");
        assert_eq!(
            v["usage"]["prompt_tokens"], 4,
            "the accounted usage stands in"
        );
        assert_eq!(v["usage"]["total_tokens"], 6);
        let replayed = completion_stream(&answer, true).unwrap();
        let text = String::from_utf8(replayed.clone()).unwrap();
        assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
        assert!(text.contains("\"choices\":[],"), "the usage chunk: {text}");
        let back = parse(&completion_answer(&replayed, Usage::default()).unwrap());
        assert_eq!(back, v, "the replay reads back to the same answer");
        let quiet = String::from_utf8(completion_stream(&answer, false).unwrap()).unwrap();
        assert!(!quiet.contains("usage"), "{quiet}");
    }

    #[test]
    fn a_cut_or_failed_completion_stream_or_one_with_logprobs_has_no_answer() {
        let cut = COMPLETION.replace("data: [DONE]\n\n", "");
        assert!(completion_answer(cut.as_bytes(), Usage::default()).is_none());
        let logprobs = COMPLETION.replacen("\"logprobs\":null", "\"logprobs\":{\"tokens\":[]}", 1);
        assert!(completion_answer(logprobs.as_bytes(), Usage::default()).is_none());
        let failed = "data: {\"error\":{\"message\":\"x\"}}\n\ndata: [DONE]\n\n";
        assert!(completion_answer(failed.as_bytes(), Usage::default()).is_none());
        assert!(completion_answer(b"data: [DONE]\n\n", Usage::default()).is_none());
        assert!(completion_stream(b"{\"choices\":[]}", false).is_err());
    }

    const RESPONSE: &str = r#"{"id":"resp_1","object":"response","status":"completed","model":"m","output":[{"type":"message","id":"msg_1","status":"completed","role":"assistant","content":[{"type":"output_text","text":"Hi there","annotations":[]}]},{"type":"function_call","id":"fc_1","call_id":"call_1","name":"f","arguments":"{\"a\":1}","status":"completed"}],"usage":{"input_tokens":3,"output_tokens":2,"total_tokens":5}}"#;

    fn names(stream: &[u8]) -> Vec<String> {
        events(stream)
            .into_iter()
            .map(|e| e.event.unwrap_or_default())
            .collect()
    }

    #[test]
    fn a_responses_answer_replays_as_the_events_of_a_live_stream_and_reads_back() {
        let stream = responses_stream(RESPONSE.as_bytes()).unwrap();
        assert_eq!(
            names(&stream),
            [
                "response.created",
                "response.in_progress",
                "response.output_item.added",
                "response.content_part.added",
                "response.output_text.delta",
                "response.output_text.done",
                "response.content_part.done",
                "response.output_item.done",
                "response.output_item.added",
                "response.function_call_arguments.delta",
                "response.function_call_arguments.done",
                "response.output_item.done",
                "response.completed",
            ]
        );
        let all = events(&stream);
        let data: Vec<Value> = all.iter().map(|e| parse(e.data.as_bytes())).collect();
        for (i, d) in data.iter().enumerate() {
            assert_eq!(d["sequence_number"], i as u64);
            assert_eq!(d["type"], all[i].event.as_deref().unwrap());
        }
        assert_eq!(data[0]["response"]["status"], "in_progress");
        assert_eq!(data[0]["response"]["output"], json!([]));
        assert_eq!(data[2]["item"]["content"], json!([]));
        assert_eq!(data[3]["part"]["text"], "");
        assert_eq!(data[4]["delta"], "Hi there");
        assert_eq!(data[4]["item_id"], "msg_1");
        assert_eq!(data[8]["item"]["arguments"], "");
        assert_eq!(data[9]["delta"], "{\"a\":1}");
        assert_eq!(data[10]["name"], "f");
        let back = parse(&responses_answer(&stream).unwrap());
        assert_eq!(back, parse(RESPONSE.as_bytes()));
        let incomplete = RESPONSE.replace("\"completed\",\"model\"", "\"incomplete\",\"model\"");
        let stream = responses_stream(incomplete.as_bytes()).unwrap();
        assert_eq!(names(&stream).last().unwrap(), "response.incomplete");
        assert!(responses_stream(b"{\"id\":\"r\"}").is_err());
    }

    #[test]
    fn a_refusal_part_replays_as_refusal_events() {
        let refusal = r#"{"id":"r","status":"completed","output":[{"type":"message","id":"m","content":[{"type":"refusal","refusal":"no"}]}]}"#;
        let stream = responses_stream(refusal.as_bytes()).unwrap();
        let n = names(&stream);
        assert!(n.contains(&"response.refusal.delta".to_owned()), "{n:?}");
        assert!(n.contains(&"response.refusal.done".to_owned()), "{n:?}");
    }

    #[test]
    fn a_failed_or_unfinished_responses_stream_has_no_answer() {
        let stream = responses_stream(RESPONSE.as_bytes()).unwrap();
        let mut failed = stream.clone();
        failed
            .extend_from_slice(b"event: response.failed\ndata: {\"type\":\"response.failed\"}\n\n");
        assert!(responses_answer(&failed).is_none());
        let text = String::from_utf8(stream).unwrap();
        let cut = &text[..text.find("event: response.completed").unwrap()];
        assert!(responses_answer(cut.as_bytes()).is_none());
    }

    const GEMINI: &str = r#"{"candidates":[{"content":{"role":"model","parts":[{"text":"Hallo"}]},"finishReason":"STOP","index":0}],"usageMetadata":{"promptTokenCount":3,"candidatesTokenCount":1,"totalTokenCount":4}}"#;

    #[test]
    fn a_gemini_answer_replays_as_a_json_array_that_reads_back_to_it() {
        let array = gemini_array_stream(GEMINI.as_bytes(), "g").unwrap();
        let elements: Vec<Value> = serde_json::from_slice(&array).unwrap();
        assert!(!elements.is_empty());
        assert_eq!(
            elements.last().unwrap()["candidates"][0]["finishReason"],
            "STOP"
        );
        let back = parse(&gemini_array_answer(&array, "g", Usage::default()).unwrap());
        assert_eq!(
            back["candidates"][0]["content"]["parts"][0]["text"],
            "Hallo"
        );
        assert_eq!(back["usageMetadata"]["promptTokenCount"], 3);
        let cut = &array[..array.len() - 1];
        assert!(gemini_array_answer(cut, "g", Usage::default()).is_none());
        let unfinished =
            r#"[{"candidates":[{"content":{"role":"model","parts":[{"text":"Ha"}]},"index":0}]}]"#;
        assert!(gemini_array_answer(unfinished.as_bytes(), "g", Usage::default()).is_none());
    }

    #[test]
    fn a_completion_reads_choices_up_to_index_127_and_no_further() {
        let at = |index: u32| {
            format!("data: {{\"id\":\"c\",\"choices\":[{{\"index\":{index},\"text\":\"x\",\"finish_reason\":\"stop\"}}]}}\n\ndata: [DONE]\n\n")
        };
        let answer = parse(&completion_answer(at(127).as_bytes(), Usage::default()).unwrap());
        let choices = answer["choices"].as_array().unwrap();
        assert_eq!(choices.len(), 128);
        assert_eq!(choices[127]["text"], "x");
        assert!(completion_answer(at(128).as_bytes(), Usage::default()).is_none());
    }

    #[test]
    fn text_parts_open_without_annotations_and_their_deltas_carry_logprobs_refusals_neither() {
        let answer = r#"{"id":"r","status":"completed","output":[{"type":"message","id":"m","content":[{"type":"output_text","text":"see","annotations":[{"type":"url_citation","url":"https://example.com"}]},{"type":"refusal","refusal":"no"}]}]}"#;
        let stream = responses_stream(answer.as_bytes()).unwrap();
        let all = events(&stream);
        let find = |name: &str, index: u64| {
            let event = all
                .iter()
                .map(|e| {
                    (
                        e.event.clone().unwrap_or_default(),
                        parse(e.data.as_bytes()),
                    )
                })
                .find(|(n, d)| n == name && d["content_index"] == index);
            event.unwrap().1
        };
        let added = find("response.content_part.added", 0);
        assert_eq!(added["part"]["text"], "");
        assert_eq!(added["part"]["annotations"], json!([]));
        let done = find("response.content_part.done", 0);
        assert_eq!(done["part"]["annotations"][0]["type"], "url_citation");
        assert_eq!(find("response.output_text.delta", 0)["logprobs"], json!([]));
        assert_eq!(find("response.output_text.done", 0)["logprobs"], json!([]));

        let added = find("response.content_part.added", 1);
        assert_eq!(added["part"], json!({"type": "refusal", "refusal": ""}));
        let delta = find("response.refusal.delta", 1);
        assert_eq!(delta["delta"], "no");
        assert!(delta.get("logprobs").is_none(), "{delta}");
        let done = find("response.refusal.done", 1);
        assert_eq!(done["refusal"], "no");
        assert!(done.get("logprobs").is_none(), "{done}");
    }
}
