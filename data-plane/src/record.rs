//! The end of a request: its log line, its request and token metrics, written exactly once when
//! the request has *finished* — for a plain answer, the metrics at once and the line once the
//! answer has been written ([`LineAfter`]); when the stream ends for a stream (however it ends:
//! completed, broken upstream, idle, shutdown, or the client going away).

use bytes::Bytes;
use std::sync::{Arc, Mutex};

use switchyard_engine::{ChannelId, CredentialId, MemberId, Price, RouteId};
use switchyard_provider::Usage;
use switchyard_telemetry::json;
use tokio::time::Instant;

use crate::admission::{Held, RateHeaders};
use crate::attempt::AttemptError;
use crate::endpoint::Endpoint;
use crate::shadow::{Finished, Gathered};
use crate::state::AppState;
use crate::upstream::TransportCause;

/// One attempt in the request's trail (logged; never secrets). The request line writes it by
/// hand; the derived `Serialize` is the tests' oracle for those bytes.
#[derive(Debug, Clone)]
#[cfg_attr(test, derive(serde::Serialize))]
pub struct AttemptLog {
    pub member_id: MemberId,
    pub channel_id: ChannelId,
    pub credential_id: CredentialId,
    pub status: Option<u16>,
    pub error: Option<AttemptError>,
    /// What a failure in transport came down to (written only when there is one).
    #[cfg_attr(test, serde(skip_serializing_if = "Option::is_none"))]
    pub cause: Option<TransportCause>,
    pub latency_ms: f64,
}

/// What happened to one request, for headers, the log line and metrics: the request context's
/// part that outlives it (a stream's record keeps it until the stream ends).
#[derive(Default)]
pub struct Trail {
    /// The authenticated token's name and team (set by the phases once the request is routed).
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
    /// shadow copy of a streamed request is offered and its answer cached from here.
    pub on_finish: Option<OnFinish>,
    /// What the response cache did, for a request a cache rule covers.
    pub cache: Option<CacheMark>,
    /// The authenticated key's id (the request log names it with its name).
    pub token_id: Option<i64>,
    /// The request's tags and end user ([`crate::attribution`]).
    pub tags: Vec<String>,
    pub end_user: Option<String>,
    /// The gateway's own error code, when it answered with an error of its own.
    pub error_code: Option<&'static str>,
    /// A stream: milliseconds from the request's arrival until its first chunk arrived.
    pub first_token_ms: Option<u64>,
}

/// What the response cache did for a request a cache rule covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheResult {
    /// Answered from the cache.
    Hit,
    /// Not in the cache (or the client said `no-cache`): sent upstream.
    Miss,
    /// The cache was not used: the request cannot be cached, the client allowed neither read
    /// nor write, or the store did not answer.
    Bypass,
}

impl CacheResult {
    pub fn as_str(self) -> &'static str {
        match self {
            CacheResult::Hit => "hit",
            CacheResult::Miss => "miss",
            CacheResult::Bypass => "bypass",
        }
    }
}

/// The response cache's part of the trail.
#[derive(Debug, Clone, Copy)]
pub struct CacheMark {
    pub result: CacheResult,
    /// A hit: whole seconds since its answer was stored.
    pub age_seconds: u64,
    /// A hit: the usage of the answer it served again (the tokens it saved).
    pub saved: Usage,
    /// A hit: what that answer cost (pico-USD; `None`: it was unpriced).
    pub saved_cost_pico: Option<u128>,
    /// A hit by meaning: the cosine similarity of the prompt to the stored one.
    pub similarity: Option<f32>,
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
    /// Boxed: the trail is large (about 600 bytes) and moves from the failover to the record
    /// through every layer of the request.
    pub trail: Box<Trail>,
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
    pub fn write(self, state: &AppState, stream: Option<StreamEnd>) {
        if let Some(line) = self.settle(state, stream) {
            line.write();
        }
    }

    /// Everything but the log line, now: the limits learn what the request used, the finish
    /// callback runs, the metrics count it. The line (when lines are written) is returned to
    /// be written later; its latency is the request's latency now.
    pub fn settle(mut self, state: &AppState, stream: Option<StreamEnd>) -> Option<PendingLine> {
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
        let latency_ms = self.started.elapsed().as_secs_f64() * 1000.0;
        if let Some(reporter) = &state.usage {
            reporter.record_request(self.log_row(&usage, cost_pico, latency_ms, stream));
        }
        if !switchyard_telemetry::record_enabled!() {
            return None;
        }
        Some(PendingLine {
            record: self,
            usage,
            cost_pico,
            stream,
            latency_ms,
        })
    }

    /// The request's row in the request log (fleet mode): its metadata, never its body.
    fn log_row(
        &mut self,
        usage: &Usage,
        cost_pico: Option<u128>,
        latency_ms: f64,
        stream: Option<StreamEnd>,
    ) -> switchyard_proto::v1::RequestLogRecord {
        let trail = &mut self.trail;
        let latency = latency_ms as u64;
        let now = switchyard_state::unix_ms();
        let error_code = match (trail.error_code, trail.attempts.last()) {
            (Some(code), _) => code,
            (None, Some(last)) if self.status >= 400 => last.error.map_or("", AttemptError::as_str),
            // A stream that did not complete says how it ended.
            _ => stream
                .map(|s| s.outcome)
                .filter(|o| *o != StreamOutcome::Completed)
                .map_or("", StreamOutcome::label),
        };
        switchyard_proto::v1::RequestLogRecord {
            started_unix_ms: i64::try_from(now.saturating_sub(latency)).unwrap_or(i64::MAX),
            request_id: self.request_id.clone(),
            trace_id: trail
                .trace
                .as_ref()
                .map(|(t, _)| t.clone())
                .unwrap_or_default(),
            token_id: trail.token_id.unwrap_or(0),
            token: self.token.clone().unwrap_or_default(),
            team: self.team.clone().unwrap_or_default(),
            route: trail
                .route
                .as_ref()
                .map(|(_, p)| p.clone())
                .unwrap_or_default(),
            model: self.model.clone(),
            served_model: trail.final_model.clone().unwrap_or_default(),
            channel: trail.final_channel.clone().unwrap_or_default(),
            attempts: u32::try_from(trail.attempts.len()).unwrap_or(u32::MAX),
            status: u32::from(self.status),
            error_code: error_code.to_owned(),
            latency_ms: latency,
            first_token_ms: trail.first_token_ms,
            input_tokens: usage.input_tokens,
            output_tokens: usage.output_tokens,
            cached_tokens: usage.cached_tokens,
            cost_pico_usd: cost_pico.map(|c| u64::try_from(c).unwrap_or(u64::MAX)),
            cache: trail
                .cache
                .map(|c| c.result.as_str())
                .unwrap_or_default()
                .to_owned(),
            tags: std::mem::take(&mut trail.tags),
            end_user: trail.end_user.take().unwrap_or_default(),
            endpoint: self.endpoint.label().to_owned(),
        }
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
    /// that reached a channel through a route.
    fn count(&self, state: &AppState, usage: &Usage, cost_pico: Option<u128>) {
        let (route, channel, token) = (self.route(), self.channel(), self.token.as_deref());
        if let Some(cost) = cost_pico {
            state
                .metrics
                .spend(route, channel, self.team.as_deref(), cost);
        }
        state
            .metrics
            .request(self.endpoint, route, channel, self.status);
        state
            .metrics
            .usage(route, channel, token.unwrap_or(""), usage);
        if let (Some(reporter), Some(token)) = (&state.usage, token) {
            if let Some(hit) = self.trail.cache.filter(|c| c.result == CacheResult::Hit) {
                let key = crate::usage::UsageKey {
                    token: token.to_owned(),
                    team: self.team.clone(),
                    route: route.to_owned(),
                    channel: String::new(),
                    model: String::new(),
                };
                reporter.record_hit(key, hit.saved, hit.saved_cost_pico);
            } else if !channel.is_empty() && self.endpoint.reports_own_usage() {
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

    /// The request line's fields, each appended as `,"key":value` (the telemetry crate writes
    /// the standard keys before them and closes the line). The keys and their order never
    /// change: an absent value is `null`, except `stream` (a plain answer), `trace_id` and
    /// `span_id` (traces not exported), which are left out. Byte for byte what serializing the
    /// fields with `serde_json` wrote (the tests hold the derived form as the oracle).
    fn write_fields(&self, out: &mut Vec<u8>, end: &LineEnd<'_>) {
        let trail = &self.trail;
        let attempts = &trail.attempts;
        out.extend_from_slice(b",\"request_id\":");
        json::string(out, &self.request_id);
        out.extend_from_slice(b",\"endpoint\":");
        json::string(out, self.endpoint.label());
        out.extend_from_slice(b",\"protocol\":");
        json::string(out, self.endpoint.protocol().as_str());
        out.extend_from_slice(b",\"model\":");
        json::string(out, &self.model);
        out.extend_from_slice(b",\"token\":");
        string_or_null(out, self.token.as_deref());
        out.extend_from_slice(b",\"team\":");
        string_or_null(out, self.team.as_deref());
        out.extend_from_slice(b",\"route\":");
        string_or_null(out, trail.route.as_ref().map(|(_, p)| p.as_str()));
        out.extend_from_slice(b",\"status\":");
        json::integer(out, self.status);
        out.extend_from_slice(b",\"attempts\":");
        write_attempts(out, attempts);
        out.extend_from_slice(b",\"attempt_count\":");
        json::integer(out, attempts.len());
        out.extend_from_slice(b",\"switches\":");
        json::integer(out, attempts.len().saturating_sub(1));
        out.extend_from_slice(b",\"first_member\":");
        integer_or_null(out, attempts.first().map(|a| a.member_id));
        out.extend_from_slice(b",\"final_member\":");
        integer_or_null(out, attempts.last().map(|a| a.member_id));
        out.extend_from_slice(b",\"final_channel\":");
        string_or_null(out, trail.final_channel.as_deref());
        out.extend_from_slice(b",\"breaker_tripped\":");
        json::boolean(out, trail.breaker_tripped);
        out.extend_from_slice(b",\"sticky\":");
        string_or_null(out, trail.sticky);
        out.extend_from_slice(b",\"cache\":");
        string_or_null(out, trail.cache.map(|c| c.result.as_str()));
        out.extend_from_slice(b",\"usage\":{\"input_tokens\":");
        json::integer(out, end.usage.input_tokens);
        out.extend_from_slice(b",\"output_tokens\":");
        json::integer(out, end.usage.output_tokens);
        out.extend_from_slice(b",\"cached_tokens\":");
        json::integer(out, end.usage.cached_tokens);
        // USD, exact; `null` when no price matched (unpriced).
        out.extend_from_slice(b"},\"cost_usd\":");
        string_or_null(out, end.cost_usd);
        if let Some(stream) = end.stream {
            out.extend_from_slice(b",\"stream\":{\"outcome\":");
            json::string(out, stream.outcome.label());
            out.extend_from_slice(b",\"bytes\":");
            json::integer(out, stream.bytes);
            out.push(b'}');
        }
        out.extend_from_slice(b",\"latency_ms\":");
        json::float(out, end.latency_ms);
        // The trace this request's spans belong to, when traces are exported.
        if let Some((trace, span)) = &trail.trace {
            out.extend_from_slice(b",\"trace_id\":");
            json::string(out, trace);
            out.extend_from_slice(b",\"span_id\":");
            json::string(out, span);
        }
    }
}

/// A settled request's log line, not yet written.
pub struct PendingLine {
    record: RequestRecord,
    usage: Usage,
    cost_pico: Option<u128>,
    stream: Option<StreamEnd>,
    latency_ms: f64,
}

impl PendingLine {
    pub fn write(self) {
        let cost_usd = self
            .cost_pico
            .map(switchyard_engine::limit::format_pico_usd);
        let end = LineEnd {
            usage: self.usage,
            cost_usd: cost_usd.as_deref(),
            stream: self.stream,
            latency_ms: self.latency_ms,
        };
        switchyard_telemetry::record::write_with(
            "switchyard_data_plane::request",
            "request",
            |out| self.record.write_fields(out, &end),
        );
    }
}

/// A plain answer's body that writes the request's line once it is dropped: once the server
/// has written the answer to the client (or given up on the client). The client does not wait
/// for the line, and a line is never lost: every body is dropped.
pub struct LineAfter {
    body: axum::body::Body,
    line: Option<PendingLine>,
}

impl LineAfter {
    /// `response` with its body writing `line` when it is done.
    pub fn wrap(response: axum::response::Response, line: PendingLine) -> axum::response::Response {
        let (parts, body) = response.into_parts();
        let body = axum::body::Body::new(LineAfter {
            body,
            line: Some(line),
        });
        axum::response::Response::from_parts(parts, body)
    }
}

impl http_body::Body for LineAfter {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        std::pin::Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

impl Drop for LineAfter {
    fn drop(&mut self) {
        if let Some(line) = self.line.take() {
            line.write();
        }
    }
}

/// What the request line says beyond the record itself, fixed when the line is written.
struct LineEnd<'a> {
    /// The usage the upstream reported (zero when it reported none).
    usage: Usage,
    /// USD, exact; `None` when unpriced.
    cost_usd: Option<&'a str>,
    /// How a stream ended; `None` for a plain answer.
    stream: Option<StreamEnd>,
    latency_ms: f64,
}

/// The attempt trail as a JSON array: per attempt its member, channel and credential ids, its
/// HTTP status and error (`null` when it had none), a transport failure's cause (only when it
/// has one) and its latency, in that order.
fn write_attempts(out: &mut Vec<u8>, attempts: &[AttemptLog]) {
    out.push(b'[');
    for (at, attempt) in attempts.iter().enumerate() {
        if at > 0 {
            out.push(b',');
        }
        out.extend_from_slice(b"{\"member_id\":");
        json::integer(out, attempt.member_id);
        out.extend_from_slice(b",\"channel_id\":");
        json::integer(out, attempt.channel_id);
        out.extend_from_slice(b",\"credential_id\":");
        json::integer(out, attempt.credential_id);
        out.extend_from_slice(b",\"status\":");
        integer_or_null(out, attempt.status);
        out.extend_from_slice(b",\"error\":");
        string_or_null(out, attempt.error.map(AttemptError::as_str));
        if let Some(cause) = attempt.cause {
            out.extend_from_slice(b",\"cause\":");
            json::string(out, cause.as_str());
        }
        out.extend_from_slice(b",\"latency_ms\":");
        json::float(out, attempt.latency_ms);
        out.push(b'}');
    }
    out.push(b']');
}

/// A JSON string, or `null`.
fn string_or_null(out: &mut Vec<u8>, value: Option<&str>) {
    match value {
        Some(value) => json::string(out, value),
        None => out.extend_from_slice(b"null"),
    }
}

/// A JSON integer, or `null`.
fn integer_or_null(out: &mut Vec<u8>, value: Option<impl itoa::Integer>) {
    match value {
        Some(value) => json::integer(out, value),
        None => out.extend_from_slice(b"null"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attempt::every_attempt_error;
    use serde::Serialize;

    /// The request line as it was serialized before it was written by hand: the oracle the
    /// hand-written bytes must equal.
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
        cache: Option<&'static str>,
        usage: UsageLine,
        cost_usd: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        stream: Option<StreamLine>,
        latency_ms: f64,
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

    fn oracle<'a>(record: &'a RequestRecord, end: &LineEnd<'_>) -> RequestLine<'a> {
        let trail = &record.trail;
        RequestLine {
            request_id: &record.request_id,
            endpoint: record.endpoint.label(),
            protocol: record.endpoint.protocol().as_str(),
            model: &record.model,
            token: record.token.as_deref(),
            team: record.team.as_deref(),
            route: trail.route.as_ref().map(|(_, p)| p.as_str()),
            status: record.status,
            attempts: &trail.attempts,
            attempt_count: trail.attempts.len(),
            switches: trail.attempts.len().saturating_sub(1),
            first_member: trail.attempts.first().map(|a| a.member_id),
            final_member: trail.attempts.last().map(|a| a.member_id),
            final_channel: trail.final_channel.as_deref(),
            breaker_tripped: trail.breaker_tripped,
            sticky: trail.sticky,
            cache: trail.cache.map(|c| c.result.as_str()),
            usage: UsageLine {
                input_tokens: end.usage.input_tokens,
                output_tokens: end.usage.output_tokens,
                cached_tokens: end.usage.cached_tokens,
            },
            cost_usd: end.cost_usd.map(str::to_owned),
            stream: end.stream.map(|s| StreamLine {
                outcome: s.outcome.label(),
                bytes: s.bytes,
            }),
            latency_ms: end.latency_ms,
            trace_id: trail.trace.as_ref().map(|(trace, _)| trace.as_str()),
            span_id: trail.trace.as_ref().map(|(_, span)| span.as_str()),
        }
    }

    /// The hand-written fields, as a JSON object, equal the oracle's serialization byte for byte.
    fn assert_as_serialized(record: &RequestRecord, end: &LineEnd<'_>) {
        let mut fields = Vec::new();
        record.write_fields(&mut fields, end);
        assert_eq!(
            fields.first(),
            Some(&b','),
            "each field starts with a comma"
        );
        let mut object = b"{".to_vec();
        object.extend_from_slice(&fields[1..]);
        object.push(b'}');
        let expected = serde_json::to_vec(&oracle(record, end)).unwrap();
        assert_eq!(
            String::from_utf8(object).unwrap(),
            String::from_utf8(expected).unwrap()
        );
    }

    /// Strings that exercise the escaper: nothing, quotes, backslashes, every control byte,
    /// DEL, `/`, non-ASCII.
    fn texts() -> Vec<String> {
        let controls: String = (0..0x20u8).chain([0x7f]).map(char::from).collect();
        [
            "",
            "plain-id-0123",
            "gpt-4o/mini",
            "q\"uote\"",
            "back\\slash\\",
            "é",
            "🦀 emoji",
            "\"\\\n\r\t\u{8}\u{c}\u{0}\u{1f}",
            "mixed é \"🦀\" \\ \u{10} \u{1b}[0m",
            &controls,
        ]
        .into_iter()
        .map(str::to_owned)
        .collect()
    }

    const LATENCIES: [f64; 9] = [
        0.0,
        1e-7,
        0.5,
        123_456.789,
        1e21,
        3.000_000_000_000_4,
        f64::MAX,
        f64::NAN,
        f64::INFINITY,
    ];
    const IDS: [i64; 5] = [0, 1, -1, i64::MIN, i64::MAX];
    const COUNTS: [u64; 4] = [0, 1, 1_234_567, u64::MAX];
    const OUTCOMES: [StreamOutcome; 4] = [
        StreamOutcome::Completed,
        StreamOutcome::UpstreamBroken,
        StreamOutcome::Shutdown,
        StreamOutcome::ClientClosed,
    ];

    /// A small deterministic generator (xorshift), so every run checks the same records.
    struct Pick(u64);

    impl Pick {
        fn index(&mut self, len: usize) -> usize {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 % len as u64) as usize
        }

        fn of<T: Clone>(&mut self, items: &[T]) -> T {
            items[self.index(items.len())].clone()
        }

        fn maybe<T: Clone>(&mut self, items: &[T]) -> Option<T> {
            (self.index(2) == 1).then(|| self.of(items))
        }
    }

    fn attempt(pick: &mut Pick) -> AttemptLog {
        let mut errors = every_attempt_error();
        let error = pick.index(errors.len() + 1);
        AttemptLog {
            member_id: pick.of(&IDS),
            channel_id: pick.of(&IDS),
            credential_id: pick.of(&IDS),
            status: pick.maybe(&[0, 200, 429, 503, u16::MAX]),
            error: (error < errors.len()).then(|| errors.swap_remove(error)),
            cause: pick.maybe(&TransportCause::ALL),
            latency_ms: pick.of(&LATENCIES),
        }
    }

    fn record(pick: &mut Pick) -> RequestRecord {
        let texts = texts();
        let attempts = (0..pick.index(5)).map(|_| attempt(pick)).collect();
        RequestRecord {
            request_id: pick.of(&texts),
            endpoint: pick.of(&Endpoint::ALL),
            model: pick.of(&texts),
            token: pick.maybe(&texts),
            team: pick.maybe(&texts),
            status: pick.of(&[0, 200, 429, 502, u16::MAX]),
            trail: Box::new(Trail {
                route: pick.maybe(&texts).map(|path| (7, path)),
                final_channel: pick.maybe(&texts),
                attempts,
                breaker_tripped: pick.index(2) == 1,
                sticky: pick.maybe(&["hit", "miss", "escaped"]),
                cache: pick
                    .maybe(&[CacheResult::Hit, CacheResult::Miss, CacheResult::Bypass])
                    .map(|result| CacheMark {
                        result,
                        age_seconds: 3,
                        saved: Usage::default(),
                        saved_cost_pico: None,
                        similarity: None,
                    }),
                trace: pick.maybe(&texts).map(|t| (t.clone(), format!("{t}-span"))),
                ..Trail::default()
            }),
            started: Instant::now(),
        }
    }

    fn end<'a>(pick: &mut Pick, costs: &'a [String]) -> LineEnd<'a> {
        LineEnd {
            usage: Usage {
                input_tokens: pick.of(&COUNTS),
                output_tokens: pick.of(&COUNTS),
                cached_tokens: pick.of(&COUNTS),
            },
            cost_usd: pick.maybe(&costs.iter().map(String::as_str).collect::<Vec<_>>()),
            stream: pick.maybe(&OUTCOMES).map(|outcome| StreamEnd {
                outcome,
                bytes: pick.of(&COUNTS),
                usage: Usage::default(),
            }),
            latency_ms: pick.of(&LATENCIES),
        }
    }

    #[test]
    fn the_hand_written_request_line_is_the_serialized_one_for_varied_records() {
        let costs: Vec<String> = [0, 1, 1_500_000_000_000, u128::MAX]
            .into_iter()
            .map(switchyard_engine::limit::format_pico_usd)
            .collect();
        let mut pick = Pick(0x5eed_1234_abcd_ef01);
        for _ in 0..3_000 {
            let record = record(&mut pick);
            let end = end(&mut pick, &costs);
            assert_as_serialized(&record, &end);
        }
    }

    fn bare(endpoint: Endpoint) -> RequestRecord {
        RequestRecord {
            request_id: "req-1".into(),
            endpoint,
            model: "gpt-4o".into(),
            token: None,
            team: None,
            status: 200,
            trail: Box::default(),
            started: Instant::now(),
        }
    }

    /// The line rides on the answer's body without changing it: the same bytes, the same
    /// length for the server to frame the answer with, the same end.
    #[tokio::test]
    async fn a_plain_answer_under_its_pending_line_is_the_answer() {
        use http_body::Body as _;
        use http_body_util::BodyExt;
        let answer = br#"{"id":"chatcmpl-1","choices":[]}"#;
        let pending = |latency_ms| PendingLine {
            record: bare(Endpoint::ChatCompletions),
            usage: Usage::default(),
            cost_pico: None,
            stream: None,
            latency_ms,
        };
        let response = axum::response::Response::builder()
            .status(201)
            .header("x-kept", "1")
            .body(axum::body::Body::from(&answer[..]))
            .unwrap();
        let wrapped = LineAfter::wrap(response, pending(1.5));
        assert_eq!(wrapped.status(), 201);
        assert_eq!(wrapped.headers()["x-kept"], "1");
        assert_eq!(
            wrapped.body().size_hint().exact(),
            Some(answer.len() as u64)
        );
        assert!(!wrapped.body().is_end_stream());
        let bytes = wrapped.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(&bytes[..], &answer[..]);

        let empty = LineAfter::wrap(
            axum::response::Response::new(axum::body::Body::empty()),
            pending(0.0),
        );
        assert!(empty.body().is_end_stream());
        assert_eq!(empty.body().size_hint().exact(), Some(0));
    }

    #[test]
    fn the_request_line_leaves_out_stream_and_trace_only_when_absent_and_writes_null_otherwise() {
        let none = LineEnd {
            usage: Usage::default(),
            cost_usd: None,
            stream: None,
            latency_ms: 0.0,
        };
        for endpoint in Endpoint::ALL {
            assert_as_serialized(&bare(endpoint), &none);
        }
        let mut fields = Vec::new();
        bare(Endpoint::ChatCompletions).write_fields(&mut fields, &none);
        let text = String::from_utf8(fields).unwrap();
        assert!(
            text.contains(r#","token":null,"team":null,"route":null,"#),
            "{text}"
        );
        assert!(text.contains(r#","attempts":[],"attempt_count":0,"switches":0,"first_member":null,"final_member":null,"final_channel":null,"#), "{text}");
        assert!(
            text.contains(r#","cost_usd":null,"latency_ms":0.0"#),
            "{text}"
        );
        assert!(
            !text.contains("stream") && !text.contains("trace_id"),
            "{text}"
        );

        let mut full = bare(Endpoint::Messages);
        full.token = Some("tok".into());
        full.team = Some("team".into());
        full.trail.route = Some((1, "route".into()));
        full.trail.final_channel = Some("channel".into());
        full.trail.sticky = Some("hit");
        full.trail.breaker_tripped = true;
        full.trail.trace = Some((
            "0af7651916cd43dd8448eb211c80319c".into(),
            "b7ad6b7169203331".into(),
        ));
        let all = LineEnd {
            usage: Usage {
                input_tokens: u64::MAX,
                output_tokens: 2,
                cached_tokens: 1,
            },
            cost_usd: Some("0.0015"),
            stream: Some(StreamEnd {
                outcome: StreamOutcome::Completed,
                bytes: u64::MAX,
                usage: Usage::default(),
            }),
            latency_ms: 123_456.789,
        };
        assert_as_serialized(&full, &all);
        let mut fields = Vec::new();
        full.write_fields(&mut fields, &all);
        let text = String::from_utf8(fields).unwrap();
        assert!(text.ends_with(r#","stream":{"outcome":"completed","bytes":18446744073709551615},"latency_ms":123456.789,"trace_id":"0af7651916cd43dd8448eb211c80319c","span_id":"b7ad6b7169203331""#), "{text}");
    }

    #[test]
    fn every_attempt_error_and_status_in_the_trail_is_written_as_serialized() {
        let mut record = bare(Endpoint::ChatCompletions);
        let errors = every_attempt_error();
        record.trail.attempts = errors
            .iter()
            .enumerate()
            .map(|(at, &error)| AttemptLog {
                member_id: at as i64,
                channel_id: -(at as i64),
                credential_id: i64::MAX - at as i64,
                status: (at % 2 == 0).then_some(500 + at as u16),
                error: Some(error),
                cause: TransportCause::ALL.get(at).copied(),
                latency_ms: LATENCIES[at % LATENCIES.len()],
            })
            .collect();
        record.trail.attempts.push(AttemptLog {
            member_id: 99,
            channel_id: 98,
            credential_id: 97,
            status: None,
            error: None,
            cause: None,
            latency_ms: 1e-7,
        });
        let end = LineEnd {
            usage: Usage::default(),
            cost_usd: Some("0"),
            stream: None,
            latency_ms: 1e21,
        };
        assert_as_serialized(&record, &end);
        let mut fields = Vec::new();
        record.write_fields(&mut fields, &end);
        let text = String::from_utf8(fields).unwrap();
        for error in errors {
            assert!(
                text.contains(&format!(r#""error":"{}""#, error.as_str())),
                "{error:?}"
            );
        }
        for cause in TransportCause::ALL {
            assert!(
                text.contains(&format!(r#""cause":"{}""#, cause.as_str())),
                "{cause:?}"
            );
        }
        assert!(
            text.contains(r#""first_member":0,"final_member":99,"#),
            "{text}"
        );
    }

    #[test]
    fn each_stream_outcome_is_written_as_serialized() {
        for outcome in OUTCOMES {
            let end = LineEnd {
                usage: Usage::default(),
                cost_usd: None,
                stream: Some(StreamEnd {
                    outcome,
                    bytes: 0,
                    usage: Usage::default(),
                }),
                latency_ms: 0.25,
            };
            assert_as_serialized(&bare(Endpoint::Responses), &end);
        }
    }
}
