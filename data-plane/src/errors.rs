//! Errors the gateway itself produces, one variant per cause, rendered in the error shape of the
//! client's protocol (OpenAI, Anthropic or Gemini). Each variant fixes its status, OpenAI `type`
//! and `code` (the low-cardinality label in logs); only the message carries request data (a
//! model name, a limit, a feature), never a secret.

use axum::body::Body;
use axum::response::Response;
use http::{header, HeaderValue, Method, StatusCode};
use switchyard_provider::{gateway_error_body, Protocol};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GatewayError {
    /// No snapshot has arrived yet.
    NotReady,
    /// Missing or unknown API key.
    Unauthorized,
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
    /// Only members whose protocol cannot express the request were left.
    ProtocolUnsupported { feature: String, model: String },
    /// Every attempt timed out (first byte or body) and no upstream answered.
    UpstreamTimeout,
    /// Every stream ended before its first byte and no upstream answered.
    UpstreamStreamCut,
    /// No upstream could be reached (and none answered).
    UpstreamUnreachable,
}

impl GatewayError {
    pub fn unauthorized() -> GatewayError {
        GatewayError::Unauthorized
    }

    pub fn not_ready() -> GatewayError {
        GatewayError::NotReady
    }

    pub fn status(&self) -> StatusCode {
        use GatewayError::*;
        match self {
            NotReady | NoEligibleMember { .. } => StatusCode::SERVICE_UNAVAILABLE,
            Unauthorized => StatusCode::UNAUTHORIZED,
            NotFound | ModelNotFound { .. } => StatusCode::NOT_FOUND,
            MethodNotAllowed(_) => StatusCode::METHOD_NOT_ALLOWED,
            RequestTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            RequestBodyTimeout => StatusCode::REQUEST_TIMEOUT,
            BodyReadError
            | InvalidJson(_)
            | MissingModel
            | InvalidRequest(_)
            | InvalidPin
            | ProtocolUnsupported { .. } => StatusCode::BAD_REQUEST,
            PinningNotAllowed | ModelNotAllowed { .. } => StatusCode::FORBIDDEN,
            UpstreamTimeout => StatusCode::GATEWAY_TIMEOUT,
            UpstreamStreamCut | UpstreamUnreachable => StatusCode::BAD_GATEWAY,
        }
    }

    /// OpenAI `type`.
    pub fn kind(&self) -> &'static str {
        use GatewayError::*;
        match self {
            NotReady
            | NoEligibleMember { .. }
            | UpstreamTimeout
            | UpstreamStreamCut
            | UpstreamUnreachable => "server_error",
            PinningNotAllowed | ModelNotAllowed { .. } => "permission_error",
            _ => "invalid_request_error",
        }
    }

    /// OpenAI `code`; also the low-cardinality label in logs.
    pub fn code(&self) -> &'static str {
        use GatewayError::*;
        match self {
            NotReady => "not_ready",
            Unauthorized => "invalid_api_key",
            NotFound => "not_found",
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
            UpstreamUnreachable => "upstream_unreachable",
        }
    }

    pub fn message(&self) -> String {
        use crate::server::PIN_HEADER;
        use GatewayError::*;
        match self {
            NotReady => "the gateway has no route snapshot yet".to_owned(),
            Unauthorized => "Missing or invalid API key. Send it as `Authorization: Bearer <token>` or `x-api-key`.".to_owned(),
            NotFound => "No such endpoint on this gateway.".to_owned(),
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
                secrets_withheld: false,
            } => format!(
                "No upstream can serve `{model}` right now (all disabled, excluded or incapable)."
            ),
            NoEligibleMember {
                model,
                secrets_withheld: true,
            } => format!(
                "No upstream can serve `{model}` right now: its channels are excluded as `secrets_withheld`. The control plane has no fleet token, so it sent this proxy no credentials, header values or URL passwords; set SWITCHYARD_FLEET_TOKEN on the control plane and the proxies."
            ),
            ProtocolUnsupported { feature, model } => format!(
                "The request uses {feature}, which no upstream serving `{model}` can express."
            ),
            UpstreamTimeout => {
                "The upstream did not answer within the request's time budget.".to_owned()
            }
            UpstreamStreamCut => "Every upstream stream ended before its first byte.".to_owned(),
            UpstreamUnreachable => "No upstream could be reached.".to_owned(),
        }
    }

    pub fn into_response(self, protocol: Protocol) -> Response {
        let status = self.status();
        let body = gateway_error_body(
            protocol,
            status.as_u16(),
            self.kind(),
            self.code(),
            &self.message(),
        );
        let mut response = Response::new(Body::from(body));
        *response.status_mut() = status;
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        // Retrying a gateway-made 4xx cannot help (503/504 may).
        if status.is_client_error() {
            headers.insert("x-should-retry", HeaderValue::from_static("false"));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
