//! The proxy side of the snapshot stream: follow the control plane, install every valid snapshot
//! newer than the one held, and reconnect with exponential backoff until shutdown.

use std::sync::Arc;
use std::time::Duration;

use switchyard_engine::Snapshot;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::transport::{Certificate, ClientTlsConfig, Identity};

use crate::convert::snapshot_from_proto;
use crate::v1::snapshot_service_client::SnapshotServiceClient;
use crate::v1::WatchRequest;

/// First reconnect delay; doubles on each failed attempt up to [`MAX_BACKOFF`].
pub const INITIAL_BACKOFF: Duration = Duration::from_millis(100);
/// Longest delay between reconnect attempts (plus up to 50 % jitter): a returning or another
/// control-plane replica is found within about a second.
pub const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// How a proxy proves itself to the control plane and checks the control plane in return.
#[derive(Clone, Default)]
pub struct WatchAuth {
    /// Presented as `authorization: Bearer <token>` on every stream.
    pub fleet_token: Option<String>,
    /// PEM of the CA that signed the control plane's certificate, for `https://` endpoints
    /// (without it the web PKI roots are used).
    pub ca_pem: Option<Vec<u8>>,
    /// PEM certificate and private key this proxy presents (mutual TLS).
    pub identity_pem: Option<(Vec<u8>, Vec<u8>)>,
}

impl std::fmt::Debug for WatchAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatchAuth")
            .field("fleet_token", &self.fleet_token.as_ref().map(|_| "***"))
            .field("ca_pem", &self.ca_pem.is_some())
            .field("identity_pem", &self.identity_pem.is_some())
            .finish()
    }
}

/// Largest snapshot message a proxy accepts.
pub const MAX_SNAPSHOT_BYTES: usize = 256 * 1024 * 1024;

/// The only error [`watch_snapshots`] returns: an endpoint that can never work.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    #[error("invalid control-plane endpoint {endpoint:?}: {reason}")]
    InvalidEndpoint { endpoint: String, reason: String },
}

/// Follows the control plane's snapshot stream at `endpoint` (e.g. `http://cp:8082`).
///
/// Every valid snapshot whose revision is newer than the one in `tx` (or than `have_revision`
/// when `tx` holds none) is published with `send_replace`, so readers always see the latest one
/// and never wait on this task. A snapshot that fails validation is logged and skipped: the last
/// good one stays in place. When the connection fails or the stream ends, this reconnects with
/// exponential backoff (100 ms doubling to 1 s, with jitter), asking for revisions newer than
/// the one it holds. Returns `Ok(())` once `shutdown` is cancelled, and an error only for an
/// endpoint that cannot be parsed.
///
/// `auth.fleet_token` is presented as `authorization: Bearer <token>` on every stream; a control
/// plane with fleet tokens configured refuses a stream without a valid one, and one without
/// them sends snapshots with no inline credential secrets. An `https://` endpoint is verified
/// against `auth.ca_pem` (or the web PKI), and `auth.identity_pem` is presented for mutual TLS.
pub async fn watch_snapshots(
    endpoint: String,
    have_revision: u64,
    auth: WatchAuth,
    tx: watch::Sender<Option<Arc<Snapshot>>>,
    shutdown: CancellationToken,
) -> Result<(), WatchError> {
    let (endpoint_config, authorization) = connect_config(&endpoint, &auth)?;

    let mut backoff = INITIAL_BACKOFF;
    let mut attempt: u64 = 0;
    loop {
        if shutdown.is_cancelled() {
            return Ok(());
        }
        let held = held_revision(&tx, have_revision);
        let outcome = tokio::select! {
            _ = shutdown.cancelled() => return Ok(()),
            outcome = follow_once(&endpoint_config, held, authorization.as_ref(), &tx) => outcome,
        };
        match outcome {
            Ok(received_any) => {
                tracing::info!(endpoint = %endpoint, "snapshot stream ended; reconnecting");
                if received_any {
                    backoff = INITIAL_BACKOFF;
                }
            }
            Err((received_any, error)) => {
                tracing::warn!(endpoint = %endpoint, error = %error, "snapshot stream failed; reconnecting");
                if received_any {
                    backoff = INITIAL_BACKOFF;
                }
            }
        }
        attempt = attempt.wrapping_add(1);
        let delay = with_jitter(backoff, attempt);
        tokio::select! {
            _ = shutdown.cancelled() => return Ok(()),
            _ = tokio::time::sleep(delay) => {}
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// The endpoint (TLS, timeouts, keep-alive) and the `authorization` value a proxy presents to the
/// control plane, shared by the snapshot stream and the usage reports.
pub fn connect_config(
    endpoint: &str,
    auth: &WatchAuth,
) -> Result<(tonic::transport::Endpoint, Option<MetadataValue<Ascii>>), WatchError> {
    let authorization = match auth.fleet_token.as_deref().map(str::trim) {
        Some(token) if !token.is_empty() => {
            let mut value: MetadataValue<Ascii> =
                format!("Bearer {token}")
                    .parse()
                    .map_err(|_| WatchError::InvalidEndpoint {
                        endpoint: endpoint.to_owned(),
                        reason: "the fleet token is not a valid header value".to_owned(),
                    })?;
            value.set_sensitive(true);
            Some(value)
        }
        _ => None,
    };
    let mut endpoint_config = tonic::transport::Endpoint::from_shared(endpoint.to_owned())
        .map_err(|e| WatchError::InvalidEndpoint {
            endpoint: endpoint.to_owned(),
            reason: e.to_string(),
        })?;
    if endpoint.starts_with("https://") || auth.ca_pem.is_some() || auth.identity_pem.is_some() {
        let mut tls = ClientTlsConfig::new();
        tls = match &auth.ca_pem {
            Some(ca) => tls.ca_certificate(Certificate::from_pem(ca)),
            None => tls.with_webpki_roots(),
        };
        if let Some((cert, key)) = &auth.identity_pem {
            tls = tls.identity(Identity::from_pem(cert, key));
        }
        endpoint_config =
            endpoint_config
                .tls_config(tls)
                .map_err(|e| WatchError::InvalidEndpoint {
                    endpoint: endpoint.to_owned(),
                    reason: format!("TLS: {e}"),
                })?;
    }
    let endpoint_config = endpoint_config
        .connect_timeout(Duration::from_secs(5))
        .tcp_keepalive(Some(Duration::from_secs(30)))
        .http2_keep_alive_interval(Duration::from_secs(30))
        .keep_alive_while_idle(true);
    Ok((endpoint_config, authorization))
}

/// How this process introduces itself to the control plane (`client_id` of its watch requests
/// and usage batches; shown in the control plane's connected-proxy list): the host name (a pod's
/// name on Kubernetes) and the process id. Identification for operators only, not authentication.
pub fn client_id() -> String {
    static ID: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    ID.get_or_init(|| {
        let host = std::env::var("HOSTNAME")
            .ok()
            .filter(|h| !h.trim().is_empty())
            .or_else(|| {
                std::fs::read_to_string("/etc/hostname")
                    .ok()
                    .map(|h| h.trim().to_owned())
                    .filter(|h| !h.is_empty())
            })
            .unwrap_or_else(|| "proxy".to_owned());
        let host: String = host
            .chars()
            .filter(|c| c.is_ascii_graphic())
            .take(100)
            .collect();
        format!("{host}:{}", std::process::id())
    })
    .clone()
}

fn held_revision(tx: &watch::Sender<Option<Arc<Snapshot>>>, have_revision: u64) -> u64 {
    tx.borrow()
        .as_ref()
        .map_or(have_revision, |s| s.revision.max(have_revision))
}

/// One connection: returns whether any snapshot arrived, and the error that ended it, if any.
async fn follow_once(
    endpoint: &tonic::transport::Endpoint,
    have_revision: u64,
    authorization: Option<&MetadataValue<Ascii>>,
    tx: &watch::Sender<Option<Arc<Snapshot>>>,
) -> Result<bool, (bool, String)> {
    let channel = endpoint
        .connect()
        .await
        .map_err(|e| (false, format!("connect: {e}")))?;
    let mut client = SnapshotServiceClient::new(channel)
        // Large fleets produce large snapshots; the default 4 MiB limit is too small (100 000
        // members encode to about 4.2 MiB), but a bound stays.
        .max_decoding_message_size(MAX_SNAPSHOT_BYTES);
    let mut request = tonic::Request::new(WatchRequest {
        have_revision,
        client_id: client_id(),
    });
    if let Some(value) = authorization {
        request
            .metadata_mut()
            .insert("authorization", value.clone());
    }
    let mut stream = client
        .watch(request)
        .await
        .map_err(|status| (false, format!("watch: {status}")))?
        .into_inner();
    tracing::info!(
        have_revision,
        "connected to the control plane's snapshot stream"
    );
    let mut received_any = false;
    loop {
        match stream.message().await {
            Ok(Some(wire)) => {
                received_any = true;
                let revision = wire.revision;
                match snapshot_from_proto(wire) {
                    Ok(snapshot) => {
                        let held = held_revision(tx, 0);
                        if tx.borrow().is_none() || snapshot.revision > held {
                            tx.send_replace(Some(Arc::new(snapshot)));
                            tracing::info!(revision, "installed snapshot");
                        }
                    }
                    Err(error) => {
                        tracing::error!(revision, error = %error, "rejected invalid snapshot; keeping the last good one");
                    }
                }
            }
            Ok(None) => return Ok(received_any),
            Err(status) => return Err((received_any, format!("stream: {status}"))),
        }
    }
}

/// Up to +50% jitter, derived without a global RNG so reconnecting proxies spread out.
pub fn with_jitter(base: Duration, attempt: u64) -> Duration {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let mixed = u64::from(nanos) ^ attempt.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let fraction = (mixed % 1000) as f64 / 2000.0;
    base + base.mul_f64(fraction)
}
