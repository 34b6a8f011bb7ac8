//! Logging and optional OpenTelemetry trace export (the book: docs/src/guides/observability.md).
//!
//! The JSON log lines on stdout are always on. When `OTEL_EXPORTER_OTLP_ENDPOINT` or
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set, a `tracing-opentelemetry` layer also exports spans
//! over OTLP, gRPC or HTTP/protobuf as `OTEL_EXPORTER_OTLP_PROTOCOL` says ([`otlp`]; any other
//! value is refused, loudly); the exporter reads the SDK's standard variables itself
//! (`OTEL_EXPORTER_OTLP_TIMEOUT`, `_HEADERS`, `_COMPRESSION`, `OTEL_BSP_*`, …) and
//! `OTEL_SERVICE_NAME` names the service. Unset, nothing is built: no exporter, no
//! background thread, and callers skip creating their spans entirely ([`enabled`] is false).
//!
//! Both binaries call [`init`] with their own service name; this crate owns the subscriber's
//! shape so the two cannot drift apart.
//!
//! One flat log schema for both binaries: every line is one JSON object with `timestamp`,
//! `level`, `target`, `message` and the event's own fields at the top level (never nested under
//! `fields`), so one parser and one log pipeline read both planes.

pub mod batch;
pub mod context;
pub mod json;
pub mod otlp;
pub mod record;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::Resource;
use tracing_subscriber::filter::{filter_fn, EnvFilter};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::Layer;

static ENABLED: AtomicBool = AtomicBool::new(false);

/// Whether spans are exported; callers create their spans only then.
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// What differs between the binaries.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// The service name when `OTEL_SERVICE_NAME` is unset, and the tracer's name.
    pub service_name: &'static str,
}

/// Whether the environment asks for OTLP trace export.
pub fn requested() -> bool {
    let set = |name: &str| std::env::var(name).is_ok_and(|v| !v.trim().is_empty());
    let disabled = std::env::var("OTEL_SDK_DISABLED").is_ok_and(|v| v.trim() == "true");
    !disabled && (set("OTEL_EXPORTER_OTLP_ENDPOINT") || set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
}

/// Flushes and stops the exporter when dropped (or through [`Telemetry::shutdown`]), and
/// flushes the log writer when dropped.
#[must_use = "dropping it stops the trace exporter and the log writer"]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
    /// The log writer: lines are written in batches by a background thread so a request never
    /// waits on stdout; dropping the guard writes what is still pending.
    _log_writer: batch::Guard,
}

impl Telemetry {
    /// Exports the spans still buffered and stops the exporter (bounded wait). Logging keeps
    /// working until the value is dropped.
    pub fn shutdown(&mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        if let Some(provider) = self.provider.take() {
            ENABLED.store(false, Ordering::Relaxed);
            if let Err(e) = provider.shutdown_with_timeout(Duration::from_secs(5)) {
                tracing::warn!(error = %e, "trace exporter shutdown");
            }
        }
    }
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `RUST_LOG` (default `info`), with AWS's SigV4 signer always silent: at `trace` it logs the
/// canonical request, which carries a Bedrock credential's session token.
fn env_filter() -> EnvFilter {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    match "aws_sigv4=off".parse() {
        Ok(silent) => filter.add_directive(silent),
        Err(_) => filter,
    }
}

/// Builds the OTLP tracer provider ([`otlp::exporter`]). Must run inside a tokio runtime (the
/// gRPC channel's worker and the HTTP requests run on it); batches are made on the SDK's thread.
pub fn provider(default_service_name: &str) -> Result<SdkTracerProvider, String> {
    let exporter = otlp::exporter()?;
    let service_name = std::env::var("OTEL_SERVICE_NAME")
        .ok()
        .filter(|v| !v.trim().is_empty())
        .unwrap_or_else(|| default_service_name.to_owned());
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(Resource::builder().with_service_name(service_name).build())
        .build())
}

/// The one log line format of both binaries: a flat JSON object per event (`timestamp`, `level`,
/// `target`, `message` and the event's fields at the top level), without span context.
pub fn json_lines<S, W>(writer: W) -> impl Layer<S> + Send + Sync + 'static
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    W: for<'w> tracing_subscriber::fmt::MakeWriter<'w> + Send + Sync + 'static,
{
    tracing_subscriber::fmt::layer()
        .json()
        .flatten_event(true)
        .with_current_span(false)
        .with_span_list(false)
        .with_writer(writer)
}

/// Installs the global subscriber: JSON lines on stdout (`RUST_LOG`, default `info`) and, when
/// [`requested`], the OTLP layer (this crate's spans and the events inside them). Call it inside
/// the tokio runtime; keep the returned guard until the runtime's work is done.
pub fn init(options: Options) -> Telemetry {
    // Never drop a line: when the buffer is full, the logging call waits instead.
    let (writer, log_writer) = batch::start(std::io::stdout(), "switchyard-log");
    record::set_writer(writer.clone());
    let fmt = json_lines(writer).with_filter(env_filter());
    if !requested() {
        tracing_subscriber::registry().with(fmt).init();
        return Telemetry {
            provider: None,
            _log_writer: log_writer,
        };
    }
    match provider(options.service_name) {
        Ok(provider) => {
            let tracer = provider.tracer(options.service_name);
            // Spans carry what the GenAI and HTTP conventions name, and the gateway's own
            // fields: not the layer's bookkeeping (busy/idle time, thread, source location,
            // target), which no trace backend groups or alerts on.
            let otel = tracing_opentelemetry::layer()
                .with_tracer(tracer)
                .with_tracked_inactivity(false)
                .with_threads(false)
                .with_location(false)
                .with_target(false)
                .with_filter(
                    filter_fn(|meta| {
                        meta.target().starts_with("switchyard")
                            && *meta.level() <= tracing::Level::INFO
                    })
                    .with_max_level_hint(tracing::Level::INFO),
                );
            tracing_subscriber::registry().with(fmt).with(otel).init();
            ENABLED.store(true, Ordering::Relaxed);
            tracing::info!("exporting traces over OTLP");
            Telemetry {
                provider: Some(provider),
                _log_writer: log_writer,
            }
        }
        Err(e) => {
            tracing_subscriber::registry().with(fmt).init();
            // Asked for and not possible: said at error level, once, at startup.
            tracing::error!(error = %e, "trace export disabled");
            Telemetry {
                provider: None,
                _log_writer: log_writer,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    use tracing_subscriber::layer::SubscriberExt;

    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl Write for Buffer {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Buffer {
        type Writer = Buffer;
        fn make_writer(&'a self) -> Buffer {
            self.clone()
        }
    }

    #[test]
    fn log_lines_are_flat_json_with_the_same_top_level_keys() {
        let buffer = Buffer::default();
        let subscriber = tracing_subscriber::registry().with(super::json_lines(buffer.clone()));
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::info_span!("request", request_id = "r1");
            let _entered = span.enter();
            tracing::info!(http_addr = "127.0.0.1:1", count = 3, "listening");
        });
        let text = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
        let line: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
        assert!(line.get("fields").is_none(), "no nesting: {line}");
        assert!(
            line.get("span").is_none() && line.get("spans").is_none(),
            "{line}"
        );
        assert_eq!(line["message"], "listening");
        assert_eq!(line["http_addr"], "127.0.0.1:1");
        assert_eq!(line["count"], 3);
        assert_eq!(line["level"], "INFO");
        assert!(line["timestamp"].is_string());
        assert!(line["target"].is_string());
    }
}
