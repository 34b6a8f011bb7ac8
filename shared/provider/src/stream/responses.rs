//! Neutral stream events → the OpenAI Responses API event stream, for `POST /v1/responses`
//! clients of an Anthropic or Gemini member.
//!
//! Order: `response.created`, `response.in_progress`; per output item
//! `response.output_item.added`, then for a message `response.content_part.added`,
//! `response.output_text.delta`*, `response.output_text.done`, `response.content_part.done`,
//! for a function call `response.function_call_arguments.delta`*,
//! `response.function_call_arguments.done`; then `response.output_item.done` (an item is done
//! before the next is added); last `response.completed` (`response.incomplete` when the upstream
//! stopped at the token limit or a filter) with the whole response. Every event carries its
//! `sequence_number`.

use serde_json::{json, Value};

use super::upstream::Ev;
use crate::errors::stream_error_event;
use crate::protocol::Protocol;
use crate::sse::write_event;
use crate::translate::Finish;
use crate::translate::{
    responses_call_item, responses_message_item, responses_output_text, responses_response_id,
    responses_response_object, responses_usage,
};
use crate::usage::FullUsage;

#[derive(Debug)]
enum Item {
    Message {
        id: String,
        text: String,
    },
    Call {
        key: u64,
        call_id: String,
        name: String,
        args: String,
    },
}

#[derive(Debug)]
pub(crate) struct ResponsesEmitter {
    model: String,
    id: String,
    seq: u64,
    started: bool,
    closed: bool,
    usage: FullUsage,
    finish: Option<Finish>,
    items: Vec<Item>,
    /// Index in `items` of the item still open (its `output_item.done` not sent).
    open: Option<usize>,
}

impl ResponsesEmitter {
    pub fn new(model: &str) -> ResponsesEmitter {
        ResponsesEmitter {
            model: model.to_string(),
            id: String::new(),
            seq: 0,
            started: false,
            closed: false,
            usage: FullUsage::default(),
            finish: None,
            items: Vec::new(),
            open: None,
        }
    }

    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// Handles the events of one upstream SSE event.
    pub fn handle(&mut self, evs: &[Ev], out: &mut Vec<u8>) {
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
                        self.id = responses_response_id(id);
                    }
                    self.ensure_started(out);
                }
                Ev::Usage(_) => {}
                Ev::Text(t) => self.text(t, out),
                Ev::ToolStart { key, id, name } => self.tool_start(*key, id, name, out),
                Ev::ToolArgs { key, args } => self.tool_args(*key, args, out),
                Ev::ToolEnd { key } => {
                    let open_is_key = self.open.is_some_and(
                        |i| matches!(&self.items[i], Item::Call { key: k, .. } if k == key),
                    );
                    if open_is_key {
                        self.close_item(out);
                    }
                }
                Ev::Finish(f) => self.finish = Some(f.clone()),
                Ev::Done => self.close(out),
                Ev::Error(m) => {
                    out.extend_from_slice(stream_error_event(Protocol::OpenAi, m).as_bytes());
                    self.closed = true;
                }
            }
        }
    }

    fn event(&mut self, name: &str, mut data: Value, out: &mut Vec<u8>) {
        data["type"] = json!(name);
        data["sequence_number"] = json!(self.seq);
        self.seq += 1;
        write_event(out, Some(name), &data.to_string());
    }

    fn ensure_started(&mut self, out: &mut Vec<u8>) {
        if self.started {
            return;
        }
        self.started = true;
        if self.id.is_empty() {
            self.id = responses_response_id("");
        }
        let response =
            responses_response_object(&self.id, &self.model, Vec::new(), None, None, true);
        self.event("response.created", json!({"response": response}), out);
        let response =
            responses_response_object(&self.id, &self.model, Vec::new(), None, None, true);
        self.event("response.in_progress", json!({"response": response}), out);
    }

    fn item_value(&self, i: usize, status: &str) -> Value {
        match &self.items[i] {
            Item::Message { id, text } => responses_message_item(id, text, status),
            Item::Call {
                call_id,
                name,
                args,
                ..
            } => responses_call_item(call_id, name, args, status),
        }
    }

    fn text(&mut self, t: &str, out: &mut Vec<u8>) {
        self.ensure_started(out);
        let open_message = self
            .open
            .filter(|i| matches!(self.items[*i], Item::Message { .. }));
        let index = match open_message {
            Some(i) => i,
            None => {
                let id = format!(
                    "msg_{}_{}",
                    self.id.trim_start_matches("resp_"),
                    self.items.len()
                );
                let index = self.open_item(
                    Item::Message {
                        id: id.clone(),
                        text: String::new(),
                    },
                    out,
                );
                self.event(
                    "response.content_part.added",
                    json!({"item_id": id, "output_index": index, "content_index": 0,
                        "part": responses_output_text("")}),
                    out,
                );
                index
            }
        };
        let Item::Message { id, text } = &mut self.items[index] else {
            return;
        };
        text.push_str(t);
        let id = id.clone();
        self.event(
            "response.output_text.delta",
            json!({"item_id": id, "output_index": index, "content_index": 0, "delta": t, "logprobs": []}),
            out,
        );
    }

    fn tool_start(&mut self, key: u64, id: &str, name: &str, out: &mut Vec<u8>) {
        self.ensure_started(out);
        self.open_item(
            Item::Call {
                key,
                call_id: id.to_string(),
                name: name.to_string(),
                args: String::new(),
            },
            out,
        );
    }

    /// Closes the open item, opens `item` as the next output item and announces it; returns
    /// its output index.
    fn open_item(&mut self, item: Item, out: &mut Vec<u8>) -> usize {
        self.close_item(out);
        let index = self.items.len();
        self.items.push(item);
        self.open = Some(index);
        let item = self.item_value(index, "in_progress");
        self.event(
            "response.output_item.added",
            json!({"output_index": index, "item": item}),
            out,
        );
        index
    }

    fn tool_args(&mut self, key: u64, piece: &str, out: &mut Vec<u8>) {
        let found = self
            .items
            .iter_mut()
            .enumerate()
            .find(|(_, item)| matches!(item, Item::Call { key: k, .. } if *k == key));
        let Some((index, Item::Call { call_id, args, .. })) = found else {
            return;
        };
        args.push_str(piece);
        let item_id = format!("fc_{call_id}");
        self.event(
            "response.function_call_arguments.delta",
            json!({"item_id": item_id, "output_index": index, "delta": piece}),
            out,
        );
    }

    /// Sends the open item's closing events.
    fn close_item(&mut self, out: &mut Vec<u8>) {
        let Some(index) = self.open.take() else {
            return;
        };
        match &self.items[index] {
            Item::Message { id, text } => {
                let (id, text) = (id.clone(), text.clone());
                self.event(
                    "response.output_text.done",
                    json!({"item_id": id, "output_index": index, "content_index": 0, "text": text, "logprobs": []}),
                    out,
                );
                self.event(
                    "response.content_part.done",
                    json!({"item_id": id, "output_index": index, "content_index": 0,
                        "part": responses_output_text(&text)}),
                    out,
                );
            }
            Item::Call {
                call_id,
                name,
                args,
                ..
            } => {
                let data = json!({"item_id": format!("fc_{call_id}"), "output_index": index,
                    "name": name, "arguments": args});
                self.event("response.function_call_arguments.done", data, out);
            }
        }
        let item = self.item_value(index, "completed");
        self.event(
            "response.output_item.done",
            json!({"output_index": index, "item": item}),
            out,
        );
    }

    /// Closes the stream: the open item, then `response.completed` (or `response.incomplete`)
    /// with every item and the usage. Idempotent.
    pub fn close(&mut self, out: &mut Vec<u8>) {
        if self.closed {
            return;
        }
        self.ensure_started(out);
        self.close_item(out);
        let output: Vec<Value> = (0..self.items.len())
            .map(|i| self.item_value(i, "completed"))
            .collect();
        let response = responses_response_object(
            &self.id,
            &self.model,
            output,
            self.finish.as_ref(),
            Some(responses_usage(&self.usage, 0)),
            false,
        );
        let name = if response["status"] == "incomplete" {
            "response.incomplete"
        } else {
            "response.completed"
        };
        self.event(name, json!({"response": response}), out);
        self.closed = true;
    }
}
