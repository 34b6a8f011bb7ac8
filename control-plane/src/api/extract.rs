//! The admin API's extractors and body parsing. Each extractor wraps axum's own and turns its
//! rejection into an [`ApiError`], so a bad path parameter, query string or body answers in the
//! API's JSON error shape (axum's rejections are text/plain). `Path` and `Query` keep axum's
//! names: utoipa recognises handler arguments by type name, so the OpenAPI document still lists
//! their parameters. The [`Actor`] and the [`Writer`] take who makes a change from the caller the
//! access middleware found.

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, StatusCode};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};
use sqlx::PgPool;

use super::access::Caller;
use super::rows::By;
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;

/// Largest request body the admin API reads (the biggest real body, a team with thousands of
/// members, is far smaller). Larger bodies are refused with a JSON 413 before they are buffered.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

/// `axum::extract::Path` with JSON rejections (400 naming the parameter when axum knows it).
pub struct Path<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for Path<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Path<T>, ApiError> {
        match axum::extract::Path::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Path(value)) => Ok(Path(value)),
            Err(rejection) => Err(path_error(&rejection)),
        }
    }
}

fn path_error(rejection: &PathRejection) -> ApiError {
    use axum::extract::path::ErrorKind;
    let param = match rejection {
        PathRejection::FailedToDeserializePathParams(e) => match e.kind() {
            ErrorKind::ParseErrorAtKey { key, .. } | ErrorKind::InvalidUtf8InPathParam { key } => {
                Some(key.clone())
            }
            // Every path of this API has one parameter, `{id}`.
            _ => Some("id".to_owned()),
        },
        _ => None,
    };
    if rejection.status().is_server_error() {
        return ApiError::Internal(anyhow::anyhow!(
            "path extraction: {}",
            rejection.body_text()
        ));
    }
    ApiError::bad_request(
        param.as_deref(),
        format!(
            "invalid path parameter{}: {}",
            param
                .as_deref()
                .map(|p| format!(" {p}"))
                .unwrap_or_default(),
            rejection.body_text()
        ),
    )
}

/// `axum::extract::Query` with JSON rejections (400 naming the parameter when it can).
pub struct Query<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for Query<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Query<T>, ApiError> {
        match axum::extract::Query::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Query(value)) => Ok(Query(value)),
            Err(rejection) => Err(query_error(&rejection)),
        }
    }
}

fn query_error(rejection: &QueryRejection) -> ApiError {
    let text = rejection.body_text();
    // "Failed to deserialize query string: limit: invalid digit found in string"
    let detail = text
        .strip_prefix("Failed to deserialize query string: ")
        .unwrap_or(&text);
    let param = detail
        .split_once(": ")
        .map(|(head, _)| head)
        .filter(|head| {
            !head.is_empty() && head.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        });
    ApiError::bad_request(param, format!("invalid query string: {detail}"))
}

/// A JSON request body parsed into `T` with [`parse_body`]: a declared content type other than
/// JSON is a 415, a body over [`MAX_BODY_BYTES`] a 413, malformed JSON a 400 and a wrong or
/// unknown field a 422 naming it. A body without a content type is read as JSON.
pub struct JsonBody<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<JsonBody<T>, ApiError> {
        check_content_type(request.headers())?;
        let bytes = Bytes::from_request(request, state)
            .await
            .map_err(|rejection| body_error(&rejection))?;
        parse_body(&bytes).map(JsonBody)
    }
}

/// A request body taken as it is (the configuration file of `/api/v1/config/*`), any content
/// type: a body over [`MAX_BODY_BYTES`] is a JSON 413 and a body deadline a JSON 408, like
/// [`JsonBody`]'s.
pub struct RawBody(pub Bytes);

impl<S: Send + Sync> FromRequest<S> for RawBody {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<RawBody, ApiError> {
        Bytes::from_request(request, state)
            .await
            .map(RawBody)
            .map_err(|rejection| body_error(&rejection))
    }
}

fn check_content_type(headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(value) = headers.get(header::CONTENT_TYPE) else {
        return Ok(());
    };
    let mime = value
        .to_str()
        .ok()
        .and_then(|v| v.split(';').next())
        .map(|v| v.trim().to_ascii_lowercase())
        .unwrap_or_default();
    let json =
        mime == "application/json" || (mime.starts_with("application/") && mime.ends_with("+json"));
    if json {
        Ok(())
    } else {
        Err(ApiError::UnsupportedMediaType {
            message: format!(
                "request body must be JSON (content-type: application/json), got content-type {:?}",
                crate::error::bounded(&mime, 64)
            ),
        })
    }
}

fn body_error(rejection: &BytesRejection) -> ApiError {
    if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
        ApiError::PayloadTooLarge {
            limit: MAX_BODY_BYTES,
        }
    } else if switchyard_server::BodyTimeout::is(rejection) {
        ApiError::RequestBodyTimeout
    } else {
        ApiError::bad_request(
            None,
            format!("cannot read the request body: {}", rejection.body_text()),
        )
    }
}

/// Who is making a change, as the audit log records it: the admin token's name (`bootstrap` for
/// `SWITCHYARD_ADMIN_TOKEN`), followed by the optional `x-switchyard-actor` header in
/// parentheses (`bootstrap (alice@console)`). The header is a note, never the identity.
pub struct Actor(pub String);

impl<S: Send + Sync> FromRequestParts<S> for Actor {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Actor, ApiError> {
        parts
            .extensions
            .get::<Caller>()
            .map(|caller| Actor(caller.actor.clone()))
            .ok_or(ApiError::Unauthorized)
    }
}

/// What a create, patch or delete handler hands to its `*_in` function: the [`Actor`] making the
/// change and the pool it runs on.
pub struct Writer {
    pub pool: PgPool,
    pub actor: String,
    /// The one team the caller administers; `None`: the whole fleet.
    pub team: Option<i64>,
}

impl Writer {
    /// The change this request makes: its own audited revision, by the caller's team if any.
    pub(super) fn by(&self) -> By<'_> {
        By::each_of(&self.actor, self.team)
    }
}

impl FromRequestParts<AppState> for Writer {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Writer, ApiError> {
        let caller = Caller::from_request_parts(parts, state).await?;
        Ok(Writer {
            pool: state.pool.clone(),
            actor: caller.actor,
            team: caller.identity.team,
        })
    }
}

/// Parses a JSON body: a syntax error is a 400, a well-formed body with a wrong or unknown field
/// is a 422 naming that field.
pub fn parse_body<T: DeserializeOwned>(body: &Bytes) -> ApiResult<T> {
    // serde would also accept a struct written as a JSON array; the API takes objects only.
    if body.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(ApiError::bad_request(
            None,
            "request body must be a JSON object",
        ));
    }
    let mut de = serde_json::Deserializer::from_slice(body);
    match serde_path_to_error::deserialize::<_, T>(&mut de) {
        Ok(value) => Ok(value),
        Err(error) => {
            let path = error.path().to_string();
            let inner = error.into_inner();
            if inner.is_syntax() || inner.is_eof() {
                Err(ApiError::bad_request(
                    None,
                    format!("malformed JSON: {inner}"),
                ))
            } else {
                // Unknown fields are reported at the parent path; name the field itself.
                let param = if path == "." {
                    match unknown_field_name(&inner.to_string()) {
                        Some(field) => field,
                        // Not an object at all (`null`, a list...): a malformed request.
                        None => {
                            return Err(ApiError::bad_request(
                                None,
                                format!("request body must be a JSON object: {inner}"),
                            ))
                        }
                    }
                } else {
                    path
                };
                Err(ApiError::validation(
                    param.clone(),
                    format!("{param}: {inner}"),
                ))
            }
        }
    }
}

fn unknown_field_name(message: &str) -> Option<String> {
    let rest = message.strip_prefix("unknown field `")?;
    Some(rest.split('`').next()?.to_owned())
}

/// `Option<Option<T>>` for PATCH bodies: absent → `None`, `null` → `Some(None)`.
pub fn nullable<'de, T: Deserialize<'de>, D: Deserializer<'de>>(
    de: D,
) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(de).map(Some)
}
