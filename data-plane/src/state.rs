//! The proxy's shared state ([`AppState`]): what every request, the background tasks and the
//! operator endpoints read. A bottom module: it names only what it holds (the snapshot views,
//! the store, the upstream pools, the metrics, usage and shadow state), never a request phase
//! or a task. Whoever builds it starts the tasks that serve it (`run`: the snapshot follower,
//! the shadow sender) and the worker threads mark themselves ([`enter_worker`]).

use std::cell::Cell;
use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::{SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwapOption;
use switchyard_engine::{ChannelId, CredentialId};
use switchyard_metrics::Registry;
use switchyard_state::cache::{MemoryCache, ResponseCache};
use switchyard_state::StateStore;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;
use crate::object_id::IdKey;
use crate::semantic_index::SemanticIndexes;
use crate::shadow::rules::{ShadowQueue, Shadows};
use crate::snapshot::View;
use crate::upstream::{ClientOptions, HttpClient};
use crate::usage::UsageReporter;

/// The in-memory response cache's bound when none is configured: 64 MiB.
pub const DEFAULT_CACHE_BYTES: usize = 64 << 20;

/// Shared by every request: the current view, the state store, the client, metrics.
pub struct AppState {
    pub views: Arc<ArcSwapOption<View>>,
    pub store: Arc<dyn StateStore>,
    /// The upstream connection pool of every thread that is not a serving worker (probes).
    client: HttpClient,
    /// One upstream pool per serving worker thread, so a request's upstream connections live on
    /// its own thread (`workers`).
    worker_clients: Box<[HttpClient]>,
    /// The proxy's own counters (the first of [`AppState::collectors`]).
    pub metrics: Arc<Metrics>,
    /// What `/metrics` renders: the proxy's counters, then each component registered by
    /// whoever built it (the scrape-time gauges, usage, the state store, the HTTP server's
    /// connections).
    pub collectors: Registry,
    /// The bearer credential `/metrics` requires, when the operator set one (token names are
    /// then counted too: [`AppState::protect_metrics`]).
    pub metrics_credential: OnceLock<String>,
    /// Fires on SIGTERM: `/readyz` answers 503 so the load balancer stops sending traffic,
    /// while the proxy keeps serving for the drain delay.
    pub draining: CancellationToken,
    /// Fires when the shutdown grace period is over: open streams end with an error event.
    pub streams_cut: CancellationToken,
    /// Usage accounting towards the control plane (fleet mode only; `None` standalone).
    pub usage: Option<Arc<UsageReporter>>,
    /// Shadow traffic: the rules' caps and the background queue (`shadow`).
    pub shadows: Shadows,
    /// The response cache's store: in memory unless [`AppState::set_cache`] gave another (the
    /// fleet's, in Redis). Read only by requests a cache rule covers.
    cache: RwLock<Arc<dyn ResponseCache>>,
    /// The semantic cache's local indexes, one per rule with a semantic part.
    pub semantic: SemanticIndexes,
    /// The credentials an upstream refused, already told to the operator, and the snapshot
    /// revision they were told under (a new revision may carry a fixed secret: told anew).
    refusals_told: Mutex<(u64, HashSet<(ChannelId, CredentialId)>)>,
    seed: AtomicU64,
    /// The key file and batch ids are tagged under ([`crate::object_id`]): set once at start
    /// (from the fleet's secret), else a key of this process alone.
    id_key: OnceLock<IdKey>,
    /// Batches whose usage this proxy has accounted or seen claimed by another (bounded: the
    /// fleet-wide claim is the rule, this only spares a second read of the output).
    batches_accounted: Mutex<HashSet<String>>,
}

/// The most batches [`AppState::batch_settled`] remembers before it starts over.
const MAX_REMEMBERED_BATCHES: usize = 10_000;

impl AppState {
    /// The state over `views`, with an upstream pool for each of `workers` serving threads
    /// connecting as `upstream` says, and the queue of its shadow copies, for the sender the
    /// caller starts (the queue closes when the state is dropped).
    pub(crate) fn assemble(
        views: Arc<ArcSwapOption<View>>,
        store: Arc<dyn StateStore>,
        usage: Option<Arc<UsageReporter>>,
        workers: usize,
        upstream: &ClientOptions,
    ) -> (Arc<AppState>, ShadowQueue) {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0x5EED);
        let (shadows, shadow_queue) = Shadows::new();
        let metrics = Arc::new(Metrics::default());
        let collectors = Registry::default();
        collectors.register(metrics.clone());
        let state = Arc::new(AppState {
            views,
            store,
            client: HttpClient::new(upstream.clone()),
            worker_clients: (0..workers)
                .map(|_| HttpClient::new(upstream.clone()))
                .collect(),
            metrics,
            collectors,
            metrics_credential: OnceLock::new(),
            draining: CancellationToken::new(),
            streams_cut: CancellationToken::new(),
            usage,
            shadows,
            cache: RwLock::new(Arc::new(MemoryCache::new(DEFAULT_CACHE_BYTES))),
            semantic: SemanticIndexes::default(),
            refusals_told: Mutex::default(),
            id_key: OnceLock::new(),
            batches_accounted: Mutex::default(),
            seed: AtomicU64::new(nanos ^ u64::from(std::process::id()).rotate_left(32)),
        });
        (state, shadow_queue)
    }

    /// The response cache's store.
    pub fn cache(&self) -> Arc<dyn ResponseCache> {
        Arc::clone(&self.cache.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// Serves the response cache from `cache` from now on.
    pub fn set_cache(&self, cache: Arc<dyn ResponseCache>) {
        *self.cache.write().unwrap_or_else(|e| e.into_inner()) = cache;
    }

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
            *told = (revision, HashSet::new());
        }
        told.1.insert((channel, credential))
    }

    /// Sets the key file and batch ids are tagged under; `false` when one was set (or used)
    /// already.
    pub fn set_id_key(&self, key: IdKey) -> bool {
        self.id_key.set(key).is_ok()
    }

    /// The key file and batch ids are tagged under (a random one of this process when none was
    /// set before the first use).
    pub(crate) fn id_key(&self) -> &IdKey {
        self.id_key.get_or_init(IdKey::random)
    }

    /// Whether the batch `key`'s usage was settled here already (accounted, or claimed by
    /// another proxy); with `settle`, records that it now is.
    pub(crate) fn batch_settled(&self, key: &str, settle: bool) -> bool {
        let Ok(mut settled) = self.batches_accounted.lock() else {
            return false;
        };
        if settle {
            if settled.len() >= MAX_REMEMBERED_BATCHES {
                settled.clear();
            }
            settled.insert(key.to_owned());
        }
        settled.contains(key)
    }

    /// The upstream client of the calling thread's pool.
    pub fn client(&self) -> &HttpClient {
        worker_slot()
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

thread_local! {
    /// 1-based index of the serving worker this thread is; 0 on every other thread.
    static SLOT: Cell<usize> = const { Cell::new(0) };
}

/// Marks the calling thread as serving worker `index` (0-based): its requests use that
/// worker's upstream pool ([`AppState::client`]).
pub(crate) fn enter_worker(index: usize) {
    SLOT.with(|slot| slot.set(index + 1));
}

/// The calling thread's slot: `1..=n` on a worker, `0` elsewhere (the main runtime, tests).
pub(crate) fn worker_slot() -> usize {
    SLOT.with(Cell::get)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    #[test]
    fn only_worker_threads_have_a_slot() {
        assert_eq!(worker_slot(), 0);
        std::thread::spawn(|| {
            SLOT.with(|s| s.set(2));
            assert_eq!(worker_slot(), 2);
        })
        .join()
        .unwrap();
        assert_eq!(worker_slot(), 0);
    }
}
