//! One proxied request's context: what the phases know of it, read once and carried by `&mut`
//! from phase to phase (`phases`: receive → route → admit → proxy → finish, with the shadow
//! offer and the log line after), the way pingora's proxy phases share one per-request value.
//!
//! The edge makes an [`Arrival`] for every request (its id, its span, when it started); the
//! receive phase turns an authenticated, read and inspected request into a [`Ctx`]; each later
//! phase fills in its part (the route and constraint, the admitted limits, the trail of
//! attempts) and reads the rest from here, so the request's facts — the model name first — are
//! read from the body once and never passed along in another shape.

use std::sync::Arc;

use bytes::Bytes;
use http::HeaderMap;
use switchyard_engine::{Route, SelectionConstraint, Token};
use switchyard_provider::ChatRequest;
use tokio::time::Instant;
use tracing::field::Empty;
use tracing::Span;

use crate::endpoint::Endpoint;
use crate::record::Trail;
use crate::request::{names, Inspected};
use crate::snapshot::View;
use crate::wire::ClientRequest;

/// A request as the edge takes it in, before any phase: the same for a request that never gets
/// a context (no snapshot yet, a refused key, an unreadable body), whose answer is finished
/// from this alone.
pub struct Arrival {
    pub endpoint: Endpoint,
    /// The client's `x-request-id` when it is a valid one, else one made from the seed.
    pub request_id: String,
    pub started: Instant,
    /// The request's seed (its request id when the client sent none, the engine's draws).
    pub seed: u64,
    /// The request's trace span (disabled unless traces are exported).
    pub span: Span,
    /// The span's trace and span ids, when traces are exported.
    pub trace: Option<(String, String)>,
}

impl Arrival {
    /// A request as the edge takes it in, drawn `seed`: its request id (the client's when
    /// valid), its seed and its trace span (continuing the client's trace).
    pub fn new(endpoint: Endpoint, seed: u64, headers: &HeaderMap) -> Arrival {
        let started = Instant::now();
        let request_id = headers
            .get(&names::REQUEST_ID)
            .and_then(|v| v.to_str().ok())
            .filter(|v| valid_request_id(v))
            .map_or_else(|| request_id_of(seed), str::to_owned);
        let span = request_span(endpoint, &request_id);
        let trace_header = |name| headers.get(name).and_then(|v| v.to_str().ok());
        switchyard_telemetry::context::continue_trace(
            &span,
            trace_header(&names::TRACEPARENT),
            trace_header(&names::TRACESTATE),
        );
        let trace = switchyard_telemetry::context::ids(&span);
        Arrival {
            endpoint,
            request_id,
            started,
            seed,
            span,
            trace,
        }
    }
}

/// The request id the gateway gives a request whose client sent none: its seed as 16 lowercase
/// hex digits, through the project's hex encoder (`format!`'s machinery cost more than the rest
/// of the id).
fn request_id_of(seed: u64) -> String {
    switchyard_proto::hex(&seed.to_be_bytes())
}

/// A client's `x-request-id` is kept when it is 1–128 visible ASCII characters.
fn valid_request_id(id: &str) -> bool {
    (1..=128).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_graphic())
}

/// The request's trace span when traces are exported (OTLP), else a disabled one: named
/// `{operation} {model}` as the OpenTelemetry GenAI conventions name a model call (the operation
/// alone until the model is known), with the HTTP status and the log line's fields (never a key,
/// a credential or a body); each attempt is a child client span (see [`crate::failover`]).
fn request_span(endpoint: Endpoint, request_id: &str) -> Span {
    if !crate::telemetry::enabled() {
        return Span::none();
    }
    tracing::info_span!(
        "request",
        otel.name = endpoint.genai_operation(),
        otel.kind = "server",
        otel.status_code = Empty,
        request_id,
        endpoint = endpoint.label(),
        model = Empty,
        route = Empty,
        http.response.status_code = Empty,
        error.type = Empty,
        attempt_count = Empty,
        switches = Empty,
        first_member = Empty,
        final_member = Empty,
        final_channel = Empty,
        breaker_tripped = Empty,
        sticky = Empty,
        gen_ai.operation.name = endpoint.genai_operation(),
        gen_ai.request.model = Empty,
        gen_ai.usage.input_tokens = Empty,
        gen_ai.usage.output_tokens = Empty,
    )
}

/// One received request and what the phases learn of it. Everything borrowed lives in the
/// request's own frame: the view it started with, its token, its request id.
pub struct Ctx<'a> {
    /// The snapshot view the request started with (kept whole: the shadow copy holds it).
    pub view: &'a Arc<View>,
    pub endpoint: Endpoint,
    pub request_id: &'a str,
    pub started: Instant,
    pub seed: u64,

    // Receive: the authenticated key and the request as read.
    pub token: &'a Token,
    /// The client's headers, without those never forwarded.
    pub headers: HeaderMap,
    /// The body as the client sent it (within the size limit).
    pub body: Bytes,
    /// What the body says the request is (model, stream, needs …): read once, here.
    pub inspected: Inspected,
    /// The query string without credentials.
    pub query: Option<String>,

    // Route: the route of the model, the translation for members of other protocols, and what
    // selection must respect.
    pub route: Option<&'a Route>,
    /// The request in neutral form, when a member of another protocol may need it (boxed: it is
    /// large and most requests have none).
    pub chat: Option<Box<ChatRequest>>,
    /// Per protocol (as [`switchyard_provider::Protocol::ALL`]): the feature it cannot express,
    /// if any.
    pub unsupported: [Option<String>; 4],
    /// What selection must respect; the proxy phase adds what it tried and what had no room.
    pub constraint: SelectionConstraint,

    // Admit: the token estimate limits take for this request.
    pub estimate: u64,

    /// What happened to the request, for its headers, log line and metrics. A type of its own,
    /// boxed: it outlives the context when the answer is a stream (the stream's record keeps it
    /// until the stream ends), and it moves as one pointer into that record.
    pub trail: Box<Trail>,
}

impl<'a> Ctx<'a> {
    /// A received request's context: nothing routed, admitted or tried yet.
    pub fn received(
        arrival: &'a Arrival,
        view: &'a Arc<View>,
        token: &'a Token,
        headers: HeaderMap,
        body: Bytes,
        inspected: Inspected,
        query: Option<String>,
    ) -> Ctx<'a> {
        Ctx {
            view,
            endpoint: arrival.endpoint,
            request_id: &arrival.request_id,
            started: arrival.started,
            seed: arrival.seed,
            token,
            headers,
            body,
            inspected,
            query,
            route: None,
            chat: None,
            unsupported: [None, None, None, None],
            constraint: SelectionConstraint::default(),
            estimate: 0,
            trail: Box::default(),
        }
    }
}

impl Ctx<'_> {
    /// The request as the wire plan reads it (for each member the proxy phase tries).
    pub fn client_request(&self) -> ClientRequest<'_> {
        ClientRequest {
            endpoint: self.endpoint,
            inspected: &self.inspected,
            body: &self.body,
            query: self.query.as_deref(),
            chat: self.chat.as_deref(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request id the gateway makes is its seed in 16 lowercase hex digits, zeros kept.
    #[test]
    fn a_made_request_id_is_the_seed_in_sixteen_hex_digits() {
        for seed in [
            0,
            1,
            0xab,
            0x0123_4567_89ab_cdef,
            u64::MAX,
            0xf000_0000_0000_000f,
        ] {
            assert_eq!(request_id_of(seed), format!("{seed:016x}"));
        }
    }
}
