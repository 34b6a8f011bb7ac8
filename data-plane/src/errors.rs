//! Errors the gateway itself produces, rendered in the error shape of the client's protocol
//! (OpenAI, Anthropic or Gemini).

use axum::body::Body;
use axum::response::Response;
use http::{header, HeaderValue, StatusCode};
use switchyard_provider::{gateway_error_body, Protocol};

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

    pub fn into_response(self, protocol: Protocol) -> Response {
        let body = gateway_error_body(
            protocol,
            self.status.as_u16(),
            self.kind,
            self.code,
            &self.message,
        );
        let mut response = Response::new(Body::from(body));
        *response.status_mut() = self.status;
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        // Retrying a gateway-made 4xx cannot help (503/504 may).
        if self.status.is_client_error() {
            headers.insert("x-should-retry", HeaderValue::from_static("false"));
        }
        response
    }
}
