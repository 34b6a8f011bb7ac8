//! The end of a request: its log line, its request and token metrics, written exactly once when
//! the request has *finished* — at once for a plain answer, when the stream ends for a stream
//! (however it ends: completed, broken upstream, idle, shutdown, or the client going away).

use bytes::Bytes;
use std::sync::{Arc, Mutex};

use serde::Serialize;
use switchyard_engine::{ChannelId, CredentialId, MemberId, Price, RouteId};
use switchyard_provider::Usage;
use tokio::time::Instant;

use crate::admission::{Held, RateHeaders};
use crate::attempt::AttemptError;
use crate::endpoint::Endpoint;
use crate::AppState;

/// One attempt in the request's trail (logged; never secrets).
#[derive(Debug, Clone, Serialize)]
pub struct AttemptLog {
    pub member_id: MemberId,
    pub channel_id: ChannelId,
    pub credential_id: CredentialId,
    pub status: Option<u16>,
    pub error: Option<AttemptError>,
    pub latency_ms: f64,
}

/// What happened to one request, for headers, the log line and metrics.
#[derive(Default)]
pub struct Trail {
    /// The authenticated token's name and team (set by the HTTP edge).
    pub token: Option<String>,
    pub team: Option<String>,
    /// Usage read from a plain (non-streamed) answer.
    pub usage: Option<Usage>,
    /// A plain JSON answer's body as the client got it (shared bytes, for a shadow comparison).
    pub answer: Option<bytes::Bytes>,
    /// A committed stream: its record is written when it ends.
    pub stream: Option<Arc<StreamSlot>>,
    pub route: Option<(RouteId, String)>,
    pub final_channel: Option<String>,
    /// The upstream model of the final attempt.
    pub final_model: Option<String>,
    pub attempts: Vec<AttemptLog>,
    pub breaker_tripped: bool,
    pub sticky: Option<&'static str>,
    pub upstream_micros: u64,
    /// The price of the final attempt's (channel, upstream model), if one matches.
    pub price: Option<Price>,
    /// The key's, team's and route's limits the request was admitted under.
    pub admitted: Option<Held>,
    /// The serving member's upstream limits (its channel's and its own).
    pub upstream_held: Option<Held>,
    /// OpenAI's rate-limit headers for the answer.
    pub rate: RateHeaders,
    /// The request span's trace and span ids, when traces are exported.
    pub trace: Option<(String, String)>,
    /// Called once the request has finished (a stream: when it ended), with what it got; the
    /// shadow copy of a streamed request is offered from here.
    pub on_finish: Option<OnFinish>,
}

/// What a finished request got, for [`Trail::on_finish`].
#[derive(Debug, Clone, Copy)]
pub struct Finished {
    /// Answered below 400, and a stream completed.
    pub ok: bool,
    pub usage: Usage,
    /// Pico-USD; `None`: unpriced.
    pub cost_pico: Option<u128>,
}

/// A callback run when the request has finished.
pub type OnFinish = Box<dyn FnOnce(&AppState, Finished) + Send>;

/// Everything the request line says, gathered when the answer went out.
pub struct RequestRecord {
    pub request_id: String,
    pub endpoint: Endpoint,
    pub model: String,
    /// The token's name and team, when the request authenticated.
    pub token: Option<String>,
    pub team: Option<String>,
    pub status: u16,
    pub trail: Trail,
    pub started: Instant,
}

/// The request's log line: borrowed from the record and serialized straight into the line's
/// buffer (no intermediate JSON values).
#[derive(Serialize)]
struct RequestLine<'a> {
    request_id: &'a str,
    endpoint: &'static str,
    protocol: &'static str,
    model: &'a str,
    token: Option<&'a str>,
    team: Option<&'a str>,
    route: Option<&'a str>,
    status: u16,
    attempts: &'a [AttemptLog],
    attempt_count: usize,
    switches: usize,
    first_member: Option<MemberId>,
    final_member: Option<MemberId>,
    final_channel: Option<&'a str>,
    breaker_tripped: bool,
    sticky: Option<&'static str>,
    usage: UsageLine,
    /// USD, exact; `null` when no price matched (unpriced).
    cost_usd: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream: Option<StreamLine>,
    latency_ms: f64,
    /// The trace this request's spans belong to, when traces are exported.
    #[serde(skip_serializing_if = "Option::is_none")]
    trace_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    span_id: Option<&'a str>,
}

#[derive(Serialize)]
struct UsageLine {
    input_tokens: u64,
    output_tokens: u64,
    cached_tokens: u64,
}

#[derive(Serialize)]
struct StreamLine {
    outcome: &'static str,
    bytes: u64,
}

/// How a stream ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamOutcome {
    /// The upstream's final event arrived and was passed on.
    Completed,
    /// The upstream broke, stalled or ended early; the client got an error event.
    UpstreamBroken,
    /// The gateway's shutdown grace ended it; the client got an error event.
    Shutdown,
    /// The client went away first.
    ClientClosed,
}

impl StreamOutcome {
    fn label(self) -> &'static str {
        match self {
            StreamOutcome::Completed => "completed",
            StreamOutcome::UpstreamBroken => "upstream_broken",
            StreamOutcome::Shutdown => "shutdown",
            StreamOutcome::ClientClosed => "client_closed",
        }
    }
}

/// What a finished stream knows about itself.
#[derive(Debug, Clone, Copy)]
pub struct StreamEnd {
    pub outcome: StreamOutcome,
    /// Bytes sent to the client.
    pub bytes: u64,
    pub usage: Usage,
}

/// The most bytes of one streamed answer kept for a comparison (each side).
pub const MAX_GATHERED: usize = 1 << 20;

/// The chunks of a streamed answer, kept for a shadow comparison: shared bytes, at most
/// [`MAX_GATHERED`] of them; a longer stream keeps nothing (and is not compared on content).
#[derive(Default)]
pub struct Gathered(Mutex<GatheredChunks>);

#[derive(Default)]
struct GatheredChunks {
    chunks: Vec<Bytes>,
    len: usize,
    overflow: bool,
}

impl Gathered {
    pub fn push(&self, chunk: &Bytes) {
        let mut g = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if g.overflow || chunk.is_empty() {
            return;
        }
        if g.len + chunk.len() > MAX_GATHERED {
            g.overflow = true;
            g.chunks = Vec::new();
            return;
        }
        g.len += chunk.len();
        g.chunks.push(chunk.clone());
    }

    /// The chunks, unless the stream was too long.
    pub fn take(&self) -> Option<Vec<Bytes>> {
        let mut g = self.0.lock().unwrap_or_else(|e| e.into_inner());
        (!g.overflow).then(|| std::mem::take(&mut g.chunks))
    }
}

/// Where a stream's record meets the stream's end: whichever arrives second writes the line.
/// A stream a shadow rule sampled also keeps its chunks here, as they go out.
#[derive(Default)]
pub struct StreamSlot {
    slot: Mutex<Slot>,
    gathered: std::sync::OnceLock<Arc<Gathered>>,
}

#[derive(Default)]
enum Slot {
    #[default]
    Waiting,
    Record(Box<RequestRecord>),
    Ended(StreamEnd),
    Done,
}

impl StreamSlot {
    pub fn new() -> Arc<StreamSlot> {
        Arc::new(StreamSlot::default())
    }

    /// From now on the chunks going out to the client are kept (before the body is first
    /// polled: all of them).
    pub fn gather(&self) -> Arc<Gathered> {
        Arc::clone(self.gathered.get_or_init(Default::default))
    }

    /// Where the chunks are kept, when they are.
    pub fn gathering(&self) -> Option<&Gathered> {
        self.gathered.get().map(|g| &**g)
    }

    /// The answer went out: keep the record until the stream ends (or write it now if it has).
    pub fn attach(&self, record: RequestRecord, state: &AppState) {
        let mut slot = self.slot.lock().unwrap_or_else(|e| e.into_inner());
        match std::mem::take(&mut *slot) {
            Slot::Ended(end) => {
                *slot = Slot::Done;
                drop(slot);
                record.write(state, Some(end));
            }
            Slot::Waiting => *slot = Slot::Record(Box::new(record)),
            other => *slot = other,
        }
    }

    /// The stream ended; only the first end counts.
    pub fn end(&self, end: StreamEnd, state: &AppState) {
        let mut slot = self.slot.lock().unwrap_or_else(|e| e.into_inner());
        match std::mem::take(&mut *slot) {
            Slot::Record(record) => {
                *slot = Slot::Done;
                drop(slot);
                record.write(state, Some(end));
            }
            Slot::Waiting => *slot = Slot::Ended(end),
            other => *slot = other,
        }
    }
}

impl RequestRecord {
    fn route(&self) -> &str {
        self.trail.route.as_ref().map_or("", |(_, p)| p.as_str())
    }

    fn channel(&self) -> &str {
        self.trail.final_channel.as_deref().unwrap_or("")
    }

    /// Metrics and the log line. `stream` is `None` for a plain answer (its usage is in the
    /// trail).
    pub fn write(mut self, state: &AppState, stream: Option<StreamEnd>) {
        let reported = stream.map(|s| s.usage).or(self.trail.usage);
        let usage = reported.unwrap_or_default();
        let cost_pico = self.cost_pico(&usage);
        let succeeded =
            self.status < 400 && stream.is_none_or(|s| s.outcome == StreamOutcome::Completed);
        // The limits the request was admitted under learn what it really used.
        for held in [self.trail.admitted.take(), self.trail.upstream_held.take()]
            .into_iter()
            .flatten()
        {
            held.finish(reported, cost_pico, succeeded);
        }
        if let Some(on_finish) = self.trail.on_finish.take() {
            let served = self.trail.final_channel.is_some();
            on_finish(
                state,
                Finished {
                    ok: succeeded && served,
                    usage,
                    cost_pico,
                },
            );
        }
        self.count(state, &usage, cost_pico);
        if !switchyard_telemetry::record_enabled!() {
            return;
        }
        let line = self.line(usage, cost_pico, stream);
        switchyard_telemetry::record::write("switchyard_data_plane::request", "request", &line);
    }

    /// Cost from the usage the upstream reported: `None` (unpriced) when no price matched, or
    /// when no channel served.
    fn cost_pico(&self, usage: &Usage) -> Option<u128> {
        let served = self.trail.final_channel.is_some();
        self.trail
            .price
            .as_ref()
            .filter(|_| served)
            .map(|p| p.cost_pico(usage.input_tokens, usage.output_tokens, usage.cached_tokens))
    }

    /// The request, spend and token metrics, and (fleet mode) the usage accounting of requests
    /// that reached a channel.
    fn count(&self, state: &AppState, usage: &Usage, cost_pico: Option<u128>) {
        let (route, channel, token) = (self.route(), self.channel(), self.token.as_deref());
        if let Some(cost) = cost_pico {
            state.metrics.spend(route, channel, cost);
        }
        state
            .metrics
            .request(self.endpoint, route, channel, self.status);
        state
            .metrics
            .usage(route, channel, token.unwrap_or(""), usage);
        if let (Some(reporter), Some(token)) = (&state.usage, token) {
            if !channel.is_empty() {
                reporter.record(
                    crate::usage::UsageKey {
                        token: token.to_owned(),
                        team: self.team.clone(),
                        route: route.to_owned(),
                        channel: channel.to_owned(),
                        model: self.trail.final_model.clone().unwrap_or_default(),
                    },
                    *usage,
                    cost_pico,
                );
            }
        }
    }

    /// The request's log line, borrowed from the record.
    fn line(
        &self,
        usage: Usage,
        cost_pico: Option<u128>,
        stream: Option<StreamEnd>,
    ) -> RequestLine<'_> {
        let trail = &self.trail;
        RequestLine {
            request_id: &self.request_id,
            endpoint: self.endpoint.label(),
            protocol: self.endpoint.protocol().as_str(),
            model: &self.model,
            token: self.token.as_deref(),
            team: self.team.as_deref(),
            route: trail.route.as_ref().map(|(_, p)| p.as_str()),
            status: self.status,
            attempts: &trail.attempts,
            attempt_count: trail.attempts.len(),
            switches: trail.attempts.len().saturating_sub(1),
            first_member: trail.attempts.first().map(|a| a.member_id),
            final_member: trail.attempts.last().map(|a| a.member_id),
            final_channel: trail.final_channel.as_deref(),
            breaker_tripped: trail.breaker_tripped,
            sticky: trail.sticky,
            usage: UsageLine {
                input_tokens: usage.input_tokens,
                output_tokens: usage.output_tokens,
                cached_tokens: usage.cached_tokens,
            },
            cost_usd: cost_pico.map(switchyard_engine::limit::format_pico_usd),
            stream: stream.map(|s| StreamLine {
                outcome: s.outcome.label(),
                bytes: s.bytes,
            }),
            latency_ms: self.started.elapsed().as_secs_f64() * 1000.0,
            trace_id: trail.trace.as_ref().map(|(trace, _)| trace.as_str()),
            span_id: trail.trace.as_ref().map(|(_, span)| span.as_str()),
        }
    }
}
