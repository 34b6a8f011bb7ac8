//! Wiring: connect and migrate, start the snapshot publisher, serve HTTP and gRPC until the
//! shutdown token fires, then drain within a grace period.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use sqlx::postgres::PgConnectOptions;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::api::{app, AppState};
use crate::config::Config;
use crate::grpc::SnapshotWatchServer;
use crate::metrics::Metrics;
use crate::publisher::Publisher;

/// Retries migrations until they succeed or the startup timeout passes (Postgres may start after
/// us in a compose file or a pod).
async fn migrate_with_retry(pool: &sqlx::PgPool, timeout: Duration) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut delay = Duration::from_millis(200);
    loop {
        match crate::db::migrate(pool).await {
            Ok(()) => return Ok(()),
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

pub async fn run(config: Config, shutdown: CancellationToken) -> anyhow::Result<()> {
    let options = PgConnectOptions::from_str(&config.database_url).context("DATABASE_URL")?;
    let pool = crate::db::pool(options);
    migrate_with_retry(&pool, Duration::from_secs(config.db_startup_timeout_secs)).await?;
    tracing::info!("migrations applied");
    if config.redis_url.is_some() {
        tracing::info!("REDIS_URL is set but not used yet: explain runs without a health view");
    }

    let metrics = Arc::new(Metrics::default());
    let publisher = Publisher::new(pool.clone(), Arc::clone(&metrics));
    let tracker = TaskTracker::new();
    tracker.spawn(Arc::clone(&publisher).run(shutdown.clone()));

    let http = TcpListener::bind(config.http_addr)
        .await
        .with_context(|| format!("binding SWITCHYARD_HTTP_ADDR {}", config.http_addr))?;
    let grpc = TcpListener::bind(config.grpc_addr)
        .await
        .with_context(|| format!("binding SWITCHYARD_GRPC_ADDR {}", config.grpc_addr))?;
    let http_addr = http.local_addr()?;
    let grpc_addr = grpc.local_addr()?;
    tracing::info!(%http_addr, %grpc_addr, "listening");

    let state = AppState::new(
        pool.clone(),
        &config.admin_token,
        Arc::clone(&publisher),
        Arc::clone(&metrics),
    );
    let router = app(state);
    let http_shutdown = shutdown.clone();
    tracker.spawn(async move {
        let served = axum::serve(http, router)
            .with_graceful_shutdown(async move { http_shutdown.cancelled().await })
            .await;
        if let Err(error) = served {
            tracing::error!(error = %error, "HTTP server failed");
        }
    });

    let grpc_service = SnapshotWatchServer::new(
        publisher.subscribe(),
        shutdown.clone(),
        Arc::clone(&metrics),
    );
    let grpc_shutdown = shutdown.clone();
    tracker.spawn(async move {
        let served = tonic::transport::Server::builder()
            .http2_keepalive_interval(Some(Duration::from_secs(30)))
            .add_service(grpc_service)
            .serve_with_incoming_shutdown(
                tonic::transport::server::TcpIncoming::from(grpc).with_nodelay(Some(true)),
                async move { grpc_shutdown.cancelled().await },
            )
            .await;
        if let Err(error) = served {
            tracing::error!(error = %error, "gRPC server failed");
        }
    });
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
    pool.close().await;
    Ok(())
}
