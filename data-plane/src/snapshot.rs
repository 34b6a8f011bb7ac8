//! The proxy's view of the current snapshot: the engine's [`Snapshot`] plus what the hot path
//! needs precompiled (token hash index, per-channel URLs and auth headers). Rebuilt once per
//! snapshot revision, swapped atomically; requests in flight keep the view they started with.

use std::collections::HashMap;
use std::sync::Arc;

use arc_swap::ArcSwapOption;
use switchyard_engine::{ChannelId, Snapshot, Token};
use switchyard_state::StateStore;
use tokio::sync::watch;

use crate::upstream::ChannelRuntime;

/// Where snapshots come from: the YAML watcher in standalone mode, the control plane's gRPC
/// stream otherwise. `None` until the first snapshot arrives.
pub type SnapshotSender = watch::Sender<Option<Arc<Snapshot>>>;
pub type SnapshotReceiver = watch::Receiver<Option<Arc<Snapshot>>>;

pub struct View {
    pub snapshot: Arc<Snapshot>,
    /// When this proxy installed the snapshot (Unix ms).
    pub installed_at_ms: u64,
    tokens: HashMap<String, usize>,
    channels: HashMap<ChannelId, ChannelRuntime>,
}

impl View {
    pub fn compile(snapshot: Arc<Snapshot>) -> View {
        let env = |name: &str| std::env::var(name).ok();
        let tokens = snapshot
            .tokens()
            .iter()
            .enumerate()
            .filter(|(_, t)| t.enabled)
            .map(|(i, t)| (t.hash.clone(), i))
            .collect();
        let channels = snapshot
            .channels()
            .map(|c| (c.id, ChannelRuntime::compile(c, &env)))
            .collect();
        View {
            snapshot,
            installed_at_ms: crate::unix_ms(),
            tokens,
            channels,
        }
    }

    /// The enabled token with this SHA-256 hex hash.
    pub fn token(&self, hash: &str) -> Option<&Token> {
        self.tokens
            .get(hash)
            .and_then(|i| self.snapshot.tokens().get(*i))
    }

    pub fn channel_runtime(&self, id: ChannelId) -> Option<&ChannelRuntime> {
        self.channels.get(&id)
    }
}

/// Makes `snapshot` the one requests select over: the state view's health records are laid out
/// for its slots first (so its first selection already reads them by index; selections still
/// running over the previous snapshot fall back to hash lookups), then the view is swapped.
pub fn install(views: &ArcSwapOption<View>, store: &dyn StateStore, snapshot: Arc<Snapshot>) {
    store.align_health(snapshot.health_slots());
    views.store(Some(Arc::new(View::compile(snapshot))));
}

/// Keeps `views` in step with the snapshot source until the source closes.
pub async fn follow(
    mut rx: SnapshotReceiver,
    views: Arc<ArcSwapOption<View>>,
    store: Arc<dyn StateStore>,
) {
    loop {
        let current = rx.borrow_and_update().clone();
        if let Some(snapshot) = current {
            let revision = snapshot.revision;
            install(&views, &*store, snapshot);
            tracing::info!(revision, "snapshot applied");
        }
        if rx.changed().await.is_err() {
            return;
        }
    }
}
