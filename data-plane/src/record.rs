//! The end of a request: its log line, its request and token metrics, written exactly once when
//! the request has *finished* — at once for a plain answer, when the stream ends for a stream
//! (however it ends: completed, broken upstream, idle, shutdown, or the client going away).

use std::sync::{Arc, Mutex};

use serde_json::{json, Map, Value};
use switchyard_provider::Usage;
use tokio::time::Instant;

use crate::endpoint::Endpoint;
use crate::failover::Trail;
use crate::AppState;

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

/// Where a stream's record meets the stream's end: whichever arrives second writes the line.
#[derive(Default)]
pub struct StreamSlot(Mutex<Slot>);

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

    /// The answer went out: keep the record until the stream ends (or write it now if it has).
    pub fn attach(&self, record: RequestRecord, state: &AppState) {
        let mut slot = self.0.lock().unwrap_or_else(|e| e.into_inner());
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
        let mut slot = self.0.lock().unwrap_or_else(|e| e.into_inner());
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
    pub fn write(self, state: &AppState, stream: Option<StreamEnd>) {
        let usage = stream
            .map(|s| s.usage)
            .or(self.trail.usage)
            .unwrap_or_default();
        let (route, channel, token) = (self.route(), self.channel(), self.token.as_deref());
        state
            .metrics
            .request(self.endpoint, route, channel, self.status);
        state
            .metrics
            .usage(route, channel, token.unwrap_or(""), &usage);
        // Usage accounting (fleet mode): requests that reached a channel.
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
                    usage,
                );
            }
        }
        if !switchyard_telemetry::record_enabled!() {
            return;
        }
        let trail = &self.trail;
        let mut fields = Map::new();
        let mut put = |k: &str, v: Value| {
            fields.insert(k.to_owned(), v);
        };
        put("request_id", json!(self.request_id));
        put("endpoint", json!(self.endpoint.label()));
        put("protocol", json!(self.endpoint.protocol().as_str()));
        put("model", json!(self.model));
        put("token", json!(self.token));
        put("team", json!(self.team));
        put("route", json!(trail.route.as_ref().map(|(_, p)| p)));
        put("status", json!(self.status));
        put("attempts", json!(trail.attempts));
        put("attempt_count", json!(trail.attempts.len()));
        put("switches", json!(trail.attempts.len().saturating_sub(1)));
        put(
            "first_member",
            json!(trail.attempts.first().map(|a| a.member_id)),
        );
        put(
            "final_member",
            json!(trail.attempts.last().map(|a| a.member_id)),
        );
        put("final_channel", json!(trail.final_channel));
        put("breaker_tripped", json!(trail.breaker_tripped));
        put("sticky", json!(trail.sticky));
        put(
            "usage",
            json!({
                "input_tokens": usage.input_tokens,
                "output_tokens": usage.output_tokens,
                "cached_tokens": usage.cached_tokens,
            }),
        );
        if let Some(stream) = stream {
            put(
                "stream",
                json!({"outcome": stream.outcome.label(), "bytes": stream.bytes}),
            );
        }
        put(
            "latency_ms",
            json!(self.started.elapsed().as_secs_f64() * 1000.0),
        );
        switchyard_telemetry::record::write("switchyard_data_plane::request", "request", fields);
    }
}
