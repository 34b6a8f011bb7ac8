//! The data plane exactly as `switchyard-data-plane` runs it (same flags, same `run`, same
//! telemetry: JSON logs and the request record lines), built in this crate so its tests can start
//! real proxy processes via `CARGO_BIN_EXE_e2e-data-plane`.

use clap::Parser;
use switchyard_data_plane::cli::Cli;

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
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
    // As in data-plane/src/main.rs: inside the runtime (the OTLP exporter spawns there), and
    // through the data plane's own init, which also installs the writer of the request records.
    let mut telemetry = {
        let _entered = runtime.enter();
        switchyard_data_plane::telemetry::init()
    };
    let result = runtime.block_on(switchyard_data_plane::run::run(cli));
    telemetry.shutdown();
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "exiting");
            eprintln!("e2e-data-plane: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
