//! Finish: the answer's gateway headers, the request span's fields, the metrics and the
//! request's record — settled now for a plain answer (its line written once the answer is out),
//! at the stream's end for a stream.

use axum::response::Response;
use http::{HeaderMap, HeaderName, HeaderValue};
use switchyard_engine::Token;
use switchyard_state::unix_ms;
use tracing::Span;

use crate::context::Arrival;
use crate::endpoint::Endpoint;
use crate::record::{CacheResult, LineAfter, RequestRecord, Trail};
use crate::request::names;
use crate::snapshot::View;
use crate::state::AppState;

/// Finishes the request `arrival` got `response` for, with what happened (`trail`) and the
/// model it asked for (empty when it was not read).
pub fn finish(
    state: &AppState,
    arrival: Arrival,
    mut response: Response,
    mut trail: Box<Trail>,
    model: String,
) -> Response {
    let Arrival {
        endpoint,
        request_id,
        started,
        span,
        trace,
        ..
    } = arrival;
    let status = response.status().as_u16();
    trail.trace = trace;
    record_request(&span, endpoint, &trail, &model, status);
    let headers = response.headers_mut();
    set_headers(headers, &trail, &request_id);
    trail.rate.write(headers, unix_ms());

    let total = started.elapsed();
    let total_micros = u64::try_from(total.as_micros()).unwrap_or(u64::MAX);
    state
        .metrics
        .gateway_overhead
        .observe_micros(total_micros.saturating_sub(trail.upstream_micros));
    let stream = trail.stream.clone();
    let record = RequestRecord {
        request_id,
        endpoint,
        model,
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

/// The trail names the request's key and its team.
pub fn name_client(view: &View, token: &Token, trail: &mut Trail) {
    trail.token = Some(token.name.clone());
    trail.token_id = Some(token.id);
    trail.team = token
        .team_id
        .and_then(|id| view.snapshot.team(id))
        .map(|t| t.name.clone());
}

/// The gateway's own headers: the request id (twice), the route, the final channel and the
/// number of attempts.
fn set_headers(headers: &mut HeaderMap, trail: &Trail, request_id: &str) {
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
    if let Some(cache) = &trail.cache {
        headers.insert(
            names::CACHE,
            HeaderValue::from_static(cache.result.as_str()),
        );
        if cache.result == CacheResult::Hit {
            headers.insert(http::header::AGE, HeaderValue::from(cache.age_seconds));
        }
        if let Some(similarity) = cache.similarity {
            set(
                headers,
                names::CACHE_SIMILARITY,
                &format!("{similarity:.3}"),
            );
        }
    }
}

/// The request span's fields, from what happened. Integers as `i64`: the OpenTelemetry layer
/// exports unsigned ones as strings.
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
