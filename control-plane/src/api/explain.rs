//! `GET /api/v1/routes/explain` (alias `/console/routes/explain`): runs the engine's own
//! [`switchyard_engine::select`] on the snapshot this replica serves and returns its decision.
//!
//! Side-effect free by construction: it reads only the in-memory snapshot and, when the fleet's
//! shared state is configured, the local view of it (a read lock over memory; no database
//! access, no audit row, no revision bump, no Redis write), uses a throwaway RNG, and sends
//! nothing upstream.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::extract::State;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use switchyard_engine::{select, HealthView, NoHealth, Outcome, SelectionConstraint, SplitMix64};
use utoipa::IntoParams;

use super::extract::Query;
use super::AppState;
use crate::error::{ApiError, ApiResult, ErrorBody};

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ExplainQuery {
    /// The model name as a client would send it.
    pub model: Option<String>,
    /// The requested group (as a token's `route_group_name` would set it); default `default`.
    pub route_group: Option<String>,
    /// A session key, to see what stickiness would do.
    pub session: Option<String>,
    /// Seed of the random draws, to reproduce a decision; random when absent.
    pub seed: Option<u64>,
}

pub(super) fn random_seed() -> u64 {
    let mut bytes = [0u8; 8];
    if getrandom::fill(&mut bytes).is_ok() {
        u64::from_le_bytes(bytes)
    } else {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0)
    }
}

#[utoipa::path(get, path = "/api/v1/routes/explain", tag = "explain", operation_id = "explain_route", params(ExplainQuery),
    responses(
        (status = 200, description = "the engine's decision with every candidate, its reasons, \
                                      factors, score and selection probability",
         body = super::schema::ExplainResponse),
        (status = 400, description = "`model` is missing", body = ErrorBody),
        (status = 404, description = "no enabled route matches the model", body = ErrorBody),
        (status = 503, description = "no snapshot compiled yet", body = ErrorBody)))]
pub async fn explain(
    State(state): State<AppState>,
    Query(query): Query<ExplainQuery>,
) -> ApiResult<Json<Value>> {
    let model = query
        .model
        .as_deref()
        .map(str::trim)
        .filter(|m| !m.is_empty())
        .ok_or_else(|| ApiError::bad_request(Some("model"), "model is required"))?;
    let published = state
        .publisher
        .current()
        .ok_or_else(|| ApiError::Unavailable {
            message:
                "no route snapshot compiled yet; the control plane is still connecting to Postgres"
                    .to_owned(),
        })?;
    let constraint = SelectionConstraint {
        route_group: query.route_group.clone(),
        session_key: query.session.clone().filter(|s| !s.is_empty()),
        ..SelectionConstraint::default()
    };
    let seed = query.seed.unwrap_or_else(random_seed);
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0);
    // Without a fleet token the proxies hold the snapshot without secrets; explain shows what
    // they select from, with `secrets_withheld` on the channels they cannot call.
    let snapshot = if state.proxies_without_secrets {
        published.without_secrets()
    } else {
        Arc::clone(&published.snapshot)
    };
    let mut rng = SplitMix64::new(seed);
    let (decision, health_view) = match &state.live {
        Some(live) => {
            let mut decision = None;
            live.store().with_view(&mut |view: &dyn HealthView| {
                decision = Some(select(
                    snapshot.as_ref(),
                    view,
                    &constraint,
                    model,
                    now_ms,
                    &mut rng,
                ));
            });
            let decision = decision.ok_or_else(|| {
                ApiError::Internal(anyhow::anyhow!("the state store never ran the selection"))
            })?;
            (decision, live.source())
        }
        None => (
            select(
                snapshot.as_ref(),
                &NoHealth,
                &constraint,
                model,
                now_ms,
                &mut rng,
            ),
            "none",
        ),
    };
    if decision.outcome == Outcome::ModelNotFound {
        return Err(ApiError::ModelNotFound {
            message: format!("no enabled route matches model {model:?}"),
        });
    }
    let mut body = serde_json::to_value(&decision)
        .map_err(|e| ApiError::Internal(anyhow::anyhow!("serialising the decision: {e}")))?;
    if let Value::Object(map) = &mut body {
        map.insert("revision".into(), json!(snapshot.revision));
        map.insert("seed".into(), json!(seed));
        map.insert("now_ms".into(), json!(now_ms));
        // "redis": the fleet's live state; "none": no REDIS_URL, so no cooldowns, breakers,
        // in-flight counts or health records are seen.
        map.insert("health_view".into(), json!(health_view));
    }
    Ok(Json(body))
}
