//! Anthropic `/v1/messages` answers and their SSE event stream.

use serde_json::json;

use super::{estimate_tokens, next_id, split_content, sse_event};
/// An Anthropic `/v1/messages` answer.
pub fn anthropic_message_json(model: &str, text: &str, input_tokens: u64) -> String {
    json!({
        "id": format!("msg_mock_{}", next_id()),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "stop_sequence": null,
        "usage": {"input_tokens": input_tokens, "output_tokens": estimate_tokens(text)}
    })
    .to_string()
}

/// An Anthropic message stream: `message_start`, `content_block_start`, `n`
/// `content_block_delta` events, `content_block_stop`, `message_delta`, `message_stop`.
pub fn anthropic_events(model: &str, text: &str, n: usize, input_tokens: u64) -> Vec<String> {
    let id = format!("msg_mock_{}", next_id());
    let mut events = vec![
        sse_event(
            "message_start",
            &json!({"type": "message_start", "message": {
                "id": id, "type": "message", "role": "assistant", "model": model, "content": [],
                "stop_reason": null, "stop_sequence": null,
                "usage": {"input_tokens": input_tokens, "output_tokens": 1}
            }}),
        ),
        sse_event(
            "content_block_start",
            &json!({"type": "content_block_start", "index": 0,
                    "content_block": {"type": "text", "text": ""}}),
        ),
    ];
    for piece in split_content(text, n) {
        events.push(sse_event(
            "content_block_delta",
            &json!({"type": "content_block_delta", "index": 0,
                    "delta": {"type": "text_delta", "text": piece}}),
        ));
    }
    events.push(sse_event(
        "content_block_stop",
        &json!({"type": "content_block_stop", "index": 0}),
    ));
    events.push(sse_event(
        "message_delta",
        &json!({"type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": null},
                "usage": {"output_tokens": estimate_tokens(text)}}),
    ));
    events.push(sse_event("message_stop", &json!({"type": "message_stop"})));
    events
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::DEFAULT_CONTENT;

    #[test]
    fn anthropic_stream_has_the_event_sequence() {
        let events = anthropic_events("claude", DEFAULT_CONTENT, 2, 3);
        let names: Vec<&str> = events
            .iter()
            .map(|e| e.lines().next().unwrap().trim_start_matches("event: "))
            .collect();
        assert_eq!(
            names,
            [
                "message_start",
                "content_block_start",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop"
            ]
        );
    }
}
