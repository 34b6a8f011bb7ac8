//! Zero-loss rolling restarts (issue 11), with real processes behind a load balancer that
//! behaves like Kubernetes endpoints: it polls every backend's `/readyz` every 100 ms and sends a
//! new connection only to a backend that answered 200 (round robin), exactly as a Service's
//! endpoints drop a pod whose readiness fails.
//!
//! - `standalone_proxies_restarted_one_by_one_lose_no_request`: three standalone proxies run on
//!   the very configuration the Kubernetes standalone variant ships
//!   (`deploy/overlays/standalone/switchyard.yaml`: a simulated channel with latency and
//!   8-chunk streams). Under steady mixed load (plain requests and streams) each proxy is sent
//!   SIGTERM, runs until it exits, and is replaced by a new process on a new port that the
//!   balancer takes in once ready. Every client request succeeds and every stream arrives whole.
//! - `a_control_plane_restart_under_load_loses_no_request_and_proxies_resume`: the fleet. Two
//!   proxies follow a control plane; under the same load the control plane is stopped (SIGTERM)
//!   and started again on the same addresses, then each proxy is restarted in turn. The proxies
//!   keep serving throughout, reconnect, and a route change made after the control-plane restart
//!   reaches both (the time it took is printed).
//!
//! The proxies run with a 2 s drain delay (production: 5 s or more, sized for endpoint
//! propagation): long enough for a balancer polling every 100 ms on a loaded machine.
// Helpers outside #[test] fns are test code too: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::net::SocketAddr;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use switchyard_e2e::control::{database_url, http_call, Bins, ControlPlane, Reply, FLEET_TOKEN};
use switchyard_e2e::process::Process;

use serde_json::{json, Value};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

const BINS: Bins = switchyard_e2e::bins!();
/// The standalone configuration the Kubernetes standalone variant mounts from its ConfigMap.
const STANDALONE_YAML: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../deploy/overlays/standalone/switchyard.yaml"
);
const CLIENT_TOKEN: &str = "sk-rolling-test-client";
const MODEL: &str = "gpt-4o-mini";
/// How often the balancer asks each backend's `/readyz` (Kubernetes: the readiness period).
const READINESS_POLL: Duration = Duration::from_millis(100);
const DRAIN_DELAY_SECONDS: &str = "2";
const PATIENCE: Duration = Duration::from_secs(60);
const POLL: Duration = Duration::from_millis(50);
/// Concurrent clients of the steady load.
const CLIENTS: usize = 6;

// ---------------------------------------------------------------------------------------------
// Processes

/// A data-plane process on a free port, once it listens.
struct Proxy {
    process: Process,
    addr: SocketAddr,
}

impl Proxy {
    async fn standalone() -> Proxy {
        let mut command = Command::new(BINS.data_plane);
        command
            .env_remove("SWITCHYARD_CONTROL_PLANE")
            .env_remove("REDIS_URL")
            .env("SWITCHYARD_CONFIG", STANDALONE_YAML)
            .env("SWITCHYARD_CLIENT_TOKEN", CLIENT_TOKEN);
        Proxy::spawn(command).await
    }

    async fn following(control_plane: &str) -> Proxy {
        let mut command = Command::new(BINS.data_plane);
        command
            .env_remove("SWITCHYARD_CONFIG")
            .env_remove("REDIS_URL")
            .env("SWITCHYARD_CONTROL_PLANE", control_plane)
            .env("SWITCHYARD_FLEET_TOKEN", FLEET_TOKEN);
        Proxy::spawn(command).await
    }

    async fn spawn(mut command: Command) -> Proxy {
        command
            .env_remove("SWITCHYARD_SNAPSHOT_CACHE")
            .env("SWITCHYARD_HTTP_ADDR", "127.0.0.1:0")
            .env("SWITCHYARD_DRAIN_DELAY_SECONDS", DRAIN_DELAY_SECONDS)
            .env("SWITCHYARD_SHUTDOWN_GRACE_SECONDS", "20")
            .env("RUST_LOG", "info");
        let mut process = Process::spawn("proxy", &mut command);
        let addr = process
            .wait_log("listening", |log| {
                (log["message"] == "listening")
                    .then(|| log["addr"].as_str().unwrap().parse().unwrap())
            })
            .await;
        Proxy { process, addr }
    }
}

/// A `provider: mock` channel (with the one credential every API channel needs) made through
/// `cp`'s admin API; its id.
async fn mock_channel(cp: &ControlPlane, name: &str, content: &str) -> i64 {
    let (channel, _) = cp
        .create(
            "/api/v1/channels",
            json!({"name": name, "provider": "mock",
                   "base_url": format!("mock://sim?latency_ms=40&stream_chunks=8&chunk_gap_ms=25&content={content}")}),
        )
        .await;
    let id = channel["id"].as_i64().unwrap();
    cp.create(
        &format!("/api/v1/channels/{id}/credentials"),
        json!({"secret": "mock-channels-ignore-it"}),
    )
    .await;
    id
}

// ---------------------------------------------------------------------------------------------
// The balancer

struct Backend {
    addr: SocketAddr,
    ready: bool,
    /// Connections sent to it.
    sent: u64,
}

/// Round robin over the backends whose `/readyz` answered 200 at the last poll.
struct Balancer {
    addr: SocketAddr,
    backends: Arc<Mutex<Vec<Backend>>>,
    tasks: Vec<JoinHandle<()>>,
}

impl Balancer {
    async fn start() -> Balancer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let backends: Arc<Mutex<Vec<Backend>>> = Arc::new(Mutex::new(Vec::new()));
        let poller = tokio::spawn({
            let backends = Arc::clone(&backends);
            async move {
                loop {
                    let addrs: Vec<SocketAddr> =
                        backends.lock().unwrap().iter().map(|b| b.addr).collect();
                    for addr in addrs {
                        let ready = tokio::time::timeout(
                            Duration::from_millis(500),
                            status(addr, "/readyz"),
                        )
                        .await
                            == Ok(200);
                        if let Some(b) =
                            backends.lock().unwrap().iter_mut().find(|b| b.addr == addr)
                        {
                            b.ready = ready;
                        }
                    }
                    tokio::time::sleep(READINESS_POLL).await;
                }
            }
        });
        let acceptor = tokio::spawn({
            let backends = Arc::clone(&backends);
            async move {
                let mut next = 0usize;
                loop {
                    let Ok((mut client, _)) = listener.accept().await else {
                        continue;
                    };
                    let target = {
                        let mut backends = backends.lock().unwrap();
                        let ready: Vec<usize> =
                            (0..backends.len()).filter(|&i| backends[i].ready).collect();
                        if ready.is_empty() {
                            None
                        } else {
                            next = next.wrapping_add(1);
                            let b = &mut backends[ready[next % ready.len()]];
                            b.sent += 1;
                            Some(b.addr)
                        }
                    };
                    tokio::spawn(async move {
                        // No ready backend, or a refused connection: the client sees a reset,
                        // which the load counts as a failed request.
                        let Some(target) = target else { return };
                        let Ok(mut upstream) = TcpStream::connect(target).await else {
                            return;
                        };
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                    });
                }
            }
        });
        Balancer {
            addr,
            backends,
            tasks: vec![poller, acceptor],
        }
    }

    /// Adds a backend (taken in once its `/readyz` says 200) and waits until it is in.
    async fn add(&self, addr: SocketAddr) {
        self.backends.lock().unwrap().push(Backend {
            addr,
            ready: false,
            sent: 0,
        });
        let deadline = Instant::now() + PATIENCE;
        while !self.is_ready(addr) {
            assert!(Instant::now() < deadline, "{addr} never became ready");
            tokio::time::sleep(POLL).await;
        }
    }

    fn is_ready(&self, addr: SocketAddr) -> bool {
        self.backends
            .lock()
            .unwrap()
            .iter()
            .any(|b| b.addr == addr && b.ready)
    }

    /// Forgets a backend (its process has exited); how many connections it was sent.
    fn remove(&self, addr: SocketAddr) -> u64 {
        let mut backends = self.backends.lock().unwrap();
        let at = backends.iter().position(|b| b.addr == addr).unwrap();
        backends.remove(at).sent
    }
}

impl Drop for Balancer {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The load

#[derive(Default)]
struct Tally {
    plain_ok: AtomicU64,
    streams_ok: AtomicU64,
    failures: Mutex<Vec<String>>,
}

/// `CLIENTS` clients sending plain requests and streams, alternately, through the balancer until
/// stopped. A plain request succeeds with a 200 whose answer says `content`; a stream succeeds
/// with a 200 whose content deltas add up to `content` in several chunks, no error event, and
/// `[DONE]` last.
struct Load {
    tally: Arc<Tally>,
    stop: Arc<AtomicBool>,
    clients: Vec<JoinHandle<()>>,
}

impl Load {
    fn start(balancer: SocketAddr, token: &str, content: Arc<Mutex<Vec<String>>>) -> Load {
        let tally = Arc::new(Tally::default());
        let stop = Arc::new(AtomicBool::new(false));
        let clients = (0..CLIENTS)
            .map(|client| {
                let (tally, stop, content) =
                    (Arc::clone(&tally), Arc::clone(&stop), Arc::clone(&content));
                let auth = format!("Bearer {token}");
                tokio::spawn(async move {
                    let mut n = client;
                    while !stop.load(Ordering::Relaxed) {
                        n += 1;
                        let stream = n % 2 == 0;
                        let body = json!({"model": MODEL, "stream": stream,
                            "messages": [{"role": "user", "content": "hello"}]});
                        let reply = http_call(
                            balancer,
                            "POST",
                            "/v1/chat/completions",
                            Some(&body.to_string()),
                            &[("authorization", &auth)],
                        )
                        .await;
                        let accepted = content.lock().unwrap().clone();
                        match check(reply, stream, &accepted) {
                            Ok(()) if stream => tally.streams_ok.fetch_add(1, Ordering::Relaxed),
                            Ok(()) => tally.plain_ok.fetch_add(1, Ordering::Relaxed),
                            Err(failure) => {
                                tally.failures.lock().unwrap().push(failure);
                                0
                            }
                        };
                    }
                })
            })
            .collect();
        Load {
            tally,
            stop,
            clients,
        }
    }

    fn served(&self) -> u64 {
        self.tally.plain_ok.load(Ordering::Relaxed) + self.tally.streams_ok.load(Ordering::Relaxed)
    }

    /// Lets at least `n` more requests succeed.
    async fn run_for(&self, n: u64) {
        let target = self.served() + n;
        let deadline = Instant::now() + PATIENCE;
        while self.served() < target {
            assert!(Instant::now() < deadline, "the load stalled");
            tokio::time::sleep(POLL).await;
        }
    }

    /// Stops the clients (each finishes its request) and asserts that nothing failed.
    async fn finish(self, what: &str) {
        self.stop.store(true, Ordering::Relaxed);
        for client in self.clients {
            client.await.unwrap();
        }
        let plain = self.tally.plain_ok.load(Ordering::Relaxed);
        let streams = self.tally.streams_ok.load(Ordering::Relaxed);
        let failures = self.tally.failures.lock().unwrap();
        eprintln!(
            "{what}: {plain} plain requests and {streams} streams served, {} failed",
            failures.len()
        );
        assert!(
            failures.is_empty(),
            "{what}: {} of {} client requests failed; first ones: {:#?}",
            failures.len(),
            plain + streams + failures.len() as u64,
            &failures[..failures.len().min(5)]
        );
        assert!(
            plain > 20 && streams > 20,
            "{what}: too little load to mean anything"
        );
    }
}

fn check(reply: std::io::Result<Reply>, stream: bool, content: &[String]) -> Result<(), String> {
    let kind = if stream { "stream" } else { "plain" };
    let reply = reply.map_err(|e| format!("{kind}: {e}"))?;
    if reply.status != 200 {
        return Err(format!("{kind}: {} {}", reply.status, reply.body));
    }
    let said = if stream {
        let events: Vec<&str> = reply
            .body
            .split("\n\n")
            .filter_map(|e| e.trim().strip_prefix("data: "))
            .collect();
        if events.last() != Some(&"[DONE]") {
            return Err(format!(
                "stream: does not end with [DONE]: {:?}",
                reply.body
            ));
        }
        let mut said = String::new();
        let mut pieces = 0;
        for event in &events[..events.len() - 1] {
            let event: Value = serde_json::from_str(event)
                .map_err(|e| format!("stream: bad event {event:?}: {e}"))?;
            if event.get("error").is_some() {
                return Err(format!("stream: error event {event}"));
            }
            if let Some(piece) = event["choices"][0]["delta"]["content"].as_str() {
                said.push_str(piece);
                pieces += 1;
            }
        }
        if pieces < 2 {
            return Err(format!(
                "stream: {pieces} content chunk(s): {:?}",
                reply.body
            ));
        }
        said
    } else {
        let answer: Value = serde_json::from_str(&reply.body)
            .map_err(|e| format!("plain: not JSON ({e}): {}", reply.body))?;
        answer["choices"][0]["message"]["content"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    if said.is_empty() || !content.iter().any(|c| c == &said) {
        return Err(format!(
            "{kind}: said {said:?}, expected one of {content:?}"
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// HTTP

async fn status(addr: SocketAddr, path: &str) -> u16 {
    http_call(addr, "GET", path, None, &[])
        .await
        .map(|r| r.status)
        .unwrap_or(0)
}

/// The answer's content of a plain request straight to `addr`.
async fn content_of(addr: SocketAddr, token: &str) -> (String, Reply) {
    let auth = format!("Bearer {token}");
    let body = json!({"model": MODEL, "messages": [{"role": "user", "content": "hello"}]});
    let reply = http_call(
        addr,
        "POST",
        "/v1/chat/completions",
        Some(&body.to_string()),
        &[("authorization", &auth)],
    )
    .await
    .unwrap();
    let content = serde_json::from_str::<Value>(&reply.body)
        .ok()
        .and_then(|v| {
            v["choices"][0]["message"]["content"]
                .as_str()
                .map(str::to_owned)
        })
        .unwrap_or_default();
    (content, reply)
}

/// Restarts every proxy in turn as a Kubernetes rollout would: SIGTERM (the balancer sees
/// `/readyz` turn 503 and stops sending), wait for the exit, start a replacement on a new port,
/// wait until the balancer has taken it in, let some load through, next.
async fn restart_each<F, Fut>(balancer: &Balancer, load: &Load, proxies: &mut [Proxy], start: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Proxy>,
{
    for proxy in proxies.iter_mut() {
        let stopping = Instant::now();
        let exit = proxy.process.terminate().await;
        assert!(exit.success(), "proxy exit on SIGTERM: {exit:?}");
        let sent = balancer.remove(proxy.addr);
        assert!(sent > 0, "the balancer never sent {} anything", proxy.addr);
        eprintln!(
            "proxy {} stopped in {:?} after {sent} connections",
            proxy.addr,
            stopping.elapsed()
        );
        let replacement = start().await;
        balancer.add(replacement.addr).await;
        *proxy = replacement;
        load.run_for(20).await;
    }
}

// ---------------------------------------------------------------------------------------------
// Tests

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn standalone_proxies_restarted_one_by_one_lose_no_request() {
    let balancer = Balancer::start().await;
    let mut proxies = Vec::new();
    for _ in 0..3 {
        let proxy = Proxy::standalone().await;
        balancer.add(proxy.addr).await;
        proxies.push(proxy);
    }
    let (content, reply) = content_of(proxies[0].addr, CLIENT_TOKEN).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert!(!content.is_empty());

    let load = Load::start(
        balancer.addr,
        CLIENT_TOKEN,
        Arc::new(Mutex::new(vec![content])),
    );
    load.run_for(30).await;
    restart_each(&balancer, &load, &mut proxies, Proxy::standalone).await;
    load.run_for(30).await;
    load.finish("standalone rolling restart").await;
}

#[sqlx::test(migrations = false)]
async fn a_control_plane_restart_under_load_loses_no_request_and_proxies_resume(
    _pool: PgPoolOptions,
    opts: PgConnectOptions,
) {
    let mut cp = ControlPlane::start(BINS, &database_url(&opts)).await;
    let endpoint = cp.endpoint();

    // Channel, route, member and token through the admin API, as the book's fleet quick start.
    let first = mock_channel(&cp, "sim-a", "from-a").await;
    let route = cp
        .create("/api/v1/routes", json!({"model_pattern": MODEL}))
        .await
        .0["id"]
        .as_i64()
        .unwrap();
    cp.create(
        &format!("/api/v1/routes/{route}/members"),
        json!({"channel_id": first, "upstream_model": "mock-a"}),
    )
    .await;
    let token = cp.create("/api/v1/tokens", json!({"name": "app"})).await.0["token"]
        .as_str()
        .unwrap()
        .to_owned();

    let balancer = Balancer::start().await;
    let mut proxies = Vec::new();
    for _ in 0..2 {
        let proxy = Proxy::following(&endpoint).await;
        balancer.add(proxy.addr).await;
        proxies.push(proxy);
    }
    let accepted = Arc::new(Mutex::new(vec!["from-a".to_owned()]));
    let load = Load::start(balancer.addr, &token, Arc::clone(&accepted));
    load.run_for(30).await;

    // The control plane goes away (SIGTERM ends the snapshot streams) and comes back on the same
    // addresses; the proxies serve their last snapshot meanwhile.
    let exit = cp.process.terminate().await;
    assert!(exit.success(), "control plane exit on SIGTERM: {exit:?}");
    load.run_for(30).await;
    cp = cp.restart().await;

    // A change made after the restart reaches every proxy through its reconnected stream.
    accepted.lock().unwrap().push("from-b".to_owned());
    let changed = Instant::now();
    let second = mock_channel(&cp, "sim-b", "from-b").await;
    cp.create(
        &format!("/api/v1/routes/{route}/members"),
        json!({"channel_id": second, "upstream_model": "mock-b", "priority": 10}),
    )
    .await;
    for proxy in &proxies {
        loop {
            let (content, reply) = content_of(proxy.addr, &token).await;
            if content == "from-b" {
                assert_eq!(
                    reply.header("x-switchyard-channel").as_deref(),
                    Some("sim-b")
                );
                break;
            }
            assert!(
                changed.elapsed() < PATIENCE,
                "the change never reached proxy {}",
                proxy.addr
            );
            tokio::time::sleep(POLL).await;
        }
    }
    eprintln!(
        "after the control-plane restart, a route change reached both proxies in {:?}",
        changed.elapsed()
    );

    // Then a rollout of the proxies themselves, in fleet mode.
    let follow = || Proxy::following(&endpoint);
    restart_each(&balancer, &load, &mut proxies, follow).await;
    load.run_for(30).await;
    load.finish("control-plane restart and fleet rolling restart")
        .await;
    drop(cp);
}
