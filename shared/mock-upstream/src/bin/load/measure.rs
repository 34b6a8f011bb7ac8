//! Measurements of the load generator: latency percentiles, and the resident memory and CPU time
//! of watched processes.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

/// Samples `VmRSS` of the watched processes every 250 ms; reports first, peak and last (kB).
pub struct RssWatcher {
    task: Option<tokio::task::JoinHandle<Value>>,
    stop: Arc<tokio::sync::Notify>,
}

impl RssWatcher {
    pub fn start(pids: &[u32]) -> Self {
        let stop = Arc::new(tokio::sync::Notify::new());
        let task = (!pids.is_empty()).then(|| {
            let pids = pids.to_vec();
            let stop = Arc::clone(&stop);
            tokio::spawn(async move {
                let mut seen: BTreeMap<u32, (u64, u64, u64)> = BTreeMap::new();
                loop {
                    for &pid in &pids {
                        if let Some(kb) = rss_kb(pid) {
                            let e = seen.entry(pid).or_insert((kb, kb, kb));
                            e.1 = e.1.max(kb);
                            e.2 = kb;
                        }
                    }
                    tokio::select! {
                        _ = stop.notified() => break,
                        _ = tokio::time::sleep(Duration::from_millis(250)) => {}
                    }
                }
                json!(seen
                    .iter()
                    .map(|(pid, (first, peak, last))| (
                        pid.to_string(),
                        json!({"start": first, "peak": peak, "end": last})
                    ))
                    .collect::<serde_json::Map<_, _>>())
            })
        });
        Self { task, stop }
    }

    pub async fn finish(self) -> Value {
        self.stop.notify_one();
        match self.task {
            Some(task) => task.await.unwrap_or(Value::Null),
            None => Value::Null,
        }
    }
}

/// `VmRSS` of a process in kB, from `/proc/PID/status`.
fn rss_kb(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Clock ticks per second of `/proc/PID/stat`'s times (`USER_HZ`: 100 on every Linux ABI the
/// benchmark runs on).
const USER_HZ: f64 = 100.0;

/// User and kernel CPU time (every thread) of processes over a measured window, from
/// `/proc/PID/stat` fields 14 and 15: read once when the window opens and once when it closes.
pub struct CpuMeter {
    pids: Vec<u32>,
    start: Option<(u64, u64)>,
}

impl CpuMeter {
    pub fn new(pids: &[u32]) -> Self {
        CpuMeter {
            pids: pids.to_vec(),
            start: None,
        }
    }

    /// Opens the window (call when measuring starts, after the warm-up).
    pub fn open(&mut self) {
        self.start = cpu_ticks(&self.pids);
    }

    /// Closes the window: CPU microseconds per request (user, kernel, total) for `requests`.
    pub fn per_request(&self, requests: u64) -> Value {
        let (Some((user0, sys0)), Some((user1, sys1))) = (self.start, cpu_ticks(&self.pids)) else {
            return Value::Null;
        };
        if requests == 0 {
            return Value::Null;
        }
        let us = |ticks: u64| ticks as f64 / USER_HZ * 1e6 / requests as f64;
        let (user, system) = (
            us(user1.saturating_sub(user0)),
            us(sys1.saturating_sub(sys0)),
        );
        json!({
            "pids": self.pids,
            "user_us_per_request": round(user, 2),
            "system_us_per_request": round(system, 2),
            "total_us_per_request": round(user + system, 2),
        })
    }
}

/// Summed `(utime, stime)` ticks of the processes; `None` when one cannot be read.
fn cpu_ticks(pids: &[u32]) -> Option<(u64, u64)> {
    if pids.is_empty() {
        return None;
    }
    let mut total = (0, 0);
    for pid in pids {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // The command name (field 2) may hold spaces; the fields after it start past its ')'.
        let rest = &stat[stat.rfind(')')? + 1..];
        let fields: Vec<&str> = rest.split_whitespace().collect();
        // `rest` starts at field 3 (state): utime is field 14, stime field 15.
        total.0 += fields.get(11)?.parse::<u64>().ok()?;
        total.1 += fields.get(12)?.parse::<u64>().ok()?;
    }
    Some(total)
}

/// p50/p90/p99/max/mean in milliseconds of microsecond samples (nearest rank).
pub fn percentiles(samples_us: &mut [u64]) -> Value {
    if samples_us.is_empty() {
        return Value::Null;
    }
    samples_us.sort_unstable();
    let at = |q: f64| {
        let rank = ((q * samples_us.len() as f64).ceil() as usize).clamp(1, samples_us.len());
        samples_us[rank - 1] as f64 / 1000.0
    };
    let mean = samples_us.iter().sum::<u64>() as f64 / samples_us.len() as f64 / 1000.0;
    json!({
        "p50": round(at(0.50), 3),
        "p90": round(at(0.90), 3),
        "p99": round(at(0.99), 3),
        "max": round(at(1.0), 3),
        "mean": round(mean, 3),
    })
}

pub fn round(x: f64, digits: i32) -> f64 {
    let f = 10f64.powi(digits);
    (x * f).round() / f
}
