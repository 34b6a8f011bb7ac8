//! `switchyard-data-plane`: parse flags, log JSON (and export traces when
//! `OTEL_EXPORTER_OTLP_ENDPOINT` is set), run; a bad configuration exits non-zero with a
//! one-line reason. All of it is [`switchyard_data_plane::main_with`]; this file only adds the
//! allocator.

/// jemalloc with its background purging thread hands memory freed after a burst (e.g. thousands
/// of hostile connections closing) back to the system; glibc's malloc kept it (BENCHMARKS.md).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> std::process::ExitCode {
    switchyard_data_plane::main_with(std::env::args_os())
}
