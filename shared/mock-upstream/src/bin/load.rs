//! `switchyard-load`: a small closed-loop HTTP load generator for the proxy benchmark
//! (`scripts/load`). Loopback use only; every run is bounded in time and request count.
//!
//! - `run`: N workers send the same request back to back for a fixed time (or count) and print
//!   latency percentiles and throughput as JSON.
//! - `hold`: opens N SSE streams at once, reads them to the end and reports stalls (gaps between
//!   events longer than `--stall-ms`), errors and time to first byte.
//! - `report`: combines the JSON files of one `scripts/load` run into the summary.
//!
//! Both load modes can watch processes (`--watch-pid`) and report their resident memory; `run`
//! also reports the CPU time per request of the processes named by `--cpu-pid`.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use clap::{Args, Parser, Subcommand};
use http::{HeaderName, HeaderValue, Method, Request};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Value};
use tokio::time::Instant;

#[path = "load/measure.rs"]
mod measure;
#[path = "load/report.rs"]
mod report;

use measure::{percentiles, round, CpuMeter, RssWatcher};

#[derive(Debug, Parser)]
#[command(name = "switchyard-load", version, about)]
struct Cli {
    /// Tokio worker threads for the generator (keep it small: it shares the machine with the
    /// servers it measures).
    #[arg(long, global = true, default_value_t = 1)]
    threads: usize,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Closed-loop requests for a fixed time.
    Run(RunArgs),
    /// Hold N concurrent SSE streams.
    Hold(HoldArgs),
    /// Summarise the JSON results of one `scripts/load` run (a directory).
    Report { dir: PathBuf },
}

#[derive(Debug, Args)]
struct Target {
    /// Full URL, e.g. http://127.0.0.1:9000/v1/chat/completions (loopback only).
    #[arg(long)]
    url: String,
    #[arg(long, default_value = "POST")]
    method: String,
    /// Request body (JSON); default a one-message chat request.
    #[arg(long)]
    body: Option<String>,
    /// Every `{n}` in the body becomes a number no other request of this run got: each request
    /// a different body (a response cache then never answers one from another).
    #[arg(long)]
    unique_bodies: bool,
    /// Extra header, `name: value` (repeatable).
    #[arg(long = "header")]
    headers: Vec<String>,
    /// Per-request timeout.
    #[arg(long, default_value_t = 60_000)]
    timeout_ms: u64,
    /// Sample the resident memory of this process while running (repeatable).
    #[arg(long = "watch-pid")]
    watch_pids: Vec<u32>,
    /// Count this process's CPU time (user and kernel, all threads) over the measured window of
    /// `run`, reported per request; repeatable, summed (a proxy's worker processes).
    #[arg(long = "cpu-pid")]
    cpu_pids: Vec<u32>,
    /// Free-form label copied into the output.
    #[arg(long, default_value = "")]
    label: String,
}

#[derive(Debug, Args)]
struct RunArgs {
    #[command(flatten)]
    target: Target,
    #[arg(long, default_value_t = 1)]
    concurrency: usize,
    /// Measured duration.
    #[arg(long, default_value_t = 10.0)]
    duration_secs: f64,
    /// Unmeasured warm-up (opens the connections).
    #[arg(long, default_value_t = 1.0)]
    warmup_secs: f64,
    /// Stop after this many measured requests even if time remains.
    #[arg(long, default_value_t = 5_000_000)]
    max_requests: u64,
}

#[derive(Debug, Args)]
struct HoldArgs {
    #[command(flatten)]
    target: Target,
    /// Number of streams held open at the same time.
    #[arg(long)]
    streams: usize,
    /// Spread the stream openings over this long.
    #[arg(long, default_value_t = 2_000)]
    ramp_ms: u64,
    /// A gap between two events longer than this counts as a stall.
    #[arg(long, default_value_t = 2_000)]
    stall_ms: u64,
}

const DEFAULT_BODY: &str =
    r#"{"model":"mock-model","messages":[{"role":"user","content":"Say hello."}]}"#;
const STREAM_BODY: &str =
    r#"{"model":"mock-model","stream":true,"messages":[{"role":"user","content":"Say hello."}]}"#;

type HttpClient = Client<HttpConnector, Full<Bytes>>;

struct Prepared {
    client: HttpClient,
    method: Method,
    url: http::Uri,
    headers: Vec<(HeaderName, HeaderValue)>,
    body: Bytes,
    /// With `--unique-bodies`: the body's text, whose `{n}` each request numbers anew.
    numbered: Option<(String, AtomicU64)>,
    timeout: Duration,
}

impl Prepared {
    fn new(target: &Target, default_body: &str, pool: usize) -> Result<Self, String> {
        let url: http::Uri = target
            .url
            .parse()
            .map_err(|e| format!("--url {}: {e}", target.url))?;
        let host = url.host().unwrap_or("");
        if !(host == "localhost" || host.starts_with("127.") || host == "[::1]") {
            return Err(format!(
                "--url {}: only loopback targets are allowed",
                target.url
            ));
        }
        let mut headers = vec![(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )];
        for h in &target.headers {
            let (name, value) = h
                .split_once(':')
                .ok_or_else(|| format!("--header {h:?}: expected `name: value`"))?;
            let name =
                HeaderName::try_from(name.trim()).map_err(|e| format!("--header {h:?}: {e}"))?;
            let value =
                HeaderValue::try_from(value.trim()).map_err(|e| format!("--header {h:?}: {e}"))?;
            headers.push((name, value));
        }
        let body = target
            .body
            .clone()
            .unwrap_or_else(|| default_body.to_owned());
        if target.unique_bodies && !body.contains("{n}") {
            return Err("--unique-bodies: the body has no `{n}` to number".to_owned());
        }
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(pool)
            .build(connector);
        Ok(Self {
            client,
            method: Method::from_bytes(target.method.as_bytes())
                .map_err(|e| format!("--method: {e}"))?,
            url,
            headers,
            body: Bytes::from(body.clone()),
            numbered: target.unique_bodies.then(|| (body, AtomicU64::new(0))),
            timeout: Duration::from_millis(target.timeout_ms),
        })
    }

    fn request(&self) -> Result<Request<Full<Bytes>>, String> {
        let mut builder = Request::builder()
            .method(self.method.clone())
            .uri(self.url.clone());
        for (name, value) in &self.headers {
            builder = builder.header(name, value);
        }
        let body = match &self.numbered {
            Some((text, next)) => {
                let n = next.fetch_add(1, Ordering::Relaxed);
                Bytes::from(text.replace("{n}", &n.to_string()))
            }
            None => self.body.clone(),
        };
        builder
            .body(Full::new(body))
            .map_err(|e| format!("building the request: {e}"))
    }
}

/// The outcome of one request: status (0 for a transport error) and latency.
async fn one_request(p: &Prepared) -> (u16, Duration) {
    let started = Instant::now();
    let Ok(request) = p.request() else {
        return (0, started.elapsed());
    };
    let outcome = tokio::time::timeout(p.timeout, async {
        let response = p.client.request(request).await.ok()?;
        let status = response.status().as_u16();
        response.into_body().collect().await.ok()?;
        Some(status)
    })
    .await;
    (outcome.ok().flatten().unwrap_or(0), started.elapsed())
}

async fn run(args: RunArgs) -> Result<Value, String> {
    let p = Arc::new(Prepared::new(&args.target, DEFAULT_BODY, args.concurrency)?);
    let watcher = RssWatcher::start(&args.target.watch_pids);
    let warmup_end = Instant::now() + Duration::from_secs_f64(args.warmup_secs);
    let issued = Arc::new(AtomicU64::new(0));
    let mut workers = tokio::task::JoinSet::new();
    let measure_start = warmup_end;
    let measure_end = measure_start + Duration::from_secs_f64(args.duration_secs);
    let cpu = tokio::spawn({
        let mut meter = CpuMeter::new(&args.target.cpu_pids);
        async move {
            tokio::time::sleep_until(measure_start).await;
            meter.open();
            meter
        }
    });
    for _ in 0..args.concurrency.max(1) {
        let p = Arc::clone(&p);
        let issued = Arc::clone(&issued);
        let max = args.max_requests;
        workers.spawn(async move {
            let mut latencies_us = Vec::new();
            let mut statuses: BTreeMap<u16, u64> = BTreeMap::new();
            loop {
                let now = Instant::now();
                if now >= measure_end {
                    break;
                }
                let measured = now >= measure_start;
                if measured && issued.fetch_add(1, Ordering::Relaxed) >= max {
                    break;
                }
                let (status, latency) = one_request(&p).await;
                if measured {
                    *statuses.entry(status).or_default() += 1;
                    if (200..300).contains(&status) {
                        latencies_us.push(latency.as_micros() as u64);
                    }
                }
            }
            (latencies_us, statuses)
        });
    }
    let mut latencies = Vec::new();
    let mut statuses: BTreeMap<u16, u64> = BTreeMap::new();
    while let Some(joined) = workers.join_next().await {
        let (l, s) = joined.map_err(|e| format!("worker failed: {e}"))?;
        latencies.extend(l);
        for (k, v) in s {
            *statuses.entry(k).or_default() += v;
        }
    }
    let elapsed = Instant::now()
        .saturating_duration_since(measure_start)
        .as_secs_f64();
    let ok = latencies.len() as u64;
    let total: u64 = statuses.values().sum();
    let cpu = match cpu.await {
        Ok(meter) => meter.per_request(total),
        Err(_) => Value::Null,
    };
    Ok(json!({
        "mode": "run",
        "label": args.target.label,
        "url": args.target.url,
        "concurrency": args.concurrency,
        "duration_s": round(elapsed, 3),
        "requests": total,
        "ok": ok,
        "errors": total - ok,
        "statuses": statuses.iter().map(|(k, v)| (k.to_string(), json!(v))).collect::<serde_json::Map<_, _>>(),
        "throughput_rps": round(ok as f64 / elapsed.max(1e-9), 1),
        "latency_ms": percentiles(&mut latencies),
        "rss_kb": watcher.finish().await,
        "cpu": cpu,
    }))
}

async fn hold(args: HoldArgs) -> Result<Value, String> {
    let p = Arc::new(Prepared::new(&args.target, STREAM_BODY, 0)?);
    let watcher = RssWatcher::start(&args.target.watch_pids);
    let open = Arc::new(AtomicUsize::new(0));
    let peak_open = Arc::new(AtomicUsize::new(0));
    let stall = Duration::from_millis(args.stall_ms);
    let started = Instant::now();
    let mut streams = tokio::task::JoinSet::new();
    let n = args.streams.max(1);
    for i in 0..n {
        let p = Arc::clone(&p);
        let open = Arc::clone(&open);
        let peak_open = Arc::clone(&peak_open);
        let start_at = started + Duration::from_millis(args.ramp_ms * i as u64 / n as u64);
        streams.spawn(async move {
            tokio::time::sleep_until(start_at).await;
            let outcome =
                tokio::time::timeout(p.timeout, one_stream(&p, stall, &open, &peak_open)).await;
            outcome.unwrap_or_else(|_| StreamOutcome::failed("timeout", Duration::ZERO))
        });
    }
    let mut outcomes = Vec::with_capacity(n);
    while let Some(joined) = streams.join_next().await {
        outcomes.push(joined.map_err(|e| format!("stream task failed: {e}"))?);
    }
    let mut errors: BTreeMap<String, u64> = BTreeMap::new();
    for o in &outcomes {
        if let Some(e) = &o.error {
            *errors.entry(e.clone()).or_default() += 1;
        }
    }
    let mut ttfb: Vec<u64> = outcomes
        .iter()
        .filter(|o| o.error.is_none())
        .map(|o| o.ttfb.as_micros() as u64)
        .collect();
    let mut total: Vec<u64> = outcomes
        .iter()
        .filter(|o| o.error.is_none())
        .map(|o| o.total.as_micros() as u64)
        .collect();
    let max_gap = outcomes.iter().map(|o| o.max_gap).max().unwrap_or_default();
    Ok(json!({
        "mode": "hold",
        "label": args.target.label,
        "url": args.target.url,
        "streams": n,
        "completed": outcomes.iter().filter(|o| o.error.is_none()).count(),
        "errors": errors,
        "stalled_streams": outcomes.iter().filter(|o| o.stalls > 0).count(),
        "stalls": outcomes.iter().map(|o| o.stalls).sum::<u64>(),
        "stall_threshold_ms": args.stall_ms,
        "max_gap_ms": round(max_gap.as_secs_f64() * 1000.0, 1),
        "events": outcomes.iter().map(|o| o.events).sum::<u64>(),
        "peak_open_streams": peak_open.load(Ordering::Relaxed),
        "wall_s": round(started.elapsed().as_secs_f64(), 2),
        "ttfb_ms": percentiles(&mut ttfb),
        "stream_duration_ms": percentiles(&mut total),
        "rss_kb": watcher.finish().await,
    }))
}

struct StreamOutcome {
    error: Option<String>,
    ttfb: Duration,
    total: Duration,
    max_gap: Duration,
    stalls: u64,
    events: u64,
}

impl StreamOutcome {
    fn failed(error: &str, ttfb: Duration) -> Self {
        Self {
            error: Some(error.to_owned()),
            ttfb,
            total: Duration::ZERO,
            max_gap: Duration::ZERO,
            stalls: 0,
            events: 0,
        }
    }
}

async fn one_stream(
    p: &Prepared,
    stall: Duration,
    open: &AtomicUsize,
    peak: &AtomicUsize,
) -> StreamOutcome {
    let started = Instant::now();
    let Ok(request) = p.request() else {
        return StreamOutcome::failed("request", Duration::ZERO);
    };
    let response = match p.client.request(request).await {
        Ok(r) => r,
        Err(e) => {
            return StreamOutcome::failed(
                &format!("connect/head: {}", error_kind(&e)),
                Duration::ZERO,
            )
        }
    };
    let ttfb = started.elapsed();
    if !response.status().is_success() {
        return StreamOutcome::failed(&format!("status {}", response.status().as_u16()), ttfb);
    }
    let now_open = open.fetch_add(1, Ordering::Relaxed) + 1;
    peak.fetch_max(now_open, Ordering::Relaxed);
    let mut body = response.into_body();
    let mut last = Instant::now();
    let mut outcome = StreamOutcome {
        error: None,
        ttfb,
        total: Duration::ZERO,
        max_gap: Duration::ZERO,
        stalls: 0,
        events: 0,
    };
    let mut tail = Vec::new();
    loop {
        match body.frame().await {
            Some(Ok(frame)) => {
                let Some(data) = frame.data_ref() else {
                    continue;
                };
                let gap = last.elapsed();
                last = Instant::now();
                outcome.max_gap = outcome.max_gap.max(gap);
                if gap > stall {
                    outcome.stalls += 1;
                }
                outcome.events += data.windows(2).filter(|w| w == b"\n\n").count() as u64;
                // Keep only the end of the stream: enough to find its final event.
                tail.extend_from_slice(data);
                if tail.len() > 512 {
                    tail.drain(..tail.len() - 512);
                }
            }
            Some(Err(e)) => {
                outcome.error = Some(format!("body: {e}"));
                break;
            }
            None => break,
        }
    }
    open.fetch_sub(1, Ordering::Relaxed);
    let text = String::from_utf8_lossy(&tail);
    if outcome.error.is_none()
        && !(text.contains("[DONE]")
            || text.contains("message_stop")
            || text.contains("response.completed"))
    {
        outcome.error = Some("stream ended without its final event".to_owned());
    }
    outcome.total = started.elapsed();
    outcome
}

fn error_kind(e: &hyper_util::client::legacy::Error) -> String {
    let mut source: Option<&dyn std::error::Error> = Some(e);
    let mut last = e.to_string();
    while let Some(s) = source {
        last = s.to_string();
        source = s.source();
    }
    last
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(cli.threads.max(1))
        .enable_all()
        .build();
    let runtime = match runtime {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("switchyard-load: cannot start the runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Run(args) => run(args).await,
            Command::Hold(args) => hold(args).await,
            Command::Report { dir } => report::report(&dir),
        }
    });
    match result {
        Ok(value) => {
            let mut out = std::io::stdout().lock();
            let text = serde_json::to_string_pretty(&value).unwrap_or_default();
            if writeln!(out, "{text}").is_err() {
                return std::process::ExitCode::FAILURE;
            }
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("switchyard-load: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_use_nearest_rank() {
        let mut samples: Vec<u64> = (1..=100).map(|ms| ms * 1000).collect();
        let p = percentiles(&mut samples);
        assert_eq!(p["p50"], 50.0);
        assert_eq!(p["p90"], 90.0);
        assert_eq!(p["p99"], 99.0);
        assert_eq!(p["max"], 100.0);
        assert_eq!(percentiles(&mut []), Value::Null);
    }

    fn target(url: &str) -> Target {
        Target {
            url: url.into(),
            method: "POST".into(),
            body: None,
            unique_bodies: false,
            headers: vec!["authorization: Bearer x".into()],
            timeout_ms: 1000,
            watch_pids: vec![],
            cpu_pids: vec![],
            label: String::new(),
        }
    }

    #[test]
    fn cpu_time_is_read_from_proc_and_divided_by_requests() {
        let mut meter = CpuMeter::new(&[std::process::id()]);
        meter.open();
        // Burn CPU until the process's tick counters move (a condition, not a duration).
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let mut x = 0u64;
        loop {
            for i in 0..1_000_000u64 {
                x = x.wrapping_mul(31).wrapping_add(i);
            }
            let cpu = meter.per_request(1);
            if cpu["total_us_per_request"].as_f64().unwrap_or(0.0) > 0.0 {
                let one = cpu["total_us_per_request"].as_f64().unwrap();
                let ten = meter.per_request(10)["total_us_per_request"]
                    .as_f64()
                    .unwrap();
                assert!(ten <= one / 5.0, "per request divides: {one} vs {ten}");
                assert_eq!(cpu["pids"], json!([std::process::id()]));
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "ticks never moved ({x})"
            );
        }
        assert_eq!(CpuMeter::new(&[]).per_request(1), Value::Null);
        assert_eq!(CpuMeter::new(&[u32::MAX]).per_request(1), Value::Null);
    }

    #[tokio::test]
    async fn only_loopback_targets_are_accepted() {
        assert!(Prepared::new(&target("http://127.0.0.1:1/v1/x"), DEFAULT_BODY, 1).is_ok());
        assert!(Prepared::new(&target("http://localhost:1/v1/x"), DEFAULT_BODY, 1).is_ok());
        let err = Prepared::new(&target("http://10.0.0.1:1/v1/x"), DEFAULT_BODY, 1)
            .err()
            .unwrap();
        assert!(err.contains("loopback"), "{err}");
    }

    async fn body_of(p: &Prepared) -> String {
        let body = p.request().unwrap().into_body().collect().await.unwrap();
        String::from_utf8(body.to_bytes().to_vec()).unwrap()
    }

    #[tokio::test]
    async fn unique_bodies_number_every_request_anew() {
        let mut t = target("http://127.0.0.1:1/v1/x");
        t.body = Some(r#"{"content":"hello {n}"}"#.into());
        let same = Prepared::new(&t, DEFAULT_BODY, 1).unwrap();
        assert_eq!(body_of(&same).await, body_of(&same).await);
        t.unique_bodies = true;
        let unique = Prepared::new(&t, DEFAULT_BODY, 1).unwrap();
        assert_eq!(body_of(&unique).await, r#"{"content":"hello 0"}"#);
        assert_eq!(body_of(&unique).await, r#"{"content":"hello 1"}"#);
        t.body = None;
        let err = Prepared::new(&t, DEFAULT_BODY, 1).err().unwrap();
        assert!(err.contains("{n}"), "{err}");
    }

    #[test]
    fn report_computes_added_latency() {
        let dir =
            std::env::temp_dir().join(format!("switchyard-load-report-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let run = |p50: f64, rps: f64| {
            json!({"latency_ms": {"p50": p50, "p90": p50, "p99": p50 * 2.0}, "throughput_rps": rps,
                   "errors": 0, "rss_kb": {"42": {"start": 1, "peak": 9000, "end": 5}}})
            .to_string()
        };
        std::fs::write(dir.join("pids.json"), r#"{"proxy": 42, "mock": 7}"#).unwrap();
        std::fs::write(dir.join("idle.json"), r#"{"proxy": 5000, "mock": 3000}"#).unwrap();
        std::fs::write(dir.join("direct_c1.json"), run(0.1, 1000.0)).unwrap();
        std::fs::write(dir.join("proxy_c1.json"), run(0.35, 800.0)).unwrap();
        let summary = report::report(&dir).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(summary["added_latency_ms"]["c1"]["p50"], 0.25);
        assert_eq!(summary["added_latency_ms"]["c1"]["p99"], 0.5);
        assert_eq!(summary["rss_kb"]["proxy_idle"], 5000);
        assert_eq!(summary["rss_kb"]["proxy_under_load_peak"], 9000.0);
    }
}
