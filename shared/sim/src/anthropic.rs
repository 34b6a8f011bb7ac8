//! Anthropic `/v1/messages` answers and their SSE event stream, and
//! `/v1/messages/count_tokens`.

use serde_json::{json, Value};

use crate::answer::Answer;
use crate::wire::{next_id, split_content, split_even, sse_event};

/// The usage block of an [`Answer`]: `input_tokens` counts the uncached prompt tokens, as
/// Anthropic does, and `cache_read_input_tokens` the cached ones.
fn answer_usage(answer: &Answer, output_tokens: u64) -> Value {
    json!({
        "input_tokens": answer.input_tokens() - answer.cached_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": answer.cached_tokens,
        "output_tokens": output_tokens
    })
}

/// An Anthropic message saying `answer`: a `text` block (when there is text), then one
/// `tool_use` block per call (`{type: "tool_use", id: "toolu_…", name, input}`), `stop_reason`
/// `"tool_use"` or `"end_turn"`, usage with `cache_read_input_tokens`. An empty answer has
/// `content: []`.
pub fn anthropic_answer_json(answer: &Answer) -> String {
    let mut content = Vec::new();
    if !answer.text.is_empty() {
        content.push(json!({"type": "text", "text": answer.text}));
    }
    for call in &answer.tool_calls {
        content.push(json!({
            "type": "tool_use",
            "id": format!("toolu_mock_{}", next_id()),
            "name": call.name,
            "input": call.arguments_object()
        }));
    }
    json!({
        "id": format!("msg_mock_{}", next_id()),
        "type": "message",
        "role": "assistant",
        "model": answer.model,
        "content": content,
        "stop_reason": answer.stop_word("end_turn", "tool_use"),
        "stop_sequence": null,
        "usage": answer_usage(answer, answer.output_tokens())
    })
    .to_string()
}

/// An Anthropic message stream saying `answer`, in Anthropic's event order:
/// `message_start` (usage with the cache fields), then per content block `content_block_start`,
/// its deltas and `content_block_stop` (a `ping` follows the first `content_block_start`, or
/// `message_start` when there is no block), then `message_delta` (`stop_reason`,
/// `usage.output_tokens`) and `message_stop`.
///
/// The text block has `n` `text_delta`s; each `tool_use` block starts with `input: {}` and has
/// its arguments in up to `n` `input_json_delta` `partial_json` pieces.
pub fn anthropic_answer_events(answer: &Answer, n: usize) -> Vec<String> {
    let ping = || sse_event("ping", &json!({"type": "ping"}));
    let mut events = vec![sse_event(
        "message_start",
        &json!({"type": "message_start", "message": {
            "id": format!("msg_mock_{}", next_id()), "type": "message", "role": "assistant",
            "model": answer.model, "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": answer_usage(answer, 1)
        }}),
    )];
    let mut blocks: Vec<(Value, Vec<Value>)> = Vec::new();
    if !answer.text.is_empty() {
        let deltas = split_content(&answer.text, n)
            .into_iter()
            .map(|piece| json!({"type": "text_delta", "text": piece}))
            .collect();
        blocks.push((json!({"type": "text", "text": ""}), deltas));
    }
    for call in &answer.tool_calls {
        let start = json!({
            "type": "tool_use", "id": format!("toolu_mock_{}", next_id()),
            "name": call.name, "input": {}
        });
        let deltas = split_even(&call.arguments, n)
            .into_iter()
            .map(|piece| json!({"type": "input_json_delta", "partial_json": piece}))
            .collect();
        blocks.push((start, deltas));
    }
    if blocks.is_empty() {
        events.push(ping());
    }
    for (index, (start, deltas)) in blocks.into_iter().enumerate() {
        events.push(sse_event(
            "content_block_start",
            &json!({"type": "content_block_start", "index": index, "content_block": start}),
        ));
        if index == 0 {
            events.push(ping());
        }
        for delta in deltas {
            events.push(sse_event(
                "content_block_delta",
                &json!({"type": "content_block_delta", "index": index, "delta": delta}),
            ));
        }
        events.push(sse_event(
            "content_block_stop",
            &json!({"type": "content_block_stop", "index": index}),
        ));
    }
    events.push(sse_event(
        "message_delta",
        &json!({"type": "message_delta",
                "delta": {"stop_reason": answer.stop_word("end_turn", "tool_use"),
                          "stop_sequence": null},
                "usage": {"output_tokens": answer.output_tokens()}}),
    ));
    events.push(sse_event("message_stop", &json!({"type": "message_stop"})));
    events
}

/// `/v1/messages/count_tokens`: `{"input_tokens": N}`.
pub fn anthropic_count_tokens_json(input_tokens: u64) -> String {
    json!({"input_tokens": input_tokens}).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DEFAULT_CONTENT;

    fn names(events: &[String]) -> Vec<&str> {
        events
            .iter()
            .map(|e| e.lines().next().unwrap().trim_start_matches("event: "))
            .collect()
    }

    fn data(event: &str) -> Value {
        serde_json::from_str(event.lines().nth(1).unwrap().trim_start_matches("data: ")).unwrap()
    }

    #[test]
    fn answer_events_have_the_real_order_with_ping_and_tool_use() {
        let answer = Answer::new("claude", "Checking")
            .tool_call("get_weather", r#"{"city":"Paris"}"#)
            .cached_tokens(5);
        let events = anthropic_answer_events(&answer, 3);
        // One word: the text block has one non-empty delta and two empty ones.
        assert_eq!(
            names(&events),
            [
                "message_start",
                "content_block_start",
                "ping",
                "content_block_delta",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "content_block_start",
                "content_block_delta",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop"
            ]
        );
        let start = data(&events[0]);
        assert_eq!(start["message"]["usage"]["cache_read_input_tokens"], 5);
        assert_eq!(start["message"]["usage"]["cache_creation_input_tokens"], 0);
        let tool = data(&events[7]);
        assert_eq!(tool["index"], 1);
        assert_eq!(tool["content_block"]["type"], "tool_use");
        assert!(tool["content_block"]["id"]
            .as_str()
            .unwrap()
            .starts_with("toolu_"));
        assert_eq!(tool["content_block"]["input"], json!({}));
        let json: String = events[8..11]
            .iter()
            .map(|e| {
                let d = data(e);
                assert_eq!(d["delta"]["type"], "input_json_delta");
                d["delta"]["partial_json"].as_str().unwrap().to_owned()
            })
            .collect();
        assert_eq!(json, r#"{"city":"Paris"}"#);
        assert_eq!(data(&events[12])["delta"]["stop_reason"], "tool_use");

        let empty = anthropic_answer_events(&Answer::new("c", ""), 3);
        assert_eq!(
            names(&empty),
            ["message_start", "ping", "message_delta", "message_stop"]
        );
    }

    #[test]
    fn answer_json_has_tool_use_blocks() {
        let answer = Answer::new("claude", "").tool_call("f", r#"{"x":1}"#);
        let v: Value = serde_json::from_str(&anthropic_answer_json(&answer)).unwrap();
        assert_eq!(v["stop_reason"], "tool_use");
        assert_eq!(v["content"][0]["type"], "tool_use");
        assert_eq!(v["content"][0]["input"], json!({"x": 1}));
        assert_eq!(v["usage"]["cache_read_input_tokens"], 0);
        let empty: Value =
            serde_json::from_str(&anthropic_answer_json(&Answer::new("c", ""))).unwrap();
        assert_eq!(empty["content"], json!([]));
        assert_eq!(empty["stop_reason"], "end_turn");
    }

    #[test]
    fn a_text_message_and_its_stream_report_the_usage() {
        // "one two three" is 13 characters: 4 tokens at 4 characters a token.
        let answer = Answer::new("claude", "one two three").prompt_tokens(6);
        let v: Value = serde_json::from_str(&anthropic_answer_json(&answer)).unwrap();
        assert!(v["id"].as_str().unwrap().starts_with("msg_mock_"));
        assert_eq!(v["type"], "message");
        assert_eq!(v["role"], "assistant");
        assert_eq!(v["model"], "claude");
        assert_eq!(
            v["content"],
            json!([{"type": "text", "text": "one two three"}])
        );
        assert_eq!(v["stop_reason"], "end_turn");
        assert_eq!(
            v["usage"],
            json!({"input_tokens": 6, "cache_creation_input_tokens": 0,
                   "cache_read_input_tokens": 0, "output_tokens": 4})
        );

        // message_start, content_block_start, ping, 2 deltas, content_block_stop, message_delta.
        let events = anthropic_answer_events(&answer, 2);
        assert_eq!(data(&events[0])["message"]["usage"]["input_tokens"], 6);
        assert_eq!(data(&events[0])["message"]["model"], "claude");
        let text: String = events[3..5]
            .iter()
            .map(|e| data(e)["delta"]["text"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(text, "one two three");
        let delta = data(&events[6]);
        assert_eq!(delta["delta"]["stop_reason"], "end_turn");
        assert_eq!(delta["usage"]["output_tokens"], 4);
    }

    #[test]
    fn answer_usage_counts_the_uncached_prompt_as_input() {
        let answer = Answer::new("claude", "one two three")
            .tool_call("f", r#"{"x":1}"#)
            .prompt_tokens(12)
            .cached_tokens(5);
        let v: Value = serde_json::from_str(&anthropic_answer_json(&answer)).unwrap();
        assert_eq!(
            v["content"][0],
            json!({"type": "text", "text": "one two three"})
        );
        assert_eq!(v["content"][1]["name"], "f");
        assert!(v["content"][1]["id"]
            .as_str()
            .unwrap()
            .starts_with("toolu_mock_"));
        assert_eq!(
            v["usage"],
            json!({"input_tokens": 7, "cache_creation_input_tokens": 0,
                   "cache_read_input_tokens": 5, "output_tokens": answer.output_tokens()})
        );
        let events = anthropic_answer_events(&answer, 1);
        let start = data(&events[0]);
        assert_eq!(start["message"]["usage"]["input_tokens"], 7);
        assert_eq!(start["message"]["usage"]["output_tokens"], 1);
        let delta = data(&events[events.len() - 2]);
        assert_eq!(delta["usage"]["output_tokens"], answer.output_tokens());
    }

    #[test]
    fn count_tokens_has_its_shape() {
        let v: Value = serde_json::from_str(&anthropic_count_tokens_json(42)).unwrap();
        assert_eq!(v, json!({"input_tokens": 42}));
    }

    #[test]
    fn anthropic_stream_has_the_event_sequence() {
        let events = anthropic_answer_events(&Answer::new("claude", DEFAULT_CONTENT), 2);
        let names: Vec<&str> = events
            .iter()
            .map(|e| e.lines().next().unwrap().trim_start_matches("event: "))
            .collect();
        assert_eq!(
            names,
            [
                "message_start",
                "content_block_start",
                "ping",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop"
            ]
        );
    }
}
