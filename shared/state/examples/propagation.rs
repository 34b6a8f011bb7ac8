//! Propagation benchmark (run by hand against a real Redis):
//!   cargo run --release -p switchyard-state --example propagation -- [REDIS_URL] [samples] [linger_ms]
//! Store A writes a cooldown; the time until store B's local view shows it is one sample.
//! B's view is looked at every `PROPAGATION_POLL_US` µs (default 100; the sleep between looks
//! adds at most that, plus the timer's slack, to a sample); 0 spins instead, which keeps a core
//! busy and so, on a machine that is already saturated, takes CPU from the very threads timed.
//! Then a simulated request load through A (writes per request as the proxy does them) reports
//! Redis batches and scripts per request; reads never touch Redis (the selection path is the
//! local view).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::time::{Duration, Instant};

use switchyard_state::{unix_ms as now_ms, AttemptSuccess, RedisConfig, RedisStore, StateStore};

fn main() {
    let mut args = std::env::args().skip(1);
    let url = args
        .next()
        .or_else(|| std::env::var("REDIS_URL").ok())
        .unwrap_or_else(|| "redis://127.0.0.1:6379".into());
    let samples: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(1000);
    let config = |prefix: &str| {
        let mut c = RedisConfig::new(&url, prefix);
        if let Some(ms) = std::env::args().nth(3).and_then(|s| s.parse().ok()) {
            c.flush_linger = Duration::from_millis(ms);
        }
        c
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let _guard = rt.enter();
    let prefix = format!("bench-{:x}", now_ms());
    let a = RedisStore::start(config(&prefix)).unwrap();
    let b = RedisStore::start(config(&prefix)).unwrap();
    assert!(rt.block_on(b.wait_resynced(1, Duration::from_secs(5))));
    let poll = std::env::var("PROPAGATION_POLL_US")
        .ok()
        .and_then(|s| s.parse().ok())
        .map_or(Duration::from_micros(100), Duration::from_micros);
    let mut delays = Vec::with_capacity(samples);
    for i in 0..samples {
        let member = i as i64 + 1;
        let until = now_ms() + 60_000;
        let start = Instant::now();
        a.extend_cooldown(member, until);
        loop {
            let mut seen = false;
            b.with_view(&mut |v| seen = v.cooldown_until(member) == Some(until));
            if seen {
                break;
            }
            assert!(start.elapsed() < Duration::from_secs(5), "lost update");
            if poll.is_zero() {
                std::hint::spin_loop();
            } else {
                std::thread::sleep(poll);
            }
        }
        delays.push(start.elapsed());
        std::thread::sleep(Duration::from_millis(2));
    }
    delays.sort();
    let pct = |p: f64| delays[((delays.len() - 1) as f64 * p) as usize];
    println!(
        "propagation A->B over {samples} cooldowns (view looked at every {poll:?}): p50 {:?} p90 {:?} p99 {:?} max {:?}",
        pct(0.5),
        pct(0.9),
        pct(0.99),
        delays[delays.len() - 1]
    );

    // Writes per request: success record + in-flight acquire/release, at a steady rate.
    let before = a.stats();
    let requests = 5_000;
    let started = Instant::now();
    for i in 0..requests {
        a.in_flight_acquire(1);
        let s = AttemptSuccess {
            member: 1 + (i % 4),
            channel: 1,
            upstream_model: "m",
            latency_ms: 100.0,
            canary: false,
            promote_after: 0,
        };
        a.record_success(&s, now_ms());
        a.in_flight_release(1);
        if i % 10 == 0 {
            std::thread::sleep(Duration::from_micros(500));
        }
    }
    assert!(rt.block_on(a.wait_flushed(Duration::from_secs(20))));
    let after = a.stats();
    let secs = started.elapsed().as_secs_f64();
    println!(
        "{requests} requests in {secs:.2}s ({:.0}/s): {} pipelined batches ({:.3}/request), {} scripts, {} Redis errors; selection reads: 0 Redis round trips (local view)",
        requests as f64 / secs,
        after.batches_total - before.batches_total,
        (after.batches_total - before.batches_total) as f64 / requests as f64,
        after.scripts_total - before.scripts_total,
        after.redis_errors_total,
    );
    // Clean up this run's keys.
    let mut con = redis::Client::open(url.as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{{sy:{prefix}}}:*"))
        .query(&mut con)
        .unwrap();
    if !keys.is_empty() {
        let _: () = redis::cmd("DEL").arg(keys).query(&mut con).unwrap();
    }
}
