//! The upstream side of a Realtime API session: the WebSocket handshake with one channel, on a
//! connection of its own ([`HttpClient::connect_upgradable`]), at the URL and with the auth the
//! channel's rules give (OpenAI's `/v1/realtime?model=...` with `Authorization: Bearer`;
//! Azure's `/openai/realtime?api-version=...&deployment=...` with `api-key`, or its v1 surface).
//! The client's own credential is never part of it: only the channel's credential and extra
//! headers, and the client's `openai-beta` when it sent one.

use std::fmt;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method};
use switchyard_engine::Provider;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Error as WsError;
use tokio_tungstenite::WebSocketStream;

use crate::cause::TransportCause;
use crate::channel::{ChannelRuntime, CredentialRuntime, Target};
use crate::client::{path_segment, ClientError, HttpClient, UpgradableIo};

/// The Realtime API's path, as served downstream and planned upstream.
pub const REALTIME_PATH: &str = "/v1/realtime";

/// The most bytes of a refused handshake's answer kept (for the log and the client's error).
const MAX_REFUSAL_BODY: usize = 4096;

/// A session's upstream WebSocket.
pub type UpstreamSocket = WebSocketStream<UpgradableIo>;

/// Whether channels of `provider` serve the Realtime API: OpenAI and Azure OpenAI.
pub fn supports_realtime(provider: Provider) -> bool {
    matches!(provider, Provider::Openai | Provider::Azure)
}

/// Why a handshake did not open a session.
#[derive(Debug)]
pub enum HandshakeError {
    /// No connection (DNS, refused, TLS, timeout).
    Connect(ClientError),
    /// The upstream answered the handshake with something else than `101`: its status and
    /// the start of its body.
    Refused { status: u16, body: Bytes },
    /// The handshake broke off or was answered wrongly (a bad accept key, a cut connection).
    Protocol {
        cause: TransportCause,
        message: String,
    },
    /// The handshake did not finish within its time.
    TimedOut,
}

impl HandshakeError {
    /// The transport cause, when no answer came.
    pub fn cause(&self) -> Option<TransportCause> {
        match self {
            HandshakeError::Connect(e) => Some(e.cause()),
            HandshakeError::Refused { .. } => None,
            HandshakeError::Protocol { cause, .. } => Some(*cause),
            HandshakeError::TimedOut => Some(TransportCause::Timeout),
        }
    }
}

impl fmt::Display for HandshakeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HandshakeError::Connect(e) => write!(f, "{e}"),
            HandshakeError::Refused { status, .. } => {
                write!(
                    f,
                    "the upstream refused the WebSocket handshake with {status}"
                )
            }
            HandshakeError::Protocol { message, .. } => {
                write!(f, "the WebSocket handshake failed: {message}")
            }
            HandshakeError::TimedOut => write!(f, "the WebSocket handshake timed out"),
        }
    }
}

impl std::error::Error for HandshakeError {}

/// One handshake: what it is sent to and with.
pub struct Handshake<'a> {
    pub runtime: &'a ChannelRuntime,
    pub credential: &'a CredentialRuntime,
    /// The member's upstream model (an Azure deployment's name).
    pub model: &'a str,
    /// The client's `openai-beta` header, passed on when it sent one.
    pub beta: Option<&'a HeaderValue>,
    /// Frame and message bounds of the upstream socket.
    pub config: WebSocketConfig,
    /// Connecting and the handshake together.
    pub timeout: Duration,
}

impl Handshake<'_> {
    /// Opens the session's upstream WebSocket.
    pub async fn open(&self, client: &HttpClient) -> Result<UpstreamSocket, HandshakeError> {
        // A workload identity's token first (a key credential is used as it is).
        let credential = tokio::time::timeout(
            self.timeout,
            self.credential.authorized(client, self.timeout),
        )
        .await
        .unwrap_or(Err(crate::token::TokenError::Timeout))
        .map_err(|e| HandshakeError::Protocol {
            cause: e.cause().unwrap_or(TransportCause::Other),
            message: format!("no upstream access token ({})", e.as_str()),
        })?;
        let (uri, headers) = self.target(&credential)?;
        let opening = async {
            let io = client
                .connect_upgradable(&uri)
                .await
                .map_err(HandshakeError::Connect)?;
            let request = ws_request(&uri, headers)?;
            match tokio_tungstenite::client_async_with_config(request, io, Some(self.config)).await
            {
                Ok((socket, _)) => Ok(socket),
                Err(e) => Err(refused_or_broken(e)),
            }
        };
        tokio::time::timeout(self.timeout, opening)
            .await
            .map_err(|_| HandshakeError::TimedOut)?
    }

    /// The `http(s)://` URL and the headers (the channel's extra headers and the credential's
    /// auth) the channel's rules give the session's request.
    fn target(
        &self,
        credential: &CredentialRuntime,
    ) -> Result<(http::Uri, HeaderMap), HandshakeError> {
        let query = format!("model={}", path_segment(self.model));
        let target = Target {
            method: &Method::GET,
            path: REALTIME_PATH,
            query: Some(&query),
            model: self.model,
        };
        let request = self
            .runtime
            .request(target, None, credential, Bytes::new())
            .map_err(|e| HandshakeError::Protocol {
                cause: TransportCause::Other,
                message: e.to_string(),
            })?;
        let (parts, _) = request.into_parts();
        let mut headers = parts.headers;
        // What an upgrade carries is its own: no body, no encoding to negotiate.
        headers.remove(http::header::CONTENT_TYPE);
        headers.remove(http::header::ACCEPT_ENCODING);
        headers.remove(http::header::CONTENT_LENGTH);
        if let Some(beta) = self.beta {
            headers.insert("openai-beta", beta.clone());
        }
        Ok((parts.uri, headers))
    }
}

/// The WebSocket request for `uri` (its scheme made `ws`/`wss`) with `headers` added to the
/// handshake's own.
fn ws_request(
    uri: &http::Uri,
    headers: HeaderMap,
) -> Result<tokio_tungstenite::tungstenite::handshake::client::Request, HandshakeError> {
    let text = uri.to_string();
    let ws = match text.strip_prefix("https://") {
        Some(rest) => format!("wss://{rest}"),
        None => match text.strip_prefix("http://") {
            Some(rest) => format!("ws://{rest}"),
            None => text,
        },
    };
    let mut request = ws
        .into_client_request()
        .map_err(|e| HandshakeError::Protocol {
            cause: TransportCause::Other,
            message: e.to_string(),
        })?;
    for (name, value) in headers.iter() {
        request.headers_mut().insert(name.clone(), value.clone());
    }
    Ok(request)
}

/// A failed handshake: the upstream's answer when it gave one, else what broke.
fn refused_or_broken(e: WsError) -> HandshakeError {
    match e {
        WsError::Http(response) => {
            let response = *response;
            let status = response.status().as_u16();
            let mut body = response.into_body().unwrap_or_default();
            body.truncate(MAX_REFUSAL_BODY);
            HandshakeError::Refused {
                status,
                body: Bytes::from(body),
            }
        }
        WsError::Io(io) => HandshakeError::Protocol {
            cause: TransportCause::of_io(io.kind()),
            message: io.to_string(),
        },
        other => HandshakeError::Protocol {
            cause: TransportCause::Other,
            message: other.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    #[test]
    fn only_openai_and_azure_serve_realtime_sessions() {
        for provider in [
            Provider::Anthropic,
            Provider::Gemini,
            Provider::Vertex,
            Provider::Bedrock,
            Provider::Mock,
        ] {
            assert!(!supports_realtime(provider), "{provider:?}");
        }
        assert!(supports_realtime(Provider::Openai));
        assert!(supports_realtime(Provider::Azure));
    }

    #[test]
    fn the_request_is_a_websocket_one_at_the_same_place() {
        let mut headers = HeaderMap::new();
        headers.insert("authorization", HeaderValue::from_static("Bearer up"));
        let uri: http::Uri = "https://api.example.com/v1/realtime?model=m"
            .parse()
            .unwrap();
        let request = ws_request(&uri, headers).unwrap();
        assert_eq!(
            request.uri().to_string(),
            "wss://api.example.com/v1/realtime?model=m"
        );
        assert_eq!(request.headers()["authorization"], "Bearer up");
        assert_eq!(request.headers()["upgrade"], "websocket");
        let plain: http::Uri = "http://127.0.0.1:9/v1/realtime".parse().unwrap();
        let request = ws_request(&plain, HeaderMap::new()).unwrap();
        assert_eq!(request.uri().scheme_str(), Some("ws"));
    }
}
