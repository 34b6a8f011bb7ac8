//! Three real data-plane processes sharing one Redis (SPEC §5), against real mock upstreams:
//! cooldowns and sticky sessions are honoured fleet-wide, in-flight counts are fleet-wide and
//! do not leak when a proxy is killed, a Redis outage fails no client request, and a cooldown
//! written while Redis is paused under load is honoured by the other proxy within a second of
//! Redis resuming (each proxy's propagation-lag histogram on `/metrics` moving meanwhile).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use switchyard_mock_upstream::{Behavior, Matcher, MockUpstream};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const BIN: &str = env!("CARGO_BIN_EXE_e2e-data-plane");
const TOKEN: &str = "sk-fleet-test";
const CHAT: &str = r#"{"model":"m","messages":[{"role":"user","content":"hello"}]}"#;
/// SPEC §5: 100 ms. Requests that must see another proxy's change wait this long first.
const PROPAGATION_MARGIN: Duration = Duration::from_millis(300);

fn redis_url() -> Option<String> {
    match std::env::var("REDIS_URL") {
        Ok(url) => Some(url),
        Err(_) => {
            if std::net::TcpStream::connect("127.0.0.1:6379").is_ok() {
                Some("redis://127.0.0.1:6379".to_owned())
            } else {
                eprintln!("skipped: REDIS_URL unset and no Redis on 127.0.0.1:6379");
                None
            }
        }
    }
}

fn unique(tag: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("e2e-{tag}-{nanos:x}")
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn cleanup(url: &str, prefix: &str) {
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
struct Proxy {
    child: Child,
    url: String,
}

impl Proxy {
    async fn start(config: &PathBuf, redis: &str, prefix: &str) -> Proxy {
        let port = free_port();
        let child = Command::new(BIN)
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
        // Let its first Redis resync land before it is asked anything.
        tokio::time::sleep(Duration::from_millis(300)).await;
        proxy
    }

    async fn chat(&self, headers: &[(&str, &str)]) -> Reply {
        http(&self.url, "POST", "/v1/chat/completions", CHAT, headers)
            .await
            .unwrap()
    }

    fn kill(&mut self) {
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
struct Reply {
    status: u16,
    head: String,
    body: String,
}

impl Reply {
    fn header(&self, name: &str) -> String {
        self.head
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
            })
            .unwrap_or_default()
    }

    fn channel(&self) -> String {
        self.header("x-switchyard-channel")
    }
}

/// A minimal HTTP/1.1 client (one request per connection).
async fn http(
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

fn channel_yaml(name: &str, url: &str, extra: &str) -> String {
    format!("  - name: {name}\n    provider: openai\n    base_url: {url}\n    credentials: [\"k-{name}\"]\n{extra}")
}

fn write_config(tag: &str, yaml: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!("{}.yaml", unique(tag)));
    let yaml =
        format!("{yaml}\ntokens:\n  - name: test\n    token: {TOKEN}\n    allow_pinning: true\n");
    std::fs::write(&path, yaml).unwrap();
    path
}

/// Channel `a` (priority 10) over `b` (priority 0), members 1 and 2.
fn tiered(a: &MockUpstream, b: &MockUpstream, settings: &str) -> String {
    format!(
        "settings:\n  channel_retry_times: 0\n  cooldown_seconds: 60\n{settings}\nchannels:\n{}{}routes:\n  - model_pattern: m\n    members:\n      - {{ id: 1, channel: a, upstream_model: up-a, priority: 10 }}\n      - {{ id: 2, channel: b, upstream_model: up-b, priority: 0 }}\n",
        channel_yaml("a", &a.base_url(), ""),
        channel_yaml("b", &b.base_url(), ""),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn member_cooled_through_one_proxy_is_skipped_by_the_others() {
    let Some(redis) = redis_url() else { return };
    let prefix = unique("cool");
    let (a, b) = (
        MockUpstream::start().await.unwrap(),
        MockUpstream::start().await.unwrap(),
    );
    let config = write_config("cool", &tiered(&a, &b, ""));
    let proxies = [
        Proxy::start(&config, &redis, &prefix).await,
        Proxy::start(&config, &redis, &prefix).await,
        Proxy::start(&config, &redis, &prefix).await,
    ];
    // One 503 from `a` through proxy A cools member 1 (then `a` is healthy again).
    a.on(Matcher::any(), Behavior::status(503).times(1));
    let first = proxies[0].chat(&[]).await;
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(first.channel(), "b");
    tokio::time::sleep(PROPAGATION_MARGIN).await;
    // B and C never try the cooling member, although `a` would answer now.
    for proxy in &proxies[1..] {
        for _ in 0..5 {
            let r = proxy.chat(&[]).await;
            assert_eq!(r.status, 200);
            assert_eq!(r.channel(), "b", "a proxy ignored the fleet cooldown");
            assert_eq!(r.header("x-switchyard-attempts"), "1");
        }
    }
    assert_eq!(a.hits(), 1);
    drop(proxies);
    cleanup(&redis, &prefix);
    let _ = std::fs::remove_file(config);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn breaker_trips_fleet_wide_from_failures_spread_over_proxies() {
    let Some(redis) = redis_url() else { return };
    let prefix = unique("breaker");
    let (a, b) = (
        MockUpstream::start().await.unwrap(),
        MockUpstream::start().await.unwrap(),
    );
    // No member cooldown, so only the channel breaker can keep `a` out of selection.
    let yaml = format!(
        "settings:\n  channel_retry_times: 0\n  cooldown_seconds: 0\n  breaker_failure_threshold: 3\nchannels:\n{}{}routes:\n  - model_pattern: m\n    members:\n      - {{ id: 1, channel: a, upstream_model: up-a, priority: 10 }}\n      - {{ id: 2, channel: b, upstream_model: up-b, priority: 0 }}\n",
        channel_yaml("a", &a.base_url(), ""),
        channel_yaml("b", &b.base_url(), ""),
    );
    let config = write_config("breaker", &yaml);
    let proxies = [
        Proxy::start(&config, &redis, &prefix).await,
        Proxy::start(&config, &redis, &prefix).await,
        Proxy::start(&config, &redis, &prefix).await,
    ];
    a.on(Matcher::any(), Behavior::status(503));
    // One failed channel attempt per proxy: each alone stays below the threshold of 3.
    for proxy in &proxies {
        let r = proxy.chat(&[]).await;
        assert_eq!((r.status, r.channel().as_str()), (200, "b"), "{}", r.body);
        tokio::time::sleep(PROPAGATION_MARGIN).await;
    }
    assert_eq!(a.hits(), 3);
    // The third failure tripped the breaker in Redis: every proxy now skips `a`.
    for proxy in &proxies {
        for _ in 0..3 {
            let r = proxy.chat(&[]).await;
            assert_eq!(r.channel(), "b");
            assert_eq!(
                r.header("x-switchyard-attempts"),
                "1",
                "a proxy tried the tripped channel"
            );
        }
    }
    assert_eq!(a.hits(), 3);
    drop(proxies);
    cleanup(&redis, &prefix);
    let _ = std::fs::remove_file(config);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sticky_session_made_through_one_proxy_is_honoured_by_the_others() {
    let Some(redis) = redis_url() else { return };
    let prefix = unique("sticky");
    let (a, b) = (
        MockUpstream::start().await.unwrap(),
        MockUpstream::start().await.unwrap(),
    );
    let yaml = format!(
        "settings:\n  sticky_enabled: true\nchannels:\n{}{}routes:\n  - model_pattern: m\n    members:\n      - {{ id: 1, channel: a, upstream_model: up-a }}\n      - {{ id: 2, channel: b, upstream_model: up-b }}\n",
        channel_yaml("a", &a.base_url(), ""),
        channel_yaml("b", &b.base_url(), ""),
    );
    let config = write_config("sticky", &yaml);
    let proxies = [
        Proxy::start(&config, &redis, &prefix).await,
        Proxy::start(&config, &redis, &prefix).await,
        Proxy::start(&config, &redis, &prefix).await,
    ];
    for session in ["s-1", "s-2", "s-3"] {
        let first = proxies[0].chat(&[("x-session-id", session)]).await;
        assert_eq!(first.status, 200);
        let bound = first.channel();
        tokio::time::sleep(PROPAGATION_MARGIN).await;
        for proxy in &proxies[1..] {
            for _ in 0..5 {
                let r = proxy.chat(&[("x-session-id", session)]).await;
                assert_eq!(r.channel(), bound, "session {session} escaped its binding");
            }
        }
    }
    drop(proxies);
    cleanup(&redis, &prefix);
    let _ = std::fs::remove_file(config);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_flight_is_fleet_wide_and_a_killed_proxy_leaks_nothing() {
    let Some(redis) = redis_url() else { return };
    let prefix = unique("inflight");
    let (slow, fast) = (
        MockUpstream::start().await.unwrap(),
        MockUpstream::start().await.unwrap(),
    );
    let yaml = format!(
        "channels:\n{}{}routes:\n  - model_pattern: m\n    members:\n      - {{ id: 1, channel: slow, upstream_model: up-slow }}\n      - {{ id: 2, channel: fast, upstream_model: up-fast }}\n",
        channel_yaml("slow", &slow.base_url(), "    max_concurrency: 1\n"),
        channel_yaml("fast", &fast.base_url(), ""),
    );
    let config = write_config("inflight", &yaml);
    let mut a = Proxy::start(&config, &redis, &prefix).await;
    let b = Proxy::start(&config, &redis, &prefix).await;
    // Through A, one request sits on `slow` (its only slot) and never finishes.
    slow.on(Matcher::any(), Behavior::ok().hang().times(1));
    let a_url = a.url.clone();
    let hanging = tokio::spawn(async move {
        http(
            &a_url,
            "POST",
            "/v1/chat/completions",
            CHAT,
            &[("x-switchyard-pin-member", "1")],
        )
        .await
    });
    let deadline = Instant::now() + Duration::from_secs(5);
    while slow.hits() == 0 {
        assert!(
            Instant::now() < deadline,
            "the pinned request never reached slow"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(PROPAGATION_MARGIN).await;
    // B sees `slow` at its limit (concurrency factor 0.01) and sends nearly everything to `fast`.
    let mut on_slow = 0;
    for _ in 0..20 {
        let r = b.chat(&[]).await;
        assert_eq!(r.status, 200);
        on_slow += usize::from(r.channel() == "slow");
    }
    assert!(
        on_slow <= 3,
        "B sent {on_slow}/20 to a channel at its fleet-wide limit"
    );
    // A is killed mid-request: its lease expires (5 s) and `slow` is free again for B.
    a.kill();
    hanging.abort();
    tokio::time::sleep(Duration::from_millis(7_000)).await;
    let mut on_slow = 0;
    for _ in 0..20 {
        let r = b.chat(&[]).await;
        assert_eq!(r.status, 200);
        on_slow += usize::from(r.channel() == "slow");
    }
    assert!(
        on_slow >= 3,
        "only {on_slow}/20 on slow: the killed proxy's in-flight count leaked"
    );
    drop(b);
    cleanup(&redis, &prefix);
    let _ = std::fs::remove_file(config);
}

/// A redis-server child on its own port, killed on drop.
struct OwnRedis {
    child: Child,
    port: u16,
}

impl OwnRedis {
    fn start(port: u16) -> OwnRedis {
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

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for OwnRedis {
    fn drop(&mut self) {
        self.kill();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_outage_fails_no_request_and_state_converges_after() {
    if redis_url().is_none() {
        return;
    }
    let mut server = OwnRedis::start(free_port());
    let port = server.port;
    let redis = format!("redis://127.0.0.1:{port}");
    let prefix = unique("outage");
    let (a, b) = (
        MockUpstream::start().await.unwrap(),
        MockUpstream::start().await.unwrap(),
    );
    let config = write_config("outage", &tiered(&a, &b, ""));
    let d = Proxy::start(&config, &redis, &prefix).await;
    let e = Proxy::start(&config, &redis, &prefix).await;
    // Load through both proxies; Redis dies in the middle of it.
    let mut load = Vec::new();
    for proxy in [&d, &e] {
        for _ in 0..2 {
            let url = proxy.url.clone();
            load.push(tokio::spawn(async move {
                let (mut ok, mut failed) = (0, 0);
                let until = Instant::now() + Duration::from_millis(2_500);
                while Instant::now() < until {
                    match http(&url, "POST", "/v1/chat/completions", CHAT, &[]).await {
                        Ok(r) if r.status == 200 => ok += 1,
                        _ => failed += 1,
                    }
                }
                (ok, failed)
            }));
        }
    }
    tokio::time::sleep(Duration::from_millis(800)).await;
    server.kill();
    let (mut ok, mut failed) = (0, 0);
    for task in load {
        let (o, f) = task.await.unwrap();
        ok += o;
        failed += f;
    }
    eprintln!("during the Redis outage: {ok} requests ok, {failed} failed");
    assert!(ok > 0);
    assert_eq!(failed, 0, "a request failed because Redis was down");
    // While Redis is down, D cools member 1 (only D knows).
    a.on(Matcher::any(), Behavior::status(503).times(1));
    let r = d.chat(&[]).await;
    assert_eq!((r.status, r.channel().as_str()), (200, "b"));
    // Redis returns (empty): D re-pushes its state; E converges through its resync.
    let _server = OwnRedis::start(port);
    let mut con = None;
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if con.is_none() {
            con = redis::Client::open(redis.as_str())
                .and_then(|c| c.get_connection())
                .ok();
        }
        let cooled: Option<String> = con.as_mut().and_then(|c| {
            redis::cmd("HGET")
                .arg(format!("{{sy:{prefix}}}:member"))
                .arg("1")
                .query(c)
                .ok()
        });
        if cooled.is_some() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "D never re-pushed its state to Redis"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // One resync period (1 s) plus margin, then E honours the cooldown.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let r = e.chat(&[]).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.channel(), "b", "E did not converge after Redis returned");
    let _ = std::fs::remove_file(config);
}

/// One sample's value on a Prometheus page (`series value`).
fn sample(page: &str, series: &str) -> Option<f64> {
    page.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cooldown_written_while_redis_is_paused_under_load_is_honoured_within_a_second_of_resume()
{
    if redis_url().is_none() {
        return;
    }
    // Its own Redis: CLIENT PAUSE must not stall anyone else's tests.
    let server = OwnRedis::start(free_port());
    let redis = format!("redis://127.0.0.1:{}", server.port);
    let prefix = unique("pause");
    let ups = [
        MockUpstream::start().await.unwrap(),
        MockUpstream::start().await.unwrap(),
        MockUpstream::start().await.unwrap(),
        MockUpstream::start().await.unwrap(),
    ];
    // Route `m` carries the load; route `cool` (members 3 on `c`, 4 on `d`) the probe.
    let yaml = format!(
        "settings:\n  channel_retry_times: 0\n  cooldown_seconds: 60\nchannels:\n{}{}{}{}routes:\n  - model_pattern: m\n    members:\n      - {{ id: 1, channel: a, upstream_model: up-a, priority: 10 }}\n      - {{ id: 2, channel: b, upstream_model: up-b, priority: 0 }}\n  - model_pattern: cool\n    members:\n      - {{ id: 3, channel: c, upstream_model: up-c, priority: 10 }}\n      - {{ id: 4, channel: d, upstream_model: up-d, priority: 0 }}\n",
        channel_yaml("a", &ups[0].base_url(), ""),
        channel_yaml("b", &ups[1].base_url(), ""),
        channel_yaml("c", &ups[2].base_url(), ""),
        channel_yaml("d", &ups[3].base_url(), ""),
    );
    let config = write_config("pause", &yaml);
    let p = Proxy::start(&config, &redis, &prefix).await;
    let q = Proxy::start(&config, &redis, &prefix).await;
    const COOL: &str = r#"{"model":"cool","messages":[{"role":"user","content":"hello"}]}"#;

    // Load on both proxies until told to stop: every request must succeed.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut load = Vec::new();
    for proxy in [&p, &q] {
        for _ in 0..4 {
            let (url, stop) = (proxy.url.clone(), stop.clone());
            load.push(tokio::spawn(async move {
                let (mut ok, mut failed) = (0u32, Vec::new());
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    match http(&url, "POST", "/v1/chat/completions", CHAT, &[]).await {
                        Ok(r) if r.status == 200 => ok += 1,
                        other => failed.push(format!("{other:?}")),
                    }
                }
                (ok, failed)
            }));
        }
    }
    // Under way before the pause.
    let deadline = Instant::now() + Duration::from_secs(10);
    while ups[0].hits() < 100 {
        assert!(Instant::now() < deadline, "the load never got going");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    // Redis stops answering every client for 500 ms.
    let mut admin = redis::Client::open(redis.as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(500)
        .arg("ALL")
        .query(&mut admin)
        .unwrap();
    let resumed = Instant::now() + Duration::from_millis(500);
    // While paused, one 503 from `c` through P cools member 3 in P's view (P fails over to d).
    ups[2].on(Matcher::any(), Behavior::status(503).times(1));
    let r = http(&p.url, "POST", "/v1/chat/completions", COOL, &[])
        .await
        .unwrap();
    assert_eq!((r.status, r.channel().as_str()), (200, "d"), "{}", r.body);
    assert_eq!(ups[2].hits(), 1);
    assert!(
        Instant::now() < resumed,
        "the probe request took until Redis resumed: the test proves nothing on this machine"
    );

    // Agreement is restored within one second of Redis resuming: Q is asked only then (a
    // request that reached `c` through Q would succeed and clear the cooldown, so Q's view is
    // read once, at the bound), with half a second of margin for a loaded machine.
    tokio::time::sleep_until((resumed + Duration::from_millis(1_500)).into()).await;
    for _ in 0..5 {
        let r = http(&q.url, "POST", "/v1/chat/completions", COOL, &[])
            .await
            .unwrap();
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(
            r.channel(),
            "d",
            "Q still tried the member P cooled while Redis was paused"
        );
        assert_eq!(r.header("x-switchyard-attempts"), "1");
    }
    assert_eq!(ups[2].hits(), 1, "Q sent a request to the cooled member");

    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (mut ok, mut failed) = (0, Vec::new());
    for task in load {
        let (o, f) = task.await.unwrap();
        ok += o;
        failed.extend(f);
    }
    eprintln!(
        "load around the Redis pause: {ok} requests ok, {} failed",
        failed.len()
    );
    assert!(
        ok >= 200,
        "only {ok} requests: not the load the test is about"
    );
    assert!(
        failed.is_empty(),
        "requests failed around the pause: {failed:?}"
    );

    // Each proxy measured the other's updates: the lag histogram is on /metrics and has moved.
    for proxy in [&p, &q] {
        let page = http(&proxy.url, "GET", "/metrics", "", &[]).await.unwrap();
        assert_eq!(page.status, 200);
        assert!(
            page.body
                .contains("# TYPE switchyard_redis_propagation_lag_seconds histogram"),
            "{}",
            page.body
        );
        let count = sample(&page.body, "switchyard_redis_propagation_lag_seconds_count");
        assert!(count.is_some_and(|n| n > 0.0), "{}", page.body);
        let age = sample(&page.body, "switchyard_redis_last_sync_age_seconds");
        assert!(age.is_some_and(f64::is_finite), "{}", page.body);
    }
    drop((p, q));
    let _ = std::fs::remove_file(config);
}
