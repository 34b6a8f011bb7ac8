//! A streamed answer under answer guardrails: the client-facing SSE body is read event by
//! event, each event's text deltas go through the rules' window (which holds back only as much
//! text as the rules need to see a match whole), and the event goes out with the text the window
//! lets through in place of its own. A text event waits until the next one arrives (so what the
//! window still holds when the stream ends is written into it); the events behind it wait with
//! it, in order.
//!
//! On a block the held events are dropped, one error event in the client's protocol ends the
//! stream (OpenAI: `data: {"error":{...,"code":"guardrail_blocked"}}`; Anthropic:
//! `event: error` with an `invalid_request_error`; Gemini: `data: {"error":{"code":400,...,
//! "status":"INVALID_ARGUMENT"}}`), and the upstream's stream is let go.

use std::collections::VecDeque;

use axum::body::Body;
use bytes::Bytes;
use futures_util::StreamExt;
use switchyard_provider::{SseDecoder, SseEvent};

use crate::endpoint::Endpoint;
use crate::errors::GatewayError;
use crate::guard::text::{delta_texts, splice};

/// A rule blocked the answer: its name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blocked(pub String);

/// The rules' window over an answer's text as it streams.
pub trait Window: Send {
    /// Takes the next delta; gives back the text that may go out now (maybe empty, maybe more
    /// than the delta: what was held before), rewritten as the rules say.
    fn push(&mut self, delta: &str) -> Result<String, Blocked>;
    /// The stream ended: what is still held, checked whole.
    fn finish(&mut self) -> Result<String, Blocked>;
}

/// One event not yet sent: its name, its data and whether it carries text.
struct Held {
    event: Option<String>,
    data: String,
    text: bool,
}

impl Held {
    fn write(&self, out: &mut Vec<u8>) {
        if let Some(name) = &self.event {
            out.extend_from_slice(b"event: ");
            out.extend_from_slice(name.as_bytes());
            out.push(b'\n');
        }
        for line in self.data.split('\n') {
            out.extend_from_slice(b"data: ");
            out.extend_from_slice(line.as_bytes());
            out.push(b'\n');
        }
        out.push(b'\n');
    }
}

/// The stream's guard state: the decoder, the held events and the window.
pub struct Guarded<W> {
    endpoint: Endpoint,
    decoder: SseDecoder,
    held: VecDeque<Held>,
    window: W,
    done: bool,
}

impl<W: Window> Guarded<W> {
    pub fn new(endpoint: Endpoint, window: W) -> Guarded<W> {
        Guarded {
            endpoint,
            decoder: SseDecoder::new(),
            held: VecDeque::new(),
            window,
            done: false,
        }
    }

    /// The bytes for the client after `chunk` (what may go out now); `Err` with the error
    /// event and the rule's name when a rule blocked the answer.
    pub fn chunk(&mut self, chunk: &[u8]) -> Result<Vec<u8>, (Vec<u8>, String)> {
        let mut out = Vec::new();
        for event in self.decoder.push(chunk) {
            self.event(event, &mut out).map_err(|b| self.blocked(&b))?;
        }
        Ok(out)
    }

    /// The stream ended: the rest, with what the window still held written into the last text
    /// event; `Err` with the error event and the rule's name when a rule blocked it.
    pub fn finish(&mut self) -> Result<Vec<u8>, (Vec<u8>, String)> {
        let mut out = Vec::new();
        if let Some(event) = self.decoder.finish() {
            self.event(event, &mut out).map_err(|b| self.blocked(&b))?;
        }
        let rest = self.window.finish().map_err(|b| self.blocked(&b))?;
        if let Some(last) = self.held.front_mut().filter(|h| h.text) {
            append_text(self.endpoint, last, &rest);
        }
        for held in self.held.drain(..) {
            held.write(&mut out);
        }
        self.done = true;
        Ok(out)
    }

    fn event(&mut self, event: SseEvent, out: &mut Vec<u8>) -> Result<(), Blocked> {
        let pieces = delta_texts(self.endpoint, event.event.as_deref(), &event.data);
        if pieces.is_empty() {
            self.held.push_back(Held {
                event: event.event,
                data: event.data,
                text: false,
            });
            return Ok(());
        }
        let mut changes = Vec::with_capacity(pieces.len());
        for piece in &pieces {
            changes.push((piece, self.window.push(&piece.text)?));
        }
        let data = splice(event.data.as_bytes(), &changes);
        for held in self.held.drain(..) {
            held.write(out);
        }
        self.held.push_back(Held {
            event: event.event,
            data: String::from_utf8_lossy(&data).into_owned(),
            text: true,
        });
        Ok(())
    }

    fn blocked(&mut self, blocked: &Blocked) -> (Vec<u8>, String) {
        self.held.clear();
        self.done = true;
        let error = GatewayError::GuardrailBlocked {
            rule: blocked.0.clone(),
            answer: true,
        };
        let event = error.stream_event(self.endpoint.protocol()).into_bytes();
        (event, blocked.0.clone())
    }
}

/// `rest` appended to the last text of a held text event.
fn append_text(endpoint: Endpoint, held: &mut Held, rest: &str) {
    if rest.is_empty() {
        return;
    }
    let pieces = delta_texts(endpoint, held.event.as_deref(), &held.data);
    let Some(last) = pieces.last() else {
        return;
    };
    let text = format!("{}{rest}", last.text);
    let data = splice(held.data.as_bytes(), &[(last, text)]);
    held.data = String::from_utf8_lossy(&data).into_owned();
}

/// `body` (a client-facing SSE stream) under `window`: see the module's documentation. The
/// guarded body ends after a block; the upstream's body is dropped with it.
pub fn guard_stream<W: Window + 'static>(body: Body, endpoint: Endpoint, window: W) -> Body {
    let state = (body.into_data_stream(), Guarded::new(endpoint, window));
    let stream = futures_util::stream::unfold(state, |(mut inner, mut guarded)| async move {
        loop {
            if guarded.done {
                return None;
            }
            let step = match inner.next().await {
                Some(Ok(chunk)) => guarded.chunk(&chunk),
                Some(Err(e)) => {
                    guarded.done = true;
                    return Some((Err(std::io::Error::other(e)), (inner, guarded)));
                }
                None => guarded.finish(),
            };
            let bytes = match step {
                Ok(bytes) if bytes.is_empty() && !guarded.done => continue,
                Ok(bytes) => bytes,
                Err((event, _rule)) => event,
            };
            if bytes.is_empty() {
                return None;
            }
            return Some((Ok(Bytes::from(bytes)), (inner, guarded)));
        }
    });
    Body::from_stream(stream)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// Holds the last two characters back; blocks on `X`; upper-cases on release.
    struct Upper {
        held: String,
    }

    impl Window for Upper {
        fn push(&mut self, delta: &str) -> Result<String, Blocked> {
            if delta.contains('X') {
                return Err(Blocked("no-x".into()));
            }
            self.held.push_str(delta);
            let cut = self.held.len().saturating_sub(2);
            Ok(self.held.drain(..cut).collect::<String>().to_uppercase())
        }

        fn finish(&mut self) -> Result<String, Blocked> {
            Ok(std::mem::take(&mut self.held).to_uppercase())
        }
    }

    fn chunk(text: &str) -> String {
        format!("data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":{text:?}}}}}]}}\n\n")
    }

    #[test]
    fn text_goes_out_as_the_window_releases_it_in_order_and_the_rest_at_the_end() {
        let mut guarded = Guarded::new(
            Endpoint::ChatCompletions,
            Upper {
                held: String::new(),
            },
        );
        let first = guarded.chunk(chunk("abc").as_bytes()).unwrap();
        assert!(first.is_empty(), "a text event waits for the next");
        let finish =
            "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n";
        let second = guarded
            .chunk(format!("{}{finish}data: [DONE]\n\n", chunk("de")).as_bytes())
            .unwrap();
        assert_eq!(String::from_utf8(second).unwrap(), chunk("A"));
        let rest = String::from_utf8(guarded.finish().unwrap()).unwrap();
        assert_eq!(rest, format!("{}{finish}data: [DONE]\n\n", chunk("BCDE")));
    }

    #[test]
    fn a_block_drops_what_is_held_and_ends_with_the_error_event() {
        let mut guarded = Guarded::new(
            Endpoint::Messages,
            Upper {
                held: String::new(),
            },
        );
        let delta = |t: &str| {
            format!("event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":{t:?}}}}}\n\n")
        };
        assert!(guarded.chunk(delta("hello").as_bytes()).unwrap().is_empty());
        let (event, rule) = guarded.chunk(delta("X").as_bytes()).unwrap_err();
        let event = String::from_utf8(event).unwrap();
        assert_eq!(rule, "no-x");
        assert!(event.starts_with("event: error\ndata: "), "{event}");
        assert!(event.contains("no-x") && !event.contains("HEL"), "{event}");
        assert!(guarded.done);
    }
}
