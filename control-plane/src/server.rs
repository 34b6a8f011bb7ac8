//! Wiring: connect and migrate, open the shared-state view (REDIS_URL), start the snapshot
//! publisher and the recovery job, serve HTTP and gRPC until the shutdown token fires, then drain
//! within a grace period.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use sqlx::postgres::PgConnectOptions;
use switchyard_server::Server;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::api::app;
use crate::config::Config;
use crate::grpc::{guarded_incoming, FleetTokens, SnapshotWatchServer};
use crate::live::LiveState;
use crate::metrics::Metrics;
use crate::notify::deliver::DeliveryPolicy;
use crate::notify::{Notifier, NotifyConfig};
use crate::publisher::Publisher;
use crate::recovery::{Recovery, RecoveryConfig};
use crate::state::AppState;

/// Retries migrations until they succeed or the startup timeout passes (Postgres may start after
/// us in a compose file or a pod).
async fn migrate_with_retry(
    pool: &sqlx::PgPool,
    options: &PgConnectOptions,
    timeout: Duration,
) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut delay = Duration::from_millis(200);
    loop {
        match crate::db::migrate(pool).await {
            Ok(()) => return Ok(()),
            Err(sqlx::migrate::MigrateError::Execute(sqlx::Error::Database(db)))
                if db.code().as_deref() == Some(MISSING_DATABASE) =>
            {
                return Err(missing_database(options));
            }
            Err(sqlx::migrate::MigrateError::Execute(error))
                if crate::error::is_unavailable(&error)
                    && tokio::time::Instant::now() + delay < deadline =>
            {
                tracing::warn!(error = %error, "Postgres not reachable yet; retrying");
            }
            Err(error) => return Err(error).context("applying migrations"),
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(5));
    }
}

/// Postgres's code for "database does not exist" (invalid_catalog_name).
const MISSING_DATABASE: &str = "3D000";

/// A database that does not exist is the operator's to create: say which, where, and how.
fn missing_database(options: &PgConnectOptions) -> anyhow::Error {
    let (host, port) = (options.get_host(), options.get_port());
    let user = options.get_username();
    let name = options.get_database().unwrap_or(user);
    anyhow::anyhow!(
        "database \"{name}\" does not exist on {host}:{port}: create it (for example \
         `createdb -h {host} -p {port} -U {user} {name}`) or point DATABASE_URL at one that exists"
    )
}

/// The gRPC port's TLS settings, read from the configured PEM files (none: plaintext).
fn grpc_tls(config: &Config) -> anyhow::Result<Option<tonic::transport::ServerTlsConfig>> {
    use tonic::transport::{Certificate, Identity, ServerTlsConfig};
    let (Some(cert), Some(key)) = (&config.grpc_tls_cert, &config.grpc_tls_key) else {
        return Ok(None);
    };
    let read = |path: &std::path::PathBuf, what: &str| {
        std::fs::read(path)
            .with_context(|| format!("reading the gRPC TLS {what} {}", path.display()))
    };
    let mut tls = ServerTlsConfig::new().identity(Identity::from_pem(
        read(cert, "certificate")?,
        read(key, "key")?,
    ));
    if let Some(ca) = &config.grpc_tls_client_ca {
        tls = tls.client_ca_root(Certificate::from_pem(read(ca, "client CA")?));
    }
    tracing::info!(
        mutual = config.grpc_tls_client_ca.is_some(),
        "gRPC port speaks TLS"
    );
    Ok(Some(tls))
}

/// Single sign-on, when `SWITCHYARD_SSO_ISSUER` is set; its provider is reached with the same
/// trusted roots as upstreams (`SWITCHYARD_UPSTREAM_CA`).
fn sso(
    config: &Config,
    upstream: &switchyard_upstream::ClientOptions,
) -> anyhow::Result<Option<Arc<crate::sso::Sso>>> {
    let Some(settings) = config.sso.settings().map_err(anyhow::Error::msg)? else {
        return Ok(None);
    };
    tracing::info!(issuer = %settings.issuer, client_id = %settings.client_id, "single sign-on is on");
    let client = switchyard_upstream::HttpClient::new(upstream.clone());
    Ok(Some(Arc::new(crate::sso::Sso::new(
        settings,
        client,
        &config.admin_token,
    ))))
}

/// The notifier every replica runs (budget thresholds, signed webhook deliveries).
fn notifier(
    config: &Config,
    pool: &sqlx::PgPool,
    upstream: &switchyard_upstream::ClientOptions,
) -> Arc<Notifier> {
    Notifier::new(
        pool.clone(),
        NotifyConfig {
            tick: Duration::from_millis(config.notify_tick_ms),
            delivery: DeliveryPolicy {
                backoff: Duration::from_millis(config.notify_backoff_ms),
                ..DeliveryPolicy::default()
            },
            upstream: upstream.clone(),
            trial_sample: config.semantic_trial_sample,
        },
    )
}

/// `signal` fires on SIGTERM: the replica reports not-ready at once, keeps serving HTTP and the
/// snapshot streams for the drain delay (so it leaves the Service's endpoints first), then stops.
pub async fn run(config: Config, signal: CancellationToken) -> anyhow::Result<()> {
    let upstream = config.upstream_options().map_err(anyhow::Error::msg)?;
    let shutdown = shutdown_after_drain(&signal, Duration::from_secs(config.drain_delay_secs));
    let options = PgConnectOptions::from_str(&config.database_url).context("DATABASE_URL")?;
    let pool = crate::db::pool(options.clone());
    let startup = Duration::from_secs(config.db_startup_timeout_secs);
    migrate_with_retry(&pool, &options, startup).await?;
    tracing::info!("migrations applied");
    let live = live_state(&config)?;

    let metrics = Arc::new(Metrics::default());
    let publisher = Publisher::new(pool.clone(), Arc::clone(&metrics));
    let tracker = TaskTracker::new();
    tracker.spawn(Arc::clone(&publisher).run(shutdown.clone()));
    let recovery = Recovery::new(
        pool.clone(),
        live.clone(),
        RecoveryConfig {
            tick: Duration::from_millis(config.recovery_tick_ms),
            probe_timeout: Duration::from_millis(config.probe_timeout_ms),
            upstream: upstream.clone(),
            ..RecoveryConfig::default()
        },
    );
    spawn_leader_jobs(&tracker, &recovery, &pool, &options, &config, &shutdown);
    tracker.spawn(notifier(&config, &pool, &upstream).run(shutdown.clone()));

    let (http, grpc) = bind(&config).await?;

    let fleet = FleetTokens::parse(config.fleet_token.as_deref());
    let proxies_without_secrets = fleet.is_empty();
    if proxies_without_secrets {
        tracing::warn!("no SWITCHYARD_FLEET_TOKEN: any client reaching the gRPC port may watch snapshots, which therefore carry no secrets (no inline credentials, header values or URL passwords: proxies cannot call channels that need them), and usage reports are refused; set SWITCHYARD_FLEET_TOKEN here and on the proxies");
    }
    let grpc_service = SnapshotWatchServer::new(
        publisher.subscribe(),
        shutdown.clone(),
        Arc::clone(&metrics),
        fleet,
    )
    .with_usage(pool.clone());
    let mut state = AppState::new(
        pool.clone(),
        &config.admin_token,
        Arc::clone(&publisher),
        Arc::clone(&metrics),
    )
    .with_recovery(Arc::clone(&recovery))
    .with_sso(sso(&config, &upstream)?)
    .with_upstream(upstream)
    .with_draining(signal.clone())
    .with_proxies(grpc_service.proxies())
    .with_proxies_without_secrets(proxies_without_secrets);
    if let Some(live) = &live {
        state = state.with_live(live.clone());
    }
    let grpc = GrpcPort {
        listener: grpc,
        service: grpc_service,
    };
    serve(&config, &tracker, state, http, grpc, &shutdown)?;
    tracker.close();

    shutdown.cancelled().await;
    tracing::info!("shutting down");
    let grace = Duration::from_secs(config.shutdown_grace_secs);
    if tokio::time::timeout(grace, tracker.wait()).await.is_err() {
        tracing::warn!(
            grace_secs = config.shutdown_grace_secs,
            "grace period over; exiting"
        );
    }
    if let Some(live) = &live {
        live.close(Duration::from_secs(2)).await;
    }
    pool.close().await;
    Ok(())
}

/// The jobs one replica at a time runs, each under its own lead: the recovery probes and the
/// request log's retention.
fn spawn_leader_jobs(
    tracker: &TaskTracker,
    recovery: &Arc<Recovery>,
    pool: &sqlx::PgPool,
    options: &PgConnectOptions,
    config: &Config,
    shutdown: &CancellationToken,
) {
    tracker.spawn(Arc::clone(recovery).run(options.clone(), shutdown.clone()));
    tracker.spawn(crate::log_retention::run(
        pool.clone(),
        options.clone(),
        config.request_log_retention_days,
        shutdown.clone(),
    ));
}

/// The fleet's shared state (`REDIS_URL`), when there is one.
fn live_state(config: &Config) -> anyhow::Result<Option<LiveState>> {
    match &config.redis_url {
        Some(url) => Ok(Some(LiveState::start_redis(url, &config.redis_prefix)?)),
        None => {
            tracing::info!("no REDIS_URL: explain runs without a live health view");
            Ok(None)
        }
    }
}

/// The HTTP and gRPC ports' listeners.
async fn bind(config: &Config) -> anyhow::Result<(TcpListener, TcpListener)> {
    let http = TcpListener::bind(config.http_addr)
        .await
        .with_context(|| format!("binding SWITCHYARD_HTTP_ADDR {}", config.http_addr))?;
    let grpc = TcpListener::bind(config.grpc_addr)
        .await
        .with_context(|| format!("binding SWITCHYARD_GRPC_ADDR {}", config.grpc_addr))?;
    let http_addr = http.local_addr()?;
    let grpc_addr = grpc.local_addr()?;
    tracing::info!(%http_addr, %grpc_addr, "listening");
    Ok((http, grpc))
}

/// The token the servers stop on: it fires the drain delay after `signal`, which `/readyz`
/// answers 503 on from the start.
fn shutdown_after_drain(signal: &CancellationToken, drain_delay: Duration) -> CancellationToken {
    let shutdown = CancellationToken::new();
    tokio::spawn({
        let (signal, shutdown) = (signal.clone(), shutdown.clone());
        async move {
            signal.cancelled().await;
            tracing::info!(
                drain_delay_secs = drain_delay.as_secs(),
                "SIGTERM: reporting not ready, still serving for the drain delay"
            );
            tokio::time::sleep(drain_delay).await;
            shutdown.cancel();
        }
    });
    shutdown
}

/// The gRPC port's listener and the service it serves.
struct GrpcPort {
    listener: TcpListener,
    service: SnapshotWatchServer,
}

/// Serves the admin HTTP surface on `http` and the fleet's gRPC on `grpc`, each under its
/// connection limits, on `tracker` until `shutdown`.
fn serve(
    config: &Config,
    tracker: &TaskTracker,
    state: AppState,
    http: TcpListener,
    grpc: GrpcPort,
    shutdown: &CancellationToken,
) -> anyhow::Result<()> {
    let (fd_soft, fd_hard) = switchyard_server::raise_fd_limit();
    let server = Server::new(config.limits.limits());
    tracing::info!(
        fd_soft,
        fd_hard,
        max_connections = server.max_connections(),
        grpc_max_connections = config.grpc_max_connections,
        grpc_handshake_timeout_ms = config.grpc_handshake_timeout_ms,
        "connection limits"
    );
    let grpc_registry = Arc::new(switchyard_server::Registry::new(
        config.grpc_max_connections,
        0,
    ));
    let state = state
        .with_connections(server.stats())
        .with_grpc_connections(grpc_registry.stats());
    let metrics = Arc::clone(&state.metrics);
    let router = app(state);
    tracker.spawn(server.serve(http, router, shutdown.clone()));

    let grpc_shutdown = shutdown.clone();
    let grpc_incoming = guarded_incoming(
        grpc.listener,
        grpc_registry,
        Duration::from_millis(config.grpc_handshake_timeout_ms),
        metrics,
    );
    let mut grpc_server = tonic::transport::Server::builder();
    if let Some(tls) = grpc_tls(config)? {
        grpc_server = grpc_server
            .tls_config(tls)
            .context("configuring TLS on the gRPC port")?;
    }
    let grpc_service = grpc.service;
    tracker.spawn(async move {
        let served = grpc_server
            .http2_keepalive_interval(Some(Duration::from_secs(30)))
            .http2_keepalive_timeout(Some(Duration::from_secs(10)))
            .timeout(Duration::from_secs(30))
            .add_service(grpc_service)
            .serve_with_incoming_shutdown(
                grpc_incoming,
                async move { grpc_shutdown.cancelled().await },
            )
            .await;
        if let Err(error) = served {
            tracing::error!(error = %error, "gRPC server failed");
        }
    });
    Ok(())
}
