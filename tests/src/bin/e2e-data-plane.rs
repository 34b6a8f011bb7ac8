//! The data plane exactly as `switchyard-data-plane` runs it (same flags, same `run`), built in
//! this crate so its tests can start real proxy processes via `CARGO_BIN_EXE_e2e-data-plane`.

use clap::Parser;
use switchyard_data_plane::cli::Cli;
use tracing_subscriber::EnvFilter;

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .json()
        .flatten_event(true)
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .with_writer(std::io::stdout)
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("e2e-data-plane: cannot start the runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(switchyard_data_plane::run::run(cli)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "exiting");
            eprintln!("e2e-data-plane: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
