//! Keeps the latest compiled snapshot in a `tokio::sync::watch` channel, fed by Postgres
//! LISTEN/NOTIFY: every committed write on any replica NOTIFYs its new revision; every replica
//! listens, recompiles and publishes. Readers (gRPC streams, explain) only ever see the latest
//! snapshot, so a slow reader skips revisions instead of blocking anyone.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use prost::bytes::Bytes;
use prost::Message;
use sqlx::postgres::PgListener;
use sqlx::PgPool;
use switchyard_engine::Snapshot;
use switchyard_proto::snapshot_to_proto;
use switchyard_state::unix_ms;
use tokio::sync::{watch, Mutex};
use tokio_util::sync::CancellationToken;

use crate::compile::compile;
use crate::db::NOTIFY_CHANNEL;
use crate::metrics::Metrics;

/// One compiled revision, in both the engine's form (explain) and the wire form (gRPC), so the
/// encoding work is done once per revision, not once per proxy.
#[derive(Debug)]
pub struct Published {
    pub snapshot: Arc<Snapshot>,
    /// The encoded `v1::Snapshot`, sent as is to every authenticated stream.
    pub encoded: Bytes,
    /// The same revision without secrets, built on first use: what a stream gets when no fleet
    /// token is configured.
    anonymous: OnceLock<Anonymous>,
    pub compiled_at_unix_ms: u64,
}

/// A revision as a proxy without a fleet token receives it, encoded and decoded back (so
/// explain sees exactly what such a proxy selects from).
#[derive(Debug)]
struct Anonymous {
    encoded: Bytes,
    snapshot: Arc<Snapshot>,
}

impl Published {
    pub fn new(snapshot: Snapshot, compiled_at_unix_ms: u64) -> Published {
        let encoded =
            Bytes::from(snapshot_to_proto(&snapshot, compiled_at_unix_ms).encode_to_vec());
        Published {
            snapshot: Arc::new(snapshot),
            encoded,
            anonymous: OnceLock::new(),
            compiled_at_unix_ms,
        }
    }

    pub fn revision(&self) -> u64 {
        self.snapshot.revision
    }

    fn anonymous(&self) -> &Anonymous {
        self.anonymous.get_or_init(|| {
            let mut wire = snapshot_to_proto(&self.snapshot, self.compiled_at_unix_ms);
            withhold_secrets(&mut wire);
            let encoded = Bytes::from(wire.encode_to_vec());
            let snapshot = match switchyard_proto::snapshot_from_proto(wire) {
                Ok(snapshot) => Arc::new(snapshot),
                Err(error) => {
                    // Cannot happen (the wire form came from a valid snapshot); explain then
                    // shows the full snapshot rather than none.
                    tracing::error!(%error, "the snapshot without secrets does not decode");
                    Arc::clone(&self.snapshot)
                }
            };
            Anonymous { encoded, snapshot }
        })
    }

    /// The encoded snapshot for a stream without a fleet token.
    pub fn encoded_without_secrets(&self) -> Bytes {
        self.anonymous().encoded.clone()
    }

    /// The snapshot as a proxy without a fleet token holds it (for explain).
    pub fn without_secrets(&self) -> Arc<Snapshot> {
        Arc::clone(&self.anonymous().snapshot)
    }
}

pub type SnapshotFeed = watch::Receiver<Option<Arc<Published>>>;

pub struct Publisher {
    pool: PgPool,
    tx: watch::Sender<Option<Arc<Published>>>,
    metrics: Arc<Metrics>,
    /// One compilation at a time; a second caller waits and usually finds nothing newer.
    compiling: Mutex<()>,
}

const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// Takes every secret out of a snapshot for a caller without a fleet token: credentials whose
/// secret is inline (`secret_env` ones stay: the proxy resolves them from its own environment),
/// every header value (any may be a key; an Azure channel's `api-version` entries, version
/// numbers, stay), and the password of each `base_url` (shown as `***`).
/// A channel that loses header values or a URL password, or every credential it needs, cannot be
/// called as configured: it is marked `secrets_withheld`, so the proxy's engine excludes it with
/// that reason (and the proxy says so) instead of failing upstream or excluding it silently.
pub fn withhold_secrets(wire: &mut switchyard_proto::v1::Snapshot) {
    use switchyard_proto::v1::credential::Secret;
    for channel in &mut wire.channels {
        let had_credentials = !channel.credentials.is_empty();
        channel
            .credentials
            .retain(|credential| !matches!(credential.secret, Some(Secret::Inline(_))));
        let lost_credentials = had_credentials
            && channel.credentials.is_empty()
            && channel.provider != switchyard_proto::v1::Provider::Mock as i32;
        let azure = channel.provider == switchyard_proto::v1::Provider::Azure as i32;
        let had_headers = channel.headers.len();
        channel
            .headers
            .retain(|h| azure && switchyard_upstream::is_azure_api_version_entry(&h.name));
        let lost_headers = channel.headers.len() != had_headers;
        let redacted = switchyard_engine::validate::redact_url_userinfo(&channel.base_url);
        let lost_password = redacted != channel.base_url;
        channel.base_url = redacted;
        channel.secrets_withheld = lost_credentials || lost_headers || lost_password;
    }
}

impl Publisher {
    pub fn new(pool: PgPool, metrics: Arc<Metrics>) -> Arc<Publisher> {
        let (tx, _) = watch::channel(None);
        Arc::new(Publisher {
            pool,
            tx,
            metrics,
            compiling: Mutex::new(()),
        })
    }

    pub fn subscribe(&self) -> SnapshotFeed {
        self.tx.subscribe()
    }

    pub fn current(&self) -> Option<Arc<Published>> {
        self.tx.borrow().clone()
    }

    pub fn current_revision(&self) -> u64 {
        self.tx.borrow().as_ref().map_or(0, |p| p.revision())
    }

    /// Compiles the tables and publishes the result if its revision is newer than the one held.
    /// Returns the revision held afterwards.
    pub async fn refresh(&self) -> anyhow::Result<u64> {
        let _guard = self.compiling.lock().await;
        let started = tokio::time::Instant::now();
        let snapshot = match compile(&self.pool).await {
            Ok(snapshot) => snapshot,
            Err(error) => {
                self.metrics.compile_failed();
                return Err(error);
            }
        };
        let revision = snapshot.revision;
        let published = Arc::new(Published::new(snapshot, unix_ms()));
        let elapsed = started.elapsed();
        let replaced = self.tx.send_if_modified(|held| {
            if held.as_ref().is_some_and(|h| h.revision() >= revision) {
                false
            } else {
                *held = Some(published);
                true
            }
        });
        self.metrics.compiled(revision, elapsed);
        if replaced {
            tracing::info!(
                revision,
                compile_ms = elapsed.as_secs_f64() * 1000.0,
                "published snapshot"
            );
        }
        Ok(self.current_revision())
    }

    /// Listens for committed revisions until `shutdown`. Reconnects with backoff when Postgres
    /// goes away; the last published snapshot stays in place meanwhile. After every (re)connect
    /// it recompiles once, so nothing committed while it was not listening is missed.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        let mut backoff = Duration::from_millis(100);
        loop {
            if shutdown.is_cancelled() {
                return;
            }
            let mut connected = false;
            match self.listen_until_error(&shutdown, &mut connected).await {
                Ok(()) => return,
                Err(error) => {
                    if connected {
                        backoff = Duration::from_millis(100);
                    }
                    self.metrics.set_database_up(false);
                    tracing::warn!(
                        error = format!("{error:#}"),
                        retry_in_ms = backoff.as_millis() as u64,
                        "snapshot listener lost Postgres; keeping the last snapshot"
                    );
                }
            }
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(backoff) => {}
            }
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }

    async fn listen_until_error(
        &self,
        shutdown: &CancellationToken,
        connected: &mut bool,
    ) -> anyhow::Result<()> {
        let mut listener = PgListener::connect_with(&self.pool).await?;
        listener.listen(NOTIFY_CHANNEL).await?;
        // Listening first, then compiling: a commit in between is seen by one or the other.
        self.refresh().await?;
        self.metrics.set_database_up(true);
        *connected = true;
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return Ok(()),
                received = listener.try_recv() => match received? {
                    Some(notification) => {
                        let announced = notification.payload().parse::<u64>().unwrap_or(u64::MAX);
                        if announced > self.current_revision() {
                            self.refresh().await?;
                        }
                    }
                    // The connection dropped; notifications may have been missed.
                    None => return Err(anyhow::anyhow!("listen connection lost")),
                },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchyard_proto::v1;

    fn header(name: &str, value: &str) -> v1::Header {
        v1::Header {
            name: name.to_owned(),
            value: value.to_owned(),
        }
    }

    #[test]
    fn an_azure_api_version_is_no_secret() {
        let channel = |provider: v1::Provider, headers: Vec<v1::Header>| v1::Channel {
            provider: provider as i32,
            base_url: "https://r.openai.azure.com".to_owned(),
            headers,
            ..v1::Channel::default()
        };
        let mut wire = v1::Snapshot {
            channels: vec![
                channel(
                    v1::Provider::Azure,
                    vec![
                        header("api-version", "2025-04-01-preview"),
                        header("api-version-responses", "preview"),
                    ],
                ),
                channel(
                    v1::Provider::Azure,
                    vec![
                        header("Api-Version", "2024-10-21"),
                        header("x-key", "secret"),
                    ],
                ),
                channel(v1::Provider::Openai, vec![header("api-version", "1")]),
            ],
            ..v1::Snapshot::default()
        };
        withhold_secrets(&mut wire);
        let (only_version, with_key, openai) =
            (&wire.channels[0], &wire.channels[1], &wire.channels[2]);
        assert_eq!(
            only_version.headers,
            [
                header("api-version", "2025-04-01-preview"),
                header("api-version-responses", "preview")
            ]
        );
        assert!(!only_version.secrets_withheld);
        assert_eq!(with_key.headers, [header("Api-Version", "2024-10-21")]);
        assert!(with_key.secrets_withheld, "its other header was withheld");
        assert!(openai.headers.is_empty() && openai.secrets_withheld);
    }
}
