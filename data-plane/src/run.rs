//! Wiring: snapshot source, state store, HTTP server, graceful shutdown.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use switchyard_engine::Snapshot;
use switchyard_state::cache::{MemoryCache, RedisCache, ResponseCache};
use switchyard_state::{mask_url, InMemoryStore, RedisConfig, RedisStore, StateStore};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use switchyard_server::Server;

use crate::cache;
use crate::cli::Cli;
use crate::config;
use crate::operator::LiveGauges;
use crate::semantic_tail;
use crate::server::app;
use crate::shadow_send;
use crate::snapshot::{self, SnapshotReceiver, SnapshotSender};
use crate::state::AppState;
use crate::upstream::ClientOptions;
use crate::usage::{UsageConfig, UsageReporter};

/// Time the error events of streams cut at the end of the grace period get to leave.
const STREAM_CUT_FLUSH: Duration = Duration::from_secs(1);
/// Time the background tasks get to end once stopped (a probe in progress finishes first).
const TASKS_STOP: Duration = Duration::from_secs(2);

/// The whole process as `switchyard-data-plane` runs it: parse `args` (the first is the program
/// name), start the runtime, install the logging (and trace export when
/// `OTEL_EXPORTER_OTLP_ENDPOINT` is set), `run`, flush. The shipped binary and the e2e test
/// binary are both this call; only the global allocator is the binary's own.
pub fn main_with<I, T>(args: I) -> std::process::ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    use clap::Parser;
    let cli = Cli::parse_from(args);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("switchyard-data-plane: cannot start the runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    // Inside the runtime: the OTLP exporter's gRPC channel spawns its worker there.
    let mut telemetry = {
        let _entered = runtime.enter();
        crate::telemetry::init()
    };
    let result = runtime.block_on(run(cli));
    // The runtime's workers still drive the exporter's channel while the last spans are sent.
    telemetry.shutdown();
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "exiting");
            eprintln!("switchyard-data-plane: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Building the state starts the tasks that serve it: the snapshot follower and the shadow
/// sender (the state itself, at the bottom, starts nothing).
impl AppState {
    /// Builds the state and starts following `snapshots` (on the current tokio runtime).
    pub fn new(snapshots: SnapshotReceiver, store: Arc<dyn StateStore>) -> Arc<AppState> {
        AppState::with_usage(snapshots, store, None)
    }

    /// [`AppState::new`] with usage accounting (fleet mode).
    pub fn with_usage(
        snapshots: SnapshotReceiver,
        store: Arc<dyn StateStore>,
        usage: Option<Arc<UsageReporter>>,
    ) -> Arc<AppState> {
        let upstream = ClientOptions::new(Duration::from_secs(5));
        AppState::with_tasks(snapshots, store, usage, &TaskTracker::new(), 0, upstream)
    }

    /// [`AppState::with_usage`], its snapshot follower spawned on `tasks` (the process's
    /// tracker; the follower ends when the snapshot channel closes), with an upstream pool for
    /// each of `workers` serving threads, connecting as `upstream` says (its connect timeout is
    /// the first snapshot's, when there is one).
    pub fn with_tasks(
        snapshots: SnapshotReceiver,
        store: Arc<dyn StateStore>,
        usage: Option<Arc<UsageReporter>>,
        tasks: &TaskTracker,
        workers: usize,
        mut upstream: ClientOptions,
    ) -> Arc<AppState> {
        let views = Arc::new(arc_swap::ArcSwapOption::empty());
        // The pooled client's connect timeout comes from the first snapshot.
        if let Some(snapshot) = snapshots.borrow().clone() {
            upstream.connect_timeout = Duration::from_millis(snapshot.settings.connect_timeout_ms);
            snapshot::install(&views, &*store, snapshot);
        }
        tasks.spawn(snapshot::follow(snapshots, views.clone(), store.clone()));
        let (state, shadow_queue) =
            AppState::assemble(views, store, usage.clone(), workers, &upstream);
        state
            .collectors
            .register(Arc::new(LiveGauges(Arc::downgrade(&state))));
        if let Some(usage) = usage {
            state.collectors.register(usage);
        }
        // The shadow sender holds the state weakly: it ends when the state is dropped (its
        // queue closes) or when streams are cut at shutdown.
        tasks.spawn(shadow_send::run(
            Arc::downgrade(&state),
            shadow_queue,
            state.streams_cut.clone(),
        ));
        tasks.spawn(semantic_tail::run(
            Arc::downgrade(&state),
            state.streams_cut.clone(),
        ));
        state
    }
}

/// Where the proxy listens when neither the flag, its environment variable nor the standalone
/// file's `listen` says: loopback, so a proxy started by hand is not open to the network before
/// its operator says so (the container images set `0.0.0.0:8080`, their network is the pod's).
const DEFAULT_HTTP_ADDR: std::net::SocketAddr =
    std::net::SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 8080);

/// Fleet mode's usage reporter, its task, and the token that stops it (only after the last
/// request has finished, so that request's usage is in the final flush).
type Usage = (
    Arc<UsageReporter>,
    tokio::task::JoinHandle<()>,
    CancellationToken,
);

/// The state store requests use, and the Redis store behind it (if any), closed at exit.
type Stores = (Arc<dyn StateStore>, Option<Arc<RedisStore>>);

/// Runs the data plane until SIGTERM/SIGINT, then drains within the grace period.
///
/// Task ownership: every task this process runs besides the requests' own is spawned on one
/// `TaskTracker` and ends on one `CancellationToken`, `stop` (the snapshot source, the cache
/// writer and the snapshot follower through the snapshot channel closing, the standalone probe
/// loop, the HTTP server's listener). Shutdown is phases, each a token of its own:
/// `AppState::draining` (readiness off, still serving), `stop`, `AppState::streams_cut` (the
/// grace period is over), then the usage reporter's final flush (stopped only after the last
/// request) and the state store's close.
pub async fn run(cli: Cli) -> Result<(), String> {
    // The connect timeout is the snapshot's.
    let upstream = ClientOptions::from_settings(
        std::time::Duration::from_secs(5),
        cli.upstream_ca.as_deref(),
        cli.upstream_http2,
    )?;
    let (snapshots, receiver) = watch::channel(None);
    let tasks = TaskTracker::new();
    let stop = CancellationToken::new();
    let (listen, usage) = start_snapshot_source(&cli, snapshots, &tasks, &stop)?;
    let (store, redis_store) = state_store(&cli)?;
    if cli.snapshot_cache.is_some() && cli.config.is_some() {
        tracing::info!("SWITCHYARD_SNAPSHOT_CACHE is only used with a control plane; ignored in standalone mode");
    }

    let workers = crate::workers::count(cli.workers);
    let state = AppState::with_tasks(
        receiver,
        store,
        usage.as_ref().map(|(reporter, _, _)| Arc::clone(reporter)),
        &tasks,
        workers,
        upstream,
    );
    if let Some(redis) = &redis_store {
        state.collectors.register(redis.clone());
    }
    state.set_cache(response_cache(&cli)?);
    if let Some(credential) = &cli.metrics_token {
        state.protect_metrics(credential);
    }
    state.set_id_key(id_key(&cli));
    if cli.config.is_some() {
        // Standalone: nobody else runs recovery probes for this proxy's breakers.
        tasks.spawn(crate::probe::recovery_loop(state.clone(), stop.clone()));
    }
    let http_addr = cli.http_addr.or(listen).unwrap_or(DEFAULT_HTTP_ADDR);
    let (mut server, addr) = start_serving(&cli, &state, http_addr, workers, &tasks, &stop)?;
    tokio::select! {
        result = &mut server => {
            return match result {
                Ok(Ok(())) => Ok(()),
                Ok(Err(e)) => Err(e),
                Err(e) => Err(format!("server task failed: {e}")),
            };
        }
        () = switchyard_server::termination_signal() => {}
    }
    // From here a proxy started on the same address (a restart) shares the port instead of
    // failing on it; the mark goes with this process.
    let _draining = crate::workers::mark_draining(addr);
    drain(&cli, &state, &stop, server).await;
    if let Some((_, task, stop)) = usage {
        // Send the usage still pending (the flush bounds itself; this only guards the join).
        stop.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
    }
    tasks.close();
    if tokio::time::timeout(TASKS_STOP, tasks.wait())
        .await
        .is_err()
    {
        tracing::warn!(
            tasks = tasks.len(),
            "background tasks still running at exit"
        );
    }
    if let Some(redis) = redis_store {
        // Push the last writes and drop this proxy's in-flight lease.
        redis.close(Duration::from_secs(2)).await;
    }
    Ok(())
}

/// Binds `http_addr` and starts the workers serving `state`: the serving task (it ends once every
/// worker has stopped) and the address bound.
fn start_serving(
    cli: &Cli,
    state: &Arc<AppState>,
    http_addr: std::net::SocketAddr,
    workers: usize,
    tasks: &TaskTracker,
    stop: &CancellationToken,
) -> Result<(Serving, std::net::SocketAddr), String> {
    let (sockets, addr) = crate::workers::bind(http_addr, workers)
        .map_err(|e| format!("cannot listen on {http_addr}: {e}"))?;
    let (fd_soft, fd_hard) = switchyard_server::raise_fd_limit();
    let server = Server::new(cli.limits.limits());
    tracing::info!(
        fd_soft,
        fd_hard,
        max_connections = server.max_connections(),
        "connection limits"
    );
    state.collectors.register(Arc::new(server.stats()));
    let serving = crate::workers::start(sockets, &server, &app(Arc::clone(state)), stop)?;
    tracing::info!(addr = %addr, workers, "listening");
    Ok((tasks.spawn(serving), addr))
}

/// The task serving HTTP, until every worker has stopped.
type Serving = tokio::task::JoinHandle<Result<(), String>>;

/// The key file and batch ids are signed under: from the id secret, else from the fleet token
/// (both the same on every proxy of a fleet), else this process's own (logged: its ids last
/// until it restarts, and other proxies do not take them).
fn id_key(cli: &Cli) -> crate::object_id::IdKey {
    use crate::object_id::IdKey;
    let secret = |s: &Option<String>| {
        s.as_deref()
            .filter(|s| !s.trim().is_empty())
            .map(str::to_owned)
    };
    if let Some(secret) = secret(&cli.id_secret) {
        return IdKey::derived(&secret);
    }
    if let Some(token) = secret(&cli.fleet_token) {
        return IdKey::derived(&format!("fleet token:{token}"));
    }
    tracing::warn!(
        "neither SWITCHYARD_ID_SECRET nor SWITCHYARD_FLEET_TOKEN is set: file and batch ids are signed with a key of this process, so ids last until restart and another proxy does not take them"
    );
    IdKey::random()
}

/// Starts the snapshot source: the standalone file (and its watcher), or the control plane's
/// stream (with the snapshot cache and the usage reporter). Returns the file's `listen`
/// address, if it names one, and fleet mode's usage reporter.
fn start_snapshot_source(
    cli: &Cli,
    snapshots: SnapshotSender,
    tasks: &TaskTracker,
    stop: &CancellationToken,
) -> Result<(Option<std::net::SocketAddr>, Option<Usage>), String> {
    match (&cli.config, &cli.control_plane) {
        (Some(path), _) => {
            let (parts, listen) = config::load_standalone(path, 1)
                .map_err(|e| format!("bad configuration in {}: {e}", path.display()))?;
            snapshots.send_replace(Some(Arc::new(Snapshot::new(parts))));
            tracing::info!(config = %path.display(), "standalone mode");
            tasks.spawn(watch_config(
                path.clone(),
                snapshots,
                Duration::from_millis(cli.config_poll_ms.max(50)),
                stop.clone(),
            ));
            Ok((listen, None))
        }
        (None, Some(endpoint)) => {
            let usage = follow_control_plane(cli, endpoint, snapshots, tasks, stop)?;
            Ok((None, Some(usage)))
        }
        (None, None) => Err(
            "no snapshot source: pass --config FILE (standalone) or set SWITCHYARD_CONTROL_PLANE"
                .to_owned(),
        ),
    }
}

/// Fleet mode: the cached snapshot until the control plane answers, the snapshot stream, and
/// usage accounting towards the control plane (standalone has nobody to report to).
fn follow_control_plane(
    cli: &Cli,
    endpoint: &str,
    snapshots: SnapshotSender,
    tasks: &TaskTracker,
    stop: &CancellationToken,
) -> Result<Usage, String> {
    let uri: http::Uri = endpoint
        .parse()
        .map_err(|e| format!("SWITCHYARD_CONTROL_PLANE {endpoint:?} is not a URL: {e}"))?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) {
        return Err(format!(
            "SWITCHYARD_CONTROL_PLANE {endpoint:?} must be an http:// or https:// URL"
        ));
    }
    let mut have_revision = 0;
    if let Some(path) = &cli.snapshot_cache {
        match cache::load(path) {
            Ok(Some(snapshot)) => {
                have_revision = snapshot.revision;
                tracing::info!(revision = have_revision, cache = %path.display(), "serving the cached snapshot until the control plane answers");
                snapshots.send_replace(Some(Arc::new(snapshot)));
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(error = %e, "snapshot cache ignored"),
        }
        tasks.spawn(cache::persist(path.clone(), snapshots.subscribe()));
    }
    tracing::info!(control_plane = %endpoint, "fleet mode: following the control plane");
    let endpoint = endpoint.to_owned();
    let auth = watch_auth(cli)?;
    let usage_stop = CancellationToken::new();
    let (reporter, task) = UsageReporter::start(
        endpoint.clone(),
        auth.clone(),
        UsageConfig::default(),
        usage_stop.clone(),
    )
    .map_err(|e| format!("SWITCHYARD_CONTROL_PLANE: {e}"))?;
    let cancel = stop.clone();
    tasks.spawn(async move {
        let watched =
            switchyard_proto::watch_snapshots(endpoint, have_revision, auth, snapshots, cancel)
                .await;
        if let Err(e) = watched {
            tracing::error!(error = %e, "snapshot stream stopped");
        }
    });
    Ok((reporter, task, usage_stop))
}

/// Fleet state through Redis when `REDIS_URL` is set (it never fails on Redis being down),
/// else in memory. The Redis store is also returned on its own, to be closed at exit.
fn state_store(cli: &Cli) -> Result<Stores, String> {
    match &cli.redis_url {
        Some(url) => {
            let config = RedisConfig::new(url.clone(), cli.redis_prefix.clone());
            let redis = Arc::new(
                RedisStore::start(config).map_err(|e| format!("bad Redis configuration: {e}"))?,
            );
            tracing::info!(redis = %mask_url(url), prefix = %cli.redis_prefix, "shared state in Redis");
            Ok((redis.clone(), Some(redis)))
        }
        None => {
            tracing::info!("in-memory state (no REDIS_URL)");
            Ok((Arc::new(InMemoryStore::new()), None))
        }
    }
}

/// The response cache's store: the fleet's in Redis when `REDIS_URL` is set (it never fails
/// on Redis being down: the cache is bypassed), else in memory.
fn response_cache(cli: &Cli) -> Result<Arc<dyn ResponseCache>, String> {
    let max_bytes = cli.cache_max_bytes;
    Ok(match &cli.redis_url {
        Some(url) => {
            let timeout = Duration::from_millis(cli.cache_timeout_ms.max(1));
            let cache = RedisCache::start(url, &cli.redis_prefix, max_bytes, timeout)
                .map_err(|e| format!("bad Redis configuration: {e}"))?;
            Arc::new(cache)
        }
        None => Arc::new(MemoryCache::new(
            usize::try_from(max_bytes).unwrap_or(usize::MAX),
        )),
    })
}

/// After the first signal: not ready first, still serving (the load balancer takes this proxy
/// out before it stops listening, so no client meets a closed port), then stop accepting and
/// drain within the grace period; streams still open after it get an error event in their
/// protocol before the connection closes, rather than a silent cut.
async fn drain(cli: &Cli, state: &AppState, stop: &CancellationToken, mut server: Serving) {
    state.draining.cancel();
    tracing::info!(
        drain_delay_seconds = cli.drain_delay_seconds,
        "SIGTERM: reporting not ready, still serving for the drain delay"
    );
    tokio::select! {
        () = tokio::time::sleep(Duration::from_secs(cli.drain_delay_seconds)) => {}
        () = switchyard_server::termination_signal() => tracing::info!("second signal: skipping the rest of the drain delay"),
    }
    tracing::info!(
        grace_seconds = cli.shutdown_grace_seconds,
        "shutting down: draining in-flight requests"
    );
    stop.cancel();
    let grace = Duration::from_secs(cli.shutdown_grace_seconds);
    match tokio::time::timeout(grace, &mut server).await {
        Ok(_) => tracing::info!("drained; bye"),
        Err(_) => {
            tracing::warn!("grace period over; ending the streams still open");
            state.streams_cut.cancel();
            let _ = tokio::time::timeout(STREAM_CUT_FLUSH, server).await;
        }
    }
}

/// The fleet token and TLS material this proxy presents to the control plane.
fn watch_auth(cli: &Cli) -> Result<switchyard_proto::WatchAuth, String> {
    let read = |path: &PathBuf| {
        std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
    };
    let identity_pem = match (
        &cli.control_plane_client_cert,
        &cli.control_plane_client_key,
    ) {
        (Some(cert), Some(key)) => Some((read(cert)?, read(key)?)),
        _ => None,
    };
    Ok(switchyard_proto::WatchAuth {
        fleet_token: cli.fleet_token.clone(),
        ca_pem: cli.control_plane_ca.as_ref().map(read).transpose()?,
        identity_pem,
    })
}

fn stamp(path: &PathBuf) -> Option<(SystemTime, u64)> {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.modified().ok()?, meta.len()))
}

/// Polls the file's modification time and size; a changed file that validates becomes the next
/// snapshot revision, a broken one is logged and the last good snapshot stays in force.
pub async fn watch_config(
    path: PathBuf,
    snapshots: SnapshotSender,
    every: Duration,
    stop: CancellationToken,
) {
    let mut seen = stamp(&path);
    let mut revision = 1;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            () = stop.cancelled() => return,
        }
        let now = stamp(&path);
        if now == seen {
            continue;
        }
        seen = now;
        match config::load_file(&path, revision + 1) {
            Ok(parts) => {
                revision += 1;
                snapshots.send_replace(Some(Arc::new(Snapshot::new(parts))));
                tracing::info!(revision, config = %path.display(), "configuration reloaded");
            }
            Err(e) => {
                tracing::warn!(error = %e, config = %path.display(), "configuration change rejected; keeping the last good snapshot");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_proxy_listens_on_loopback_unless_told_otherwise() {
        assert!(super::DEFAULT_HTTP_ADDR.ip().is_loopback());
        assert_eq!(super::DEFAULT_HTTP_ADDR.port(), 8080);
    }
}
