//! Notifications that reach a person: events (budget thresholds, a hard limit starting to
//! refuse, a channel auto-disabled or recovered, a trial finished) recorded once fleet-wide in Postgres and
//! delivered, signed, to the webhooks subscribed to them, off every request path.
//!
//! Every replica runs a [`Notifier`]: each round it records the budget thresholds the reported
//! usage has crossed and the trials that finished, then sends the due deliveries. Two replicas never send one delivery twice
//! (an event's key is unique; a delivery is taken under `FOR UPDATE SKIP LOCKED`); a failed
//! send is retried with a doubling backoff up to a bounded number of attempts.

pub mod deliver;
pub mod event;
pub mod sign;
pub mod sources;
pub mod trials;

use std::sync::Arc;
use std::time::Duration;

use sqlx::PgPool;
use switchyard_engine::UnixMillis;
use switchyard_upstream::{ClientOptions, HttpClient};
use tokio_util::sync::CancellationToken;

use deliver::{deliver_due, Delivered, DeliveryPolicy};
use sources::check_budgets;
use trials::{check_semantic_trials, check_shadows, DEFAULT_TRIAL_SAMPLE};

/// How a notifier runs.
#[derive(Debug, Clone)]
pub struct NotifyConfig {
    /// How often a round runs.
    pub tick: Duration,
    pub delivery: DeliveryPolicy,
    /// How deliveries connect (extra trusted roots, HTTP/2).
    pub upstream: ClientOptions,
    /// The compared answers after which a semantic cache rule's trial is told as finished.
    pub trial_sample: u64,
}

impl Default for NotifyConfig {
    fn default() -> NotifyConfig {
        NotifyConfig {
            tick: Duration::from_secs(5),
            delivery: DeliveryPolicy::default(),
            upstream: ClientOptions::new(Duration::from_secs(3)),
            trial_sample: DEFAULT_TRIAL_SAMPLE,
        }
    }
}

/// What one round did (tests, logs).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct NotifyRound {
    /// Budget threshold events recorded.
    pub budget_events: usize,
    /// Trial finished events recorded (shadow rules stopped, semantic trials ready).
    pub trial_events: usize,
    pub deliveries: Delivered,
}

pub struct Notifier {
    pool: PgPool,
    client: HttpClient,
    config: NotifyConfig,
}

impl Notifier {
    pub fn new(pool: PgPool, config: NotifyConfig) -> Arc<Notifier> {
        let client = HttpClient::new(config.upstream.clone());
        Arc::new(Notifier {
            pool,
            client,
            config,
        })
    }

    /// One round at `now`: budget thresholds and finished trials recorded, then every due
    /// delivery sent (until a round finds none due).
    pub async fn round(&self, now: UnixMillis) -> anyhow::Result<NotifyRound> {
        let budget_events = check_budgets(&self.pool, now).await?;
        let trial_events = check_shadows(&self.pool, now).await?
            + check_semantic_trials(&self.pool, self.config.trial_sample).await?;
        let mut deliveries = Delivered::default();
        loop {
            let done = deliver_due(&self.pool, &self.client, &self.config.delivery).await?;
            deliveries.delivered += done.delivered;
            deliveries.retried += done.retried;
            deliveries.failed += done.failed;
            if done == Delivered::default() {
                break;
            }
        }
        Ok(NotifyRound {
            budget_events,
            trial_events,
            deliveries,
        })
    }

    /// Rounds every tick until `shutdown`; a failed round is logged and the next one tries again.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        let mut tick = tokio::time::interval(self.config.tick);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tick.tick() => {}
            }
            let round = tokio::select! {
                _ = shutdown.cancelled() => return,
                round = self.round(switchyard_state::unix_ms()) => round,
            };
            if let Err(error) = round {
                tracing::warn!(error = %format!("{error:#}"), "notification round failed");
            }
        }
    }
}
