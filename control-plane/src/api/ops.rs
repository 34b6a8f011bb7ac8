//! Health, readiness, metrics, the shared-state view and the audit log.

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use switchyard_engine::{Recovering, Settings};
use switchyard_state::unix_ms;
use utoipa::{IntoParams, ToSchema};

use super::access::Caller;
use super::extract::Query;
use super::reply::{Page, PageQuery};
use crate::db::ts;
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::state::AppState;

/// Liveness: the process answers.
pub async fn healthz() -> impl IntoResponse {
    Json(json!({ "status": "ok" }))
}

/// Readiness: a snapshot has been compiled, so proxies can be served. Postgres being down does
/// not make the replica unready (streams keep the last snapshot); it is reported in the body.
pub async fn readyz(State(state): State<AppState>) -> impl IntoResponse {
    let revision = state.publisher.current_revision();
    let database = if state.metrics.database_up() {
        "up"
    } else {
        "down"
    };
    let draining = state.draining.is_cancelled();
    let body = json!({ "revision": revision, "database": database, "draining": draining });
    if revision > 0 && !draining {
        (StatusCode::OK, Json(body))
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, Json(body))
    }
}

pub async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    let page = state.collectors.render();
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        page,
    )
}

#[utoipa::path(get, path = "/api/v1/state", tag = "state", operation_id = "get_shared_state",
    responses((status = 200, description = "the live shared state of the fleet (REDIS_URL): \
                                            cooldowns, member failure streaks, breakers, \
                                            in-flight counts, health records, runtime-disabled \
                                            credentials, canaries, recovering channels with \
                                            their ramp factor and seconds left, sticky binding \
                                            count, and each live proxy's own sync figures \
                                            (`fleet_sync`: propagation lag, last sync, resyncs, \
                                            Redis errors). Never a secret. `configured: false` \
                                            without REDIS_URL",
                                            body = super::schema::SharedStateResponse),
              (status = 401, body = ErrorBody)))]
pub async fn shared_state(State(state): State<AppState>) -> ApiResult<Json<Value>> {
    let Some(live) = &state.live else {
        return Ok(Json(json!({
            "configured": false,
            "message": "no shared state configured: set REDIS_URL (and SWITCHYARD_REDIS_PREFIX, \
                        as on the proxies) to see cooldowns, breakers, in-flight counts and \
                        health records",
            "cooldowns": [],
            "breakers": [],
            "in_flight": [],
            "health": [],
            "proxies": state.proxies.list(),
        })));
    };
    let now_ms = unix_ms();
    let dump = live.store().dump(now_ms);
    let breakers: Vec<_> = dump.channels.iter().filter(|c| c.breaker_open).collect();
    let mut body = serde_json::to_value(&dump)
        .map_err(|e| ApiError::Internal(anyhow::anyhow!("serialising the state dump: {e}")))?;
    // A recovering channel's ramp follows the settings in force (the published snapshot's).
    let initial_percent = state
        .publisher
        .current()
        .map_or(Settings::default().slow_start_initial_percent, |p| {
            p.snapshot.settings.slow_start_initial_percent
        });
    let recovering: Vec<Value> = dump
        .recovering
        .iter()
        .map(|r| {
            let window = Recovering {
                since: r.since,
                until: r.until,
            };
            json!({
                "channel_id": r.channel_id,
                "since": r.since,
                "until": r.until,
                "ramp_factor": window.ramp_factor(now_ms, initial_percent),
                "seconds_left": window.seconds_left(now_ms),
            })
        })
        .collect();
    if let Value::Object(map) = &mut body {
        map.insert("recovering".into(), json!(recovering));
        map.insert("configured".into(), json!(true));
        map.insert("source".into(), json!(live.source()));
        map.insert("connected".into(), json!(live.connected()));
        map.insert("now_ms".into(), json!(now_ms));
        map.insert("breakers".into(), json!(breakers));
        map.insert("proxies".into(), json!(state.proxies.list()));
        map.insert("fleet_sync".into(), json!(live.fleet_sync()));
    }
    Ok(Json(body))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct AuditQuery {
    pub limit: Option<i64>,
    pub cursor: Option<String>,
    /// Only this kind of resource (`channel`, `credential`, `route`, `member`, `token`, `team`,
    /// `price`, `limit`, `shadow`, `settings`).
    pub resource: Option<String>,
    pub resource_id: Option<i64>,
}

#[derive(Debug, Serialize, sqlx::FromRow, ToSchema)]
pub struct AuditEntry {
    pub id: i64,
    #[schema(format = DateTime)]
    pub at: String,
    pub actor: String,
    /// The team of the admin who made the write, when it administers one team only; `null`: a
    /// fleet admin, or the control plane itself.
    pub actor_team_id: Option<i64>,
    pub action: String,
    pub resource: String,
    pub resource_id: Option<i64>,
    /// The snapshot revision this write produced.
    pub revision: i64,
    /// What the write changed: the written fields of the resource (never a secret); its keys
    /// depend on `resource` and `action`.
    #[schema(value_type = Object)]
    pub detail: Value,
}

#[utoipa::path(get, path = "/api/v1/audit", tag = "audit", operation_id = "list_audit_entries", params(AuditQuery),
    responses((status = 200, description = "admin writes, oldest first (for an admin limited to \
                                            one team: the writes of that team's admins)",
               body = Page<AuditEntry>),
              (status = 401, body = ErrorBody)))]
pub async fn audit(
    State(state): State<AppState>,
    caller: Caller,
    Query(query): Query<AuditQuery>,
) -> ApiResult<Json<Page<AuditEntry>>> {
    let (fetch_n, after) = PageQuery {
        limit: query.limit,
        cursor: query.cursor,
    }
    .bounds()?;
    if let Some(resource) = &query.resource {
        switchyard_engine::validate::check_single_line(resource).map_err(|message| {
            ApiError::bad_request(Some("resource"), format!("resource: {message}"))
        })?;
    }
    let sql = format!(
        "SELECT id, {} AS at, actor, actor_team_id, action, resource, resource_id, revision, \
         detail FROM audit_log WHERE id > $1 AND ($2::text IS NULL OR resource = $2) \
         AND ($3::bigint IS NULL OR resource_id = $3) \
         AND ($5::bigint IS NULL OR actor_team_id = $5) ORDER BY id LIMIT $4",
        ts("at")
    );
    let rows = sqlx::query_as::<_, AuditEntry>(&sql)
        .bind(after)
        .bind(query.resource)
        .bind(query.resource_id)
        .bind(fetch_n)
        .bind(caller.identity.team)
        .fetch_all(&state.pool)
        .await
        .map_err(ApiError::from)?;
    let rows = rows.into_iter().map(redact_entry).collect();
    Ok(Json(Page::from_rows(rows, fetch_n, |e| e.id)))
}

/// Rows written before `base_url` passwords were masked in audit details are masked on read.
fn redact_entry(mut entry: AuditEntry) -> AuditEntry {
    if let Some(Value::String(url)) = entry.detail.get_mut("base_url") {
        *url = switchyard_engine::validate::redact_url_userinfo(url);
    }
    entry
}
