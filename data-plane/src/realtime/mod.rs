//! The Realtime API: `GET /v1/realtime?model=...`, a WebSocket session between the client and
//! one upstream channel.
//!
//! The handshake is a request like the others (`phases::serve_realtime`): [`receive`] checks
//! the WebSocket handshake and authenticates the client's key (`Authorization: Bearer`, as the
//! SDKs send it, or a browser's subprotocol `openai-insecure-api-key.<key>`), the route phase
//! routes the query's model, [`keep_to_realtime_channels`] leaves only members whose channel
//! serves realtime sessions (OpenAI, Azure OpenAI and the simulator), admission takes the
//! limits — a `concurrent` limit counts the session for its whole life — and [`open`] opens the
//! upstream session (`choose`: failing over only until an upstream handshake succeeded), answers
//! `101 Switching Protocols` and leaves the session to `session`, which relays frames both ways,
//! accounts each `response.done`'s usage, and closes both sides on drain.

mod choose;
mod session;
mod simulated;

use std::sync::Arc;

use axum::body::Body;
use axum::extract::Request;
use axum::response::Response;
use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue, StatusCode};
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use switchyard_engine::Provider;
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};
use tokio_tungstenite::WebSocketStream;

use crate::auth::{authenticate, unexpired};
use crate::context::{Arrival, Ctx};
use crate::errors::GatewayError;
use crate::realtime::choose::{choose, Upstream};
use crate::realtime::session::{relay, Account};
use crate::request::{check_model, percent_decoded, InspectError, Inspected};
use crate::snapshot::View;
use crate::state::AppState;

/// The subprotocol prefix a browser (which cannot set headers on a WebSocket) puts its key in.
const KEY_SUBPROTOCOL: &str = "openai-insecure-api-key.";

/// What the client's handshake asked for, kept until the session is opened.
pub struct ClientHandshake {
    upgrade: OnUpgrade,
    /// `Sec-WebSocket-Accept` for the client's key.
    accept: String,
    /// The client offered subprotocol `realtime` (a browser's form, which needs one chosen
    /// back).
    subprotocol: bool,
    /// The client's `openai-beta`, passed upstream.
    beta: Option<HeaderValue>,
}

/// Reads a realtime handshake into its context: a WebSocket handshake (else a 400), the
/// client's key (else a 401) and the query's model (else a 400). The request's body is none.
pub fn receive<'a>(
    arrival: &'a Arrival,
    view: &'a Arc<View>,
    request: Request,
) -> Result<(Ctx<'a>, ClientHandshake), GatewayError> {
    let (mut parts, _) = request.into_parts();
    let accept = websocket_key(&parts.headers)?;
    let upgrade = parts
        .extensions
        .remove::<OnUpgrade>()
        .ok_or_else(|| not_websocket("this connection cannot be upgraded"))?;
    let token = authenticate(view, &parts.headers, None)
        .or_else(|| subprotocol_key(&parts.headers).and_then(|key| view.token(key)))
        .ok_or_else(GatewayError::unauthorized)?;
    unexpired(token)?;
    let mut inspected = Inspected::default();
    inspected.model = query_model(parts.uri.query())?;
    let handshake = ClientHandshake {
        upgrade,
        accept: tokio_tungstenite::tungstenite::handshake::derive_accept_key(accept.as_bytes()),
        subprotocol: offers_realtime(&parts.headers),
        beta: parts.headers.get("openai-beta").cloned(),
    };
    // Nothing of the client's handshake goes upstream but `openai-beta` (kept above): its key,
    // in a header or a subprotocol, never.
    let ctx = Ctx::received(
        arrival,
        view,
        token,
        HeaderMap::new(),
        Bytes::new(),
        inspected,
        None,
    );
    Ok((ctx, handshake))
}

fn not_websocket(why: &str) -> GatewayError {
    GatewayError::InvalidRequest(format!(
        "/v1/realtime is a WebSocket endpoint ({why}); connect with a WebSocket client"
    ))
}

/// The client's `Sec-WebSocket-Key` of a version-13 WebSocket handshake.
fn websocket_key(headers: &HeaderMap) -> Result<String, GatewayError> {
    let has = |name: header::HeaderName, value: &str| {
        headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|token| token.trim().eq_ignore_ascii_case(value))
    };
    if !has(header::UPGRADE, "websocket") || !has(header::CONNECTION, "upgrade") {
        return Err(not_websocket("no `Upgrade: websocket`"));
    }
    if !has(header::SEC_WEBSOCKET_VERSION, "13") {
        return Err(not_websocket("only WebSocket version 13 is served"));
    }
    headers
        .get(header::SEC_WEBSOCKET_KEY)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .filter(|key| !key.is_empty() && key.len() <= 64)
        .ok_or_else(|| not_websocket("no `Sec-WebSocket-Key`"))
}

/// The key a browser offers as subprotocol `openai-insecure-api-key.<key>`.
fn subprotocol_key(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .find_map(|p| p.trim().strip_prefix(KEY_SUBPROTOCOL))
        .filter(|key| !key.is_empty())
}

/// Whether the client offered subprotocol `realtime` (a browser's form): it is chosen back.
fn offers_realtime(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|p| p.trim() == "realtime")
}

/// The `model` query parameter, percent-decoded, within the bounds of a body's model.
fn query_model(query: Option<&str>) -> Result<String, GatewayError> {
    let raw = query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .find_map(|pair| pair.strip_prefix("model="))
        .filter(|m| !m.is_empty())
        .ok_or(GatewayError::MissingModel)?;
    let model = percent_decoded(&raw.replace('+', " "));
    match check_model(&model) {
        Ok(()) => Ok(model),
        Err(InspectError::Malformed(why)) => Err(GatewayError::InvalidRequest(why)),
        Err(_) => Err(GatewayError::MissingModel),
    }
}

/// Leaves only the members whose channel serves realtime sessions: those of the Anthropic and
/// Gemini protocols (Bedrock and Vertex AI with them) cannot (the simulator can).
pub fn keep_to_realtime_channels(ctx: &mut Ctx<'_>) {
    ctx.constraint.needs.unsupported_providers |=
        Provider::Anthropic.protocol_bit() | Provider::Gemini.protocol_bit();
    // What a route of only such members is told it asked for (indexed like the protocols).
    let feature = || Some("realtime sessions".to_owned());
    ctx.unsupported = [None, feature(), feature(), None];
}

/// The frame and message bounds of both sockets of a session: a message (and a frame) may be
/// as large as a request body may (`max_request_body_bytes`); a larger one closes the session
/// with code 1009 (message too big).
pub fn socket_config(view: &View) -> WebSocketConfig {
    let max = usize::try_from(view.snapshot.settings.max_request_body_bytes).unwrap_or(usize::MAX);
    WebSocketConfig::default()
        .max_message_size(Some(max))
        .max_frame_size(Some(max))
}

/// Opens the session upstream (failing over until a handshake succeeds), then answers `101` and
/// leaves the session to its relay, which holds the limits admission took and the channel's
/// in-flight count until it ends.
pub async fn open(
    state: &Arc<AppState>,
    ctx: &mut Ctx<'_>,
    handshake: ClientHandshake,
) -> Result<Response, Response> {
    let config = socket_config(ctx.view);
    let chosen = choose(state, ctx, handshake.beta.as_ref(), config).await?;
    let account = Account::new(state, ctx, chosen.in_flight);
    let draining = state.draining.clone();
    let ClientHandshake {
        upgrade,
        accept,
        subprotocol,
        ..
    } = handshake;
    let upstream = chosen.upstream;
    tokio::spawn(async move {
        let upgraded = match upgrade.await {
            Ok(upgraded) => upgraded,
            Err(error) => {
                tracing::debug!(%error, "realtime: the client's connection was not upgraded");
                return;
            }
        };
        let client =
            WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, Some(config))
                .await;
        match upstream {
            Upstream::Socket(socket) => relay(client, *socket, account, draining).await,
            Upstream::Simulated(socket) => relay(client, *socket, account, draining).await,
        }
    });
    Ok(switching_protocols(&accept, subprotocol))
}

/// The `101` answer to the client's handshake.
fn switching_protocols(accept: &str, subprotocol: bool) -> Response {
    let mut response = Response::new(Body::empty());
    *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let headers = response.headers_mut();
    headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    headers.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    if let Ok(accept) = HeaderValue::from_str(accept) {
        headers.insert(header::SEC_WEBSOCKET_ACCEPT, accept);
    }
    if subprotocol {
        headers.insert(
            header::SEC_WEBSOCKET_PROTOCOL,
            HeaderValue::from_static("realtime"),
        );
    }
    response
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.append(
                header::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        map
    }

    #[test]
    fn a_handshake_needs_upgrade_version_13_and_a_key() {
        let good = [
            ("upgrade", "websocket"),
            ("connection", "keep-alive, Upgrade"),
            ("sec-websocket-version", "13"),
            ("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ=="),
        ];
        assert_eq!(
            websocket_key(&headers(&good)).unwrap(),
            "dGhlIHNhbXBsZSBub25jZQ=="
        );
        for missing in 0..good.len() {
            let mut pairs = good.to_vec();
            pairs.remove(missing);
            assert!(websocket_key(&headers(&pairs)).is_err(), "{pairs:?}");
        }
        let mut old = good.to_vec();
        old[2] = ("sec-websocket-version", "8");
        assert!(websocket_key(&headers(&old)).is_err());
    }

    #[test]
    fn a_browser_key_comes_in_its_subprotocol() {
        let h = headers(&[(
            "sec-websocket-protocol",
            "realtime, openai-insecure-api-key.sk-abc, openai-beta.realtime-v1",
        )]);
        assert_eq!(subprotocol_key(&h), Some("sk-abc"));
        assert_eq!(
            subprotocol_key(&headers(&[("sec-websocket-protocol", "realtime")])),
            None
        );
        assert_eq!(
            subprotocol_key(&headers(&[(
                "sec-websocket-protocol",
                "openai-insecure-api-key."
            )])),
            None
        );
    }

    #[test]
    fn the_model_is_the_query_parameter_decoded() {
        assert_eq!(
            query_model(Some("model=gpt-realtime")).unwrap(),
            "gpt-realtime"
        );
        assert_eq!(query_model(Some("x=1&model=a%2Fb+c")).unwrap(), "a/b c");
        assert!(matches!(
            query_model(Some("x=1")),
            Err(GatewayError::MissingModel)
        ));
        assert!(matches!(query_model(None), Err(GatewayError::MissingModel)));
        assert!(query_model(Some("model=a%0Ab")).is_err());
        let long = format!("model={}", "m".repeat(crate::request::MAX_MODEL_LEN + 1));
        assert!(query_model(Some(&long)).is_err());
    }
}
