//! Neutral stream events → client SSE events, in an order each client SDK accepts.

use std::collections::HashMap;

use serde_json::{json, Value};

use super::upstream::Ev;
use crate::errors::stream_error_event;
use crate::protocol::Protocol;
use crate::sse::write_event;
use crate::translate::Finish;
use crate::translate::{anthropic_msg_id, args_object, openai_id};
use crate::usage::FullUsage;
use crate::util::anthropic_tool_id;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Open {
    Text(u64),
    Tool { key: u64, index: u64 },
}

#[derive(Debug)]
pub(crate) struct Emitter {
    client: Protocol,
    model: String,
    include_usage: bool,
    id: String,
    started: bool,
    /// The closing sequence (or an error event) was sent: nothing more goes out.
    closed: bool,
    pub usage: FullUsage,
    finish: Option<Finish>,
    saw_tool: bool,
    // Anthropic: open content block, next block index, tool key → block index.
    open: Option<Open>,
    next_block: u64,
    blocks: HashMap<u64, u64>,
    // OpenAI: tool key → tool_calls index.
    tool_index: HashMap<u64, u64>,
    // Gemini: tool calls being accumulated (key, id, name, args), in order.
    pending: Vec<(u64, String, String, String)>,
}

impl Emitter {
    pub fn new(client: Protocol, model: &str, include_usage: bool) -> Emitter {
        Emitter {
            client,
            model: model.to_string(),
            include_usage,
            id: String::new(),
            started: false,
            closed: false,
            usage: FullUsage::default(),
            finish: None,
            saw_tool: false,
            open: None,
            next_block: 0,
            blocks: HashMap::new(),
            tool_index: HashMap::new(),
            pending: Vec::new(),
        }
    }

    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// Handles the events of one upstream SSE event.
    pub fn handle(&mut self, evs: &[Ev], out: &mut Vec<u8>) {
        let mut saw_start = false;
        for ev in evs {
            if let Ev::Usage(u) = ev {
                self.usage = *u;
            }
            if self.closed {
                continue;
            }
            match ev {
                Ev::Start { id } => {
                    if self.id.is_empty() {
                        self.id = id.clone();
                    }
                    saw_start = true;
                }
                Ev::Usage(_) => {}
                Ev::Text(t) => self.text(t, out),
                Ev::ToolStart { key, id, name } => self.tool_start(*key, id, name, out),
                Ev::ToolArgs { key, args } => self.tool_args(*key, args, out),
                Ev::ToolEnd { key } => self.tool_end(*key, out),
                Ev::Finish(f) => self.finish = Some(f.clone()),
                Ev::Done => self.close(out),
                Ev::Error(m) => {
                    out.extend_from_slice(stream_error_event(self.client, m).as_bytes());
                    self.closed = true;
                }
            }
        }
        // The first upstream event opens the client's stream (with the usage it carried).
        if saw_start && !self.closed {
            self.ensure_started(out);
        }
    }

    fn ensure_started(&mut self, out: &mut Vec<u8>) {
        if self.started {
            return;
        }
        self.started = true;
        match self.client {
            Protocol::Anthropic => {
                let mut usage = self.usage.to_anthropic();
                usage["output_tokens"] = json!(self.usage.output.max(1));
                self.anthropic_event(
                    "message_start",
                    json!({
                        "type": "message_start",
                        "message": {
                            "id": anthropic_msg_id(&self.id),
                            "type": "message",
                            "role": "assistant",
                            "model": self.model,
                            "content": [],
                            "stop_reason": null,
                            "stop_sequence": null,
                            "usage": usage,
                        },
                    }),
                    out,
                );
            }
            Protocol::OpenAi => {
                self.openai_chunk(json!({"role": "assistant", "content": ""}), None, out)
            }
            Protocol::Gemini => {}
        }
    }

    fn anthropic_event(&self, name: &str, v: Value, out: &mut Vec<u8>) {
        write_event(out, Some(name), &v.to_string());
    }

    fn openai_chunk(&self, delta: Value, finish: Option<&str>, out: &mut Vec<u8>) {
        let v = json!({
            "id": openai_id(&self.id),
            "object": "chat.completion.chunk",
            "created": 0,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": null}],
        });
        write_event(out, None, &v.to_string());
    }

    fn gemini_event(
        &self,
        parts: Vec<Value>,
        finish: Option<&str>,
        usage: bool,
        out: &mut Vec<u8>,
    ) {
        let mut cand = json!({"content": {"role": "model", "parts": parts}, "index": 0});
        if let Some(f) = finish {
            cand["finishReason"] = json!(f);
        }
        let mut v =
            json!({"candidates": [cand], "modelVersion": self.model, "responseId": self.id});
        if usage {
            v["usageMetadata"] = self.usage.to_gemini();
        }
        write_event(out, None, &v.to_string());
    }

    fn close_block(&mut self, out: &mut Vec<u8>) {
        if let Some(open) = self.open.take() {
            let index = match open {
                Open::Text(i) | Open::Tool { index: i, .. } => i,
            };
            self.anthropic_event(
                "content_block_stop",
                json!({"type": "content_block_stop", "index": index}),
                out,
            );
        }
    }

    fn flush_pending(&mut self, only: Option<u64>) -> Vec<Value> {
        let mut parts = Vec::new();
        self.pending.retain(|(key, id, name, args)| {
            if only.is_some_and(|k| k != *key) {
                return true;
            }
            parts
                .push(json!({"functionCall": {"id": id, "name": name, "args": args_object(args)}}));
            false
        });
        parts
    }

    fn text(&mut self, t: &str, out: &mut Vec<u8>) {
        self.ensure_started(out);
        match self.client {
            Protocol::Anthropic => {
                if !matches!(self.open, Some(Open::Text(_))) {
                    self.close_block(out);
                    let index = self.next_block;
                    self.next_block += 1;
                    self.anthropic_event("content_block_start", json!({
                        "type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""},
                    }), out);
                    self.open = Some(Open::Text(index));
                }
                let index = match self.open {
                    Some(Open::Text(i)) => i,
                    _ => 0,
                };
                self.anthropic_event("content_block_delta", json!({
                    "type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": t},
                }), out);
            }
            Protocol::OpenAi => self.openai_chunk(json!({"content": t}), None, out),
            Protocol::Gemini => {
                let mut parts = self.flush_pending(None);
                parts.push(json!({"text": t}));
                self.gemini_event(parts, None, false, out);
            }
        }
    }

    fn tool_start(&mut self, key: u64, id: &str, name: &str, out: &mut Vec<u8>) {
        self.ensure_started(out);
        self.saw_tool = true;
        match self.client {
            Protocol::Anthropic => {
                self.close_block(out);
                let index = self.next_block;
                self.next_block += 1;
                self.blocks.insert(key, index);
                self.anthropic_event("content_block_start", json!({
                    "type": "content_block_start", "index": index,
                    "content_block": {"type": "tool_use", "id": anthropic_tool_id(id), "name": name, "input": {}},
                }), out);
                self.open = Some(Open::Tool { key, index });
            }
            Protocol::OpenAi => {
                let index = self.tool_index.len() as u64;
                self.tool_index.insert(key, index);
                self.openai_chunk(json!({"tool_calls": [{
                    "index": index, "id": id, "type": "function", "function": {"name": name, "arguments": ""},
                }]}), None, out);
            }
            Protocol::Gemini => {
                // Upstreams stream one call after the other: a new call completes the previous.
                let parts = self.flush_pending(None);
                if !parts.is_empty() {
                    self.gemini_event(parts, None, false, out);
                }
                self.pending
                    .push((key, id.to_string(), name.to_string(), String::new()));
            }
        }
    }

    fn tool_args(&mut self, key: u64, args: &str, out: &mut Vec<u8>) {
        match self.client {
            Protocol::Anthropic => {
                if let Some(index) = self.blocks.get(&key) {
                    self.anthropic_event(
                        "content_block_delta",
                        json!({
                            "type": "content_block_delta", "index": index,
                            "delta": {"type": "input_json_delta", "partial_json": args},
                        }),
                        out,
                    );
                }
            }
            Protocol::OpenAi => {
                if let Some(index) = self.tool_index.get(&key) {
                    self.openai_chunk(
                        json!({"tool_calls": [{"index": index, "function": {"arguments": args}}]}),
                        None,
                        out,
                    );
                }
            }
            Protocol::Gemini => {
                if let Some(p) = self.pending.iter_mut().find(|p| p.0 == key) {
                    p.3.push_str(args);
                }
            }
        }
    }

    fn tool_end(&mut self, key: u64, out: &mut Vec<u8>) {
        match self.client {
            Protocol::Anthropic => {
                if matches!(self.open, Some(Open::Tool { key: k, .. }) if k == key) {
                    self.close_block(out);
                }
            }
            Protocol::OpenAi => {}
            Protocol::Gemini => {
                let parts = self.flush_pending(Some(key));
                if !parts.is_empty() {
                    self.gemini_event(parts, None, false, out);
                }
            }
        }
    }

    fn final_finish(&self) -> Finish {
        match &self.finish {
            Some(Finish::Stop) | None if self.saw_tool => Finish::ToolCalls,
            Some(f) => f.clone(),
            None => Finish::Stop,
        }
    }

    /// Sends what the client's protocol needs to end the stream properly. Idempotent.
    pub fn close(&mut self, out: &mut Vec<u8>) {
        if self.closed {
            return;
        }
        self.ensure_started(out);
        let finish = self.final_finish();
        match self.client {
            Protocol::Anthropic => {
                self.close_block(out);
                let (reason, seq) = finish.to_anthropic();
                self.anthropic_event(
                    "message_delta",
                    json!({
                        "type": "message_delta",
                        "delta": {"stop_reason": reason, "stop_sequence": seq},
                        "usage": self.usage.to_anthropic(),
                    }),
                    out,
                );
                self.anthropic_event("message_stop", json!({"type": "message_stop"}), out);
            }
            Protocol::OpenAi => {
                self.openai_chunk(json!({}), Some(finish.to_openai()), out);
                if self.include_usage {
                    let v = json!({
                        "id": openai_id(&self.id),
                        "object": "chat.completion.chunk",
                        "created": 0,
                        "model": self.model,
                        "choices": [],
                        "usage": self.usage.to_openai(),
                    });
                    write_event(out, None, &v.to_string());
                }
                out.extend_from_slice(b"data: [DONE]\n\n");
            }
            Protocol::Gemini => {
                let mut parts = self.flush_pending(None);
                if parts.is_empty() {
                    parts.push(json!({"text": ""}));
                }
                self.gemini_event(parts, Some(finish.to_gemini()), true, out);
            }
        }
        self.closed = true;
    }
}
