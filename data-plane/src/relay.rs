//! Relaying a committed stream to the client: byte for byte when the protocols match, through a
//! [`StreamTranslator`] event by event when they differ. One exception to "byte for byte": an
//! OpenAI stream the gateway asked for usage on behalf of a client that did not loses the usage
//! chunk (and the `"usage":null` of the other chunks) on the way, event by event. Once the first byte is out, nothing
//! can be retried: a broken or idle upstream ends the stream with an error event in the client's
//! protocol and cools the member.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use switchyard_provider::{stream_error_event, Protocol, StreamTranslator, UsageScanner};
use switchyard_state::{unix_ms, AttemptFailure, FailureKind, FailurePolicy, InFlightGuard};

use crate::attempt::next_data;
use crate::endpoint::Endpoint;
use crate::metrics::AttemptOutcome;
use crate::record::{StreamEnd, StreamOutcome, StreamSlot};
use crate::state::AppState;

/// Who to blame when the stream breaks.
pub struct StreamOwner {
    pub state: Arc<AppState>,
    pub member: i64,
    pub channel: i64,
    pub upstream_model: String,
    pub channel_name: String,
    pub policy: FailurePolicy,
    /// The client's protocol (error events are written in it).
    pub protocol: Protocol,
    /// The endpoint asked (its usage reader: a Responses API stream names its figures its own way).
    pub endpoint: Endpoint,
    pub request_id: String,
    /// Held (never read) for as long as the stream lives: the channel's in-flight count, given
    /// back when the owner drops.
    pub _in_flight: InFlightGuard,
    /// Where the request's record waits for the stream's end.
    pub slot: Arc<StreamSlot>,
}

struct Relay {
    first: Option<Bytes>,
    body: Body,
    idle: Duration,
    owner: StreamOwner,
    translator: Option<Box<StreamTranslator>>,
    /// Same-protocol streams: usage read from the events as they pass (and the usage chunk
    /// removed when the gateway asked for it).
    scanner: Option<UsageScanner>,
    bytes: u64,
    done: bool,
}

impl Relay {
    fn out(&mut self, chunk: Bytes) -> Bytes {
        self.bytes += chunk.len() as u64;
        if let Some(gathered) = self.owner.slot.gathering() {
            gathered.push(&chunk);
        }
        chunk
    }

    /// What the client gets of a passed-through chunk: the chunk itself, or what the stripping
    /// scanner lets through (whole events; empty while an event is incomplete).
    fn passed(&mut self, chunk: Bytes) -> Bytes {
        match self.scanner.as_mut() {
            Some(scanner) if scanner.strips() => {
                let mut out = Vec::new();
                scanner.filter(&chunk, &mut out);
                Bytes::from(out)
            }
            Some(scanner) => {
                scanner.push(&chunk);
                chunk
            }
            None => chunk,
        }
    }

    /// A stripping scanner's held bytes (an event the stream ended inside), then `tail`.
    fn held_then(&mut self, tail: Bytes) -> Bytes {
        match self.scanner.as_mut() {
            Some(scanner) if scanner.strips() => {
                let mut out = Vec::new();
                scanner.finish(&mut out);
                if out.is_empty() {
                    return tail;
                }
                out.extend_from_slice(&tail);
                Bytes::from(out)
            }
            _ => tail,
        }
    }

    /// Ends the stream: the request's record gets its outcome, bytes and usage.
    fn end(&mut self, outcome: StreamOutcome) {
        if self.done {
            return;
        }
        self.done = true;
        let usage = match (&self.translator, &self.scanner) {
            (Some(translator), _) => translator.usage(),
            (None, Some(scanner)) => scanner.usage(),
            (None, None) => Default::default(),
        };
        let end = StreamEnd {
            outcome,
            bytes: self.bytes,
            usage,
        };
        self.owner.slot.end(end, &self.owner.state);
    }
}

impl Drop for Relay {
    /// Dropped before its end: the client went away.
    fn drop(&mut self) {
        self.end(StreamOutcome::ClientClosed);
    }
}

/// The client-facing body: `first`, then the rest of `body` (translated when `translator` is
/// set; without the usage chunk the gateway asked for when `strip_usage_chunk`), with the idle
/// timeout per upstream chunk. `first` is as the upstream sent it when there is no translator.
pub fn relay(
    first: Bytes,
    body: Body,
    idle: Duration,
    owner: StreamOwner,
    translator: Option<Box<StreamTranslator>>,
    strip_usage_chunk: bool,
) -> Body {
    let scanner = translator.is_none().then(|| {
        if strip_usage_chunk {
            UsageScanner::stripping_usage(owner.protocol)
        } else {
            owner.endpoint.usage_scanner()
        }
    });
    let mut relay = Relay {
        first: None,
        body,
        idle,
        owner,
        translator,
        scanner,
        bytes: 0,
        done: false,
    };
    relay.first = Some(relay.passed(first));
    Body::from_stream(futures_util::stream::unfold(relay, Relay::next))
}

/// What one read of the upstream body means for the client.
enum Step {
    /// Bytes for the client.
    Send(Bytes),
    /// Nothing for the client yet (an event still incomplete, or one that translates to
    /// nothing): read on.
    ReadOn,
    /// The upstream's stream is complete: what is left for the client (maybe nothing).
    Completed(Bytes),
    /// The upstream broke, stalled or ended early: why, for the error event.
    Broken(&'static str),
    /// The gateway is shutting down and cuts its streams.
    Shutdown,
}

impl Relay {
    /// The stream's next piece for the client: the first chunk, then what the upstream sends,
    /// until the stream has ended.
    async fn next(mut self) -> Option<(Result<Bytes, std::io::Error>, Relay)> {
        if self.done {
            return None;
        }
        if let Some(first) = self.first.take().filter(|first| !first.is_empty()) {
            let first = self.out(first);
            return Some((Ok(first), self));
        }
        let bytes = loop {
            match self.step().await {
                Step::ReadOn => continue,
                Step::Send(chunk) => break self.out(chunk),
                Step::Completed(rest) => {
                    let rest = self.out(rest);
                    self.end(StreamOutcome::Completed);
                    if rest.is_empty() {
                        return None;
                    }
                    break rest;
                }
                Step::Broken(reason) => {
                    let event = self.owner.broken(reason);
                    break self.last_event(event, StreamOutcome::UpstreamBroken);
                }
                Step::Shutdown => {
                    // Not the member's fault: nothing recorded against it.
                    let event = self
                        .owner
                        .error_event("the gateway is shutting down; the stream was ended");
                    break self.last_event(event, StreamOutcome::Shutdown);
                }
            }
        };
        Some((Ok(bytes), self))
    }

    /// Reads the upstream once, within the idle timeout (or until the gateway cuts its
    /// streams).
    async fn step(&mut self) -> Step {
        let next = tokio::select! {
            biased;
            next = tokio::time::timeout(self.idle, next_data(&mut self.body)) => next,
            () = self.owner.state.streams_cut.cancelled() => return Step::Shutdown,
        };
        match next {
            Ok(Ok(Some(chunk))) => self.chunk(chunk),
            Ok(Ok(None)) => self.upstream_end(),
            Ok(Err(())) => Step::Broken("upstream stream interrupted"),
            Err(_) => Step::Broken("upstream stream idle timeout"),
        }
    }

    /// An upstream chunk: passed on (or held, while an event is incomplete), or translated.
    fn chunk(&mut self, chunk: Bytes) -> Step {
        let out = match self.translator.as_mut() {
            None => self.passed(chunk),
            Some(translator) => {
                let mut out = Vec::new();
                translator.push(&chunk, &mut out);
                Bytes::from(out)
            }
        };
        if out.is_empty() {
            Step::ReadOn
        } else {
            Step::Send(out)
        }
    }

    /// The upstream's body ended: complete, with what is still held or the translation's last
    /// events — unless a translated stream ended without its protocol's final event (a cut, not
    /// an answer).
    fn upstream_end(&mut self) -> Step {
        match self.translator.as_mut() {
            None => Step::Completed(self.held_then(Bytes::new())),
            Some(translator) if translator.upstream_done() => {
                let mut out = Vec::new();
                translator.finish(&mut out);
                Step::Completed(Bytes::from(out))
            }
            Some(_) => Step::Broken("upstream stream ended before its final event"),
        }
    }

    /// The stream's last piece, an error event (after what a stripping scanner still held); the
    /// stream ends with `outcome`.
    fn last_event(&mut self, event: Bytes, outcome: StreamOutcome) -> Bytes {
        let event = self.held_then(event);
        let event = self.out(event);
        self.end(outcome);
        event
    }
}

impl StreamOwner {
    fn broken(&self, reason: &str) -> Bytes {
        let state = &self.state;
        let now = unix_ms();
        let effect = state.store.record_failure(
            &AttemptFailure {
                member: self.member,
                channel: self.channel,
                upstream_model: &self.upstream_model,
                kind: FailureKind::StreamBroken,
                retry_after_ms: None,
            },
            &self.policy,
            now,
        );
        state
            .metrics
            .attempt(&self.channel_name, AttemptOutcome::StreamBroken);
        if effect.cooled_until.is_some() {
            state
                .metrics
                .cooldowns
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        tracing::warn!(
            request_id = %self.request_id,
            member_id = self.member,
            channel_id = self.channel,
            reason,
            "stream broke after its first byte; ended with an error event"
        );
        self.error_event(reason)
    }

    fn error_event(&self, reason: &str) -> Bytes {
        Bytes::from(stream_error_event(self.protocol, reason))
    }
}
