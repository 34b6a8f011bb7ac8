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
use switchyard_state::{AttemptFailure, FailureKind, FailurePolicy, InFlightGuard};

use crate::attempt::next_data;
use crate::metrics::AttemptOutcome;
use crate::record::{StreamEnd, StreamOutcome, StreamSlot};
use crate::AppState;

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
    pub request_id: String,
    /// Held for as long as the stream lives: the channel's in-flight count.
    pub guard: InFlightGuard,
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
            UsageScanner::new(owner.protocol)
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
    Body::from_stream(futures_util::stream::unfold(relay, |mut r| async move {
        if r.done {
            return None;
        }
        if let Some(first) = r.first.take().filter(|first| !first.is_empty()) {
            let first = r.out(first);
            return Some((Ok::<_, std::io::Error>(first), r));
        }
        loop {
            let next = tokio::select! {
                biased;
                next = tokio::time::timeout(r.idle, next_data(&mut r.body)) => Some(next),
                () = r.owner.state.streams_cut.cancelled() => None,
            };
            let Some(next) = next else {
                // The gateway is shutting down: not the member's fault, nothing recorded.
                let event = r
                    .owner
                    .error_event("the gateway is shutting down; the stream was ended");
                let event = r.held_then(event);
                let event = r.out(event);
                r.end(StreamOutcome::Shutdown);
                return Some((Ok(event), r));
            };
            let reason = match next {
                Ok(Ok(Some(chunk))) => match r.translator.as_mut() {
                    None => {
                        let chunk = r.passed(chunk);
                        if chunk.is_empty() {
                            continue;
                        }
                        let chunk = r.out(chunk);
                        return Some((Ok(chunk), r));
                    }
                    Some(translator) => {
                        let mut out = Vec::new();
                        translator.push(&chunk, &mut out);
                        if out.is_empty() {
                            continue;
                        }
                        let out = r.out(Bytes::from(out));
                        return Some((Ok(out), r));
                    }
                },
                Ok(Ok(None)) => match r.translator.as_mut() {
                    None => {
                        let rest = r.held_then(Bytes::new());
                        let rest = r.out(rest);
                        r.end(StreamOutcome::Completed);
                        if rest.is_empty() {
                            return None;
                        }
                        return Some((Ok(rest), r));
                    }
                    Some(translator) if translator.upstream_done() => {
                        let mut out = Vec::new();
                        translator.finish(&mut out);
                        let out = r.out(Bytes::from(out));
                        r.end(StreamOutcome::Completed);
                        if out.is_empty() {
                            return None;
                        }
                        return Some((Ok(out), r));
                    }
                    // Ended without its protocol's final event: a cut, not an answer.
                    Some(_) => "upstream stream ended before its final event",
                },
                Ok(Err(())) => "upstream stream interrupted",
                Err(_) => "upstream stream idle timeout",
            };
            let event = r.owner.broken(reason);
            let event = r.held_then(event);
            let event = r.out(event);
            r.end(StreamOutcome::UpstreamBroken);
            return Some((Ok(event), r));
        }
    }))
}

impl StreamOwner {
    fn broken(&self, reason: &str) -> Bytes {
        let state = &self.state;
        let now = crate::unix_ms();
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
