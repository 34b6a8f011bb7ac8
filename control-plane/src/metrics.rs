//! The control plane's Prometheus metrics: plain atomics and one labelled family, written
//! through `switchyard-metrics`.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{MatchedPath, Request, State};
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use switchyard_metrics::{Collect, Family, Type, Writer};
use tracing::field::Empty;
use tracing::{Instrument, Span};

#[derive(Debug)]
pub struct Metrics {
    /// By method, matched route and status. Every label comes from a fixed set (see
    /// [`method_label`], [`route_label`]), so unauthenticated clients cannot grow this family.
    requests: Family<3>,
    snapshot_revision: AtomicU64,
    compiles: AtomicU64,
    compile_failures: AtomicU64,
    last_compile_micros: AtomicU64,
    watch_streams: AtomicI64,
    grpc_handshake_timeouts: AtomicU64,
    database_up: AtomicBool,
    usage_applied: AtomicU64,
    usage_duplicate: AtomicU64,
    usage_invalid: AtomicU64,
    usage_failed: AtomicU64,
    usage_records: AtomicU64,
    usage_dropped: AtomicU64,
    usage_refused_figures: AtomicU64,
    request_log_rows: AtomicU64,
    request_log_refused: AtomicU64,
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics {
            requests: Family::new(
                "switchyard_cp_http_requests_total",
                "Admin API requests by method, route and status.",
                ["method", "route", "status"],
            ),
            snapshot_revision: AtomicU64::default(),
            compiles: AtomicU64::default(),
            compile_failures: AtomicU64::default(),
            last_compile_micros: AtomicU64::default(),
            watch_streams: AtomicI64::default(),
            grpc_handshake_timeouts: AtomicU64::default(),
            database_up: AtomicBool::default(),
            usage_applied: AtomicU64::default(),
            usage_duplicate: AtomicU64::default(),
            usage_invalid: AtomicU64::default(),
            usage_failed: AtomicU64::default(),
            usage_records: AtomicU64::default(),
            usage_dropped: AtomicU64::default(),
            usage_refused_figures: AtomicU64::default(),
            request_log_rows: AtomicU64::default(),
            request_log_refused: AtomicU64::default(),
        }
    }
}

/// The actor the access log records for a response, set by authentication on every answer it
/// let through (here, below the API, so the access log does not depend on it).
#[derive(Debug, Clone)]
pub struct LoggedActor(pub String);

/// Adds `n` to a counter fed by figures a proxy reports, saturating instead of wrapping.
fn add_saturating(counter: &AtomicU64, n: u64) {
    let _ = counter.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
        Some(v.saturating_add(n))
    });
}

impl Metrics {
    pub fn compiled(&self, revision: u64, took: Duration) {
        self.snapshot_revision
            .fetch_max(revision, Ordering::Relaxed);
        self.compiles.fetch_add(1, Ordering::Relaxed);
        self.last_compile_micros.store(
            u64::try_from(took.as_micros()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
    }

    pub fn compile_failed(&self) {
        self.compile_failures.fetch_add(1, Ordering::Relaxed);
    }

    pub fn set_database_up(&self, up: bool) {
        self.database_up.store(up, Ordering::Relaxed);
    }

    pub fn database_up(&self) -> bool {
        self.database_up.load(Ordering::Relaxed)
    }

    /// A gRPC connection was closed for carrying no authenticated request in time.
    pub fn grpc_handshake_timed_out(&self) {
        self.grpc_handshake_timeouts.fetch_add(1, Ordering::Relaxed);
    }

    pub fn stream_opened(&self) {
        self.watch_streams.fetch_add(1, Ordering::Relaxed);
    }

    pub fn stream_closed(&self) {
        self.watch_streams.fetch_sub(1, Ordering::Relaxed);
    }

    /// A `ReportUsage` batch was stored (or recognised as already stored).
    pub fn usage_applied(&self, applied: &crate::usage::Applied, dropped_requests: u64) {
        if applied.duplicate {
            self.usage_duplicate.fetch_add(1, Ordering::Relaxed);
        } else {
            self.usage_applied.fetch_add(1, Ordering::Relaxed);
            self.usage_records
                .fetch_add(applied.records as u64, Ordering::Relaxed);
            add_saturating(&self.usage_dropped, dropped_requests);
            add_saturating(&self.usage_refused_figures, applied.refused_figures as u64);
            add_saturating(&self.request_log_rows, applied.log_rows);
            add_saturating(&self.request_log_refused, applied.log_rows_refused as u64);
        }
    }

    /// A `ReportUsage` batch was refused (`invalid`) or could not be stored.
    pub fn usage_failed(&self, invalid: bool) {
        let counter = if invalid {
            &self.usage_invalid
        } else {
            &self.usage_failed
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    fn request(&self, method: &'static str, route: &str, status: StatusCode) {
        self.requests.add([method, route, status.as_str()], 1);
    }

    /// These families alone, as `/metrics` shows them.
    pub fn render(&self) -> String {
        switchyard_metrics::render(self)
    }
}

/// The control plane's own counters: the first collector of its `/metrics`.
impl Collect for Metrics {
    fn collect(&self, w: &mut Writer<'_>) {
        self.requests.render(w);
        crate::notify::event::NOTIFICATIONS.render(w);
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        w.gauge(
            "switchyard_cp_snapshot_revision",
            "Revision of the latest published snapshot.",
            load(&self.snapshot_revision),
        )
        .counter(
            "switchyard_cp_snapshot_compiles_total",
            "Snapshot compilations.",
            load(&self.compiles),
        )
        .counter(
            "switchyard_cp_snapshot_compile_failures_total",
            "Failed snapshot compilations.",
            load(&self.compile_failures),
        )
        .gauge(
            "switchyard_cp_snapshot_compile_seconds",
            "Duration of the last snapshot compilation.",
            format_args!("{:.6}", load(&self.last_compile_micros) as f64 / 1e6),
        )
        .gauge(
            "switchyard_cp_watch_streams",
            "Open gRPC snapshot watch streams.",
            self.watch_streams.load(Ordering::Relaxed),
        )
        .counter(
            "switchyard_cp_grpc_handshake_timeouts_total",
            "gRPC connections closed for carrying no authenticated request within the handshake deadline.",
            load(&self.grpc_handshake_timeouts),
        )
        .gauge(
            "switchyard_cp_database_up",
            "1 when the snapshot listener is connected to Postgres.",
            u8::from(self.database_up()),
        );
        const BATCHES: &str = "switchyard_cp_usage_batches_total";
        w.header(
            BATCHES,
            Type::Counter,
            "Usage batches reported by proxies, by outcome.",
        );
        for (outcome, counter) in [
            ("applied", &self.usage_applied),
            ("duplicate", &self.usage_duplicate),
            ("invalid", &self.usage_invalid),
            ("failed", &self.usage_failed),
        ] {
            w.sample(BATCHES, &[("outcome", outcome)], load(counter));
        }
        w.counter(
            "switchyard_cp_usage_records_total",
            "Usage rows added to by applied batches.",
            load(&self.usage_records),
        )
        .counter(
            "switchyard_cp_usage_dropped_requests_total",
            "Requests proxies left out of usage accounting (their buffer was full).",
            load(&self.usage_dropped),
        )
        .counter(
            "switchyard_cp_usage_refused_figures_total",
            "Figures of proxies' usage reports not taken because no request can have them.",
            load(&self.usage_refused_figures),
        )
        .counter(
            "switchyard_cp_request_log_rows_total",
            "Request-log rows stored from applied batches.",
            load(&self.request_log_rows),
        )
        .counter(
            "switchyard_cp_request_log_refused_rows_total",
            "Request-log rows left out (they cannot be stored, or their day has no partition).",
            load(&self.request_log_refused),
        );
    }
}

/// The method label: one of the standard methods, or `other` (a client may send any token as a
/// method, and each would otherwise be a new time series).
pub fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::HEAD => "HEAD",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        Method::OPTIONS => "OPTIONS",
        Method::CONNECT => "CONNECT",
        Method::TRACE => "TRACE",
        _ => "other",
    }
}

/// The route label: the matched route's template (`/api/v1/channels/{id}`, never an id), or
/// `unmatched` for every path no route has.
pub fn route_label(request: &Request) -> String {
    request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |p| p.as_str().to_owned())
}

/// Counts every HTTP request by bounded labels: method (fixed set), route template, status.
pub async fn track(State(metrics): State<Arc<Metrics>>, request: Request, next: Next) -> Response {
    let method = method_label(request.method());
    let route = route_label(&request);
    let span = request_span(method, &route);
    // One log line per admin request (the probes, the metrics scrape and the console's static
    // files are left out): who asked what and how it went, never the token or a body. The actor
    // is the admin token's name (with the optional `x-switchyard-actor` note), empty on a 401.
    let logged = access_logged(&route).then(|| {
        (
            crate::error::bounded(request.uri().path(), 256),
            std::time::Instant::now(),
        )
    });
    let response = next.run(request).instrument(span.clone()).await;
    let status = response.status().as_u16();
    if let Some((path, started)) = logged {
        // Who, as authentication established it (empty when it did not).
        let actor = response
            .extensions()
            .get::<LoggedActor>()
            .map(|actor| crate::error::bounded(&actor.0, 192));
        tracing::info!(
            method,
            route = %route,
            path = %path,
            status,
            latency_ms = started.elapsed().as_secs_f64() * 1000.0,
            actor = actor.as_deref().unwrap_or(""),
            "admin request"
        );
    }
    if !span.is_disabled() {
        // As i64: the OpenTelemetry layer exports unsigned integers as strings.
        span.record("http.response.status_code", i64::from(status));
        if status >= 500 {
            span.record("otel.status_code", "ERROR");
        }
    }
    metrics.request(method, &route, response.status());
    response
}

/// Whether a request to `route` (a matched template, or `unmatched`) gets an access log line:
/// the admin API, explain and unknown paths do; health, readiness, metrics and the console's
/// static files do not.
fn access_logged(route: &str) -> bool {
    route.starts_with("/api/") || route.starts_with("/console/routes/") || route == "unmatched"
}

/// One trace span per admin API request when traces are exported (OTLP): method, matched
/// route and status only (never the admin token or a body).
fn request_span(method: &str, route: &str) -> Span {
    if !crate::telemetry::enabled() {
        return Span::none();
    }
    tracing::info_span!(
        "request",
        otel.name = format!("{method} {route}"),
        otel.kind = "server",
        otel.status_code = Empty,
        http.request.method = method,
        http.route = route,
        http.response.status_code = Empty,
    )
}
