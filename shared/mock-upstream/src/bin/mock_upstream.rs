//! `switchyard-mock-upstream`: the mock upstream as a process, scripted over its HTTP control API
//! (`/__mock/rules`, `/__mock/hits`, `/__mock/requests`, `/__mock/reset`).

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use switchyard_mock_upstream::{MockOptions, MockUpstream};
use tracing_subscriber::EnvFilter;

#[derive(Debug, Parser)]
#[command(name = "switchyard-mock-upstream", version, about)]
struct Args {
    /// Address to listen on.
    #[arg(long, env = "MOCK_LISTEN", default_value = "127.0.0.1:9000")]
    listen: SocketAddr,
    /// How many recent requests to keep for `GET /__mock/requests` (counters stay exact).
    #[arg(long, env = "MOCK_RECORD_LIMIT", default_value_t = 1000)]
    record_limit: usize,
    /// Models listed by `GET /v1/models` (comma-separated).
    #[arg(long, env = "MOCK_MODELS", value_delimiter = ',')]
    models: Vec<String>,
    /// How long in-flight responses may take to finish after SIGTERM / ctrl-c.
    #[arg(long, env = "MOCK_GRACE_MS", default_value_t = 5000)]
    grace_ms: u64,
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .json()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .init();
    let args = Args::parse();
    let mut options = MockOptions {
        listen: args.listen,
        record_limit: args.record_limit,
        ..MockOptions::default()
    };
    if !args.models.is_empty() {
        options.models = args.models;
    }
    let mock = match MockUpstream::start_with(options).await {
        Ok(mock) => mock,
        Err(error) => {
            tracing::error!(%error, "mock upstream failed to start");
            eprintln!("switchyard-mock-upstream: {error}");
            return ExitCode::FAILURE;
        }
    };
    tracing::info!(addr = %mock.addr(), "mock upstream listening");
    shutdown_signal().await;
    tracing::info!("mock upstream shutting down");
    mock.shutdown(Duration::from_millis(args.grace_ms)).await;
    ExitCode::SUCCESS
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = ctrl_c => {}
                    _ = term.recv() => {}
                }
            }
            Err(error) => {
                tracing::warn!(%error, "cannot listen for SIGTERM; ctrl-c only");
                let _ = ctrl_c.await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}
