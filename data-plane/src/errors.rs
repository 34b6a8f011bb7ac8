//! Errors the gateway itself produces, rendered in the OpenAI error shape on OpenAI endpoints and
//! in the Anthropic shape on Anthropic endpoints.

use axum::body::Body;
use axum::response::Response;
use http::{header, HeaderValue, StatusCode};
use switchyard_mock_upstream::sim;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayError {
    pub status: StatusCode,
    /// OpenAI `type`.
    pub kind: &'static str,
    /// OpenAI `code`; also the low-cardinality label in logs.
    pub code: &'static str,
    pub message: String,
}

impl GatewayError {
    pub fn new(
        status: StatusCode,
        kind: &'static str,
        code: &'static str,
        message: impl Into<String>,
    ) -> GatewayError {
        GatewayError {
            status,
            kind,
            code,
            message: message.into(),
        }
    }

    pub fn unauthorized() -> GatewayError {
        GatewayError::new(
            StatusCode::UNAUTHORIZED,
            "invalid_request_error",
            "invalid_api_key",
            "Missing or invalid API key. Send it as `Authorization: Bearer <token>` or `x-api-key`.",
        )
    }

    pub fn bad_request(code: &'static str, message: impl Into<String>) -> GatewayError {
        GatewayError::new(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            code,
            message,
        )
    }

    pub fn not_ready() -> GatewayError {
        GatewayError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "server_error",
            "not_ready",
            "the gateway has no route snapshot yet",
        )
    }

    pub fn into_response(self, anthropic: bool) -> Response {
        let body = if anthropic {
            sim::anthropic_error_json(
                &self.message,
                sim::anthropic_error_kind(self.status.as_u16()),
            )
        } else {
            sim::openai_error_json(&self.message, self.kind, self.code)
        };
        let mut response = Response::new(Body::from(body));
        *response.status_mut() = self.status;
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        response
    }
}
