//! The Files and Batch API endpoints. Each is observed as a request ([`Observed`]: admitted
//! under the key's limits, counted, written as a request line), opens the id it names (refused as
//! `404 not_found` unless it is the key's own), calls the channel the object lives on and
//! answers the upstream's object with its ids rewritten into gateway ids; a batch create sends
//! the input file's upstream id. Upstream errors pass through as the channel gave them (a
//! refused gateway credential as `502 upstream_auth_failed`).

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, RawQuery, Request, State};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue, Method};
use serde_json::Value;
use switchyard_engine::Channel;
use switchyard_provider::Protocol;

use super::caller::Caller;
use super::channel::{exchange, reach, send, Call, Reply, MAX_OBJECT_BYTES};
use super::observed::Observed;
use super::{account, index, upload};
use crate::endpoint::Endpoint;
use crate::errors::GatewayError;
use crate::object_id::{Kind, ObjectId};
use crate::phases::receive::read_limited_body;
use crate::state::AppState;

pub(super) type Answer = Result<Response, GatewayError>;

pub(super) fn json(value: &Value) -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        value.to_string(),
    )
        .into_response()
}

/// The upstream's answer as it gave it (an error, or a body the gateway does not rewrite).
pub(super) fn passed(reply: Reply) -> Response {
    let mut response = Response::new(Body::from(reply.body));
    *response.status_mut() = reply.status;
    if let Some(content_type) = reply.headers.get(header::CONTENT_TYPE) {
        response
            .headers_mut()
            .insert(header::CONTENT_TYPE, content_type.clone());
    }
    response
}

/// The channel holding `id`'s object, or the same 404 as for an unknown id.
pub(super) fn holder<'c>(
    caller: &'c Caller,
    kind: Kind,
    id: &ObjectId,
) -> Result<&'c Channel, GatewayError> {
    reach(&caller.view, id.channel)
        .map(|(channel, _)| channel)
        .ok_or(GatewayError::NoSuchObject(kind.noun()))
}

/// A successful answer's object, its ids rewritten and kept in the key's list; anything else
/// passed through.
pub(super) async fn object(
    state: &AppState,
    caller: &Caller,
    kind: Kind,
    channel: &Channel,
    reply: Reply,
) -> Result<(Response, Option<Value>), GatewayError> {
    if !reply.status.is_success() {
        return Ok((passed(reply), None));
    }
    let mut value: Value = serde_json::from_slice(&reply.body)
        .map_err(|_| GatewayError::UpstreamInvalidAnswer("its answer is not JSON".into()))?;
    caller
        .rewrite(kind, channel.id, &mut value)
        .map_err(GatewayError::UpstreamInvalidAnswer)?;
    // A deletion's answer is no object to list.
    let deleted = value.get("deleted") == Some(&Value::Bool(true))
        || value.get("type").and_then(Value::as_str) == Some("message_batch_deleted");
    if !deleted {
        index::remember(&*state.store, kind, caller.token.id, &value).await;
    }
    Ok((json(&value), Some(value)))
}

/// `POST /v1/files`: the upload, routed by its model (see [`upload`]).
pub async fn upload(State(state): State<Arc<AppState>>, request: Request) -> Response {
    let seen = Observed::arrive(&state, Endpoint::Files, request.headers());
    seen.serve(&state, async |seen| {
        send_upload(&state, seen, request).await
    })
    .await
}

async fn send_upload(state: &AppState, seen: &mut Observed, request: Request) -> Answer {
    let (parts, body) = request.into_parts();
    let caller = seen.caller(state, &parts.headers)?;
    let limit = caller.view.snapshot.settings.max_request_body_bytes;
    let body = read_limited_body(&parts.headers, body, limit).await?;
    let form = upload::read(&parts.headers, &body)?;
    seen.routed_by(&form.model);
    let (channel, route) = upload::choose(
        state,
        &caller.view,
        &caller.token,
        &parts.headers,
        &form.model,
        Protocol::OpenAi,
    )?;
    seen.admit(state, &caller, route).await?;
    seen.at(channel);
    let call = Call {
        method: Method::POST,
        path: "/v1/files".into(),
        content_type: parts.headers.get(header::CONTENT_TYPE).cloned(),
        body,
    };
    let reply = exchange(state, &caller.view, channel, call, MAX_OBJECT_BYTES).await?;
    Ok(object(state, &caller, Kind::File, channel, reply).await?.0)
}

/// `GET /v1/files`, `GET /v1/batches`, `GET /v1/messages/batches`: the key's own, from its
/// list, observed as a call of `endpoint`.
pub(super) async fn list(
    state: &AppState,
    endpoint: Endpoint,
    headers: &HeaderMap,
    kind: Kind,
    query: Option<&str>,
) -> Response {
    Observed::arrive(state, endpoint, headers)
        .serve(state, async |seen| {
            let caller = seen.admitted(state, headers).await?;
            let page = index::page(&*state.store, kind, caller.token.id, query).await?;
            Ok(json(&page))
        })
        .await
}

pub async fn list_files(
    State(state): State<Arc<AppState>>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    list(
        &state,
        Endpoint::Files,
        &headers,
        Kind::File,
        query.as_deref(),
    )
    .await
}

pub async fn list_batches(
    State(state): State<Arc<AppState>>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    let query = query.as_deref();
    list(&state, Endpoint::Batches, &headers, Kind::Batch, query).await
}

/// One call about the object `id` of `kind` (its upstream id in `path`'s `{}`), answered as
/// its object.
pub(super) async fn about(
    state: &AppState,
    seen: &mut Observed,
    headers: &HeaderMap,
    kind: Kind,
    id: &str,
    method: Method,
    path: &str,
) -> Result<(Caller, ObjectId, Response, Option<Value>), GatewayError> {
    let caller = seen.admitted(state, headers).await?;
    let opened = caller.open(kind, id)?;
    let channel = holder(&caller, kind, &opened)?;
    seen.at(channel);
    let call = Call::bare(method, path.replace("{}", &opened.upstream));
    let reply = exchange(state, &caller.view, channel, call, MAX_OBJECT_BYTES).await?;
    let (response, value) = object(state, &caller, kind, channel, reply).await?;
    Ok((caller, opened, response, value))
}

/// One call about the object `id` of `kind` answered as the object (`path` as for [`about`]),
/// observed as a call of `endpoint`.
pub(super) async fn plain(
    state: &AppState,
    endpoint: Endpoint,
    headers: &HeaderMap,
    kind: Kind,
    id: &str,
    method: Method,
    path: &str,
) -> Response {
    Observed::arrive(state, endpoint, headers)
        .serve(state, async |seen| {
            about(state, seen, headers, kind, id, method, path)
                .await
                .map(|(_, _, response, _)| response)
        })
        .await
}

/// `GET /v1/files/{id}`.
pub async fn get_file(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let path = "/v1/files/{}";
    plain(
        &state,
        Endpoint::Files,
        &headers,
        Kind::File,
        &id,
        Method::GET,
        path,
    )
    .await
}

/// A deletion of the object `id` of `kind` on its channel (`path` as for [`about`]), then
/// dropped from the key's list; observed as a call of `endpoint`.
pub(super) async fn delete(
    state: &AppState,
    endpoint: Endpoint,
    headers: &HeaderMap,
    kind: Kind,
    id: &str,
    path: &str,
) -> Response {
    Observed::arrive(state, endpoint, headers)
        .serve(state, async |seen| {
            let (caller, _, response, value) =
                about(state, seen, headers, kind, id, Method::DELETE, path).await?;
            if value.is_some() {
                index::forget(&*state.store, kind, caller.token.id, id).await;
            }
            Ok(response)
        })
        .await
}

/// `DELETE /v1/files/{id}`: deleted on its channel, then dropped from the key's list.
pub async fn delete_file(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    delete(
        &state,
        Endpoint::Files,
        &headers,
        Kind::File,
        &id,
        "/v1/files/{}",
    )
    .await
}

/// The bytes of the object `id` of `kind` (at `path`, its upstream id in the `{}`), streamed
/// from its channel as they come; observed as a call of `endpoint`.
pub(super) async fn content(
    state: &AppState,
    endpoint: Endpoint,
    headers: &HeaderMap,
    kind: Kind,
    id: &str,
    path: &str,
) -> Response {
    Observed::arrive(state, endpoint, headers)
        .serve(state, async |seen| {
            let caller = seen.admitted(state, headers).await?;
            let opened = caller.open(kind, id)?;
            let channel = holder(&caller, kind, &opened)?;
            seen.at(channel);
            let call = Call::bare(Method::GET, path.replace("{}", &opened.upstream));
            Ok(send(state, &caller.view, channel, call).await?.streamed())
        })
        .await
}

/// `GET /v1/files/{id}/content`: the file's bytes, streamed from its channel as they come.
pub async fn file_content(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let path = "/v1/files/{}/content";
    content(&state, Endpoint::Files, &headers, Kind::File, &id, path).await
}

/// `POST /v1/batches`: created on the channel holding its input file, which it names by the
/// file's upstream id.
pub async fn create_batch(State(state): State<Arc<AppState>>, request: Request) -> Response {
    let seen = Observed::arrive(&state, Endpoint::Batches, request.headers());
    seen.serve(&state, async |seen| send_batch(&state, seen, request).await)
        .await
}

async fn send_batch(state: &AppState, seen: &mut Observed, request: Request) -> Answer {
    let (parts, body) = request.into_parts();
    let caller = seen.admitted(state, &parts.headers).await?;
    let body = read_limited_body(&parts.headers, body, MAX_OBJECT_BYTES as u64).await?;
    let mut batch: Value = serde_json::from_slice(&body)
        .map_err(|e| GatewayError::InvalidJson(format!("the body is not JSON: {e}")))?;
    let input = batch
        .get("input_file_id")
        .and_then(Value::as_str)
        .ok_or_else(|| GatewayError::InvalidRequest("a batch names its `input_file_id`".into()))?;
    let opened = caller.open(Kind::File, input)?;
    let channel = holder(&caller, Kind::File, &opened)?;
    seen.at(channel);
    if let Some(field) = batch.get_mut("input_file_id") {
        *field = Value::String(opened.upstream.clone());
    }
    let call = Call {
        method: Method::POST,
        path: "/v1/batches".into(),
        content_type: Some(HeaderValue::from_static("application/json")),
        body: Bytes::from(batch.to_string()),
    };
    let reply = exchange(state, &caller.view, channel, call, MAX_OBJECT_BYTES).await?;
    Ok(object(state, &caller, Kind::Batch, channel, reply).await?.0)
}

/// `GET /v1/batches/{id}`: the batch's current state; the first read that sees it `completed`
/// accounts its usage ([`account`]) before answering.
pub async fn get_batch(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    Observed::arrive(&state, Endpoint::Batches, &headers)
        .serve(&state, async |seen| {
            let path = "/v1/batches/{}";
            let (caller, opened, response, value) =
                about(&state, seen, &headers, Kind::Batch, &id, Method::GET, path).await?;
            let completed = value
                .as_ref()
                .filter(|v| v.get("status").and_then(Value::as_str) == Some("completed"))
                .and_then(|v| v.get("output_file_id")?.as_str())
                .and_then(|output| caller.open(Kind::File, output).ok());
            if let (Some(output), Some(channel)) =
                (completed, holder(&caller, Kind::Batch, &opened).ok())
            {
                let finished = account::Finished {
                    claim: format!("batch:{}:{}", channel.id, opened.upstream),
                    results_path: format!("/v1/files/{}/content", output.upstream),
                    protocol: Protocol::OpenAi,
                };
                account::completed(&state, &caller, channel, finished).await;
            }
            Ok(response)
        })
        .await
}

/// `POST /v1/batches/{id}/cancel`.
pub async fn cancel_batch(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let (kind, path) = (Kind::Batch, "/v1/batches/{}/cancel");
    plain(
        &state,
        Endpoint::Batches,
        &headers,
        kind,
        &id,
        Method::POST,
        path,
    )
    .await
}
