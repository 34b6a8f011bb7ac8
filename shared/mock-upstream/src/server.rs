//! The mock's HTTP server: one hyper connection task per client (HTTP/1.1; with TLS, HTTP/2 when
//! the client chooses it by ALPN), all under one shutdown signal, answering from the shared
//! [`Script`].

use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderMap, Request, Response};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::server::conn::{http1, http2};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use switchyard_sim as sim;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};
use tokio_rustls::TlsAcceptor;

use crate::azure;
use crate::bedrock;
use crate::control::{self, Shared};
use crate::realtime;
use crate::respond::{self, MockBody};
use crate::script::ReportedUsage;
use crate::script::{Behavior, HitCounts, Matcher, RealtimeLog, RecordedRequest, Script};
use crate::vertex::{self, TokenIssuer};

/// Largest request body the mock reads (matches the gateway's default limit).
const MAX_BODY_BYTES: usize = 32 * 1024 * 1024;

/// How a [`MockUpstream`] is started; [`MockUpstream::start`] uses the defaults.
#[derive(Clone, Debug)]
pub struct MockOptions {
    /// Where to listen; default `127.0.0.1:0` (a free port).
    pub listen: SocketAddr,
    /// How many of the latest requests [`MockUpstream::requests`] keeps (counters stay exact).
    pub record_limit: usize,
    /// Models listed by `GET /v1/models`.
    pub models: Vec<String>,
    /// Whether `/__mock/*` (the HTTP control API) is served.
    pub control_api: bool,
    /// Serve TLS with a self-signed certificate for `localhost` and `127.0.0.1` made at start
    /// ([`MockUpstream::certificate_pem`]), offering HTTP/2 and HTTP/1.1 by ALPN.
    pub tls: bool,
}

impl Default for MockOptions {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            record_limit: 100_000,
            models: sim::DEFAULT_MODELS
                .iter()
                .map(|m| (*m).to_owned())
                .collect(),
            control_api: true,
            tls: false,
        }
    }
}

/// A scriptable OpenAI/Anthropic/Gemini-compatible upstream on a local port. Dropping it stops the
/// server and closes every connection.
pub struct MockUpstream {
    addr: SocketAddr,
    /// The self-signed certificate (PEM) when serving TLS.
    certificate: Option<String>,
    shared: Arc<Shared>,
    shutdown: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
}

impl MockUpstream {
    /// Starts on `127.0.0.1:0` with the default options.
    pub async fn start() -> io::Result<Self> {
        Self::start_with(MockOptions::default()).await
    }

    /// Starts with `options`, serving in a background tokio task.
    pub async fn start_with(options: MockOptions) -> io::Result<Self> {
        let listener = TcpListener::bind(options.listen).await.map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("mock upstream: binding {}: {e}", options.listen),
            )
        })?;
        let addr = listener.local_addr()?;
        let (acceptor, certificate) = match options.tls {
            true => {
                let (acceptor, pem) = tls_acceptor()?;
                (Some(acceptor), Some(pem))
            }
            false => (None, None),
        };
        let shared = Arc::new(Shared {
            script: Mutex::new(Script::new(options.record_limit)),
            vertex: Mutex::new(TokenIssuer::default()),
            token_uri: format!("http://{addr}{}", vertex::TOKEN_PATH),
            models: options.models,
            control_api: options.control_api,
            realtime: Mutex::default(),
            files: Mutex::default(),
        });
        let (shutdown, shutdown_rx) = watch::channel(false);
        let task = tokio::spawn(accept_loop(
            listener,
            acceptor,
            Arc::clone(&shared),
            shutdown_rx,
        ));
        tracing::debug!(%addr, "mock upstream listening");
        Ok(Self {
            addr,
            certificate,
            shared,
            shutdown,
            task: Some(task),
        })
    }

    /// `http://127.0.0.1:PORT` (with TLS: `https://localhost:PORT`); the endpoints are under
    /// `/v1/...`.
    pub fn base_url(&self) -> String {
        match self.certificate {
            Some(_) => format!("https://localhost:{}", self.addr.port()),
            None => format!("http://{}", self.addr),
        }
    }

    /// The self-signed certificate (PEM) a client trusts to reach this mock over TLS; `None`
    /// without TLS.
    pub fn certificate_pem(&self) -> Option<&str> {
        self.certificate.as_deref()
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Adds a rule after the existing ones. Rules are checked in insertion order; the first
    /// matching rule with uses left answers; when none does, the default OK answer is served.
    pub fn on(&self, matcher: Matcher, behavior: Behavior) {
        self.shared.script().add_rule(matcher, behavior);
    }

    /// All requests received since the start or the last [`reset`](Self::reset).
    pub fn hits(&self) -> usize {
        self.shared.script().hits()
    }

    /// Recorded requests selected by `matcher` (exact while fewer than `record_limit` requests
    /// were received).
    pub fn hits_matching(&self, matcher: &Matcher) -> usize {
        self.shared.script().hits_matching(matcher)
    }

    /// Exact counters by path, credential and model.
    pub fn counts(&self) -> HitCounts {
        let script = self.shared.script();
        let counts = script.counts();
        HitCounts {
            total: counts.total,
            by_path: counts.by_path.clone(),
            by_credential: counts.by_credential.clone(),
            by_model: counts.by_model.clone(),
            unmatched: counts.unmatched,
        }
    }

    /// The token usage this mock's answers have reported since the start or the last
    /// [`reset`](Self::reset), summed (exact, whatever the record limit).
    pub fn reported_usage(&self) -> ReportedUsage {
        self.shared.script().reported_usage()
    }

    /// The recorded requests, oldest first.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.script().requests()
    }

    /// Clears rules, counters and the record (and the token endpoint's counters; the tokens it
    /// issued stay valid; and the realtime log).
    pub fn reset(&self) {
        self.shared.script().reset();
        self.shared.vertex().reset();
        *self.shared.realtime() = RealtimeLog::default();
    }

    /// What the realtime sessions received so far: sessions opened, client events, close codes.
    pub fn realtime(&self) -> RealtimeLog {
        self.shared.realtime().clone()
    }

    /// A Bedrock credential (the JSON the gateway takes) for this mock's first test key
    /// ([`bedrock::TEST_ACCESS_KEY_ID`]), whose signatures it accepts.
    pub fn bedrock_credential(&self) -> String {
        bedrock::credential_json(
            bedrock::TEST_ACCESS_KEY_ID,
            bedrock::TEST_SECRET_ACCESS_KEY,
            None,
        )
    }

    /// A Bedrock credential for this mock's second test key ([`bedrock::TEST_ACCESS_KEY_ID_2`]).
    pub fn bedrock_credential_2(&self) -> String {
        bedrock::credential_json(
            bedrock::TEST_ACCESS_KEY_ID_2,
            bedrock::TEST_SECRET_ACCESS_KEY_2,
            None,
        )
    }

    /// A Bedrock credential naming the first test key with a wrong secret: its signatures are
    /// refused (403 `InvalidSignatureException`).
    pub fn bedrock_wrong_secret_credential(&self) -> String {
        bedrock::credential_json(
            bedrock::TEST_ACCESS_KEY_ID,
            "wrongBedrockSecret/0001+ThrowawayTestKeyXYZ",
            None,
        )
    }

    /// Vertex AI's token endpoint here: `http://127.0.0.1:PORT/token`.
    pub fn vertex_token_uri(&self) -> String {
        self.shared.token_uri.clone()
    }

    /// A service-account key file whose key this mock's token endpoint knows (the throwaway
    /// test key, [`vertex::TEST_CLIENT_EMAIL`]), its `token_uri` this mock.
    pub fn vertex_service_account(&self) -> String {
        vertex::service_account_json(&self.shared.token_uri, vertex::TEST_PRIVATE_KEY_PEM)
    }

    /// A well-formed service-account key file for the same account signed with a key this
    /// mock does not know: its token endpoint refuses it (`invalid_grant`).
    pub fn vertex_unregistered_service_account(&self) -> String {
        vertex::service_account_json(&self.shared.token_uri, vertex::UNREGISTERED_PRIVATE_KEY_PEM)
    }

    /// Registers (or replaces) the public key (PEM) of the service account `client_email` with
    /// the token endpoint; `false` if the PEM is not an RSA public key.
    pub fn register_vertex_key(&self, client_email: &str, public_key_pem: &str) -> bool {
        self.shared.vertex().register(client_email, public_key_pem)
    }

    /// The lifetime of the access tokens issued from now on (`expires_in`, whole seconds; one
    /// hour by default). A token past it is refused with Vertex's 401.
    pub fn set_vertex_token_lifetime(&self, lifetime: Duration) {
        self.shared.vertex().set_lifetime(lifetime);
    }

    /// Token exchanges that issued a token since the start or the last reset.
    pub fn vertex_token_exchanges(&self) -> usize {
        self.shared.vertex().exchanges()
    }

    /// Token requests refused since the start or the last reset.
    pub fn vertex_token_refusals(&self) -> usize {
        self.shared.vertex().refusals()
    }

    /// The last assertion (JWT) the token endpoint received, for checking it elsewhere.
    pub fn vertex_last_assertion(&self) -> Option<String> {
        self.shared.vertex().last_assertion()
    }

    /// Stops accepting, lets in-flight responses finish for up to `grace` (hanging requests are
    /// released at once), then closes what is left.
    pub async fn shutdown(mut self, grace: Duration) {
        let _ = self.shutdown.send(true);
        if let Some(mut task) = self.task.take() {
            if tokio::time::timeout(grace, &mut task).await.is_err() {
                tracing::warn!(
                    ?grace,
                    "mock upstream: connections still open after the grace period; closing them"
                );
                task.abort();
            }
        }
    }
}

impl Drop for MockUpstream {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
        if let Some(task) = self.task.take() {
            // Aborting the accept loop drops its JoinSet, which aborts every connection task.
            task.abort();
        }
    }
}

impl std::fmt::Debug for MockUpstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockUpstream")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

async fn accept_loop(
    listener: TcpListener,
    acceptor: Option<TlsAcceptor>,
    shared: Arc<Shared>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => {
                    connections.spawn(serve_connection(stream, acceptor.clone(), Arc::clone(&shared), shutdown.clone()));
                }
                Err(error) => {
                    // Typically EMFILE under a connection flood: back off instead of spinning.
                    tracing::warn!(%error, "mock upstream: accept failed");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            },
            _ = shutdown.changed() => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    drop(listener);
    while connections.join_next().await.is_some() {}
}

async fn serve_connection(
    stream: TcpStream,
    acceptor: Option<TlsAcceptor>,
    shared: Arc<Shared>,
    shutdown: watch::Receiver<bool>,
) {
    let _ = stream.set_nodelay(true);
    let request_shutdown = shutdown.clone();
    let service =
        service_fn(move |request| handle(Arc::clone(&shared), request_shutdown.clone(), request));
    let Some(acceptor) = acceptor else {
        let connection = http1::Builder::new()
            .serve_connection(TokioIo::new(stream), service)
            .with_upgrades();
        return drive(connection, shutdown, |c| c.graceful_shutdown()).await;
    };
    let stream = match acceptor.accept(stream).await {
        Ok(stream) => stream,
        Err(error) => {
            tracing::debug!(%error, "mock upstream: TLS handshake failed");
            return;
        }
    };
    if stream.get_ref().1.alpn_protocol() == Some(b"h2") {
        let connection = http2::Builder::new(TokioExecutor::new())
            .max_concurrent_streams(H2_MAX_STREAMS)
            .serve_connection(TokioIo::new(stream), service);
        drive(connection, shutdown, |c| c.graceful_shutdown()).await;
    } else {
        let connection = http1::Builder::new()
            .serve_connection(TokioIo::new(stream), service)
            .with_upgrades();
        drive(connection, shutdown, |c| c.graceful_shutdown()).await;
    }
}

/// A connection of either HTTP version until it ends; at shutdown `graceful` is called on it
/// (its version's graceful shutdown) and it is driven to its end.
async fn drive<C>(
    connection: C,
    mut shutdown: watch::Receiver<bool>,
    graceful: impl FnOnce(std::pin::Pin<&mut C>),
) where
    C: std::future::Future<Output = Result<(), hyper::Error>>,
{
    tokio::pin!(connection);
    let result = tokio::select! {
        result = connection.as_mut() => result,
        _ = shutdown.changed() => {
            graceful(connection.as_mut());
            connection.await
        }
    };
    if let Err(error) = result {
        // Scripted cuts end here on purpose; anything else is the client going away.
        tracing::debug!(%error, "mock upstream: connection ended with an error");
    }
}

/// Streams one HTTP/2 connection carries at once (clients open more connections beyond).
const H2_MAX_STREAMS: u32 = 1000;

/// A TLS acceptor with a certificate for `localhost` and `127.0.0.1` made now, and the
/// certificate's PEM.
fn tls_acceptor() -> io::Result<(TlsAcceptor, String)> {
    let failed = |e: String| io::Error::other(format!("mock upstream TLS: {e}"));
    let names = vec!["localhost".to_owned(), "127.0.0.1".to_owned()];
    let certified = rcgen::generate_simple_self_signed(names).map_err(|e| failed(e.to_string()))?;
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(certified.signing_key.serialize_der().into());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| failed(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(vec![certified.cert.der().clone()], key)
        .map_err(|e| failed(e.to_string()))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok((TlsAcceptor::from(Arc::new(config)), certified.cert.pem()))
}

async fn handle(
    shared: Arc<Shared>,
    shutdown: watch::Receiver<bool>,
    request: Request<Incoming>,
) -> io::Result<Response<MockBody>> {
    if realtime::is_session_request(&request) {
        let (parts, body) = request.into_parts();
        let recorded = record(parts.clone(), Bytes::new(), None);
        return Ok(realtime::open(
            &shared,
            Request::from_parts(parts, body),
            recorded,
        ));
    }
    let (parts, body) = request.into_parts();
    let body = match Limited::new(body, MAX_BODY_BYTES).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(error) => {
            tracing::debug!(%error, "mock upstream: reading request body failed");
            let body = sim::error_json(
                sim::Protocol::of_path(parts.uri.path()),
                400,
                "request body unreadable or too large",
            );
            return Ok(respond::full(
                http::StatusCode::BAD_REQUEST,
                "application/json",
                body,
            ));
        }
    };
    let path = parts.uri.path();
    if shared.control_api && path.starts_with(control::PREFIX) {
        return Ok(control::handle(&shared, parts.method.as_str(), path, &body));
    }
    if path == vertex::TOKEN_PATH && parts.method == http::Method::POST {
        let (status, answer) = shared.vertex().exchange(&body, &shared.token_uri);
        let status =
            http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR);
        return Ok(respond::full(status, "application/json", answer));
    }
    let (method, uri) = (parts.method.clone(), parts.uri.clone());
    let bedrock_path = bedrock::parse(path);
    let recorded = record(parts, body, bedrock_path.as_ref());
    if let Some(refusal) = refusal(&shared, &recorded, bedrock_path.is_some(), &method, &uri) {
        // The provider refuses it before anything else: no rule applies.
        shared.script().record(&recorded);
        return Ok(refusal);
    }
    let behavior = shared.script().answer(&recorded);
    if behavior.is_none() && crate::files::serves(&recorded.path) {
        return Ok(files_answer(&shared, &recorded));
    }
    tracing::debug!(
        method = %recorded.method,
        path = %recorded.path,
        model = recorded.model.as_deref().unwrap_or(""),
        scripted = behavior.is_some(),
        "mock upstream request"
    );
    if let Some(behavior) = &behavior {
        before_answer(behavior, shutdown).await?;
    }
    let (response, reported) = match &bedrock_path {
        Some(route) => bedrock::respond(&recorded, route, behavior.as_ref()),
        None => respond::respond(&recorded, behavior.as_ref(), &shared.models),
    };
    if let Some(reported) = reported {
        shared.script().add_reported_usage(reported);
    }
    Ok(response)
}

/// A Files, Batch or Message Batches API call no rule answered: the in-memory store's answer.
fn files_answer(shared: &Shared, recorded: &RecordedRequest) -> Response<MockBody> {
    let content_type = recorded
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    shared.files().handle(
        &recorded.method,
        &recorded.path,
        content_type,
        &recorded.body,
    )
}

/// The record of a request: its credential and model where its provider carries them (the
/// path's model for Gemini, Azure, Vertex and Bedrock; else the body's).
fn record(
    parts: http::request::Parts,
    body: Bytes,
    bedrock_path: Option<&bedrock::BedrockPath>,
) -> RecordedRequest {
    let path = parts.uri.path().to_owned();
    let query = parts.uri.query().map(str::to_owned);
    RecordedRequest {
        method: parts.method.to_string(),
        version: parts.version,
        credential: match bedrock_path {
            Some(_) => bedrock::access_key_id(&parts.headers),
            None => credential(&parts.headers, query.as_deref()),
        },
        model: gemini_model(&path)
            .or_else(|| azure_deployment(&path))
            .or_else(|| vertex::parse(&path).map(|v| v.model.to_owned()))
            .or_else(|| bedrock_path.map(|b| b.model.clone()))
            .or_else(|| model_of(&parts.headers, &body)),
        path,
        query,
        headers: parts.headers,
        body,
    }
}

/// The provider's refusal of a request before any rule: Azure's 404 without `api-version`,
/// Vertex's 401 without a valid token, Bedrock's 403 without a valid signature.
fn refusal(
    shared: &Shared,
    recorded: &RecordedRequest,
    bedrock: bool,
    method: &http::Method,
    uri: &http::Uri,
) -> Option<Response<MockBody>> {
    if azure::lacks_api_version(&recorded.path, recorded.query.as_deref()) {
        return Some(respond::full(
            http::StatusCode::NOT_FOUND,
            "application/json",
            azure::RESOURCE_NOT_FOUND,
        ));
    }
    if vertex::parse(&recorded.path).is_some()
        && !shared.vertex().valid(recorded.credential.as_deref())
    {
        return Some(respond::full(
            http::StatusCode::UNAUTHORIZED,
            "application/json",
            vertex::UNAUTHENTICATED,
        ));
    }
    if bedrock {
        return bedrock::verify(method, uri, &recorded.headers, &recorded.body)
            .err()
            .map(|refusal| *refusal);
    }
    None
}

/// What a scripted behaviour does before answering: its latency, then a hang until the mock stops
/// or a cut before the first byte (both `Err`: the connection closes without an answer).
async fn before_answer(behavior: &Behavior, mut shutdown: watch::Receiver<bool>) -> io::Result<()> {
    if !behavior.latency.is_zero() {
        tokio::time::sleep(behavior.latency).await;
    }
    if behavior.hang {
        // Wait for the mock to stop (the client giving up drops this future with the
        // connection), then close without answering.
        while !*shutdown.borrow_and_update() {
            if shutdown.changed().await.is_err() {
                break;
            }
        }
        return Err(io::Error::other("mock upstream: hang released by shutdown"));
    }
    if behavior.cut_before_first_byte {
        return Err(io::Error::other("mock upstream: cut before first byte"));
    }
    Ok(())
}

/// The bearer token of `Authorization`, else `x-api-key` (Anthropic), else `api-key` (Azure),
/// else `x-goog-api-key` or the `key` query parameter (Gemini).
fn credential(headers: &HeaderMap, query: Option<&str>) -> Option<String> {
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        });
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let query_key = || query?.split('&').find_map(|pair| pair.strip_prefix("key="));
    bearer
        .or_else(|| header("x-api-key"))
        .or_else(|| header("api-key"))
        .or_else(|| header("x-goog-api-key"))
        .or_else(query_key)
        .map(|v| v.trim().to_owned())
}

/// The `{model}` of a Gemini path `/v1beta/models/{model}:method`.
fn gemini_model(path: &str) -> Option<String> {
    let rest = path.strip_prefix("/v1beta/models/")?;
    let model = rest.split_once(':').map_or(rest, |(model, _)| model);
    (!model.is_empty()).then(|| model.to_owned())
}

/// The `{deployment}` of an Azure path `/openai/deployments/{deployment}/...`.
fn azure_deployment(path: &str) -> Option<String> {
    azure::parse(path)?.deployment.map(str::to_owned)
}

/// The `model` of a JSON body, or of a multipart form (audio transcriptions).
fn model_of(headers: &HeaderMap, body: &Bytes) -> Option<String> {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if content_type.starts_with("multipart/form-data") {
        let text = String::from_utf8_lossy(body);
        let after = text.split("name=\"model\"").nth(1)?;
        let value = after.split("\r\n\r\n").nth(1)?;
        return value.split("\r\n").next().map(str::to_owned);
    }
    #[derive(serde::Deserialize)]
    struct WithModel {
        model: Option<String>,
    }
    serde_json::from_slice::<WithModel>(body).ok()?.model
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credential_comes_from_bearer_or_api_key() {
        let mut h = HeaderMap::new();
        assert_eq!(credential(&h, None), None);
        assert_eq!(
            credential(&h, Some("alt=sse&key=AIza-q")).as_deref(),
            Some("AIza-q")
        );
        h.insert("x-goog-api-key", "AIza-h".parse().unwrap());
        assert_eq!(
            credential(&h, Some("key=AIza-q")).as_deref(),
            Some("AIza-h")
        );
        h.insert("api-key", "azure-k".parse().unwrap());
        assert_eq!(credential(&h, None).as_deref(), Some("azure-k"));
        h.insert("x-api-key", "sk-x".parse().unwrap());
        assert_eq!(credential(&h, None).as_deref(), Some("sk-x"));
        h.insert(header::AUTHORIZATION, "Bearer sk-b".parse().unwrap());
        assert_eq!(credential(&h, None).as_deref(), Some("sk-b"));
    }

    #[test]
    fn gemini_model_comes_from_the_path() {
        assert_eq!(
            gemini_model("/v1beta/models/gemini-2.0-flash:generateContent").as_deref(),
            Some("gemini-2.0-flash")
        );
        assert_eq!(gemini_model("/v1beta/models/g").as_deref(), Some("g"));
        assert_eq!(gemini_model("/v1beta/models/:x"), None);
        assert_eq!(gemini_model("/v1/chat/completions"), None);
        assert_eq!(
            azure_deployment("/openai/deployments/gpt-4o-prod/chat/completions").as_deref(),
            Some("gpt-4o-prod")
        );
        assert_eq!(azure_deployment("/openai/v1/chat/completions"), None);
    }

    #[test]
    fn model_comes_from_json_or_multipart() {
        let h = HeaderMap::new();
        let body = Bytes::from_static(br#"{"model":"gpt-x","messages":[]}"#);
        assert_eq!(model_of(&h, &body).as_deref(), Some("gpt-x"));
        assert_eq!(model_of(&h, &Bytes::from_static(b"nope")), None);
        let mut h = HeaderMap::new();
        h.insert(
            header::CONTENT_TYPE,
            "multipart/form-data; boundary=b".parse().unwrap(),
        );
        let form = Bytes::from_static(
            b"--b\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nwhisper-1\r\n--b--\r\n",
        );
        assert_eq!(model_of(&h, &form).as_deref(), Some("whisper-1"));
    }
}
