//! Upstream SSE events → neutral stream events.

use std::collections::HashSet;

use serde_json::Value;

use crate::protocol::Protocol;
use crate::sse::SseEvent;
use crate::translate::Finish;
use crate::translate::{gemini_answer_parts, gemini_call_id};
use crate::usage::{AnthropicUsage, FullUsage};
use crate::util::{get_array, get_str, get_u64, parse_json_lenient, value_text};

/// A neutral stream event. Tool calls are keyed by the upstream's own index.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Ev {
    Start {
        id: String,
    },
    Text(String),
    ToolStart {
        key: u64,
        id: String,
        name: String,
    },
    ToolArgs {
        key: u64,
        args: String,
    },
    ToolEnd {
        key: u64,
    },
    Finish(Finish),
    /// The usage so far (replaces what was known).
    Usage(FullUsage),
    /// The upstream signalled its clean end.
    Done,
    Error(String),
}

#[derive(Debug)]
pub(crate) struct Upstream {
    protocol: Protocol,
    started: bool,
    anthropic_usage: AnthropicUsage,
    /// Anthropic block indexes / OpenAI tool indexes that are tool calls.
    tools: HashSet<u64>,
    gemini_calls: u64,
    gemini_id: String,
}

fn error_message(v: &Value) -> String {
    let e = v.get("error").unwrap_or(v);
    get_str(e, "message")
        .map(str::to_string)
        .unwrap_or_else(|| value_text(e))
}

impl Upstream {
    pub fn new(protocol: Protocol) -> Upstream {
        Upstream {
            protocol,
            started: false,
            anthropic_usage: AnthropicUsage::default(),
            tools: HashSet::new(),
            gemini_calls: 0,
            gemini_id: String::new(),
        }
    }

    pub fn protocol(&self) -> Protocol {
        self.protocol
    }

    /// Translates one upstream SSE event. Events that are not JSON (or not understood) give
    /// nothing.
    pub fn event(&mut self, ev: &SseEvent, out: &mut Vec<Ev>) {
        match self.protocol {
            Protocol::OpenAi => self.openai(ev, out),
            Protocol::Anthropic => self.anthropic(ev, out),
            Protocol::Gemini => self.gemini(ev, out),
        }
    }

    fn start(&mut self, id: &str, out: &mut Vec<Ev>) {
        if !self.started {
            self.started = true;
            out.push(Ev::Start { id: id.to_string() });
        }
    }

    fn openai(&mut self, ev: &SseEvent, out: &mut Vec<Ev>) {
        let data = ev.data.trim();
        if data == "[DONE]" {
            out.push(Ev::Done);
            return;
        }
        let Some(v) = parse_json_lenient(data.as_bytes()) else {
            return;
        };
        if v.get("error").is_some_and(|e| !e.is_null()) {
            out.push(Ev::Error(error_message(&v)));
            return;
        }
        self.start(get_str(&v, "id").unwrap_or(""), out);
        if let Some(c) = get_array(&v, "choices")
            .and_then(|c| c.iter().find(|c| get_u64(*c, "index").unwrap_or(0) == 0))
        {
            if let Some(d) = c.get("delta") {
                for key in ["content", "refusal"] {
                    if let Some(t) = get_str(d, key).filter(|t| !t.is_empty()) {
                        out.push(Ev::Text(t.to_string()));
                    }
                }
                for tc in get_array(d, "tool_calls").into_iter().flatten() {
                    let key = get_u64(tc, "index").unwrap_or(0);
                    let f = tc.get("function");
                    if self.tools.insert(key) {
                        out.push(Ev::ToolStart {
                            key,
                            id: get_str(tc, "id")
                                .map_or_else(|| format!("call_{key}"), str::to_string),
                            name: f.and_then(|f| get_str(f, "name")).unwrap_or("").to_string(),
                        });
                    }
                    if let Some(a) = f
                        .and_then(|f| get_str(f, "arguments"))
                        .filter(|a| !a.is_empty())
                    {
                        out.push(Ev::ToolArgs {
                            key,
                            args: a.to_string(),
                        });
                    }
                }
            }
            if let Some(r) = get_str(c, "finish_reason") {
                out.push(Ev::Finish(Finish::from_openai(r)));
            }
        }
        if let Some(u) = v.get("usage").filter(|u| u.is_object()) {
            out.push(Ev::Usage(FullUsage::from_openai(u)));
        }
    }

    fn anthropic(&mut self, ev: &SseEvent, out: &mut Vec<Ev>) {
        let Some(v) = parse_json_lenient(ev.data.as_bytes()) else {
            return;
        };
        let ty = get_str(&v, "type").or(ev.event.as_deref()).unwrap_or("");
        let index = get_u64(&v, "index").unwrap_or(0);
        match ty {
            "message_start" => {
                let m = v.get("message").unwrap_or(&Value::Null);
                self.start(get_str(m, "id").unwrap_or(""), out);
                if let Some(u) = m.get("usage") {
                    self.anthropic_usage.merge(u);
                    out.push(Ev::Usage(self.anthropic_usage.neutral()));
                }
            }
            "content_block_start" => {
                self.start("", out);
                let b = v.get("content_block").unwrap_or(&Value::Null);
                self.anthropic_block_start(b, index, out);
            }
            "content_block_delta" => {
                let d = v.get("delta").unwrap_or(&Value::Null);
                self.anthropic_block_delta(d, index, out);
            }
            "content_block_stop" if self.tools.contains(&index) => {
                out.push(Ev::ToolEnd { key: index });
            }
            "message_delta" => {
                let d = v.get("delta").unwrap_or(&Value::Null);
                if let Some(r) = get_str(d, "stop_reason") {
                    out.push(Ev::Finish(Finish::from_anthropic(
                        r,
                        get_str(d, "stop_sequence"),
                    )));
                }
                if let Some(u) = v.get("usage") {
                    self.anthropic_usage.merge(u);
                    out.push(Ev::Usage(self.anthropic_usage.neutral()));
                }
            }
            "message_stop" => out.push(Ev::Done),
            "error" => out.push(Ev::Error(error_message(&v))),
            _ => {}
        }
    }

    /// An Anthropic content block starts: text (when it already has some) or a tool call (with
    /// its input when that is not empty). Other block kinds (thinking, …) give nothing.
    fn anthropic_block_start(&mut self, b: &Value, index: u64, out: &mut Vec<Ev>) {
        match get_str(b, "type") {
            Some("text") => {
                if let Some(t) = get_str(b, "text").filter(|t| !t.is_empty()) {
                    out.push(Ev::Text(t.to_string()));
                }
            }
            Some("tool_use") => {
                self.tools.insert(index);
                out.push(Ev::ToolStart {
                    key: index,
                    id: get_str(b, "id").unwrap_or("").to_string(),
                    name: get_str(b, "name").unwrap_or("").to_string(),
                });
                if let Some(input) = b
                    .get("input")
                    .filter(|i| i.as_object().is_some_and(|o| !o.is_empty()))
                {
                    out.push(Ev::ToolArgs {
                        key: index,
                        args: input.to_string(),
                    });
                }
            }
            _ => {}
        }
    }

    /// An Anthropic content block grows: text, or argument JSON of a block that started as a
    /// tool call. Empty deltas give nothing.
    fn anthropic_block_delta(&self, d: &Value, index: u64, out: &mut Vec<Ev>) {
        match get_str(d, "type") {
            Some("text_delta") => {
                if let Some(t) = get_str(d, "text").filter(|t| !t.is_empty()) {
                    out.push(Ev::Text(t.to_string()));
                }
            }
            Some("input_json_delta") if self.tools.contains(&index) => {
                if let Some(p) = get_str(d, "partial_json").filter(|p| !p.is_empty()) {
                    out.push(Ev::ToolArgs {
                        key: index,
                        args: p.to_string(),
                    });
                }
            }
            _ => {}
        }
    }

    fn gemini(&mut self, ev: &SseEvent, out: &mut Vec<Ev>) {
        let Some(mut v) = parse_json_lenient(ev.data.as_bytes()) else {
            return;
        };
        if let Value::Array(items) = &mut v {
            // A JSON array body (non-SSE stream) item.
            match items.pop() {
                Some(item) if items.is_empty() => v = item,
                _ => return,
            }
        }
        if v.get("error").is_some_and(|e| !e.is_null()) {
            out.push(Ev::Error(error_message(&v)));
            return;
        }
        if let Some(id) = get_str(&v, "responseId") {
            self.gemini_id = id.to_string();
        }
        let id = self.gemini_id.clone();
        self.start(&id, out);
        if let Some(u) = v.get("usageMetadata") {
            out.push(Ev::Usage(FullUsage::from_gemini(u)));
        }
        let cand = get_array(&v, "candidates")
            .and_then(|c| c.iter().find(|c| get_u64(*c, "index").unwrap_or(0) == 0));
        let Some(c) = cand else {
            if v.get("promptFeedback")
                .and_then(|f| get_str(f, "blockReason"))
                .is_some()
            {
                out.push(Ev::Finish(Finish::ContentFilter));
                out.push(Ev::Done);
            }
            return;
        };
        for p in gemini_answer_parts(c) {
            if let Some(t) = get_str(p, "text").filter(|t| !t.is_empty()) {
                out.push(Ev::Text(t.to_string()));
            } else if let Some(fc) = p.get("functionCall") {
                let key = self.gemini_calls;
                self.gemini_calls += 1;
                self.tools.insert(key);
                out.push(Ev::ToolStart {
                    key,
                    id: gemini_call_id(fc, &id, 0, key as usize),
                    name: get_str(fc, "name").unwrap_or("").to_string(),
                });
                let args = fc
                    .get("args")
                    .map_or_else(|| "{}".to_string(), Value::to_string);
                out.push(Ev::ToolArgs { key, args });
                out.push(Ev::ToolEnd { key });
            }
        }
        if let Some(r) = get_str(c, "finishReason") {
            let f = match Finish::from_gemini(r) {
                Finish::Stop if !self.tools.is_empty() => Finish::ToolCalls,
                f => f,
            };
            out.push(Ev::Finish(f));
            out.push(Ev::Done);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The neutral events of one upstream's events (JSON data, no SSE event name).
    fn neutral(protocol: Protocol, data: &[&str]) -> Vec<Ev> {
        let mut upstream = Upstream::new(protocol);
        let mut out = Vec::new();
        for d in data {
            let ev = SseEvent {
                event: None,
                data: (*d).to_owned(),
            };
            upstream.event(&ev, &mut out);
        }
        out
    }

    fn tool_events(evs: &[Ev]) -> Vec<&Ev> {
        evs.iter()
            .filter(|e| {
                matches!(
                    e,
                    Ev::ToolStart { .. } | Ev::ToolArgs { .. } | Ev::ToolEnd { .. }
                )
            })
            .collect()
    }

    #[test]
    fn argument_json_and_stops_of_anthropic_blocks_that_are_not_calls_give_nothing() {
        let evs = neutral(
            Protocol::Anthropic,
            &[
                r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
                r#"{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"a\":1}"}}"#,
                r#"{"type":"content_block_stop","index":0}"#,
                r#"{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"t","name":"f","input":{}}}"#,
                r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{}"}}"#,
                r#"{"type":"content_block_stop","index":1}"#,
            ],
        );
        assert_eq!(
            tool_events(&evs),
            [
                &Ev::ToolStart {
                    key: 1,
                    id: "t".into(),
                    name: "f".into()
                },
                &Ev::ToolArgs {
                    key: 1,
                    args: "{}".into()
                },
                &Ev::ToolEnd { key: 1 },
            ]
        );
    }

    #[test]
    fn a_gemini_array_item_is_read_only_when_it_is_the_only_one() {
        let item = r#"{"candidates":[{"content":{"parts":[{"text":"hi"}]},"index":0}]}"#;
        let one = neutral(Protocol::Gemini, &[&format!("[{item}]")]);
        assert!(one.contains(&Ev::Text("hi".into())), "{one:?}");
        let two = neutral(Protocol::Gemini, &[&format!("[{item},{item}]")]);
        assert_eq!(two, []);
    }

    #[test]
    fn gemini_calls_are_numbered_in_turn_and_make_a_stop_a_tool_call_finish() {
        let calls = r#"{"candidates":[{"content":{"parts":[{"functionCall":{"name":"a","args":{}}},{"functionCall":{"name":"b"}}]},"finishReason":"STOP","index":0}]}"#;
        let evs = neutral(Protocol::Gemini, &[calls]);
        let keys: Vec<u64> = evs
            .iter()
            .filter_map(|e| match e {
                Ev::ToolStart { key, .. } => Some(*key),
                _ => None,
            })
            .collect();
        assert_eq!(keys, [0, 1]);
        assert!(evs.contains(&Ev::ToolArgs {
            key: 1,
            args: "{}".into()
        }));
        assert!(evs.contains(&Ev::Finish(Finish::ToolCalls)), "{evs:?}");
        let text = r#"{"candidates":[{"content":{"parts":[{"text":"x"}]},"finishReason":"STOP","index":0}]}"#;
        let evs = neutral(Protocol::Gemini, &[text]);
        assert!(evs.contains(&Ev::Finish(Finish::Stop)), "{evs:?}");
    }

    #[test]
    fn only_the_first_choice_or_candidate_is_read() {
        let openai = neutral(
            Protocol::OpenAi,
            &[
                r#"{"id":"c","choices":[{"index":1,"delta":{"content":"other"}},{"index":0,"delta":{"content":"first"}}]}"#,
            ],
        );
        assert_eq!(
            openai,
            [Ev::Start { id: "c".into() }, Ev::Text("first".into())]
        );
        let gemini = neutral(
            Protocol::Gemini,
            &[
                r#"{"candidates":[{"content":{"parts":[{"text":"other"}]},"index":1},{"content":{"parts":[{"text":"first"}]},"index":0}]}"#,
            ],
        );
        assert!(gemini.contains(&Ev::Text("first".into())));
        assert!(!gemini.contains(&Ev::Text("other".into())));
    }
}
