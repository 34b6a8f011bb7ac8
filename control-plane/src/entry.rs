//! The control plane's process entry, shared by the shipped `switchyard-control-plane` binary and
//! the e2e test binary: flags and validation, the runtime, logging, SIGTERM → graceful shutdown,
//! [`crate::server::run`]. `switchyard-control-plane config ...` runs [`crate::cli`] instead.

use std::ffi::OsString;
use std::process::ExitCode;

use clap::Parser;
use tokio_util::sync::CancellationToken;

use crate::config::Config;

/// The whole process as `switchyard-control-plane` runs it, with `args` as its command line
/// (the first is the program name). A bad configuration exits 2 with a one-line reason.
pub fn main_with<I, T>(args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    // `switchyard-control-plane config ...`: configuration as code, not the server.
    if args.get(1).is_some_and(|a| a == "config") {
        return crate::cli::run(args.into_iter().skip(1).collect());
    }
    let config = match Config::try_parse_from(args) {
        Ok(config) => config,
        Err(error) if !error.use_stderr() => {
            // --help and --version.
            let _ = error.print();
            return ExitCode::SUCCESS;
        }
        Err(error) => {
            eprintln!(
                "switchyard-control-plane: bad configuration: {}",
                one_line(&error.render().to_string())
            );
            return ExitCode::from(2);
        }
    };
    if let Err(reason) = config.validate() {
        eprintln!("switchyard-control-plane: bad configuration: {reason}");
        return ExitCode::from(2);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("switchyard-control-plane: cannot start the runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    // JSON logs, plus OTLP trace export when OTEL_EXPORTER_OTLP_ENDPOINT is set; inside the
    // runtime because the exporter's gRPC channel spawns its worker there.
    let mut telemetry = {
        let _entered = runtime.enter();
        crate::telemetry::init()
    };
    let code = runtime.block_on(async move {
        let shutdown = CancellationToken::new();
        tokio::spawn(signal_shutdown(shutdown.clone()));
        match crate::server::run(config, shutdown).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                tracing::error!(error = format!("{error:#}"), "control plane stopped");
                eprintln!("switchyard-control-plane: {error:#}");
                ExitCode::FAILURE
            }
        }
    });
    // The runtime's workers still drive the exporter's channel while the last spans are sent.
    telemetry.shutdown();
    code
}

/// Clap's multi-line message, as one line (operators grep logs line by line).
fn one_line(message: &str) -> String {
    message
        .lines()
        .map(str::trim)
        .filter(|l| {
            !l.is_empty() && !l.starts_with("Usage:") && !l.starts_with("For more information")
        })
        .map(|l| l.trim_start_matches("error: "))
        .collect::<Vec<_>>()
        .join(" ")
}

/// SIGTERM (Kubernetes) or Ctrl-C start a graceful shutdown.
async fn signal_shutdown(shutdown: CancellationToken) {
    switchyard_server::termination_signal().await;
    shutdown.cancel();
}
