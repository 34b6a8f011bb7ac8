//! End-to-end tests across real processes live in `tests/`; `src/bin/e2e-data-plane.rs` and
//! `src/bin/e2e-control-plane.rs` are the data plane's and the control plane's entry points built
//! inside this crate so the tests can start them.

pub mod control;
pub mod fleet;
pub mod process;
pub mod traffic;

pub use control::dechunk;

/// One HTTP/1.1 request over a fresh connection (`connection: close`), with `headers` (each
/// line ending in CRLF) beside the JSON content type: the answer's status and JSON body
/// (`Null` when it is not JSON). Panics when the server cannot be reached.
#[allow(clippy::panic)]
pub async fn raw_call(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    headers: &str,
    body: Option<serde_json::Value>,
) -> (u16, serde_json::Value) {
    let headers: Vec<(&str, &str)> = headers
        .split("\r\n")
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim(), value.trim()))
        .collect();
    let body = body.map(|b| b.to_string());
    let reply = control::http_call(addr, method, path, body.as_deref(), &headers)
        .await
        .unwrap_or_else(|e| panic!("{method} {path} on {addr}: {e}"));
    let payload = serde_json::from_str(&reply.body).unwrap_or(serde_json::Value::Null);
    (reply.status, payload)
}

/// The test Redis: `REDIS_URL`, else the local default. A Redis-backed test fails, never skips,
/// when nothing answers there: the test command (`scripts/test`) starts one.
#[allow(clippy::panic)]
pub fn redis_url() -> String {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    let answers = redis::Client::open(url.as_str())
        .and_then(|c| c.get_connection_with_timeout(std::time::Duration::from_secs(2)))
        .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c))
        .is_ok();
    if !answers {
        panic!("no Redis answers at {url}: this test needs one (scripts/test starts it)");
    }
    url
}
