//! The admin API's error type. It renders itself as the OpenAI error shape
//! (`{"error":{"message","type","param","code"}}`), where `param` names the offending field.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("missing or invalid admin token")]
    Unauthorized,
    /// The admin token's role is below what the route needs: 403.
    #[error("{message}")]
    Forbidden { message: String },
    /// The caller administers one team, and the route is for the whole fleet's admins, or the
    /// body names something of another team or of the fleet: 403.
    #[error("{message}")]
    OutsideTeam { message: String },
    /// Malformed request (unparseable JSON, bad query string): 400.
    #[error("{message}")]
    BadRequest {
        param: Option<String>,
        message: String,
    },
    /// Well-formed but invalid input (range, pattern, unknown enum value, duplicate): 422.
    #[error("{message}")]
    Validation { param: String, message: String },
    #[error("{resource} {id} not found")]
    NotFound { resource: &'static str, id: String },
    /// The write would break a reference (e.g. deleting a channel that members use): 409.
    #[error("{message}")]
    Conflict { message: String },
    /// No route matches the model (explain).
    #[error("{message}")]
    ModelNotFound { message: String },
    /// Postgres is unreachable, or no snapshot is compiled yet: 503.
    #[error("{message}")]
    Unavailable { message: String },
    /// The request body is larger than the admin API accepts: 413.
    #[error("request body is larger than the limit of {limit} bytes")]
    PayloadTooLarge { limit: usize },
    /// The request body did not arrive within the body deadline: 408.
    #[error("the request body was not received in time")]
    RequestBodyTimeout,
    /// The request body is not declared as JSON: 415.
    #[error("{message}")]
    UnsupportedMediaType { message: String },
    /// The path exists but not with this method: 405.
    #[error("method {method} is not allowed on this path")]
    MethodNotAllowed { method: String },
    /// No endpoint has this path: 404.
    #[error("no endpoint {path}")]
    UnknownEndpoint { path: String },
    /// A single sign-on token (a bearer JWT, or the ID token at sign-in) was refused: 401.
    #[error("{message}")]
    TokenRefused { message: String },
    /// The sign-in could not be completed (state, provider error, code exchange): 400.
    #[error("{message}")]
    SignInFailed { message: String },
    /// A person signed in through single sign-on, but none of their groups has a role: 403.
    #[error("{message}")]
    NoMappedRole { message: String },
    /// A write made with the console's session cookie without the session's CSRF token: 403.
    #[error("a write made with the console's session cookie needs its x-switchyard-csrf header (the token /api/v1/whoami answers for the session)")]
    CsrfRefused,
    #[error("internal error")]
    Internal(#[source] anyhow::Error),
}

impl ApiError {
    /// A 422 naming `param`; the message is prefixed with the field when it does not say it.
    pub fn validation(param: impl Into<String>, message: impl Into<String>) -> ApiError {
        let param = param.into();
        let mut message = message.into();
        let base = param.split(['[', '.']).next().unwrap_or(&param);
        if !message.contains(base) {
            message = format!("{param}: {message}");
        }
        ApiError::Validation { param, message }
    }

    pub fn bad_request(param: Option<&str>, message: impl Into<String>) -> ApiError {
        ApiError::BadRequest {
            param: param.map(str::to_owned),
            message: message.into(),
        }
    }

    pub fn not_found(resource: &'static str, id: impl ToString) -> ApiError {
        ApiError::NotFound {
            resource,
            id: id.to_string(),
        }
    }

    fn status(&self) -> StatusCode {
        match self {
            ApiError::Unauthorized => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden { .. } | ApiError::OutsideTeam { .. } => StatusCode::FORBIDDEN,
            ApiError::BadRequest { .. } => StatusCode::BAD_REQUEST,
            ApiError::Validation { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::NotFound { .. } | ApiError::ModelNotFound { .. } => StatusCode::NOT_FOUND,
            ApiError::Conflict { .. } => StatusCode::CONFLICT,
            ApiError::Unavailable { .. } => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::RequestBodyTimeout => StatusCode::REQUEST_TIMEOUT,
            ApiError::UnsupportedMediaType { .. } => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::UnknownEndpoint { .. } => StatusCode::NOT_FOUND,
            ApiError::TokenRefused { .. } => StatusCode::UNAUTHORIZED,
            ApiError::SignInFailed { .. } => StatusCode::BAD_REQUEST,
            ApiError::NoMappedRole { .. } | ApiError::CsrfRefused => StatusCode::FORBIDDEN,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// (type, code): low-cardinality labels, also used for logs.
    fn kind(&self) -> (&'static str, &'static str) {
        match self {
            ApiError::Unauthorized => ("authentication_error", "invalid_admin_token"),
            ApiError::Forbidden { .. } => ("permission_error", "insufficient_role"),
            ApiError::OutsideTeam { .. } => ("permission_error", "outside_team"),
            ApiError::BadRequest { .. } => ("invalid_request_error", "bad_request"),
            ApiError::Validation { .. } => ("invalid_request_error", "validation_failed"),
            ApiError::NotFound { .. } => ("not_found_error", "not_found"),
            ApiError::ModelNotFound { .. } => ("not_found_error", "model_not_found"),
            ApiError::Conflict { .. } => ("conflict_error", "conflict"),
            ApiError::Unavailable { .. } => ("service_unavailable", "unavailable"),
            ApiError::PayloadTooLarge { .. } => ("invalid_request_error", "payload_too_large"),
            ApiError::RequestBodyTimeout => ("invalid_request_error", "request_body_timeout"),
            ApiError::UnsupportedMediaType { .. } => {
                ("invalid_request_error", "unsupported_media_type")
            }
            ApiError::MethodNotAllowed { .. } => ("invalid_request_error", "method_not_allowed"),
            ApiError::UnknownEndpoint { .. } => ("not_found_error", "unknown_endpoint"),
            ApiError::TokenRefused { .. } => ("authentication_error", "sso_token_refused"),
            ApiError::SignInFailed { .. } => ("invalid_request_error", "sso_sign_in_failed"),
            ApiError::NoMappedRole { .. } => ("permission_error", "no_mapped_role"),
            ApiError::CsrfRefused => ("permission_error", "csrf_token_invalid"),
            ApiError::Internal(_) => ("internal_error", "internal_error"),
        }
    }

    fn param(&self) -> Option<&str> {
        match self {
            ApiError::BadRequest { param, .. } => param.as_deref(),
            ApiError::Validation { param, .. } => Some(param),
            _ => None,
        }
    }
}

/// The error body, OpenAI-shaped.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorDetail {
    pub message: String,
    #[serde(rename = "type")]
    pub kind: String,
    /// The request field the error is about, when there is one.
    pub param: Option<String>,
    pub code: String,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let (kind, code) = self.kind();
        let message = match &self {
            ApiError::Internal(error) => {
                tracing::error!(error = format!("{error:#}"), "internal error");
                "internal error; see the control plane's logs".to_owned()
            }
            other => bounded(&other.to_string(), MAX_MESSAGE_CHARS),
        };
        let body = ErrorBody {
            error: ErrorDetail {
                message,
                kind: kind.to_owned(),
                param: self.param().map(|p| bounded(p, MAX_PARAM_CHARS)),
                code: code.to_owned(),
            },
        };
        (status, axum::Json(body)).into_response()
    }
}

/// Longest error message rendered: messages may quote the request (serde names a wrong value,
/// an unknown field or variant), and a request may carry megabytes.
pub const MAX_MESSAGE_CHARS: usize = 1024;
/// Longest `param` rendered (it may be an unknown field's name).
pub const MAX_PARAM_CHARS: usize = 256;

/// At most `max` characters, with `…` when cut.
pub fn bounded(text: &str, max: usize) -> String {
    switchyard_engine::validate::truncate_for_display(text, max).into_owned()
}

/// Is this error Postgres being unreachable (rather than a bad statement)?
pub fn is_unavailable(error: &sqlx::Error) -> bool {
    matches!(
        error,
        sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::Io(_)
            | sqlx::Error::Tls(_)
            | sqlx::Error::WorkerCrashed
    ) || matches!(error, sqlx::Error::Database(db) if db.code().is_some_and(|c| c.starts_with("08") || c == "57P01" || c == "57P02" || c == "57P03"))
}

/// Derives the field a constraint guards from its name (`routes_model_pattern_unique` →
/// `model_pattern`, `route_members_weight_check` → `weight`).
fn constraint_field(table: Option<&str>, constraint: &str) -> String {
    let mut name = constraint;
    if let Some(table) = table {
        name = name
            .strip_prefix(table)
            .and_then(|rest| rest.strip_prefix('_'))
            .unwrap_or(name);
    }
    for suffix in ["_unique", "_check", "_fkey", "_key"] {
        if let Some(stripped) = name.strip_suffix(suffix) {
            return stripped.to_owned();
        }
    }
    name.to_owned()
}

impl From<sqlx::Error> for ApiError {
    fn from(error: sqlx::Error) -> ApiError {
        if is_unavailable(&error) {
            tracing::warn!(error = %error, "database unavailable");
            return ApiError::Unavailable {
                message: "database unavailable: the control plane cannot reach Postgres; \
                          writes and reads of the admin API are refused until it returns \
                          (proxies keep their last snapshot)"
                    .to_owned(),
            };
        }
        if let sqlx::Error::Database(db) = &error {
            let field = db
                .constraint()
                .map(|c| constraint_field(db.table(), c))
                .unwrap_or_default();
            match db.code().as_deref() {
                Some("23505") => {
                    return ApiError::validation(
                        field.clone(),
                        format!("{field}: a row with this value already exists"),
                    )
                }
                Some("23514") | Some("23502") | Some("22001") | Some("22003") => {
                    return ApiError::validation(
                        field.clone(),
                        format!("{field}: value rejected by the database ({})", db.message()),
                    )
                }
                Some("23503") => {
                    return ApiError::Conflict {
                        message: format!(
                            "the change would break a reference ({}): {}",
                            db.constraint().unwrap_or("foreign key"),
                            db.message()
                        ),
                    }
                }
                _ => {}
            }
        }
        ApiError::Internal(anyhow::Error::new(error))
    }
}

pub type ApiResult<T> = Result<T, ApiError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constraint_names_map_to_fields() {
        assert_eq!(
            constraint_field(Some("routes"), "routes_model_pattern_unique"),
            "model_pattern"
        );
        assert_eq!(
            constraint_field(Some("route_members"), "route_members_weight_check"),
            "weight"
        );
        assert_eq!(
            constraint_field(Some("route_members"), "route_members_channel_id_fkey"),
            "channel_id"
        );
    }
}
