//! Relaying a committed stream to the client: byte for byte when the protocols match, through a
//! [`StreamTranslator`] event by event when they differ. Once the first byte is out, nothing
//! can be retried: a broken or idle upstream ends the stream with an error event in the client's
//! protocol and cools the member.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use switchyard_provider::{stream_error_event, Protocol, StreamTranslator};
use switchyard_state::{AttemptFailure, FailureKind, FailurePolicy, InFlightGuard};

use crate::attempt::next_data;
use crate::metrics::AttemptOutcome;
use crate::AppState;

/// Who to blame when the stream breaks.
pub struct StreamOwner {
    pub state: Arc<AppState>,
    pub member: i64,
    pub channel: i64,
    pub upstream_model: String,
    pub policy: FailurePolicy,
    /// The client's protocol (error events are written in it).
    pub protocol: Protocol,
    pub request_id: String,
    /// Held for as long as the stream lives: the channel's in-flight count.
    pub guard: InFlightGuard,
}

struct Relay {
    first: Option<Bytes>,
    body: Body,
    idle: Duration,
    owner: StreamOwner,
    translator: Option<Box<StreamTranslator>>,
    done: bool,
}

/// The client-facing body: `first`, then the rest of `body` (translated when `translator` is
/// set), with the idle timeout per upstream chunk.
pub fn relay(
    first: Bytes,
    body: Body,
    idle: Duration,
    owner: StreamOwner,
    translator: Option<Box<StreamTranslator>>,
) -> Body {
    let relay = Relay {
        first: Some(first),
        body,
        idle,
        owner,
        translator,
        done: false,
    };
    Body::from_stream(futures_util::stream::unfold(relay, |mut r| async move {
        if r.done {
            return None;
        }
        if let Some(first) = r.first.take() {
            return Some((Ok::<_, std::io::Error>(first), r));
        }
        loop {
            let cut = r.owner.state.streams_cut.clone();
            let next = tokio::select! {
                biased;
                next = tokio::time::timeout(r.idle, next_data(&mut r.body)) => next,
                () = cut.cancelled() => {
                    // The gateway is shutting down: not the member's fault, nothing recorded.
                    r.done = true;
                    let event = r.owner.error_event("the gateway is shutting down; the stream was ended");
                    return Some((Ok(event), r));
                }
            };
            let reason = match next {
                Ok(Ok(Some(chunk))) => match r.translator.as_mut() {
                    None => return Some((Ok(chunk), r)),
                    Some(translator) => {
                        let mut out = Vec::new();
                        translator.push(&chunk, &mut out);
                        if out.is_empty() {
                            continue;
                        }
                        return Some((Ok(Bytes::from(out)), r));
                    }
                },
                Ok(Ok(None)) => match r.translator.as_mut() {
                    None => return None,
                    Some(translator) if translator.upstream_done() => {
                        r.done = true;
                        let mut out = Vec::new();
                        translator.finish(&mut out);
                        if out.is_empty() {
                            return None;
                        }
                        return Some((Ok(Bytes::from(out)), r));
                    }
                    // Ended without its protocol's final event: a cut, not an answer.
                    Some(_) => "upstream stream ended before its final event",
                },
                Ok(Err(())) => "upstream stream interrupted",
                Err(_) => "upstream stream idle timeout",
            };
            r.done = true;
            let event = r.owner.broken(reason);
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
        state.metrics.attempt(AttemptOutcome::StreamBroken);
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
