//! A whole stream read back into the plain answer of its own protocol: the same text, tool
//! calls, finish reason and usage a plain answer would have carried. The response cache keeps
//! this one form of an answer and serves it plain, or streamed again through
//! [`super::StreamTranslator::whole_answer`] (the events a live stream gives).

use crate::protocol::Protocol;
use crate::translate::{
    anthropic_emit_response, gemini_emit_response, openai_emit_response, to_vec, Choice, Finish,
    Part, Resp,
};
use crate::usage::{FullUsage, Usage};

use super::events::EventReader;
use super::upstream::Ev;

/// Reads an SSE stream of one protocol incrementally; [`StreamAssembler::finish`] gives the
/// plain answer, when the stream was whole.
#[derive(Debug)]
pub struct StreamAssembler {
    reader: EventReader,
    answer: Assembled,
}

#[derive(Debug, Default)]
struct Assembled {
    id: String,
    parts: Vec<Part>,
    /// The tool calls' keys (the stream's own indexes) and their positions in `parts`.
    tools: Vec<(u64, usize)>,
    finish: Option<Finish>,
    usage: FullUsage,
    done: bool,
    failed: bool,
}

impl StreamAssembler {
    pub fn new(protocol: Protocol) -> StreamAssembler {
        StreamAssembler {
            reader: EventReader::new(protocol),
            answer: Assembled::default(),
        }
    }

    /// Reads the complete events in `bytes` (plus what was buffered before).
    pub fn push(&mut self, bytes: &[u8]) {
        let answer = &mut self.answer;
        self.reader.push(bytes, &mut |ev| answer.apply(ev));
    }

    /// The plain answer of the stream's protocol, naming `model`; `None` when the stream did not
    /// end cleanly (cut, or an error event), or held neither text nor a tool call. `usage` is
    /// what the request was accounted with: it stands in when the stream carried none (an
    /// OpenAI client that did not ask for the usage chunk).
    pub fn finish(mut self, model: &str, usage: Usage) -> Option<Vec<u8>> {
        let answer = &mut self.answer;
        self.reader.finish(&mut |ev| answer.apply(ev));
        let protocol = self.reader.protocol();
        let mut a = self.answer;
        // A Gemini stream ends with its finish reason; the others with their own end event.
        let whole = a.done || (protocol == Protocol::Gemini && a.finish.is_some());
        if a.failed || !whole || a.parts.is_empty() {
            return None;
        }
        if a.usage == FullUsage::default() {
            a.usage = FullUsage {
                input: usage.input_tokens,
                output: usage.output_tokens,
                cached: usage.cached_tokens,
                cache_creation: 0,
            };
        }
        let resp = Resp {
            id: a.id,
            choices: vec![Choice {
                parts: a.parts,
                finish: a.finish,
            }],
            usage: a.usage,
        };
        let value = match protocol {
            Protocol::OpenAi => openai_emit_response(&resp, model),
            Protocol::Anthropic => anthropic_emit_response(&resp, model),
            Protocol::Gemini => gemini_emit_response(&resp, model),
        };
        to_vec(&value).ok()
    }
}

impl Assembled {
    fn apply(&mut self, ev: Ev) {
        match ev {
            Ev::Start { id } => self.id = id,
            Ev::Text(text) => match self.parts.last_mut() {
                Some(Part::Text(last)) => last.push_str(&text),
                _ => self.parts.push(Part::Text(text)),
            },
            Ev::ToolStart { key, id, name } => {
                self.tools.push((key, self.parts.len()));
                self.parts.push(Part::ToolCall {
                    id,
                    name,
                    args: String::new(),
                });
            }
            Ev::ToolArgs { key, args: more } => {
                let at = self.tools.iter().rev().find(|(k, _)| *k == key);
                if let Some(Part::ToolCall { args, .. }) =
                    at.and_then(|(_, at)| self.parts.get_mut(*at))
                {
                    args.push_str(&more);
                }
            }
            Ev::Finish(finish) => self.finish = Some(finish),
            Ev::Usage(usage) => self.usage = usage,
            Ev::Done => self.done = true,
            Ev::Error(_) => self.failed = true,
            Ev::ToolEnd { .. } => {}
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::stream::StreamTranslator;

    /// A plain answer streamed by the translator and read back gives the same answer again.
    fn round_trip(protocol: Protocol, plain: &str) -> serde_json::Value {
        let mut out = Vec::new();
        StreamTranslator::new(protocol, protocol, "m", true)
            .whole_answer(plain.as_bytes(), &mut out)
            .unwrap();
        let mut assembler = StreamAssembler::new(protocol);
        // Split anywhere: the events are read whole.
        for piece in out.chunks(7) {
            assembler.push(piece);
        }
        let back = assembler.finish("m", Usage::default()).unwrap();
        serde_json::from_slice(&back).unwrap()
    }

    #[test]
    fn an_openai_answer_streamed_reads_back_with_its_text_tools_finish_and_usage() {
        let plain = r#"{"id":"chatcmpl-1","object":"chat.completion","created":0,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"Hi there","tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":5,"completion_tokens":3,"total_tokens":8}}"#;
        let back = round_trip(Protocol::OpenAi, plain);
        assert_eq!(back["choices"][0]["message"]["content"], "Hi there");
        let call = &back["choices"][0]["message"]["tool_calls"][0];
        assert_eq!(call["function"]["name"], "f");
        assert_eq!(call["function"]["arguments"], "{\"a\":1}");
        assert_eq!(back["choices"][0]["finish_reason"], "tool_calls");
        assert_eq!(back["usage"]["prompt_tokens"], 5);
        assert_eq!(back["usage"]["completion_tokens"], 3);
    }

    #[test]
    fn anthropic_and_gemini_answers_streamed_read_back_alike() {
        let anthropic = r#"{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"Bonjour"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":4,"output_tokens":2}}"#;
        let back = round_trip(Protocol::Anthropic, anthropic);
        assert_eq!(back["content"][0]["text"], "Bonjour");
        assert_eq!(back["stop_reason"], "end_turn");
        assert_eq!(back["usage"]["output_tokens"], 2);
        let gemini = r#"{"candidates":[{"content":{"role":"model","parts":[{"text":"Hallo"}]},"finishReason":"STOP","index":0}],"usageMetadata":{"promptTokenCount":3,"candidatesTokenCount":1,"totalTokenCount":4}}"#;
        let back = round_trip(Protocol::Gemini, gemini);
        assert_eq!(
            back["candidates"][0]["content"]["parts"][0]["text"],
            "Hallo"
        );
        assert_eq!(back["candidates"][0]["finishReason"], "STOP");
        assert_eq!(back["usageMetadata"]["candidatesTokenCount"], 1);
    }

    #[test]
    fn a_cut_stream_or_an_error_event_gives_no_answer() {
        let cut =
            "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]}\n\n";
        let mut assembler = StreamAssembler::new(Protocol::OpenAi);
        assembler.push(cut.as_bytes());
        assert!(assembler.finish("m", Usage::default()).is_none());
        let errored = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"usage\":{\"input_tokens\":1}}}\n\nevent: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"x\"}}\n\n";
        let mut assembler = StreamAssembler::new(Protocol::Anthropic);
        assembler.push(errored.as_bytes());
        assert!(assembler.finish("m", Usage::default()).is_none());
    }

    #[test]
    fn the_accounted_usage_stands_in_when_the_stream_carried_none() {
        let stream = concat!(
            "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"}}]}\n\n",
            "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
            "data: [DONE]\n\n"
        );
        let mut assembler = StreamAssembler::new(Protocol::OpenAi);
        assembler.push(stream.as_bytes());
        let usage = Usage {
            input_tokens: 9,
            output_tokens: 1,
            cached_tokens: 0,
        };
        let back: serde_json::Value =
            serde_json::from_slice(&assembler.finish("m", usage).unwrap()).unwrap();
        assert_eq!(back["usage"]["prompt_tokens"], 9);
    }

    fn assemble(protocol: Protocol, stream: &str) -> Option<serde_json::Value> {
        let mut assembler = StreamAssembler::new(protocol);
        assembler.push(stream.as_bytes());
        let back = assembler.finish("m", Usage::default())?;
        Some(serde_json::from_slice(&back).unwrap())
    }

    #[test]
    fn a_stream_cut_after_its_finish_reason_but_before_its_end_event_gives_no_answer() {
        let openai = concat!(
            "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"}}]}\n\n",
            "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
        );
        assert!(assemble(Protocol::OpenAi, openai).is_none(), "no [DONE]");
        let done = format!("{openai}data: [DONE]\n\n");
        assert!(assemble(Protocol::OpenAi, &done).is_some());
        let anthropic = concat!(
            "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"usage\":{\"input_tokens\":1}}}\n\n",
            "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"x\"}}\n\n",
            "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
            "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":1}}\n\n",
        );
        assert!(
            assemble(Protocol::Anthropic, anthropic).is_none(),
            "no message_stop"
        );
        let stopped =
            format!("{anthropic}event: message_stop\ndata: {{\"type\":\"message_stop\"}}\n\n");
        assert!(assemble(Protocol::Anthropic, &stopped).is_some());
    }

    #[test]
    fn text_deltas_in_a_row_are_one_text_and_text_after_a_call_another() {
        let stream = concat!(
            "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"usage\":{\"input_tokens\":1}}}\n\n",
            "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hel\"}}\n\n",
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"lo\"}}\n\n",
            "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
            "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"f\",\"input\":{}}}\n\n",
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{}\"}}\n\n",
            "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}\n\n",
            "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":2,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"text_delta\",\"text\":\"after\"}}\n\n",
            "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":2}\n\n",
            "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\"},\"usage\":{\"output_tokens\":3}}\n\n",
            "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
        );
        let back = assemble(Protocol::Anthropic, stream).unwrap();
        let kinds: Vec<&str> = back["content"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b["type"].as_str().unwrap())
            .collect();
        assert_eq!(kinds, ["text", "tool_use", "text"], "{back}");
        assert_eq!(back["content"][0]["text"], "Hello");
        assert_eq!(back["content"][2]["text"], "after");
    }

    #[test]
    fn a_last_event_without_its_blank_line_still_counts() {
        let stream = concat!(
            "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"}}]}\n\n",
            "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
            "data: [DONE]"
        );
        let back = assemble(Protocol::OpenAi, stream).unwrap();
        assert_eq!(back["choices"][0]["message"]["content"], "x");
    }
}
