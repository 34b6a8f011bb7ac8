//! A streamed answer under answer guardrails: the client-facing SSE body is read event by
//! event, each event's text deltas go through the rules' window (which holds back only as much
//! text as the rules need to see a match whole), and the event goes out with the text the window
//! lets through in place of its own. A text event waits until the next one arrives (so what the
//! window still holds when the stream ends is written into it); the events behind it wait with
//! it, in order.
//!
//! A Responses API stream checks each text part as a text of its own: when the part's
//! `response.output_text.done` arrives, the window lets go of what it holds for it (checked
//! whole), and every closing event that repeats the part's text (`.done` events,
//! `response.completed`) carries the text the client was given instead of the upstream's. A
//! closing text whose part never streamed is checked when it arrives.
//!
//! The checks that need the whole answer (a JSON schema, a webhook, a moderation call) run once
//! the upstream's stream ended: the text has gone out as it arrived, but the stream's last events
//! (the finish, the usage, the end marker) wait for them, and a block sends the error event in
//! their place, so the client's SDK raises instead of completing the answer. A tool call an
//! answer makes is checked as its event arrives.
//!
//! On a block the held events are dropped, one error event in the client's protocol ends the
//! stream (OpenAI: `data: {"error":{...,"code":"guardrail_blocked"}}`; Anthropic:
//! `event: error` with an `invalid_request_error`; Gemini: `data: {"error":{"code":400,...,
//! "status":"INVALID_ARGUMENT"}}`), and the upstream's stream is let go.

use std::collections::{BTreeMap, VecDeque};

use axum::body::Body;
use bytes::Bytes;
use futures_util::StreamExt;
use switchyard_provider::{SseDecoder, SseEvent};

use crate::endpoint::Endpoint;
use crate::errors::GatewayError;
use crate::guard::check::Blocked;
use crate::guard::responses::{closing_texts, Closing, Place};
use crate::guard::text::{delta_texts, splice, stream_tools, type_of, Piece};
use crate::guard::whole::EndCheck;

/// The rules' window over an answer's text as it streams.
pub trait Window: Send {
    /// Takes the next delta; gives back the text that may go out now (maybe empty, maybe more
    /// than the delta: what was held before), rewritten as the rules say.
    fn push(&mut self, delta: &str) -> Result<String, Blocked>;
    /// The stream ended: what is still held, checked whole.
    fn finish(&mut self) -> Result<String, Blocked>;
    /// One text of several ended (a Responses text part): what is still held, checked whole;
    /// the next delta starts a new text.
    fn flush(&mut self) -> Result<String, Blocked>;
    /// Whether the window checks the tools the answer calls (each event is then read for them).
    fn wants_tools(&self) -> bool {
        false
    }
    /// The answer calls the tool `name`.
    fn tool(&mut self, _name: &str) -> Result<(), Blocked> {
        Ok(())
    }
    /// The answer's whole text as the rules saw it, when the window kept it (taken).
    fn answer_text(&mut self) -> String {
        String::new()
    }
}

/// A Responses stream's text parts: the one streaming and the ones closed, as the client got
/// them.
#[derive(Default)]
struct Parts {
    /// What the window let go of for the part streaming now.
    current: String,
    /// Each closed part's text, by its place.
    closed: BTreeMap<Place, String>,
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
    /// A Responses stream's parts (none for other endpoints).
    parts: Option<Parts>,
    done: bool,
}

impl<W: Window> Guarded<W> {
    pub fn new(endpoint: Endpoint, window: W) -> Guarded<W> {
        Guarded {
            endpoint,
            decoder: SseDecoder::new(),
            held: VecDeque::new(),
            window,
            parts: (endpoint == Endpoint::Responses).then(Parts::default),
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

    fn event(&mut self, mut event: SseEvent, out: &mut Vec<u8>) -> Result<(), Blocked> {
        if self.window.wants_tools() {
            for name in stream_tools(self.endpoint, event.event.as_deref(), &event.data) {
                self.window.tool(&name)?;
            }
        }
        let pieces = delta_texts(self.endpoint, event.event.as_deref(), &event.data);
        if pieces.is_empty() {
            if self.parts.is_some() {
                event.data = self.closing(event.event.as_deref(), event.data)?;
            }
            self.held.push_back(Held {
                event: event.event,
                data: event.data,
                text: false,
            });
            return Ok(());
        }
        let mut changes = Vec::with_capacity(pieces.len());
        for piece in &pieces {
            let released = self.window.push(&piece.text)?;
            if let Some(parts) = &mut self.parts {
                parts.current.push_str(&released);
            }
            changes.push((piece, released));
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

    /// A Responses event's data with each text it repeats replaced by what the client got for
    /// that part (see the module's documentation); other events' data as it was.
    fn closing(&mut self, name: Option<&str>, data: String) -> Result<String, Blocked> {
        let Some(kind) = name.or_else(|| type_of(&data)).and_then(Closing::of) else {
            return Ok(data);
        };
        let texts = closing_texts(kind, &data);
        if kind == Closing::TextDone {
            let rest = self.window.flush()?;
            if let Some(last) = self.held.front_mut().filter(|h| h.text) {
                append_text(self.endpoint, last, &rest);
            }
            let parts = self.parts.get_or_insert_with(Parts::default);
            parts.current.push_str(&rest);
            let current = std::mem::take(&mut parts.current);
            if let Some((place, _)) = texts.first() {
                if !current.is_empty() {
                    parts.closed.insert(*place, current);
                }
            }
        }
        let mut changes: Vec<(&Piece, String)> = Vec::with_capacity(texts.len());
        for (place, piece) in &texts {
            let known = self
                .parts
                .as_ref()
                .and_then(|p| p.closed.get(place))
                .cloned();
            let text = match known {
                Some(text) => text,
                None => self.unstreamed(*place, &piece.text)?,
            };
            changes.push((piece, text));
        }
        if changes.iter().all(|(piece, text)| piece.text == *text) {
            return Ok(data);
        }
        Ok(String::from_utf8_lossy(&splice(data.as_bytes(), &changes)).into_owned())
    }

    /// A part's text that arrived only in a closing event: checked whole now, and kept for the
    /// part's later closing events.
    fn unstreamed(&mut self, place: Place, text: &str) -> Result<String, Blocked> {
        let mut checked = self.window.push(text)?;
        checked.push_str(&self.window.flush()?);
        if let Some(parts) = &mut self.parts {
            parts.closed.insert(place, checked.clone());
        }
        Ok(checked)
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

/// `body` (a client-facing SSE stream) under `window` and, once it ended, `end`'s whole-answer
/// checks: see the module's documentation. The stream's last events (its finish, usage and end
/// marker) wait for `end`; a block drops them and sends the error event instead. The guarded
/// body ends after a block; the upstream's body is dropped with it.
pub fn guard_stream<W: Window + 'static>(
    body: Body,
    endpoint: Endpoint,
    window: W,
    end: Option<EndCheck>,
) -> Body {
    let state = (body.into_data_stream(), Guarded::new(endpoint, window), end);
    let stream =
        futures_util::stream::unfold(state, |(mut inner, mut guarded, mut end)| async move {
            loop {
                if guarded.done {
                    return None;
                }
                let step = match inner.next().await {
                    Some(Ok(chunk)) => guarded.chunk(&chunk),
                    Some(Err(e)) => {
                        guarded.done = true;
                        return Some((Err(std::io::Error::other(e)), (inner, guarded, end)));
                    }
                    None => match (guarded.finish(), end.take()) {
                        (Ok(bytes), Some(end)) => match end.run(guarded.window.answer_text()).await
                        {
                            Ok(()) => Ok(bytes),
                            Err(blocked) => Err(guarded.blocked(&blocked)),
                        },
                        (step, _) => step,
                    },
                };
                let bytes = match step {
                    Ok(bytes) if bytes.is_empty() && !guarded.done => continue,
                    Ok(bytes) => bytes,
                    Err((event, _rule)) => event,
                };
                if bytes.is_empty() {
                    return None;
                }
                return Some((Ok(Bytes::from(bytes)), (inner, guarded, end)));
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

        fn flush(&mut self) -> Result<String, Blocked> {
            self.finish()
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

    #[test]
    fn a_responses_streams_closing_events_carry_the_text_the_client_got() {
        let mut guarded = Guarded::new(
            Endpoint::Responses,
            Upper {
                held: String::new(),
            },
        );
        let events = switchyard_sim::response_events("m", "hello world", 3, 1);
        let mut out = Vec::new();
        for event in &events {
            out.extend(guarded.chunk(event.as_bytes()).unwrap());
        }
        out.extend(guarded.finish().unwrap());
        let out = String::from_utf8(out).unwrap();
        assert!(!out.contains("hello world"), "{out}");
        let deltas: String = out
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .filter_map(|d| serde_json::from_str::<serde_json::Value>(d).ok())
            .filter(|v| v["type"] == "response.output_text.delta")
            .map(|v| v["delta"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(deltas, "HELLO WORLD");
        for (name, count) in [
            ("response.output_text.done", 1),
            ("response.content_part.done", 1),
            ("response.output_item.done", 1),
            ("response.completed", 1),
        ] {
            let event = out
                .split("\n\n")
                .find(|e| e.starts_with(&format!("event: {name}\n")))
                .unwrap_or_else(|| panic!("no {name}: {out}"));
            assert_eq!(event.matches("HELLO WORLD").count(), count, "{event}");
        }
    }
}
