//! Prometheus metrics, hand-rolled: fixed label sets, plain atomics, text exposition on demand.
//! No allocation and no lock on the hot path.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::endpoint::Endpoint;

const CLASSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];

/// Attempt outcomes (a label of `switchyard_attempts_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptOutcome {
    Success,
    Retryable,
    Rejected,
    MemberSpecific,
    Transport,
    StreamBroken,
}

impl AttemptOutcome {
    const ALL: [AttemptOutcome; 6] = [
        AttemptOutcome::Success,
        AttemptOutcome::Retryable,
        AttemptOutcome::Rejected,
        AttemptOutcome::MemberSpecific,
        AttemptOutcome::Transport,
        AttemptOutcome::StreamBroken,
    ];

    pub fn label(self) -> &'static str {
        match self {
            AttemptOutcome::Success => "success",
            AttemptOutcome::Retryable => "retryable",
            AttemptOutcome::Rejected => "rejected",
            AttemptOutcome::MemberSpecific => "member_specific",
            AttemptOutcome::Transport => "transport",
            AttemptOutcome::StreamBroken => "stream_broken",
        }
    }
}

/// Upper bounds in seconds.
const LATENCY_BUCKETS: [f64; 12] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];
const OVERHEAD_BUCKETS: [f64; 10] = [
    0.000_025, 0.000_05, 0.000_1, 0.000_15, 0.000_25, 0.000_5, 0.001, 0.0025, 0.005, 0.01,
];

pub struct Histogram<const N: usize> {
    bounds: [f64; N],
    counts: [AtomicU64; N],
    count: AtomicU64,
    sum_micros: AtomicU64,
}

impl<const N: usize> Histogram<N> {
    fn new(bounds: [f64; N]) -> Self {
        Histogram {
            bounds,
            counts: std::array::from_fn(|_| AtomicU64::new(0)),
            count: AtomicU64::new(0),
            sum_micros: AtomicU64::new(0),
        }
    }

    pub fn observe_micros(&self, micros: u64) {
        let secs = micros as f64 / 1e6;
        if let Some(i) = self.bounds.iter().position(|b| secs <= *b) {
            self.counts[i].fetch_add(1, Relaxed);
        }
        self.count.fetch_add(1, Relaxed);
        self.sum_micros.fetch_add(micros, Relaxed);
    }

    fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        let mut cumulative = 0;
        for (bound, count) in self.bounds.iter().zip(&self.counts) {
            cumulative += count.load(Relaxed);
            let _ = writeln!(out, "{name}_bucket{{le=\"{bound}\"}} {cumulative}");
        }
        let total = self.count.load(Relaxed);
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {total}");
        let _ = writeln!(
            out,
            "{name}_sum {}",
            self.sum_micros.load(Relaxed) as f64 / 1e6
        );
        let _ = writeln!(out, "{name}_count {total}");
    }
}

pub struct Metrics {
    requests: [[AtomicU64; 5]; Endpoint::ALL.len()],
    attempts: [AtomicU64; 6],
    pub failovers: AtomicU64,
    pub cooldowns: AtomicU64,
    pub breaker_trips: AtomicU64,
    pub credentials_disabled: AtomicU64,
    pub sticky_hits: AtomicU64,
    pub sticky_escapes: AtomicU64,
    pub upstream_latency: Histogram<12>,
    pub gateway_overhead: Histogram<10>,
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics {
            requests: std::array::from_fn(|_| std::array::from_fn(|_| AtomicU64::new(0))),
            attempts: std::array::from_fn(|_| AtomicU64::new(0)),
            failovers: AtomicU64::new(0),
            cooldowns: AtomicU64::new(0),
            breaker_trips: AtomicU64::new(0),
            credentials_disabled: AtomicU64::new(0),
            sticky_hits: AtomicU64::new(0),
            sticky_escapes: AtomicU64::new(0),
            upstream_latency: Histogram::new(LATENCY_BUCKETS),
            gateway_overhead: Histogram::new(OVERHEAD_BUCKETS),
        }
    }
}

impl Metrics {
    pub fn request(&self, endpoint: Endpoint, status: u16) {
        let class = usize::from((status / 100).clamp(1, 5)) - 1;
        self.requests[endpoint.index()][class].fetch_add(1, Relaxed);
    }

    pub fn attempt(&self, outcome: AttemptOutcome) {
        self.attempts[outcome as usize].fetch_add(1, Relaxed);
    }

    pub fn render(&self) -> String {
        let mut out = String::with_capacity(4096);
        out.push_str("# HELP switchyard_requests_total Requests served, by endpoint and status class.\n# TYPE switchyard_requests_total counter\n");
        for endpoint in Endpoint::ALL {
            for (class, label) in CLASSES.iter().enumerate() {
                let n = self.requests[endpoint.index()][class].load(Relaxed);
                if n > 0 {
                    let _ = writeln!(
                        out,
                        "switchyard_requests_total{{endpoint=\"{}\",code=\"{label}\"}} {n}",
                        endpoint.label()
                    );
                }
            }
        }
        out.push_str("# HELP switchyard_attempts_total Upstream attempts, by outcome.\n# TYPE switchyard_attempts_total counter\n");
        for outcome in AttemptOutcome::ALL {
            let _ = writeln!(
                out,
                "switchyard_attempts_total{{outcome=\"{}\"}} {}",
                outcome.label(),
                self.attempts[outcome as usize].load(Relaxed)
            );
        }
        for (name, help, value) in [
            (
                "switchyard_failovers_total",
                "Switches to another member within a request.",
                &self.failovers,
            ),
            (
                "switchyard_cooldowns_total",
                "Member cooldowns started or extended.",
                &self.cooldowns,
            ),
            (
                "switchyard_breaker_trips_total",
                "Channel breakers tripped.",
                &self.breaker_trips,
            ),
            (
                "switchyard_credentials_disabled_total",
                "Credentials disabled by keyword rules.",
                &self.credentials_disabled,
            ),
            (
                "switchyard_sticky_hits_total",
                "Requests served by their session's bound member.",
                &self.sticky_hits,
            ),
            (
                "switchyard_sticky_escapes_total",
                "Sticky bindings that could not be used.",
                &self.sticky_escapes,
            ),
        ] {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}",
                value.load(Relaxed)
            );
        }
        self.upstream_latency.render(
            &mut out,
            "switchyard_upstream_latency_seconds",
            "Upstream latency per attempt (time to response headers, first byte for streams).",
        );
        self.gateway_overhead.render(
            &mut out,
            "switchyard_gateway_overhead_seconds",
            "Time the gateway itself added to a request (total minus upstream time).",
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposition_has_counters_and_cumulative_buckets() {
        let m = Metrics::default();
        m.request(Endpoint::ChatCompletions, 200);
        m.attempt(AttemptOutcome::Retryable);
        m.gateway_overhead.observe_micros(40);
        m.gateway_overhead.observe_micros(120);
        let text = m.render();
        assert!(text
            .contains("switchyard_requests_total{endpoint=\"chat_completions\",code=\"2xx\"} 1"));
        assert!(text.contains("switchyard_attempts_total{outcome=\"retryable\"} 1"));
        assert!(text.contains("switchyard_gateway_overhead_seconds_bucket{le=\"0.00005\"} 1"));
        assert!(text.contains("switchyard_gateway_overhead_seconds_bucket{le=\"0.00015\"} 2"));
        assert!(text.contains("switchyard_gateway_overhead_seconds_count 2"));
    }
}
