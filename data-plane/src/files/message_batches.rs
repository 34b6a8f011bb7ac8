//! Anthropic's Message Batches API: `POST /v1/messages/batches` (inline requests, routed by
//! the first request's `params.model`; every request must name one), `GET` of the list, of one
//! batch and of its `/results` (JSONL, streamed), `POST /{id}/cancel` and `DELETE /{id}` — on
//! the channel the batch was created on, named by its id like files and OpenAI batches, with
//! errors in Anthropic's shape. The first read that sees a batch `ended` accounts its usage.

use std::borrow::Cow;
use std::sync::Arc;

use axum::extract::{Path, RawQuery, Request, State};
use axum::response::Response;
use http::{HeaderMap, HeaderValue, Method};
use serde::Deserialize;
use serde_json::Value;
use switchyard_provider::Protocol;

use super::account;
use super::channel::{exchange, Call, MAX_OBJECT_BYTES};
use super::handlers::{self, about, content, holder, list, object, plain, Answer};
use super::observed::Observed;
use super::upload::{choose, MAX_BATCH_LINES};
use crate::endpoint::Endpoint;
use crate::errors::GatewayError;
use crate::object_id::Kind;
use crate::phases::receive::read_limited_body;
use crate::request::MAX_MODEL_LEN;
use crate::state::AppState;

const BATCHES: &str = "/v1/messages/batches";

/// Every call of this API is observed as one endpoint's (its errors in Anthropic's shape).
const ENDPOINT: Endpoint = Endpoint::MessageBatches;

/// The model a message batch is routed by: its first request's `params.model`; every request
/// must name one.
fn batch_model(body: &[u8]) -> Result<String, GatewayError> {
    #[derive(Deserialize)]
    struct Batch<'a> {
        #[serde(borrow)]
        requests: Vec<Request<'a>>,
    }
    #[derive(Deserialize)]
    struct Request<'a> {
        #[serde(borrow)]
        params: Option<Params<'a>>,
    }
    #[derive(Deserialize)]
    struct Params<'a> {
        #[serde(borrow)]
        model: Option<Cow<'a, str>>,
    }
    let batch: Batch<'_> = serde_json::from_slice(body).map_err(|e| {
        GatewayError::InvalidJson(format!("a message batch is `{{\"requests\": [...]}}`: {e}"))
    })?;
    if batch.requests.len() > MAX_BATCH_LINES {
        return Err(GatewayError::InvalidRequest(format!(
            "a message batch holds at most {MAX_BATCH_LINES} requests"
        )));
    }
    let mut first = None;
    for (i, request) in batch.requests.into_iter().enumerate() {
        let model = request
            .params
            .and_then(|p| p.model)
            .filter(|m| !m.trim().is_empty() && m.len() <= MAX_MODEL_LEN)
            .ok_or_else(|| {
                GatewayError::InvalidRequest(format!(
                    "request {i} of the batch names no `params.model` (at most {MAX_MODEL_LEN} bytes); every request must name its model, the first one's routes the batch"
                ))
            })?;
        first.get_or_insert_with(|| model.trim().to_owned());
    }
    first.ok_or_else(|| GatewayError::InvalidRequest("the batch has no requests".into()))
}

/// `POST /v1/messages/batches`.
pub async fn create(State(state): State<Arc<AppState>>, request: Request) -> Response {
    Observed::arrive(&state, ENDPOINT, request.headers())
        .serve(&state, async |seen| {
            send_create(&state, seen, request).await
        })
        .await
}

async fn send_create(state: &AppState, seen: &mut Observed, request: Request) -> Answer {
    let (parts, body) = request.into_parts();
    let caller = seen.caller(state, &parts.headers)?;
    let limit = caller.view.snapshot.settings.max_request_body_bytes;
    let body = read_limited_body(&parts.headers, body, limit).await?;
    let model = batch_model(&body)?;
    seen.routed_by(&model);
    let (view, token, headers) = (&caller.view, &caller.token, &parts.headers);
    let (channel, route) = choose(state, view, token, headers, &model, Protocol::Anthropic)?;
    seen.admit(state, &caller, route).await?;
    seen.at(channel);
    let call = Call {
        method: Method::POST,
        path: BATCHES.into(),
        content_type: Some(HeaderValue::from_static("application/json")),
        body,
    };
    let reply = exchange(state, &caller.view, channel, call, MAX_OBJECT_BYTES).await?;
    Ok(object(state, &caller, Kind::MessageBatch, channel, reply)
        .await?
        .0)
}

/// `GET /v1/messages/batches`: the key's own.
pub async fn list_batches(
    State(state): State<Arc<AppState>>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    list(
        &state,
        ENDPOINT,
        &headers,
        Kind::MessageBatch,
        query.as_deref(),
    )
    .await
}

/// `GET /v1/messages/batches/{id}`: the first read that sees it `ended` accounts its usage.
pub async fn get(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    Observed::arrive(&state, ENDPOINT, &headers)
        .serve(&state, async |seen| {
            let path = format!("{BATCHES}/{{}}");
            let (kind, method) = (Kind::MessageBatch, Method::GET);
            let (caller, opened, response, value) =
                about(&state, seen, &headers, kind, &id, method, &path).await?;
            let ended = value
                .as_ref()
                .and_then(|v| v.get("processing_status"))
                .and_then(Value::as_str)
                == Some("ended");
            if let (true, Ok(channel)) = (ended, holder(&caller, Kind::MessageBatch, &opened)) {
                let finished = account::Finished {
                    claim: format!("msgbatch:{}:{}", channel.id, opened.upstream),
                    results_path: format!("{BATCHES}/{}/results", opened.upstream),
                    protocol: Protocol::Anthropic,
                };
                account::completed(&state, &caller, channel, finished).await;
            }
            Ok(response)
        })
        .await
}

/// `POST /v1/messages/batches/{id}/cancel`.
pub async fn cancel(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let path = format!("{BATCHES}/{{}}/cancel");
    let (kind, method) = (Kind::MessageBatch, Method::POST);
    plain(&state, ENDPOINT, &headers, kind, &id, method, &path).await
}

/// `DELETE /v1/messages/batches/{id}`: deleted on its channel, then dropped from the list.
pub async fn delete(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let path = format!("{BATCHES}/{{}}");
    handlers::delete(&state, ENDPOINT, &headers, Kind::MessageBatch, &id, &path).await
}

/// `GET /v1/messages/batches/{id}/results`: the results (JSONL), streamed from the channel.
pub async fn results(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let path = format!("{BATCHES}/{{}}/results");
    content(&state, ENDPOINT, &headers, Kind::MessageBatch, &id, &path).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_batch_is_routed_by_its_first_requests_model() {
        let body = br#"{"requests":[{"custom_id":"a","params":{"model":"claude-a","max_tokens":1}},{"custom_id":"b","params":{"model":"claude-b"}}]}"#;
        assert_eq!(batch_model(body), Ok("claude-a".to_owned()));
        let missing = br#"{"requests":[{"custom_id":"a","params":{"model":"claude-a"}},{"custom_id":"b","params":{}}]}"#;
        assert!(
            matches!(batch_model(missing), Err(GatewayError::InvalidRequest(m)) if m.contains("request 1"))
        );
        assert!(matches!(
            batch_model(br#"{"requests":[]}"#),
            Err(GatewayError::InvalidRequest(_))
        ));
        assert!(matches!(
            batch_model(b"[]"),
            Err(GatewayError::InvalidJson(_))
        ));
    }
}
