//! How far behind the fleet this proxy is: the propagation-lag histogram, the time of the last
//! successful sync, and the per-proxy report every proxy publishes with its lease.
//!
//! The lag of one update is measured from the writer's wall clock when the write was queued
//! (carried in the notification) to this proxy's wall clock once the update is in its view. It
//! therefore includes the writer's queueing, the script's round trip, the publish and the merge,
//! and any clock skew between the two hosts (negative values count as zero).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use switchyard_metrics::{Histogram, Writer};

/// Bucket upper bounds of the lag histogram, in microseconds (Prometheus `le`, in seconds).
const BUCKETS_US: [u64; 14] = [
    1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000, 2_500_000,
    5_000_000, 10_000_000, 30_000_000,
];

/// Wall-clock microseconds since the Unix epoch.
pub(crate) fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// A lock-free histogram of propagation lags, plus a window (max, count) reset at each report.
#[derive(Debug)]
pub(crate) struct LagHistogram {
    histogram: Histogram<{ BUCKETS_US.len() }>,
    window_max_us: AtomicU64,
    window_count: AtomicU64,
}

impl Default for LagHistogram {
    fn default() -> LagHistogram {
        LagHistogram {
            histogram: Histogram::new(BUCKETS_US),
            window_max_us: AtomicU64::new(0),
            window_count: AtomicU64::new(0),
        }
    }
}

impl LagHistogram {
    pub(crate) fn observe(&self, lag_us: u64) {
        self.histogram.observe_micros(lag_us);
        self.window_max_us.fetch_max(lag_us, Ordering::Relaxed);
        self.window_count.fetch_add(1, Ordering::Relaxed);
    }

    /// Total observations.
    pub(crate) fn count(&self) -> u64 {
        self.histogram.count()
    }

    /// Takes the window since the previous call: (updates, max lag µs).
    pub(crate) fn take_window(&self) -> (u64, u64) {
        (
            self.window_count.swap(0, Ordering::Relaxed),
            self.window_max_us.swap(0, Ordering::Relaxed),
        )
    }

    /// Appends the Prometheus histogram `name` (seconds).
    pub(crate) fn render(&self, w: &mut Writer<'_>, name: &str, help: &str) {
        self.histogram.render(w, name, help);
    }
}

/// What one proxy says about its own sync, published with its lease (at every lease refresh)
/// and shown per proxy by the control plane. Unknown fields are ignored by older readers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyncReport {
    /// The reporting proxy's instance id (its lease name).
    #[serde(default)]
    pub instance: String,
    /// Unix milliseconds of the report (the reporter's clock).
    pub reported_at_ms: u64,
    /// Whether its writer was connected to Redis.
    pub connected: bool,
    /// Milliseconds since its last successful sync (a full resync or a received notification);
    /// `None` before the first one.
    pub last_sync_age_ms: Option<u64>,
    /// Other proxies' updates it merged since its previous report.
    pub window_updates: u64,
    /// The largest propagation lag among them, in milliseconds (`None` without updates).
    pub window_max_lag_ms: Option<u64>,
    /// Updates from other proxies received since start (each one observed in the histogram).
    pub updates_total: u64,
    pub resyncs_total: u64,
    pub redis_errors_total: u64,
    pub queued_writes: u64,
}

/// Wall-clock time of the last successful sync (ms; 0 = never).
#[derive(Debug, Default)]
pub(crate) struct LastSync(AtomicU64);

impl LastSync {
    pub(crate) fn mark(&self) {
        self.0.store(now_us() / 1000, Ordering::Relaxed);
    }

    pub(crate) fn age_ms(&self) -> Option<u64> {
        match self.0.load(Ordering::Relaxed) {
            0 => None,
            at => Some((now_us() / 1000).saturating_sub(at)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_cumulative_and_window_resets() {
        let h = LagHistogram::default();
        h.observe(500);
        h.observe(3_000);
        h.observe(60_000_000);
        let mut out = String::new();
        h.render(&mut Writer::new(&mut out), "lag_seconds", "help");
        assert!(
            out.contains("lag_seconds_bucket{le=\"0.001\"} 1\n"),
            "{out}"
        );
        assert!(
            out.contains("lag_seconds_bucket{le=\"0.005\"} 2\n"),
            "{out}"
        );
        assert!(out.contains("lag_seconds_bucket{le=\"30\"} 2\n"), "{out}");
        assert!(out.contains("lag_seconds_bucket{le=\"+Inf\"} 3\n"), "{out}");
        assert!(out.contains("lag_seconds_count 3\n"), "{out}");
        assert!(out.contains("lag_seconds_sum 60.0035\n"), "{out}");
        assert_eq!(h.take_window(), (3, 60_000_000));
        assert_eq!(h.take_window(), (0, 0));
        assert_eq!(h.count(), 3);
    }

    #[test]
    fn last_sync_age_counts_milliseconds_from_the_mark() {
        let last = LastSync::default();
        assert_eq!(last.age_ms(), None, "never synced");
        last.mark();
        let fresh = last.age_ms().unwrap_or(u64::MAX);
        assert!(fresh < 60_000, "just marked, yet {fresh} ms old");
        std::thread::sleep(std::time::Duration::from_millis(30));
        let later = last.age_ms().unwrap_or(0);
        assert!(
            (30..60_000).contains(&later),
            "30 ms after the mark: {later} ms"
        );
    }
}
