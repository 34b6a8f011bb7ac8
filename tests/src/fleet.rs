//! The harness of the fleet tests: standalone data-plane processes sharing one Redis, each on its
//! own port, driven by a minimal HTTP/1.1 client (`fleet_redis.rs`, `recovery_fleet.rs`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The client token every fleet test's configuration carries (with `allow_pinning`).
pub const TOKEN: &str = "sk-fleet-test";
/// A chat request for route `m`.
pub const CHAT: &str = r#"{"model":"m","messages":[{"role":"user","content":"hello"}]}"#;

pub fn unique(tag: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("e2e-{tag}-{nanos:x}")
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub fn cleanup(url: &str, prefix: &str) {
    if let Ok(mut con) = redis::Client::open(url).and_then(|c| c.get_connection()) {
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{{sy:{prefix}}}:*"))
            .query(&mut con)
            .unwrap_or_default();
        if !keys.is_empty() {
            let _: redis::RedisResult<()> = redis::cmd("DEL").arg(keys).query(&mut con);
        }
    }
}

/// One proxy process; killed (SIGKILL) on drop.
pub struct Proxy {
    child: Child,
    pub url: String,
}

impl Proxy {
    /// `bin` is the data-plane binary (a test's `env!("CARGO_BIN_EXE_e2e-data-plane")`).
    pub async fn start(bin: &str, config: &Path, redis: &str, prefix: &str) -> Proxy {
        let port = free_port();
        let child = Command::new(bin)
            .arg("--config")
            .arg(config)
            .args(["--http-addr", &format!("127.0.0.1:{port}")])
            .env("REDIS_URL", redis)
            .env("SWITCHYARD_REDIS_PREFIX", prefix)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let proxy = Proxy {
            child,
            url: format!("127.0.0.1:{port}"),
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(r) = http(&proxy.url, "GET", "/readyz", "", &[]).await {
                if r.status == 200 {
                    break;
                }
            }
            assert!(Instant::now() < deadline, "proxy never became ready");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // Its first Redis resync landed before it is asked anything (the sync age is NaN until
        // then).
        proxy
            .wait_for("switchyard_redis_last_sync_age_seconds", |age| age >= 0.0)
            .await;
        proxy
    }

    /// One series' value on this proxy's `/metrics` page (`series` as written there, labels
    /// included).
    pub async fn sample(&self, series: &str) -> Option<f64> {
        let page = http(&self.url, "GET", "/metrics", "", &[]).await.ok()?;
        page.body
            .lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
    }

    /// Waits until `series` on this proxy's `/metrics` satisfies `ok` (what another proxy wrote
    /// has reached this one's view), 10 s at most.
    pub async fn wait_for(&self, series: &str, ok: impl Fn(f64) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let value = self.sample(series).await;
            if value.is_some_and(&ok) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{series} on {} is still {value:?}",
                self.url
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    pub async fn chat(&self, headers: &[(&str, &str)]) -> Reply {
        http(&self.url, "POST", "/v1/chat/completions", CHAT, headers)
            .await
            .unwrap()
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.kill();
    }
}

#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub head: String,
    pub body: String,
}

impl Reply {
    pub fn header(&self, name: &str) -> String {
        self.head
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
            })
            .unwrap_or_default()
    }

    pub fn channel(&self) -> String {
        self.header("x-switchyard-channel")
    }
}

/// A minimal HTTP/1.1 client (one request per connection).
pub async fn http(
    addr: &str,
    method: &str,
    path: &str,
    body: &str,
    headers: &[(&str, &str)],
) -> std::io::Result<Reply> {
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\nauthorization: Bearer {TOKEN}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    stream.write_all(req.as_bytes()).await?;
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(60), stream.read_to_end(&mut raw))
        .await
        .map_err(|_| std::io::Error::other("response timed out"))??;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    Ok(Reply {
        status,
        head: head.to_owned(),
        body: body.to_owned(),
    })
}

pub fn write_config(tag: &str, yaml: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!("{}.yaml", unique(tag)));
    let yaml =
        format!("{yaml}\ntokens:\n  - name: test\n    token: {TOKEN}\n    allow_pinning: true\n");
    std::fs::write(&path, yaml).unwrap();
    path
}

/// A redis-server child on its own port, killed on drop.
pub struct OwnRedis {
    child: Child,
    pub port: u16,
}

impl OwnRedis {
    pub fn start(port: u16) -> OwnRedis {
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server");
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "redis-server did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        OwnRedis { child, port }
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for OwnRedis {
    fn drop(&mut self) {
        self.kill();
    }
}
