//! What every admin handler (and the HTTP server around them) shares: the database pool, the
//! publisher of route snapshots, the metrics, the fleet's shared state and the operator's
//! switches. A bottom module: it names the parts the server wires together and nothing above it.

use std::sync::Arc;

use sha2::{Digest, Sha256};
use sqlx::PgPool;
use switchyard_metrics::{Collect, Registry};

use crate::live::LiveState;
use crate::metrics::Metrics;
use crate::proxies::ProxyRegistry;
use crate::publisher::Publisher;
use crate::recovery::Recovery;
use crate::sso::Sso;

/// Everything a handler needs. Cheap to clone.
#[derive(Clone)]
pub struct AppState {
    pub pool: PgPool,
    pub(crate) admin_token_digest: [u8; 32],
    pub publisher: Arc<Publisher>,
    pub metrics: Arc<Metrics>,
    /// The fleet's shared state (`REDIS_URL`), for explain and `/api/v1/state`.
    pub live: Option<LiveState>,
    /// What `/metrics` renders: the control plane's counters, then each component the builder
    /// adds (the recovery job, the shared state's store, the HTTP and gRPC connections).
    pub collectors: Arc<Registry>,
    /// Fires on SIGTERM: `/readyz` answers 503 from then on.
    pub draining: tokio_util::sync::CancellationToken,
    /// The proxies whose snapshot streams this replica serves, for `/api/v1/state`.
    pub proxies: Arc<ProxyRegistry>,
    /// No fleet token is configured: proxies receive snapshots without secrets, so explain
    /// selects from that same snapshot.
    pub proxies_without_secrets: bool,
    /// How trial calls connect to upstreams.
    pub upstream: switchyard_upstream::ClientOptions,
    /// Single sign-on, when configured.
    pub sso: Option<Arc<Sso>>,
}

impl AppState {
    pub fn new(
        pool: PgPool,
        admin_token: &str,
        publisher: Arc<Publisher>,
        metrics: Arc<Metrics>,
    ) -> AppState {
        let collectors = Arc::new(Registry::default());
        collectors.register(Arc::clone(&metrics) as Arc<dyn Collect>);
        AppState {
            pool,
            admin_token_digest: Sha256::digest(admin_token.as_bytes()).into(),
            publisher,
            metrics,
            live: None,
            collectors,
            draining: tokio_util::sync::CancellationToken::new(),
            proxies: Arc::default(),
            proxies_without_secrets: false,
            upstream: switchyard_upstream::ClientOptions::new(std::time::Duration::from_secs(5)),
            sso: None,
        }
    }

    /// People sign in through this identity provider too (`None`: single sign-on is off).
    pub fn with_sso(mut self, sso: Option<Arc<Sso>>) -> AppState {
        self.sso = sso;
        self
    }

    /// How trial calls connect to upstreams (extra trusted roots, HTTP/2).
    pub fn with_upstream(mut self, upstream: switchyard_upstream::ClientOptions) -> AppState {
        self.upstream = upstream;
        self
    }

    /// No fleet token is configured: explain selects from the snapshot the proxies then receive
    /// (without secrets), so it shows the channels they cannot call.
    pub fn with_proxies_without_secrets(mut self, without: bool) -> AppState {
        self.proxies_without_secrets = without;
        self
    }

    /// The gRPC server's registry of connected proxies, shown in `/api/v1/state`.
    pub fn with_proxies(mut self, proxies: Arc<ProxyRegistry>) -> AppState {
        self.proxies = proxies;
        self
    }

    /// Explain and `/api/v1/state` read this shared state (its store's metrics are rendered in
    /// `/metrics`).
    pub fn with_live(mut self, live: LiveState) -> AppState {
        if let Some(store) = live.collector() {
            self.collectors.register(store);
        }
        self.live = Some(live);
        self
    }

    /// The recovery job, rendered in `/metrics`. It reads what to probe from this app's
    /// publisher, which is handed to it here.
    pub fn with_recovery(self, recovery: Arc<Recovery>) -> AppState {
        recovery.read_snapshots_from(Arc::clone(&self.publisher));
        self.collectors.register(recovery);
        self
    }

    pub fn with_draining(mut self, draining: tokio_util::sync::CancellationToken) -> AppState {
        self.draining = draining;
        self
    }

    /// The HTTP server's connection counters, rendered in `/metrics`.
    pub fn with_connections(self, connections: switchyard_server::Stats) -> AppState {
        self.collectors.register(Arc::new(connections));
        self
    }

    /// The gRPC port's connection counters, rendered in `/metrics`.
    pub fn with_grpc_connections(self, connections: switchyard_server::Stats) -> AppState {
        let named = connections.named(&crate::grpc::GRPC_METRICS);
        self.collectors.register(Arc::new(named));
        self
    }
}
