//! The floor of the proxy's stack, for `scripts/load`: the data plane's HTTP/1.1 server, its
//! upstream client and its runtime shape (one single-threaded runtime per core, each with its own
//! `SO_REUSEPORT` listener and upstream pool, jemalloc), forwarding every request to one upstream
//! and doing nothing else — no key, route, selection, JSON, limits, record or metrics. Measured
//! beside nginx and the proxy, it splits the proxy's added latency into what this stack costs
//! and what the gateway's own work costs.
//!
//! ```sh
//! cargo build --release -p switchyard-data-plane --example bare_proxy
//! SWITCHYARD_HTTP_ADDR=127.0.0.1:19402 BARE_UPSTREAM=http://127.0.0.1:19406 \
//!     target/release/examples/bare_proxy
//! ```
//! Not a product: no timeouts on the upstream, no error JSON, no shutdown.

use std::net::SocketAddr;
use std::time::Duration;

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::{header, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use switchyard_server::{Limits, Server};
use switchyard_upstream::client::{ClientOptions, HttpClient};
use tokio::net::TcpSocket;
use tokio_util::sync::CancellationToken;

#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> Result<(), String> {
    let addr: SocketAddr = std::env::var("SWITCHYARD_HTTP_ADDR")
        .map_err(|_| "SWITCHYARD_HTTP_ADDR is required")?
        .parse()
        .map_err(|e| format!("SWITCHYARD_HTTP_ADDR: {e}"))?;
    let upstream = std::env::var("BARE_UPSTREAM").map_err(|_| "BARE_UPSTREAM is required")?;
    let upstream = upstream.trim_end_matches('/').to_owned();
    let workers = std::thread::available_parallelism().map_or(1, usize::from);
    let server = Server::new(Limits::default());
    let mut threads = Vec::with_capacity(workers);
    for _ in 0..workers {
        let socket = TcpSocket::new_v4().map_err(|e| e.to_string())?;
        socket.set_reuseport(true).map_err(|e| e.to_string())?;
        socket.set_nodelay(true).map_err(|e| e.to_string())?;
        socket.bind(addr).map_err(|e| format!("bind {addr}: {e}"))?;
        let (server, upstream) = (server.clone(), upstream.clone());
        threads.push(std::thread::spawn(move || worker(socket, server, upstream)));
    }
    for thread in threads {
        thread.join().map_err(|_| "a worker panicked")??;
    }
    Ok(())
}

/// One worker: a single-threaded runtime, its listener, its own upstream pool.
fn worker(socket: TcpSocket, server: Server, upstream: String) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    runtime.block_on(async move {
        // As the proxy's workers do: a timer always due, so arming one never wakes the runtime.
        tokio::spawn(async {
            loop {
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        });
        let listener = socket.listen(1024).map_err(|e| e.to_string())?;
        let client = HttpClient::new(ClientOptions::new(Duration::from_secs(5)));
        let service = tower::service_fn(move |request: Request<Body>| {
            let (client, upstream) = (client.clone(), upstream.clone());
            async move { Ok::<_, std::convert::Infallible>(forward(&client, &upstream, request).await) }
        });
        server
            .serve(listener, service, CancellationToken::new())
            .await
            .map_err(|e| e.to_string())
    })
}

/// `request` sent on to `upstream` with its path, method and end-to-end headers; the answer
/// passed back as it comes. `/readyz` is answered here.
async fn forward(client: &HttpClient, upstream: &str, request: Request<Body>) -> Response {
    if request.uri().path() == "/readyz" {
        // Ready once listening (the upstream may start later).
        return StatusCode::OK.into_response();
    }
    let (parts, body) = request.into_parts();
    let Ok(body) = body.collect().await.map(|b| b.to_bytes()) else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let mut out = Request::new(Full::<Bytes>::new(body));
    *out.method_mut() = parts.method;
    let Ok(uri) = format!("{upstream}{path}").parse() else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    *out.uri_mut() = uri;
    let mut headers = parts.headers;
    headers.remove(header::HOST);
    headers.remove(header::CONNECTION);
    *out.headers_mut() = headers;
    match client.request(out).await {
        Ok(answer) => answer.map(Body::new),
        Err(_) => StatusCode::BAD_GATEWAY.into_response(),
    }
}
