//! The request log's retention: one control-plane replica at a time (the holder of its own
//! advisory lock, apart from the recovery probes' lead) makes the coming days' partitions and
//! drops those past the retention ([`crate::request_log::maintain`]), at start and every hour.

use std::time::Duration;

use sqlx::postgres::PgConnectOptions;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::recovery::Leadership;
use crate::request_log::maintain;

/// The advisory lock key of the request log's maintenance leader.
pub const MAINTENANCE_LOCK_KEY: i64 = 0x5377_5964_5251_4c47; // "SwYdRQLG"
/// How often the leader makes and drops partitions.
const MAINTENANCE_TICK: Duration = Duration::from_secs(3600);
/// How often a replica that does not lead asks for the lead.
const CONTEND_TICK: Duration = Duration::from_secs(60);

/// Runs [`maintain`] while this replica holds the lead, at start and then every hour, until
/// `shutdown`.
pub async fn run(
    pool: PgPool,
    options: PgConnectOptions,
    retention_days: u32,
    shutdown: CancellationToken,
) {
    let mut leadership = Leadership::new(options, MAINTENANCE_LOCK_KEY);
    loop {
        match leadership.ensure().await {
            Ok(true) => {
                let now = i64::try_from(switchyard_state::unix_ms()).unwrap_or(i64::MAX);
                if let Err(error) = maintain(&pool, now, retention_days).await {
                    tracing::warn!(error = %error, "request-log maintenance failed");
                }
            }
            Ok(false) => {}
            Err(error) => tracing::debug!(
                error = format!("{error:#}"),
                "cannot contend for the request-log maintenance lead"
            ),
        }
        // Not the leader: try again soon, so a replica takes over within minutes.
        let wait = if leadership.is_leader() {
            MAINTENANCE_TICK
        } else {
            CONTEND_TICK
        };
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = tokio::time::sleep(wait) => {}
        }
    }
    leadership.release().await;
}
