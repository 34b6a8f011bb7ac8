//! The control plane exactly as `switchyard-control-plane` runs it: the same
//! [`switchyard_control_plane::main_with`] (flags, validation, runtime, JSON logs, SIGTERM →
//! graceful shutdown, `server::run`), built in this crate so its tests can start real
//! control-plane processes via `CARGO_BIN_EXE_e2e-control-plane`. Only the global allocator
//! differs (the system's).

fn main() -> std::process::ExitCode {
    switchyard_control_plane::main_with(std::env::args_os())
}
