//! The Realtime API (`GET /v1/realtime?model=...`, Azure's `/openai/realtime?...&deployment=...`
//! and `/openai/v1/realtime`): a WebSocket session. The handshake is recorded like any request
//! (its credential, model and headers) and the rules apply to it: a rule with an error status
//! refuses the handshake with that answer. An accepted session says `session.created`, answers
//! `session.update` with `session.updated`, `conversation.item.create` with
//! `conversation.item.added` and `conversation.item.done`, and `response.create` with the
//! answer's text in `response.output_text.delta` events and `response.done` with its usage (the
//! rule's text, chunks and cached tokens, as for other endpoints). The shapes are
//! `switchyard_sim`'s. What each session received (events and its close code) is kept for tests.

use std::sync::Arc;

use futures_util::{SinkExt, StreamExt};
use http::{header, HeaderValue, Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use switchyard_sim as sim;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::Role;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

use crate::control::Shared;
use crate::respond::{self, MockBody};
use crate::script::{Behavior, RecordedRequest, ReportedUsage};

/// Whether `request` opens a realtime session (a WebSocket upgrade at a realtime path).
pub(crate) fn is_session_request(request: &Request<Incoming>) -> bool {
    let path = request.uri().path();
    let realtime = matches!(
        path,
        "/v1/realtime" | "/openai/realtime" | "/openai/v1/realtime"
    );
    let upgrade = request
        .headers()
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"));
    realtime && upgrade
}

/// The session's model: `model=` (OpenAI, Azure's v1 surface) or `deployment=` (Azure).
fn model_of_query(query: Option<&str>) -> Option<String> {
    query?.split('&').find_map(|pair| {
        let (name, value) = pair.split_once('=')?;
        matches!(name, "model" | "deployment").then(|| value.to_owned())
    })
}

/// Answers a session's handshake: the scripted refusal, or `101` with the session served on
/// the upgraded connection.
pub(crate) fn open(
    shared: &Arc<Shared>,
    mut request: Request<Incoming>,
    record: RecordedRequest,
) -> Response<MockBody> {
    let mut record = record;
    if record.model.is_none() {
        record.model = model_of_query(record.query.as_deref());
    }
    let behavior = shared.script().answer(&record);
    if let Some(refusal) = behavior
        .as_ref()
        .and_then(|b| respond::scripted(sim::Protocol::OpenAi, b))
    {
        return refusal;
    }
    let Some(accept) = request
        .headers()
        .get("sec-websocket-key")
        .map(|key| derive_accept_key(key.as_bytes()))
    else {
        return respond::full(
            StatusCode::BAD_REQUEST,
            "application/json",
            sim::openai_error_json(
                "a WebSocket handshake needs Sec-WebSocket-Key",
                "invalid_request_error",
                "bad_handshake",
            ),
        );
    };
    let upgrade = hyper::upgrade::on(&mut request);
    let model = record
        .model
        .unwrap_or_else(|| sim::DEFAULT_MODEL.to_owned());
    let behavior = behavior.unwrap_or_else(Behavior::ok);
    let shared = Arc::clone(shared);
    tokio::spawn(async move {
        match upgrade.await {
            Ok(upgraded) => {
                let socket =
                    WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, None)
                        .await;
                serve(socket, &shared, &model, &behavior).await;
            }
            Err(error) => tracing::debug!(%error, "mock upstream: realtime upgrade failed"),
        }
    });
    let mut response = Response::new(MockBody::full(bytes::Bytes::new()));
    *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let headers = response.headers_mut();
    headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    headers.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    if let Ok(accept) = HeaderValue::from_str(&accept) {
        headers.insert("sec-websocket-accept", accept);
    }
    response
}

/// One session until the client closes it (or the connection ends), answered by the simulated
/// session with the rule's text, chunks and cached tokens.
async fn serve<S>(mut socket: WebSocketStream<S>, shared: &Shared, model: &str, behavior: &Behavior)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let mut session = sim::RealtimeSim::new(model);
    if let Some(text) = &behavior.text {
        session.text = text.clone();
    }
    session.cached_tokens = behavior.cached_tokens;
    if let Some(stream) = behavior.stream {
        session.chunks = stream.chunks;
    }
    shared.realtime().sessions += 1;
    if socket.send(Message::text(session.opened())).await.is_err() {
        return;
    }
    while let Some(Ok(message)) = socket.next().await {
        let text = match message {
            Message::Text(text) => text,
            Message::Close(frame) => {
                let code = frame.map_or(1005, |f| u16::from(f.code));
                shared.realtime().closes.push(code);
                let _ = socket.close(None).await;
                return;
            }
            _ => continue,
        };
        let kind = serde_json::from_str::<Value>(text.as_str())
            .ok()
            .and_then(|event| event["type"].as_str().map(str::to_owned))
            .unwrap_or_default();
        shared.realtime().events.push(kind);
        let (events, answered) = session.answer(text.as_str());
        if let Some(answer) = answered {
            shared
                .script()
                .add_reported_usage(ReportedUsage::of(&answer));
        }
        for event in events {
            if socket.send(Message::text(event)).await.is_err() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_model_comes_from_the_query() {
        assert_eq!(
            model_of_query(Some("model=gpt-realtime")).as_deref(),
            Some("gpt-realtime")
        );
        assert_eq!(
            model_of_query(Some("api-version=1&deployment=d")).as_deref(),
            Some("d")
        );
        assert_eq!(model_of_query(Some("x=1")), None);
        assert_eq!(model_of_query(None), None);
    }
}
