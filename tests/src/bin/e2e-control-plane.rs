//! The control plane exactly as `switchyard-control-plane` runs it (same flags, same validation,
//! same `server::run`, same JSON logs, SIGTERM → graceful shutdown), built in this crate so its
//! tests can start real control-plane processes via `CARGO_BIN_EXE_e2e-control-plane`.

use std::process::ExitCode;

use clap::Parser;
use switchyard_control_plane::config::Config;
use tokio_util::sync::CancellationToken;

fn main() -> ExitCode {
    let config = match Config::try_parse() {
        Ok(config) => config,
        Err(error) if !error.use_stderr() => {
            let _ = error.print();
            return ExitCode::SUCCESS;
        }
        Err(error) => {
            let rendered = error.render().to_string();
            let first = rendered.lines().next().unwrap_or_default();
            eprintln!("e2e-control-plane: bad configuration: {first}");
            return ExitCode::from(2);
        }
    };
    if let Err(reason) = config.validate() {
        eprintln!("e2e-control-plane: bad configuration: {reason}");
        return ExitCode::from(2);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("e2e-control-plane: cannot start the runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    // The same logging as the shipped binary (flat JSON lines), initialised inside the runtime.
    let mut telemetry = {
        let _entered = runtime.enter();
        switchyard_control_plane::telemetry::init()
    };
    let code = runtime.block_on(async move {
        let shutdown = CancellationToken::new();
        tokio::spawn(signal_shutdown(shutdown.clone()));
        match switchyard_control_plane::server::run(config, shutdown).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                tracing::error!(error = format!("{error:#}"), "control plane stopped");
                eprintln!("e2e-control-plane: {error:#}");
                ExitCode::FAILURE
            }
        }
    });
    telemetry.shutdown();
    code
}

/// SIGTERM or Ctrl-C start a graceful shutdown, as in the real binary.
async fn signal_shutdown(shutdown: CancellationToken) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
    shutdown.cancel();
}
