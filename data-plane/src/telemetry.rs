//! Logging and optional OpenTelemetry trace export, through the shared
//! `switchyard-telemetry` crate.

pub use switchyard_telemetry::{enabled, Telemetry};

/// The service name when `OTEL_SERVICE_NAME` is unset.
pub const DEFAULT_SERVICE_NAME: &str = "switchyard-data-plane";

/// Installs the global subscriber; see [`switchyard_telemetry::init`].
pub fn init() -> Telemetry {
    switchyard_telemetry::init(switchyard_telemetry::Options {
        service_name: DEFAULT_SERVICE_NAME,
    })
}
