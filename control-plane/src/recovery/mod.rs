//! Recovery (SPEC §4, §5): one leader across control-plane replicas records breakers tripped in
//! the shared state as `auto_disabled` channels, and every `recovery_probe_interval_seconds`
//! quietly probes the channels that are `auto_disabled` (or whose breaker is open); a pass
//! re-enables the channel through the audited write path and closes its breaker fleet-wide.
//! Credentials the fleet disabled at runtime (a keyword rule on a multi-key channel) are probed
//! one by one in the same rounds, whatever their channel's status short of a manual disable; a
//! pass lifts that credential's disable fleet-wide (`StateStore::enable_credential`).
//!
//! Architecture invariant: a manual disable is never undone. Status changes are made under the
//! channel's row lock and only from the status the job expects (`enabled` → `auto_disabled`,
//! `auto_disabled` → `enabled`), so an operator's `disabled` always wins, even one set while a
//! probe was in flight.

mod leader;
mod probe;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use serde_json::{json, Map, Value};
use sqlx::postgres::PgConnectOptions;
use sqlx::PgPool;
use switchyard_engine::{ChannelStatus, HealthView, Provider, Settings};
use switchyard_state::ChannelState;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

pub use leader::{Leadership, RECOVERY_LOCK_KEY};
pub use probe::{models_url, ProbeOutcome};
use probe::{ProbeClient, ProbeTarget, Secret};

use crate::api::record_status_event;
use crate::compile::settings_from_stored;
use crate::db::{commit_write, Audit};
use crate::live::LiveState;

/// Actor of the writes this job makes, in the audit log and channel events.
pub const BREAKER_ACTOR: &str = "system:breaker";
pub const PROBE_ACTOR: &str = "system:recovery-probe";

#[derive(Debug, Clone)]
pub struct RecoveryConfig {
    /// How often a replica checks (or tries to take) the lead, records open breakers, and looks
    /// whether a probe round is due.
    pub tick: Duration,
    /// Budget of one probe request (per credential).
    pub probe_timeout: Duration,
    /// The advisory lock key; replicas of one fleet must agree on it.
    pub lock_key: i64,
}

impl Default for RecoveryConfig {
    fn default() -> RecoveryConfig {
        RecoveryConfig {
            tick: Duration::from_secs(2),
            probe_timeout: Duration::from_secs(5),
            lock_key: RECOVERY_LOCK_KEY,
        }
    }
}

/// What one round did (tests, logs).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RoundReport {
    /// Why nothing was probed, when nothing was.
    pub skipped: Option<&'static str>,
    /// Channels newly recorded as `auto_disabled` because their breaker is open.
    pub breakers_recorded: Vec<i64>,
    pub probed: Vec<i64>,
    /// Probes that passed (breaker closed; re-enabled if it was `auto_disabled`).
    pub recovered: Vec<i64>,
    pub failed: Vec<i64>,
    /// Runtime-disabled credentials probed on their own.
    pub credentials_probed: Vec<i64>,
    /// Credentials whose probe passed: their runtime disable is lifted fleet-wide.
    pub credentials_recovered: Vec<i64>,
    /// Credentials whose probe failed: they stay disabled.
    pub credentials_failed: Vec<i64>,
}

pub struct Recovery {
    pool: PgPool,
    live: Option<LiveState>,
    client: ProbeClient,
    config: RecoveryConfig,
    leader: AtomicBool,
    rounds: AtomicU64,
    probes_passed: AtomicU64,
    probes_failed: AtomicU64,
    breakers_recorded: AtomicU64,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

async fn load_settings(pool: &PgPool) -> anyhow::Result<Settings> {
    let stored: sqlx::types::Json<Map<String, Value>> =
        sqlx::query_scalar("SELECT value FROM settings")
            .fetch_one(pool)
            .await
            .context("reading settings")?;
    settings_from_stored(stored.0)
}

#[derive(sqlx::FromRow)]
struct ChannelRow {
    id: i64,
    name: String,
    provider: String,
    base_url: String,
    status: String,
    headers: sqlx::types::Json<std::collections::BTreeMap<String, String>>,
}

/// One runtime-disabled credential with its channel, to probe on its own.
#[derive(sqlx::FromRow)]
struct DisabledCredentialRow {
    credential_id: i64,
    secret: Option<String>,
    secret_env: Option<String>,
    channel_id: i64,
    name: String,
    provider: String,
    base_url: String,
    headers: sqlx::types::Json<std::collections::BTreeMap<String, String>>,
}

/// A credential's secret: inline, or from the control plane's own environment (`secret_env`).
/// `None` (with a warning naming the variable, never a value) when it cannot be resolved.
fn resolve_secret(
    channel_id: i64,
    credential_id: i64,
    secret: Option<String>,
    secret_env: Option<String>,
) -> Option<Secret> {
    let secret = match (secret, secret_env) {
        (Some(secret), _) => Some(secret),
        (None, Some(name)) => {
            let value = std::env::var(&name).ok();
            if value.is_none() {
                tracing::warn!(
                    channel_id,
                    credential_id,
                    env = %name,
                    "credential's environment variable is not set on the control plane; not probed"
                );
            }
            value
        }
        (None, None) => None,
    };
    secret.map(Secret::new)
}

impl Recovery {
    pub fn new(pool: PgPool, live: Option<LiveState>, config: RecoveryConfig) -> Arc<Recovery> {
        let client = probe::client(config.probe_timeout.min(Duration::from_secs(3)));
        Arc::new(Recovery {
            pool,
            live,
            client,
            config,
            leader: AtomicBool::new(false),
            rounds: AtomicU64::new(0),
            probes_passed: AtomicU64::new(0),
            probes_failed: AtomicU64::new(0),
            breakers_recorded: AtomicU64::new(0),
        })
    }

    /// Whether this replica holds the lead right now.
    pub fn is_leader(&self) -> bool {
        self.leader.load(Ordering::Relaxed)
    }

    /// Probe rounds this replica has run as the leader.
    pub fn rounds(&self) -> u64 {
        self.rounds.load(Ordering::Relaxed)
    }

    /// `switchyard_cp_recovery_*` lines for `/metrics`.
    pub fn render_metrics(&self, out: &mut String) {
        use std::fmt::Write as _;
        for (name, kind, help, value) in [
            (
                "switchyard_cp_recovery_leader",
                "gauge",
                "1 while this replica runs the recovery probes (holds the advisory lock).",
                u64::from(self.is_leader()),
            ),
            (
                "switchyard_cp_recovery_rounds_total",
                "counter",
                "Recovery probe rounds run by this replica.",
                self.rounds(),
            ),
            (
                "switchyard_cp_recovery_probes_passed_total",
                "counter",
                "Channels whose recovery probe passed.",
                self.probes_passed.load(Ordering::Relaxed),
            ),
            (
                "switchyard_cp_recovery_probes_failed_total",
                "counter",
                "Channels whose recovery probe failed on every credential.",
                self.probes_failed.load(Ordering::Relaxed),
            ),
            (
                "switchyard_cp_breakers_recorded_total",
                "counter",
                "Open breakers recorded as auto_disabled channels.",
                self.breakers_recorded.load(Ordering::Relaxed),
            ),
        ] {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
            );
        }
    }

    /// Runs until `shutdown`: every tick, keep (or try to take) the lead; as the leader, record
    /// open breakers and probe when a round is due. Gives the lead up on the way out.
    pub async fn run(self: Arc<Self>, options: PgConnectOptions, shutdown: CancellationToken) {
        let mut leadership = Leadership::new(options, self.config.lock_key);
        // A new leader probes at once: it cannot know when the previous one last did.
        let mut last_round: Option<Instant> = None;
        loop {
            match leadership.ensure().await {
                Ok(true) => {
                    if !self.leader.swap(true, Ordering::Relaxed) {
                        tracing::info!("took the recovery-probe lead");
                        last_round = None;
                    }
                    // A round in progress is abandoned on shutdown (an open transaction rolls
                    // back); the next leader probes again.
                    tokio::select! {
                        _ = shutdown.cancelled() => break,
                        ticked = self.leader_tick(&mut last_round) => {
                            if let Err(error) = ticked {
                                tracing::warn!(error = format!("{error:#}"), "recovery tick failed");
                            }
                        }
                    }
                }
                Ok(false) => {
                    if self.leader.swap(false, Ordering::Relaxed) {
                        tracing::info!("lost the recovery-probe lead");
                    }
                }
                Err(error) => {
                    if self.leader.swap(false, Ordering::Relaxed) {
                        tracing::warn!(
                            error = format!("{error:#}"),
                            "lost the recovery-probe lead"
                        );
                    } else {
                        tracing::debug!(
                            error = format!("{error:#}"),
                            "cannot contend for the recovery-probe lead"
                        );
                    }
                }
            }
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = tokio::time::sleep(self.config.tick) => {}
            }
        }
        leadership.release().await;
        self.leader.store(false, Ordering::Relaxed);
    }

    async fn leader_tick(&self, last_round: &mut Option<Instant>) -> anyhow::Result<()> {
        let settings = load_settings(&self.pool).await?;
        let interval = Duration::from_secs(settings.recovery_probe_interval_seconds.into());
        let due = last_round.is_none_or(|at| at.elapsed() >= interval);
        if due && probes_on(&settings).is_ok() && settings.fault_protection_enabled {
            *last_round = Some(Instant::now());
        }
        let report = self.round(&settings, due).await?;
        if !report.probed.is_empty()
            || !report.breakers_recorded.is_empty()
            || !report.credentials_probed.is_empty()
        {
            tracing::info!(
                breakers_recorded = ?report.breakers_recorded,
                probed = ?report.probed,
                recovered = ?report.recovered,
                failed = ?report.failed,
                credentials_probed = ?report.credentials_probed,
                credentials_recovered = ?report.credentials_recovered,
                credentials_failed = ?report.credentials_failed,
                "recovery round"
            );
        }
        Ok(())
    }

    /// One full round as the leader runs it when a probe is due, whatever the timing (tests,
    /// drills). Obeys the settings.
    pub async fn run_round(&self) -> anyhow::Result<RoundReport> {
        let settings = load_settings(&self.pool).await?;
        self.round(&settings, true).await
    }

    async fn round(&self, settings: &Settings, probe_due: bool) -> anyhow::Result<RoundReport> {
        let mut report = RoundReport::default();
        if !settings.fault_protection_enabled {
            report.skipped = Some("fault_protection_enabled is off");
            return Ok(report);
        }
        let open = self.open_breakers();
        report.breakers_recorded = self.record_open_breakers(&open).await?;
        if let Err(why) = probes_on(settings) {
            report.skipped = Some(why);
            return Ok(report);
        }
        if !probe_due {
            report.skipped = Some("no probe round due");
            return Ok(report);
        }
        self.rounds.fetch_add(1, Ordering::Relaxed);
        // Credentials first: one that recovers is then usable by its channel's probe below.
        self.probe_disabled_credentials(&mut report).await?;
        self.probe_channels(&open, &mut report).await?;
        Ok(report)
    }

    fn open_breakers(&self) -> Vec<ChannelState> {
        match &self.live {
            Some(live) => live
                .store()
                .dump(now_ms())
                .channels
                .into_iter()
                .filter(|c| c.breaker_open)
                .collect(),
            None => Vec::new(),
        }
    }

    /// An open breaker on a channel Postgres still has `enabled` becomes an `auto_disabled`
    /// status with its reason, so the admin API shows what the fleet is doing. A channel an
    /// operator disabled stays `disabled`.
    async fn record_open_breakers(&self, open: &[ChannelState]) -> anyhow::Result<Vec<i64>> {
        let mut recorded = Vec::new();
        for breaker in open {
            let reason = match &breaker.reason {
                Some(reason) if !reason.is_empty() => format!("breaker tripped ({reason})"),
                _ => format!(
                    "breaker tripped ({} consecutive failures)",
                    breaker.consecutive_failures
                ),
            };
            let changed = self
                .change_status(
                    breaker.channel_id,
                    ChannelStatus::Enabled,
                    ChannelStatus::AutoDisabled,
                    &reason,
                    BREAKER_ACTOR,
                )
                .await
                .with_context(|| format!("recording channel {}'s breaker", breaker.channel_id))?;
            if changed {
                self.breakers_recorded.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(channel_id = breaker.channel_id, reason = %reason, "channel auto-disabled");
                recorded.push(breaker.channel_id);
            }
        }
        Ok(recorded)
    }

    /// `from` → `to` under the channel's row lock, audited, with a status event; nothing when the
    /// channel is gone or no longer in `from`. Returns whether it changed.
    async fn change_status(
        &self,
        channel_id: i64,
        from: ChannelStatus,
        to: ChannelStatus,
        reason: &str,
        actor: &str,
    ) -> anyhow::Result<bool> {
        let mut tx = self.pool.begin().await?;
        let status: Option<String> =
            sqlx::query_scalar("SELECT status FROM channels WHERE id = $1 FOR UPDATE")
                .bind(channel_id)
                .fetch_optional(&mut *tx)
                .await?;
        if status.as_deref() != Some(from.as_str()) {
            return Ok(false);
        }
        sqlx::query("UPDATE channels SET status = $2, updated_at = now() WHERE id = $1")
            .bind(channel_id)
            .bind(to.as_str())
            .execute(&mut *tx)
            .await?;
        record_status_event(&mut tx, channel_id, Some(from), to, reason, actor).await?;
        commit_write(
            tx,
            Audit {
                actor,
                action: "update",
                resource: "channel",
                resource_id: Some(channel_id),
                detail: json!({ "status": to.as_str(), "reason": reason }),
            },
        )
        .await?;
        Ok(true)
    }

    /// Probes, one by one, every credential the fleet disabled at runtime (the shared state's
    /// dump) that is still enabled in Postgres, on a channel that is `enabled` or
    /// `auto_disabled` (an operator's `disabled` channel is left alone). A pass lifts the
    /// disable fleet-wide; a failure leaves it. Logged with ids only, never a secret.
    async fn probe_disabled_credentials(&self, report: &mut RoundReport) -> anyhow::Result<()> {
        let Some(live) = &self.live else {
            return Ok(());
        };
        let disabled: Vec<i64> = live
            .store()
            .dump(now_ms())
            .credentials_disabled
            .iter()
            .map(|c| c.credential_id)
            .collect();
        if disabled.is_empty() {
            return Ok(());
        }
        let rows: Vec<DisabledCredentialRow> = sqlx::query_as(
            "SELECT k.id AS credential_id, k.secret, k.secret_env, c.id AS channel_id, c.name, \
             c.provider, c.base_url, c.headers FROM credentials k \
             JOIN channels c ON c.id = k.channel_id \
             WHERE k.id = ANY($1) AND k.enabled AND c.status IN ('enabled', 'auto_disabled') \
             ORDER BY k.id",
        )
        .bind(&disabled)
        .fetch_all(&self.pool)
        .await
        .context("listing runtime-disabled credentials to probe")?;
        for row in rows {
            let credential_id = row.credential_id;
            let Some(secret) =
                resolve_secret(row.channel_id, credential_id, row.secret, row.secret_env)
            else {
                continue;
            };
            let target = ProbeTarget {
                channel_id: row.channel_id,
                name: row.name,
                provider: Provider::parse(&row.provider).unwrap_or(Provider::Openai),
                base_url: row.base_url,
                headers: row.headers.0,
                credentials: vec![(credential_id, secret)],
            };
            report.credentials_probed.push(credential_id);
            // A disable set after this instant (the key failed again meanwhile) is not lifted.
            let started = now_ms();
            match probe::probe(&self.client, &target, self.config.probe_timeout).await {
                ProbeOutcome::Passed { .. } => {
                    live.store().enable_credential(credential_id, started);
                    tracing::info!(
                        channel_id = target.channel_id,
                        channel = %target.name,
                        credential_id,
                        actor = PROBE_ACTOR,
                        "recovery probe passed; runtime-disabled credential re-enabled"
                    );
                    report.credentials_recovered.push(credential_id);
                }
                ProbeOutcome::Failed { last_error, .. } => {
                    tracing::info!(
                        channel_id = target.channel_id,
                        channel = %target.name,
                        credential_id,
                        last_error = %last_error,
                        "recovery probe failed; credential stays disabled"
                    );
                    report.credentials_failed.push(credential_id);
                }
            }
        }
        Ok(())
    }

    /// Probes every `auto_disabled` channel and every `enabled` one whose breaker is open.
    async fn probe_channels(
        &self,
        open: &[ChannelState],
        report: &mut RoundReport,
    ) -> anyhow::Result<()> {
        let open_ids: Vec<i64> = open.iter().map(|c| c.channel_id).collect();
        let rows: Vec<ChannelRow> = sqlx::query_as(
            "SELECT id, name, provider, base_url, status, headers FROM channels \
             WHERE status = 'auto_disabled' OR (status = 'enabled' AND id = ANY($1)) ORDER BY id",
        )
        .bind(&open_ids)
        .fetch_all(&self.pool)
        .await
        .context("listing channels to probe")?;
        for row in rows {
            let id = row.id;
            let status = row.status.clone();
            let target = self.target(row).await?;
            report.probed.push(id);
            let outcome = probe::probe(&self.client, &target, self.config.probe_timeout).await;
            match outcome {
                ProbeOutcome::Passed { credential_id } => {
                    self.probes_passed.fetch_add(1, Ordering::Relaxed);
                    self.recovered(&target, &status, credential_id).await?;
                    report.recovered.push(id);
                }
                ProbeOutcome::Failed { tried, last_error } => {
                    self.probes_failed.fetch_add(1, Ordering::Relaxed);
                    tracing::info!(
                        channel_id = id,
                        channel = %target.name,
                        credentials_tried = tried,
                        last_error = %last_error,
                        "recovery probe failed; channel stays disabled"
                    );
                    report.failed.push(id);
                }
            }
        }
        Ok(())
    }

    /// The channel with its enabled credentials, secrets resolved here (inline, or the control
    /// plane's own environment for `secret_env`). Credentials the fleet disabled at runtime are
    /// left out: proxies would not use them, so they prove nothing (they are probed on their own
    /// first, see `probe_disabled_credentials`).
    async fn target(&self, row: ChannelRow) -> anyhow::Result<ProbeTarget> {
        let credentials: Vec<(i64, Option<String>, Option<String>)> = sqlx::query_as(
            "SELECT id, secret, secret_env FROM credentials \
             WHERE channel_id = $1 AND enabled ORDER BY id",
        )
        .bind(row.id)
        .fetch_all(&self.pool)
        .await
        .context("reading credentials to probe")?;
        let runtime_disabled = |credential: i64| {
            let mut disabled = false;
            if let Some(live) = &self.live {
                live.store().with_view(&mut |view: &dyn HealthView| {
                    disabled = view.credential_disabled(credential);
                });
            }
            disabled
        };
        let mut resolved = Vec::with_capacity(credentials.len());
        for (id, secret, secret_env) in credentials {
            if runtime_disabled(id) {
                continue;
            }
            if let Some(secret) = resolve_secret(row.id, id, secret, secret_env) {
                resolved.push((id, secret));
            }
        }
        Ok(ProbeTarget {
            channel_id: row.id,
            name: row.name,
            provider: Provider::parse(&row.provider).unwrap_or(Provider::Openai),
            base_url: row.base_url,
            headers: row.headers.0,
            credentials: resolved,
        })
    }

    /// A passed probe: close the breaker and clear the members' failure state fleet-wide, then
    /// re-enable the channel if (and only if) it is still `auto_disabled`.
    async fn recovered(
        &self,
        target: &ProbeTarget,
        status: &str,
        credential_id: Option<i64>,
    ) -> anyhow::Result<()> {
        if let Some(live) = &self.live {
            let members: Vec<i64> =
                sqlx::query_scalar("SELECT id FROM route_members WHERE channel_id = $1")
                    .bind(target.channel_id)
                    .fetch_all(&self.pool)
                    .await
                    .context("reading the channel's members")?;
            live.store().reset_channel(target.channel_id, &members);
        }
        let reason = match credential_id {
            Some(id) => format!("recovery probe passed (GET /v1/models with credential {id})"),
            None => "recovery probe passed (mock channel)".to_owned(),
        };
        let mut re_enabled = false;
        if status == ChannelStatus::AutoDisabled.as_str() {
            re_enabled = self
                .change_status(
                    target.channel_id,
                    ChannelStatus::AutoDisabled,
                    ChannelStatus::Enabled,
                    &reason,
                    PROBE_ACTOR,
                )
                .await
                .with_context(|| format!("re-enabling channel {}", target.channel_id))?;
        }
        tracing::info!(
            channel_id = target.channel_id,
            channel = %target.name,
            re_enabled,
            "recovery probe passed; breaker closed"
        );
        Ok(())
    }
}

/// Why probes are off, if they are (`fault_protection_enabled` is checked first by the caller).
fn probes_on(settings: &Settings) -> Result<(), &'static str> {
    if !settings.recovery_probe_enabled {
        Err("recovery_probe_enabled is off")
    } else if settings.recovery_probe_interval_seconds == 0 {
        Err("recovery_probe_interval_seconds is 0")
    } else {
        Ok(())
    }
}
