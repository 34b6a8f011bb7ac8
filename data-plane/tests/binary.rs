//! The real `switchyard-data-plane` binary: standalone YAML, reload on change, bad config exit,
//! graceful shutdown on SIGTERM with a request in flight.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{send, CHAT, TOKEN};
use http::Method;

const BIN: &str = env!("CARGO_BIN_EXE_switchyard-data-plane");

fn config(extra_route: &str) -> String {
    format!(
        "channels:\n  - name: sim\n    provider: mock\n    mock: {{ latency_ms: 400 }}\nroutes:\n  - model_pattern: m\n    members:\n      - {{ channel: sim }}\n{extra_route}tokens:\n  - name: t\n    token: {TOKEN}\n"
    )
}

fn temp_file(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("switchyard-dp-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("config.yaml");
    std::fs::write(&path, text).unwrap();
    path
}

struct Running {
    child: Child,
    url: String,
    /// The binary's stdout, line by line, from after the "listening" line.
    lines: Option<mpsc::Receiver<String>>,
    /// The stdout lines before the "listening" one.
    early: Vec<String>,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Running {
    /// Reads the binary's log until a line whose message is `message` (10 s at most).
    fn wait_for_log(&self, message: &str) -> serde_json::Value {
        let lines = self.lines.as_ref().unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let line = lines
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
                .unwrap_or_else(|_| panic!("never logged {message:?}"));
            let log: serde_json::Value = serde_json::from_str(&line).unwrap();
            if log["message"] == message {
                return log;
            }
        }
    }
}

fn spawn(path: &Path) -> Running {
    let mut command = Command::new(BIN);
    command
        .arg("--config")
        .arg(path)
        .env_remove("SWITCHYARD_CONTROL_PLANE");
    spawn_command(command)
}

fn spawn_command(mut command: Command) -> Running {
    // Tests that SIGTERM the binary do not wait out the production drain delay unless they ask.
    if !command
        .get_envs()
        .any(|(k, _)| k == "SWITCHYARD_DRAIN_DELAY_SECONDS")
    {
        command.env("SWITCHYARD_DRAIN_DELAY_SECONDS", "0");
    }
    let mut child = command
        .env("SWITCHYARD_HTTP_ADDR", "127.0.0.1:0")
        .env("SWITCHYARD_CONFIG_POLL_MS", "100")
        .env("RUST_LOG", "info")
        .env_remove("REDIS_URL")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    // Owned by the guard from here on, so every path kills and waits for it.
    let mut running = Running {
        child,
        url: String::new(),
        lines: None,
        early: Vec::new(),
    };
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        let Ok(line) = rx.recv_timeout(Duration::from_millis(200)) else {
            continue;
        };
        let log: serde_json::Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("not a JSON log line ({e}): {line}"));
        if log["message"] == "listening" {
            let addr = log["addr"].as_str().unwrap().to_owned();
            // The reader thread keeps draining stdout into the (unbounded) channel, so the
            // process never blocks on a full pipe.
            running.lines = Some(rx);
            running.url = format!("http://{addr}");
            return running;
        }
        running.early.push(line);
    }
    panic!("the binary never logged its listen address");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_serves_reloads_and_drains_on_sigterm() {
    let path = temp_file("serve", &config(""));
    let mut running = spawn(&path);
    let chat = format!("{}/v1/chat/completions", running.url);
    let reply = send(Method::POST, &chat, Some(TOKEN), CHAT.into(), &[]).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.header("x-switchyard-channel"), "sim");

    // A broken edit is rejected and the last good snapshot keeps serving.
    std::fs::write(&path, "routes: [ {model_pattern: 7").unwrap();
    running.wait_for_log("configuration change rejected; keeping the last good snapshot");
    assert_eq!(
        send(Method::POST, &chat, Some(TOKEN), CHAT.into(), &[])
            .await
            .status,
        200
    );

    // A valid edit is picked up without a restart.
    std::fs::write(
        &path,
        config("  - model_pattern: m2\n    members:\n      - { channel: sim }\n"),
    )
    .unwrap();
    let m2 = r#"{"model":"m2","messages":[{"role":"user","content":"x"}]}"#;
    let mut reloaded = false;
    for _ in 0..50 {
        if send(Method::POST, &chat, Some(TOKEN), m2.into(), &[])
            .await
            .status
            == 200
        {
            reloaded = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(reloaded, "the new route never appeared");

    // SIGTERM with a request in flight: it completes, then the process exits 0.
    let in_flight = tokio::spawn({
        let chat = chat.clone();
        async move { send(Method::POST, &chat, Some(TOKEN), CHAT.into(), &[]).await }
    });
    // In flight: the simulated upstream holds it for 400 ms.
    let metrics_url = format!("{}/metrics", running.url);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let page = send(Method::GET, &metrics_url, None, Vec::new(), &[])
            .await
            .body;
        if metric(&page, "switchyard_channel_in_flight{channel=\"sim\"}") >= 1.0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the request never went in flight"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let pid = running.child.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let reply = in_flight.await.unwrap();
    assert_eq!(
        reply.status, 200,
        "the in-flight request finished during the drain"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(status) = running.child.try_wait().unwrap() {
            assert!(status.success(), "exit status {status}");
            break;
        }
        assert!(Instant::now() < deadline, "did not exit after SIGTERM");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[test]
fn bad_configuration_exits_non_zero_with_a_one_line_reason() {
    let path = temp_file(
        "bad",
        "channels:\n  - name: a\n    provider: mock\nroutes:\n  - model_pattern: m\n    members:\n      - { channel: missing }\n",
    );
    let out = Command::new(BIN)
        .arg("--config")
        .arg(&path)
        .env("SWITCHYARD_HTTP_ADDR", "127.0.0.1:0")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(
        lines[0].contains("routes[0].members[0].channel: unknown channel \"missing\""),
        "{stderr}"
    );

    let out = Command::new(BIN)
        .env_remove("SWITCHYARD_CONTROL_PLANE")
        .env_remove("SWITCHYARD_CONFIG")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no snapshot source"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleet_mode_serves_the_cached_snapshot_while_the_control_plane_is_unreachable() {
    let parts = switchyard_data_plane::config::parse_yaml(&config(""), 42).unwrap();
    let dir = temp_file("cache", "").parent().unwrap().to_owned();
    let cache = dir.join("snapshot.json");
    switchyard_data_plane::cache::save(&cache, &switchyard_engine::Snapshot::new(parts)).unwrap();
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let mut command = Command::new(BIN);
    command
        .env("SWITCHYARD_CONTROL_PLANE", format!("http://{closed}"))
        .env("SWITCHYARD_SNAPSHOT_CACHE", &cache);
    let running = spawn_command(command);
    let ready = send(
        Method::GET,
        &format!("{}/readyz", running.url),
        None,
        vec![],
        &[],
    )
    .await;
    assert_eq!(ready.status, 200, "{}", ready.body);
    assert!(ready.body.contains("revision 42"), "{}", ready.body);
    let chat = format!("{}/v1/chat/completions", running.url);
    assert_eq!(
        send(Method::POST, &chat, Some(TOKEN), CHAT.into(), &[])
            .await
            .status,
        200
    );
}

/// A proxy holding a channel the control plane sent without its secrets (it has no fleet token)
/// says so: in its log, in `/readyz`, and in the 503 of a request that only that channel serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_channel_sent_without_its_secrets_is_named_in_the_log_readyz_and_the_503() {
    let mut parts = switchyard_data_plane::config::parse_yaml(&config(""), 43).unwrap();
    parts.channels[0].secrets_withheld = true;
    let dir = temp_file("withheld", "").parent().unwrap().to_owned();
    let cache = dir.join("snapshot.json");
    switchyard_data_plane::cache::save(&cache, &switchyard_engine::Snapshot::new(parts)).unwrap();
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let mut command = Command::new(BIN);
    command
        .env("SWITCHYARD_CONTROL_PLANE", format!("http://{closed}"))
        .env("SWITCHYARD_SNAPSHOT_CACHE", &cache);
    let running = spawn_command(command);

    let warning = running
        .early
        .iter()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|l| l["level"] == "WARN" && l["message"].as_str().unwrap().contains("fleet token"));
    let warning = warning.unwrap_or_else(|| panic!("no warning in {:?}", running.early));
    assert!(warning.to_string().contains("sim"), "{warning}");

    let ready = send(
        Method::GET,
        &format!("{}/readyz", running.url),
        None,
        vec![],
        &[],
    )
    .await;
    assert_eq!(ready.status, 200, "{}", ready.body);
    assert!(
        ready.body.contains("secrets_withheld") && ready.body.contains("sim"),
        "{}",
        ready.body
    );

    let chat = format!("{}/v1/chat/completions", running.url);
    let reply = send(Method::POST, &chat, Some(TOKEN), CHAT.into(), &[]).await;
    assert_eq!(reply.status, 503, "{}", reply.body);
    let body: serde_json::Value = serde_json::from_str(&reply.body).unwrap();
    assert_eq!(body["error"]["code"], "no_eligible_member");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("`secrets_withheld`"), "{message}");
    assert!(message.contains("SWITCHYARD_FLEET_TOKEN"), "{message}");
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

fn metric(page: &str, name: &str) -> f64 {
    page.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("{name} missing from /metrics"))
}

/// Connections that send nothing, or a request line and then nothing (slowloris), far more than
/// the connection cap: a real request is still served, the cap holds, the slow ones are closed by
/// the header deadline, and memory goes back to where it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_and_slow_connections_cannot_lock_out_a_real_request() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let path = temp_file("hostile", &config(""));
    let mut command = Command::new(BIN);
    command
        .arg("--config")
        .arg(&path)
        .env_remove("SWITCHYARD_CONTROL_PLANE")
        .env("SWITCHYARD_MAX_CONNECTIONS", "256")
        .env("SWITCHYARD_HEADER_TIMEOUT_MS", "2000")
        .env("SWITCHYARD_BODY_TIMEOUT_MS", "1000");
    let running = spawn_command(command);
    let pid = running.child.id();
    let addr = running.url.trim_start_matches("http://").to_owned();
    let chat = format!("{}/v1/chat/completions", running.url);
    let metrics_url = format!("{}/metrics", running.url);
    assert_eq!(
        send(Method::POST, &chat, Some(TOKEN), CHAT.into(), &[])
            .await
            .status,
        200
    );
    let baseline = rss_kib(pid);

    let mut hostile = Vec::new();
    for i in 0..3_000 {
        let Ok(mut stream) = tokio::net::TcpStream::connect(&addr).await else {
            continue;
        };
        if i % 2 == 0 {
            let _ = stream
                .write_all(b"POST /v1/chat/completions HTTP/1.1\r\n")
                .await;
        }
        hostile.push(stream);
    }
    // A real client still gets its answer, at once and not after the attack ends.
    let reply = tokio::time::timeout(
        Duration::from_secs(10),
        send(Method::POST, &chat, Some(TOKEN), CHAT.into(), &[]),
    )
    .await
    .expect("a real request was locked out");
    assert_eq!(reply.status, 200, "{}", reply.body);
    let page = send(Method::GET, &metrics_url, None, Vec::new(), &[])
        .await
        .body;
    assert!(
        metric(&page, "switchyard_http_connections") <= 256.0,
        "{page}"
    );
    assert!(metric(&page, "switchyard_http_connections_evicted_total") > 0.0);

    // A slowloris dripping one header byte at a time is closed by the header deadline.
    let mut drip = tokio::net::TcpStream::connect(&addr).await.unwrap();
    drip.write_all(b"POST /v1/chat/completions HTTP/1.1\r\n")
        .await
        .unwrap();
    let closed = tokio::time::timeout(Duration::from_secs(15), async {
        let mut buf = [0u8; 256];
        loop {
            if drip.write_all(b"x").await.is_err() {
                return;
            }
            match tokio::time::timeout(Duration::from_millis(300), drip.read(&mut buf)).await {
                Ok(Ok(0)) | Ok(Err(_)) => return,
                _ => {}
            }
        }
    })
    .await;
    assert!(closed.is_ok(), "the slow header sender was never cut off");

    // A body that never completes gets a 408 at the body deadline.
    let mut slow_body = tokio::net::TcpStream::connect(&addr).await.unwrap();
    slow_body
        .write_all(format!("POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {TOKEN}\r\ncontent-type: application/json\r\ncontent-length: 500\r\n\r\n{{\"model\"").as_bytes())
        .await
        .unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(15), slow_body.read_to_end(&mut answer)).await;
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("request_body_timeout"), "{answer}");

    // A request head over the limit gets a JSON 431.
    let big = "a".repeat(40 * 1024);
    let reply = send(
        Method::POST,
        &chat,
        Some(TOKEN),
        CHAT.into(),
        &[("x-padding", big.as_str())],
    )
    .await;
    assert_eq!(reply.status, 431, "{}", reply.body);
    assert_eq!(reply.json()["error"]["code"], "request_header_too_large");

    drop(hostile);
    // Back to baseline: every hostile connection is gone, and so is the memory they held.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let page = send(Method::GET, &metrics_url, None, Vec::new(), &[])
            .await
            .body;
        if metric(&page, "switchyard_http_connections") <= 2.0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "connections did not close: {page}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let after = rss_kib(pid);
    eprintln!("RSS baseline {baseline} KiB, after the attack {after} KiB");
    assert!(
        after < baseline + 32 * 1024,
        "RSS grew from {baseline} KiB to {after} KiB"
    );
}

/// SIGTERM first takes the proxy out of rotation (`/readyz` 503) while it keeps serving for the
/// drain delay, then it stops listening and exits: a load balancer that follows readiness never
/// sends a request to a closed port.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_reports_not_ready_and_keeps_serving_through_the_drain_delay() {
    let path = temp_file("drain", &config(""));
    let mut command = Command::new(BIN);
    command
        .arg("--config")
        .arg(&path)
        .env_remove("SWITCHYARD_CONTROL_PLANE")
        .env("SWITCHYARD_DRAIN_DELAY_SECONDS", "2");
    let mut running = spawn_command(command);
    let ready = format!("{}/readyz", running.url);
    let chat = format!("{}/v1/chat/completions", running.url);
    assert_eq!(
        send(Method::GET, &ready, None, Vec::new(), &[])
            .await
            .status,
        200
    );
    let pid = running.child.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    // Not ready at once...
    let deadline = Instant::now() + Duration::from_secs(1);
    loop {
        if send(Method::GET, &ready, None, Vec::new(), &[])
            .await
            .status
            == 503
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "/readyz did not turn 503 after SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // ...yet still serving new requests during the delay (mock latency 400 ms each).
    let reply = send(Method::POST, &chat, Some(TOKEN), CHAT.into(), &[]).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(
        reply.header("connection"),
        "close",
        "keep-alive clients are told to move on"
    );
    assert!(
        running.child.try_wait().unwrap().is_none(),
        "exited before the drain delay"
    );
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if let Some(status) = running.child.try_wait().unwrap() {
            assert!(status.success(), "exit status {status}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "did not exit after the drain delay"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// An upstream refusing a channel's credential is told to the operator once per credential, with
/// the upstream's words (a key it quotes masked), however many requests meet it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_credential_is_logged_once_with_the_upstreams_words() {
    let upstream = switchyard_mock_upstream::MockUpstream::start()
        .await
        .unwrap();
    upstream.on(
        switchyard_mock_upstream::Matcher::any(),
        switchyard_mock_upstream::Behavior::status(401).body(
            r#"{"error":{"message":"Incorrect API key provided: sk-live-abcdefghijklmnop1234"}}"#,
        ),
    );
    let yaml = format!(
        "channels:\n  - name: refusing\n    provider: openai\n    base_url: {}\n    credentials: [\"k\"]\nroutes:\n  - model_pattern: m\n    members:\n      - {{ channel: refusing }}\ntokens:\n  - name: t\n    token: {TOKEN}\n",
        upstream.base_url()
    );
    let running = spawn(&temp_file("refused", &yaml));
    let chat = format!("{}/v1/chat/completions", running.url);
    for _ in 0..3 {
        let reply = send(Method::POST, &chat, Some(TOKEN), CHAT.into(), &[]).await;
        assert_eq!(reply.status, 502, "{}", reply.body);
    }
    let lines = running.lines.as_ref().unwrap();
    let (mut requests, mut told) = (0, Vec::new());
    while requests < 3 {
        let line = lines.recv_timeout(Duration::from_secs(10)).unwrap();
        let log: serde_json::Value = serde_json::from_str(&line).unwrap();
        match log["message"].as_str().unwrap_or_default() {
            "request" => requests += 1,
            m if m.starts_with("the upstream refused this channel's credential") => told.push(log),
            _ => {}
        }
    }
    assert_eq!(told.len(), 1, "{told:?}");
    assert_eq!(told[0]["channel"], "refusing");
    assert_eq!(told[0]["status"], 401);
    let said = told[0]["upstream_message"].as_str().unwrap();
    assert!(
        said.starts_with("Incorrect API key provided: sk-l****"),
        "{said}"
    );
    assert!(!said.contains("abcdefghijklmnop"), "{said}");
}

/// A restart started while the old process drains listens at once on the same address (the two
/// share the port until the old one exits) instead of failing with "address in use".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_listens_on_the_address_while_the_old_process_drains() {
    let path = temp_file("restart", &config(""));
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let start = |drain: &str| {
        let mut command = Command::new(BIN);
        command
            .arg("--config")
            .arg(&path)
            .args(["--http-addr", &addr])
            .env_remove("SWITCHYARD_CONTROL_PLANE")
            .env("SWITCHYARD_DRAIN_DELAY_SECONDS", drain);
        spawn_command(command)
    };
    let mut old = start("3");
    let ready = format!("{}/readyz", old.url);
    let pid = old.child.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    old.wait_for_log("SIGTERM: reporting not ready, still serving for the drain delay");
    // Started during the old process's drain delay: it must come up, not exit on the taken port.
    let new = start("0");
    assert_eq!(new.url, format!("http://{addr}"));
    let deadline = Instant::now() + Duration::from_secs(15);
    while old.child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "the old process did not exit");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The old one gone, the restart serves the address alone.
    assert_eq!(
        send(Method::GET, &ready, None, Vec::new(), &[])
            .await
            .status,
        200
    );
    let chat = format!("{}/v1/chat/completions", new.url);
    let reply = send(Method::POST, &chat, Some(TOKEN), CHAT.into(), &[]).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
}

/// The request line is written when the request has finished — for a stream, after its last
/// event — with the attempt trail and usage as JSON values, not strings.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streams_request_line_is_written_when_it_ends_with_json_fields() {
    let yaml = format!(
        "channels:\n  - name: sim\n    provider: mock\n    mock: {{ stream_chunks: 5, chunk_gap_ms: 150 }}\nroutes:\n  - model_pattern: m\n    members:\n      - {{ channel: sim }}\ntokens:\n  - name: the-app\n    token: {TOKEN}\n"
    );
    let path = temp_file("record", &yaml);
    let running = spawn(&path);
    let chat = format!("{}/v1/chat/completions", running.url);
    let body = r#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
    let reply = send(
        Method::POST,
        &chat,
        Some(TOKEN),
        body.into(),
        &[("x-request-id", "client-chosen-id-42")],
    )
    .await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.header("x-request-id"), "client-chosen-id-42");
    assert_eq!(
        reply.header("x-switchyard-request-id"),
        "client-chosen-id-42"
    );
    let record = running.wait_for_log("request");
    assert_eq!(record["request_id"], "client-chosen-id-42");
    assert_eq!(record["token"], "the-app");
    assert_eq!(record["route"], "m");
    // Only known once the stream has ended: written then, not when its headers went out.
    assert_eq!(record["stream"]["outcome"], "completed");
    assert!(record["stream"]["bytes"].as_u64().unwrap() > 0);
    assert!(record["attempts"].is_array(), "{record}");
    assert_eq!(record["attempts"][0]["status"], 200);
    assert!(record["usage"].is_object(), "{record}");
    assert!(record["timestamp"].as_str().unwrap().ends_with('Z'));
}

/// A files call is a request like any other: its line names the endpoint `files`, the key, the
/// route and channel the upload went to, the status and the latency, and never the file's
/// content or an id of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_files_call_writes_its_request_line() {
    let upstream = switchyard_mock_upstream::MockUpstream::start()
        .await
        .unwrap();
    let yaml = format!(
        "channels:\n  - name: keeper\n    provider: openai\n    base_url: {}\n    credentials: [\"k\"]\nroutes:\n  - model_pattern: m\n    members:\n      - {{ channel: keeper }}\ntokens:\n  - name: the-app\n    token: {TOKEN}\n",
        upstream.base_url()
    );
    let running = spawn(&temp_file("files-line", &yaml));
    let body = "--b\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nassistants\r\n--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"notes.txt\"\r\n\r\nthe-notes-content\r\n--b--\r\n";
    let reply = send(
        Method::POST,
        &format!("{}/v1/files", running.url),
        Some(TOKEN),
        body.into(),
        &[
            ("content-type", "multipart/form-data; boundary=b"),
            ("x-switchyard-model", "m"),
            ("x-request-id", "files-call-7"),
        ],
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.header("x-switchyard-request-id"), "files-call-7");
    let id = reply.json()["id"].as_str().unwrap().to_owned();
    let record = running.wait_for_log("request");
    assert_eq!(record["request_id"], "files-call-7");
    assert_eq!(record["endpoint"], "files");
    assert_eq!(record["protocol"], "openai");
    assert_eq!(record["token"], "the-app");
    assert_eq!(record["route"], "m");
    assert_eq!(record["final_channel"], "keeper");
    assert_eq!(record["status"], 200);
    assert!(record["latency_ms"].as_f64().unwrap() >= 0.0, "{record}");
    let line = record.to_string();
    for secret in ["the-notes-content", id.as_str(), "file-mock", TOKEN] {
        assert!(!line.contains(secret), "{secret} in {line}");
    }
}

/// A TLS upstream offering HTTP/2, reached by trusting its certificate with
/// `SWITCHYARD_UPSTREAM_CA`: answers and streams go over HTTP/2; with
/// `SWITCHYARD_UPSTREAM_HTTP2=false`, over HTTP/1.1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_upstream_is_reached_over_http2_with_the_operators_ca() {
    use switchyard_mock_upstream::{MockOptions, MockUpstream};
    let mock = MockUpstream::start_with(MockOptions {
        tls: true,
        ..MockOptions::default()
    })
    .await
    .unwrap();
    assert!(mock.base_url().starts_with("https://localhost:"));
    let dir = std::env::temp_dir().join(format!("switchyard-dp-{}-tls", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ca = dir.join("upstream-ca.pem");
    std::fs::write(&ca, mock.certificate_pem().unwrap()).unwrap();
    let yaml = format!(
        "channels:\n{}routes:\n  - model_pattern: m\n    members:\n      - {{ channel: up }}\ntokens:\n  - name: t\n    token: {TOKEN}\n",
        common::channel("up", &format!("{}/v1", mock.base_url()), &["sk-up"])
    );
    let path = temp_file("tls", &yaml);
    for (http2, version) in [
        ("true", http::Version::HTTP_2),
        ("false", http::Version::HTTP_11),
    ] {
        mock.reset();
        let mut command = Command::new(BIN);
        command
            .arg("--config")
            .arg(&path)
            .env_remove("SWITCHYARD_CONTROL_PLANE")
            .env("SWITCHYARD_UPSTREAM_CA", &ca)
            .env("SWITCHYARD_UPSTREAM_HTTP2", http2);
        let running = spawn_command(command);
        let chat = format!("{}/v1/chat/completions", running.url);
        for stream in [false, true] {
            let body = format!(
                r#"{{"model":"m","stream":{stream},"messages":[{{"role":"user","content":"hi"}}]}}"#
            );
            let reply = send(Method::POST, &chat, Some(TOKEN), body.into(), &[]).await;
            assert_eq!(reply.status, 200, "{}", reply.body);
            assert!(reply.body.contains("choices"), "{}", reply.body);
        }
        let versions: Vec<_> = mock.requests().iter().map(|r| r.version).collect();
        assert_eq!(versions, vec![version; 2], "HTTP/2 offered: {http2}");
    }
    // Without the CA the upstream's certificate is not trusted: no request reaches it.
    mock.reset();
    let running = spawn(&path);
    let chat = format!("{}/v1/chat/completions", running.url);
    let body = r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#;
    let reply = send(Method::POST, &chat, Some(TOKEN), body.into(), &[]).await;
    assert!(reply.status >= 500, "{} {}", reply.status, reply.body);
    assert_eq!(mock.requests().len(), 0);
}

#[test]
fn an_upstream_ca_file_without_a_certificate_stops_the_start() {
    let path = temp_file("bad-ca", &config(""));
    let ca = path.with_file_name("not-a-ca.pem");
    std::fs::write(&ca, "hello\n").unwrap();
    let output = Command::new(BIN)
        .arg("--config")
        .arg(&path)
        .env_remove("SWITCHYARD_CONTROL_PLANE")
        .env("SWITCHYARD_HTTP_ADDR", "127.0.0.1:0")
        .env("SWITCHYARD_UPSTREAM_CA", &ca)
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("SWITCHYARD_UPSTREAM_CA") && stderr.contains("no PEM certificate"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_metrics_credential_guards_metrics_which_then_names_tokens() {
    let path = temp_file("metrics-credential", &config(""));
    let mut command = Command::new(BIN);
    command
        .arg("--config")
        .arg(&path)
        .env_remove("SWITCHYARD_CONTROL_PLANE")
        .env("SWITCHYARD_METRICS_TOKEN", "scrape-secret");
    let running = spawn_command(command);
    let chat = format!("{}/v1/chat/completions", running.url);
    let reply = send(Method::POST, &chat, Some(TOKEN), CHAT.into(), &[]).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let metrics = format!("{}/metrics", running.url);
    for credential in [None, Some(TOKEN)] {
        let refused = send(Method::GET, &metrics, credential, Vec::new(), &[]).await;
        assert_eq!(refused.status, 401, "{}", refused.body);
        assert!(!refused.body.contains("switchyard_"), "{}", refused.body);
    }
    let page = send(
        Method::GET,
        &metrics,
        Some("scrape-secret"),
        Vec::new(),
        &[],
    )
    .await;
    assert_eq!(page.status, 200);
    assert!(
        page.body.contains(r#"token="t",kind="input""#),
        "{}",
        page.body
    );
}

/// Sends `request` on a fresh connection; what is answered until the close (5 s at most).
async fn raw_exchange(url: &str, request: String) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = url.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut out))
        .await
        .expect("no answer and close within 5 s")
        .unwrap();
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_refuses_smuggling_framing_and_impossible_chunks_at_once() {
    let path = temp_file("framing", &config(""));
    let running = spawn(&path);
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {TOKEN}\r\ncontent-type: application/json\r\n"
    );
    for framing in [
        "content-length: 5\r\ntransfer-encoding: chunked\r\n",
        "transfer-encoding: chunked\r\ncontent-length: 5\r\n",
    ] {
        let answer = raw_exchange(&running.url, format!("{head}{framing}\r\n0\r\n\r\n")).await;
        assert!(answer.starts_with("HTTP/1.1 400 "), "{answer}");
        assert!(answer.contains("\"code\":\"bad_request\""), "{answer}");
    }
    let answer = raw_exchange(
        &running.url,
        format!("{head}content-length: 18446744073709551615\r\n\r\n{{}}"),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 413 "), "{answer}");
    // Not at the body deadline (60 s): at the size line.
    let answer = raw_exchange(
        &running.url,
        format!("{head}transfer-encoding: chunked\r\n\r\nffffffffffffffff\r\n{{}}"),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 400 "), "{answer}");
    assert!(answer.contains("body_read_error"), "{answer}");
}

/// A listener on loopback serving each connection with `serve` (bound and spawned at once).
async fn scripted_listener<F, Fut>(serve: F) -> std::net::SocketAddr
where
    F: Fn(tokio::net::TcpStream) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            tokio::spawn(serve(socket));
        }
    });
    addr
}

/// A transport failure names its cause to the client (in the error's message, its code
/// unchanged), in the request line (the attempt's `cause`) and in
/// `switchyard_upstream_transport_failures_total`: a closed port is `refused`, a name that cannot
/// resolve `dns`, an upstream that accepts and closes without answering `reset`, TLS against a
/// plain listener `tls`, an upstream that never answers `timeout`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transport_failure_names_its_cause_to_the_client_the_log_and_the_metrics() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let closed_port = closed.local_addr().unwrap().port();
    drop(closed);
    // Reads the request, then closes without a word.
    let reset = scripted_listener(|mut socket| async move {
        let _ = socket.read(&mut [0u8; 8192]).await;
    })
    .await;
    // Plain HTTP where TLS is expected.
    let plain = scripted_listener(|mut socket| async move {
        let _ = socket.read(&mut [0u8; 8192]).await;
        let _ = socket
            .write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")
            .await;
    })
    .await;
    // Accepts and never answers.
    let silent = scripted_listener(|socket| async move {
        tokio::time::sleep(Duration::from_secs(30)).await;
        drop(socket);
    })
    .await;
    let cases = [
        ("refused", format!("http://127.0.0.1:{closed_port}/v1"), 502),
        (
            "dns",
            "http://upstream.switchyard.invalid/v1".to_owned(),
            502,
        ),
        ("reset", format!("http://{reset}/v1"), 502),
        ("tls", format!("https://127.0.0.1:{}/v1", plain.port()), 502),
        ("timeout", format!("http://{silent}/v1"), 504),
    ];
    let mut yaml =
        "settings:\n  channel_retry_times: 0\n  first_byte_timeout_ms: 500\nchannels:\n".to_owned();
    for (cause, url, _) in &cases {
        yaml.push_str(&format!(
            "  - name: c-{cause}\n    provider: openai\n    base_url: {url}\n    credentials: [\"sk-cause-secret\"]\n"
        ));
    }
    yaml.push_str("routes:\n");
    for (cause, _, _) in &cases {
        yaml.push_str(&format!(
            "  - model_pattern: m-{cause}\n    members:\n      - {{ channel: c-{cause}, upstream_model: up }}\n"
        ));
    }
    yaml.push_str(&format!("tokens:\n  - name: t\n    token: {TOKEN}\n"));
    let path = temp_file("transport-causes", &yaml);
    let running = spawn(&path);
    for (cause, _, status) in &cases {
        let body =
            format!(r#"{{"model":"m-{cause}","messages":[{{"role":"user","content":"hi"}}]}}"#);
        let reply = send(
            Method::POST,
            &format!("{}/v1/chat/completions", running.url),
            Some(TOKEN),
            body.into_bytes(),
            &[],
        )
        .await;
        assert_eq!(reply.status, *status, "{cause}: {}", reply.body);
        let error = &reply.json()["error"];
        let code = if *status == 504 {
            "upstream_timeout"
        } else {
            "upstream_unreachable"
        };
        assert_eq!(error["code"], code, "{cause}: {}", reply.body);
        let message = error["message"].as_str().unwrap();
        assert!(
            message.contains(&format!("cause `{cause}`")),
            "{cause}: {message}"
        );
        assert!(!reply.body.contains("sk-cause-secret"), "{}", reply.body);
        let line = running.wait_for_log("request");
        assert_eq!(line["model"], format!("m-{cause}"), "{line}");
        assert_eq!(line["attempts"][0]["cause"], *cause, "{line}");
    }
    let page = send(
        Method::GET,
        &format!("{}/metrics", running.url),
        None,
        Vec::new(),
        &[],
    )
    .await;
    for (cause, _, _) in &cases {
        let series = format!(
            "switchyard_upstream_transport_failures_total{{channel=\"c-{cause}\",cause=\"{cause}\"}} 1"
        );
        assert!(
            page.body.contains(&series),
            "{series} missing:\n{}",
            page.body
        );
    }
}
