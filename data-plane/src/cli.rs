//! Command-line flags with environment fallbacks (docs/src/reference/data-plane-flags.md).

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Parser;

#[derive(Debug, Clone, Parser)]
#[command(
    name = "switchyard-data-plane",
    version,
    about = "Switchyard data plane: the OpenAI/Anthropic-compatible LLM proxy"
)]
pub struct Cli {
    /// Standalone mode: routes, channels, tokens and settings from this YAML file (reloaded
    /// when it changes).
    #[arg(long, env = "SWITCHYARD_CONFIG")]
    pub config: Option<PathBuf>,

    /// Control-plane gRPC URL to stream snapshots from.
    #[arg(long, env = "SWITCHYARD_CONTROL_PLANE", conflicts_with = "config")]
    pub control_plane: Option<String>,

    /// Fleet token presented to the control plane's snapshot stream (required when the control
    /// plane has SWITCHYARD_FLEET_TOKEN set; without it snapshots carry no inline secrets).
    #[arg(long, env = "SWITCHYARD_FLEET_TOKEN", hide_env_values = true)]
    pub fleet_token: Option<String>,

    /// Secret the ids of files and batches are signed under: the same on every proxy of a
    /// fleet (without it a fleet derives the key from SWITCHYARD_FLEET_TOKEN; with neither the
    /// key is this process's own and its ids last until it restarts).
    #[arg(long, env = "SWITCHYARD_ID_SECRET", hide_env_values = true)]
    pub id_secret: Option<String>,

    /// Bearer credential `GET /metrics` then requires; with it the token counts carry each
    /// token's name (without it `/metrics` is open and names no token).
    #[arg(long, env = "SWITCHYARD_METRICS_TOKEN", hide_env_values = true)]
    pub metrics_token: Option<String>,

    /// PEM CA bundle that signed the control plane's gRPC certificate (`https://` control-plane
    /// URLs; without it the web PKI roots are trusted).
    #[arg(long, env = "SWITCHYARD_CONTROL_PLANE_CA")]
    pub control_plane_ca: Option<PathBuf>,

    /// PEM client certificate presented to the control plane (mutual TLS).
    #[arg(
        long,
        env = "SWITCHYARD_CONTROL_PLANE_CLIENT_CERT",
        requires = "control_plane_client_key"
    )]
    pub control_plane_client_cert: Option<PathBuf>,

    /// PEM private key of the client certificate.
    #[arg(
        long,
        env = "SWITCHYARD_CONTROL_PLANE_CLIENT_KEY",
        requires = "control_plane_client_cert"
    )]
    pub control_plane_client_key: Option<PathBuf>,

    /// HTTP listen address [default: the standalone file's `listen`, else 127.0.0.1:8080].
    #[arg(long, env = "SWITCHYARD_HTTP_ADDR")]
    pub http_addr: Option<SocketAddr>,

    /// Redis URL for fleet-shared state (in-memory state when absent): `redis://host:port`, or
    /// `redis+cluster://host:port,host:port` (or several comma-separated URLs) for Redis Cluster.
    #[arg(long, env = "REDIS_URL", hide_env_values = true)]
    pub redis_url: Option<String>,

    /// Namespace of this fleet's keys in Redis (proxies sharing it share state).
    #[arg(long, env = "SWITCHYARD_REDIS_PREFIX", default_value = "switchyard")]
    pub redis_prefix: String,

    /// Most bytes the response cache keeps: the fleet's total in Redis when `REDIS_URL` is set,
    /// else this proxy's own in memory.
    #[arg(long, env = "SWITCHYARD_CACHE_MAX_BYTES", default_value_t = 256 << 20)]
    pub cache_max_bytes: u64,

    /// How long a response cache lookup may wait on Redis (milliseconds) before the request
    /// goes on without the cache (a batch of writes, which holds no request up, at least 2 s).
    #[arg(long, env = "SWITCHYARD_CACHE_TIMEOUT_MS", default_value_t = 50)]
    pub cache_timeout_ms: u64,

    /// File for the last known good snapshot.
    #[arg(long, env = "SWITCHYARD_SNAPSHOT_CACHE")]
    pub snapshot_cache: Option<PathBuf>,

    /// Seconds between SIGTERM and closing the listener: `/readyz` answers 503 at once while
    /// new requests are still served, so endpoints are removed before the proxy stops listening.
    #[arg(long, env = "SWITCHYARD_DRAIN_DELAY_SECONDS", default_value_t = 5)]
    pub drain_delay_seconds: u64,

    /// Seconds to let in-flight requests and streams finish after the listener closes.
    #[arg(long, env = "SWITCHYARD_SHUTDOWN_GRACE_SECONDS", default_value_t = 30)]
    pub shutdown_grace_seconds: u64,

    /// How often the config file is checked for changes, in milliseconds.
    #[arg(long, env = "SWITCHYARD_CONFIG_POLL_MS", default_value_t = 1000)]
    pub config_poll_ms: u64,

    /// Threads serving client connections, each with its own listener on the address (the
    /// kernel spreads new connections over them), its own event loop and its own upstream
    /// connection pool, so a request stays on one thread from accept to answer; 0 = one per CPU
    /// this process may use.
    #[arg(long, env = "SWITCHYARD_WORKERS", default_value_t = 0)]
    pub workers: usize,

    /// A PEM file of root certificates trusted for `https://` upstreams besides the public web
    /// roots (a private CA in front of self-hosted models).
    #[arg(long, env = "SWITCHYARD_UPSTREAM_CA")]
    pub upstream_ca: Option<PathBuf>,

    /// Offer HTTP/2 to `https://` upstreams (ALPN; the upstream chooses); `false`: HTTP/1.1
    /// only.
    #[arg(long, env = "SWITCHYARD_UPSTREAM_HTTP2", default_value_t = true, action = clap::ArgAction::Set)]
    pub upstream_http2: bool,

    /// Connection limits and client deadlines.
    #[command(flatten)]
    pub limits: switchyard_server::LimitArgs,
}
