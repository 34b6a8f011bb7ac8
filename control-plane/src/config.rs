//! Command-line flags with environment fallbacks (docs/src/reference/control-plane-api.md).

use std::net::SocketAddr;

use clap::Parser;

#[derive(Debug, Clone, Parser)]
#[command(
    name = "switchyard-control-plane",
    version,
    about = "Switchyard control plane"
)]
pub struct Config {
    /// Postgres connection URL.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: String,

    /// Bearer token required by the admin API.
    #[arg(long, env = "SWITCHYARD_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: String,

    /// Listen address of the admin REST API, explain, health and metrics. Loopback by default:
    /// the admin token and the console's sign-in cross this port, so it faces the network only
    /// when the operator says so (the container image sets `0.0.0.0:8081`).
    #[arg(long, env = "SWITCHYARD_HTTP_ADDR", default_value = "127.0.0.1:8081")]
    pub http_addr: SocketAddr,

    /// Listen address of the gRPC snapshot service.
    #[arg(long, env = "SWITCHYARD_GRPC_ADDR", default_value = "127.0.0.1:8082")]
    pub grpc_addr: SocketAddr,

    /// Fleet tokens proxies must present to watch snapshots (comma-separated: several are valid
    /// at once during a rotation). Unset: any client may watch, and snapshots carry no inline
    /// credential secrets.
    #[arg(long, env = "SWITCHYARD_FLEET_TOKEN", hide_env_values = true)]
    pub fleet_token: Option<String>,

    /// PEM certificate (chain) of the gRPC port: with `--grpc-tls-key`, the port speaks TLS.
    #[arg(long, env = "SWITCHYARD_GRPC_TLS_CERT", requires = "grpc_tls_key")]
    pub grpc_tls_cert: Option<std::path::PathBuf>,

    /// PEM private key of the gRPC port's certificate.
    #[arg(long, env = "SWITCHYARD_GRPC_TLS_KEY", requires = "grpc_tls_cert")]
    pub grpc_tls_key: Option<std::path::PathBuf>,

    /// PEM CA bundle: proxies must present a client certificate it signed (mutual TLS).
    #[arg(
        long,
        env = "SWITCHYARD_GRPC_TLS_CLIENT_CA",
        requires = "grpc_tls_cert"
    )]
    pub grpc_tls_client_ca: Option<std::path::PathBuf>,

    /// Seconds between SIGTERM and stopping: `/readyz` answers 503 at once while HTTP and the
    /// snapshot streams keep being served, so the replica leaves the Service's endpoints first.
    #[arg(long, env = "SWITCHYARD_DRAIN_DELAY_SECONDS", default_value_t = 5)]
    pub drain_delay_secs: u64,

    /// Most gRPC connections open at once; at the cap a new connection evicts the one idle the
    /// longest (no stream in progress).
    #[arg(long, env = "SWITCHYARD_GRPC_MAX_CONNECTIONS", default_value_t = 1024)]
    pub grpc_max_connections: usize,

    /// Milliseconds a new gRPC connection has to complete its handshakes (TLS, HTTP/2) and send
    /// an authenticated request; without one by then it is closed.
    #[arg(
        long,
        env = "SWITCHYARD_GRPC_HANDSHAKE_TIMEOUT_MS",
        default_value_t = 10_000
    )]
    pub grpc_handshake_timeout_ms: u64,

    /// Connection limits and client deadlines of the HTTP port.
    #[command(flatten)]
    pub limits: switchyard_server::LimitArgs,

    /// Redis URL of the fleet's shared state (as on the proxies): explain and `/api/v1/state`
    /// read it, recovery probes close breakers in it. Unset: no live health view.
    #[arg(long, env = "REDIS_URL", hide_env_values = true)]
    pub redis_url: Option<String>,

    /// Namespace of the fleet's keys in Redis; must match the proxies' SWITCHYARD_REDIS_PREFIX.
    #[arg(long, env = "SWITCHYARD_REDIS_PREFIX", default_value = "switchyard")]
    pub redis_prefix: String,

    /// How often each replica checks (or tries to take) the recovery-probe lead and records open
    /// breakers, in milliseconds. Probe rounds follow `recovery_probe_interval_seconds`.
    #[arg(long, env = "SWITCHYARD_RECOVERY_TICK_MS", default_value_t = 2000)]
    pub recovery_tick_ms: u64,

    /// How often each replica records crossed budget thresholds and sends due notifications,
    /// in milliseconds.
    #[arg(long, env = "SWITCHYARD_NOTIFY_TICK_MS", default_value_t = 5000)]
    pub notify_tick_ms: u64,

    /// The wait before a failed notification is sent again, in milliseconds; it doubles with
    /// each further failure (up to an hour), for 8 attempts in all.
    #[arg(long, env = "SWITCHYARD_NOTIFY_BACKOFF_MS", default_value_t = 2000)]
    pub notify_backoff_ms: u64,

    /// The answers a semantic cache rule in `trial` compares with the live answer before its
    /// report is told as ready to decide on (a `trial_finished` notification).
    #[arg(long, env = "SWITCHYARD_SEMANTIC_TRIAL_SAMPLE", default_value_t = crate::notify::trials::DEFAULT_TRIAL_SAMPLE)]
    pub semantic_trial_sample: u64,

    /// Budget of one recovery probe request (per credential), in milliseconds.
    #[arg(long, env = "SWITCHYARD_PROBE_TIMEOUT_MS", default_value_t = 5000)]
    pub probe_timeout_ms: u64,

    /// A PEM file of root certificates trusted for `https://` upstreams besides the public web
    /// roots, for the recovery probes and trial calls (give the proxies the same file).
    #[arg(long, env = "SWITCHYARD_UPSTREAM_CA")]
    pub upstream_ca: Option<std::path::PathBuf>,

    /// Offer HTTP/2 to `https://` upstreams (ALPN; the upstream chooses); `false`: HTTP/1.1
    /// only.
    #[arg(long, env = "SWITCHYARD_UPSTREAM_HTTP2", default_value_t = true, action = clap::ArgAction::Set)]
    pub upstream_http2: bool,

    /// How long to keep retrying Postgres at start before giving up, in seconds.
    #[arg(long, env = "SWITCHYARD_DB_STARTUP_TIMEOUT_SECS", default_value_t = 60)]
    pub db_startup_timeout_secs: u64,

    /// Days of the request log kept: every day's partition before the last this many days is
    /// dropped whole (1 to 3650).
    #[arg(long, env = "SWITCHYARD_REQUEST_LOG_RETENTION_DAYS", default_value_t = 30,
          value_parser = clap::value_parser!(u32).range(1..=3650))]
    pub request_log_retention_days: u32,

    /// Single sign-on with OpenID Connect (off unless `SWITCHYARD_SSO_ISSUER` is set).
    #[command(flatten)]
    pub sso: crate::sso::settings::SsoArgs,

    /// How long in-flight requests and streams may take to finish on SIGTERM, in seconds.
    #[arg(long, env = "SWITCHYARD_SHUTDOWN_GRACE_SECS", default_value_t = 10)]
    pub shutdown_grace_secs: u64,
}

impl Config {
    /// How probes and trial calls connect to upstreams (each sets its own connect timeout).
    pub fn upstream_options(&self) -> Result<switchyard_upstream::ClientOptions, String> {
        switchyard_upstream::ClientOptions::from_settings(
            std::time::Duration::from_secs(5),
            self.upstream_ca.as_deref(),
            self.upstream_http2,
        )
    }

    /// Checks what clap cannot: a usable token, a parseable database URL.
    pub fn validate(&self) -> Result<(), String> {
        if self.admin_token.trim().len() < 16 {
            return Err("SWITCHYARD_ADMIN_TOKEN must be at least 16 characters".into());
        }
        if !(self.database_url.starts_with("postgres://")
            || self.database_url.starts_with("postgresql://"))
        {
            return Err("DATABASE_URL must be a postgres:// URL".into());
        }
        if !(50..=600_000).contains(&self.recovery_tick_ms) {
            return Err("SWITCHYARD_RECOVERY_TICK_MS must be between 50 and 600000".into());
        }
        if !(50..=600_000).contains(&self.notify_tick_ms) {
            return Err("SWITCHYARD_NOTIFY_TICK_MS must be between 50 and 600000".into());
        }
        if self.notify_backoff_ms > 3_600_000 {
            return Err("SWITCHYARD_NOTIFY_BACKOFF_MS must be at most 3600000".into());
        }
        if !(10..=1_000_000).contains(&self.semantic_trial_sample) {
            return Err("SWITCHYARD_SEMANTIC_TRIAL_SAMPLE must be between 10 and 1000000".into());
        }
        if !(100..=120_000).contains(&self.probe_timeout_ms) {
            return Err("SWITCHYARD_PROBE_TIMEOUT_MS must be between 100 and 120000".into());
        }
        if !(100..=600_000).contains(&self.grpc_handshake_timeout_ms) {
            return Err(
                "SWITCHYARD_GRPC_HANDSHAKE_TIMEOUT_MS must be between 100 and 600000".into(),
            );
        }
        if self.redis_prefix.is_empty() || self.redis_prefix.contains(['{', '}']) {
            return Err("SWITCHYARD_REDIS_PREFIX must be non-empty and free of braces".into());
        }
        self.sso.settings()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_ports_listen_on_loopback_unless_told_otherwise() {
        let config = Config::try_parse_from([
            "switchyard-control-plane",
            "--database-url",
            "postgres://postgres@127.0.0.1:5432/postgres",
            "--admin-token",
            "a-long-enough-admin-token",
        ])
        .unwrap();
        assert!(config.http_addr.ip().is_loopback(), "{}", config.http_addr);
        assert!(config.grpc_addr.ip().is_loopback(), "{}", config.grpc_addr);
    }
}
