//! Recovery (docs/src/concepts/channel-lifecycle.md): one leader across control-plane replicas
//! records breakers tripped in the shared state as `auto_disabled` channels, and quietly probes the
//! channels that are `auto_disabled` (or whose breaker is open), each on its own schedule
//! (`switchyard_upstream::ProbeSchedule`: first probe jittered within one
//! `recovery_probe_interval_seconds`, each failure doubling the wait up to 8× the interval). A pass
//! re-enables the channel through the audited write path, closes its breaker and starts its
//! recovering window (slow start) fleet-wide (`StateStore::begin_recovery`). Credentials the fleet
//! disabled at runtime (a keyword rule on a multi-key channel) are probed one by one in the same
//! rounds, whatever their channel's status short of a manual disable; a pass lifts that
//! credential's disable fleet-wide (`StateStore::enable_credential`).
//!
//! What to probe (channels, their credentials and members) is read from the publisher's current
//! snapshot, not re-queried: the probe itself is `switchyard_upstream`'s, the one the proxies
//! use, asking the upstream model of the channel's first enabled member for one token. A channel
//! with no enabled member has nothing to ask for and is skipped (logged, `RoundReport::unprobed`).
//!
//! Architecture invariant: a manual disable is never undone. Status changes are made under the
//! channel's row lock and only from the status the job expects (`enabled` → `auto_disabled`,
//! `auto_disabled` → `enabled`), so an operator's `disabled` always wins, even one set while a
//! probe was in flight.

mod leader;
mod probe;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use serde_json::{json, Map, Value};
use sqlx::postgres::PgConnectOptions;
use sqlx::PgPool;
use switchyard_engine::{
    Channel, ChannelId, ChannelStatus, CredentialId, HealthView, Settings, Snapshot,
};
use switchyard_metrics::{Collect, Type, Writer};
use switchyard_state::{unix_ms, ChannelState};
use switchyard_upstream::{probe_model, Due, HttpClient, ProbeSchedules};
use tokio_util::sync::CancellationToken;

pub use leader::{Leadership, RECOVERY_LOCK_KEY};
pub use probe::ProbeOutcome;
use probe::ProbeTarget;

use crate::compile::settings_from_stored;
use crate::db::{commit_write, record_status_event, Audit};
use crate::live::LiveState;
use crate::notify::sources::channel_status;
use crate::publisher::Publisher;

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
    /// How probes connect (extra trusted roots, HTTP/2); the connect timeout is set from
    /// `probe_timeout`.
    pub upstream: switchyard_upstream::ClientOptions,
}

impl Default for RecoveryConfig {
    fn default() -> RecoveryConfig {
        RecoveryConfig {
            tick: Duration::from_secs(2),
            probe_timeout: Duration::from_secs(5),
            lock_key: RECOVERY_LOCK_KEY,
            upstream: switchyard_upstream::ClientOptions::new(Duration::from_secs(3)),
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
    /// Channels that were due a probe (their own, or one of their runtime-disabled credentials')
    /// but have no enabled member, so no model to ask for: not probed.
    pub unprobed: Vec<i64>,
}

pub struct Recovery {
    pool: PgPool,
    live: Option<LiveState>,
    /// Where the rounds read channels, credentials and members: the current published snapshot.
    publisher: OnceLock<Arc<Publisher>>,
    client: HttpClient,
    config: RecoveryConfig,
    leader: AtomicBool,
    rounds: AtomicU64,
    probes_passed: AtomicU64,
    probes_failed: AtomicU64,
    breakers_recorded: AtomicU64,
    schedule: Mutex<ProbeSchedules>,
}

async fn load_settings(pool: &PgPool) -> anyhow::Result<Settings> {
    let stored: sqlx::types::Json<Map<String, Value>> =
        sqlx::query_scalar("SELECT value FROM settings")
            .fetch_one(pool)
            .await
            .context("reading settings")?;
    settings_from_stored(stored.0)
}

/// A seed for the simulated failures of `mock` channels' probes.
fn probe_seed() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0x5EED)
}

impl Recovery {
    pub fn new(pool: PgPool, live: Option<LiveState>, config: RecoveryConfig) -> Arc<Recovery> {
        let mut upstream = config.upstream.clone();
        upstream.connect_timeout = config.probe_timeout.min(Duration::from_secs(3));
        let client = switchyard_upstream::HttpClient::new(upstream);
        Arc::new(Recovery {
            pool,
            live,
            publisher: OnceLock::new(),
            client,
            config,
            leader: AtomicBool::new(false),
            rounds: AtomicU64::new(0),
            probes_passed: AtomicU64::new(0),
            probes_failed: AtomicU64::new(0),
            breakers_recorded: AtomicU64::new(0),
            schedule: Mutex::new(ProbeSchedules::new(probe_seed())),
        })
    }

    fn schedules(&self) -> MutexGuard<'_, ProbeSchedules> {
        self.schedule.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The publisher whose current snapshot the rounds read (set once; later calls are ignored).
    /// Until it is set, or while it has published nothing, rounds record breakers but probe
    /// nothing (`RoundReport::skipped`). `AppState::with_recovery` sets it to the app's own.
    pub fn read_snapshots_from(&self, publisher: Arc<Publisher>) {
        let _ = self.publisher.set(publisher);
    }

    fn snapshot(&self) -> Option<Arc<Snapshot>> {
        let published = self.publisher.get()?.current()?;
        Some(Arc::clone(&published.snapshot))
    }

    /// Whether this replica holds the lead right now.
    pub fn is_leader(&self) -> bool {
        self.leader.load(Ordering::Relaxed)
    }

    /// Probe rounds this replica has run as the leader: ticks at which at least one channel or
    /// credential was due a probe (and every `run_round`).
    pub fn rounds(&self) -> u64 {
        self.rounds.load(Ordering::Relaxed)
    }

    /// Runs until `shutdown`: every tick, keep (or try to take) the lead; as the leader, record
    /// open breakers and probe when a round is due. Gives the lead up on the way out.
    pub async fn run(self: Arc<Self>, options: PgConnectOptions, shutdown: CancellationToken) {
        let mut leadership = Leadership::new(options, self.config.lock_key);
        loop {
            match leadership.ensure().await {
                Ok(true) => {
                    if !self.leader.swap(true, Ordering::Relaxed) {
                        tracing::info!("took the recovery-probe lead");
                        // A new leader cannot know the previous one's schedule: it starts afresh,
                        // every channel's first probe jittered within one interval.
                        *self.schedules() = ProbeSchedules::new(probe_seed());
                    }
                    // A round in progress is abandoned on shutdown (an open transaction rolls
                    // back); the next leader probes again.
                    tokio::select! {
                        _ = shutdown.cancelled() => break,
                        ticked = self.leader_tick() => {
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

    async fn leader_tick(&self) -> anyhow::Result<()> {
        let settings = load_settings(&self.pool).await?;
        let due = Due::Scheduled {
            now: unix_ms(),
            interval_ms: u64::from(settings.recovery_probe_interval_seconds).saturating_mul(1000),
        };
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
        self.round(&settings, Due::All).await
    }

    async fn round(&self, settings: &Settings, due: Due) -> anyhow::Result<RoundReport> {
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
        let Some(snapshot) = self.snapshot() else {
            report.skipped = Some("no snapshot published yet");
            return Ok(report);
        };
        let credentials = self.due_credentials(&snapshot, due);
        let channels = self.due_channels(&snapshot, &open, due);
        if matches!(due, Due::Scheduled { .. }) && credentials.is_empty() && channels.is_empty() {
            report.skipped = Some("no probe round due");
            return Ok(report);
        }
        self.rounds.fetch_add(1, Ordering::Relaxed);
        let interval_ms = u64::from(settings.recovery_probe_interval_seconds).saturating_mul(1000);
        // Credentials first: one that recovers is then usable by its channel's probe below.
        self.probe_disabled_credentials(&snapshot, credentials, interval_ms, &mut report)
            .await?;
        self.probe_channels(&snapshot, channels, settings, &mut report)
            .await?;
        Ok(report)
    }

    /// Runtime-disabled credentials (the shared state's dump) still enabled in the snapshot, on a
    /// channel that is `enabled` or `auto_disabled` (an operator's `disabled` channel is left
    /// alone), that are due a probe; in credential id order.
    fn due_credentials(&self, snapshot: &Snapshot, due: Due) -> Vec<CredentialId> {
        let Some(live) = &self.live else {
            return Vec::new();
        };
        let disabled: HashSet<i64> = live
            .store()
            .dump(unix_ms())
            .credentials_disabled
            .iter()
            .map(|c| c.credential_id)
            .collect();
        let mut needed: Vec<CredentialId> = snapshot
            .channels()
            .filter(|c| c.status != ChannelStatus::Disabled)
            .flat_map(|channel| channel.credentials.iter())
            .filter(|k| k.enabled && disabled.contains(&k.id))
            .map(|k| k.id)
            .collect();
        needed.sort_unstable();
        self.schedules().due_credentials(due, needed)
    }

    /// Every `auto_disabled` channel and every `enabled` one whose breaker is open, that is due
    /// a probe; in channel id order.
    fn due_channels(&self, snapshot: &Snapshot, open: &[ChannelState], due: Due) -> Vec<ChannelId> {
        let open_ids: HashSet<ChannelId> = open.iter().map(|c| c.channel_id).collect();
        let mut needed: Vec<ChannelId> = snapshot
            .channels()
            .filter(|c| {
                c.status == ChannelStatus::AutoDisabled
                    || (c.status == ChannelStatus::Enabled && open_ids.contains(&c.id))
            })
            .map(|c| c.id)
            .collect();
        needed.sort_unstable();
        self.schedules().due_channels(due, needed)
    }

    fn open_breakers(&self) -> Vec<ChannelState> {
        match &self.live {
            Some(live) => live
                .store()
                .dump(unix_ms())
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
                    None,
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

    /// `from` → `to` under the channel's row lock, audited (with the `recovering` window, when
    /// given, in the audit detail), with a status event; nothing when the channel is gone or no
    /// longer in `from`. Returns whether it changed.
    async fn change_status(
        &self,
        channel_id: i64,
        from: ChannelStatus,
        to: ChannelStatus,
        reason: &str,
        actor: &str,
        recovering: Option<Value>,
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
        let event = record_status_event(&mut tx, channel_id, Some(from), to, reason, actor).await?;
        if to == ChannelStatus::AutoDisabled || from == ChannelStatus::AutoDisabled {
            let recovered = to == ChannelStatus::Enabled;
            channel_status(&mut tx, event, channel_id, recovered, reason).await?;
        }
        commit_write(
            tx,
            Audit {
                actor,
                action: "update",
                resource: "channel",
                resource_id: Some(channel_id),
                detail: match recovering {
                    Some(window) => {
                        json!({ "status": to.as_str(), "reason": reason, "recovering": window })
                    }
                    None => json!({ "status": to.as_str(), "reason": reason }),
                },
                team: None,
            },
        )
        .await?;
        Ok(true)
    }

    /// Probes, one by one, the runtime-disabled credentials `due` names (see
    /// `due_credentials`). A pass lifts the disable fleet-wide; a failure leaves it and backs
    /// that credential's next probe off. Logged with ids only, never a secret.
    async fn probe_disabled_credentials(
        &self,
        snapshot: &Snapshot,
        due: Vec<CredentialId>,
        interval_ms: u64,
        report: &mut RoundReport,
    ) -> anyhow::Result<()> {
        let Some(live) = &self.live else {
            return Ok(());
        };
        let due: Vec<(i64, &Channel)> = due
            .into_iter()
            .filter_map(|credential_id| {
                snapshot
                    .channels()
                    .find(|c| c.credentials.iter().any(|k| k.id == credential_id))
                    .map(|channel| (credential_id, channel))
            })
            .collect();
        for (credential_id, channel) in due {
            let Some(model) = self.model_for(snapshot, channel, report) else {
                // Nothing to ask with: wait like a failed probe rather than retry every tick.
                self.schedules()
                    .credentials
                    .failed(credential_id, unix_ms(), interval_ms);
                continue;
            };
            let target = ProbeTarget::new(channel, |k| k.id == credential_id, model);
            if target.runtime.credentials.is_empty() {
                continue;
            }
            report.credentials_probed.push(credential_id);
            // A disable set after this instant (the key failed again meanwhile) is not lifted.
            let started = unix_ms();
            match probe::probe(
                &self.client,
                &target,
                self.config.probe_timeout,
                probe_seed(),
            )
            .await
            {
                ProbeOutcome::Passed { .. } => {
                    self.schedules().credentials.passed(credential_id);
                    live.store().enable_credential(credential_id, started);
                    tracing::info!(
                        channel_id = channel.id,
                        channel = %channel.name,
                        credential_id,
                        actor = PROBE_ACTOR,
                        "recovery probe passed; runtime-disabled credential re-enabled"
                    );
                    report.credentials_recovered.push(credential_id);
                }
                ProbeOutcome::Failed { last, .. } => {
                    let next_at =
                        self.schedules()
                            .credentials
                            .failed(credential_id, unix_ms(), interval_ms);
                    tracing::info!(
                        channel_id = channel.id,
                        channel = %channel.name,
                        credential_id,
                        result = %probe::describe(last),
                        next_probe_at_ms = next_at,
                        "recovery probe failed; credential stays disabled"
                    );
                    report.credentials_failed.push(credential_id);
                }
            }
        }
        Ok(())
    }

    /// The model `channel` is probed with, or `None` (logged, reported once per round) when it
    /// has no enabled member.
    fn model_for<'s>(
        &self,
        snapshot: &'s Snapshot,
        channel: &Channel,
        report: &mut RoundReport,
    ) -> Option<&'s str> {
        let model = probe_model(snapshot, channel.id);
        if model.is_none() && !report.unprobed.contains(&channel.id) {
            tracing::info!(
                channel_id = channel.id,
                channel = %channel.name,
                "channel has no enabled member, so no model to probe with; not probed"
            );
            report.unprobed.push(channel.id);
        }
        model
    }

    /// Probes the channels `due` names (see `due_channels`): a pass starts the channel's
    /// recovering window, a failure backs its next probe off.
    async fn probe_channels(
        &self,
        snapshot: &Snapshot,
        due: Vec<ChannelId>,
        settings: &Settings,
        report: &mut RoundReport,
    ) -> anyhow::Result<()> {
        let interval_ms = u64::from(settings.recovery_probe_interval_seconds).saturating_mul(1000);
        for channel in due.into_iter().filter_map(|id| snapshot.channel(id)) {
            let id = channel.id;
            let Some(model) = self.model_for(snapshot, channel, report) else {
                // Nothing to ask with: wait like a failed probe rather than retry every tick.
                self.schedules().channels.failed(id, unix_ms(), interval_ms);
                continue;
            };
            let target = self.target(channel, model);
            report.probed.push(id);
            let outcome = probe::probe(
                &self.client,
                &target,
                self.config.probe_timeout,
                probe_seed(),
            )
            .await;
            match outcome {
                ProbeOutcome::Passed { credential_id } => {
                    self.probes_passed.fetch_add(1, Ordering::Relaxed);
                    self.schedules().channels.passed(id);
                    self.recovered(snapshot, channel, &target, credential_id, settings)
                        .await?;
                    report.recovered.push(id);
                }
                ProbeOutcome::Failed { tried, last } => {
                    self.probes_failed.fetch_add(1, Ordering::Relaxed);
                    let next_at = self.schedules().channels.failed(id, unix_ms(), interval_ms);
                    tracing::info!(
                        channel_id = id,
                        channel = %channel.name,
                        model = %target.model,
                        credentials_tried = tried,
                        result = %probe::describe(last),
                        next_probe_at_ms = next_at,
                        "recovery probe failed; channel stays disabled"
                    );
                    report.failed.push(id);
                }
            }
        }
        Ok(())
    }

    /// The channel with its credentials enabled in the snapshot, secrets resolved here (inline,
    /// or the control plane's own environment for `secret_env`). Credentials the fleet disabled
    /// at runtime are left out: proxies would not use them, so they prove nothing (they are
    /// probed on their own first, see `probe_disabled_credentials`).
    fn target(&self, channel: &Channel, model: &str) -> ProbeTarget {
        let runtime_disabled = |credential: i64| {
            let mut disabled = false;
            if let Some(live) = &self.live {
                live.store().with_view(&mut |view: &dyn HealthView| {
                    disabled = view.credential_disabled(credential);
                });
            }
            disabled
        };
        ProbeTarget::new(channel, |k| k.enabled && !runtime_disabled(k.id), model)
    }

    /// A passed probe: close the breaker, clear the members' failure state and start the
    /// channel's recovering window (slow start) fleet-wide, then re-enable the channel if (and
    /// only if) Postgres still has it `auto_disabled` (the row lock decides, not the snapshot,
    /// which may be a moment behind). The status event's reason names the window.
    async fn recovered(
        &self,
        snapshot: &Snapshot,
        channel: &Channel,
        target: &ProbeTarget,
        credential_id: i64,
        settings: &Settings,
    ) -> anyhow::Result<()> {
        let slow_start_ms = u64::from(settings.slow_start_seconds).saturating_mul(1000);
        let started = unix_ms();
        if let Some(live) = &self.live {
            let members: Vec<i64> = snapshot
                .routes()
                .iter()
                .flat_map(|route| route.members.iter())
                .filter(|member| member.channel_id == channel.id)
                .map(|member| member.id)
                .collect();
            live.store()
                .begin_recovery(channel.id, &members, started, slow_start_ms);
        }
        let probe = if target.runtime.mock.is_some() {
            "recovery probe passed (mock channel)".to_owned()
        } else {
            format!(
                "recovery probe passed (one-token generation of {} with credential {credential_id})",
                target.model
            )
        };
        // The window itself is runtime state (shared state, explain, `/api/v1/state`); the
        // audit row of this re-enable records it too.
        let recovering = (slow_start_ms > 0).then(|| {
            json!({
                "since_ms": started,
                "until_ms": started.saturating_add(slow_start_ms),
                "slow_start_seconds": settings.slow_start_seconds,
                "slow_start_initial_percent": settings.slow_start_initial_percent,
            })
        });
        let re_enabled = self
            .change_status(
                channel.id,
                ChannelStatus::AutoDisabled,
                ChannelStatus::Enabled,
                &probe,
                PROBE_ACTOR,
                recovering,
            )
            .await
            .with_context(|| format!("re-enabling channel {}", channel.id))?;
        tracing::info!(
            channel_id = channel.id,
            channel = %channel.name,
            re_enabled,
            slow_start_seconds = settings.slow_start_seconds,
            "recovery probe passed; breaker closed, channel recovering"
        );
        Ok(())
    }
}

/// `switchyard_cp_recovery_*` on `/metrics`.
impl Collect for Recovery {
    fn collect(&self, w: &mut Writer<'_>) {
        for (name, kind, help, value) in [
            (
                "switchyard_cp_recovery_leader",
                Type::Gauge,
                "1 while this replica runs the recovery probes (holds the advisory lock).",
                u64::from(self.is_leader()),
            ),
            (
                "switchyard_cp_recovery_rounds_total",
                Type::Counter,
                "Recovery probe rounds run by this replica.",
                self.rounds(),
            ),
            (
                "switchyard_cp_recovery_probes_passed_total",
                Type::Counter,
                "Channels whose recovery probe passed.",
                self.probes_passed.load(Ordering::Relaxed),
            ),
            (
                "switchyard_cp_recovery_probes_failed_total",
                Type::Counter,
                "Channels whose recovery probe failed on every credential.",
                self.probes_failed.load(Ordering::Relaxed),
            ),
            (
                "switchyard_cp_breakers_recorded_total",
                Type::Counter,
                "Open breakers recorded as auto_disabled channels.",
                self.breakers_recorded.load(Ordering::Relaxed),
            ),
        ] {
            w.single(name, kind, help, value);
        }
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
