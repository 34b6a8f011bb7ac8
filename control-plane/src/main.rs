//! `switchyard-control-plane`: its flags and environment are in
//! docs/src/reference/control-plane-api.md. All of it is [`switchyard_control_plane::main_with`];
//! this file only adds the allocator.

/// jemalloc with background purging returns memory after bursts of connections (see the data
/// plane's `main.rs` and BENCHMARKS.md).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> std::process::ExitCode {
    switchyard_control_plane::main_with(std::env::args_os())
}
