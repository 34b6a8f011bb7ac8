//! `POST /api/v1/dry-run`: what a proposed set of changes would move, without changing anything.
//!
//! How: one Postgres transaction (REPEATABLE READ, `lock_timeout` 5 s) compiles the "before"
//! snapshot, applies every change through the very handler code the REST API runs (each in its own
//! savepoint, so validation, foreign keys, cascades and conflicts are exactly those of a real
//! write), compiles the "after" snapshot from the same transaction, which sees its own changes,
//! and is then **rolled back**. The revision bump, the audit rows and the NOTIFY a write queues
//! live in that transaction and vanish with it: no proxy, replica or audit reader ever sees a
//! dry run. Nothing is written to the fleet's shared state either (the channel handler's breaker
//! reset is given no live state here). The one trace a dry run can leave is a gap in id sequences
//! (Postgres does not roll sequences back).
//!
//! Then both snapshots go through [`switchyard_engine::select`] — the engine the proxies and
//! explain run — with the same health view and seed, for every (model, group, team) either
//! snapshot knows, and only what differs is reported. Prices and limits do not move a selection
//! (upstream limits depend on live counters, which explain shows), so their changes are reported
//! as they are: every price and limit created, changed or deleted, directly or by a cascade.
//!
//! The parts: `request.rs` (the changes asked for), `apply.rs` (each change through its REST
//! handler's code, which applying a configuration file calls too), `compare.rs` (the selections
//! both snapshots make, and what differs) and `moves.rs` (tokens, prices and limits created,
//! changed or deleted).

mod apply;
mod compare;
mod moves;
mod request;

use axum::extract::State;
use axum::Json;
use serde::Serialize;
use switchyard_engine::{HealthView, NoHealth};
use switchyard_state::unix_ms;
use utoipa::ToSchema;

pub(crate) use self::apply::{apply, at_place};
use self::apply::{at_change, result_of};
pub(crate) use self::compare::{
    compare, AffectedSelection, ModelMove, NewlyFailing, UnreachableMember,
};
use self::moves::{limit_moves, price_moves, LimitMove, PriceMove, TokenMove};
pub(crate) use self::request::{ChangeOp, ProposedChange, ResourceKind};
use self::request::{ChangeResult, DryRunRequest, MAX_CHANGES};
use super::extract::JsonBody;
use super::rows::By;
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::state::AppState;

#[derive(Debug, Serialize, ToSchema)]
pub struct DryRunResponse {
    /// The revision the dry run started from; nothing was written, so it is still current.
    pub base_revision: u64,
    /// "redis" (the fleet's live health view) or "none".
    pub health_view: String,
    pub results: Vec<ChangeResult>,
    /// Every (model, group, team) whose selection would change, with each member's probability.
    pub affected: Vec<AffectedSelection>,
    /// Members that had a chance of selection somewhere before and have none after.
    pub unreachable_members: Vec<UnreachableMember>,
    /// Models that resolve before and not after.
    pub models_unresolved: Vec<ModelMove>,
    /// Models that would resolve to another route (or newly resolve).
    pub models_rerouted: Vec<ModelMove>,
    /// Requests that are served before and would fail after.
    pub newly_failing: Vec<NewlyFailing>,
    pub tokens: Vec<TokenMove>,
    /// Prices created, changed or deleted.
    pub prices: Vec<PriceMove>,
    /// Limits created, changed or deleted (deleting a scope deletes its limits).
    pub limits: Vec<LimitMove>,
    /// More than the comparison limit of selections exist; only the first were compared.
    pub truncated: bool,
}

#[utoipa::path(post, path = "/api/v1/dry-run", tag = "dry-run", operation_id = "dry_run",
    request_body = DryRunRequest,
    responses(
        (status = 200, description = "what the changes would move; nothing was changed",
         body = DryRunResponse),
        (status = 400, description = "the body is not a JSON object", body = ErrorBody),
        (status = 404, description = "a change names a resource that does not exist", body = ErrorBody),
        (status = 409, description = "a change could not be applied (e.g. a delete still referenced)",
         body = ErrorBody),
        (status = 422, description = "a change is invalid; `param` names `changes[i]…`",
         body = ErrorBody)))]
pub async fn dry_run(
    State(state): State<AppState>,
    JsonBody(request): JsonBody<DryRunRequest>,
) -> ApiResult<Json<DryRunResponse>> {
    if request.changes.len() > MAX_CHANGES {
        return Err(ApiError::validation(
            "changes",
            format!(
                "changes: at most {MAX_CHANGES} changes per dry run, got {}",
                request.changes.len()
            ),
        ));
    }
    let mut tx = state.pool.begin().await?;
    sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        .execute(&mut *tx)
        .await?;
    sqlx::query("SET LOCAL lock_timeout = '5s'")
        .execute(&mut *tx)
        .await?;
    let before = crate::compile::compile_in(&mut tx)
        .await
        .map_err(ApiError::Internal)?;
    let mut results = Vec::with_capacity(request.changes.len());
    for (index, change) in request.changes.into_iter().enumerate() {
        let response = apply(&mut tx, By::each("dry-run"), change)
            .await
            .map_err(|error| at_change(index, error))?;
        results.push(result_of(index, response).await);
    }
    let after = crate::compile::compile_in(&mut tx)
        .await
        .map_err(ApiError::Internal)?;
    // Nothing of the above may stay: the revision bumps, audit rows and NOTIFYs go with it.
    tx.rollback().await?;

    let now_ms = unix_ms();
    let mut report = None;
    let health_view = match &state.live {
        Some(live) => {
            live.store().with_view(&mut |view: &dyn HealthView| {
                report = Some(compare(&before, &after, view, now_ms));
            });
            live.source()
        }
        None => {
            report = Some(compare(&before, &after, &NoHealth, now_ms));
            "none"
        }
    };
    let report = report.ok_or_else(|| {
        ApiError::Internal(anyhow::anyhow!("the state store never ran the comparison"))
    })?;
    Ok(Json(DryRunResponse {
        base_revision: before.revision,
        health_view: health_view.to_owned(),
        results,
        affected: report.affected,
        unreachable_members: report.unreachable,
        models_unresolved: report.unresolved,
        models_rerouted: report.rerouted,
        newly_failing: report.newly_failing,
        tokens: report.tokens,
        prices: price_moves(&before, &after),
        limits: limit_moves(&before, &after),
        truncated: report.truncated,
    }))
}
