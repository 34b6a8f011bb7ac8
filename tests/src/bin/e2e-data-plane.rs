//! The data plane exactly as `switchyard-data-plane` runs it: the same
//! [`switchyard_data_plane::main_with`] (flags, runtime, telemetry — JSON logs and the request
//! record lines — and `run`), built in this crate so its tests can start real proxy processes
//! via `CARGO_BIN_EXE_e2e-data-plane`. Only the global allocator differs (the system's).

fn main() -> std::process::ExitCode {
    switchyard_data_plane::main_with(std::env::args_os())
}
