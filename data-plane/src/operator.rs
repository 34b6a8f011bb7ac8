//! The operator's endpoints: liveness (`/healthz`), readiness (`/readyz`, off while draining)
//! and `/metrics` (optionally behind a bearer credential), with the gauges read at scrape time.
//! The client-facing endpoints are the edge's ([`crate::server`]).

use std::sync::{Arc, Weak};

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use http::{header, HeaderMap, StatusCode};
use switchyard_engine::{ChannelId, ScopeKind, Snapshot};
use switchyard_metrics::{Collect, Type, Writer};
use switchyard_provider::Protocol;
use switchyard_state::{unix_ms, StateDump};

use crate::state::AppState;

/// The operator's routes, for the edge's router.
pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
}

async fn readyz(State(state): State<Arc<AppState>>) -> Response {
    if state.draining.is_cancelled() {
        return (StatusCode::SERVICE_UNAVAILABLE, "draining").into_response();
    }
    match state.views.load().as_ref() {
        Some(view) if !view.secrets_withheld.is_empty() => format!(
            "ready (revision {}); warning: channels sent without their secrets, never selected (`secrets_withheld`: the control plane has no fleet token; set SWITCHYARD_FLEET_TOKEN on it and on the proxies): {}",
            view.snapshot.revision,
            view.secrets_withheld.join(", ")
        )
        .into_response(),
        Some(view) => format!("ready (revision {})", view.snapshot.revision).into_response(),
        None => (StatusCode::SERVICE_UNAVAILABLE, "no snapshot yet").into_response(),
    }
}

async fn metrics(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    if let Some(credential) = state.metrics_credential.get() {
        if !presents(&headers, credential) {
            let body = switchyard_provider::gateway_error_body(
                Protocol::OpenAi,
                401,
                "invalid_request_error",
                "invalid_metrics_credential",
                "/metrics needs `Authorization: Bearer <SWITCHYARD_METRICS_TOKEN>`.",
            );
            let headers = [
                (header::CONTENT_TYPE, "application/json"),
                (header::WWW_AUTHENTICATE, "Bearer realm=\"metrics\""),
            ];
            return (StatusCode::UNAUTHORIZED, headers, body).into_response();
        }
    }
    let page = state.collectors.render();
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], page).into_response()
}

/// Whether `headers` carry `Authorization: Bearer <credential>` (compared in constant time).
fn presents(headers: &HeaderMap, credential: &str) -> bool {
    let Some(given) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "))
    else {
        return false;
    };
    let expected = credential.as_bytes();
    given.len() == expected.len()
        && given
            .iter()
            .zip(expected)
            .fold(0u8, |diff, (a, b)| diff | (a ^ b))
            == 0
}

/// The gauges read at scrape time, over the state (held weakly: the state holds its collectors).
pub struct LiveGauges(pub Weak<AppState>);

impl Collect for LiveGauges {
    fn collect(&self, w: &mut Writer<'_>) {
        if let Some(state) = self.0.upgrade() {
            render_live_gauges(&state, w);
        }
    }
}

/// Gauges read at scrape time: the snapshot in use and how old it is, and per channel of it
/// the fleet-wide in-flight count and whether its breaker is open.
fn render_live_gauges(state: &AppState, w: &mut Writer<'_>) {
    w.gauge(
        "switchyard_shadow_pending",
        "Shadow copies queued or being sent, not yet compared.",
        state.shadows.pending(),
    );
    // In Redis: the fleet's totals as this proxy's last write learnt them.
    let cache = state.cache().usage();
    w.gauge(
        "switchyard_cache_entries",
        "Answers the response cache holds.",
        cache.entries,
    )
    .gauge(
        "switchyard_cache_bytes",
        "Bytes the response cache holds (within SWITCHYARD_CACHE_MAX_BYTES).",
        cache.bytes,
    )
    .counter(
        "switchyard_cache_writes_dropped_total",
        "Answers the response cache let go unstored: its write queue full, or Redis unreachable.",
        state.cache().writes_dropped(),
    )
    .gauge(
        "switchyard_semantic_vectors",
        "Prompt vectors in this proxy's semantic cache indexes (every rule's).",
        state.semantic.sizes().iter().map(|(_, n)| n).sum::<usize>(),
    );
    let Some(view) = state.views.load_full() else {
        return;
    };
    let now = unix_ms();
    w.gauge(
        "switchyard_snapshot_revision",
        "Revision of the snapshot in use.",
        view.snapshot.revision,
    )
    .gauge(
        "switchyard_snapshot_age_seconds",
        "Seconds since this proxy installed the snapshot in use.",
        now.saturating_sub(view.installed_at_ms) as f64 / 1000.0,
    );
    let dump = state.store.dump(now);
    render_channel_gauges(w, &view.snapshot, &dump, now);
    // What this proxy's view holds of the shared state: the fleet's when it shares through Redis.
    let cooling = dump.cooldowns.iter().filter(|c| c.until > now).count();
    w.gauge(
        "switchyard_members_cooling",
        "Members in cooldown, as this proxy sees them.",
        cooling,
    )
    .gauge(
        "switchyard_sticky_bindings",
        "Sticky session bindings this proxy knows.",
        dump.sticky_bindings,
    );
    render_limit_gauges(state, &view.snapshot, now, w);
}

/// Per channel of the snapshot, as the store's dump has it: its fleet-wide in-flight count,
/// whether its breaker is open, and what is left of its slow-start window.
fn render_channel_gauges(w: &mut Writer<'_>, snapshot: &Snapshot, dump: &StateDump, now: u64) {
    let in_flight = |id| {
        dump.in_flight
            .iter()
            .find(|e| e.channel_id == id)
            .map_or(0, |e| e.in_flight)
    };
    let open = |id| {
        dump.channels
            .iter()
            .any(|c| c.channel_id == id && c.breaker_open)
    };
    let recovering_ms = |id| {
        dump.recovering
            .iter()
            .find(|r| r.channel_id == id)
            .map_or(0, |r| r.until.saturating_sub(now))
    };
    // One gauge per channel of the snapshot.
    let mut per_channel = |name: &str, help: &str, value: &dyn Fn(ChannelId) -> f64| {
        w.header(name, Type::Gauge, help);
        for channel in snapshot.channels() {
            w.sample(name, &[("channel", &channel.name)], value(channel.id));
        }
    };
    per_channel(
        "switchyard_channel_in_flight",
        "Requests in flight per channel, fleet-wide.",
        &|id| f64::from(in_flight(id)),
    );
    per_channel(
        "switchyard_channel_breaker_open",
        "1 while the channel's breaker is open.",
        &|id| f64::from(u8::from(open(id))),
    );
    per_channel(
        "switchyard_channel_recovering_seconds",
        "Seconds left of the channel's slow-start window after a passed probe (0 when not recovering).",
        &|id| recovering_ms(id) as f64 / 1000.0,
    );
}

/// Room left under route and team limits (token-level detail stays out of labels); nothing,
/// not even the help lines, when there are none.
fn render_limit_gauges(state: &AppState, snapshot: &Snapshot, now: u64, w: &mut Writer<'_>) {
    let shared = snapshot
        .limits()
        .iter()
        .filter(|r| matches!(r.limit.key.scope, ScopeKind::Route | ScopeKind::Team));
    const REMAINING: &str = "switchyard_limit_remaining";
    let mut header = true;
    for rule in shared {
        let key = rule.limit.key;
        let name = match key.scope {
            ScopeKind::Route => snapshot
                .route(key.scope_id)
                .map(|r| r.model_pattern.as_str()),
            _ => snapshot.team(key.scope_id).map(|t| t.name.as_str()),
        };
        let Some(name) = name else { continue };
        if header {
            w.header(
                REMAINING,
                Type::Gauge,
                "Room left under each route and team limit, as this proxy sees it (spend in micro-USD).",
            );
            header = false;
        }
        let status = state.store.limit_status(&rule.limit, now);
        w.sample(
            REMAINING,
            &[
                ("scope", key.scope.as_str()),
                ("name", name),
                ("metric", key.metric.as_str()),
                ("window", key.window.as_str()),
            ],
            status.remaining,
        );
    }
}
