//! Real processes: control-plane replicas sharing one database, proxies following them with the
//! `switchyard_proto::watch_snapshots` client helper, restarts, and Postgres going away.
//!
//! Only generous timeouts here: every wait polls for a condition and gives up after a minute.
// Helpers outside #[test] fns are test code too: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{database_url, postgres_addr};

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use switchyard_engine::Snapshot;
use switchyard_proto::v1::snapshot_service_client::SnapshotServiceClient;
use switchyard_proto::v1::WatchRequest;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

const TOKEN: &str = "fleet-test-admin-token-0123456789";
const FLEET_TOKEN: &str = "fleet-stream-token-abcdef0123456789";
const PATIENCE: Duration = Duration::from_secs(60);

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

type TokenInterceptor =
    Box<dyn FnMut(tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> + Send>;
type FleetClient = SnapshotServiceClient<
    tonic::codegen::InterceptedService<tonic::transport::Channel, TokenInterceptor>,
>;

/// A raw snapshot-stream client presenting `token` (if any) as a proxy does.
async fn fleet_client(endpoint: &str, token: Option<&str>) -> FleetClient {
    let channel = tonic::transport::Endpoint::from_shared(endpoint.to_owned())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let header: Option<tonic::metadata::MetadataValue<_>> =
        token.map(|t| format!("Bearer {t}").parse().unwrap());
    let interceptor: TokenInterceptor = Box::new(move |mut request: tonic::Request<()>| {
        if let Some(value) = &header {
            request
                .metadata_mut()
                .insert("authorization", value.clone());
        }
        Ok(request)
    });
    SnapshotServiceClient::with_interceptor(channel, interceptor)
}

/// One `switchyard-control-plane` process, killed on drop.
struct ControlPlane {
    child: Child,
    http: SocketAddr,
    grpc: SocketAddr,
}

impl ControlPlane {
    async fn spawn(database_url: &str, grpc_port: u16) -> ControlPlane {
        ControlPlane::spawn_with(database_url, grpc_port, &[]).await
    }

    /// With extra environment (e.g. `REDIS_URL`); without it, no shared state even when the test
    /// runner's own environment has one.
    async fn spawn_with(database_url: &str, grpc_port: u16, env: &[(&str, &str)]) -> ControlPlane {
        let mut command = Command::new(env!("CARGO_BIN_EXE_switchyard-control-plane"));
        command
            .env_remove("REDIS_URL")
            .env_remove("SWITCHYARD_REDIS_PREFIX")
            .env("SWITCHYARD_FLEET_TOKEN", FLEET_TOKEN);
        for (name, value) in env {
            command.env(name, value);
        }
        let mut child = command
            .env("DATABASE_URL", database_url)
            .env("SWITCHYARD_ADMIN_TOKEN", TOKEN)
            .env("SWITCHYARD_HTTP_ADDR", "127.0.0.1:0")
            .env("SWITCHYARD_GRPC_ADDR", format!("127.0.0.1:{grpc_port}"))
            .env("RUST_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel();
        let mut tx = Some(tx);
        // Reads the log until the "listening" line, then keeps draining so the pipe never fills.
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.is_some() {
                    if let Ok(log) = serde_json::from_str::<Value>(&line) {
                        let fields = &log;
                        if fields["message"] == "listening" {
                            let http: SocketAddr =
                                fields["http_addr"].as_str().unwrap().parse().unwrap();
                            let grpc: SocketAddr =
                                fields["grpc_addr"].as_str().unwrap().parse().unwrap();
                            if let Some(tx) = tx.take() {
                                let _ = tx.send((http, grpc));
                            }
                        }
                    }
                }
            }
        });
        // Awaited, not blocked on: the test's runtime also runs the Postgres gate.
        let (http, grpc) = tokio::time::timeout(PATIENCE, rx)
            .await
            .expect("control plane did not start listening in time")
            .expect("control plane exited before listening");
        ControlPlane { child, http, grpc }
    }

    fn endpoint(&self) -> String {
        format!("http://{}", self.grpc)
    }

    /// A minimal HTTP/1.1 client: method, path, JSON body → (status, headers, JSON).
    async fn call(&self, method: &str, path: &str, body: Option<Value>) -> (u16, String, Value) {
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let request = format!(
            "{method} {path} HTTP/1.1\r\nhost: {}\r\nauthorization: Bearer {TOKEN}\r\n\
             content-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            self.http,
            body.len()
        );
        let mut stream = TcpStream::connect(self.http).await.unwrap();
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await.unwrap();
        let raw = String::from_utf8_lossy(&raw).into_owned();
        let (head, payload) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
        let status = head.split(' ').nth(1).unwrap().parse().unwrap();
        // Bodies are small; axum sends them with content-length.
        (
            status,
            head.to_lowercase(),
            serde_json::from_str(payload).unwrap_or(Value::Null),
        )
    }

    /// `GET /metrics` as text.
    async fn metrics(&self) -> String {
        let request = format!(
            "GET /metrics HTTP/1.1\r\nhost: {}\r\nconnection: close\r\n\r\n",
            self.http
        );
        let mut stream = TcpStream::connect(self.http).await.unwrap();
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await.unwrap();
        String::from_utf8_lossy(&raw).into_owned()
    }

    async fn is_recovery_leader(&self) -> bool {
        self.metrics()
            .await
            .lines()
            .any(|l| l == "switchyard_cp_recovery_leader 1")
    }

    async fn create_route(&self, pattern: &str) -> u64 {
        let (status, head, body) = self
            .call(
                "POST",
                "/api/v1/routes",
                Some(json!({"model_pattern": pattern})),
            )
            .await;
        assert_eq!(status, 201, "{body}");
        head.lines()
            .find_map(|l| l.strip_prefix("x-switchyard-revision: "))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }

    /// SIGTERM, then wait for the graceful exit.
    async fn terminate(&mut self) {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let exited = tokio::time::timeout(PATIENCE, async {
            loop {
                if let Ok(Some(status)) = self.child.try_wait() {
                    return status;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await
        .expect("control plane did not stop on SIGTERM");
        assert!(exited.success(), "{exited:?}");
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

type Feed = watch::Receiver<Option<Arc<Snapshot>>>;

/// A proxy's view: `watch_snapshots` running in the background.
fn follow(endpoint: String, shutdown: &CancellationToken) -> Feed {
    let (tx, rx) = watch::channel(None);
    let shutdown = shutdown.clone();
    tokio::spawn(async move {
        switchyard_proto::watch_snapshots(
            endpoint,
            0,
            switchyard_proto::WatchAuth {
                fleet_token: Some(FLEET_TOKEN.to_owned()),
                ..Default::default()
            },
            tx,
            shutdown,
        )
        .await
        .unwrap();
    });
    rx
}

async fn wait_for(feed: &mut Feed, what: &str, ok: impl Fn(&Snapshot) -> bool) -> Arc<Snapshot> {
    let found = tokio::time::timeout(PATIENCE, async {
        loop {
            if let Some(snapshot) = feed.borrow_and_update().clone() {
                if ok(&snapshot) {
                    return snapshot;
                }
            }
            feed.changed().await.unwrap();
        }
    })
    .await;
    found.unwrap_or_else(|_| panic!("timed out waiting for {what}"))
}

fn has_route(snapshot: &Snapshot, pattern: &str) -> bool {
    snapshot.routes().iter().any(|r| r.model_pattern == pattern)
}

#[sqlx::test(migrations = "../migrations")]
async fn a_write_through_one_replica_reaches_proxies_of_the_other(
    _pool: PgPoolOptions,
    opts: PgConnectOptions,
) {
    let url = database_url(&opts, &postgres_addr(&opts));
    let a = ControlPlane::spawn(&url, 0).await;
    let b_port = free_port();
    let mut b = ControlPlane::spawn(&url, b_port).await;
    let shutdown = CancellationToken::new();
    let mut proxy = follow(b.endpoint(), &shutdown);

    let revision = a.create_route("gpt-4o").await;
    let seen = wait_for(&mut proxy, "the route written through A", |s| {
        has_route(s, "gpt-4o")
    })
    .await;
    assert!(seen.revision >= revision);

    // Every revision on one stream only increases, and B's explain sees A's write.
    let revision2 = a.create_route("claude-*").await;
    assert!(revision2 > revision);
    let seen2 = wait_for(&mut proxy, "the second route", |s| s.revision >= revision2).await;
    assert!(has_route(&seen2, "claude-*") && has_route(&seen2, "gpt-4o"));
    let (status, _, body) = b
        .call("GET", "/api/v1/routes/explain?model=claude-3", None)
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["route"]["model_pattern"], "claude-*");

    // B restarts on the same address; the proxy reconnects by itself and catches up on what was
    // written while B was away.
    b.terminate().await;
    let revision3 = a.create_route("while-b-was-down").await;
    let _b2 = ControlPlane::spawn(&url, b_port).await;
    let seen3 = wait_for(&mut proxy, "the write made while B was down", |s| {
        s.revision >= revision3
    })
    .await;
    assert!(has_route(&seen3, "while-b-was-down"));
    shutdown.cancel();
}

#[sqlx::test(migrations = "../migrations")]
async fn a_reconnecting_proxy_resumes_from_its_revision(
    _pool: PgPoolOptions,
    opts: PgConnectOptions,
) {
    let url = database_url(&opts, &postgres_addr(&opts));
    let cp = ControlPlane::spawn(&url, 0).await;
    let held = cp.create_route("first").await;
    let mut client = fleet_client(&cp.endpoint(), Some(FLEET_TOKEN)).await;

    // A proxy with nothing gets the current snapshot at once.
    let mut fresh = client
        .watch(WatchRequest {
            have_revision: 0,
            client_id: "fresh".into(),
        })
        .await
        .unwrap()
        .into_inner();
    let first = tokio::time::timeout(PATIENCE, async {
        loop {
            let message = fresh.message().await.unwrap().unwrap();
            // The replica may still be compiling the write; later revisions follow on the stream.
            if message.revision >= held {
                return message;
            }
        }
    })
    .await
    .unwrap();

    // A proxy that already holds the latest revision is not sent it again: the first message it
    // receives is the next revision.
    let current = first.revision;
    let mut resumed = client
        .watch(WatchRequest {
            have_revision: current,
            client_id: "resumed".into(),
        })
        .await
        .unwrap()
        .into_inner();
    let next = cp.create_route("second").await;
    let message = tokio::time::timeout(PATIENCE, resumed.message())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(message.revision, next);
    let snapshot = switchyard_proto::snapshot_from_proto(message).unwrap();
    assert!(has_route(&snapshot, "second"));
}

/// A TCP forwarder in front of Postgres that the test can cut and restore.
struct PgGate {
    addr: SocketAddr,
    open: Arc<AtomicBool>,
    cut: Arc<tokio::sync::Notify>,
}

impl PgGate {
    async fn start(upstream: String) -> PgGate {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let open = Arc::new(AtomicBool::new(true));
        let cut = Arc::new(tokio::sync::Notify::new());
        let (accept_open, accept_cut) = (Arc::clone(&open), Arc::clone(&cut));
        tokio::spawn(async move {
            loop {
                let Ok((mut downstream, _)) = listener.accept().await else {
                    return;
                };
                if !accept_open.load(Ordering::SeqCst) {
                    drop(downstream);
                    continue;
                }
                let upstream = upstream.clone();
                let cut = Arc::clone(&accept_cut);
                tokio::spawn(async move {
                    let Ok(mut up) = TcpStream::connect(&upstream).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut downstream, &mut up) => {}
                        _ = cut.notified() => {}
                    }
                });
            }
        });
        PgGate { addr, open, cut }
    }

    fn cut(&self) {
        self.open.store(false, Ordering::SeqCst);
        self.cut.notify_waiters();
    }

    fn restore(&self) {
        self.open.store(true, Ordering::SeqCst);
    }
}

#[sqlx::test(migrations = "../migrations")]
async fn postgres_outage_gives_503_keeps_streams_and_recovers(
    _pool: PgPoolOptions,
    opts: PgConnectOptions,
) {
    let gate = PgGate::start(postgres_addr(&opts)).await;
    let url = database_url(&opts, &gate.addr.to_string());
    let cp = ControlPlane::spawn(&url, 0).await;
    let shutdown = CancellationToken::new();
    let mut proxy = follow(cp.endpoint(), &shutdown);
    let before = cp.create_route("before-outage").await;
    wait_for(&mut proxy, "the first route", |s| s.revision >= before).await;

    gate.cut();
    let outage = tokio::time::timeout(PATIENCE, async {
        loop {
            let (status, _, body) = cp.call("GET", "/api/v1/routes", None).await;
            if status == 503 {
                return body;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await
    .expect("REST never reported the outage");
    assert_eq!(outage["error"]["type"], "service_unavailable");
    assert!(outage["error"]["message"]
        .as_str()
        .unwrap()
        .contains("database unavailable"));

    // Streams keep serving the last snapshot: a proxy connecting during the outage gets it.
    let mut late = follow(cp.endpoint(), &shutdown);
    let kept = wait_for(&mut late, "the last snapshot during the outage", |s| {
        s.revision >= before
    })
    .await;
    assert!(has_route(&kept, "before-outage"));
    // Explain still answers from memory.
    let (status, _, _) = cp
        .call("GET", "/api/v1/routes/explain?model=before-outage", None)
        .await;
    assert_eq!(status, 200);

    gate.restore();
    let after = tokio::time::timeout(PATIENCE, async {
        loop {
            let (status, _, body) = cp
                .call(
                    "POST",
                    "/api/v1/routes",
                    Some(json!({"model_pattern": "after-outage"})),
                )
                .await;
            if status == 201 {
                return body;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await
    .expect("REST did not recover");
    assert_eq!(after["model_pattern"], "after-outage");
    // The listener reconnected: the write reaches the proxy that stayed connected.
    wait_for(&mut proxy, "the write after the outage", |s| {
        has_route(s, "after-outage")
    })
    .await;
    shutdown.cancel();
}

#[tokio::test]
async fn bad_configuration_exits_non_zero_with_one_line() {
    let output = Command::new(env!("CARGO_BIN_EXE_switchyard-control-plane"))
        .env_remove("DATABASE_URL")
        .env("SWITCHYARD_ADMIN_TOKEN", TOKEN)
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("DATABASE_URL") || stderr.contains("database-url"),
        "{stderr}"
    );

    let output = Command::new(env!("CARGO_BIN_EXE_switchyard-control-plane"))
        .env(
            "DATABASE_URL",
            "postgres://postgres@127.0.0.1:5432/postgres",
        )
        .env("SWITCHYARD_ADMIN_TOKEN", "short")
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("SWITCHYARD_ADMIN_TOKEN"), "{stderr}");
}

#[tokio::test]
async fn a_missing_database_is_named_with_the_line_that_creates_it() {
    let name = format!("switchyard_absent_{}", std::process::id());
    let output = Command::new(env!("CARGO_BIN_EXE_switchyard-control-plane"))
        .env(
            "DATABASE_URL",
            format!("postgres://postgres@127.0.0.1:5432/{name}"),
        )
        .env("SWITCHYARD_ADMIN_TOKEN", TOKEN)
        .env("SWITCHYARD_HTTP_ADDR", "127.0.0.1:0")
        .env("SWITCHYARD_GRPC_ADDR", "127.0.0.1:0")
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    let last = stderr.trim().lines().last().unwrap_or_default();
    // Said once, with the command that fixes it.
    assert_eq!(last.matches("does not exist").count(), 1, "{stderr}");
    assert!(
        last.contains(&format!("createdb -h 127.0.0.1 -p 5432 -U postgres {name}")),
        "{stderr}"
    );
}

#[sqlx::test(migrations = "../migrations")]
async fn a_stalled_proxy_blocks_no_one_and_then_gets_the_latest(
    _pool: PgPoolOptions,
    opts: PgConnectOptions,
) {
    let url = database_url(&opts, &postgres_addr(&opts));
    let cp = ControlPlane::spawn(&url, 0).await;
    let mut client = fleet_client(&cp.endpoint(), Some(FLEET_TOKEN)).await;
    // Opened and never read while the writes happen.
    let mut stalled = client
        .watch(WatchRequest {
            have_revision: 0,
            client_id: "stalled".into(),
        })
        .await
        .unwrap()
        .into_inner();
    let shutdown = CancellationToken::new();
    let mut live = follow(cp.endpoint(), &shutdown);
    let mut last = 0;
    for i in 0..20 {
        last = cp.create_route(&format!("burst-{i}")).await;
    }
    wait_for(&mut live, "the last write of the burst", |s| {
        s.revision >= last
    })
    .await;

    // The stalled proxy skips what it missed: the latest arrives, revisions only increase.
    let mut seen = 0;
    tokio::time::timeout(PATIENCE, async {
        while seen < last {
            let message = stalled.message().await.unwrap().unwrap();
            assert!(message.revision > seen, "revisions must increase");
            seen = message.revision;
        }
    })
    .await
    .expect("the stalled proxy never caught up");
    shutdown.cancel();
}

/// Two replicas with `REDIS_URL`: one leads the recovery probes (the advisory lock), explain and
/// `/api/v1/state` read the fleet's Redis state, and the lead moves when the leader dies.
#[sqlx::test(migrations = "../migrations")]
async fn one_of_two_replicas_leads_the_probes_and_the_lead_moves_on_kill(
    _pool: PgPoolOptions,
    opts: PgConnectOptions,
) {
    let redis = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let redis_up = redis::Client::open(redis.as_str())
        .and_then(|c| c.get_connection_with_timeout(Duration::from_millis(500)))
        .is_ok();
    assert!(
        redis_up,
        "no Redis answers at {redis}: this test needs one (scripts/test starts it)"
    );
    let prefix = format!("cp-fleet-{:x}", std::process::id());
    let env = [
        ("REDIS_URL", redis.as_str()),
        ("SWITCHYARD_REDIS_PREFIX", prefix.as_str()),
        ("SWITCHYARD_RECOVERY_TICK_MS", "100"),
    ];
    let url = database_url(&opts, &postgres_addr(&opts));
    let mut a = ControlPlane::spawn_with(&url, 0, &env).await;
    let mut b = ControlPlane::spawn_with(&url, 0, &env).await;

    let deadline = tokio::time::Instant::now() + PATIENCE;
    let (a_leads, b_leads) = loop {
        let leads = (a.is_recovery_leader().await, b.is_recovery_leader().await);
        if leads.0 || leads.1 {
            break leads;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "nobody took the lead"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(a_leads != b_leads, "exactly one leader");
    // Still exactly one a moment later.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_ne!(a.is_recovery_leader().await, b.is_recovery_leader().await);

    let (status, _, state) = b.call("GET", "/api/v1/state", None).await;
    assert_eq!(status, 200, "{state}");
    assert_eq!(state["configured"], true, "{state}");
    assert_eq!(state["source"], "redis");
    a.create_route("m").await;
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let body = loop {
        // B compiles A's write on its NOTIFY.
        let (status, _, body) = b.call("GET", "/api/v1/routes/explain?model=m", None).await;
        if status == 200 {
            break body;
        }
        assert!(tokio::time::Instant::now() < deadline, "{status}: {body}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(body["health_view"], "redis");

    // The leader is killed (no goodbye): Postgres drops its session and its lock; the other
    // replica takes over.
    let (leader, follower) = if a_leads { (&mut a, &b) } else { (&mut b, &a) };
    let _ = leader.child.kill();
    let _ = leader.child.wait();
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !follower.is_recovery_leader().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the lead did not move"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Stop both processes first, or the survivor rewrites its lease after the cleanup.
    drop(a);
    drop(b);
    if let Ok(mut con) = redis::Client::open(redis.as_str())
        .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(1)))
    {
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{{sy:{prefix}}}:*"))
            .query(&mut con)
            .unwrap_or_default();
        if !keys.is_empty() {
            let _: Result<(), _> = redis::cmd("DEL").arg(&keys).query(&mut con);
        }
    }
}

/// A channel with one inline credential and one from the proxy's environment.
async fn create_channel_with_credentials(cp: &ControlPlane) {
    let (status, _, channel) = cp
        .call(
            "POST",
            "/api/v1/channels",
            Some(json!({"name": "c", "provider": "openai", "base_url": "http://127.0.0.1:9"})),
        )
        .await;
    assert_eq!(status, 201, "{channel}");
    let id = channel["id"].as_i64().unwrap();
    for body in [
        json!({"secret": "sk-inline-fleet-secret"}),
        json!({"secret_env": "OPENAI_KEY_ON_PROXIES"}),
    ] {
        let (status, _, created) = cp
            .call(
                "POST",
                &format!("/api/v1/channels/{id}/credentials"),
                Some(body),
            )
            .await;
        assert_eq!(status, 201, "{created}");
    }
}

/// The first snapshot on a fresh stream that has both credentials' writes (the publisher may
/// still be on an older revision when the stream opens).
async fn snapshot_with_credentials(
    client: &mut FleetClient,
) -> Result<switchyard_proto::v1::Snapshot, tonic::Status> {
    let mut stream = client
        .watch(WatchRequest {
            have_revision: 0,
            client_id: "t".into(),
        })
        .await?
        .into_inner();
    loop {
        let snapshot = tokio::time::timeout(PATIENCE, stream.message())
            .await
            .expect("no snapshot in time")?
            .expect("stream ended");
        let has_env = snapshot
            .channels
            .iter()
            .flat_map(|c| &c.credentials)
            .any(|c| format!("{:?}", c.secret).contains("OPENAI_KEY_ON_PROXIES"));
        if has_env {
            return Ok(snapshot);
        }
    }
}

#[sqlx::test(migrations = "../migrations")]
async fn an_unauthenticated_watch_is_refused_and_rotation_accepts_both_tokens(
    _pool: PgPoolOptions,
    opts: PgConnectOptions,
) {
    let url = database_url(&opts, &postgres_addr(&opts));
    let cp = ControlPlane::spawn_with(
        &url,
        0,
        &[(
            "SWITCHYARD_FLEET_TOKEN",
            "old-fleet-token-123, new-fleet-token-456",
        )],
    )
    .await;
    create_channel_with_credentials(&cp).await;
    for token in [None, Some("wrong-token"), Some("old-fleet-token-12")] {
        let mut client = fleet_client(&cp.endpoint(), token).await;
        let status = snapshot_with_credentials(&mut client).await.unwrap_err();
        assert_eq!(status.code(), tonic::Code::Unauthenticated, "{token:?}");
    }
    for token in ["old-fleet-token-123", "new-fleet-token-456"] {
        let mut client = fleet_client(&cp.endpoint(), Some(token)).await;
        let snapshot = snapshot_with_credentials(&mut client).await.unwrap();
        let secrets: Vec<_> = snapshot.channels[0]
            .credentials
            .iter()
            .map(|c| format!("{:?}", c.secret))
            .collect();
        assert!(
            secrets.iter().any(|s| s.contains("sk-inline-fleet-secret")),
            "an authenticated proxy gets inline credentials: {secrets:?}"
        );
    }
}

#[sqlx::test(migrations = "../migrations")]
async fn without_a_fleet_token_snapshots_carry_no_inline_secrets(
    _pool: PgPoolOptions,
    opts: PgConnectOptions,
) {
    let url = database_url(&opts, &postgres_addr(&opts));
    let cp = ControlPlane::spawn_with(&url, 0, &[("SWITCHYARD_FLEET_TOKEN", "")]).await;
    create_channel_with_credentials(&cp).await;
    let mut client = fleet_client(&cp.endpoint(), None).await;
    let snapshot = snapshot_with_credentials(&mut client).await.unwrap();
    let encoded = format!("{snapshot:?}");
    assert!(!encoded.contains("sk-inline-fleet-secret"), "{encoded}");
    let credentials = &snapshot.channels[0].credentials;
    assert_eq!(credentials.len(), 1, "only the env credential remains");
    assert!(format!("{:?}", credentials[0].secret).contains("OPENAI_KEY_ON_PROXIES"));
}

/// A CA, a server certificate for `localhost` and a client certificate, as PEM files.
struct TestPki {
    dir: std::path::PathBuf,
    ca: String,
    client_cert: String,
    client_key: String,
}

fn test_pki(name: &str) -> TestPki {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
    let dir = std::env::temp_dir().join(format!("switchyard-pki-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
    let server_key = KeyPair::generate().unwrap();
    let server = CertificateParams::new(vec!["localhost".to_owned()])
        .unwrap()
        .signed_by(&server_key, &ca)
        .unwrap();
    let client_key = KeyPair::generate().unwrap();
    let client = CertificateParams::new(vec!["proxy".to_owned()])
        .unwrap()
        .signed_by(&client_key, &ca)
        .unwrap();
    std::fs::write(dir.join("ca.pem"), ca.pem()).unwrap();
    std::fs::write(dir.join("server.pem"), server.pem()).unwrap();
    std::fs::write(dir.join("server.key"), server_key.serialize_pem()).unwrap();
    TestPki {
        dir,
        ca: ca.pem(),
        client_cert: client.pem(),
        client_key: client_key.serialize_pem(),
    }
}

#[sqlx::test(migrations = "../migrations")]
async fn the_grpc_port_speaks_mutual_tls_when_configured(
    _pool: PgPoolOptions,
    opts: PgConnectOptions,
) {
    let url = database_url(&opts, &postgres_addr(&opts));
    let pki = test_pki("mtls");
    let path = |f: &str| pki.dir.join(f).display().to_string();
    let (cert, key, ca) = (path("server.pem"), path("server.key"), path("ca.pem"));
    let cp = ControlPlane::spawn_with(
        &url,
        0,
        &[
            ("SWITCHYARD_GRPC_TLS_CERT", cert.as_str()),
            ("SWITCHYARD_GRPC_TLS_KEY", key.as_str()),
            ("SWITCHYARD_GRPC_TLS_CLIENT_CA", ca.as_str()),
        ],
    )
    .await;
    let revision = cp.create_route("over-tls").await;
    let endpoint = format!("https://localhost:{}", cp.grpc.port());
    let follow_with = |auth: switchyard_proto::WatchAuth, shutdown: &CancellationToken| {
        let (tx, rx) = watch::channel(None);
        let shutdown = shutdown.clone();
        let endpoint = endpoint.clone();
        tokio::spawn(async move {
            switchyard_proto::watch_snapshots(endpoint, 0, auth, tx, shutdown)
                .await
                .unwrap();
        });
        rx
    };
    let shutdown = CancellationToken::new();
    let trusted = switchyard_proto::WatchAuth {
        fleet_token: Some(FLEET_TOKEN.to_owned()),
        ca_pem: Some(pki.ca.clone().into_bytes()),
        identity_pem: Some((
            pki.client_cert.clone().into_bytes(),
            pki.client_key.clone().into_bytes(),
        )),
    };
    let mut proxy = follow_with(trusted.clone(), &shutdown);
    wait_for(&mut proxy, "a snapshot over mutual TLS", |s| {
        s.revision >= revision
    })
    .await;

    // Without a client certificate, or in plaintext, nothing arrives.
    let no_identity = switchyard_proto::WatchAuth {
        identity_pem: None,
        ..trusted
    };
    let refused = follow_with(no_identity, &shutdown);
    let (tx, plaintext) = watch::channel(None);
    tokio::spawn({
        let shutdown = shutdown.clone();
        let endpoint = format!("http://{}", cp.grpc);
        async move {
            let auth = switchyard_proto::WatchAuth {
                fleet_token: Some(FLEET_TOKEN.to_owned()),
                ..Default::default()
            };
            switchyard_proto::watch_snapshots(endpoint, 0, auth, tx, shutdown)
                .await
                .unwrap();
        }
    });
    // Several reconnect rounds of both (backoff starts at 100 ms).
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        refused.borrow().is_none(),
        "a proxy without a client certificate got a snapshot"
    );
    assert!(
        plaintext.borrow().is_none(),
        "a plaintext proxy got a snapshot"
    );
    shutdown.cancel();
    let _ = std::fs::remove_dir_all(&pki.dir);
}

/// Usage totals the control plane answers for all time.
async fn usage_total(cp: &ControlPlane) -> (i64, i64, i64, i64) {
    let (status, _, body) = cp
        .call(
            "GET",
            "/api/v1/usage?from=2000-01-01T00:00:00Z&to=2100-01-01T00:00:00Z",
            None,
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let t = &body["total"];
    (
        t["requests"].as_i64().unwrap(),
        t["input_tokens"].as_i64().unwrap(),
        t["output_tokens"].as_i64().unwrap(),
        t["cached_tokens"].as_i64().unwrap(),
    )
}

async fn wait_usage(cp: &ControlPlane, want: (i64, i64, i64, i64)) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let total = usage_total(cp).await;
        if total == want {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "usage total {total:?}, expected {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[sqlx::test(migrations = "../migrations")]
async fn usage_survives_a_control_plane_restart_and_usage_reported_during_the_outage_arrives_after(
    _pool: PgPoolOptions,
    opts: PgConnectOptions,
) {
    use switchyard_data_plane::usage::{UsageBuffer, UsageConfig, UsageCounts, UsageKey};

    let url = database_url(&opts, &postgres_addr(&opts));
    let port = free_port();
    let mut cp = ControlPlane::spawn(&url, port).await;
    let config = UsageConfig {
        flush_interval: Duration::from_millis(50),
        ..UsageConfig::default()
    };
    let buffer = Arc::new(UsageBuffer::new(&config));
    let stop = CancellationToken::new();
    let reporter = tokio::spawn(switchyard_data_plane::usage::report_usage(
        Arc::clone(&buffer),
        cp.endpoint(),
        switchyard_proto::WatchAuth {
            fleet_token: Some(FLEET_TOKEN.to_owned()),
            ..Default::default()
        },
        config,
        stop.clone(),
    ));
    let add = |channel: &str, n: u64| {
        for _ in 0..n {
            buffer.add(
                UsageKey {
                    token: "app".into(),
                    team: None,
                    route: "gpt-*".into(),
                    channel: channel.into(),
                    model: "gpt-4o".into(),
                },
                UsageCounts {
                    requests: 1,
                    input_tokens: 100,
                    output_tokens: 10,
                    cached_tokens: 1,
                    ..Default::default()
                },
            );
        }
    };
    add("openai", 10);
    wait_usage(&cp, (10, 1000, 100, 10)).await;

    // The control plane goes away; the proxy keeps serving and accounting.
    cp.terminate().await;
    add("openai", 3);
    add("azure", 2);
    let failed = |page: &str| {
        page.lines()
            .find_map(|l| l.strip_prefix("switchyard_usage_batches_total{outcome=\"failed\"} "))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let page = switchyard_metrics::render(&*buffer);
        if failed(&page) >= 2 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the report never failed: {page}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // Back on the same address: the stored rows are still there and the batch sent during the
    // outage is applied, once.
    let cp = ControlPlane::spawn(&url, port).await;
    wait_usage(&cp, (15, 1500, 150, 15)).await;
    stop.cancel();
    reporter.await.unwrap().unwrap();
    assert_eq!(usage_total(&cp).await, (15, 1500, 150, 15));
    let metrics = cp.metrics().await;
    assert!(
        metrics.contains("switchyard_cp_usage_batches_total{outcome=\"applied\"} "),
        "{metrics}"
    );
}

/// The proxies `GET /api/v1/state` lists on `cp`, as (client id, revision).
async fn connected(cp: &ControlPlane) -> Vec<(String, u64)> {
    let (status, _, body) = cp.call("GET", "/api/v1/state", None).await;
    assert_eq!(status, 200, "{body}");
    body["proxies"]
        .as_array()
        .unwrap_or_else(|| panic!("no proxies list: {body}"))
        .iter()
        .map(|p| {
            (
                p["client_id"].as_str().unwrap().to_owned(),
                p["revision"].as_u64().unwrap(),
            )
        })
        .collect()
}

async fn wait_connected(cp: &ControlPlane, what: &str, ok: impl Fn(&[(String, u64)]) -> bool) {
    let result = tokio::time::timeout(PATIENCE, async {
        loop {
            let list = connected(cp).await;
            if ok(&list) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    if result.is_err() {
        panic!("timed out waiting for {what}: {:?}", connected(cp).await);
    }
}

#[sqlx::test(migrations = "../migrations")]
async fn each_replica_lists_the_proxies_connected_to_it_with_their_revision(
    _pool: PgPoolOptions,
    opts: PgConnectOptions,
) {
    let url = database_url(&opts, &postgres_addr(&opts));
    let a = ControlPlane::spawn(&url, 0).await;
    let b = ControlPlane::spawn(&url, 0).await;
    a.create_route("registry-first").await;
    let mut client = fleet_client(&a.endpoint(), Some(FLEET_TOKEN)).await;
    let mut stream = client
        .watch(WatchRequest {
            have_revision: 0,
            client_id: "proxy-on-a".into(),
        })
        .await
        .unwrap()
        .into_inner();
    // The current snapshot at once (the publisher may not have compiled the route yet).
    let got = stream.message().await.unwrap().unwrap();
    // The registry shows the newest revision *sent*, which may already be past the one read.
    wait_connected(&a, "proxy-on-a at the first revision", |list| {
        list.iter()
            .any(|(id, rev)| id == "proxy-on-a" && *rev >= got.revision)
    })
    .await;
    // B serves no stream: each replica knows only its own connections.
    assert_eq!(connected(&b).await, vec![]);

    // A new revision sent on the stream is the revision the registry shows.
    let second = b.create_route("registry-second").await;
    let mut latest = got.revision;
    while latest < second {
        latest = stream.message().await.unwrap().unwrap().revision;
    }
    wait_connected(&a, "proxy-on-a at the second revision", |list| {
        list.iter()
            .any(|(id, rev)| id == "proxy-on-a" && *rev >= latest)
    })
    .await;

    // The stream ends: the entry goes.
    drop(stream);
    drop(client);
    wait_connected(&a, "proxy-on-a gone", |list| list.is_empty()).await;
}

/// The value of one unlabelled metric on the control plane's `/metrics`.
async fn metric(cp: &ControlPlane, name: &str) -> Option<f64> {
    let page = cp.metrics().await;
    let prefix = format!("{name} ");
    page.lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .and_then(|v| v.trim().parse().ok())
}

/// Reads until the server closes the connection (EOF or reset); false if it is still open when
/// the patience runs out.
async fn closed_by_server(stream: &mut TcpStream) -> bool {
    let mut buf = [0u8; 1024];
    tokio::time::timeout(PATIENCE, async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await
    .is_ok()
}

#[sqlx::test(migrations = "../migrations")]
async fn silent_connections_beyond_the_grpc_cap_do_not_lock_out_a_new_proxy(
    _pool: PgPoolOptions,
    opts: PgConnectOptions,
) {
    let url = database_url(&opts, &postgres_addr(&opts));
    // The default cap of 1 024, and a handshake deadline longer than the test: only eviction can
    // let the proxy in while the silent connections are held.
    let cp = ControlPlane::spawn_with(
        &url,
        0,
        &[
            ("SWITCHYARD_GRPC_MAX_CONNECTIONS", "1024"),
            ("SWITCHYARD_GRPC_HANDSHAKE_TIMEOUT_MS", "600000"),
        ],
    )
    .await;
    let revision = cp.create_route("through-the-flood").await;

    // 1 100 connections that never send a byte, all established before the proxy connects (the
    // server accepts in arrival order).
    let mut silent = Vec::new();
    for _ in 0..1100 {
        silent.push(TcpStream::connect(cp.grpc).await.unwrap());
    }

    let shutdown = CancellationToken::new();
    let started = std::time::Instant::now();
    let mut proxy = follow(cp.endpoint(), &shutdown);
    let seen = wait_for(&mut proxy, "a snapshot while the port is flooded", |s| {
        s.revision >= revision
    })
    .await;
    println!(
        "a new proxy had its snapshot {:?} after connecting, with 1 100 silent connections held",
        started.elapsed()
    );
    assert!(has_route(&seen, "through-the-flood"));

    // The oldest silent connections made room, and the cap held.
    assert!(
        closed_by_server(&mut silent[0]).await,
        "the oldest silent connection is evicted"
    );
    let evicted = metric(&cp, "switchyard_cp_grpc_connections_evicted_total")
        .await
        .unwrap();
    assert!(
        evicted >= 77.0,
        "76 over the cap and 1 for the proxy: {evicted}"
    );
    assert_eq!(
        metric(&cp, "switchyard_cp_grpc_connections").await,
        Some(1024.0)
    );
    drop(silent);
    shutdown.cancel();
}

#[sqlx::test(migrations = "../migrations")]
async fn a_grpc_connection_without_an_authenticated_request_is_closed_at_its_deadline(
    _pool: PgPoolOptions,
    opts: PgConnectOptions,
) {
    let url = database_url(&opts, &postgres_addr(&opts));
    let cp = ControlPlane::spawn_with(&url, 0, &[("SWITCHYARD_GRPC_HANDSHAKE_TIMEOUT_MS", "1500")])
        .await;
    let revision = cp.create_route("kept").await;
    let shutdown = CancellationToken::new();
    let mut proxy = follow(cp.endpoint(), &shutdown);
    wait_for(&mut proxy, "the proxy's first snapshot", |s| {
        s.revision >= revision
    })
    .await;

    // One connection sends nothing; one completes the HTTP/2 preface but sends no request.
    let mut silent = TcpStream::connect(cp.grpc).await.unwrap();
    let mut preface_only = TcpStream::connect(cp.grpc).await.unwrap();
    preface_only
        .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
        .await
        .unwrap();
    assert!(closed_by_server(&mut silent).await, "the silent connection");
    assert!(
        closed_by_server(&mut preface_only).await,
        "the connection without a request"
    );
    // The proxy's connection, older than both, carried an authenticated stream and stays.
    assert_eq!(
        metric(&cp, "switchyard_cp_grpc_handshake_timeouts_total").await,
        Some(2.0)
    );
    assert_eq!(metric(&cp, "switchyard_cp_watch_streams").await, Some(1.0));
    let revision2 = cp.create_route("still-streaming").await;
    wait_for(&mut proxy, "a later snapshot on the same stream", |s| {
        s.revision >= revision2
    })
    .await;
    assert_eq!(
        metric(&cp, "switchyard_cp_grpc_handshake_timeouts_total").await,
        Some(2.0)
    );
    shutdown.cancel();
}

/// Without a fleet token, a snapshot stream carries no secret at all: no inline credential, no
/// header value, no URL password. The channels that needed them are marked `secrets_withheld`,
/// and explain (selecting from that same snapshot) names that reason instead of `selected`.
#[sqlx::test(migrations = "../migrations")]
async fn without_a_fleet_token_no_secret_is_streamed_and_explain_names_the_withheld_channels(
    _pool: PgPoolOptions,
    opts: PgConnectOptions,
) {
    const HEADER_SECRET: &str = "pk-HEADERSECRET-9f8e7d6c";
    const URL_PASSWORD: &str = "URLPASSWORD-hunter2";
    let url = database_url(&opts, &postgres_addr(&opts));
    let cp = ControlPlane::spawn_with(&url, 0, &[("SWITCHYARD_FLEET_TOKEN", "")]).await;
    let channel = |body: Value| async {
        let (status, _, created) = cp.call("POST", "/api/v1/channels", Some(body)).await;
        assert_eq!(status, 201, "{created}");
        created["id"].as_i64().unwrap()
    };
    let credential = |id: i64, body: Value| {
        let cp = &cp;
        async move {
            let path = format!("/api/v1/channels/{id}/credentials");
            let (status, _, created) = cp.call("POST", &path, Some(body)).await;
            assert_eq!(status, 201, "{created}");
        }
    };
    // Secrets in a header and in the URL (the credential itself comes from the proxy's env).
    let headers = channel(json!({"name": "portkey", "provider": "openai",
        "base_url": format!("https://svc:{URL_PASSWORD}@gw.test/v1"),
        "headers": {"x-portkey-api-key": HEADER_SECRET}}))
    .await;
    credential(headers, json!({"secret_env": "PORTKEY_KEY"})).await;
    // Only an inline credential.
    let inline = channel(json!({"name": "inline", "provider": "openai",
        "base_url": "https://api.test/v1"}))
    .await;
    credential(inline, json!({"secret": "sk-inline-fleet-secret"})).await;
    // Only a credential the proxy resolves itself: callable.
    let env = channel(json!({"name": "env", "provider": "openai",
        "base_url": "https://api.test/v1"}))
    .await;
    credential(env, json!({"secret_env": "OPENAI_KEY_ON_PROXIES"})).await;
    let (status, _, route) = cp
        .call(
            "POST",
            "/api/v1/routes",
            Some(json!({"model_pattern": "gpt-4o"})),
        )
        .await;
    assert_eq!(status, 201, "{route}");
    let route = route["id"].as_i64().unwrap();
    let mut members = std::collections::HashMap::new();
    for (ch, priority) in [(headers, 10), (inline, 10), (env, 0)] {
        let (status, _, member) = cp
            .call(
                "POST",
                &format!("/api/v1/routes/{route}/members"),
                Some(json!({"channel_id": ch, "upstream_model": "gpt-4o", "priority": priority})),
            )
            .await;
        assert_eq!(status, 201, "{member}");
        members.insert(ch, member["id"].as_i64().unwrap());
    }

    // What an anonymous stream receives, once it holds every write above.
    let mut client = fleet_client(&cp.endpoint(), None).await;
    let mut stream = client
        .watch(WatchRequest {
            have_revision: 0,
            client_id: "anonymous".into(),
        })
        .await
        .unwrap()
        .into_inner();
    let snapshot = loop {
        let snapshot = tokio::time::timeout(PATIENCE, stream.message())
            .await
            .expect("no snapshot in time")
            .unwrap()
            .unwrap();
        if snapshot.routes.iter().any(|r| r.members.len() == 3) {
            break snapshot;
        }
    };
    let encoded = format!("{snapshot:?}");
    for secret in [
        HEADER_SECRET,
        "HEADERSECRET",
        URL_PASSWORD,
        "sk-inline-fleet-secret",
    ] {
        assert!(!encoded.contains(secret), "{secret} streamed: {encoded}");
    }
    let wire = |id: i64| snapshot.channels.iter().find(|c| c.id == id).unwrap();
    assert!(wire(headers).secrets_withheld && wire(headers).headers.is_empty());
    assert_eq!(wire(headers).base_url, "https://svc:***@gw.test/v1");
    assert!(wire(inline).secrets_withheld && wire(inline).credentials.is_empty());
    assert!(!wire(env).secrets_withheld);

    // Explain selects from what the proxies hold: the top tier is withheld, the env one serves.
    let (status, _, body) = cp
        .call("GET", "/api/v1/routes/explain?model=gpt-4o", None)
        .await;
    assert_eq!(status, 200, "{body}");
    let reasons = |ch: i64| {
        body["candidates"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["member_id"] == members[&ch])
            .map(|c| c["reasons"].clone())
            .unwrap()
    };
    assert_eq!(reasons(headers), json!(["secrets_withheld"]), "{body}");
    assert_eq!(
        reasons(inline),
        json!(["credential_unavailable", "secrets_withheld"]),
        "{body}"
    );
    assert_eq!(reasons(env), json!([]), "{body}");
    assert_eq!(body["outcome"], "selected");
    assert_eq!(body["member_id"], members[&env], "{body}");
}
