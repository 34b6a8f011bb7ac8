//! Receive: the client's key authenticated (and not expired), its body read within the size
//! limit and inspected — the request's context is born here, with its facts read once.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::Request;
use bytes::Bytes;
use http::{header, HeaderMap};
use http_body_util::{BodyExt, Limited};
use switchyard_engine::Token;

use crate::auth::{authenticate, unexpired};
use crate::context::{Arrival, Ctx};
use crate::endpoint::Endpoint;
use crate::errors::GatewayError;
use crate::request::{
    inspect_json_defaulting, inspect_json_for, inspect_multipart, InspectError, Inspected,
};
use crate::snapshot::View;
use crate::wire;

/// Reads the client's request into its context: its key authenticated (and not expired), its
/// body read within the size limit and inspected. `path_model` is a Gemini path's model and
/// stream flag.
pub async fn receive<'a>(
    arrival: &'a Arrival,
    view: &'a Arc<View>,
    path_model: Option<(&str, bool)>,
    request: Request,
) -> Result<Ctx<'a>, GatewayError> {
    let (mut parts, body) = request.into_parts();
    wire::drop_unforwarded(&mut parts.headers);
    let token = authenticated(view, &parts.headers, parts.uri.query())?;
    let limit = view.snapshot.settings.max_request_body_bytes;
    let body = read_limited_body(&parts.headers, body, limit).await?;
    let mut inspected = inspect(arrival.endpoint, &parts.headers, &body, path_model)?;
    if let Some(value) = parts.headers.get(crate::attribution::TAGS_HEADER) {
        // The header's tags take the place of the body's.
        inspected.tags = crate::attribution::header_tags(value.as_bytes())
            .map_err(GatewayError::InvalidRequest)?;
    }
    let query = wire::strip_key_param(parts.uri.query());
    Ok(Ctx::received(
        arrival,
        view,
        token,
        parts.headers,
        body,
        inspected,
        query,
    ))
}

/// The enabled token the request presents, unless it has expired.
pub fn authenticated<'v>(
    view: &'v View,
    headers: &HeaderMap,
    query: Option<&str>,
) -> Result<&'v Token, GatewayError> {
    let token = authenticate(view, headers, query).ok_or_else(GatewayError::unauthorized)?;
    unexpired(token)?;
    Ok(token)
}

/// The body, refused at once when its declared length is over `limit`, else read up to it.
pub async fn read_limited_body(
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

/// What the body says the request is (model, stream, needs…): a multipart form's fields, or
/// a JSON body's (the model of a Gemini path taken from the path; a moderations body without
/// one routed as the default moderation model).
pub(super) fn inspect(
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
    } else if endpoint == Endpoint::Moderations {
        inspect_json_defaulting(body, crate::endpoint::DEFAULT_MODERATION_MODEL)
    } else {
        inspect_json_for(body, path_model)
    };
    inspected.map_err(|e| match e {
        InspectError::Malformed(message) => GatewayError::InvalidJson(message),
        InspectError::MissingModel => GatewayError::MissingModel,
        InspectError::DuplicateField(field) => GatewayError::InvalidRequest(format!(
            "the multipart body has more than one `{field}` field; send it once"
        )),
        InspectError::Attribution(message) => GatewayError::InvalidRequest(message),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_body_of_the_limit_is_read_and_one_byte_more_refused_declared_or_not() {
        const LIMIT: u64 = 2048;
        let limit = LIMIT as usize;
        for declared in [true, false] {
            let read = |len: usize| async move {
                let mut headers = HeaderMap::new();
                if declared {
                    headers.insert(header::CONTENT_LENGTH, len.into());
                }
                read_limited_body(&headers, Body::from(vec![b'x'; len]), LIMIT).await
            };
            for len in [limit - 1, limit] {
                let body = read(len).await;
                assert!(
                    body.as_ref().is_ok_and(|b| b.len() == len),
                    "{len} bytes, declared {declared}: {body:?}"
                );
            }
            let over = read(limit + 1).await;
            assert!(
                matches!(over, Err(GatewayError::RequestTooLarge { limit: l }) if l == limit),
                "declared {declared}: {over:?}"
            );
        }
    }
}
