//! Errors the gateway itself produces, one variant per cause, rendered in the error shape of the
//! client's protocol (OpenAI, Anthropic or Gemini). Each variant fixes its status, OpenAI `type`
//! and `code` (the low-cardinality label in logs); only the message carries request data (a
//! model name, a limit, a feature), never a secret.

use axum::body::Body;
use axum::response::Response;
use http::{header, HeaderValue, Method, StatusCode};
use switchyard_engine::{Metric, ScopeKind, Window};
use switchyard_provider::{gateway_error_body, gateway_stream_error_event, Protocol};

use crate::upstream::TransportCause;

/// A refusal whose room comes back later than this is not worth an SDK's automatic retries
/// (they wait seconds): it says `x-should-retry: false`.
const RETRY_WORTHWHILE_MS: u64 = 60_000;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GatewayError {
    /// No snapshot has arrived yet.
    NotReady,
    /// The proxy is draining: a long-lived session (a realtime one) is not opened here.
    ShuttingDown,
    /// Missing or unknown API key.
    Unauthorized,
    /// The API key's expiry (`expires_at`, RFC 3339 UTC) has passed.
    TokenExpired { at: String },
    /// A hard limit of the key, its team, the route, a tag or the end user has no room. `spent`: a spend budget is
    /// used up for its window (otherwise a spend limit refusing is waiting for this proxy's
    /// share of the budget to be topped up: a plain rate limit, worth a retry in a second).
    RateLimited {
        scope: ScopeKind,
        metric: Metric,
        window: Window,
        value: u64,
        retry_after_ms: u64,
        spent: bool,
    },
    /// A path no endpoint serves.
    NotFound,
    /// A path that exists, with a method it does not take.
    MethodNotAllowed(Method),
    /// The request body exceeds `max_request_body_bytes`.
    RequestTooLarge { limit: usize },
    /// The request body did not arrive within the body deadline.
    RequestBodyTimeout,
    /// The request body could not be read.
    BodyReadError,
    /// The body is not the JSON (or multipart) the endpoint takes.
    InvalidJson(String),
    /// The body names no model.
    MissingModel,
    /// The body cannot be translated for the chosen member.
    InvalidRequest(String),
    /// The key may not pin a member.
    PinningNotAllowed,
    /// The pin header is not a member id.
    InvalidPin,
    /// No route serves the model.
    ModelNotFound { model: String },
    /// The key's team may not use the model.
    ModelNotAllowed { model: String },
    /// Every member of the route is disabled, excluded or incapable; `secrets_withheld` when
    /// some were excluded because the control plane sent their channels without secrets.
    NoEligibleMember {
        model: String,
        secrets_withheld: bool,
    },
    /// Every member left has no room under its channel's or its own upstream limit.
    UpstreamsRateLimited { model: String },
    /// Only members whose protocol cannot express the request were left.
    ProtocolUnsupported { feature: String, model: String },
    /// Every attempt timed out (first byte or body) and no upstream answered.
    UpstreamTimeout,
    /// Every stream ended before its first byte and no upstream answered.
    UpstreamStreamCut,
    /// No upstream could be reached (and none answered).
    UpstreamUnreachable,
    /// The same, the last attempt failing in transport for this cause (named in the message).
    UpstreamUnreachableBy(TransportCause),
    /// The last upstream gave a 2xx answer that is not a valid one (why: the reason).
    UpstreamInvalidAnswer(String),
    /// The last upstream refused the gateway's own credential for `channel` (its 401 or 403):
    /// the operator's configuration to fix, never to be mistaken for the client's key.
    /// `said`: the upstream's own words, key-like runs masked (may be empty).
    UpstreamAuthFailed {
        channel: String,
        status: u16,
        said: String,
    },
    /// A pass-through request names no channel open to it: unknown, not allowing pass-through,
    /// not enabled, or out of the key's team's reach (never said which).
    PassthroughNotFound,
    /// The channel allows pass-through, but not to this path.
    PassthroughPathNotAllowed,
    /// A pass-through path that could resolve elsewhere upstream (why: the rule it breaks).
    PassthroughBadPath(&'static str),
    /// The pass-through channel cannot be called from this proxy (why: the reason).
    ChannelUnavailable { channel: String, why: &'static str },
    /// A file or batch id this caller cannot reach: unknown, forged, altered, another key's, or
    /// on a channel no longer configured — all answered alike (the noun names the kind).
    NoSuchObject(&'static str),
    /// The shared state (a key's index of files and batches) could not be reached in time.
    StateUnavailable,
    /// A guardrail blocked the request (`answer: false`: it was never sent upstream) or its
    /// answer (`answer: true`: the client gets this instead); `rule` is the guardrail's name.
    GuardrailBlocked { rule: String, answer: bool },
}

impl GatewayError {
    pub fn unauthorized() -> GatewayError {
        GatewayError::Unauthorized
    }

    pub fn not_ready() -> GatewayError {
        GatewayError::NotReady
    }

    /// With the last attempt's transport cause: an unreachable upstream names it.
    pub fn caused_by(self, cause: Option<TransportCause>) -> GatewayError {
        match (self, cause) {
            (GatewayError::UpstreamUnreachable, Some(cause)) => {
                GatewayError::UpstreamUnreachableBy(cause)
            }
            (e, _) => e,
        }
    }

    pub fn status(&self) -> StatusCode {
        use GatewayError::*;
        match self {
            NotReady | ShuttingDown | NoEligibleMember { .. } | StateUnavailable => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            Unauthorized | TokenExpired { .. } => StatusCode::UNAUTHORIZED,
            RateLimited { .. } | UpstreamsRateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
            NotFound | ModelNotFound { .. } | PassthroughNotFound | NoSuchObject(_) => {
                StatusCode::NOT_FOUND
            }
            MethodNotAllowed(_) => StatusCode::METHOD_NOT_ALLOWED,
            RequestTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            RequestBodyTimeout => StatusCode::REQUEST_TIMEOUT,
            BodyReadError
            | InvalidJson(_)
            | MissingModel
            | InvalidRequest(_)
            | InvalidPin
            | PassthroughBadPath(_)
            | ProtocolUnsupported { .. }
            | GuardrailBlocked { .. } => StatusCode::BAD_REQUEST,
            PinningNotAllowed | ModelNotAllowed { .. } | PassthroughPathNotAllowed => {
                StatusCode::FORBIDDEN
            }
            ChannelUnavailable { .. } => StatusCode::SERVICE_UNAVAILABLE,
            UpstreamTimeout => StatusCode::GATEWAY_TIMEOUT,
            UpstreamStreamCut
            | UpstreamUnreachable
            | UpstreamUnreachableBy(_)
            | UpstreamInvalidAnswer(_)
            | UpstreamAuthFailed { .. } => StatusCode::BAD_GATEWAY,
        }
    }

    /// OpenAI `type`.
    pub fn kind(&self) -> &'static str {
        use GatewayError::*;
        match self {
            NotReady
            | ShuttingDown
            | NoEligibleMember { .. }
            | StateUnavailable
            | UpstreamTimeout
            | UpstreamStreamCut
            | UpstreamUnreachable
            | UpstreamUnreachableBy(_)
            | UpstreamInvalidAnswer(_)
            | UpstreamAuthFailed { .. }
            | ChannelUnavailable { .. } => "server_error",
            PinningNotAllowed | ModelNotAllowed { .. } | PassthroughPathNotAllowed => {
                "permission_error"
            }
            // OpenAI's own: `requests` / `tokens` for rate limits, `insufficient_quota` for an
            // exhausted budget.
            RateLimited { spent: true, .. } => "insufficient_quota",
            RateLimited {
                metric: Metric::Tokens,
                ..
            } => "tokens",
            RateLimited { .. } | UpstreamsRateLimited { .. } => "requests",
            _ => "invalid_request_error",
        }
    }

    /// OpenAI `code`; also the low-cardinality label in logs.
    pub fn code(&self) -> &'static str {
        use GatewayError::*;
        match self {
            NotReady => "not_ready",
            ShuttingDown => "shutting_down",
            Unauthorized => "invalid_api_key",
            TokenExpired { .. } => "token_expired",
            RateLimited { spent: true, .. } => "budget_exceeded",
            RateLimited { .. } | UpstreamsRateLimited { .. } => "rate_limit_exceeded",
            NotFound | NoSuchObject(_) => "not_found",
            StateUnavailable => "state_unavailable",
            MethodNotAllowed(_) => "method_not_allowed",
            RequestTooLarge { .. } => "request_too_large",
            RequestBodyTimeout => "request_body_timeout",
            BodyReadError => "body_read_error",
            InvalidJson(_) => "invalid_json",
            MissingModel => "missing_model",
            InvalidRequest(_) => "invalid_request",
            PinningNotAllowed => "pinning_not_allowed",
            InvalidPin => "invalid_pin",
            ModelNotFound { .. } => "model_not_found",
            ModelNotAllowed { .. } => "model_not_allowed",
            NoEligibleMember { .. } => "no_eligible_member",
            ProtocolUnsupported { .. } => "protocol_unsupported",
            UpstreamTimeout => "upstream_timeout",
            UpstreamStreamCut => "upstream_stream_cut",
            UpstreamUnreachable | UpstreamUnreachableBy(_) => "upstream_unreachable",
            UpstreamInvalidAnswer(_) => "upstream_invalid_answer",
            UpstreamAuthFailed { .. } => "upstream_auth_failed",
            PassthroughNotFound => "passthrough_not_found",
            PassthroughPathNotAllowed => "passthrough_path_not_allowed",
            PassthroughBadPath(_) => "invalid_path",
            ChannelUnavailable { .. } => "channel_unavailable",
            GuardrailBlocked { .. } => "guardrail_blocked",
        }
    }

    pub fn message(&self) -> String {
        use crate::request::PIN_HEADER;
        use GatewayError::*;
        match self {
            NotReady => "the gateway has no route snapshot yet".to_owned(),
            ShuttingDown => {
                "This proxy is shutting down; open the session again (it will reach another proxy).".to_owned()
            }
            Unauthorized => "Missing or invalid API key. Send it as `Authorization: Bearer <token>` or `x-api-key`.".to_owned(),
            TokenExpired { at } => format!("This API key expired at {at}."),
            RateLimited {
                scope,
                metric,
                window,
                value,
                retry_after_ms,
                spent,
            } => {
                let limit = describe(*scope, *metric, *window, *value);
                limit_message(&limit, retry_after_ms.div_ceil(1_000), *spent)
            }
            UpstreamsRateLimited { model } => format!(
                "Rate limit reached: every upstream serving `{model}` is at its configured limit. Retry after 1 s."
            ),
            NotFound => "No such endpoint on this gateway.".to_owned(),
            NoSuchObject(noun) => format!("No such {noun}."),
            StateUnavailable => {
                "The gateway's shared state did not answer in time; retry shortly.".to_owned()
            }
            MethodNotAllowed(method) => format!("{method} is not allowed on this path"),
            RequestTooLarge { limit } => format!("request body exceeds the limit of {limit} bytes"),
            RequestBodyTimeout => "the request body was not received in time".to_owned(),
            BodyReadError => "the request body could not be read".to_owned(),
            InvalidJson(message) | InvalidRequest(message) => message.clone(),
            MissingModel => "the request must name a `model`".to_owned(),
            PinningNotAllowed => format!("this API key may not use {PIN_HEADER}"),
            InvalidPin => format!("{PIN_HEADER} must be a member id"),
            ModelNotFound { model } => {
                format!("The model `{model}` does not exist or is not served by this gateway.")
            }
            ModelNotAllowed { model } => format!("This API key may not use the model `{model}`."),
            NoEligibleMember {
                model,
                secrets_withheld,
            } => no_member_message(model, *secrets_withheld),
            ProtocolUnsupported { feature, model } => format!(
                "The request uses {feature}, which no upstream serving `{model}` can express."
            ),
            UpstreamTimeout => {
                "The upstream did not answer within the request's time budget (last attempt: cause `timeout`).".to_owned()
            }
            UpstreamStreamCut => "Every upstream stream ended before its first byte.".to_owned(),
            UpstreamUnreachable => {
                "No upstream could be reached or gave a readable HTTP answer.".to_owned()
            }
            UpstreamUnreachableBy(cause) => format!(
                "No upstream could be reached or gave a readable HTTP answer (last attempt: {}, cause `{}`).",
                cause.describe(),
                cause.as_str()
            ),
            UpstreamInvalidAnswer(why) => format!("The upstream's answer was not valid: {why}."),
            UpstreamAuthFailed {
                channel,
                status,
                said,
            } => auth_failed_message(channel, *status, said),
            PassthroughNotFound => {
                "No channel of that name is open to this API key for pass-through.".to_owned()
            }
            PassthroughPathNotAllowed => {
                "The channel does not allow pass-through to this path.".to_owned()
            }
            PassthroughBadPath(why) => format!("{why}."),
            ChannelUnavailable { channel, why } => {
                format!("The channel `{channel}` cannot be called right now: {why}.")
            }
            GuardrailBlocked { rule, answer } => guardrail_message(rule, *answer),
        }
    }

    /// The error's body in `protocol`'s error shape.
    pub fn body(&self, protocol: Protocol) -> String {
        gateway_error_body(
            protocol,
            self.status().as_u16(),
            self.kind(),
            self.code(),
            &self.message(),
        )
    }

    /// The error as a mid-stream event in `protocol`'s SSE form (the same body as a plain
    /// refusal).
    pub fn stream_event(&self, protocol: Protocol) -> String {
        gateway_stream_error_event(
            protocol,
            self.status().as_u16(),
            self.kind(),
            self.code(),
            &self.message(),
        )
    }

    pub fn into_response(self, protocol: Protocol) -> Response {
        let status = self.status();
        let mut response = Response::new(Body::from(self.body(protocol)));
        *response.status_mut() = status;
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        // Retrying a gateway-made 4xx cannot help (503/504 may), except a rate limit's 429 once
        // there is room: `Retry-After` says when (SDKs read it, and `retry-after-ms`). A spent
        // budget, or a window that reopens only after a minute, is not worth automatic retries.
        let retry = match &self {
            GatewayError::RateLimited {
                retry_after_ms,
                spent,
                ..
            } => {
                let ms = (*retry_after_ms).max(1);
                let seconds = HeaderValue::from(ms.div_ceil(1_000));
                headers.insert(header::RETRY_AFTER, seconds);
                headers.insert("retry-after-ms", HeaderValue::from(ms));
                !*spent && ms <= RETRY_WORTHWHILE_MS
            }
            GatewayError::UpstreamsRateLimited { .. } => {
                let ms = switchyard_state::RETRY_SOON_MS;
                headers.insert(header::RETRY_AFTER, HeaderValue::from(ms.div_ceil(1_000)));
                headers.insert("retry-after-ms", HeaderValue::from(ms));
                true
            }
            // The gateway's own credential: no retry helps until the operator fixes it.
            GatewayError::UpstreamAuthFailed { .. } => false,
            _ => !status.is_client_error(),
        };
        if !retry {
            headers.insert("x-should-retry", HeaderValue::from_static("false"));
        }
        response
    }
}

/// The message of [`GatewayError::GuardrailBlocked`]: the rule by name, never what it matched.
pub fn guardrail_message(rule: &str, answer: bool) -> String {
    if answer {
        format!("The answer was blocked by the guardrail `{rule}` (code guardrail_blocked).")
    } else {
        format!("The request was blocked by the guardrail `{rule}` (code guardrail_blocked); it was not sent to any model.")
    }
}

/// The message of [`GatewayError::NoEligibleMember`]: channels excluded because this proxy got
/// no secrets are named with the fix.
fn no_member_message(model: &str, secrets_withheld: bool) -> String {
    if secrets_withheld {
        format!(
            "No upstream can serve `{model}` right now: its channels are excluded as `secrets_withheld`. The control plane has no fleet token, so it sent this proxy no credentials, header values or URL passwords; set SWITCHYARD_FLEET_TOKEN on the control plane and the proxies."
        )
    } else {
        format!("No upstream can serve `{model}` right now (all disabled, excluded or incapable).")
    }
}

/// The message of [`GatewayError::UpstreamAuthFailed`]: whose credential, what the upstream
/// said, and that the client's own key was fine.
fn auth_failed_message(channel: &str, status: u16, said: &str) -> String {
    let said = if said.is_empty() {
        String::new()
    } else {
        format!(": {said}")
    };
    format!(
        "The upstream provider refused this gateway's own credentials for its channel `{channel}` (HTTP {status}{said}). Your API key was accepted: the gateway's operator must fix that channel's credentials."
    )
}

/// `text` with every run of 16 or more key-like characters (letters, digits, `-`, `_`) that
/// holds both letters and digits masked but its first four: an upstream's complaint about a key
/// may quote the key (plain words, however long, stay as they are).
pub fn mask_key_like(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut run = String::new();
    let flush = |run: &mut String, out: &mut String| {
        let key_like = run.chars().count() >= 16
            && run.chars().any(|c| c.is_ascii_digit())
            && run.chars().any(|c| c.is_ascii_alphabetic());
        if key_like {
            out.extend(run.chars().take(4));
            out.push_str("****");
        } else {
            out.push_str(run);
        }
        run.clear();
    };
    for c in text.chars() {
        if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
            run.push(c);
        } else {
            flush(&mut run, &mut out);
            out.push(c);
        }
    }
    flush(&mut run, &mut out);
    out
}

/// A limit's refusal: a spent budget resets, a rate limit is retried.
fn limit_message(limit: &str, wait_s: u64, spent: bool) -> String {
    if spent {
        format!("Budget exceeded: {limit} is spent. It resets in {wait_s} s.")
    } else {
        format!("Rate limit reached: {limit}. Retry after {wait_s} s.")
    }
}

/// How a refusal names its limit: whose it is (never another client's name), what it counts
/// and over which window.
pub fn describe(scope: ScopeKind, metric: Metric, window: Window, value: u64) -> String {
    let whose = match scope {
        ScopeKind::Token => "this API key's",
        ScopeKind::Team => "its team's",
        ScopeKind::Route => "the model route's",
        ScopeKind::Channel => "the upstream channel's",
        ScopeKind::Member => "the upstream member's",
        // The request's own tag or end user: never named, never another end user's.
        ScopeKind::Tag => "its tag's",
        ScopeKind::EndUser => "its end user's",
    };
    let per = match window {
        Window::None => String::new(),
        Window::Month => " per calendar month (UTC)".to_owned(),
        Window::Day => " per day (UTC)".to_owned(),
        Window::Week => " per week (UTC, from Monday)".to_owned(),
        Window::Rolling(days) => format!(" over the last {days} days (UTC)"),
        w => format!(" per {}", w.as_str()),
    };
    match metric {
        Metric::Spend => format!(
            "{whose} spend budget of {} USD{per}",
            switchyard_engine::limit::format_micros(value)
        ),
        Metric::Concurrent => format!("{whose} limit of {value} concurrent requests"),
        Metric::Requests => format!("{whose} limit of {value} requests{per}"),
        Metric::Tokens => format!("{whose} limit of {value} tokens{per}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_like_runs_are_masked_and_words_are_not() {
        assert_eq!(
            mask_key_like("Incorrect API key provided: sk-proj-Ab12Cd34Ef56Gh78. Check it."),
            "Incorrect API key provided: sk-p****. Check it."
        );
        assert_eq!(
            mask_key_like("InvalidSignatureException: the signature differs"),
            "InvalidSignatureException: the signature differs"
        );
        assert_eq!(mask_key_like("key abc123 is short"), "key abc123 is short");
    }

    #[test]
    fn a_refusal_names_whose_limit_and_what_it_counts() {
        assert_eq!(
            describe(ScopeKind::Token, Metric::Requests, Window::Minute, 600),
            "this API key's limit of 600 requests per minute"
        );
        assert_eq!(
            describe(ScopeKind::Team, Metric::Spend, Window::Month, 25_500_000),
            "its team's spend budget of 25.5 USD per calendar month (UTC)"
        );
        assert_eq!(
            describe(ScopeKind::Route, Metric::Concurrent, Window::None, 4),
            "the model route's limit of 4 concurrent requests"
        );
        assert_eq!(
            describe(ScopeKind::Tag, Metric::Spend, Window::Rolling(7), 5_000_000),
            "its tag's spend budget of 5 USD over the last 7 days (UTC)"
        );
        assert_eq!(
            describe(ScopeKind::EndUser, Metric::Requests, Window::Minute, 3),
            "its end user's limit of 3 requests per minute"
        );
    }

    #[test]
    fn an_unreachable_upstream_names_the_last_attempts_transport_cause() {
        for cause in TransportCause::ALL {
            let e = GatewayError::UpstreamUnreachable.caused_by(Some(cause));
            assert_eq!(e, GatewayError::UpstreamUnreachableBy(cause));
            assert_eq!(
                (e.status().as_u16(), e.code()),
                (502, "upstream_unreachable")
            );
            let message = e.message();
            assert!(
                message.starts_with("No upstream could be reached"),
                "{message}"
            );
            assert!(
                message.contains(&format!("cause `{}`", cause.as_str())),
                "{message}"
            );
        }
        // No cause known, or another error: unchanged.
        assert_eq!(
            GatewayError::UpstreamUnreachable.caused_by(None),
            GatewayError::UpstreamUnreachable
        );
        assert_eq!(
            GatewayError::UpstreamStreamCut.caused_by(Some(TransportCause::Reset)),
            GatewayError::UpstreamStreamCut
        );
        assert!(GatewayError::UpstreamTimeout
            .message()
            .contains("cause `timeout`"));
    }

    #[test]
    fn each_error_renders_its_status_code_and_retry_hint() {
        let cases = [
            (GatewayError::NotReady, 503, "server_error", "not_ready"),
            (
                GatewayError::Unauthorized,
                401,
                "invalid_request_error",
                "invalid_api_key",
            ),
            (
                GatewayError::PinningNotAllowed,
                403,
                "permission_error",
                "pinning_not_allowed",
            ),
            (
                GatewayError::ModelNotFound { model: "m".into() },
                404,
                "invalid_request_error",
                "model_not_found",
            ),
            (
                GatewayError::RequestTooLarge { limit: 10 },
                413,
                "invalid_request_error",
                "request_too_large",
            ),
            (
                GatewayError::UpstreamTimeout,
                504,
                "server_error",
                "upstream_timeout",
            ),
            (
                GatewayError::UpstreamUnreachable,
                502,
                "server_error",
                "upstream_unreachable",
            ),
            (
                GatewayError::UpstreamUnreachableBy(TransportCause::Refused),
                502,
                "server_error",
                "upstream_unreachable",
            ),
        ];
        for (error, status, kind, code) in cases {
            assert_eq!(
                (error.status().as_u16(), error.kind(), error.code()),
                (status, kind, code)
            );
            let response = error.into_response(Protocol::OpenAi);
            assert_eq!(response.status().as_u16(), status);
            let retry = response.headers().get("x-should-retry");
            assert_eq!(retry.is_some(), (400..500).contains(&status), "{code}");
        }
        assert_eq!(
            GatewayError::NoEligibleMember {
                model: "gpt".into(),
                secrets_withheld: false,
            }
            .message(),
            "No upstream can serve `gpt` right now (all disabled, excluded or incapable)."
        );
        let withheld = GatewayError::NoEligibleMember {
            model: "gpt".into(),
            secrets_withheld: true,
        };
        assert_eq!(withheld.code(), "no_eligible_member");
        assert!(withheld.message().contains("`secrets_withheld`"));
        assert!(withheld.message().contains("SWITCHYARD_FLEET_TOKEN"));
    }

    fn limited(metric: Metric, window: Window, retry_after_ms: u64) -> GatewayError {
        GatewayError::RateLimited {
            scope: ScopeKind::Token,
            metric,
            window,
            value: 600,
            retry_after_ms,
            spent: metric == Metric::Spend && retry_after_ms > 1_000,
        }
    }

    #[test]
    fn a_refusal_is_a_429_with_retry_after_and_a_spent_budget_says_not_to_retry() {
        let minute = limited(Metric::Requests, Window::Minute, 12_300);
        assert_eq!(
            (minute.status().as_u16(), minute.kind(), minute.code()),
            (429, "requests", "rate_limit_exceeded")
        );
        assert_eq!(
            minute.message(),
            "Rate limit reached: this API key's limit of 600 requests per minute. Retry after 13 s."
        );
        let response = minute.into_response(Protocol::OpenAi);
        let h = response.headers();
        assert_eq!(h["retry-after"], "13");
        assert_eq!(h["retry-after-ms"], "12300");
        assert!(h.get("x-should-retry").is_none(), "worth a retry in 13 s");

        // Worth a retry up to a minute away, not beyond.
        for (ms, worth) in [
            (RETRY_WORTHWHILE_MS - 1, true),
            (RETRY_WORTHWHILE_MS, true),
            (RETRY_WORTHWHILE_MS + 1, false),
        ] {
            let response =
                limited(Metric::Requests, Window::Hour, ms).into_response(Protocol::OpenAi);
            assert_eq!(
                response.headers().get("x-should-retry").is_none(),
                worth,
                "{ms} ms away"
            );
            assert_eq!(
                response.headers()["retry-after-ms"],
                ms.to_string().as_str()
            );
        }

        let day = limited(Metric::Tokens, Window::Day, 3_600_000);
        assert_eq!(day.kind(), "tokens");
        let response = day.into_response(Protocol::Anthropic);
        assert_eq!(
            response.headers()["x-should-retry"],
            "false",
            "an hour away"
        );
        assert_eq!(response.headers()["retry-after"], "3600");

        let topping_up = limited(Metric::Spend, Window::Month, 1_000);
        assert_eq!(
            (topping_up.kind(), topping_up.code()),
            ("requests", "rate_limit_exceeded"),
            "a budget not spent yet, waiting for this proxy's share: retry in a second"
        );
        assert!(topping_up
            .into_response(Protocol::OpenAi)
            .headers()
            .get("x-should-retry")
            .is_none());
        let budget = limited(Metric::Spend, Window::Month, 86_400_000);
        assert_eq!(
            (budget.kind(), budget.code()),
            ("insufficient_quota", "budget_exceeded")
        );
        let response = budget.into_response(Protocol::Gemini);
        assert_eq!(response.status().as_u16(), 429);
        assert_eq!(response.headers()["x-should-retry"], "false");

        let expired = GatewayError::TokenExpired {
            at: "2026-01-01T00:00:00Z".into(),
        };
        assert_eq!(
            (expired.status().as_u16(), expired.code()),
            (401, "token_expired")
        );
        assert_eq!(
            expired.message(),
            "This API key expired at 2026-01-01T00:00:00Z."
        );
    }
}
