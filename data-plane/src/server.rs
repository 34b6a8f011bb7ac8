//! The HTTP edge: routes, downstream auth, body limits, the request's constraint, response
//! headers, the per-request log line and metrics. Everything upstream-facing is in
//! [`crate::failover`].

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use bytes::Bytes;
use http::{header, HeaderMap, HeaderName, HeaderValue, StatusCode};
use http_body_util::{BodyExt, Limited};
use serde_json::json;
use switchyard_engine::{
    wildcard_match, ChannelId, MemberId, Route, ScopeKind, SelectionConstraint, Snapshot, Token,
};
use switchyard_metrics::{Type, Writer};
use switchyard_provider::{ChatRequest, Protocol, TranslateError};
use switchyard_state::StateDump;
use tokio::time::Instant;
use tracing::field::Empty;
use tracing::{Instrument, Span};

use crate::admission::{self, Held};
use crate::endpoint::Endpoint;
use crate::errors::GatewayError;
use crate::failover::{proxy, ProxyRequest};
use crate::record::{LineAfter, RequestRecord, Trail};
use crate::request::{
    header_session_key, inspect_json_for, inspect_multipart, names, InspectError, Inspected,
};
use crate::shadow;
use crate::snapshot::View;
use crate::wire;
use crate::AppState;

/// The data plane's service: [`Gateway`] in front of [`router`].
pub fn app(state: Arc<AppState>) -> Gateway {
    Gateway {
        router: router(state.clone()),
        state,
    }
}

/// The proxied endpoints' `POST`s go straight to their handler, every other request through the
/// router. The router answers those `POST`s the same way (its routes call the same handler,
/// through the same draining rule); going around it saves its matching, its boxed route
/// services and its response layer: 5 % of a proxied request's instructions, 12 allocations.
#[derive(Clone)]
pub struct Gateway {
    state: Arc<AppState>,
    router: Router,
}

impl tower::Service<Request> for Gateway {
    type Response = Response;
    type Error = std::convert::Infallible;
    type Future = futures_util::future::Either<
        std::pin::Pin<Box<dyn std::future::Future<Output = Result<Response, Self::Error>> + Send>>,
        <Router as tower::Service<Request>>::Future,
    >;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        // Neither the handler nor the router ever waits to be ready.
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request) -> Self::Future {
        use futures_util::future::Either;
        match proxied_endpoint(request.method(), request.uri().path()) {
            Some(endpoint) => {
                let state = Arc::clone(&self.state);
                Either::Left(Box::pin(async move {
                    let response = handle(Arc::clone(&state), endpoint, None, request).await;
                    Ok(closed_when_draining(&state, response))
                }))
            }
            None => Either::Right(self.router.call(request)),
        }
    }
}

/// The endpoint a request is the `POST` of, when its handler takes it without the router: every
/// endpoint at its own fixed path (the Gemini ones and `/v1/models` carry a model in the path
/// and stay with the router).
fn proxied_endpoint(method: &http::Method, path: &str) -> Option<Endpoint> {
    if method != http::Method::POST {
        return None;
    }
    Endpoint::ALL
        .into_iter()
        .filter(|e| routed_by_path(*e))
        .find(|e| e.path() == path)
}

/// Whether `endpoint` is served at its own fixed path (see [`proxied_endpoint`]).
fn routed_by_path(endpoint: Endpoint) -> bool {
    !matches!(
        endpoint,
        Endpoint::Models | Endpoint::GeminiGenerate | Endpoint::GeminiCountTokens
    )
}

/// The router: every path the data plane serves.
fn router(state: Arc<AppState>) -> Router {
    let mut router = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/v1/models", get(models))
        // `GET /v1/models/{id}` is OpenAI's; `POST` on the same path is Gemini's newer API
        // generation (`/v1/models/{model}:generateContent`, what google-genai 3.x calls).
        .route("/v1/models/{id}", get(model).post(gemini))
        .route("/v1beta/models/{target}", post(gemini));
    for endpoint in Endpoint::ALL.into_iter().filter(|e| routed_by_path(*e)) {
        router = router.route(
            endpoint.path(),
            post(
                move |State(state): State<Arc<AppState>>, request: Request| async move {
                    handle(state, endpoint, None, request).await
                },
            ),
        );
    }
    router
        .layer(axum::middleware::map_response_with_state(
            state.clone(),
            close_when_draining,
        ))
        .fallback(|request: Request| async move { not_found(request.uri().path()) })
        .method_not_allowed_fallback(|request: Request| async move {
            let protocol = protocol_of_path(request.uri().path());
            GatewayError::MethodNotAllowed(request.method().clone()).into_response(protocol)
        })
        .with_state(state)
}

/// While draining, every answer asks the client to close its connection, so pooled keep-alive
/// clients (load balancers, SDKs) move to another proxy before this one stops listening.
async fn close_when_draining(State(state): State<Arc<AppState>>, response: Response) -> Response {
    closed_when_draining(&state, response)
}

fn closed_when_draining(state: &AppState, mut response: Response) -> Response {
    if state.draining.is_cancelled() {
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

/// `POST /v1beta/models/{model}:{action}` and `POST /v1/models/{model}:{action}`: the Gemini
/// API of both path generations.
async fn gemini(
    State(state): State<Arc<AppState>>,
    Path(target): Path<String>,
    request: Request,
) -> Response {
    match gemini_target(&target) {
        Some((endpoint, model, stream)) => {
            handle(state, endpoint, Some((model, stream)), request).await
        }
        None => not_found(request.uri().path()),
    }
}

/// `{model}:{action}` of a Gemini path: the endpoint, the model and whether it streams.
fn gemini_target(target: &str) -> Option<(Endpoint, String, bool)> {
    let (model, action) = target.rsplit_once(':')?;
    let (endpoint, stream) = match action {
        "generateContent" => (Endpoint::GeminiGenerate, false),
        "streamGenerateContent" => (Endpoint::GeminiGenerate, true),
        "countTokens" => (Endpoint::GeminiCountTokens, false),
        _ => return None,
    };
    Some((endpoint, model.to_owned(), stream))
}

/// The protocol a path belongs to, for errors on paths no endpoint serves.
fn protocol_of_path(path: &str) -> Protocol {
    if path.starts_with("/v1/messages") {
        Protocol::Anthropic
    } else if path.starts_with("/v1beta")
        || path
            .strip_prefix("/v1/models/")
            .is_some_and(|target| target.contains(':'))
    {
        Protocol::Gemini
    } else {
        Protocol::OpenAi
    }
}

fn not_found(path: &str) -> Response {
    GatewayError::NotFound.into_response(protocol_of_path(path))
}

async fn readyz(State(state): State<Arc<AppState>>) -> Response {
    if state.draining.is_cancelled() {
        return (StatusCode::SERVICE_UNAVAILABLE, "draining").into_response();
    }
    match state.views.load().as_ref() {
        Some(view) if !view.secrets_withheld.is_empty() => format!(
            "ready (revision {}); warning: channels sent without their secrets, never selected (`secrets_withheld`: the control plane has no fleet token; set SWITCHYARD_FLEET_TOKEN on it and on the proxies): {}",
            view.snapshot.revision,
            view.secrets_withheld.join(", ")
        )
        .into_response(),
        Some(view) => format!("ready (revision {})", view.snapshot.revision).into_response(),
        None => (StatusCode::SERVICE_UNAVAILABLE, "no snapshot yet").into_response(),
    }
}

async fn metrics(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    if let Some(credential) = state.metrics_credential.get() {
        if !presents(&headers, credential) {
            let body = switchyard_provider::gateway_error_body(
                Protocol::OpenAi,
                401,
                "invalid_request_error",
                "invalid_metrics_credential",
                "/metrics needs `Authorization: Bearer <SWITCHYARD_METRICS_TOKEN>`.",
            );
            let headers = [
                (header::CONTENT_TYPE, "application/json"),
                (header::WWW_AUTHENTICATE, "Bearer realm=\"metrics\""),
            ];
            return (StatusCode::UNAUTHORIZED, headers, body).into_response();
        }
    }
    let mut page = state.metrics.render();
    state.store.render_metrics(&mut page);
    if let Some(connections) = state.connections.get() {
        connections.render(&mut page);
    }
    render_live_gauges(&state, &mut page);
    if let Some(usage) = &state.usage {
        usage.render_metrics(&mut page);
    }
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], page).into_response()
}

/// Whether `headers` carry `Authorization: Bearer <credential>` (compared in constant time).
fn presents(headers: &HeaderMap, credential: &str) -> bool {
    let Some(given) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "))
    else {
        return false;
    };
    let expected = credential.as_bytes();
    given.len() == expected.len()
        && given
            .iter()
            .zip(expected)
            .fold(0u8, |diff, (a, b)| diff | (a ^ b))
            == 0
}

/// Gauges read at scrape time: the snapshot in use and how old it is, and per channel of it
/// the fleet-wide in-flight count and whether its breaker is open.
fn render_live_gauges(state: &AppState, out: &mut String) {
    let w = &mut Writer::new(out);
    w.gauge(
        "switchyard_shadow_pending",
        "Shadow copies queued or being sent, not yet compared.",
        state.shadows.pending(),
    );
    let Some(view) = state.views.load_full() else {
        return;
    };
    let now = crate::unix_ms();
    w.gauge(
        "switchyard_snapshot_revision",
        "Revision of the snapshot in use.",
        view.snapshot.revision,
    )
    .gauge(
        "switchyard_snapshot_age_seconds",
        "Seconds since this proxy installed the snapshot in use.",
        now.saturating_sub(view.installed_at_ms) as f64 / 1000.0,
    );
    let dump = state.store.dump(now);
    render_channel_gauges(w, &view.snapshot, &dump, now);
    // What this proxy's view holds of the shared state: the fleet's when it shares through Redis.
    let cooling = dump.cooldowns.iter().filter(|c| c.until > now).count();
    w.gauge(
        "switchyard_members_cooling",
        "Members in cooldown, as this proxy sees them.",
        cooling,
    )
    .gauge(
        "switchyard_sticky_bindings",
        "Sticky session bindings this proxy knows.",
        dump.sticky_bindings,
    );
    render_limit_gauges(state, &view.snapshot, now, w);
}

/// Per channel of the snapshot, as the store's dump has it: its fleet-wide in-flight count,
/// whether its breaker is open, and what is left of its slow-start window.
fn render_channel_gauges(w: &mut Writer<'_>, snapshot: &Snapshot, dump: &StateDump, now: u64) {
    let in_flight = |id| {
        dump.in_flight
            .iter()
            .find(|e| e.channel_id == id)
            .map_or(0, |e| e.in_flight)
    };
    let open = |id| {
        dump.channels
            .iter()
            .any(|c| c.channel_id == id && c.breaker_open)
    };
    let recovering_ms = |id| {
        dump.recovering
            .iter()
            .find(|r| r.channel_id == id)
            .map_or(0, |r| r.until.saturating_sub(now))
    };
    // One gauge per channel of the snapshot.
    let mut per_channel = |name: &str, help: &str, value: &dyn Fn(ChannelId) -> f64| {
        w.header(name, Type::Gauge, help);
        for channel in snapshot.channels() {
            w.sample(name, &[("channel", &channel.name)], value(channel.id));
        }
    };
    per_channel(
        "switchyard_channel_in_flight",
        "Requests in flight per channel, fleet-wide.",
        &|id| f64::from(in_flight(id)),
    );
    per_channel(
        "switchyard_channel_breaker_open",
        "1 while the channel's breaker is open.",
        &|id| f64::from(u8::from(open(id))),
    );
    per_channel(
        "switchyard_channel_recovering_seconds",
        "Seconds left of the channel's slow-start window after a passed probe (0 when not recovering).",
        &|id| recovering_ms(id) as f64 / 1000.0,
    );
}

/// Room left under route and team limits (token-level detail stays out of labels); nothing,
/// not even the help lines, when there are none.
fn render_limit_gauges(state: &AppState, snapshot: &Snapshot, now: u64, w: &mut Writer<'_>) {
    let shared = snapshot
        .limits()
        .iter()
        .filter(|r| matches!(r.limit.key.scope, ScopeKind::Route | ScopeKind::Team));
    const REMAINING: &str = "switchyard_limit_remaining";
    let mut header = true;
    for rule in shared {
        let key = rule.limit.key;
        let name = match key.scope {
            ScopeKind::Route => snapshot
                .route(key.scope_id)
                .map(|r| r.model_pattern.as_str()),
            _ => snapshot.team(key.scope_id).map(|t| t.name.as_str()),
        };
        let Some(name) = name else { continue };
        if header {
            w.header(
                REMAINING,
                Type::Gauge,
                "Room left under each route and team limit, as this proxy sees it (spend in micro-USD).",
            );
            header = false;
        }
        let status = state.store.limit_status(&rule.limit, now);
        w.sample(
            REMAINING,
            &[
                ("scope", key.scope.as_str()),
                ("name", name),
                ("metric", key.metric.as_str()),
                ("window", key.window.as_str()),
            ],
            status.remaining,
        );
    }
}

fn presented_key<'a>(headers: &'a HeaderMap, query: Option<&'a str>) -> Option<&'a str> {
    if let Some(v) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    {
        let v = v.trim();
        let token = v
            .strip_prefix("Bearer ")
            .or_else(|| v.strip_prefix("bearer "))
            .unwrap_or(v)
            .trim();
        if !token.is_empty() {
            return Some(token);
        }
    }
    ["x-api-key", "x-goog-api-key"]
        .iter()
        .find_map(|name| {
            headers
                .get(*name)
                .and_then(|v| v.to_str().ok())
                .map(str::trim)
                .filter(|v| !v.is_empty())
        })
        .or_else(|| {
            // Gemini clients may send the key as `?key=`.
            query?
                .split('&')
                .find_map(|pair| pair.strip_prefix("key="))
                .filter(|v| !v.is_empty())
        })
}

fn authenticate<'v>(view: &'v View, headers: &HeaderMap, query: Option<&str>) -> Option<&'v Token> {
    view.token(presented_key(headers, query)?)
}

/// `GET /v1/models`: the exact-pattern models this token may call.
async fn models(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    let response = list_models(&state, &headers, None);
    state
        .metrics
        .request(Endpoint::Models, "", "", response.status().as_u16());
    response
}

/// `GET /v1/models/{id}`: one model this token may call, or a 404 in the OpenAI shape.
async fn model(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let response = list_models(&state, &headers, Some(&id));
    state
        .metrics
        .request(Endpoint::Models, "", "", response.status().as_u16());
    response
}

fn list_models(state: &AppState, headers: &HeaderMap, one: Option<&str>) -> Response {
    let Some(view) = state.views.load_full() else {
        return GatewayError::not_ready().into_response(Protocol::OpenAi);
    };
    let Some(token) = authenticate(&view, headers, None) else {
        return GatewayError::unauthorized().into_response(Protocol::OpenAi);
    };
    let team = token.team_id.and_then(|id| view.snapshot.team(id));
    let data: Vec<_> = view
        .snapshot
        .routes()
        .iter()
        .filter(|r| r.enabled && !switchyard_engine::pattern::is_wildcard(&r.model_pattern))
        .filter(|r| {
            token.team_id.is_none()
                || team.is_some_and(|t| {
                    t.models
                        .iter()
                        .any(|p| p.trim() == r.model_pattern || wildcard_match(p.trim(), &r.model_pattern))
                })
        })
        .filter(|r| one.is_none_or(|id| r.model_pattern == id))
        .map(|r| json!({"id": r.model_pattern, "object": "model", "created": 0, "owned_by": "switchyard"}))
        .collect();
    if let Some(id) = one {
        let Some(found) = data.into_iter().next() else {
            let model: String = id.chars().take(crate::request::MAX_MODEL_LEN).collect();
            return GatewayError::ModelNotFound { model }.into_response(Protocol::OpenAi);
        };
        return (
            [(header::CONTENT_TYPE, "application/json")],
            found.to_string(),
        )
            .into_response();
    }
    (
        [(header::CONTENT_TYPE, "application/json")],
        json!({"object": "list", "data": data}).to_string(),
    )
        .into_response()
}

async fn read_body(body: Body, limit: u64) -> Result<Bytes, GatewayError> {
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    match Limited::new(body, limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(too_large(limit)),
        Err(e) if switchyard_server::BodyTimeout::is(&*e) => Err(GatewayError::RequestBodyTimeout),
        Err(_) => Err(GatewayError::BodyReadError),
    }
}

fn too_large(limit: usize) -> GatewayError {
    GatewayError::RequestTooLarge { limit }
}

async fn handle(
    state: Arc<AppState>,
    endpoint: Endpoint,
    path_model: Option<(String, bool)>,
    request: Request,
) -> Response {
    let started = Instant::now();
    let seed = state.next_seed();
    let request_id = request
        .headers()
        .get(&names::REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .filter(|v| valid_request_id(v))
        .map_or_else(|| request_id_of(seed), str::to_owned);
    let span = request_span(endpoint, &request_id);
    {
        let headers = request.headers();
        let trace_header = |name| headers.get(name).and_then(|v| v.to_str().ok());
        switchyard_telemetry::context::continue_trace(
            &span,
            trace_header(&names::TRACEPARENT),
            trace_header(&names::TRACESTATE),
        );
    }
    let trace = switchyard_telemetry::context::ids(&span);
    let path_model = path_model.as_ref().map(|(m, s)| (m.as_str(), *s));
    let served = Box::pin(serve(
        &state,
        endpoint,
        path_model,
        request,
        started,
        seed,
        &request_id,
    ));
    // Boxed: the request's future (about 2 KB: `serve` boxes the failover below it) is moved
    // once, into this box, and this one, moved into a box of its own by whoever serves it (the
    // gateway, the router), stays under 1 KB (`scripts/future-sizes` lists the sizes).
    let result = served.instrument(span.clone()).await;
    let (response, mut trail, model) = match result {
        Ok((response, trail, model)) => (response, trail, model),
        Err(e) => (
            e.into_response(endpoint.protocol()),
            Box::default(),
            String::new(),
        ),
    };
    trail.trace = trace;
    record_request(&span, endpoint, &trail, &model, response.status().as_u16());
    finish(
        &state,
        endpoint,
        response,
        trail,
        &model,
        &request_id,
        started,
    )
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

/// Integers as `i64`: the OpenTelemetry layer exports unsigned ones as strings.
fn record_request(span: &Span, endpoint: Endpoint, trail: &Trail, model: &str, status: u16) {
    if span.is_disabled() {
        return;
    }
    if !model.is_empty() {
        switchyard_telemetry::context::rename(
            span,
            format!("{} {model}", endpoint.genai_operation()),
        );
    }
    span.record("model", model);
    span.record("gen_ai.request.model", model);
    if let Some(usage) = trail.usage {
        span.record("gen_ai.usage.input_tokens", usage.input_tokens as i64);
        span.record("gen_ai.usage.output_tokens", usage.output_tokens as i64);
    }
    if let Some((_, pattern)) = &trail.route {
        span.record("route", pattern.as_str());
    }
    span.record("http.response.status_code", i64::from(status));
    span.record("attempt_count", trail.attempts.len() as i64);
    span.record("switches", trail.attempts.len().saturating_sub(1) as i64);
    if let (Some(first), Some(last)) = (trail.attempts.first(), trail.attempts.last()) {
        span.record("first_member", first.member_id);
        span.record("final_member", last.member_id);
    }
    if let Some(channel) = &trail.final_channel {
        span.record("final_channel", channel.as_str());
    }
    span.record("breaker_tripped", trail.breaker_tripped);
    if let Some(sticky) = trail.sticky {
        span.record("sticky", sticky);
    }
    if status >= 500 {
        // The HTTP conventions: a server span fails on 5xx only, typed by its status code.
        span.record("error.type", status.to_string());
        span.record("otel.status_code", "ERROR");
    }
}

async fn serve(
    state: &Arc<AppState>,
    endpoint: Endpoint,
    path_model: Option<(&str, bool)>,
    request: Request,
    started: Instant,
    seed: u64,
    request_id: &str,
) -> Result<(Response, Box<Trail>, String), GatewayError> {
    let Some(view) = state.views.load_full() else {
        return Err(GatewayError::not_ready());
    };
    let (token, received) = receive(&view, endpoint, path_model, request).await?;
    let inspected = &received.inspected;
    let route = view.snapshot.resolve_route(&inspected.model);
    let translation = received.translation(&view, route);
    let constraint = received.constraint(&view, token, route, translation.unsupported_providers)?;
    let estimate = admission::estimate(received.body.len(), inspected.max_output_tokens);
    let (admitted, rate) = match admit(state, &view, token, route, estimate).await {
        Ok(admitted) => admitted,
        Err((error, rate)) => {
            let mut trail = Box::new(Trail {
                rate,
                route: route.map(|r| (r.id, r.model_pattern.clone())),
                ..Trail::default()
            });
            name_client(&mut trail, &view, token);
            let response = error.into_response(endpoint.protocol());
            return Ok((response, trail, inspected.model.clone()));
        }
    };
    let request = ProxyRequest {
        estimate,
        endpoint,
        inspected,
        body: &received.body,
        headers: &received.parts.headers,
        query: received.query.as_deref(),
        chat: translation.chat.as_deref(),
        unsupported: &translation.unsupported,
        constraint,
        request_id,
        started,
        seed,
    };
    // Boxed: the failover's future (about 1.7 KB, the attempt in a box of its own) is moved
    // once, into its box, rather than being part of this future, which is itself moved into a
    // box by `handle`: that copy is of this function's own states only.
    let (response, mut trail) = Box::pin(proxy(state, &view, request)).await;
    if !view.snapshot.shadows().is_empty()
        && shadow::Candidate::wanted(&view, endpoint, inspected, seed)
    {
        // Offered to the shadow rules once the request has finished (a stream: at its end),
        // never waited for. A stream keeps its chunks from here on (its body is not polled yet).
        let stream = trail.stream.as_ref().map(|slot| slot.gather());
        let candidate =
            received.shadow_candidate(&view, seed, started, trail.answer.clone(), stream);
        trail.on_finish = Some(Box::new(move |state, finished| {
            candidate.offer(state, finished);
        }));
    }
    trail.admitted = admitted;
    trail.rate = rate;
    name_client(&mut trail, &view, token);
    Ok((response, trail, inspected.model.clone()))
}

/// A client request as the edge read it: its head, its body (within the size limit) and what
/// inspecting the body found.
struct Received {
    endpoint: Endpoint,
    parts: http::request::Parts,
    body: Bytes,
    inspected: Inspected,
    /// The query string without credentials.
    query: Option<String>,
}

/// The request's member-protocol translation, prepared before selection.
struct Translation {
    /// The request in neutral form, when a member of another protocol may need it (boxed: it is
    /// large, most requests have none, and this is held across the failover).
    chat: Option<Box<ChatRequest>>,
    /// The providers whose members cannot express the request, marked for selection.
    unsupported_providers: u8,
    /// Per protocol (as [`Protocol::ALL`]): the feature it cannot express, if any.
    unsupported: [Option<String>; 4],
}

/// Reads the client's request: its key authenticated (and not expired), its body read within
/// the size limit and inspected.
async fn receive<'v>(
    view: &'v View,
    endpoint: Endpoint,
    path_model: Option<(&str, bool)>,
    request: Request,
) -> Result<(&'v Token, Received), GatewayError> {
    let (mut parts, body) = request.into_parts();
    wire::drop_unforwarded(&mut parts.headers);
    let token = authenticate(view, &parts.headers, parts.uri.query())
        .ok_or_else(GatewayError::unauthorized)?;
    if let Some(at) = token.expires_at.filter(|at| *at <= crate::unix_ms()) {
        return Err(GatewayError::TokenExpired {
            at: switchyard_engine::limit::format_rfc3339(at),
        });
    }
    let limit = view.snapshot.settings.max_request_body_bytes;
    let body = read_limited_body(&parts.headers, body, limit).await?;
    let inspected = inspect(endpoint, &parts.headers, &body, path_model)?;
    let query = wire::strip_key_param(parts.uri.query());
    let received = Received {
        endpoint,
        parts,
        body,
        inspected,
        query,
    };
    Ok((token, received))
}

/// The body, refused at once when its declared length is over `limit`, else read up to it.
async fn read_limited_body(
    headers: &HeaderMap,
    body: Body,
    limit: u64,
) -> Result<Bytes, GatewayError> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(too_large(usize::try_from(limit).unwrap_or(usize::MAX)));
    }
    read_body(body, limit).await
}

/// What the body says the request is (model, stream, needs…): a multipart form's fields, or
/// a JSON body's (the model of a Gemini path taken from the path).
fn inspect(
    endpoint: Endpoint,
    headers: &HeaderMap,
    body: &Bytes,
    path_model: Option<(&str, bool)>,
) -> Result<Inspected, GatewayError> {
    let inspected = if endpoint.multipart() {
        let content_type = headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        inspect_multipart(body, content_type)
    } else {
        inspect_json_for(body, path_model)
    };
    inspected.map_err(|e| match e {
        InspectError::Malformed(message) => GatewayError::InvalidJson(message),
        InspectError::MissingModel => GatewayError::MissingModel,
        InspectError::DuplicateField(field) => GatewayError::InvalidRequest(format!(
            "the multipart body has more than one `{field}` field; send it once"
        )),
    })
}

impl Received {
    /// The request prepared for members of another protocol, when the route has any.
    ///
    /// Parsed for translation only, and only when the route has a member of another protocol (a
    /// route whose members all speak the client's protocol passes the bytes through): a body
    /// the parser refuses still routes (and passes through to same-protocol members untouched);
    /// other protocols then cannot serve it. Members of another protocol that cannot express
    /// the request (an endpoint with no translation, such as embeddings or responses, at all)
    /// are marked for selection: they are skipped, and when nothing else is left the client
    /// gets a 400 naming what it asked for.
    fn translation(&self, view: &View, route: Option<&Route>) -> Translation {
        let mixed = route.is_some_and(|r| view.route_needs_translation(r.id, self.endpoint));
        if !mixed {
            // No member of another protocol: nothing to mark (and nothing to format).
            return Translation {
                chat: None,
                unsupported_providers: 0,
                unsupported: [None, None, None, None],
            };
        }
        let (chat, unparsable) = match self.endpoint.translatable().then(|| self.parse(view)) {
            Some(Ok(chat)) => (Some(Box::new(chat)), None),
            Some(Err(message)) => (None, Some(message)),
            None => (None, None),
        };
        let (unsupported_providers, unsupported) =
            wire::unsupported(self.endpoint, chat.as_deref(), unparsable.as_deref());
        Translation {
            chat,
            unsupported_providers,
            unsupported,
        }
    }

    /// The request in neutral form, or why the parser refused it.
    fn parse(&self, view: &View) -> Result<ChatRequest, String> {
        let inspected = &self.inspected;
        let parsed = if self.endpoint == Endpoint::Responses {
            ChatRequest::parse_responses(&self.body, &inspected.model, inspected.stream)
        } else {
            ChatRequest::parse(
                self.endpoint.protocol(),
                &self.body,
                &inspected.model,
                inspected.stream,
            )
        };
        match parsed {
            Ok(mut chat) => {
                // The gateway keeps no responses: by default a translated answer says
                // `store: false`; the operator may have translation refuse such requests.
                if view.snapshot.settings.responses_refuse_store && chat.asks_to_store() {
                    chat.keep_to_own_protocol("stored responses (`store`)");
                }
                Ok(chat)
            }
            Err(TranslateError::Malformed(message) | TranslateError::Unsupported(message)) => {
                Err(message)
            }
        }
    }

    /// What selection must respect: the key's route group (else the client's group header), its
    /// team, the request's needs, a pinned member, and the sticky session's key when the route
    /// keeps sessions sticky.
    fn constraint(
        &self,
        view: &View,
        token: &Token,
        route: Option<&Route>,
        unsupported_providers: u8,
    ) -> Result<SelectionConstraint, GatewayError> {
        let headers = &self.parts.headers;
        let mut needs = self.inspected.needs;
        needs.unsupported_providers = unsupported_providers;
        let mut constraint = SelectionConstraint {
            route_group: token.route_group_name.clone().or_else(|| {
                headers
                    .get(&names::ROUTE_GROUP)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned)
            }),
            team: token.team_id,
            needs,
            ..SelectionConstraint::default()
        };
        constraint.pinned_member = pinned_member(headers, token)?;
        let settings = &view.snapshot.settings;
        let sticky_on = route.is_some_and(|r| r.sticky_session.unwrap_or(settings.sticky_enabled));
        if sticky_on && !constraint.is_pinned() {
            constraint.session_key = headers
                .get(&names::SESSION_ID)
                .and_then(|v| header_session_key(v.as_bytes()))
                .or_else(|| self.inspected.body_session(&self.body));
        }
        Ok(constraint)
    }

    /// A copy of the request for the shadow rules, with when its answer started and the plain
    /// answer's body.
    fn shadow_candidate(
        &self,
        view: &Arc<View>,
        seed: u64,
        started: Instant,
        answer: Option<Bytes>,
        stream: Option<Arc<crate::record::Gathered>>,
    ) -> shadow::Candidate {
        shadow::Candidate {
            view: Arc::clone(view),
            endpoint: self.endpoint,
            inspected: self.inspected.clone(),
            body: self.body.clone(),
            headers: self.parts.headers.clone(),
            query: self.query.clone(),
            seed,
            started,
            first_byte_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            answer,
            stream,
        }
    }
}

/// The member the pin header names, for a key allowed to pin.
fn pinned_member(headers: &HeaderMap, token: &Token) -> Result<Option<MemberId>, GatewayError> {
    let Some(pin) = headers.get(&names::PIN) else {
        return Ok(None);
    };
    if !token.allow_pinning {
        return Err(GatewayError::PinningNotAllowed);
    }
    let member = pin
        .to_str()
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .ok_or(GatewayError::InvalidPin)?;
    Ok(Some(member))
}

/// The trail names the request's key and its team.
fn name_client(trail: &mut Trail, view: &View, token: &Token) {
    trail.token = Some(token.name.clone());
    trail.team = token
        .team_id
        .and_then(|id| view.snapshot.team(id))
        .map(|t| t.name.clone());
}

/// The key's, its team's and the route's limits: admitted only when every hard one has room
/// (the held limits, or none when there are none, and the rate-limit headers), else the refusal.
async fn admit(
    state: &AppState,
    view: &View,
    token: &Token,
    route: Option<&switchyard_engine::Route>,
    estimate: u64,
) -> Result<(Option<Held>, admission::RateHeaders), (GatewayError, admission::RateHeaders)> {
    let limits = admission::client_limits(&view.snapshot, token, route.map(|r| r.id));
    if limits.is_empty() {
        return Ok((None, admission::RateHeaders::default()));
    }
    let (outcome, held) = Held::admit(&state.store, limits, estimate).await;
    let rate = admission::RateHeaders::of(&outcome);
    match held {
        Ok(held) => {
            for crossed in admission::soft_crossed(held.limits(), &outcome) {
                state.metrics.limit(&crossed.key, false);
                tracing::warn!(
                    token = %token.name,
                    limit = %crossed.key.name(),
                    value = crossed.value,
                    "soft limit crossed"
                );
            }
            Ok((Some(held), rate))
        }
        Err(refused) => {
            state.metrics.limit(&refused.limit.key, true);
            Err((refused.error(), rate))
        }
    }
}

fn finish(
    state: &AppState,
    endpoint: Endpoint,
    mut response: Response,
    trail: Box<Trail>,
    model: &str,
    request_id: &str,
    started: Instant,
) -> Response {
    let status = response.status().as_u16();
    let headers = response.headers_mut();
    let set = |headers: &mut HeaderMap, name: HeaderName, value: &str| {
        if let Ok(v) = HeaderValue::from_str(value) {
            headers.insert(name, v);
        }
    };
    set(headers, names::SWITCHYARD_REQUEST_ID, request_id);
    set(headers, names::REQUEST_ID, request_id);
    if let Some((id, pattern)) = &trail.route {
        match HeaderValue::from_str(pattern) {
            Ok(v) => {
                headers.insert(names::ROUTE, v);
            }
            Err(_) => set(headers, names::ROUTE, &id.to_string()),
        }
    }
    if let Some(channel) = &trail.final_channel {
        set(headers, names::CHANNEL, channel);
    }
    headers.insert(names::ATTEMPTS, HeaderValue::from(trail.attempts.len()));
    trail.rate.write(headers, crate::unix_ms());

    let total = started.elapsed();
    let total_micros = u64::try_from(total.as_micros()).unwrap_or(u64::MAX);
    state
        .metrics
        .gateway_overhead
        .observe_micros(total_micros.saturating_sub(trail.upstream_micros));
    let stream = trail.stream.clone();
    let record = RequestRecord {
        request_id: request_id.to_owned(),
        endpoint,
        model: model.to_owned(),
        token: trail.token.clone(),
        team: trail.team.clone(),
        status,
        trail,
        started,
    };
    match stream {
        Some(slot) => {
            slot.attach(record, state);
            response
        }
        // A plain answer is counted now; its line is written once the answer is out.
        None => match record.settle(state, None) {
            Some(line) => LineAfter::wrap(response, line),
            None => response,
        },
    }
}

#[cfg(test)]
mod tests {
    use http::Method;

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

    /// The gateway takes exactly the `POST`s the router would hand to [`handle`] at a fixed
    /// path; every other method, path and endpoint goes through the router.
    #[test]
    fn the_gateway_takes_the_posts_of_the_fixed_paths_only() {
        for endpoint in Endpoint::ALL {
            let taken = proxied_endpoint(&Method::POST, endpoint.path());
            if routed_by_path(endpoint) {
                assert_eq!(taken, Some(endpoint), "{endpoint:?}");
            } else {
                // `/v1/models` and `/v1beta/models` are no endpoint's fixed path.
                assert_eq!(taken, None, "{endpoint:?}");
            }
        }
        assert_eq!(proxied_endpoint(&Method::GET, "/v1/chat/completions"), None);
        assert_eq!(proxied_endpoint(&Method::PUT, "/v1/messages"), None);
        for path in [
            "/v1/chat/completions/",
            "/v1/chat/completion",
            "/V1/chat/completions",
            "/v1/models/m:generateContent",
            "/v1beta/models/m:generateContent",
            "/healthz",
            "",
        ] {
            assert_eq!(proxied_endpoint(&Method::POST, path), None, "{path}");
        }
        assert!(routed_by_path(Endpoint::ChatCompletions));
        assert!(!routed_by_path(Endpoint::Models));
        assert!(!routed_by_path(Endpoint::GeminiGenerate));
        assert!(!routed_by_path(Endpoint::GeminiCountTokens));
    }
}
