//! An open realtime session: frames relayed both ways as they come (text and binary; each side's
//! pings are answered by this proxy, not passed on), each `response.done` from upstream
//! accounted as one response's usage, and the session's end — a close from either side, a
//! message over the size limit (closed with 1009), a side gone, the proxy draining (1001 to
//! both), or no frame either way for the idle timeout — said to both sides with a close frame.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{SinkExt, StreamExt};
use serde::Deserialize;
use switchyard_engine::limit::Price;
use switchyard_provider::{Usage, MAX_REQUEST_TOKENS};
use switchyard_state::InFlightGuard;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};
use tokio_tungstenite::WebSocketStream;
use tokio_util::sync::CancellationToken;

use crate::admission::Held;
use crate::context::Ctx;
use crate::state::AppState;
use crate::usage::UsageKey;

/// How long a closing side gets to answer our close frame before its connection is dropped.
const CLOSE_WAIT: Duration = Duration::from_secs(2);

/// What a session accounts to: its key's usage and the limits it was admitted under.
pub struct Account {
    state: Arc<AppState>,
    request_id: String,
    /// Token name, team, route, channel and upstream model.
    key: UsageKey,
    price: Option<Price>,
    /// The client's limits taken at the handshake (a `concurrent` one counts the session until
    /// it ends); given the session's usage at its end.
    held: Option<Held>,
    _in_flight: InFlightGuard,
    /// No frame either way for this long ends the session.
    idle: Duration,
    responses: u64,
    total: Usage,
    cost_pico: Option<u128>,
}

impl Account {
    /// The account of the session the handshake of `ctx` opened (its trail names the client,
    /// the route and the final channel).
    pub fn new(state: &Arc<AppState>, ctx: &mut Ctx<'_>, in_flight: InFlightGuard) -> Account {
        let trail = &mut ctx.trail;
        Account {
            state: Arc::clone(state),
            request_id: ctx.request_id.to_owned(),
            key: UsageKey {
                token: trail.token.clone().unwrap_or_default(),
                team: trail.team.clone(),
                route: trail
                    .route
                    .as_ref()
                    .map(|(_, p)| p.clone())
                    .unwrap_or_default(),
                channel: trail.final_channel.clone().unwrap_or_default(),
                model: trail.final_model.clone().unwrap_or_default(),
            },
            price: trail.price.clone(),
            held: trail.admitted.take(),
            _in_flight: in_flight,
            idle: Duration::from_millis(ctx.view.snapshot.settings.stream_idle_timeout_ms),
            responses: 0,
            total: Usage::default(),
            cost_pico: None,
        }
    }

    /// One response's usage, recorded like a request's: metrics, spend, the usage report.
    fn response_done(&mut self, usage: Usage) {
        let key = &self.key;
        let cost = self
            .price
            .as_ref()
            .map(|p| p.cost_pico(usage.input_tokens, usage.output_tokens, usage.cached_tokens));
        let metrics = &self.state.metrics;
        metrics.usage(&key.route, &key.channel, &key.token, &usage);
        if let Some(cost) = cost {
            metrics.spend(&key.route, &key.channel, key.team.as_deref(), cost);
            self.cost_pico = Some(self.cost_pico.unwrap_or(0).saturating_add(cost));
        }
        if let Some(reporter) = &self.state.usage {
            reporter.record(key.clone(), usage, cost);
        }
        self.responses += 1;
        self.total = Usage {
            input_tokens: self.total.input_tokens.saturating_add(usage.input_tokens),
            output_tokens: self.total.output_tokens.saturating_add(usage.output_tokens),
            cached_tokens: self.total.cached_tokens.saturating_add(usage.cached_tokens),
        };
    }

    /// The session ended: its limits learn its usage and give back its concurrency slot.
    fn finish(mut self, ended: End) {
        if let Some(held) = self.held.take() {
            held.finish(Some(self.total), self.cost_pico, true);
        }
        tracing::info!(
            request_id = %self.request_id,
            channel = %self.key.channel,
            responses = self.responses,
            input_tokens = self.total.input_tokens,
            output_tokens = self.total.output_tokens,
            ended = ended.label(),
            "realtime session ended"
        );
    }
}

/// The `usage` of a `response.done` server event (OpenAI's Realtime API), typed: what is read of
/// it, the rest of the event ignored.
#[derive(Debug, Deserialize)]
struct ResponseDone {
    #[serde(rename = "type")]
    kind: String,
    response: DoneResponse,
}

#[derive(Debug, Deserialize)]
struct DoneResponse {
    #[serde(default)]
    usage: Option<RealtimeUsage>,
}

#[derive(Debug, Deserialize)]
struct RealtimeUsage {
    #[serde(default)]
    input_tokens: u64,
    #[serde(default)]
    output_tokens: u64,
    #[serde(default)]
    input_token_details: Option<InputTokenDetails>,
}

#[derive(Debug, Deserialize)]
struct InputTokenDetails {
    #[serde(default)]
    cached_tokens: u64,
}

/// The usage a server event reports, when it is a `response.done` carrying one (each figure
/// capped at what one request may report).
fn response_usage(text: &str) -> Option<Usage> {
    // Cheap first: an event that cannot be a `response.done` (an audio delta) is not parsed.
    memchr::memmem::find(text.as_bytes(), b"\"response.done\"")?;
    let done: ResponseDone = serde_json::from_str(text).ok()?;
    if done.kind != "response.done" {
        return None;
    }
    let usage = done.response.usage?;
    let cap = |n: u64| n.min(MAX_REQUEST_TOKENS);
    Some(Usage {
        input_tokens: cap(usage.input_tokens),
        output_tokens: cap(usage.output_tokens),
        cached_tokens: cap(usage
            .input_token_details
            .map_or(0, |d| d.cached_tokens)
            .min(usage.input_tokens)),
    })
}

/// How a session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// A side sent its close frame (passed on to the other).
    Closed,
    /// The client sent a message over the limit.
    ClientTooBig,
    /// The upstream sent a message over the limit.
    UpstreamTooBig,
    /// The client's connection broke or ended without a close frame.
    ClientGone,
    /// The upstream's connection broke or ended without a close frame.
    UpstreamGone,
    Draining,
    Idle,
}

impl End {
    fn label(self) -> &'static str {
        match self {
            End::Closed => "closed",
            End::ClientTooBig => "client_message_too_big",
            End::UpstreamTooBig => "upstream_message_too_big",
            End::ClientGone => "client_gone",
            End::UpstreamGone => "upstream_gone",
            End::Draining => "draining",
            End::Idle => "idle",
        }
    }

    /// The close frames the client and the upstream get (`None`: that side closed, or is gone).
    fn closes(self) -> (Option<CloseFrame>, Option<CloseFrame>) {
        let frame = |code, reason: &'static str| {
            Some(CloseFrame {
                code,
                reason: reason.into(),
            })
        };
        let too_big = "message too big";
        match self {
            End::Closed => (None, None),
            End::ClientTooBig => (
                frame(CloseCode::Size, too_big),
                frame(CloseCode::Normal, "client session ended"),
            ),
            End::UpstreamTooBig => (
                frame(CloseCode::Error, "the upstream sent a message too big"),
                frame(CloseCode::Size, too_big),
            ),
            End::ClientGone => (None, frame(CloseCode::Away, "client gone")),
            End::UpstreamGone => (frame(CloseCode::Error, "upstream connection lost"), None),
            End::Draining => (
                frame(CloseCode::Away, "server shutting down"),
                frame(CloseCode::Away, "server shutting down"),
            ),
            End::Idle => (
                frame(CloseCode::Away, "idle timeout"),
                frame(CloseCode::Away, "idle timeout"),
            ),
        }
    }
}

/// One side of the relay: the half it writes to and the half it reads from.
struct Side<S> {
    tx: SplitSink<WebSocketStream<S>, Message>,
    rx: SplitStream<WebSocketStream<S>>,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Side<S> {
    fn of(socket: WebSocketStream<S>) -> Side<S> {
        let (tx, rx) = socket.split();
        Side { tx, rx }
    }

    /// Ends this side: our close frame when it gets one (else the close handshake it started
    /// is completed), then what it still sends is read until it closes, for [`CLOSE_WAIT`].
    async fn close(mut self, frame: Option<CloseFrame>) {
        let closed = match frame {
            Some(frame) => self.tx.send(Message::Close(Some(frame))).await,
            None => self.tx.close().await,
        };
        if closed.is_err() {
            return;
        }
        let drained = async { while let Some(Ok(_)) = self.rx.next().await {} };
        let _ = tokio::time::timeout(CLOSE_WAIT, drained).await;
    }
}

/// What the relay learned from one step.
enum Step {
    FromClient(Option<Result<Message, WsError>>),
    FromUpstream(Option<Result<Message, WsError>>),
    Draining,
    Idle,
}

/// Relays the session until it ends, then closes both sides and settles its account.
pub async fn relay<C, U>(
    client: WebSocketStream<C>,
    upstream: WebSocketStream<U>,
    mut account: Account,
    draining: CancellationToken,
) where
    C: AsyncRead + AsyncWrite + Unpin,
    U: AsyncRead + AsyncWrite + Unpin,
{
    let metrics = Arc::clone(&account.state.metrics);
    metrics.realtime_sessions.fetch_add(1, Relaxed);
    let (mut client, mut upstream) = (Side::of(client), Side::of(upstream));
    let idle = account.idle;
    let end = loop {
        let step = tokio::select! {
            m = client.rx.next() => Step::FromClient(m),
            m = upstream.rx.next() => Step::FromUpstream(m),
            () = draining.cancelled() => Step::Draining,
            () = tokio::time::sleep(idle) => Step::Idle,
        };
        let ended = match step {
            Step::FromClient(message) => {
                from_client(message, &mut upstream, &metrics.realtime_frames).await
            }
            Step::FromUpstream(message) => from_upstream(message, &mut client, &mut account).await,
            Step::Draining => Some(End::Draining),
            Step::Idle => Some(End::Idle),
        };
        if let Some(end) = ended {
            break end;
        }
    };
    let (to_client, to_upstream) = end.closes();
    tokio::join!(client.close(to_client), upstream.close(to_upstream));
    metrics.realtime_sessions.fetch_sub(1, Relaxed);
    account.finish(end);
}

/// A client frame: passed upstream (data and close frames), or how the session ends.
async fn from_client<U: AsyncRead + AsyncWrite + Unpin>(
    message: Option<Result<Message, WsError>>,
    upstream: &mut Side<U>,
    frames: &crate::metrics::Family<1>,
) -> Option<End> {
    match message {
        Some(Ok(message @ (Message::Text(_) | Message::Binary(_)))) => {
            frames.add(["client_to_upstream"], 1);
            upstream
                .tx
                .send(message)
                .await
                .err()
                .map(|_| End::UpstreamGone)
        }
        Some(Ok(Message::Close(frame))) => {
            let _ = upstream.tx.send(Message::Close(frame)).await;
            Some(End::Closed)
        }
        // Pings are answered here; pongs and raw frames are this hop's own.
        Some(Ok(_)) => None,
        Some(Err(WsError::Capacity(_))) => Some(End::ClientTooBig),
        Some(Err(_)) | None => Some(End::ClientGone),
    }
}

/// An upstream frame: passed to the client (a `response.done` accounted first), or how the
/// session ends.
async fn from_upstream<C: AsyncRead + AsyncWrite + Unpin>(
    message: Option<Result<Message, WsError>>,
    client: &mut Side<C>,
    account: &mut Account,
) -> Option<End> {
    match message {
        Some(Ok(message @ (Message::Text(_) | Message::Binary(_)))) => {
            if let Message::Text(text) = &message {
                if let Some(usage) = response_usage(text.as_str()) {
                    account.response_done(usage);
                }
            }
            account
                .state
                .metrics
                .realtime_frames
                .add(["upstream_to_client"], 1);
            client.tx.send(message).await.err().map(|_| End::ClientGone)
        }
        Some(Ok(Message::Close(frame))) => {
            let _ = client.tx.send(Message::Close(frame)).await;
            Some(End::Closed)
        }
        Some(Ok(_)) => None,
        Some(Err(WsError::Capacity(_))) => Some(End::UpstreamTooBig),
        Some(Err(_)) | None => Some(End::UpstreamGone),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    #[test]
    fn a_response_done_reports_its_usage_and_nothing_else_does() {
        let done = r#"{"event_id":"e","response":{"id":"r","output":[],"usage":{"input_tokens":30,"output_tokens":7,"total_tokens":37,"input_token_details":{"cached_tokens":12}}},"type":"response.done"}"#;
        assert_eq!(
            response_usage(done),
            Some(Usage {
                input_tokens: 30,
                output_tokens: 7,
                cached_tokens: 12
            })
        );
        // No usage block: nothing to account.
        assert_eq!(
            response_usage(r#"{"type":"response.done","response":{"id":"r"}}"#),
            None
        );
        // Another event that mentions `response.done` in its text.
        let delta = r#"{"type":"response.output_text.delta","delta":"\"response.done\"","response":{"usage":{"input_tokens":1}}}"#;
        assert_eq!(response_usage(delta), None);
        assert_eq!(response_usage("not json \"response.done\""), None);
        // Figures are capped, and cached tokens never exceed the input.
        let huge = r#"{"type":"response.done","response":{"usage":{"input_tokens":5,"output_tokens":18446744073709551615,"input_token_details":{"cached_tokens":9}}}}"#;
        let usage = response_usage(huge).unwrap();
        assert_eq!(usage.output_tokens, MAX_REQUEST_TOKENS);
        assert_eq!(usage.cached_tokens, 5);
    }

    #[test]
    fn each_end_closes_each_side_as_it_should() {
        let code = |f: Option<CloseFrame>| f.map(|f| u16::from(f.code));
        let of = |end: End| {
            let (client, upstream) = end.closes();
            (code(client), code(upstream))
        };
        assert_eq!(of(End::Closed), (None, None));
        assert_eq!(of(End::ClientTooBig), (Some(1009), Some(1000)));
        assert_eq!(of(End::UpstreamTooBig), (Some(1011), Some(1009)));
        assert_eq!(of(End::ClientGone), (None, Some(1001)));
        assert_eq!(of(End::UpstreamGone), (Some(1011), None));
        assert_eq!(of(End::Draining), (Some(1001), Some(1001)));
        assert_eq!(of(End::Idle), (Some(1001), Some(1001)));
    }
}
