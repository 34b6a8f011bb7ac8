//! Switchyard's data plane: the OpenAI/Anthropic-compatible proxy. It selects with the pure engine
//! on the latest snapshot, fails over (docs/src/concepts/routing.md), and reports outcomes to the
//! [`StateStore`].
//!
//! Code map: `server` (HTTP edge: router, model listing, each request's id and span) →
//! `phases` (receive → route → admit → proxy → finish over one per-request `context`) →
//! `failover` (the proxy phase: the one retry loop) → `attempt` (one upstream call and its
//! classification) → `upstream` (the upstream as one trait: HTTP, Bedrock over HTTP, the `mock`
//! simulator, the gateway's own answer); `relay` streams a committed response; `record` writes
//! the request's line; [`snapshot`] keeps the compiled view of the current snapshot; [`config`]
//! turns the standalone YAML into a snapshot; `run` wires it all.

mod admission;
mod answer;
#[cfg(test)]
mod answer_matrix_tests;
mod attempt;
mod auth;
mod bedrock;
pub mod cache;
mod cli;
pub mod config;
mod context;
mod endpoint;
mod errors;
mod failover;
mod metrics;
mod mock;
mod phases;
pub mod probe;
mod record;
mod relay;
pub mod request;
mod run;
mod server;
mod shadow;
pub mod snapshot;
mod telemetry;
#[cfg(test)]
mod testing;
mod upstream;
pub mod usage;
mod wire;
mod workers;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwapOption;
use switchyard_engine::{ChannelId, CredentialId};
use switchyard_state::StateStore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

#[doc(hidden)]
pub use answer::{completion_verdicts, BodyCheck};
pub use run::main_with;
pub use server::app;

use crate::metrics::Metrics;
use crate::snapshot::{SnapshotReceiver, View};
use crate::upstream::HttpClient;

/// Shared by every request: the current view, the state store, the client, metrics.
pub struct AppState {
    pub views: Arc<ArcSwapOption<View>>,
    pub store: Arc<dyn StateStore>,
    /// The upstream connection pool of every thread that is not a serving worker (probes).
    client: HttpClient,
    /// One upstream pool per serving worker thread, so a request's upstream connections live on
    /// its own thread (`workers`).
    worker_clients: Box<[HttpClient]>,
    pub metrics: Metrics,
    /// The HTTP server's connection counters, once it runs (rendered in `/metrics`).
    pub connections: OnceLock<switchyard_server::Stats>,
    /// The bearer credential `/metrics` requires, when the operator set one (token names are
    /// then counted too: [`AppState::protect_metrics`]).
    pub metrics_credential: OnceLock<String>,
    /// Fires on SIGTERM: `/readyz` answers 503 so the load balancer stops sending traffic,
    /// while the proxy keeps serving for the drain delay.
    pub draining: CancellationToken,
    /// Fires when the shutdown grace period is over: open streams end with an error event.
    pub streams_cut: CancellationToken,
    /// Usage accounting towards the control plane (fleet mode only; `None` standalone).
    pub usage: Option<Arc<usage::UsageReporter>>,
    /// Shadow traffic: the rules' caps and the background queue (`shadow`).
    pub shadows: shadow::Shadows,
    /// The credentials an upstream refused, already told to the operator, and the snapshot
    /// revision they were told under (a new revision may carry a fixed secret: told anew).
    refusals_told: std::sync::Mutex<(u64, std::collections::HashSet<(ChannelId, CredentialId)>)>,
    seed: AtomicU64,
}

impl AppState {
    /// From now on `/metrics` answers only `Authorization: Bearer <credential>`, and its token
    /// counts carry the token's name (the opt-in: token names often name people or customers,
    /// so an open `/metrics` never shows them). An empty credential changes nothing.
    pub fn protect_metrics(&self, credential: &str) {
        if credential.is_empty() {
            return;
        }
        if self.metrics_credential.set(credential.to_owned()).is_ok() {
            self.metrics.name_tokens();
        }
    }

    /// Builds the state and starts following `snapshots` (on the current tokio runtime).
    pub fn new(snapshots: SnapshotReceiver, store: Arc<dyn StateStore>) -> Arc<AppState> {
        AppState::with_usage(snapshots, store, None)
    }

    /// [`AppState::new`] with usage accounting (fleet mode).
    pub fn with_usage(
        snapshots: SnapshotReceiver,
        store: Arc<dyn StateStore>,
        usage: Option<Arc<usage::UsageReporter>>,
    ) -> Arc<AppState> {
        let upstream = upstream::ClientOptions::new(Duration::from_secs(5));
        AppState::with_tasks(snapshots, store, usage, &TaskTracker::new(), 0, upstream)
    }

    /// [`AppState::with_usage`], its snapshot follower spawned on `tasks` (the process's
    /// tracker; the follower ends when the snapshot channel closes), with an upstream pool for
    /// each of `workers` serving threads, connecting as `upstream` says (its connect timeout is
    /// the first snapshot's, when there is one).
    pub fn with_tasks(
        snapshots: SnapshotReceiver,
        store: Arc<dyn StateStore>,
        usage: Option<Arc<usage::UsageReporter>>,
        tasks: &TaskTracker,
        workers: usize,
        mut upstream: upstream::ClientOptions,
    ) -> Arc<AppState> {
        let views = Arc::new(ArcSwapOption::empty());
        // The pooled client's connect timeout comes from the first snapshot.
        if let Some(snapshot) = snapshots.borrow().clone() {
            upstream.connect_timeout = Duration::from_millis(snapshot.settings.connect_timeout_ms);
            snapshot::install(&views, &*store, snapshot);
        }
        tasks.spawn(snapshot::follow(snapshots, views.clone(), store.clone()));
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0x5EED);
        let (shadows, shadow_queue) = shadow::Shadows::new();
        let state = Arc::new(AppState {
            views,
            store,
            client: HttpClient::new(upstream.clone()),
            worker_clients: (0..workers)
                .map(|_| HttpClient::new(upstream.clone()))
                .collect(),
            metrics: Metrics::default(),
            connections: OnceLock::new(),
            metrics_credential: OnceLock::new(),
            draining: CancellationToken::new(),
            streams_cut: CancellationToken::new(),
            usage,
            shadows,
            refusals_told: std::sync::Mutex::default(),
            seed: AtomicU64::new(nanos ^ u64::from(std::process::id()).rotate_left(32)),
        });
        // The shadow sender holds the state weakly: it ends when the state is dropped (its
        // queue closes) or when streams are cut at shutdown.
        tasks.spawn(shadow::run(
            Arc::downgrade(&state),
            shadow_queue,
            state.streams_cut.clone(),
        ));
        state
    }

    /// Whether an upstream's refusal of `credential` (of `channel`) under snapshot `revision` is
    /// the first one: the operator is told once per credential and revision.
    pub(crate) fn first_refusal(
        &self,
        revision: u64,
        channel: ChannelId,
        credential: CredentialId,
    ) -> bool {
        let Ok(mut told) = self.refusals_told.lock() else {
            return true;
        };
        if told.0 != revision {
            *told = (revision, std::collections::HashSet::new());
        }
        told.1.insert((channel, credential))
    }

    /// The upstream client of the calling thread's pool.
    pub fn client(&self) -> &HttpClient {
        workers::slot()
            .checked_sub(1)
            .and_then(|worker| self.worker_clients.get(worker))
            .unwrap_or(&self.client)
    }

    /// A fresh per-request seed (request id and the engine's random draws).
    pub fn next_seed(&self) -> u64 {
        let x = self
            .seed
            .fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// Wall-clock Unix milliseconds (shared state expiries are wall-clock so instances agree).
pub use switchyard_state::unix_ms;
