//! Postgres access shared by every resource: connecting, migrating, and the one way an admin
//! write commits (audit row + revision bump + NOTIFY, all in the writer's transaction).

use std::time::Duration;

use serde_json::Value;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{PgPool, Postgres, Transaction};
use switchyard_engine::ChannelStatus;

use crate::error::ApiResult;

/// The NOTIFY channel a committed write signals on; the payload is the new revision.
pub const NOTIFY_CHANNEL: &str = "switchyard_snapshot";

/// Timestamps rendered the same way everywhere (RFC 3339, UTC, microseconds).
pub fn ts(column: &str) -> String {
    format!(r#"to_char({column} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')"#)
}

/// A lazily connecting pool: the process starts (and answers 503) while Postgres is down.
pub fn pool(options: PgConnectOptions) -> PgPool {
    PgPoolOptions::new()
        .max_connections(16)
        .min_connections(0)
        .acquire_timeout(Duration::from_secs(3))
        .connect_lazy_with(options)
}

pub async fn migrate(pool: &PgPool) -> Result<(), sqlx::migrate::MigrateError> {
    sqlx::migrate!("../migrations").run(pool).await
}

/// Who made a change, and what it was; written to `audit_log` with the revision it produced.
pub struct Audit<'a> {
    pub actor: &'a str,
    pub action: &'static str,
    pub resource: &'static str,
    pub resource_id: Option<i64>,
    /// A description of the change. Never holds secrets.
    pub detail: Value,
    /// The team of the admin making the change, when it administers one team only.
    pub team: Option<i64>,
}

/// Bumps the snapshot revision, writes the audit row, queues the NOTIFY and commits. Every admin
/// write ends here, so "audited and bumps the revision in the same transaction" holds by
/// construction.
pub async fn commit_write(mut tx: Transaction<'_, Postgres>, audit: Audit<'_>) -> ApiResult<i64> {
    let revision: i64 = sqlx::query_scalar(
        "UPDATE snapshot_revision SET revision = revision + 1, updated_at = now() RETURNING revision",
    )
    .fetch_one(&mut *tx)
    .await?;
    sqlx::query(
        "INSERT INTO audit_log (actor, action, resource, resource_id, revision, detail, \
         actor_team_id) VALUES ($1, $2, $3, $4, $5, $6, $7)",
    )
    .bind(audit.actor)
    .bind(audit.action)
    .bind(audit.resource)
    .bind(audit.resource_id)
    .bind(revision)
    .bind(sqlx::types::Json(&audit.detail))
    .bind(audit.team)
    .execute(&mut *tx)
    .await?;
    // Delivered to every listener (every replica) when, and only if, the transaction commits.
    sqlx::query("SELECT pg_notify($1, $2)")
        .bind(NOTIFY_CHANNEL)
        .bind(revision.to_string())
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(revision)
}

/// A data or constraint error (SQLSTATE classes 22 and 23): the same write would meet it again.
pub(crate) fn is_data_error(error: &dyn sqlx::error::DatabaseError) -> bool {
    error
        .code()
        .is_some_and(|c| c.starts_with("22") || c.starts_with("23"))
}

pub async fn current_revision(pool: &PgPool) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar("SELECT revision FROM snapshot_revision")
        .fetch_one(pool)
        .await
}

/// A channel's status change, with its reason and actor, as a row of `channel_status_events`:
/// a domain write made inside the caller's transaction, whether an operator's REST call or the
/// recovery job changed the status.
pub async fn record_status_event(
    tx: &mut sqlx::PgConnection,
    channel_id: i64,
    from: Option<ChannelStatus>,
    to: ChannelStatus,
    reason: &str,
    actor: &str,
) -> ApiResult<i64> {
    let id = sqlx::query_scalar(
        "INSERT INTO channel_status_events (channel_id, from_status, to_status, reason, actor) \
         VALUES ($1, $2, $3, $4, $5) RETURNING id",
    )
    .bind(channel_id)
    .bind(from.map(ChannelStatus::as_str))
    .bind(to.as_str())
    .bind(reason)
    .bind(actor)
    .fetch_one(tx)
    .await?;
    Ok(id)
}

/// A name a proxy reported (a usage dimension, a request-log field), if it can be stored: at
/// most `max` characters and no NUL (Postgres text cannot hold one).
pub fn check_reported_name(field: &str, value: &str, max: usize) -> Result<(), String> {
    if value.chars().count() > max {
        return Err(format!("{field} is longer than {max} characters"));
    }
    if value.contains('\0') {
        return Err(format!("{field} contains a NUL character"));
    }
    Ok(())
}
