//! What a whole stream said, read back from its SSE bytes: its text, finish reason and tool
//! calls, as a plain answer of the same protocol would give them. Used to compare two streamed
//! answers (shadow traffic) without keeping either.

use crate::protocol::Protocol;
use crate::translate::Finish;

use super::events::EventReader;
use super::upstream::Ev;

/// A stream's content, gathered.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StreamDigest {
    /// The text deltas, concatenated.
    pub text: String,
    /// The last finish reason, named as the protocol names it in a plain answer (`stop`,
    /// `end_turn`, `STOP`...).
    pub finish_reason: Option<String>,
    /// Tool calls in the order they started: name and arguments (their deltas concatenated;
    /// JSON text when the upstream sent valid arguments).
    pub tools: Vec<(String, String)>,
}

/// Reads an SSE stream of one protocol incrementally into a [`StreamDigest`].
#[derive(Debug)]
pub struct StreamDigester {
    reader: EventReader,
    gathered: Gathered,
}

#[derive(Debug)]
struct Gathered {
    protocol: Protocol,
    /// Tool-call keys (the upstream's own indexes), in the order of `digest.tools`.
    keys: Vec<u64>,
    digest: StreamDigest,
}

impl StreamDigester {
    pub fn new(protocol: Protocol) -> StreamDigester {
        StreamDigester {
            reader: EventReader::new(protocol),
            gathered: Gathered {
                protocol,
                keys: Vec::new(),
                digest: StreamDigest::default(),
            },
        }
    }

    /// Reads the complete events in `bytes` (plus what was buffered before).
    pub fn push(&mut self, bytes: &[u8]) {
        let gathered = &mut self.gathered;
        self.reader.push(bytes, &mut |ev| gathered.apply(ev));
    }

    /// The stream ended: a last event without its blank line still counts.
    pub fn finish(mut self) -> StreamDigest {
        let gathered = &mut self.gathered;
        self.reader.finish(&mut |ev| gathered.apply(ev));
        self.gathered.digest
    }
}

impl Gathered {
    fn apply(&mut self, ev: Ev) {
        match ev {
            Ev::Text(text) => self.digest.text.push_str(&text),
            Ev::ToolStart { key, name, .. } => {
                self.keys.push(key);
                self.digest.tools.push((name, String::new()));
            }
            Ev::ToolArgs { key, args } => {
                if let Some(at) = self.keys.iter().rposition(|k| *k == key) {
                    if let Some((_, all)) = self.digest.tools.get_mut(at) {
                        all.push_str(&args);
                    }
                }
            }
            Ev::Finish(finish) => self.digest.finish_reason = Some(self.name(&finish)),
            Ev::Start { .. } | Ev::ToolEnd { .. } | Ev::Usage(_) | Ev::Done | Ev::Error(_) => {}
        }
    }

    fn name(&self, finish: &Finish) -> String {
        match self.protocol {
            Protocol::OpenAi => finish.to_openai(),
            Protocol::Anthropic => finish.to_anthropic().0,
            Protocol::Gemini => finish.to_gemini(),
        }
        .to_owned()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn digest(protocol: Protocol, chunks: &[&str]) -> StreamDigest {
        let mut d = StreamDigester::new(protocol);
        for chunk in chunks {
            d.push(chunk.as_bytes());
        }
        d.finish()
    }

    #[test]
    fn an_openai_stream_gives_its_text_finish_and_tool_calls_split_anywhere() {
        let stream = concat!(
            "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Hel\"}}]}\n\n",
            "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo\"}}]}\n\n",
            "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"t1\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":\"{\\\"ci\"}}]}}]}\n\n",
            "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"ty\\\":1}\"}}]}}]}\n\n",
            "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n",
            "data: [DONE]\n\n",
        );
        let expected = StreamDigest {
            text: "Hello".to_owned(),
            finish_reason: Some("tool_calls".to_owned()),
            tools: vec![("get_weather".to_owned(), "{\"city\":1}".to_owned())],
        };
        assert_eq!(digest(Protocol::OpenAi, &[stream]), expected);
        // Split at every byte: the same digest.
        let bytes: Vec<String> = stream.chars().map(String::from).collect();
        let pieces: Vec<&str> = bytes.iter().map(String::as_str).collect();
        assert_eq!(digest(Protocol::OpenAi, &pieces), expected);
    }

    #[test]
    fn an_anthropic_stream_names_its_stop_reason_as_anthropic_does() {
        let stream = concat!(
            "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m1\",\"usage\":{\"input_tokens\":3,\"output_tokens\":0}}}\n\n",
            "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi there\"}}\n\n",
            "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
            "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\",\"id\":\"tu1\",\"name\":\"lookup\",\"input\":{}}}\n\n",
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"q\\\":\\\"x\\\"}\"}}\n\n",
            "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}\n\n",
            "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":4}}\n\n",
            "event: message_stop\ndata: {\"type\":\"message_stop\"}",
        );
        let d = digest(Protocol::Anthropic, &[stream]);
        assert_eq!(d.text, "Hi there");
        assert_eq!(d.finish_reason.as_deref(), Some("end_turn"));
        assert_eq!(
            d.tools,
            vec![("lookup".to_owned(), "{\"q\":\"x\"}".to_owned())]
        );
    }

    #[test]
    fn a_gemini_stream_gives_its_text_and_function_calls() {
        let stream = concat!(
            "data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"text\":\"One \"}]}}]}\r\n\r\n",
            "data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"text\":\"two\"},{\"functionCall\":{\"name\":\"f\",\"args\":{\"a\":1}}}]},\"finishReason\":\"MAX_TOKENS\"}]}\r\n\r\n",
        );
        let d = digest(Protocol::Gemini, &[stream]);
        assert_eq!(d.text, "One two");
        assert_eq!(d.finish_reason.as_deref(), Some("MAX_TOKENS"));
        assert_eq!(d.tools.len(), 1);
        assert_eq!(d.tools[0].0, "f");
        let args: serde_json::Value = serde_json::from_str(&d.tools[0].1).unwrap();
        assert_eq!(args, serde_json::json!({"a": 1}));
    }

    #[test]
    fn garbage_gives_an_empty_digest() {
        assert_eq!(
            digest(Protocol::OpenAi, &["data: not json\n\n", "\u{0}\u{1}"]),
            StreamDigest::default()
        );
    }
}
