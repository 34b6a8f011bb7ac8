//! The numbers a server runs with ([`Limits`]), as configuration and as flags, and the
//! connection cap they come to on this machine.

use std::time::Duration;

use http::HeaderValue;

/// Connection limits and deadlines. [`Limits::default`] is safe for a port facing the internet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Connections open at once; `0` derives it from the open-file limit (half of it, minus a
    /// reserve, at most 16 384).
    pub max_connections: usize,
    /// Connections from one client address at once; `0` means no per-address cap (behind a load
    /// balancer every client may share one address).
    pub max_connections_per_ip: usize,
    /// Time allowed to send a request head, and the idle time between keep-alive requests.
    pub header_read_timeout: Duration,
    /// Time allowed to send a whole request body, from the end of its head.
    pub body_read_timeout: Duration,
    /// Largest request head (request line and headers) in bytes.
    pub max_header_bytes: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_connections: 0,
            max_connections_per_ip: 0,
            header_read_timeout: Duration::from_secs(15),
            body_read_timeout: Duration::from_secs(60),
            max_header_bytes: 32 * 1024,
        }
    }
}

/// The limits as command-line flags with environment fallbacks (flattened into both binaries).
#[derive(Debug, Clone, clap::Args)]
pub struct LimitArgs {
    /// Client connections open at once; 0 derives it from the open-file limit.
    #[arg(long, env = "SWITCHYARD_MAX_CONNECTIONS", default_value_t = 0)]
    pub max_connections: usize,

    /// Client connections from one address at once; 0 = no per-address cap.
    #[arg(long, env = "SWITCHYARD_MAX_CONNECTIONS_PER_IP", default_value_t = 0)]
    pub max_connections_per_ip: usize,

    /// Milliseconds a client has to send a request head; also the keep-alive idle timeout.
    #[arg(long, env = "SWITCHYARD_HEADER_TIMEOUT_MS", default_value_t = 15_000)]
    pub header_timeout_ms: u64,

    /// Milliseconds a client has to send a whole request body.
    #[arg(long, env = "SWITCHYARD_BODY_TIMEOUT_MS", default_value_t = 60_000)]
    pub body_timeout_ms: u64,

    /// Largest request head in bytes (larger: 431).
    #[arg(long, env = "SWITCHYARD_MAX_HEADER_BYTES", default_value_t = 32 * 1024)]
    pub max_header_bytes: usize,
}

impl LimitArgs {
    pub fn limits(&self) -> Limits {
        Limits {
            max_connections: self.max_connections,
            max_connections_per_ip: self.max_connections_per_ip,
            header_read_timeout: Duration::from_millis(self.header_timeout_ms.max(1)),
            body_read_timeout: Duration::from_millis(self.body_timeout_ms.max(1)),
            max_header_bytes: self.max_header_bytes.max(1024),
        }
    }
}

/// The most connections [`Limits::max_connections`] `0` resolves to.
pub(crate) const MAX_DERIVED_CONNECTIONS: u64 = 16_384;
/// Descriptors kept free for everything that is not a client connection.
pub(crate) const FD_RESERVE: u64 = 256;

impl Limits {
    /// The `keep-alive` header value announced on answers: the idle timeout in whole seconds,
    /// one second short of the real one, so that a client that honours it never sends on a
    /// connection at the instant the server closes it.
    pub fn keep_alive_value(&self) -> HeaderValue {
        let seconds = self.header_read_timeout.as_secs().saturating_sub(1).max(1);
        HeaderValue::from_str(&format!("timeout={seconds}"))
            .unwrap_or_else(|_| HeaderValue::from_static("timeout=1"))
    }

    /// The connection cap in force: the configured one, or one derived from the open-file limit
    /// (each client connection may need one upstream socket too).
    pub fn effective_max_connections(&self) -> usize {
        if self.max_connections > 0 {
            return self.max_connections;
        }
        let soft = rlimit::getrlimit(rlimit::Resource::NOFILE)
            .map(|(soft, _)| soft)
            .unwrap_or(1024);
        let derived = (soft.saturating_sub(FD_RESERVE) / 2).clamp(64, MAX_DERIVED_CONNECTIONS);
        usize::try_from(derived).unwrap_or(64)
    }
}

/// Raises the soft open-file limit to the hard limit and returns `(soft, hard)` as now in force.
pub fn raise_fd_limit() -> (u64, u64) {
    if let Err(error) = rlimit::increase_nofile_limit(u64::MAX) {
        tracing::warn!(%error, "could not raise the open-file limit");
    }
    rlimit::getrlimit(rlimit::Resource::NOFILE).unwrap_or((0, 0))
}
