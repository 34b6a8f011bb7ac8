//! Streams: translation between protocols, and cheap usage reading for passthrough.
//!
//! Event orders produced for each client:
//!
//! - **Anthropic**: `message_start` first (always, even when the upstream opens with a tool
//!   call), then per block `content_block_start` → `content_block_delta`* → `content_block_stop`
//!   (a block is stopped before the next starts), tool arguments as `input_json_delta` with
//!   `partial_json`, then `message_delta` (stop reason and usage) and `message_stop` last.
//! - **OpenAI**: a role chunk first (`delta: {role: "assistant", content: ""}`), content
//!   chunks, tool-call chunks (`tool_calls[{index, id, type: "function", function: {name,
//!   arguments: ""}}]` first, then `function.arguments` pieces with the same `index`), a final
//!   chunk with `finish_reason`, a usage chunk (`choices: []`) when the client asked for
//!   `include_usage`, then `data: [DONE]`.
//! - **Gemini**: `data: {"candidates":[{"content":{"role":"model","parts":[…]},"index":0}]}`
//!   events; the last one carries `finishReason` and `usageMetadata`. Gemini has no partial
//!   function calls, so tool-call argument deltas are accumulated per call and the call is sent
//!   whole once complete (when the upstream ends the call's block, starts another call or
//!   text, or finishes). Text is never held back.
//! - **OpenAI Responses API** ([`StreamTranslator::for_responses`]): `response.created`,
//!   `response.in_progress`, per output item `output_item.added` … `output_item.done` (text
//!   deltas or function-call argument deltas in between), `response.completed` last.

mod assemble;
mod client;
mod digest;
mod events;
mod responses;
mod upstream;
pub mod whole;

pub use assemble::StreamAssembler;
pub use digest::{StreamDigest, StreamDigester};

use crate::error::{malformed, TranslateError};
use crate::protocol::Protocol;
use crate::sse::{SseDecoder, SseEvent};
use crate::translate::Part;
use crate::usage::{AnthropicUsage, FullUsage, Usage};
use client::Emitter;
use responses::ResponsesEmitter;
use upstream::{Ev, Upstream};

/// Translates an upstream SSE stream into the client's protocol, incrementally.
#[derive(Debug)]
pub struct StreamTranslator {
    passthrough: bool,
    /// OpenAI → OpenAI for a client that did not ask for usage: the upstream was asked for it
    /// anyway (`to_body` always sets `include_usage`), so its usage-only chunk is held back.
    strip_usage_chunk: bool,
    decoder: SseDecoder,
    upstream: Upstream,
    emitter: Emitter,
    /// Set for an OpenAI Responses API client: its events replace `emitter`'s.
    responses: Option<ResponsesEmitter>,
    done: bool,
    usage: FullUsage,
    events: Vec<SseEvent>,
    evs: Vec<Ev>,
}

impl StreamTranslator {
    /// `client_model` is echoed in the client's events; `include_usage` is the OpenAI client's
    /// `stream_options.include_usage`. With `upstream == client` bytes pass through unchanged
    /// (usage and the end are still tracked), except that an OpenAI client that did not ask for
    /// `include_usage` does not get the usage-only chunk (`"choices":[]`) the gateway asked the
    /// upstream for: then events are re-emitted one by one, unchanged otherwise.
    pub fn new(
        upstream: Protocol,
        client: Protocol,
        client_model: &str,
        include_usage: bool,
    ) -> StreamTranslator {
        StreamTranslator {
            passthrough: upstream == client,
            strip_usage_chunk: upstream == client && client == Protocol::OpenAi && !include_usage,
            decoder: SseDecoder::new(),
            upstream: Upstream::new(upstream),
            emitter: Emitter::new(client, client_model, include_usage),
            responses: None,
            done: false,
            usage: FullUsage::default(),
            events: Vec::new(),
            evs: Vec::new(),
        }
    }

    /// A translator for an OpenAI Responses API client (`POST /v1/responses`) of an upstream
    /// speaking `upstream` (Anthropic, Gemini, or OpenAI Chat Completions): the Responses event
    /// stream (`response.created` … `response.output_text.delta` … `response.completed`).
    pub fn for_responses(upstream: Protocol, client_model: &str) -> StreamTranslator {
        let mut translator = StreamTranslator::new(upstream, Protocol::OpenAi, client_model, false);
        translator.passthrough = false;
        translator.strip_usage_chunk = false;
        translator.responses = Some(ResponsesEmitter::new(client_model));
        translator
    }

    /// Feeds raw upstream SSE bytes (split anywhere; `\n` or `\r\n`) and appends the complete
    /// client-protocol SSE events they produce to `out`.
    pub fn push(&mut self, bytes: &[u8], out: &mut Vec<u8>) {
        if self.passthrough && !self.strip_usage_chunk {
            out.extend_from_slice(bytes);
        }
        let mut events = std::mem::take(&mut self.events);
        self.decoder.push_into(bytes, &mut events);
        for ev in events.drain(..) {
            self.event(&ev, out);
        }
        self.events = events;
    }

    fn event(&mut self, ev: &SseEvent, out: &mut Vec<u8>) {
        let mut evs = std::mem::take(&mut self.evs);
        self.upstream.event(ev, &mut evs);
        for e in &evs {
            match e {
                Ev::Usage(u) => self.usage = *u,
                Ev::Done | Ev::Error(_) => self.done = true,
                _ => {}
            }
        }
        if let Some(responses) = &mut self.responses {
            responses.handle(&evs, out);
        } else if !self.passthrough {
            self.emitter.handle(&evs, out);
        } else if self.strip_usage_chunk {
            let usage_only =
                evs.iter().any(|e| matches!(e, Ev::Usage(_))) && ev.data.contains("\"choices\":[]");
            if !usage_only {
                crate::sse::write_event(out, ev.event.as_deref(), &ev.data);
            }
        }
        evs.clear();
        self.evs = evs;
    }

    /// A whole upstream JSON answer, given to a stream request by an upstream that did not
    /// stream (some OpenAI-compatible servers ignore `stream`): appends the client's complete
    /// stream of it to `out` — the events a live stream of that answer gives (its first choice),
    /// then the protocol's proper end. The answer is in the translator's upstream protocol, and
    /// it is re-emitted even when the protocols are the same (there is no stream to pass
    /// through). Afterwards the upstream counts as done and the answer's usage as the stream's.
    /// An error when the body is not an answer of that protocol, or its first choice holds
    /// neither text nor a tool call (an error object answered with a 2xx among them).
    pub fn whole_answer(&mut self, body: &[u8], out: &mut Vec<u8>) -> Result<(), TranslateError> {
        let resp = crate::response::parse_answer(self.upstream.protocol(), body)?;
        let choice = resp
            .choices
            .first()
            .filter(|choice| !choice.parts.is_empty())
            .ok_or_else(|| malformed("the answer has no content"))?;
        let mut evs = vec![
            Ev::Start {
                id: resp.id.clone(),
            },
            Ev::Usage(resp.usage),
        ];
        for (key, part) in (0u64..).zip(&choice.parts) {
            match part {
                Part::Text(text) => evs.push(Ev::Text(text.clone())),
                Part::ToolCall { id, name, args } => evs.extend([
                    Ev::ToolStart {
                        key,
                        id: id.clone(),
                        name: name.clone(),
                    },
                    Ev::ToolArgs {
                        key,
                        args: args.clone(),
                    },
                    Ev::ToolEnd { key },
                ]),
                _ => {}
            }
        }
        evs.extend(choice.finish.clone().map(Ev::Finish));
        evs.push(Ev::Done);
        self.usage = resp.usage;
        self.done = true;
        match &mut self.responses {
            Some(responses) => {
                responses.handle(&evs, out);
                responses.close(out);
            }
            None => {
                self.emitter.handle(&evs, out);
                self.emitter.close(out);
            }
        }
        Ok(())
    }

    /// The upstream stream ended: appends what the client's protocol still needs to close
    /// properly, if not already sent (Anthropic: `content_block_stop`, `message_delta`,
    /// `message_stop`; OpenAI: finish chunk, usage chunk if asked, `data: [DONE]`; Gemini: the
    /// final event with `finishReason`). Nothing after a relayed upstream error event, nothing
    /// in passthrough. Idempotent.
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        if let Some(ev) = self.decoder.finish() {
            self.event(&ev, out);
        }
        if let Some(responses) = &mut self.responses {
            responses.close(out);
        } else if !self.passthrough {
            self.emitter.close(out);
        }
    }

    /// Whether the upstream signalled its end (OpenAI `[DONE]`, Anthropic `message_stop`, Gemini
    /// a `finishReason`, or an error event), as opposed to being cut.
    pub fn upstream_done(&self) -> bool {
        self.done
    }

    /// The usage seen so far (input includes cached tokens).
    pub fn usage(&self) -> Usage {
        self.usage.public()
    }

    /// Whether the client's stream is complete (closing sequence or error event sent).
    pub fn client_closed(&self) -> bool {
        match &self.responses {
            Some(responses) => responses.is_closed(),
            None => self.passthrough && self.done || self.emitter.is_closed(),
        }
    }
}

/// A cheap incremental usage reader for same-protocol passthrough streams. Only `data:` lines
/// that carry a usage object are parsed, and only that object. A Responses API stream
/// ([`UsageScanner::for_responses`]) carries it in its `response.completed` event, with the
/// figures named as that API names them.
///
/// Made with [`UsageScanner::stripping_usage`] it also filters an OpenAI stream the gateway
/// asked for usage on behalf of a client that did not ([`UsageScanner::filter`]): the
/// usage-only chunk (`"choices":[]`) is removed, and so is the `"usage":null` OpenAI then adds
/// to every other chunk; every other byte is forwarded as it came, one complete event at a time.
#[derive(Debug)]
pub struct UsageScanner {
    protocol: Protocol,
    line: Vec<u8>,
    usage: FullUsage,
    anthropic: AnthropicUsage,
    strip: bool,
    /// A Responses API stream (an OpenAI one whose usage names its figures as that API does).
    responses: bool,
    /// Strip mode: the complete lines of the event being read, held until its end.
    event: Vec<u8>,
    /// Strip mode: the event being read is the usage-only chunk.
    drop_event: bool,
}

impl UsageScanner {
    pub fn new(protocol: Protocol) -> UsageScanner {
        UsageScanner {
            protocol,
            line: Vec::new(),
            usage: FullUsage::default(),
            anthropic: AnthropicUsage::default(),
            strip: false,
            responses: false,
            event: Vec::new(),
            drop_event: false,
        }
    }

    /// A scanner for an OpenAI stream whose request the gateway changed to ask for usage: use
    /// [`filter`](Self::filter) and [`finish`](Self::finish) to get what the client receives.
    pub fn stripping_usage(protocol: Protocol) -> UsageScanner {
        UsageScanner {
            strip: protocol == Protocol::OpenAi,
            ..UsageScanner::new(protocol)
        }
    }

    /// A scanner for a Responses API stream passed through.
    pub fn for_responses() -> UsageScanner {
        UsageScanner {
            responses: true,
            ..UsageScanner::new(Protocol::OpenAi)
        }
    }

    /// Whether [`filter`](Self::filter) changes the stream (else it is the bytes themselves).
    pub fn strips(&self) -> bool {
        self.strip
    }

    pub fn push(&mut self, bytes: &[u8]) {
        let mut rest = bytes;
        while let Some(nl) = rest.iter().position(|&b| b == b'\n') {
            let (head, tail) = rest.split_at(nl);
            if self.line.is_empty() {
                self.scan_line(head);
            } else {
                let mut line = std::mem::take(&mut self.line);
                line.extend_from_slice(head);
                self.scan_line(&line);
                line.clear();
                self.line = line;
            }
            rest = &tail[1..];
        }
        self.line.extend_from_slice(rest);
    }

    /// Reads `bytes` like [`push`](Self::push) and appends to `out` what the client gets: in
    /// strip mode the complete events among what has arrived, without the usage-only chunk and
    /// without `"usage":null`; otherwise `bytes` unchanged.
    pub fn filter(&mut self, bytes: &[u8], out: &mut Vec<u8>) {
        if !self.strip {
            self.push(bytes);
            out.extend_from_slice(bytes);
            return;
        }
        let mut rest = bytes;
        while let Some(nl) = rest.iter().position(|&b| b == b'\n') {
            let (head, tail) = rest.split_at(nl + 1);
            if self.line.is_empty() {
                self.filter_line(head, out);
            } else {
                let mut line = std::mem::take(&mut self.line);
                line.extend_from_slice(head);
                self.filter_line(&line, out);
                line.clear();
                self.line = line;
            }
            rest = tail;
        }
        self.line.extend_from_slice(rest);
    }

    /// The stream ended: in strip mode, what is still held (an event without its blank line)
    /// is appended to `out` as it came, unless it is the usage-only chunk.
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        if !self.strip {
            return;
        }
        if !self.line.is_empty() {
            let line = std::mem::take(&mut self.line);
            self.filter_line(&line, out);
        }
        if !self.drop_event {
            out.append(&mut self.event);
        }
        self.event.clear();
        self.drop_event = false;
    }

    pub fn usage(&self) -> Usage {
        self.usage.public()
    }

    /// Strip mode: one line with its line ending.
    fn filter_line(&mut self, line: &[u8], out: &mut Vec<u8>) {
        let content = line.strip_suffix(b"\n").unwrap_or(line);
        let content = content.strip_suffix(b"\r").unwrap_or(content);
        if content.is_empty() {
            // The blank line that ends an event.
            if !self.drop_event {
                out.append(&mut self.event);
                out.extend_from_slice(line);
            }
            self.event.clear();
            self.drop_event = false;
            return;
        }
        if self.scan_line(content) && content.strip_prefix(b"data:").is_some_and(usage_only) {
            self.drop_event = true;
        }
        match content
            .strip_prefix(b"data:")
            .and_then(null_usage_span)
            .map(|(start, end)| (start + 5, end + 5))
        {
            Some((start, end)) => {
                self.event.extend_from_slice(&line[..start]);
                self.event.extend_from_slice(&line[end..]);
            }
            None => self.event.extend_from_slice(line),
        }
    }

    /// Reads the usage a line carries; whether it carried a usage object.
    fn scan_line(&mut self, line: &[u8]) -> bool {
        let Some(data) = line.strip_prefix(b"data:") else {
            return false;
        };
        let key: &[u8] = match self.protocol {
            Protocol::Gemini => b"\"usageMetadata\"",
            _ => b"\"usage\"",
        };
        let Some(obj) = object_after_key(data, key) else {
            return false;
        };
        let Ok(v) = serde_json::from_slice::<serde_json::Value>(obj) else {
            return false;
        };
        match self.protocol {
            Protocol::OpenAi if self.responses => self.usage = FullUsage::from_responses(&v),
            Protocol::OpenAi => self.usage = FullUsage::from_openai(&v),
            Protocol::Gemini => self.usage = FullUsage::from_gemini(&v),
            Protocol::Anthropic => {
                self.anthropic.merge(&v);
                self.usage = self.anthropic.neutral();
            }
        }
        true
    }
}

/// Whether an OpenAI chunk carrying a usage object is the usage-only one (`"choices": []`).
fn usage_only(data: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct Chunk {
        #[serde(default)]
        choices: Option<Vec<serde::de::IgnoredAny>>,
    }
    serde_json::from_slice::<Chunk>(data.trim_ascii())
        .is_ok_and(|c| c.choices.is_some_and(|choices| choices.is_empty()))
}

/// The byte range of a `"usage":null` member in an OpenAI chunk's JSON, with the comma that
/// separates it from its neighbour, so that removing it leaves the same object without it.
/// `"usage"` with its quotes cannot occur inside a JSON string (quotes there are escaped).
fn null_usage_span(data: &[u8]) -> Option<(usize, usize)> {
    let key: &[u8] = b"\"usage\"";
    let pos = data.windows(key.len()).position(|w| w == key)?;
    let ws = |b: u8| b.is_ascii_whitespace();
    let mut end = pos + key.len();
    while data.get(end).is_some_and(|&b| ws(b)) {
        end += 1;
    }
    if data.get(end) != Some(&b':') {
        return None;
    }
    end += 1;
    while data.get(end).is_some_and(|&b| ws(b)) {
        end += 1;
    }
    if !data.get(end..)?.starts_with(b"null") {
        return None;
    }
    end += 4;
    let mut before = pos;
    while before > 0 && ws(data[before - 1]) {
        before -= 1;
    }
    match data[..before].last() {
        // `…,"usage":null`: the comma before it goes with it.
        Some(b',') => Some((before - 1, end)),
        // `{"usage":null,…`: the comma after it goes with it.
        Some(b'{') => {
            let mut after = end;
            while data.get(after).is_some_and(|&b| ws(b)) {
                after += 1;
            }
            if data.get(after) == Some(&b',') {
                after += 1;
                while data.get(after).is_some_and(|&b| ws(b)) {
                    after += 1;
                }
                Some((pos, after))
            } else {
                Some((pos, end))
            }
        }
        _ => None,
    }
}

/// The bytes of the JSON object that is the value of the first `key` (a quoted name) in
/// `data`, if that value is an object.
fn object_after_key<'a>(data: &'a [u8], key: &[u8]) -> Option<&'a [u8]> {
    let pos = data.windows(key.len()).position(|w| w == key)?;
    let mut i = pos + key.len();
    let skip_ws = |i: &mut usize| {
        while *i < data.len() && data[*i].is_ascii_whitespace() {
            *i += 1;
        }
    };
    skip_ws(&mut i);
    if data.get(i) != Some(&b':') {
        return None;
    }
    i += 1;
    skip_ws(&mut i);
    if data.get(i) != Some(&b'{') {
        return None;
    }
    let start = i;
    let (mut depth, mut in_str, mut esc) = (0usize, false, false);
    while i < data.len() {
        let b = data[i];
        if in_str {
            if esc {
                esc = false;
            } else if b == b'\\' {
                esc = true;
            } else if b == b'"' {
                in_str = false;
            }
        } else if b == b'"' {
            in_str = true;
        } else if b == b'{' {
            depth += 1;
        } else if b == b'}' {
            depth -= 1;
            if depth == 0 {
                return Some(&data[start..=i]);
            }
        }
        i += 1;
    }
    None
}

#[cfg(test)]
mod tests;
