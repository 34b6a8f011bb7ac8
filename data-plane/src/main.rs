//! `switchyard-data-plane`: parse flags, log JSON (and export traces when
//! `OTEL_EXPORTER_OTLP_ENDPOINT` is set), run; a bad configuration exits non-zero with a
//! one-line reason.

use clap::Parser;
use switchyard_data_plane::cli::Cli;

/// jemalloc with its background purging thread hands memory freed after a burst (e.g. thousands
/// of hostile connections closing) back to the system; glibc's malloc kept it (BENCHMARKS.md).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
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
        switchyard_data_plane::telemetry::init()
    };
    let result = runtime.block_on(switchyard_data_plane::run::run(cli));
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
