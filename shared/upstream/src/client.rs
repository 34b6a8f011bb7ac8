//! The one HTTP client both planes use towards upstreams: a connection pool of our own, over our
//! own HTTP/1.1 for plain upstreams and, over TLS, HTTP/2 through the `h2` crate or hyper's
//! HTTP/1.1.
//!
//! - Plain `http://` upstreams speak HTTP/1.1, written and read by the request's own task
//!   ([`crate::h1`]: no connection task, no channel); `https://` ones (rustls with ring, the public
//!   web roots plus any extra roots the operator trusts) offer ALPN `h2` and `http/1.1`, and the
//!   upstream's choice decides: HTTP/2 is [`crate::http2`] (the request's task opens its stream,
//!   one task per connection drives the socket), HTTP/1.1 over TLS is hyper's.
//! - HTTP/1.1: one request at a time per connection; a connection goes back to its host's idle
//!   list when the answer's body has been read to its end (an answer dropped early closes it),
//!   and the most recently used idle connection is taken first.
//! - HTTP/2: requests share a host's connections, [`MAX_STREAMS_PER_CONNECTION`] streams at a
//!   time on each; when every connection is full, one more is opened. Connections to a host that may speak HTTP/2 are opened one at a time, so a
//!   burst of requests to a new host opens one connection, not one per request.
//! - A request that could not be written on a reused connection (the upstream closed it while it
//!   sat idle) is sent again on another; nothing is retried once it may have reached the
//!   upstream.
//!
//! Each proxy worker thread has its own client, so a request, its upstream connection and the
//! tasks driving both stay on one thread; the lock below is only ever taken briefly, never across
//! an await.

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{ready, Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::HOST;
use http::uri::{Authority, PathAndQuery, Scheme};
use http::{HeaderValue, Request, Response, Uri};
use http_body::{Body, Frame, SizeHint};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use crate::cause::TransportCause;
use crate::h1::{self, Unsent};
use crate::http2;

/// Most streams the pool puts on one HTTP/2 connection: the concurrency HTTP/2 servers commonly
/// allow (and the least the protocol recommends they allow). An upstream that allows fewer
/// makes the excess wait on the connection for a free stream.
pub const MAX_STREAMS_PER_CONNECTION: usize = 100;
/// An idle HTTP/1.1 connection unused this long is closed rather than reused.
const IDLE_TIMEOUT: Duration = Duration::from_secs(90);
/// Most idle HTTP/1.1 connections kept per upstream host (the oldest go first).
const MAX_IDLE_PER_HOST: usize = 256;
/// Sends of one request on reused connections that turned out closed, before giving up.
const MAX_STALE_RETRIES: usize = 3;
/// HTTP/2 keep-alive pings while streams are open: a silent dead connection is noticed.
const H2_PING_INTERVAL: Duration = Duration::from_secs(30);
const H2_PING_TIMEOUT: Duration = Duration::from_secs(20);

/// How a client connects.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// Bounds the TCP connect and the TLS handshake together; callers wrap each call in their
    /// own first-byte (or probe) timeout as well.
    pub connect_timeout: Duration,
    /// Certificates trusted as roots for `https://` upstreams besides the public web roots (a
    /// private CA in front of self-hosted models, a test upstream's self-signed certificate).
    pub extra_roots: Vec<CertificateDer<'static>>,
    /// Offer HTTP/2 to `https://` upstreams (ALPN); off: HTTP/1.1 only.
    pub http2: bool,
}

impl ClientOptions {
    pub fn new(connect_timeout: Duration) -> Self {
        ClientOptions {
            connect_timeout,
            extra_roots: Vec::new(),
            http2: true,
        }
    }

    /// The options both planes' `SWITCHYARD_UPSTREAM_CA` (a PEM file of extra roots) and
    /// `SWITCHYARD_UPSTREAM_HTTP2` give; an unusable CA file is an error naming the variable.
    pub fn from_settings(
        connect_timeout: Duration,
        ca: Option<&std::path::Path>,
        http2: bool,
    ) -> Result<Self, String> {
        let extra_roots = match ca {
            Some(path) => read_roots(path).map_err(|e| format!("SWITCHYARD_UPSTREAM_CA: {e}"))?,
            None => Vec::new(),
        };
        Ok(ClientOptions {
            connect_timeout,
            extra_roots,
            http2,
        })
    }
}

/// A pooled upstream client; clones share the pool.
#[derive(Clone)]
pub struct HttpClient {
    inner: Arc<Inner>,
}

struct Inner {
    connect_timeout: Duration,
    http2: bool,
    /// `None` only if rustls refused the configuration (it cannot with the built-in roots):
    /// then every `https://` connect fails with that reason.
    tls: Result<TlsConnector, String>,
    /// The same TLS offering HTTP/1.1 only, for connections that upgrade (a WebSocket).
    tls_h1: Result<TlsConnector, String>,
    hosts: Mutex<Hosts>,
}

/// Every upstream host the client has talked to, found by its URL authority (`host[:port]`,
/// one map per scheme: no key is built per request). A host's index never changes, so an
/// answer's body can hand its connection back by index.
#[derive(Default)]
struct Hosts {
    by_authority: [std::collections::HashMap<Box<str>, usize>; 2],
    list: Vec<Host>,
}

/// Where a host's connections go.
#[derive(Debug, Clone)]
struct HostKey {
    https: bool,
    host: Box<str>,
    port: u16,
}

struct Host {
    key: HostKey,
    /// The `Host` header of its HTTP/1.1 requests.
    header: HeaderValue,
    idle: Vec<IdleH1>,
    shared: Vec<SharedH2>,
    /// What ALPN chose on the last connection (`None` before the first TLS connection; plain
    /// HTTP is always HTTP/1.1).
    speaks_h2: Option<bool>,
    /// Held while opening a connection that may be HTTP/2.
    opening: Arc<tokio::sync::Mutex<()>>,
    /// When and why the last connection attempt failed.
    failed: Option<(Instant, TransportCause, String)>,
}

struct IdleH1 {
    send: H1,
    since: Instant,
}

/// An HTTP/1.1 connection: our own on plain TCP (see [`crate::h1`]), hyper's over TLS.
enum H1 {
    Own(h1::Conn),
    Hyper(http1::SendRequest<Full<Bytes>>),
}

impl H1 {
    /// The upstream closed it (or sent what it should not have while it was idle).
    fn is_closed(&self) -> bool {
        match self {
            H1::Own(conn) => !conn.is_reusable(),
            H1::Hyper(send) => send.is_closed(),
        }
    }

    /// It can take a request now (hyper's may still be finishing its last answer).
    fn is_ready(&self) -> bool {
        match self {
            H1::Own(_) => true,
            H1::Hyper(send) => send.is_ready(),
        }
    }
}

struct SharedH2 {
    send: http2::Conn,
    streams: Arc<AtomicUsize>,
}

/// Why a request got no answer head.
#[derive(Debug)]
pub struct ClientError {
    connect: bool,
    cause: TransportCause,
    message: String,
}

impl ClientError {
    /// The connection could not be made (TCP connect, DNS, TLS handshake or its timeout).
    pub fn is_connect(&self) -> bool {
        self.connect
    }

    /// What the failure came down to.
    pub fn cause(&self) -> TransportCause {
        self.cause
    }

    fn connect(cause: TransportCause, message: impl Into<String>) -> Self {
        ClientError {
            connect: true,
            cause,
            message: message.into(),
        }
    }

    fn send(e: h1::Error) -> Self {
        ClientError {
            connect: false,
            cause: e.cause(),
            message: e.to_string(),
        }
    }
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = if self.connect { "connect" } else { "request" };
        write!(f, "upstream {kind} failed: {}", self.message)
    }
}

impl std::error::Error for ClientError {}

/// The certificates of a PEM file (for [`ClientOptions::extra_roots`]); a file without any is
/// an error, so a wrong path or format is noticed at start.
pub fn read_roots(path: &std::path::Path) -> Result<Vec<CertificateDer<'static>>, String> {
    use rustls::pki_types::pem::PemObject;
    let shown = path.display();
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("cannot read {shown}: {e}"))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{shown} is not a PEM certificate file: {e}"))?;
    if certs.is_empty() {
        return Err(format!("{shown} holds no PEM certificate"));
    }
    Ok(certs)
}

/// A pooled client with the public web roots and HTTP/2 offered to TLS upstreams.
pub fn build_client(connect_timeout: Duration) -> HttpClient {
    HttpClient::new(ClientOptions::new(connect_timeout))
}

impl HttpClient {
    pub fn new(options: ClientOptions) -> Self {
        let tls = tls_config(&options).map(|config| TlsConnector::from(Arc::new(config)));
        if let Err(e) = &tls {
            tracing::error!(error = %e, "TLS to upstreams is unavailable");
        }
        let h1_only = ClientOptions {
            http2: false,
            ..options.clone()
        };
        let tls_h1 = tls_config(&h1_only).map(|config| TlsConnector::from(Arc::new(config)));
        HttpClient {
            inner: Arc::new(Inner {
                connect_timeout: options.connect_timeout,
                http2: options.http2,
                tls,
                tls_h1,
                hosts: Mutex::new(Hosts::default()),
            }),
        }
    }

    /// Sends `request` (an absolute `http://` or `https://` URI) and waits for the answer's head.
    pub async fn request(
        &self,
        request: Request<Full<Bytes>>,
    ) -> Result<Response<UpstreamBody>, ClientError> {
        let (host, header, mut pooled) = self.inner.checkout(request.uri())?;
        // HTTP/1.1 sends the path alone; a request sent again may go out over HTTP/2.
        let uri = request.uri().clone();
        let mut request = request;
        for round in 0..=MAX_STALE_RETRIES {
            if round > 0 {
                pooled = self.inner.take(host);
            }
            let (lease, reused) = match pooled.take() {
                Some(lease) => (lease, true),
                // Boxed: connecting (TCP, TLS, the HTTP handshake) is a large future, and the
                // request's own future is moved along the whole request path; a pooled request
                // never makes it.
                None => (Box::pin(self.inner.open(host)).await?, false),
            };
            // Boxed: sending holds the request and the connection's read state, and this future
            // is moved along the whole request path.
            let sent = Box::pin(lease.send(request, &header, reused, &self.inner, host));
            match sent.await {
                Ok(response) => return Ok(response),
                Err(Unsent::Again(again, _)) if reused => {
                    request = *again;
                    *request.uri_mut() = uri.clone();
                }
                Err(Unsent::Again(_, e)) | Err(Unsent::Failed(e)) => {
                    return Err(ClientError::send(e))
                }
            }
        }
        Err(ClientError::send(h1::Error::caused(
            TransportCause::Reset,
            "every pooled connection to the upstream was closed",
        )))
    }

    /// A connection of its own for a request that upgrades it (a WebSocket): TCP, and for
    /// `https://` TLS offering HTTP/1.1 only (upgrades are HTTP/1.1's), within the connect
    /// timeout. Never pooled: the upgraded connection belongs to its session.
    pub async fn connect_upgradable(&self, uri: &Uri) -> Result<UpgradableIo, ClientError> {
        let (https, authority) = scheme_authority(uri)?;
        let key = new_host(https, authority, false)?.key;
        let inner = &self.inner;
        let connecting = async {
            let tcp = tcp_connect(&key.host, key.port).await?;
            if !https {
                return Ok(Transport::Plain(tcp));
            }
            let tls = tls_over(&inner.tls_h1, &key, tcp).await?;
            Ok(Transport::Tls(Box::new(tls)))
        };
        let transport = tokio::time::timeout(inner.connect_timeout, connecting)
            .await
            .map_err(|_| ClientError::connect(TransportCause::Timeout, "connect timed out"))??;
        Ok(UpgradableIo(transport))
    }

    /// Idle HTTP/1.1 and open HTTP/2 connections held now (for tests and diagnostics).
    pub fn pooled(&self) -> (usize, usize) {
        let hosts = self.inner.lock();
        hosts.list.iter().fold((0, 0), |(h1, h2), host| {
            (h1 + host.idle.len(), h2 + host.shared.len())
        })
    }
}

/// A connection lent to one request.
enum Lease {
    H1(H1),
    H2(http2::Conn, StreamTicket),
}

/// hyper's failure to send as ours: the request back when it was never written.
fn unsent(mut e: hyper::client::conn::TrySendError<Request<Full<Bytes>>>) -> Unsent {
    let request = e.take_message();
    let e = e.into_error();
    let error = h1::Error::caused(TransportCause::of_hyper(&e), e.to_string());
    match request {
        Some(request) => Unsent::Again(Box::new(request), error),
        None => Unsent::Failed(error),
    }
}

impl Lease {
    /// Sends `request` on the lent connection; the answer's body gives the connection back to
    /// `host`'s pool at its end (`reused`: the connection served a request before).
    async fn send(
        self,
        request: Request<Full<Bytes>>,
        authority: &HeaderValue,
        reused: bool,
        inner: &Arc<Inner>,
        host: usize,
    ) -> Result<Response<UpstreamBody>, Unsent> {
        match self {
            Lease::H1(H1::Own(conn)) => {
                let response = conn.send(request, authority, reused).await?;
                let back = Back::Own {
                    inner: Arc::clone(inner),
                    host,
                };
                Ok(response.map(|body| UpstreamBody {
                    inner: Kind::Own(body),
                    back,
                }))
            }
            Lease::H1(H1::Hyper(mut send)) => {
                let mut request = request;
                origin_form(&mut request, authority);
                let response = send.try_send_request(request).await.map_err(unsent)?;
                // The connection (`send`) goes with the switch, never back to the pool.
                refuse_switch(&response)?;
                let back = Back::H1 {
                    send: Some(send),
                    inner: Arc::clone(inner),
                    host,
                };
                Ok(response.map(|body| UpstreamBody {
                    inner: Kind::Hyper(body),
                    back,
                }))
            }
            Lease::H2(conn, ticket) => {
                let response = conn.send(request).await?;
                refuse_switch(&response)?;
                Ok(response.map(|body| UpstreamBody {
                    inner: Kind::H2(body),
                    back: Back::H2(ticket),
                }))
            }
        }
    }
}

/// No request asks for an upgrade: a `101` is the upstream's protocol error, never an answer (our
/// own HTTP/1.1 refuses it as it reads the head, see [`crate::h1`]).
fn refuse_switch<B>(response: &Response<B>) -> Result<(), Unsent> {
    if response.status() == http::StatusCode::SWITCHING_PROTOCOLS {
        return Err(Unsent::Failed(h1::Error::from(
            "the upstream switched protocols (101) though no upgrade was asked".to_owned(),
        )));
    }
    Ok(())
}

/// An HTTP/1.1 request goes out in origin form (`/path?query`) with a `Host` header; HTTP/2
/// takes scheme and authority from the absolute URI.
fn origin_form(request: &mut Request<Full<Bytes>>, authority: &HeaderValue) {
    let path = request
        .uri()
        .path_and_query()
        .cloned()
        .unwrap_or_else(|| PathAndQuery::from_static("/"));
    *request.uri_mut() = Uri::from(path);
    request
        .headers_mut()
        .entry(HOST)
        .or_insert_with(|| authority.clone());
}

/// The scheme (`true`: https) and authority of an absolute URI.
fn scheme_authority(uri: &Uri) -> Result<(bool, &Authority), ClientError> {
    let https = match uri.scheme() {
        Some(s) if *s == Scheme::HTTPS => true,
        Some(s) if *s == Scheme::HTTP => false,
        _ => {
            return Err(ClientError::connect(
                TransportCause::Other,
                "the URL's scheme is not http or https",
            ))
        }
    };
    let authority = uri
        .authority()
        .ok_or_else(|| ClientError::connect(TransportCause::Other, "the URL has no host"))?;
    Ok((https, authority))
}

/// A new host entry: where it connects and its `Host` header (the port only when it is not the
/// scheme's default).
fn new_host(https: bool, authority: &Authority, http2: bool) -> Result<Host, ClientError> {
    let default_port = if https { 443 } else { 80 };
    let port = authority.port_u16().unwrap_or(default_port);
    let header = if port == default_port {
        HeaderValue::from_str(authority.host())
    } else {
        HeaderValue::from_str(authority.as_str())
    }
    .map_err(|_| {
        ClientError::connect(
            TransportCause::Other,
            "the URL's host is not a valid header value",
        )
    })?;
    Ok(Host {
        key: HostKey {
            https,
            host: authority.host().into(),
            port,
        },
        header,
        idle: Vec::new(),
        shared: Vec::new(),
        speaks_h2: (!https || !http2).then_some(false),
        opening: Arc::default(),
        failed: None,
    })
}

impl Host {
    /// A pooled connection with room for one more request: an HTTP/2 connection with a free
    /// stream, else the most recently used ready HTTP/1.1 one. Closed and expired ones go.
    fn take(&mut self) -> Option<Lease> {
        self.shared.retain_mut(|c| !c.send.is_closed());
        for c in &self.shared {
            if c.streams.load(Ordering::Relaxed) < MAX_STREAMS_PER_CONNECTION {
                return Some(Lease::H2(c.send.clone(), StreamTicket::new(&c.streams)));
            }
        }
        // Most recently returned last. Closed or expired ones on the way are dropped; one not
        // ready yet (its last answer just ended) stays for later.
        let now = Instant::now();
        let mut waiting = None;
        let mut found = None;
        while let Some(c) = self.idle.pop() {
            if c.send.is_closed() || now.duration_since(c.since) >= IDLE_TIMEOUT {
                continue;
            }
            if c.send.is_ready() {
                found = Some(c.send);
                break;
            }
            if waiting.is_none() {
                waiting = Some(c);
            }
        }
        self.idle.extend(waiting);
        // The oldest idle connection, when expired, goes too (the rest go as they are reached).
        if self
            .idle
            .first()
            .is_some_and(|c| now.duration_since(c.since) >= IDLE_TIMEOUT)
        {
            self.idle.remove(0);
        }
        found.map(Lease::H1)
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, Hosts> {
        // A panic while holding the lock cannot leave the lists inconsistent (each change is
        // one push or removal), so a poisoned lock is used as it is.
        self.hosts.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The index of the URI's host (added on first use), its `Host` header and a pooled
    /// connection for the request if one has room: one look under the lock.
    fn checkout(&self, uri: &Uri) -> Result<(usize, HeaderValue, Option<Lease>), ClientError> {
        let (https, authority) = scheme_authority(uri)?;
        let mut hosts = self.lock();
        let known = hosts.by_authority[usize::from(https)].get(authority.as_str());
        if let Some(&index) = known {
            if let Some(host) = hosts.list.get_mut(index) {
                return Ok((index, host.header.clone(), host.take()));
            }
        }
        let host = new_host(https, authority, self.http2)?;
        let (index, header) = (hosts.list.len(), host.header.clone());
        hosts.list.push(host);
        hosts.by_authority[usize::from(https)].insert(authority.as_str().into(), index);
        Ok((index, header, None))
    }

    /// [`Host::take`] on the host at `host`.
    fn take(&self, host: usize) -> Option<Lease> {
        self.lock().list.get_mut(host)?.take()
    }

    /// A new connection for one request. A host that may speak HTTP/2 opens one connection at a
    /// time: whoever waited looks for room on the one just opened first.
    async fn open(&self, host: usize) -> Result<Lease, ClientError> {
        let (key, opening) = {
            let hosts = self.lock();
            let entry = hosts.list.get(host).ok_or_else(|| {
                ClientError::connect(TransportCause::Other, "unknown upstream host")
            })?;
            let opening = (entry.speaks_h2 != Some(false)).then(|| Arc::clone(&entry.opening));
            (entry.key.clone(), opening)
        };
        let mut _turn = None;
        if let Some(opening) = &opening {
            let asked = Instant::now();
            let turn = opening.lock().await;
            if let Some(lease) = self.take(host) {
                return Ok(lease);
            }
            let hosts = self.lock();
            if let Some(entry) = hosts.list.get(host) {
                // The connection opened meanwhile failed: so does this one, at once (an
                // unreachable upstream does not make a queue wait out its connect timeout
                // once per request).
                if let Some((at, cause, message)) = &entry.failed {
                    if *at >= asked {
                        return Err(ClientError::connect(*cause, message.clone()));
                    }
                }
                // It spoke HTTP/1.1: every request needs a connection of its own anyway.
                if entry.speaks_h2 != Some(false) {
                    _turn = Some(turn);
                }
            }
        }
        let connection = self.connect(&key).await;
        let mut hosts = self.lock();
        let entry = hosts.list.get_mut(host);
        let connection = match connection {
            Ok(connection) => connection,
            Err(e) => {
                if let Some(entry) = entry {
                    entry.failed = Some((Instant::now(), e.cause, e.message.clone()));
                }
                return Err(e);
            }
        };
        Ok(match connection {
            Connection::H1(send) => {
                if let Some(entry) = entry {
                    entry.speaks_h2 = Some(false);
                }
                Lease::H1(send)
            }
            Connection::H2(send, streams) => {
                let ticket = StreamTicket::new(&streams);
                if let Some(entry) = entry {
                    entry.speaks_h2 = Some(true);
                    entry.shared.push(SharedH2 {
                        send: send.clone(),
                        streams,
                    });
                }
                Lease::H2(send, ticket)
            }
        })
    }

    /// Hands an HTTP/1.1 connection whose answer was read to its end back to its host.
    fn give_back(&self, host: usize, send: H1) {
        if send.is_closed() {
            return;
        }
        let mut hosts = self.lock();
        if let Some(host) = hosts.list.get_mut(host) {
            if host.idle.len() >= MAX_IDLE_PER_HOST {
                host.idle.remove(0);
            }
            host.idle.push(IdleH1 {
                send,
                since: Instant::now(),
            });
        }
    }

    /// TCP (and for `https://` TLS) to `key`, then the HTTP handshake; the connection's task is
    /// spawned on the calling runtime.
    async fn connect(&self, key: &HostKey) -> Result<Connection, ClientError> {
        let limit = self.connect_timeout;
        let (io, h2) = tokio::time::timeout(limit, self.transport(key))
            .await
            .map_err(|_| ClientError::connect(TransportCause::Timeout, "connect timed out"))??;
        match io {
            // Plain HTTP/1.1 needs no handshake: the connection is ours from the first byte.
            Transport::Plain(tcp) => Ok(Connection::H1(H1::Own(h1::Conn::new(tcp)))),
            Transport::Tls(tls) => handshake(*tls, h2).await,
        }
    }

    async fn transport(&self, key: &HostKey) -> Result<(Transport, bool), ClientError> {
        let tcp = tcp_connect(&key.host, key.port).await?;
        if !key.https {
            return Ok((Transport::Plain(tcp), false));
        }
        let stream = tls_over(&self.tls, key, tcp).await?;
        let h2 = self.http2 && stream.get_ref().1.alpn_protocol() == Some(b"h2");
        Ok((Transport::Tls(Box::new(stream)), h2))
    }
}

/// The TLS handshake with `key`'s host over `tcp`.
async fn tls_over(
    tls: &Result<TlsConnector, String>,
    key: &HostKey,
    tcp: TcpStream,
) -> Result<tokio_rustls::client::TlsStream<TcpStream>, ClientError> {
    let tls = tls
        .as_ref()
        .map_err(|e| ClientError::connect(TransportCause::Tls, e))?;
    let name =
        ServerName::try_from(key.host.trim_matches(['[', ']']).to_owned()).map_err(|_| {
            ClientError::connect(
                TransportCause::Tls,
                "the URL's host is not a valid TLS server name",
            )
        })?;
    tls.connect(name, tcp)
        .await
        // Whatever ended it (a certificate, a port that does not speak TLS, a close on the
        // way), it is the handshake that failed.
        .map_err(|e| {
            ClientError::connect(TransportCause::Tls, format!("TLS handshake failed: {e}"))
        })
}

/// A connection [`HttpClient::connect_upgradable`] opened: plain TCP or TLS, read and written
/// as one byte stream.
pub struct UpgradableIo(Transport);

impl tokio::io::AsyncRead for UpgradableIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match &mut self.0 {
            Transport::Plain(tcp) => Pin::new(tcp).poll_read(cx, buf),
            Transport::Tls(tls) => Pin::new(tls.as_mut()).poll_read(cx, buf),
        }
    }
}

impl tokio::io::AsyncWrite for UpgradableIo {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match &mut self.0 {
            Transport::Plain(tcp) => Pin::new(tcp).poll_write(cx, buf),
            Transport::Tls(tls) => Pin::new(tls.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match &mut self.0 {
            Transport::Plain(tcp) => Pin::new(tcp).poll_flush(cx),
            Transport::Tls(tls) => Pin::new(tls.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match &mut self.0 {
            Transport::Plain(tcp) => Pin::new(tcp).poll_shutdown(cx),
            Transport::Tls(tls) => Pin::new(tls.as_mut()).poll_shutdown(cx),
        }
    }
}

enum Transport {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

enum Connection {
    H1(H1),
    /// The connection and its count of open streams.
    H2(http2::Conn, Arc<AtomicUsize>),
}

async fn handshake<T>(io: T, h2: bool) -> Result<Connection, ClientError>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let failed = |e: hyper::Error| {
        ClientError::connect(
            TransportCause::of_hyper(&e),
            format!("HTTP handshake failed: {e}"),
        )
    };
    if h2 {
        let streams = Arc::new(AtomicUsize::new(0));
        let send = http2::Conn::handshake(
            io,
            Arc::clone(&streams),
            MAX_STREAMS_PER_CONNECTION,
            H2_PING_INTERVAL,
            H2_PING_TIMEOUT,
        )
        .await
        .map_err(|e| ClientError::connect(e.cause(), e.to_string()))?;
        return Ok(Connection::H2(send, streams));
    }
    let (send, connection) = http1::handshake(TokioIo::new(io)).await.map_err(failed)?;
    tokio::spawn(async move {
        if let Err(error) = connection.await {
            tracing::debug!(%error, "upstream HTTP/1.1 connection ended");
        }
    });
    Ok(Connection::H1(H1::Hyper(send)))
}

/// TCP to `host:port`: an IP address as it is, a name through the system resolver; each
/// address in turn until one accepts.
async fn tcp_connect(host: &str, port: u16) -> Result<TcpStream, ClientError> {
    let literal = host.trim_matches(['[', ']']).parse::<IpAddr>().ok();
    let addresses: Vec<SocketAddr> = match literal {
        Some(ip) => vec![SocketAddr::new(ip, port)],
        None => tokio::net::lookup_host((host, port))
            .await
            .map_err(|e| {
                ClientError::connect(TransportCause::Dns, format!("cannot resolve {host}: {e}"))
            })?
            .collect(),
    };
    let mut last = ClientError::connect(
        TransportCause::Dns,
        format!("{host} resolved to no address"),
    );
    for address in addresses {
        match TcpStream::connect(address).await {
            Ok(tcp) => {
                // Small writes (a request head, an SSE event) go out at once.
                let _ = tcp.set_nodelay(true);
                return Ok(tcp);
            }
            Err(e) => {
                let cause = TransportCause::of_io(e.kind());
                last = ClientError::connect(cause, format!("cannot connect to {address}: {e}"));
            }
        }
    }
    Err(last)
}

/// rustls with ring: the public web roots plus the extra ones, ALPN as configured, TLS 1.2 and
/// 1.3, session resumption (rustls's in-memory cache).
fn tls_config(options: &ClientOptions) -> Result<rustls::ClientConfig, String> {
    let mut roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    for cert in &options.extra_roots {
        roots
            .add(cert.clone())
            .map_err(|e| format!("an extra root certificate is not usable: {e}"))?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = if options.http2 {
        vec![b"h2".to_vec(), b"http/1.1".to_vec()]
    } else {
        vec![b"http/1.1".to_vec()]
    };
    Ok(config)
}

/// One open stream on a shared HTTP/2 connection, counted until dropped.
struct StreamTicket(Arc<AtomicUsize>);

impl StreamTicket {
    fn new(streams: &Arc<AtomicUsize>) -> Self {
        streams.fetch_add(1, Ordering::Relaxed);
        StreamTicket(Arc::clone(streams))
    }
}

impl Drop for StreamTicket {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

enum Back {
    H1 {
        send: Option<http1::SendRequest<Full<Bytes>>>,
        inner: Arc<Inner>,
        host: usize,
    },
    /// Our own HTTP/1.1 connection is inside the body; it is taken out at the end.
    Own {
        inner: Arc<Inner>,
        host: usize,
    },
    H2(#[allow(dead_code)] StreamTicket),
}

/// Who reads an answer's body.
enum Kind {
    Hyper(Incoming),
    Own(h1::ResponseBody),
    H2(http2::RecvBody),
}

/// An upstream answer's body. Read to its end, it hands its HTTP/1.1 connection back to the
/// pool (or frees its HTTP/2 stream); dropped before the end, the HTTP/1.1 connection closes.
pub struct UpstreamBody {
    inner: Kind,
    back: Back,
}

/// Why an answer's body could not be read to its end.
pub type BodyError = Box<dyn std::error::Error + Send + Sync>;

impl UpstreamBody {
    fn release(&mut self) {
        match (&mut self.back, &mut self.inner) {
            (Back::H1 { send, inner, host }, _) => {
                if let Some(send) = send.take() {
                    inner.give_back(*host, H1::Hyper(send));
                }
            }
            (Back::Own { inner, host }, Kind::Own(body)) => {
                if let Some(conn) = body.take_conn() {
                    inner.give_back(*host, H1::Own(conn));
                }
            }
            _ => {}
        }
    }
}

impl Body for UpstreamBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = self.get_mut();
        let frame = match &mut this.inner {
            Kind::Hyper(body) => {
                ready!(Pin::new(body).poll_frame(cx)).map(|f| f.map_err(Into::into))
            }
            Kind::Own(body) => ready!(Pin::new(body).poll_frame(cx)).map(|f| f.map_err(Into::into)),
            Kind::H2(body) => ready!(Pin::new(body).poll_frame(cx)).map(|f| f.map_err(Into::into)),
        };
        match &frame {
            None => this.release(),
            Some(Ok(_)) if this.is_end_stream() => this.release(),
            _ => {}
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        match &self.inner {
            Kind::Hyper(body) => body.is_end_stream(),
            Kind::Own(body) => body.is_end_stream(),
            Kind::H2(body) => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.inner {
            Kind::Hyper(body) => body.size_hint(),
            Kind::Own(body) => body.size_hint(),
            Kind::H2(body) => body.size_hint(),
        }
    }
}

impl Drop for UpstreamBody {
    fn drop(&mut self) {
        // An answer without a body (or one read to its end without the final poll) leaves the
        // connection reusable.
        if self.is_end_stream() {
            self.release();
        }
    }
}

/// `s` with every byte but the URL path's unreserved ones (letters, digits, `-._~`)
/// percent-encoded: a name (an Azure deployment, a Bedrock model id) stays one path segment
/// whatever it holds.
pub(crate) fn path_segment(s: &str) -> String {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push('%');
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 0xF)]));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{Method, StatusCode, Version};
    use http_body_util::BodyExt;
    use hyper::server::conn::{http1 as server1, http2 as server2};
    use hyper::service::service_fn;
    use hyper_util::rt::TokioExecutor;
    use tokio::net::TcpListener;

    /// What the test upstream saw.
    #[derive(Default)]
    struct Seen {
        connections: AtomicUsize,
        requests: AtomicUsize,
        /// Requests in flight now, and the most at once.
        open: AtomicUsize,
        most_open: AtomicUsize,
        /// The last request's version, path and `Host` header.
        last: Mutex<Option<(Version, String, Option<String>)>>,
    }

    struct Upstream {
        addr: SocketAddr,
        seen: Arc<Seen>,
    }

    /// A test upstream: plain HTTP/1.1, or TLS (`tls`: its certificate, key and ALPN offer)
    /// serving whatever ALPN chose. Each answer waits `hold` before it is sent (so requests
    /// overlap) and says `ok`.
    async fn upstream(tls: Option<(Tls, Vec<&'static [u8]>)>, hold: Duration) -> Upstream {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Seen::default());
        let acceptor = tls.map(|(tls, alpn)| {
            let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![tls.cert], tls.key)
            .unwrap();
            config.alpn_protocols = alpn.into_iter().map(<[u8]>::to_vec).collect();
            tokio_rustls::TlsAcceptor::from(Arc::new(config))
        });
        let state = Arc::clone(&seen);
        tokio::spawn(async move {
            loop {
                let (tcp, _) = listener.accept().await.unwrap();
                state.connections.fetch_add(1, Ordering::SeqCst);
                let (state, acceptor) = (Arc::clone(&state), acceptor.clone());
                tokio::spawn(async move {
                    let service = service_fn(move |request: Request<Incoming>| {
                        let state = Arc::clone(&state);
                        async move { answer(&state, request, hold).await }
                    });
                    match acceptor {
                        None => {
                            let _ = server1::Builder::new()
                                .serve_connection(TokioIo::new(tcp), service)
                                .await;
                        }
                        Some(acceptor) => {
                            let Ok(stream) = acceptor.accept(tcp).await else {
                                return;
                            };
                            let h2 = stream.get_ref().1.alpn_protocol() == Some(b"h2");
                            let io = TokioIo::new(stream);
                            if h2 {
                                let _ = server2::Builder::new(TokioExecutor::new())
                                    .max_concurrent_streams(1000)
                                    .serve_connection(io, service)
                                    .await;
                            } else {
                                let _ = server1::Builder::new().serve_connection(io, service).await;
                            }
                        }
                    }
                });
            }
        });
        Upstream { addr, seen }
    }

    async fn answer(
        seen: &Seen,
        request: Request<Incoming>,
        hold: Duration,
    ) -> Result<Response<TestBody>, std::convert::Infallible> {
        seen.requests.fetch_add(1, Ordering::SeqCst);
        let open = seen.open.fetch_add(1, Ordering::SeqCst) + 1;
        seen.most_open.fetch_max(open, Ordering::SeqCst);
        let host = request
            .headers()
            .get(HOST)
            .map(|v| v.to_str().unwrap().to_owned());
        *seen.last.lock().unwrap() = Some((request.version(), request.uri().to_string(), host));
        let path = request.uri().path().to_owned();
        tokio::time::sleep(hold).await;
        seen.open.fetch_sub(1, Ordering::SeqCst);
        Ok(Response::new(match path.as_str() {
            "/empty" => Full::new(Bytes::new()).boxed(),
            "/chunked" => chunked(),
            _ => Full::new(Bytes::from_static(b"ok")).boxed(),
        }))
    }

    type TestBody = http_body_util::combinators::BoxBody<Bytes, std::convert::Infallible>;

    /// `o` and `k` as two chunks of an HTTP/1.1 chunked body, 20 ms apart, and its end 20 ms
    /// later: the client sees the last chunk before it knows the body has ended.
    fn chunked() -> TestBody {
        let frames = futures_util::stream::unfold(0, |i| async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            let chunk = ["o", "k"].get(i)?;
            Some((Ok(Frame::data(Bytes::from_static(chunk.as_bytes()))), i + 1))
        });
        http_body_util::StreamBody::new(frames).boxed()
    }

    struct Tls {
        cert: CertificateDer<'static>,
        key: rustls::pki_types::PrivateKeyDer<'static>,
    }

    /// A self-signed certificate for `localhost`.
    fn self_signed() -> Tls {
        let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
        Tls {
            cert: certified.cert.der().clone(),
            key: rustls::pki_types::PrivateKeyDer::Pkcs8(
                certified.signing_key.serialize_der().into(),
            ),
        }
    }

    fn client_trusting(cert: Option<&CertificateDer<'static>>, http2: bool) -> HttpClient {
        HttpClient::new(ClientOptions {
            connect_timeout: Duration::from_secs(5),
            extra_roots: cert.into_iter().cloned().collect(),
            http2,
        })
    }

    fn get(url: String) -> Request<Full<Bytes>> {
        Request::builder()
            .method(Method::POST)
            .uri(url)
            .body(Full::new(Bytes::from_static(b"{}")))
            .unwrap()
    }

    /// The body of the answer to a request to `url`, unread.
    async fn body_of(client: &HttpClient, url: String) -> UpstreamBody {
        client.request(get(url)).await.unwrap().into_body()
    }

    async fn read(client: &HttpClient, url: String) -> (StatusCode, Version, Bytes) {
        let response = client.request(get(url)).await.unwrap();
        let (status, version) = (response.status(), response.version());
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (status, version, body)
    }

    #[tokio::test]
    async fn http1_connections_are_reused_once_an_answer_is_read() {
        let up = upstream(None, Duration::ZERO).await;
        let client = build_client(Duration::from_secs(5));
        for _ in 0..5 {
            let (status, version, body) =
                read(&client, format!("http://{}/v1/chat?x=1", up.addr)).await;
            assert_eq!(
                (status, version, &body[..]),
                (StatusCode::OK, Version::HTTP_11, &b"ok"[..])
            );
        }
        assert_eq!(up.seen.connections.load(Ordering::SeqCst), 1);
        assert_eq!(up.seen.requests.load(Ordering::SeqCst), 5);
        assert_eq!(client.pooled(), (1, 0));
        // Origin form with the query, and a Host header with the (non-default) port.
        let last = up.seen.last.lock().unwrap().clone().unwrap();
        assert_eq!(last.1, "/v1/chat?x=1");
        assert_eq!(last.2, Some(up.addr.to_string()));
    }

    #[tokio::test]
    async fn an_answer_goes_back_to_the_pool_with_its_last_frame_or_when_it_had_none() {
        let up = upstream(None, Duration::ZERO).await;
        let client = build_client(Duration::from_secs(5));
        let mut body = body_of(&client, format!("http://{}/", up.addr)).await;
        assert_eq!(body.size_hint().exact(), Some(2));
        assert!(!body.is_end_stream());
        assert_eq!(client.pooled(), (0, 0), "lent while its answer is read");
        let frame = body.frame().await.unwrap().unwrap();
        assert_eq!(frame.into_data().unwrap(), "ok");
        // The last byte came with that frame: the connection is back before the final poll.
        assert!(body.is_end_stream());
        assert_eq!(client.pooled(), (1, 0));
        drop(body);
        // An answer without a body is complete at its head: dropped unread, its connection
        // goes back too.
        let empty = body_of(&client, format!("http://{}/empty", up.addr)).await;
        assert!(empty.is_end_stream());
        assert_eq!(client.pooled(), (0, 0));
        drop(empty);
        assert_eq!(client.pooled(), (1, 0));
        assert_eq!(up.seen.connections.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_chunked_answer_goes_back_to_the_pool_at_its_end_not_before() {
        let up = upstream(None, Duration::ZERO).await;
        let client = build_client(Duration::from_secs(5));
        let mut body = body_of(&client, format!("http://{}/chunked", up.addr)).await;
        for chunk in ["o", "k"] {
            let frame = body.frame().await.unwrap().unwrap();
            assert_eq!(frame.into_data().unwrap(), chunk);
            assert_eq!(client.pooled(), (0, 0), "not back before the body's end");
        }
        assert!(body.frame().await.is_none());
        assert_eq!(client.pooled(), (1, 0));
        drop(body);
        read(&client, format!("http://{}/", up.addr)).await;
        assert_eq!(up.seen.connections.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn an_answer_dropped_before_its_end_does_not_go_back_to_the_pool() {
        let up = upstream(None, Duration::ZERO).await;
        let client = build_client(Duration::from_secs(5));
        let url = format!("http://{}/", up.addr);
        // The head arrived; the body is never read.
        drop(client.request(get(url.clone())).await.unwrap());
        let (status, _, _) = read(&client, url).await;
        assert_eq!(status, StatusCode::OK);
        // The second request could not use the first connection (its answer was not read).
        assert_eq!(up.seen.connections.load(Ordering::SeqCst), 2);
        assert_eq!(client.pooled(), (1, 0));
    }

    #[tokio::test]
    async fn concurrent_http1_requests_open_a_connection_each_then_keep_them() {
        let up = upstream(None, Duration::from_millis(50)).await;
        let client = build_client(Duration::from_secs(5));
        let url = format!("http://{}/", up.addr);
        let all: Vec<_> = (0..8).map(|_| read(&client, url.clone())).collect();
        for (status, _, _) in futures_util::future::join_all(all).await {
            assert_eq!(status, StatusCode::OK);
        }
        assert_eq!(up.seen.connections.load(Ordering::SeqCst), 8);
        assert_eq!(up.seen.most_open.load(Ordering::SeqCst), 8);
        assert_eq!(client.pooled(), (8, 0));
        // One more request takes one of them and leaves the other seven (none has expired).
        read(&client, url).await;
        assert_eq!(up.seen.connections.load(Ordering::SeqCst), 8);
        assert_eq!(client.pooled(), (8, 0));
    }

    #[tokio::test]
    async fn a_tls_upstream_offering_h2_multiplexes_streams_on_few_connections() {
        let tls = self_signed();
        let cert = tls.cert.clone();
        let up = upstream(
            Some((tls, vec![b"h2", b"http/1.1"])),
            Duration::from_millis(200),
        )
        .await;
        let client = client_trusting(Some(&cert), true);
        let url = format!("https://localhost:{}/v1/messages", up.addr.port());
        let all: Vec<_> = (0..201).map(|_| read(&client, url.clone())).collect();
        for (status, version, body) in futures_util::future::join_all(all).await {
            assert_eq!(
                (status, version, &body[..]),
                (StatusCode::OK, Version::HTTP_2, &b"ok"[..])
            );
        }
        // 201 streams at once, 100 per connection: three connections, opened one at a time.
        assert_eq!(up.seen.connections.load(Ordering::SeqCst), 3);
        assert_eq!(up.seen.most_open.load(Ordering::SeqCst), 201);
        assert_eq!(client.pooled(), (0, 3));
        // Later requests use the open connections: a finished stream frees its place, so more
        // than the room left (99), in rounds of 50, need no new connection.
        for _ in 0..3 {
            let round: Vec<_> = (0..50).map(|_| read(&client, url.clone())).collect();
            futures_util::future::join_all(round).await;
        }
        assert_eq!(up.seen.connections.load(Ordering::SeqCst), 3);
        let last = up.seen.last.lock().unwrap().clone().unwrap();
        assert_eq!(last.0, Version::HTTP_2);
        assert_eq!(
            last.1,
            format!("https://localhost:{}/v1/messages", up.addr.port())
        );
    }

    #[tokio::test]
    async fn a_tls_upstream_choosing_http1_gets_pooled_http1() {
        let tls = self_signed();
        let cert = tls.cert.clone();
        let up = upstream(Some((tls, vec![b"http/1.1"])), Duration::ZERO).await;
        let client = client_trusting(Some(&cert), true);
        for _ in 0..3 {
            let (status, version, _) =
                read(&client, format!("https://localhost:{}/", up.addr.port())).await;
            assert_eq!((status, version), (StatusCode::OK, Version::HTTP_11));
        }
        assert_eq!(up.seen.connections.load(Ordering::SeqCst), 1);
        assert_eq!(client.pooled(), (1, 0));
    }

    #[tokio::test]
    async fn http2_off_means_http1_even_when_the_upstream_offers_h2() {
        let tls = self_signed();
        let cert = tls.cert.clone();
        let up = upstream(Some((tls, vec![b"h2", b"http/1.1"])), Duration::ZERO).await;
        let client = client_trusting(Some(&cert), false);
        let (status, version, _) =
            read(&client, format!("https://localhost:{}/", up.addr.port())).await;
        assert_eq!((status, version), (StatusCode::OK, Version::HTTP_11));
        assert_eq!(
            up.seen.last.lock().unwrap().clone().unwrap().0,
            Version::HTTP_11
        );
    }

    #[tokio::test]
    async fn an_untrusted_certificate_is_a_connect_error() {
        let up = upstream(Some((self_signed(), vec![b"h2"])), Duration::ZERO).await;
        let client = build_client(Duration::from_secs(5));
        let e = client
            .request(get(format!("https://localhost:{}/", up.addr.port())))
            .await
            .map(|_| ())
            .unwrap_err();
        assert!(e.is_connect(), "{e}");
        assert!(e.to_string().contains("TLS handshake failed"), "{e}");
        assert_eq!(e.cause(), TransportCause::Tls);
        assert_eq!(up.seen.requests.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn a_refused_connection_and_a_bad_url_are_connect_errors() {
        let closed = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = closed.local_addr().unwrap().port();
        drop(closed);
        let client = build_client(Duration::from_secs(5));
        let e = client
            .request(get(format!("http://127.0.0.1:{port}/")))
            .await
            .map(|_| ())
            .unwrap_err();
        assert!(e.is_connect(), "{e}");
        assert_eq!(e.cause(), TransportCause::Refused, "{e}");
        let e = client
            .request(get("ftp://127.0.0.1/".to_owned()))
            .await
            .map(|_| ())
            .unwrap_err();
        assert!(e.is_connect() && e.to_string().contains("scheme"), "{e}");
        assert_eq!(e.cause(), TransportCause::Other, "{e}");
    }

    #[tokio::test]
    async fn a_name_that_does_not_resolve_is_a_dns_failure() {
        // `.invalid` never resolves: no network is needed to see it fail.
        let client = build_client(Duration::from_secs(5));
        let e = client
            .request(get("http://upstream.switchyard.invalid/".to_owned()))
            .await
            .map(|_| ())
            .unwrap_err();
        assert!(e.is_connect(), "{e}");
        assert_eq!(e.cause(), TransportCause::Dns, "{e}");
    }

    /// A listener that reads what it is sent, then closes without a word (`answer`: or writes
    /// these bytes first).
    async fn closing_listener(answer: &'static [u8]) -> SocketAddr {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let mut buf = [0u8; 4096];
                let _ = socket.read(&mut buf).await;
                let _ = socket.write_all(answer).await;
            }
        });
        addr
    }

    #[tokio::test]
    async fn an_upstream_closing_before_its_answer_is_a_reset_and_plain_tcp_under_tls_a_tls_failure(
    ) {
        let client = build_client(Duration::from_secs(5));
        let silent = closing_listener(b"").await;
        let e = client
            .request(get(format!("http://{silent}/")))
            .await
            .map(|_| ())
            .unwrap_err();
        assert!(!e.is_connect(), "{e}");
        assert_eq!(e.cause(), TransportCause::Reset, "{e}");
        // An HTTP server where TLS was expected: its answer is no TLS record.
        let plain =
            closing_listener(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n").await;
        let e = client
            .request(get(format!("https://localhost:{}/", plain.port())))
            .await
            .map(|_| ())
            .unwrap_err();
        assert!(e.is_connect(), "{e}");
        assert_eq!(e.cause(), TransportCause::Tls, "{e}");
        // An answer that is not HTTP is none of the named causes.
        let garbled = closing_listener(b"SSH-2.0-OpenSSH\r\n\r\n").await;
        let e = client
            .request(get(format!("http://{garbled}/")))
            .await
            .map(|_| ())
            .unwrap_err();
        assert_eq!(e.cause(), TransportCause::Other, "{e}");
    }

    #[test]
    fn socket_errors_map_to_their_cause_and_each_cause_has_its_label() {
        use std::io::ErrorKind::*;
        for (kind, cause) in [
            (ConnectionRefused, TransportCause::Refused),
            (ConnectionReset, TransportCause::Reset),
            (ConnectionAborted, TransportCause::Reset),
            (BrokenPipe, TransportCause::Reset),
            (UnexpectedEof, TransportCause::Reset),
            (TimedOut, TransportCause::Timeout),
            (PermissionDenied, TransportCause::Other),
        ] {
            assert_eq!(TransportCause::of_io(kind), cause, "{kind:?}");
        }
        let labels: Vec<&str> = TransportCause::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(
            labels,
            ["dns", "refused", "reset", "tls", "timeout", "other"]
        );
        for cause in TransportCause::ALL {
            let serialized = serde_json::to_string(&cause).unwrap();
            assert_eq!(serialized, format!("\"{}\"", cause.as_str()));
        }
    }

    #[tokio::test]
    async fn a_silent_upstream_times_out_the_connect() {
        // A TLS handshake nobody answers: the connect timeout covers it.
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let client = build_client(Duration::from_millis(100));
        let e = client
            .request(get(format!("https://localhost:{port}/")))
            .await
            .map(|_| ())
            .unwrap_err();
        assert!(e.is_connect() && e.to_string().contains("timed out"), "{e}");
        assert_eq!(e.cause(), TransportCause::Timeout, "{e}");
        drop(listener);
    }

    #[tokio::test]
    async fn a_burst_to_a_silent_tls_upstream_makes_one_attempt_and_fails_together() {
        // The upstream accepts TCP and never says a word: the first connect times out, and
        // the requests that queued behind it fail with it instead of each trying again.
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = Arc::clone(&accepted);
        tokio::spawn(async move {
            let mut held = Vec::new();
            loop {
                let (tcp, _) = listener.accept().await.unwrap();
                count.fetch_add(1, Ordering::SeqCst);
                held.push(tcp);
            }
        });
        let client = build_client(Duration::from_millis(200));
        let url = format!("https://localhost:{port}/");
        let all: Vec<_> = (0..20).map(|_| client.request(get(url.clone()))).collect();
        for result in futures_util::future::join_all(all).await {
            let e = result.map(|_| ()).unwrap_err();
            assert!(e.is_connect() && e.to_string().contains("timed out"), "{e}");
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn an_upstream_closing_idle_connections_costs_no_request() {
        // Each connection answers one request, then the upstream closes it without saying so
        // (no `Connection: close`), as an upstream's idle timeout does.
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = Arc::clone(&accepted);
        tokio::spawn(async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            loop {
                let (mut tcp, _) = listener.accept().await.unwrap();
                count.fetch_add(1, Ordering::SeqCst);
                let mut buf = vec![0u8; 4096];
                let mut got = Vec::new();
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    let n = tcp.read(&mut buf).await.unwrap();
                    got.extend_from_slice(&buf[..n]);
                }
                // Body "{}" follows the head; read it if it is not here yet.
                if !got.ends_with(b"{}") {
                    let _ = tcp.read(&mut buf).await;
                }
                tcp.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                    .await
                    .unwrap();
                drop(tcp);
            }
        });
        let client = build_client(Duration::from_secs(5));
        for _ in 0..5 {
            let (status, _, body) = read(&client, format!("http://{addr}/")).await;
            assert_eq!((status, &body[..]), (StatusCode::OK, &b"ok"[..]));
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 5);
    }

    /// An upstream whose every connection answers its first request with a `101` and any later
    /// one with `LEFTOVER` (what a switched connection carries is no answer to anyone), except
    /// the connections after the first `switching` ones, which answer `fresh`. Over TLS (ALPN
    /// HTTP/1.1 only) with a certificate.
    async fn switching_upstream(tls: Option<Tls>, switching: usize) -> SocketAddr {
        use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
        async fn serve(mut io: impl AsyncRead + AsyncWrite + Unpin, switch: bool) {
            let mut buf = vec![0u8; 4096];
            let mut first = true;
            while io.read(&mut buf).await.is_ok_and(|n| n > 0) {
                let answer: &[u8] = match (switch, first) {
                    (true, true) => b"HTTP/1.1 101 Switching Protocols\r\nupgrade: x\r\nconnection: upgrade\r\n\r\n",
                    (true, false) => b"HTTP/1.1 200 OK\r\ncontent-length: 8\r\n\r\nLEFTOVER",
                    (false, _) => b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nfresh",
                };
                first = false;
                if io.write_all(answer).await.is_err() {
                    return;
                }
            }
        }
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let acceptor = tls.map(|tls| {
            let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![tls.cert], tls.key)
            .unwrap();
            config.alpn_protocols = vec![b"http/1.1".to_vec()];
            tokio_rustls::TlsAcceptor::from(Arc::new(config))
        });
        tokio::spawn(async move {
            for n in 0.. {
                let (tcp, _) = listener.accept().await.unwrap();
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    match acceptor {
                        None => serve(tcp, n < switching).await,
                        Some(acceptor) => {
                            if let Ok(stream) = acceptor.accept(tcp).await {
                                serve(stream, n < switching).await;
                            }
                        }
                    }
                });
            }
        });
        addr
    }

    #[tokio::test]
    async fn an_unasked_switch_of_protocols_is_an_error_and_its_connection_is_never_reused() {
        let tls = self_signed();
        let cert = tls.cert.clone();
        for (client, url) in [
            (
                build_client(Duration::from_secs(5)),
                format!("http://{}/", switching_upstream(None, 1).await),
            ),
            (
                client_trusting(Some(&cert), true),
                format!(
                    "https://localhost:{}/",
                    switching_upstream(Some(self_signed_again(&tls)), 1)
                        .await
                        .port()
                ),
            ),
        ] {
            let e = client
                .request(get(url.clone()))
                .await
                .map(|_| ())
                .unwrap_err();
            assert!(!e.is_connect(), "{e}");
            assert!(e.to_string().contains("switched protocols"), "{e}");
            assert_eq!(client.pooled(), (0, 0), "{url}");
            // The next request gets a connection of its own, not the switched one's bytes.
            let (status, _, body) = read(&client, url.clone()).await;
            assert_eq!(
                (status, &body[..]),
                (StatusCode::OK, &b"fresh"[..]),
                "{url}"
            );
        }
    }

    /// The same certificate and key again (a key is not `Clone`).
    fn self_signed_again(tls: &Tls) -> Tls {
        Tls {
            cert: tls.cert.clone(),
            key: tls.key.clone_key(),
        }
    }

    #[test]
    fn roots_come_from_a_pem_file_and_a_file_without_any_is_refused() {
        let dir = std::env::temp_dir().join(format!("switchyard-roots-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
        let good = dir.join("ca.pem");
        std::fs::write(&good, certified.cert.pem()).unwrap();
        let roots = read_roots(&good).unwrap();
        assert_eq!(roots, vec![certified.cert.der().clone()]);
        let empty = dir.join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        assert!(read_roots(&empty)
            .unwrap_err()
            .contains("no PEM certificate"));
        assert!(read_roots(&dir.join("missing.pem"))
            .unwrap_err()
            .contains("cannot read"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
