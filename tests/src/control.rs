//! The harness of the tests of a control plane and the proxies that follow it, as real
//! processes (`fleet_control_plane.rs`, `fleet_live.rs`): the processes, a minimal HTTP/1.1
//! client and fixtures made through the admin REST API.
//!
//! Every process listens on 127.0.0.1:0 and the harness reads the address from its
//! "listening" log line; every wait polls for a condition with a generous deadline; every
//! process is killed on drop.
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};
use sqlx::postgres::PgConnectOptions;
use switchyard_mock_upstream::MockUpstream;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::process::Process;

/// The two binaries the harness starts, as the test crate names them (`CARGO_BIN_EXE_*` is
/// known only when a test is compiled): [`bins!`](crate::bins).
#[derive(Debug, Clone, Copy)]
pub struct Bins {
    pub control_plane: &'static str,
    pub data_plane: &'static str,
}

/// The e2e crate's control-plane and data-plane binaries ([`Bins`]), named where a test is
/// compiled.
#[macro_export]
macro_rules! bins {
    () => {
        $crate::control::Bins {
            control_plane: env!("CARGO_BIN_EXE_e2e-control-plane"),
            data_plane: env!("CARGO_BIN_EXE_e2e-data-plane"),
        }
    };
}

pub const ADMIN_TOKEN: &str = "e2e-admin-token-0123456789abcdef";
pub const FLEET_TOKEN: &str = "e2e-fleet-token-0123456789abcdef";
/// Starting processes, a control plane coming back, a proxy reconnecting (backoff up to 10 s).
pub const PATIENCE: Duration = Duration::from_secs(60);
/// A committed change reaching a connected proxy: it must arrive without polling delays (the
/// documented bound: a new revision normally arrives within a second); this is that bound plus
/// generous slack for a loaded 2-core machine, never a timing to pass.
pub const PROMPTLY: Duration = Duration::from_secs(20);
pub const POLL: Duration = Duration::from_millis(50);
pub const MODEL: &str = "e2e-model";

pub fn unique(tag: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("e2e-{tag}-{}-{nanos:x}", std::process::id())
}

/// The test database's URL (`#[sqlx::test]` made it; trust auth on loopback).
pub fn database_url(opts: &PgConnectOptions) -> String {
    let db = opts.get_database().unwrap_or("postgres");
    format!(
        "postgres://{}@{}:{}/{db}",
        opts.get_username(),
        opts.get_host(),
        opts.get_port()
    )
}

// ---------------------------------------------------------------------------------------------
// Processes

/// One control-plane process (`e2e-control-plane`, i.e. `switchyard-control-plane`).
pub struct ControlPlane {
    pub process: Process,
    pub http: SocketAddr,
    pub grpc: SocketAddr,
    database_url: String,
    bins: Bins,
}

impl ControlPlane {
    /// On free ports; its proxies ([`Proxy::start`]) run `bins.data_plane`.
    pub async fn start(bins: Bins, database_url: &str) -> ControlPlane {
        ControlPlane::start_on(bins, database_url, "127.0.0.1:0", "127.0.0.1:0").await
    }

    /// Again, on the same database and the same addresses (the proxies know only the address).
    pub async fn restart(&self) -> ControlPlane {
        assert!(
            !self.process.lines.lock().unwrap().is_empty(),
            "the control plane to restart never logged anything"
        );
        ControlPlane::start_on(
            self.bins,
            &self.database_url,
            &self.http.to_string(),
            &self.grpc.to_string(),
        )
        .await
    }

    async fn start_on(bins: Bins, database_url: &str, http: &str, grpc: &str) -> ControlPlane {
        let mut process = Process::spawn(
            "control plane",
            Command::new(bins.control_plane)
                // The test script exports REDIS_URL for other tests; these run without shared
                // state (explain's health view is then "none", as the proxies' in-memory one).
                .env_remove("REDIS_URL")
                .env_remove("SWITCHYARD_REDIS_PREFIX")
                .env("DATABASE_URL", database_url)
                .env("SWITCHYARD_ADMIN_TOKEN", ADMIN_TOKEN)
                .env("SWITCHYARD_FLEET_TOKEN", FLEET_TOKEN)
                .env("SWITCHYARD_HTTP_ADDR", http)
                .env("SWITCHYARD_GRPC_ADDR", grpc)
                .env("RUST_LOG", "info"),
        );
        let (http, grpc) = process
            .wait_log("listening", |log| {
                // One flat log schema: the event's fields sit at the top level.
                let fields = log;
                (fields["message"] == "listening").then(|| {
                    (
                        fields["http_addr"].as_str().unwrap().parse().unwrap(),
                        fields["grpc_addr"].as_str().unwrap().parse().unwrap(),
                    )
                })
            })
            .await;
        let cp = ControlPlane {
            process,
            http,
            grpc,
            database_url: database_url.to_owned(),
            bins,
        };
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Ok(r) = http_call(cp.http, "GET", "/readyz", None, &[]).await {
                if r.status == 200 {
                    break;
                }
            }
            assert!(
                Instant::now() < deadline,
                "the control plane never became ready"
            );
            tokio::time::sleep(POLL).await;
        }
        cp
    }

    /// The gRPC URL proxies follow.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.grpc)
    }

    pub async fn call(&self, method: &str, path: &str, body: Option<&Value>) -> Reply {
        let auth = format!("Bearer {ADMIN_TOKEN}");
        let body = body.map(Value::to_string);
        http_call(
            self.http,
            method,
            path,
            body.as_deref(),
            &[("authorization", &auth)],
        )
        .await
        .unwrap_or_else(|e| panic!("{method} {path}: {e}"))
    }

    /// POST, asserting 201; the created resource and the new snapshot revision.
    pub async fn create(&self, path: &str, body: Value) -> (Value, u64) {
        let reply = self.call("POST", path, Some(&body)).await;
        assert_eq!(reply.status, 201, "POST {path} {body}: {}", reply.body);
        (reply.json(), reply.revision())
    }

    /// PATCH, asserting 200; the new snapshot revision.
    pub async fn patch(&self, path: &str, body: Value) -> u64 {
        let reply = self.call("PATCH", path, Some(&body)).await;
        assert_eq!(reply.status, 200, "PATCH {path} {body}: {}", reply.body);
        reply.revision()
    }

    /// Explain once the control plane's own snapshot has reached `revision` (it compiles each
    /// write after a NOTIFY, so it may briefly lag the write's answer: until then it may not
    /// know the route at all).
    pub async fn explain_at(&self, model: &str, revision: u64) -> Value {
        let path = format!("/api/v1/routes/explain?model={model}");
        let deadline = Instant::now() + PROMPTLY;
        loop {
            let reply = self.call("GET", &path, None).await;
            if reply.status == 200 && reply.json()["revision"].as_u64().unwrap() >= revision {
                return reply.json();
            }
            assert!(
                Instant::now() < deadline,
                "explain never reached revision {revision}: {} {}",
                reply.status,
                reply.body
            );
            tokio::time::sleep(POLL).await;
        }
    }
}

/// One data-plane process (`e2e-data-plane`, i.e. `switchyard-data-plane`) in fleet mode.
pub struct Proxy {
    pub process: Process,
    pub addr: SocketAddr,
}

impl Proxy {
    /// Following `control_plane` (whether it is up or not), listening (not necessarily
    /// ready: see [`Proxy::wait_ready`]).
    pub async fn start(control_plane: &ControlPlane, cache: Option<&Path>) -> Proxy {
        Proxy::start_with(control_plane, cache, None).await
    }

    /// [`Proxy::start`], sharing state with the proxies given the same `(Redis URL, key
    /// prefix)` when there is one (fleet-wide limits), else in memory.
    pub async fn start_with(
        control_plane: &ControlPlane,
        cache: Option<&Path>,
        redis: Option<(&str, &str)>,
    ) -> Proxy {
        Proxy::start_env(control_plane, cache, redis, &[]).await
    }

    /// [`Proxy::start_with`], with `env` set in the proxy's environment besides.
    pub async fn start_env(
        control_plane: &ControlPlane,
        cache: Option<&Path>,
        redis: Option<(&str, &str)>,
        env: &[(&str, &str)],
    ) -> Proxy {
        let mut command = Command::new(control_plane.bins.data_plane);
        command
            .env_remove("REDIS_URL")
            .env_remove("SWITCHYARD_CONFIG")
            .env_remove("SWITCHYARD_SNAPSHOT_CACHE")
            .env("SWITCHYARD_CONTROL_PLANE", control_plane.endpoint())
            .env("SWITCHYARD_FLEET_TOKEN", FLEET_TOKEN)
            .env("SWITCHYARD_HTTP_ADDR", "127.0.0.1:0")
            .env("RUST_LOG", "info");
        if let Some(cache) = cache {
            command.env("SWITCHYARD_SNAPSHOT_CACHE", cache);
        }
        if let Some((url, prefix)) = redis {
            command
                .env("REDIS_URL", url)
                .env("SWITCHYARD_REDIS_PREFIX", prefix);
        }
        command.envs(env.iter().copied());
        let mut process = Process::spawn("proxy", &mut command);
        let addr = process
            .wait_log("listening", |log| {
                (log["message"] == "listening")
                    .then(|| log["addr"].as_str().unwrap().parse().unwrap())
            })
            .await;
        Proxy { process, addr }
    }

    pub async fn start_ready(control_plane: &ControlPlane, cache: Option<&Path>) -> Proxy {
        let proxy = Proxy::start(control_plane, cache).await;
        proxy.wait_ready().await;
        proxy
    }

    pub async fn status(&self, path: &str) -> u16 {
        http_call(self.addr, "GET", path, None, &[])
            .await
            .map(|r| r.status)
            .unwrap_or(0)
    }

    pub async fn wait_ready(&self) {
        let deadline = Instant::now() + PATIENCE;
        while self.status("/readyz").await != 200 {
            assert!(Instant::now() < deadline, "the proxy never became ready");
            tokio::time::sleep(POLL).await;
        }
    }

    pub async fn chat(&self, token: &str) -> Reply {
        chat_for(self.addr, token, MODEL).await
    }

    /// Chats until an answer satisfies `ok` (a change travelling control plane → proxy).
    pub async fn chat_until(
        &self,
        token: &str,
        within: Duration,
        what: &str,
        ok: impl Fn(&Reply) -> bool,
    ) -> Reply {
        let started = Instant::now();
        loop {
            let reply = self.chat(token).await;
            if ok(&reply) {
                eprintln!("{what}: seen after {:?}", started.elapsed());
                return reply;
            }
            assert!(
                started.elapsed() < within,
                "{what}: not seen within {within:?}; last answer {} {} (channel {:?})",
                reply.status,
                reply.body,
                reply.header("x-switchyard-channel")
            );
            tokio::time::sleep(POLL).await;
        }
    }

    /// One series' value on this proxy's `/metrics` page (labels included), if it is there.
    pub async fn sample(&self, series: &str) -> Option<f64> {
        let page = http_call(self.addr, "GET", "/metrics", None, &[])
            .await
            .ok()?;
        page.body.lines().find_map(|l| {
            l.strip_prefix(series)?
                .strip_prefix(' ')?
                .trim()
                .parse()
                .ok()
        })
    }

    /// Waits until this proxy serves from snapshot `revision` or a later one.
    pub async fn wait_revision(&self, revision: u64) {
        let deadline = Instant::now() + PROMPTLY;
        loop {
            let seen = self.sample("switchyard_snapshot_revision").await;
            if seen.is_some_and(|r| r >= revision as f64) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "revision {revision} never reached the proxy (at {seen:?})"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// `final_member` of the proxy's request log line for this request id.
    pub async fn final_member(&mut self, request_id: &str) -> i64 {
        self.process
            .wait_log("the request's log line", |log| {
                (log["message"] == "request" && log["request_id"] == request_id)
                    .then(|| log["final_member"].as_i64().unwrap())
            })
            .await
    }
}

// ---------------------------------------------------------------------------------------------
// HTTP

#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub head: String,
    pub body: String,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<String> {
        self.head.lines().skip(1).find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_owned())
        })
    }

    pub fn channel(&self) -> String {
        self.header("x-switchyard-channel").unwrap_or_default()
    }

    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }

    pub fn error_code(&self) -> String {
        serde_json::from_str::<Value>(&self.body).map_or_else(
            |_| String::new(),
            |v| v["error"]["code"].as_str().unwrap_or_default().to_owned(),
        )
    }

    pub fn revision(&self) -> u64 {
        self.header("x-switchyard-revision")
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no x-switchyard-revision header: {}", self.head))
    }
}

/// A minimal HTTP/1.1 client: one request per connection, chunked bodies decoded.
pub async fn http_call(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&str>,
    headers: &[(&str, &str)],
) -> std::io::Result<Reply> {
    let body = body.unwrap_or("");
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\
         content-type: application/json\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await?;
        stream.write_all(request.as_bytes()).await?;
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await?;
        Ok::<_, std::io::Error>(raw)
    };
    let raw = tokio::time::timeout(PATIENCE, exchange)
        .await
        .map_err(|_| std::io::Error::other("no answer in time"))??;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("not an HTTP answer: {head:?}")))?;
    let chunked = head.lines().any(|l| {
        l.to_ascii_lowercase()
            .starts_with("transfer-encoding: chunked")
    });
    Ok(Reply {
        status,
        head: head.to_owned(),
        body: if chunked {
            dechunk(body)
        } else {
            body.to_owned()
        },
    })
}

// ---------------------------------------------------------------------------------------------
// Fixtures, all made through the REST API

/// A mock upstream and the channel (with one credential) pointing at it.
pub struct Upstream {
    pub mock: MockUpstream,
    pub name: String,
    pub channel_id: i64,
    pub secret: String,
    pub upstream_model: String,
}

impl Upstream {
    pub async fn create(cp: &ControlPlane, name: &str) -> Upstream {
        let mock = MockUpstream::start().await.unwrap();
        let (channel, _) = cp
            .create(
                "/api/v1/channels",
                json!({"name": name, "provider": "openai",
                       "base_url": format!("{}/v1", mock.base_url())}),
            )
            .await;
        let channel_id = channel["id"].as_i64().unwrap();
        let secret = format!("sk-upstream-{name}-0123456789");
        let (credential, _) = cp
            .create(
                &format!("/api/v1/channels/{channel_id}/credentials"),
                json!({"secret": secret}),
            )
            .await;
        assert!(
            !credential.to_string().contains(&secret),
            "the secret was echoed back: {credential}"
        );
        Upstream {
            mock,
            name: name.to_owned(),
            channel_id,
            secret,
            upstream_model: format!("up-{name}"),
        }
    }

    /// A member of `route` on this channel; its id and the new revision.
    pub async fn member(
        &self,
        cp: &ControlPlane,
        route: i64,
        priority: i32,
        enabled: bool,
    ) -> (i64, u64) {
        let (member, revision) = cp
            .create(
                &format!("/api/v1/routes/{route}/members"),
                json!({"channel_id": self.channel_id, "upstream_model": self.upstream_model,
                       "priority": priority, "enabled": enabled}),
            )
            .await;
        (member["id"].as_i64().unwrap(), revision)
    }

    /// The last request this upstream received was a chat completion for this channel's member:
    /// the model rewritten to the upstream model, this channel's credential, never the client's
    /// token, the rest of the body intact.
    pub fn assert_last_request(&self, client_token: &str) {
        let requests = self.mock.requests();
        let last = requests
            .last()
            .unwrap_or_else(|| panic!("{} received nothing", self.name));
        assert_eq!(last.path, "/v1/chat/completions");
        assert_eq!(last.model.as_deref(), Some(self.upstream_model.as_str()));
        assert_eq!(last.credential.as_deref(), Some(self.secret.as_str()));
        assert_eq!(last.json()["messages"][0]["content"], "hello");
        assert!(
            requests
                .iter()
                .all(|r| r.credential.as_deref() != Some(client_token)),
            "the client's token went upstream"
        );
    }
}

/// Channel `a`, route `MODEL` with one member on it, and a token.
pub struct Base {
    pub a: Upstream,
    pub route: i64,
    pub member_a: i64,
    pub token: String,
    pub revision: u64,
}

pub async fn base(cp: &ControlPlane) -> Base {
    let a = Upstream::create(cp, "chan-a").await;
    let (route, _) = cp
        .create("/api/v1/routes", json!({"model_pattern": MODEL}))
        .await;
    let route = route["id"].as_i64().unwrap();
    let (member_a, _) = a.member(cp, route, 0, true).await;
    let (token, revision) = cp.create("/api/v1/tokens", json!({"name": "app"})).await;
    let token = token["token"]
        .as_str()
        .unwrap_or_else(|| panic!("no plaintext token in {token}"))
        .to_owned();
    Base {
        a,
        route,
        member_a,
        token,
        revision,
    }
}

/// A 200 through the proxy from `upstream`'s channel for route `MODEL`, first attempt.
pub fn assert_served_by(reply: &Reply, upstream: &Upstream) {
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.channel(), upstream.name, "{}", reply.head);
    assert_eq!(
        reply.header("x-switchyard-route").as_deref(),
        Some(MODEL),
        "{}",
        reply.head
    );
    assert_eq!(
        reply.header("x-switchyard-attempts").as_deref(),
        Some("1"),
        "{}",
        reply.head
    );
    assert!(
        reply
            .header("x-switchyard-request-id")
            .is_some_and(|id| !id.is_empty()),
        "{}",
        reply.head
    );
    assert_eq!(reply.json()["object"], "chat.completion", "{}", reply.body);
}

/// A chat for `model` with `token` through the proxy at `addr`, saying "hello".
pub async fn chat_for(addr: SocketAddr, token: &str, model: &str) -> Reply {
    chat_saying(addr, token, model, "hello").await
}

/// A chat for `model` with `token` through the proxy at `addr`: one user message, `content`.
pub async fn chat_saying(addr: SocketAddr, token: &str, model: &str, content: &str) -> Reply {
    let auth = format!("Bearer {token}");
    let body = json!({"model": model, "messages": [{"role": "user", "content": content}]});
    http_call(
        addr,
        "POST",
        "/v1/chat/completions",
        Some(&body.to_string()),
        &[("authorization", &auth)],
    )
    .await
    .unwrap_or_else(|e| panic!("chat through the proxy: {e}"))
}

/// `series` (labels included) summed over the proxies' `/metrics` pages; 0 where absent.
pub async fn metric_sum(proxies: &[Proxy], series: &str) -> u64 {
    let mut sum = 0;
    for proxy in proxies {
        let page = http_call(proxy.addr, "GET", "/metrics", None, &[])
            .await
            .unwrap();
        sum += page
            .body
            .lines()
            .find_map(|l| {
                l.strip_prefix(series)?
                    .strip_prefix(' ')?
                    .trim()
                    .parse::<u64>()
                    .ok()
            })
            .unwrap_or(0);
    }
    sum
}

/// The payload of an HTTP/1.1 chunked body (the tests' raw-socket clients read whole answers).
pub fn dechunk(mut raw: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = raw.split_once("\r\n") {
        let size =
            usize::from_str_radix(size.split(';').next().unwrap_or("").trim(), 16).unwrap_or(0);
        if size == 0 || rest.len() < size {
            break;
        }
        out.push_str(&rest[..size]);
        raw = rest[size..].trim_start_matches("\r\n");
    }
    out
}
