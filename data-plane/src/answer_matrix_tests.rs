//! The answers the proxy makes itself, checked against matrices written here by hand from the
//! documented answers (docs/src/reference/errors.md, docs/src/guides/limits.md), never from the
//! code's own rules: every gateway error's status, code and type in each protocol and whether it
//! says `x-should-retry: false`; and a limit refusal's answer on the real path from the
//! refusal to the response, at, below and above the named bounds it turns on
//! ([`RETRY_SOON_MS`]: only this proxy's share waiting for a top-up; a minute: worth a retry).

use std::sync::Arc;

use axum::response::Response;
use http::Method;
use serde_json::Value;
use switchyard_engine::{Limit, LimitKey, LimitMode, Metric, ScopeKind, Window};
use switchyard_provider::Protocol;
use switchyard_state::{InMemoryStore, LimitRequest, StateStore, RETRY_SOON_MS};

use crate::admission::{Held, Refused};
use crate::errors::GatewayError;
use crate::upstream::TransportCause;

fn body_of(response: Response) -> (u16, Option<String>, Value) {
    let status = response.status().as_u16();
    let retry = response
        .headers()
        .get("x-should-retry")
        .map(|v| v.to_str().unwrap().to_owned());
    let bytes = whole_body(response);
    (status, retry, serde_json::from_slice(&bytes).unwrap())
}

/// The whole body of a gateway-made answer (always a complete buffer).
fn whole_body(response: Response) -> Vec<u8> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    runtime
        .block_on(axum::body::to_bytes(response.into_body(), usize::MAX))
        .unwrap()
        .to_vec()
}

/// One row: the error, then as documented: HTTP status, `code`, OpenAI `type`, Anthropic
/// `error.type`, Gemini `error.status`, and whether it says `x-should-retry: false`.
type Row = (
    GatewayError,
    u16,
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    bool,
);

#[rustfmt::skip]
fn documented_errors() -> Vec<Row> {
    use GatewayError::*;
    let limited = |metric, retry_after_ms, spent| RateLimited {
        scope: ScopeKind::Token,
        metric,
        window: Window::Minute,
        value: 10,
        retry_after_ms,
        spent,
    };
    let m = || "m".to_owned();
    vec![
        (NotReady, 503, "not_ready", "server_error", "overloaded_error", "UNAVAILABLE", false),
        (ShuttingDown, 503, "shutting_down", "server_error", "overloaded_error", "UNAVAILABLE", false),
        (Unauthorized, 401, "invalid_api_key", "invalid_request_error", "authentication_error", "UNAUTHENTICATED", true),
        (TokenExpired { at: "2026-01-01T00:00:00Z".into() }, 401, "token_expired", "invalid_request_error", "authentication_error", "UNAUTHENTICATED", true),
        (limited(Metric::Requests, 2_000, false), 429, "rate_limit_exceeded", "requests", "rate_limit_error", "RESOURCE_EXHAUSTED", false),
        (limited(Metric::Tokens, 2_000, false), 429, "rate_limit_exceeded", "tokens", "rate_limit_error", "RESOURCE_EXHAUSTED", false),
        (limited(Metric::Spend, 3_600_000, true), 429, "budget_exceeded", "insufficient_quota", "rate_limit_error", "RESOURCE_EXHAUSTED", true),
        (UpstreamsRateLimited { model: m() }, 429, "rate_limit_exceeded", "requests", "rate_limit_error", "RESOURCE_EXHAUSTED", false),
        (NotFound, 404, "not_found", "invalid_request_error", "not_found_error", "NOT_FOUND", true),
        (MethodNotAllowed(Method::PUT), 405, "method_not_allowed", "invalid_request_error", "invalid_request_error", "FAILED_PRECONDITION", true),
        (RequestTooLarge { limit: 10 }, 413, "request_too_large", "invalid_request_error", "request_too_large", "INVALID_ARGUMENT", true),
        (RequestBodyTimeout, 408, "request_body_timeout", "invalid_request_error", "invalid_request_error", "FAILED_PRECONDITION", true),
        (BodyReadError, 400, "body_read_error", "invalid_request_error", "invalid_request_error", "INVALID_ARGUMENT", true),
        (InvalidJson("x".into()), 400, "invalid_json", "invalid_request_error", "invalid_request_error", "INVALID_ARGUMENT", true),
        (MissingModel, 400, "missing_model", "invalid_request_error", "invalid_request_error", "INVALID_ARGUMENT", true),
        (InvalidRequest("x".into()), 400, "invalid_request", "invalid_request_error", "invalid_request_error", "INVALID_ARGUMENT", true),
        (PinningNotAllowed, 403, "pinning_not_allowed", "permission_error", "permission_error", "PERMISSION_DENIED", true),
        (InvalidPin, 400, "invalid_pin", "invalid_request_error", "invalid_request_error", "INVALID_ARGUMENT", true),
        (ModelNotFound { model: m() }, 404, "model_not_found", "invalid_request_error", "not_found_error", "NOT_FOUND", true),
        (ModelNotAllowed { model: m() }, 403, "model_not_allowed", "permission_error", "permission_error", "PERMISSION_DENIED", true),
        (NoEligibleMember { model: m(), secrets_withheld: false }, 503, "no_eligible_member", "server_error", "overloaded_error", "UNAVAILABLE", false),
        (ProtocolUnsupported { feature: "f".into(), model: m() }, 400, "protocol_unsupported", "invalid_request_error", "invalid_request_error", "INVALID_ARGUMENT", true),
        (UpstreamTimeout, 504, "upstream_timeout", "server_error", "timeout_error", "DEADLINE_EXCEEDED", false),
        (UpstreamStreamCut, 502, "upstream_stream_cut", "server_error", "api_error", "INTERNAL", false),
        (UpstreamUnreachable, 502, "upstream_unreachable", "server_error", "api_error", "INTERNAL", false),
        (UpstreamUnreachableBy(TransportCause::Refused), 502, "upstream_unreachable", "server_error", "api_error", "INTERNAL", false),
        (UpstreamInvalidAnswer("x".into()), 502, "upstream_invalid_answer", "server_error", "api_error", "INTERNAL", false),
        (UpstreamAuthFailed { channel: "c".into(), status: 401, said: String::new() }, 502, "upstream_auth_failed", "server_error", "api_error", "INTERNAL", true),
        (PassthroughNotFound, 404, "passthrough_not_found", "invalid_request_error", "not_found_error", "NOT_FOUND", true),
        (PassthroughPathNotAllowed, 403, "passthrough_path_not_allowed", "permission_error", "permission_error", "PERMISSION_DENIED", true),
        (PassthroughBadPath("p"), 400, "invalid_path", "invalid_request_error", "invalid_request_error", "INVALID_ARGUMENT", true),
        (ChannelUnavailable { channel: "c".into(), why: "w" }, 503, "channel_unavailable", "server_error", "overloaded_error", "UNAVAILABLE", false),
    ]
}

#[test]
fn every_gateway_error_answers_as_documented_in_each_protocol() {
    for (error, status, code, openai, anthropic, gemini, no_retry) in documented_errors() {
        let what = format!("{error:?}");
        let (got, retry, body) = body_of(error.clone().into_response(Protocol::OpenAi));
        assert_eq!(got, status, "{what}");
        assert_eq!(body["error"]["code"], code, "{what}");
        assert_eq!(body["error"]["type"], openai, "{what}");
        assert_eq!(retry.as_deref(), no_retry.then_some("false"), "{what}");
        let (got, retry, body) = body_of(error.clone().into_response(Protocol::Anthropic));
        assert_eq!(got, status, "{what}");
        assert_eq!(body["type"], "error", "{what}");
        assert_eq!(body["error"]["type"], anthropic, "{what}");
        assert_eq!(retry.as_deref(), no_retry.then_some("false"), "{what}");
        let (got, _, body) = body_of(error.into_response(Protocol::Gemini));
        assert_eq!(got, status, "{what}");
        assert_eq!(body["error"]["status"], gemini, "{what}");
        assert_eq!(body["error"]["code"], status, "{what}");
    }
}

fn limit(metric: Metric, window: Window, value: u64) -> Limit {
    Limit {
        key: LimitKey {
            scope: ScopeKind::Token,
            scope_id: 7,
            metric,
            window,
            rule: None,
        },
        value,
        mode: LimitMode::Hard,
    }
}

/// A refusal by `limit` whose room comes back in `retry_after_ms`, as the store gives it.
fn refused(limit: Limit, retry_after_ms: u64) -> Refused {
    Refused {
        limits: vec![limit],
        limit,
        retry_after_ms,
    }
}

/// A refusal row: the limit and its wait (ms), then as documented: `code`, OpenAI `type`,
/// retryable (no `x-should-retry: false`), `Retry-After` seconds, and whether the proxy waits
/// for a top-up before answering.
type RefusalRow = (
    Limit,
    u64,
    &'static str,
    &'static str,
    bool,
    &'static str,
    bool,
);

#[rustfmt::skip]
fn refusal_rows() -> Vec<RefusalRow> {
    let spend = limit(Metric::Spend, Window::Day, 5_000_000);
    let requests = limit(Metric::Requests, Window::Minute, 10);
    let tokens = limit(Metric::Tokens, Window::Hour, 1_000);
    let concurrent = limit(Metric::Concurrent, Window::None, 2);
    let soon = RETRY_SOON_MS;
    // (limit, retry_after_ms) → (code, OpenAI type, retryable, Retry-After seconds, waits for a
    // top-up before answering). Written out: a spend refusal within a second of room is only
    // this proxy's share awaiting its top-up — a plain, retryable rate limit; beyond, the budget
    // is spent until its window ends. Any 429 whose room is back within a minute is retryable.
    vec![
        (spend, soon - 1, "rate_limit_exceeded", "requests", true, "1", true),
        (spend, soon, "rate_limit_exceeded", "requests", true, "1", true),
        (spend, soon + 1, "budget_exceeded", "insufficient_quota", false, "2", false),
        (spend, 86_400_000, "budget_exceeded", "insufficient_quota", false, "86400", false),
        (requests, soon - 1, "rate_limit_exceeded", "requests", true, "1", true),
        (requests, soon, "rate_limit_exceeded", "requests", true, "1", true),
        (requests, soon + 1, "rate_limit_exceeded", "requests", true, "2", false),
        (requests, 59_999, "rate_limit_exceeded", "requests", true, "60", false),
        (requests, 60_000, "rate_limit_exceeded", "requests", true, "60", false),
        (requests, 60_001, "rate_limit_exceeded", "requests", false, "61", false),
        (tokens, soon, "rate_limit_exceeded", "tokens", true, "1", true),
        (tokens, 3_600_000, "rate_limit_exceeded", "tokens", false, "3600", false),
        // A concurrency slot comes back in its own time: no top-up is waited for.
        (concurrent, soon, "rate_limit_exceeded", "requests", true, "1", false),
    ]
}

#[test]
fn a_refusal_answers_by_its_wait_at_below_and_above_each_bound() {
    for (limit, wait, code, kind, retryable, seconds, tops_up) in refusal_rows() {
        let what = format!(
            "{:?} {:?} refused for {wait} ms",
            limit.key.metric, limit.key.window
        );
        let refusal = refused(limit, wait);
        assert_eq!(refusal.topping_up(), tops_up, "{what}");
        let response = refusal.error().into_response(Protocol::OpenAi);
        assert_eq!(response.headers()["retry-after"], seconds, "{what}");
        assert_eq!(
            response.headers()["retry-after-ms"],
            wait.to_string().as_str(),
            "{what}"
        );
        let (status, retry, body) = body_of(response);
        assert_eq!(status, 429, "{what}");
        assert_eq!(body["error"]["code"], code, "{what}");
        assert_eq!(body["error"]["type"], kind, "{what}");
        assert_eq!(retry.as_deref(), (!retryable).then_some("false"), "{what}");
    }
}

#[test]
fn a_spent_budget_from_the_store_is_budget_exceeded_and_a_full_slot_is_a_rate_limit() {
    let store: Arc<dyn StateStore> = Arc::new(InMemoryStore::new());
    // Noon UTC: half a day left in the budget's window.
    let noon: u64 = 1_700_000_000_000 - 1_700_000_000_000 % 86_400_000 + 43_200_000;
    let spend = limit(Metric::Spend, Window::Day, 100);
    let (admission, held) = Held::take(&store, vec![spend], 0, noon);
    assert!(admission.admitted());
    drop(held);
    store.limit_settle(&[spend], Metric::Spend, 100, noon, noon);
    let (_, outcome) = Held::take(&store, vec![spend], 0, noon + 1);
    let Err(refusal) = outcome else {
        panic!("a spent budget admitted a request")
    };
    assert_eq!(refusal.retry_after_ms, 43_200_000 - 1);
    let (status, retry, body) = body_of(refusal.error().into_response(Protocol::OpenAi));
    assert_eq!(
        (status, retry.as_deref(), &body["error"]["code"]),
        (429, Some("false"), &Value::from("budget_exceeded"))
    );

    let slot = limit(Metric::Concurrent, Window::None, 1);
    let request = LimitRequest {
        limits: &[slot],
        tokens: 0,
    };
    assert!(store.limit_take(&request, noon).admitted());
    let (_, outcome) = Held::take(&store, vec![slot], 0, noon);
    let Err(refusal) = outcome else {
        panic!("a full concurrency limit admitted a request")
    };
    assert_eq!(refusal.retry_after_ms, RETRY_SOON_MS);
    let (status, retry, body) = body_of(refusal.error().into_response(Protocol::OpenAi));
    assert_eq!(
        (status, retry, &body["error"]["code"]),
        (429, None, &Value::from("rate_limit_exceeded"))
    );
}
