//! The failover drill (`scripts/failover-drill`, docs/src/guides/failover-drill.md) run against a local
//! fleet of real processes: a control plane (its own database, `REDIS_URL`) and proxies following
//! it, sharing one Redis under a prefix of their own. It passes there, leaving nothing behind and
//! the probe interval restored; it fails with a readable report (non-zero exit, the failing step
//! named with what it expected and saw, the later steps skipped) when a step cannot pass — a
//! wrong admin token, a fleet whose breaker is off — and still cleans up, also when it is stopped
//! by SIGTERM mid-drill.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use switchyard_e2e::fleet::{cleanup, free_port, http, unique};
use switchyard_e2e::redis_url;

const CONTROL_PLANE: &str = env!("CARGO_BIN_EXE_e2e-control-plane");
const DATA_PLANE: &str = env!("CARGO_BIN_EXE_e2e-data-plane");
const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/failover-drill");
const ADMIN_TOKEN: &str = "e2e-drill-admin-token-0123456789";
const FLEET_TOKEN: &str = "e2e-drill-fleet-token-0123456789";
const PATIENCE: Duration = Duration::from_secs(60);

/// A process SIGKILLed on drop.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A control plane with shared state and `proxies` proxies following it, on free ports.
struct Fleet {
    control_plane: String,
    proxies: Vec<String>,
    prefix: String,
    redis: String,
    _processes: Vec<Running>,
}

impl Drop for Fleet {
    fn drop(&mut self) {
        cleanup(&self.redis, &self.prefix);
    }
}

async fn wait_ready(addr: &str, what: &str) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Ok(r) = http(addr, "GET", "/readyz", "", &[]).await {
            if r.status == 200 {
                return;
            }
        }
        assert!(Instant::now() < deadline, "{what} never became ready");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

impl Fleet {
    async fn start(opts: &PgConnectOptions, proxies: usize) -> Fleet {
        let database_url = format!(
            "postgres://{}@{}:{}/{}",
            opts.get_username(),
            opts.get_host(),
            opts.get_port(),
            opts.get_database().unwrap_or("postgres")
        );
        let redis = redis_url();
        let prefix = unique("drill");
        let (http_addr, grpc_addr) = (
            format!("127.0.0.1:{}", free_port()),
            format!("127.0.0.1:{}", free_port()),
        );
        let mut processes = vec![Running(
            Command::new(CONTROL_PLANE)
                .env("DATABASE_URL", &database_url)
                .env("SWITCHYARD_ADMIN_TOKEN", ADMIN_TOKEN)
                .env("SWITCHYARD_FLEET_TOKEN", FLEET_TOKEN)
                .env("SWITCHYARD_HTTP_ADDR", &http_addr)
                .env("SWITCHYARD_GRPC_ADDR", &grpc_addr)
                .env("REDIS_URL", &redis)
                .env("SWITCHYARD_REDIS_PREFIX", &prefix)
                .env("SWITCHYARD_RECOVERY_TICK_MS", "200")
                .env("RUST_LOG", "warn")
                .stdout(Stdio::null())
                .stderr(Stdio::inherit())
                .spawn()
                .unwrap(),
        )];
        wait_ready(&http_addr, "the control plane").await;
        let mut urls = Vec::new();
        for _ in 0..proxies {
            let addr = format!("127.0.0.1:{}", free_port());
            processes.push(Running(
                Command::new(DATA_PLANE)
                    .env_remove("SWITCHYARD_CONFIG")
                    .env_remove("SWITCHYARD_SNAPSHOT_CACHE")
                    .env("SWITCHYARD_CONTROL_PLANE", format!("http://{grpc_addr}"))
                    .env("SWITCHYARD_FLEET_TOKEN", FLEET_TOKEN)
                    .env("SWITCHYARD_HTTP_ADDR", &addr)
                    .env("REDIS_URL", &redis)
                    .env("SWITCHYARD_REDIS_PREFIX", &prefix)
                    .env("RUST_LOG", "warn")
                    .stdout(Stdio::null())
                    .stderr(Stdio::inherit())
                    .spawn()
                    .unwrap(),
            ));
            wait_ready(&addr, "a proxy").await;
            urls.push(format!("http://{addr}"));
        }
        Fleet {
            control_plane: format!("http://{http_addr}"),
            proxies: urls,
            prefix,
            redis,
            _processes: processes,
        }
    }

    /// Runs the drill; `args` come after the fleet's URLs and the admin token.
    fn drill(&self, admin_token: &str, args: &[&str]) -> Output {
        let mut command = Command::new("bash");
        command
            .arg(SCRIPT)
            .args(["--control-plane", &self.control_plane])
            .env("SWITCHYARD_ADMIN_TOKEN", admin_token);
        for proxy in &self.proxies {
            command.args(["--data-plane", proxy]);
        }
        command.args(args).output().unwrap()
    }

    /// An admin API call through curl (the drill's own client); the answer as JSON.
    fn admin(&self, method: &str, path: &str, body: Option<&str>) -> Value {
        let mut command = Command::new("curl");
        command
            .args(["-sf", "-X", method, "-H"])
            .arg(format!("Authorization: Bearer {ADMIN_TOKEN}"))
            .args(["-H", "Content-Type: application/json"])
            .arg(format!("{}{path}", self.control_plane));
        if let Some(body) = body {
            command.args(["-d", body]);
        }
        let out = command.output().unwrap();
        assert!(out.status.success(), "{method} {path} failed");
        serde_json::from_slice(&out.stdout).unwrap()
    }

    /// Nothing the drill created is left, and the probe interval is `interval` again.
    fn assert_left_clean(&self, interval: u64) {
        for (path, key) in [
            ("/api/v1/channels?limit=500", "name"),
            ("/api/v1/routes?limit=500", "model_pattern"),
            ("/api/v1/tokens?limit=500", "name"),
        ] {
            let page = self.admin("GET", path, None);
            let left: Vec<&Value> = page["data"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|r| r[key].as_str().unwrap_or("").contains("drill"))
                .collect();
            assert!(left.is_empty(), "the drill left {left:?} at {path}");
        }
        let settings = self.admin("GET", "/api/v1/settings", None);
        assert_eq!(
            settings["recovery_probe_interval_seconds"], interval,
            "the probe interval was not restored"
        );
    }
}

/// The report's lines on stdout.
fn report(out: &Output) -> Vec<String> {
    let text = String::from_utf8_lossy(&out.stdout);
    eprintln!("--- the drill's report ---\n{text}");
    text.lines().map(str::to_owned).collect()
}

fn line<'a>(lines: &'a [String], start: &str) -> &'a str {
    lines
        .iter()
        .find(|l| l.starts_with(start))
        .unwrap_or_else(|| panic!("no report line starting {start:?} in {lines:#?}"))
}

#[sqlx::test(migrations = false)]
async fn the_drill_passes_against_a_live_fleet_and_leaves_it_as_it_was(
    _pool_opts: PgPoolOptions,
    opts: PgConnectOptions,
) {
    let fleet = Fleet::start(&opts, 2).await;
    let out = fleet.drill(
        ADMIN_TOKEN,
        &[
            "--requests",
            "6",
            "--probe-interval",
            "1",
            "--step-timeout",
            "45",
        ],
    );
    let lines = report(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the drill failed ({}):\n{}\n{stderr}",
        out.status,
        lines.join("\n")
    );
    // One line per step, every one passed, then the verdict.
    let verdicts: Vec<&str> = lines
        .iter()
        .map(|l| l.split_whitespace().next().unwrap_or(""))
        .collect();
    assert_eq!(verdicts, ["PASS"; 7], "{lines:#?}");
    assert!(line(&lines, "PASS 2 normal traffic").contains("6/6 answered 200 by drill-primary"));
    assert!(line(&lines, "PASS 3 primary fails").contains("failed over (attempts 2"));
    assert!(line(&lines, "PASS 4 breaker").contains("auto_disabled (event"));
    assert!(line(&lines, "PASS 4 breaker").contains("over 2 proxies answered by drill-backup"));
    assert!(line(&lines, "PASS 5 heal").contains("recovering, ramp_factor"));
    assert!(line(&lines, "PASS 6 cleanup").contains("recovery_probe_interval_seconds back to 600"));
    assert_eq!(line(&lines, "PASS drill"), "PASS drill passed");
    fleet.assert_left_clean(600);
}

#[sqlx::test(migrations = false)]
async fn the_drill_fails_readably_when_a_step_cannot_pass(
    _pool_opts: PgPoolOptions,
    opts: PgConnectOptions,
) {
    let fleet = Fleet::start(&opts, 1).await;

    // A wrong admin token: setup fails with the API's answer; nothing else runs.
    let out = fleet.drill("not-the-admin-token-0123456789", &["--step-timeout", "10"]);
    let lines = report(&out);
    assert_eq!(out.status.code(), Some(1), "{lines:#?}");
    let setup = line(&lines, "FAIL 1 setup");
    assert!(
        setup.contains("reading the settings with the admin token: expected HTTP 200, saw 401"),
        "{setup}"
    );
    for skipped in ["SKIP 2 normal traffic", "SKIP 5 heal"] {
        line(&lines, skipped);
    }
    line(&lines, "PASS 6 cleanup: nothing to undo");
    assert_eq!(
        line(&lines, "FAIL drill"),
        "FAIL drill failed at step 1 setup"
    );

    // The breaker off: the primary fails over on every request but is never auto_disabled.
    fleet.admin(
        "PATCH",
        "/api/v1/settings",
        Some(r#"{"breaker_failure_threshold":0}"#),
    );
    let out = fleet.drill(
        ADMIN_TOKEN,
        &[
            "--requests",
            "4",
            "--probe-interval",
            "1",
            "--step-timeout",
            "6",
        ],
    );
    let lines = report(&out);
    assert_eq!(out.status.code(), Some(1), "{lines:#?}");
    line(&lines, "PASS 3 primary fails");
    let breaker = line(&lines, "FAIL 4 breaker");
    assert!(
        breaker.contains("expected drill-primary-")
            && breaker.contains(
                "auto_disabled within 6s (breaker_failure_threshold 0); saw status 'enabled'"
            ),
        "{breaker}"
    );
    line(&lines, "SKIP 5 heal");
    line(&lines, "PASS 6 cleanup");
    assert_eq!(
        line(&lines, "FAIL drill"),
        "FAIL drill failed at step 4 breaker"
    );
    fleet.assert_left_clean(600);
}

#[sqlx::test(migrations = false)]
async fn an_interrupted_drill_still_cleans_up(_pool_opts: PgPoolOptions, opts: PgConnectOptions) {
    let fleet = Fleet::start(&opts, 1).await;
    // The breaker off keeps the drill waiting in step 4 (up to its minute), where it is stopped.
    fleet.admin(
        "PATCH",
        "/api/v1/settings",
        Some(r#"{"breaker_failure_threshold":0}"#),
    );
    let mut command = Command::new("bash");
    command
        .arg(SCRIPT)
        .args(["--control-plane", &fleet.control_plane])
        .args(["--data-plane", &fleet.proxies[0]])
        .args([
            "--requests",
            "2",
            "--probe-interval",
            "1",
            "--step-timeout",
            "60",
        ])
        .env("SWITCHYARD_ADMIN_TOKEN", ADMIN_TOKEN)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = command.spawn().unwrap();
    // Wait (with a deadline) until the drill has made its primary fail: it is in step 3 or 4.
    let deadline = Instant::now() + PATIENCE;
    loop {
        let channels = fleet.admin("GET", "/api/v1/channels?limit=500", None);
        let failing = channels["data"].as_array().unwrap().iter().any(|c| {
            c["name"]
                .as_str()
                .unwrap_or("")
                .starts_with("drill-primary-")
                && c["base_url"]
                    .as_str()
                    .unwrap_or("")
                    .contains("failure_rate=1")
        });
        if failing {
            break;
        }
        assert!(Instant::now() < deadline, "the drill never reached step 3");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let out = child.wait_with_output().unwrap();
    let lines = report(&out);
    assert_eq!(out.status.code(), Some(1), "{lines:#?}");
    line(&lines, "PASS 6 cleanup: undone: route");
    let verdict = line(&lines, "FAIL drill interrupted");
    assert!(
        verdict.ends_with("during step 3 primary fails")
            || verdict.ends_with("during step 4 breaker"),
        "{verdict}"
    );
    fleet.assert_left_clean(600);
}
