//! How the background tasks live through Redis being unreachable: the wait between two
//! attempts to reach it, and the error report (every error counted, few logged).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use redis::RedisError;
use tokio::sync::watch;

use super::conn::mask_url;
use super::shared::Shared;

/// Rate-limited error reporting: every error counts, one log line per 5 s.
pub(super) struct Reporter {
    last_log_ms: AtomicU64,
}

impl Reporter {
    pub(super) fn new() -> Reporter {
        Reporter {
            last_log_ms: AtomicU64::new(0),
        }
    }

    /// Whether an error at `now` (Unix ms) gets a log line: the first one does, then at most one
    /// per 5 s (the caller that wins the swap logs).
    fn log_due(&self, now: u64) -> bool {
        let last = self.last_log_ms.load(Ordering::Relaxed);
        now.saturating_sub(last) >= 5_000
            && self
                .last_log_ms
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    }

    pub(super) fn report(&self, shared: &Shared, what: &str, e: &RedisError) {
        shared.counters.errors.fetch_add(1, Ordering::Relaxed);
        if self.log_due(crate::store::unix_ms()) {
            tracing::warn!(
                redis = %mask_url(&shared.config.url),
                error = %e,
                errors_total = shared.counters.errors.load(Ordering::Relaxed),
                "Redis {what} failed; serving from the local view (fail-open)"
            );
        }
    }
}

const BACKOFF_MIN: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(5);

/// The wait between two attempts to reach Redis: it doubles from 100 ms up to 5 s, and starts
/// again from 100 ms once a connection holds.
pub(super) struct Backoff(Duration);

impl Backoff {
    pub(super) fn new() -> Backoff {
        Backoff(BACKOFF_MIN)
    }

    /// Waits the current delay, or until `stop` changes, and doubles the next one.
    pub(super) async fn wait(&mut self, stop: &mut watch::Receiver<bool>) {
        tokio::select! {
            () = tokio::time::sleep(self.0) => {}
            _ = stop.changed() => {}
        }
        self.0 = (self.0 * 2).min(BACKOFF_MAX);
    }

    pub(super) fn reset(&mut self) {
        self.0 = BACKOFF_MIN;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_backoff_doubles_up_to_its_cap_starts_over_once_connected_and_yields_to_stop() {
        let (stop_tx, mut stop) = watch::channel(false);
        let mut backoff = Backoff::new();
        let mut waits = Vec::new();
        for _ in 0..8 {
            let start = tokio::time::Instant::now();
            backoff.wait(&mut stop).await;
            waits.push(start.elapsed().as_millis());
        }
        assert_eq!(waits, [100, 200, 400, 800, 1600, 3200, 5000, 5000]);
        backoff.reset();
        let start = tokio::time::Instant::now();
        backoff.wait(&mut stop).await;
        assert_eq!(start.elapsed(), Duration::from_millis(100));
        // Stopping ends a wait at once.
        stop_tx.send_replace(true);
        let start = tokio::time::Instant::now();
        backoff.wait(&mut stop).await;
        assert_eq!(start.elapsed(), Duration::ZERO);
    }

    #[test]
    fn an_error_is_logged_at_most_once_per_five_seconds() {
        let reporter = Reporter {
            last_log_ms: AtomicU64::new(0),
        };
        // The first error on the wall clock is logged.
        let now = crate::store::unix_ms();
        assert!(now > 1_600_000_000_000, "a wall-clock time in ms: {now}");
        assert!(reporter.log_due(now));
        assert!(!reporter.log_due(now), "the same millisecond");
        assert!(!reporter.log_due(now + 4_999));
        assert!(reporter.log_due(now + 5_000));
        assert!(!reporter.log_due(now + 5_001));
        assert!(reporter.log_due(now + 20_000));
    }
}
