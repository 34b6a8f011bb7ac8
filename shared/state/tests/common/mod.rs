//! Helpers for tests against a real Redis: URL, unique prefixes, child redis-server processes.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use switchyard_engine::HealthView;
use switchyard_state::{RedisConfig, RedisStore, StateStore};

/// A two-worker runtime for the stores' background tasks.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// `f` over the store's local view.
pub fn read<T>(store: &dyn StateStore, f: impl Fn(&dyn HealthView) -> T) -> T {
    let mut out = None;
    store.with_view(&mut |v| out = Some(f(v)));
    out.unwrap()
}

/// The shared test Redis (`REDIS_URL`, default local). A Redis-backed test fails, never skips,
/// when nothing answers there: the test command (`scripts/test`) starts one.
pub fn redis_url() -> String {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    assert!(
        ping(&url),
        "no Redis answers at {url}: this test needs one (scripts/test starts it)"
    );
    url
}

pub fn ping(url: &str) -> bool {
    redis::Client::open(url)
        .and_then(|c| c.get_connection_with_timeout(Duration::from_millis(300)))
        .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c))
        .is_ok()
}

pub fn unique_prefix(tag: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("test-{tag}-{nanos:x}-{:x}", std::process::id())
}

/// Test settings: fast resync and short leases.
pub fn config(url: &str, prefix: &str) -> RedisConfig {
    let mut c = RedisConfig::new(url, prefix);
    c.resync_every = Duration::from_millis(300);
    c.lease_refresh = Duration::from_millis(200);
    c.lease_ttl = Duration::from_millis(1000);
    c.state_ttl = Duration::from_secs(600);
    c
}

pub fn start(url: &str, prefix: &str) -> RedisStore {
    RedisStore::start(config(url, prefix)).unwrap()
}

/// A plain connection to the Redis at `url`, for reading what the stores wrote.
pub fn connection(url: &str) -> redis::Connection {
    redis::Client::open(url).unwrap().get_connection().unwrap()
}

/// Deletes every key of a prefix (all share one hash tag, so one node holds them).
pub fn cleanup(url: &str, prefix: &str) {
    let Ok(client) = redis::Client::open(url) else {
        return;
    };
    let Ok(mut con) = client.get_connection_with_timeout(Duration::from_secs(1)) else {
        return;
    };
    let pattern = format!("{{sy:{prefix}}}:*");
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(&pattern)
        .query(&mut con)
        .unwrap_or_default();
    if !keys.is_empty() {
        let _: Result<(), _> = redis::cmd("DEL").arg(&keys).query(&mut con);
    }
}

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

pub fn free_port() -> u16 {
    loop {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        // Cluster bus ports are port + 10000.
        if port < 55_000 && TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok() {
            return port;
        }
    }
}

/// A redis-server child process, killed on drop.
pub struct RedisServer {
    pub port: u16,
    child: Child,
    pub dir: PathBuf,
}

impl RedisServer {
    pub fn start(port: u16, extra: &[&str]) -> RedisServer {
        let dir = std::env::temp_dir().join(format!("sy-redis-{port}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string()])
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--daemonize", "no"])
            .arg("--dir")
            .arg(&dir)
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server must be installed (scripts/test installs it)");
        let server = RedisServer { port, child, dir };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !ping(&server.url()) {
            assert!(
                Instant::now() < deadline,
                "redis-server on {port} did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        server
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A 3-master local Redis Cluster.
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    pub fn start() -> RedisCluster {
        let mut nodes = Vec::new();
        for _ in 0..3 {
            let port = free_port();
            nodes.push(RedisServer::start(
                port,
                &[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    &format!("nodes-{port}.conf"),
                    "--cluster-node-timeout",
                    "2000",
                ],
            ));
        }
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let out = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addrs)
            .arg("--cluster-yes")
            .output()
            .expect("redis-cli");
        assert!(
            out.status.success(),
            "cluster create failed: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        let deadline = Instant::now() + Duration::from_secs(20);
        for n in &nodes {
            loop {
                let out = Command::new("redis-cli")
                    .args(["-p", &n.port.to_string(), "cluster", "info"])
                    .output()
                    .unwrap();
                if String::from_utf8_lossy(&out.stdout).contains("cluster_state:ok") {
                    break;
                }
                assert!(Instant::now() < deadline, "cluster never became ok");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        RedisCluster { nodes }
    }

    pub fn url(&self) -> String {
        let nodes: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        format!("redis+cluster://{}", nodes.join(","))
    }
}

/// Polls `f` until it holds or `limit` passes; returns how long it took.
pub fn wait_until(limit: Duration, mut f: impl FnMut() -> bool) -> Option<Duration> {
    let start = Instant::now();
    loop {
        if f() {
            return Some(start.elapsed());
        }
        if start.elapsed() > limit {
            return None;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}
