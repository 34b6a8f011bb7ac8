//! The Realtime API's server events (OpenAI's WebSocket protocol, the names the current SDKs
//! read): what a session says when it opens, acknowledges a session update or a conversation
//! item, and answers a `response.create` — `response.created`, the text in
//! `response.output_text.delta` events, `response.output_text.done`, and `response.done`
//! carrying the response's token usage. Each event is one JSON text frame.

use serde_json::{json, Value};

use crate::answer::Answer;
use crate::wire::{next_id, split_content};

fn event_id() -> String {
    format!("event_{}", next_id())
}

/// The session's description in `session.created` / `session.updated`.
fn session(model: &str, id: &str) -> Value {
    json!({
        "type": "realtime",
        "object": "realtime.session",
        "id": id,
        "model": model,
        "output_modalities": ["text"],
        "instructions": "",
    })
}

/// `session.created`: the first event of every session.
pub fn realtime_session_created(model: &str, session_id: &str) -> String {
    json!({"type": "session.created", "event_id": event_id(), "session": session(model, session_id)})
        .to_string()
}

/// `session.updated`: the answer to a `session.update`.
pub fn realtime_session_updated(model: &str, session_id: &str) -> String {
    json!({"type": "session.updated", "event_id": event_id(), "session": session(model, session_id)})
        .to_string()
}

/// `conversation.item.added` and `conversation.item.done`: the answer to a
/// `conversation.item.create` (`item` as the client sent it, given an id when it had none).
pub fn realtime_item_created(mut item: Value) -> Vec<String> {
    if item.get("id").and_then(Value::as_str).is_none() {
        if let Some(object) = item.as_object_mut() {
            object.insert("id".to_owned(), json!(format!("item_{}", next_id())));
        }
    }
    ["conversation.item.added", "conversation.item.done"]
        .into_iter()
        .map(|kind| {
            json!({"type": kind, "event_id": event_id(), "previous_item_id": null, "item": item})
                .to_string()
        })
        .collect()
}

/// The events answering a `response.create`: `response.created`, `chunks` deltas of the answer's
/// text, `response.output_text.done`, then `response.done` with its usage (input tokens, the
/// cached ones among them, and the output's tokens).
pub fn realtime_response_events(answer: &Answer, chunks: usize) -> Vec<String> {
    let response_id = format!("resp_{}", next_id());
    let item_id = format!("item_{}", next_id());
    let mut events = vec![json!({
        "type": "response.created",
        "event_id": event_id(),
        "response": {"id": response_id, "object": "realtime.response", "status": "in_progress", "output": []},
    })
    .to_string()];
    for delta in split_content(&answer.text, chunks.max(1)) {
        events.push(
            json!({
                "type": "response.output_text.delta", "event_id": event_id(),
                "response_id": response_id, "item_id": item_id,
                "output_index": 0, "content_index": 0, "delta": delta,
            })
            .to_string(),
        );
    }
    events.push(
        json!({
            "type": "response.output_text.done", "event_id": event_id(),
            "response_id": response_id, "item_id": item_id,
            "output_index": 0, "content_index": 0, "text": answer.text,
        })
        .to_string(),
    );
    let (input, output) = (answer.input_tokens(), answer.output_tokens());
    events.push(
        json!({
            "type": "response.done",
            "event_id": event_id(),
            "response": {
                "id": response_id,
                "object": "realtime.response",
                "status": "completed",
                "output": [{
                    "id": item_id, "type": "message", "role": "assistant", "status": "completed",
                    "content": [{"type": "output_text", "text": answer.text}],
                }],
                "usage": {
                    "total_tokens": input + output,
                    "input_tokens": input,
                    "output_tokens": output,
                    "input_token_details": {"cached_tokens": answer.cached_tokens, "text_tokens": input, "audio_tokens": 0},
                    "output_token_details": {"text_tokens": output, "audio_tokens": 0},
                },
            },
        })
        .to_string(),
    );
    events
}

/// An `error` event (a client event the session cannot take).
pub fn realtime_error(code: &str, message: &str) -> String {
    json!({
        "type": "error",
        "event_id": event_id(),
        "error": {"type": "invalid_request_error", "code": code, "message": message, "param": null, "event_id": null},
    })
    .to_string()
}

/// One simulated session: what it answers each client event with, from the conversation so far.
#[derive(Debug, Clone)]
pub struct RealtimeSim {
    model: String,
    session_id: String,
    /// The text of the conversation's items so far (the prompt a response counts).
    prompt: String,
    /// What each response says.
    pub text: String,
    /// Prompt tokens each response reports as cached.
    pub cached_tokens: u64,
    /// Deltas per response.
    pub chunks: usize,
}

impl RealtimeSim {
    /// A session of `model` answering with the default text in 3 deltas.
    pub fn new(model: &str) -> RealtimeSim {
        RealtimeSim {
            model: model.to_owned(),
            session_id: format!("sess_{}", next_id()),
            prompt: String::new(),
            text: crate::answer::DEFAULT_CONTENT.to_owned(),
            cached_tokens: 0,
            chunks: 3,
        }
    }

    /// The session's first event.
    pub fn opened(&self) -> String {
        realtime_session_created(&self.model, &self.session_id)
    }

    /// The events answering one client event (a JSON text frame), and the answer a
    /// `response.create` was given (for accounting).
    pub fn answer(&mut self, event: &str) -> (Vec<String>, Option<Answer>) {
        let event: Value = serde_json::from_str(event).unwrap_or(Value::Null);
        match event["type"].as_str().unwrap_or("") {
            "session.update" => (
                vec![realtime_session_updated(&self.model, &self.session_id)],
                None,
            ),
            "conversation.item.create" => {
                for part in event["item"]["content"].as_array().into_iter().flatten() {
                    if let Some(text) = part["text"].as_str() {
                        self.prompt.push_str(text);
                    }
                }
                (realtime_item_created(event["item"].clone()), None)
            }
            "response.create" => {
                let answer = Answer::new(self.model.as_str(), self.text.as_str())
                    .prompt_tokens(crate::answer::estimate_tokens(&self.prompt).max(1))
                    .cached_tokens(self.cached_tokens);
                (realtime_response_events(&answer, self.chunks), Some(answer))
            }
            _ => (
                vec![realtime_error(
                    "unknown_event",
                    "the simulated session does not serve this client event",
                )],
                None,
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;
    use crate::answer::estimate_tokens;

    #[test]
    fn a_response_streams_its_text_and_ends_with_its_usage() {
        let mut answer = Answer::new("gpt-realtime", "Hello from mock");
        answer.prompt_tokens = 12;
        answer.cached_tokens = 4;
        let events: Vec<Value> = realtime_response_events(&answer, 3)
            .iter()
            .map(|e| serde_json::from_str(e).unwrap())
            .collect();
        assert_eq!(events[0]["type"], "response.created");
        let text: String = events
            .iter()
            .filter(|e| e["type"] == "response.output_text.delta")
            .map(|e| e["delta"].as_str().unwrap())
            .collect();
        assert_eq!(text, "Hello from mock");
        let done = events.last().unwrap();
        assert_eq!(done["type"], "response.done");
        let usage = &done["response"]["usage"];
        assert_eq!(usage["input_tokens"], 12);
        assert_eq!(usage["input_token_details"]["cached_tokens"], 4);
        assert_eq!(usage["output_tokens"], estimate_tokens("Hello from mock"));
    }

    #[test]
    fn a_session_answers_each_client_event() {
        let mut sim = RealtimeSim::new("m");
        let opened: Value = serde_json::from_str(&sim.opened()).unwrap();
        assert_eq!(opened["type"], "session.created");
        let (events, _) = sim.answer(r#"{"type":"session.update","session":{}}"#);
        assert!(events[0].contains("session.updated"));
        let item = r#"{"type":"conversation.item.create","item":{"type":"message","role":"user","content":[{"type":"input_text","text":"twelve chars"}]}}"#;
        assert_eq!(sim.answer(item).0.len(), 2);
        let (events, answer) = sim.answer(r#"{"type":"response.create"}"#);
        assert_eq!(answer.unwrap().input_tokens(), 3);
        assert!(events.last().unwrap().contains("response.done"));
        let (events, answer) = sim.answer("not json");
        assert!(answer.is_none() && events[0].contains("\"error\""));
    }

    #[test]
    fn an_item_without_an_id_gets_one() {
        let events = realtime_item_created(json!({"type": "message", "role": "user"}));
        let added: Value = serde_json::from_str(&events[0]).unwrap();
        assert_eq!(added["type"], "conversation.item.added");
        assert!(added["item"]["id"].as_str().unwrap().starts_with("item_"));
    }
}
