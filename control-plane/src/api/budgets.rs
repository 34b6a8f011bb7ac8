//! `GET /api/v1/budgets`: every spend limit with what its scope has spent in the current UTC
//! window, from the usage the proxies report (`usage_minutes`).

use axum::extract::State;
use axum::Json;
use serde::Serialize;
use switchyard_engine::limit::{
    format_micros, format_pico_usd, format_rfc3339, ScopeKind, Window, PICO_PER_USD,
};
use switchyard_state::unix_ms;
use utoipa::ToSchema;

use super::schema::{LimitModeName, LimitScopeName, LimitWindowName};
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::state::AppState;

/// One spend limit and its scope's spend in the current window.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct BudgetView {
    pub limit_id: i64,
    #[schema(value_type = LimitScopeName)]
    pub scope: String,
    pub scope_id: i64,
    /// The token's or team's name, or the route's model pattern: what usage is recorded under.
    pub scope_name: String,
    #[schema(value_type = LimitWindowName)]
    pub window: String,
    #[schema(value_type = LimitModeName)]
    pub mode: String,
    /// The limit, USD (exact decimal string).
    pub value_usd: String,
    /// Spent in the current window by the priced requests, USD (exact decimal string); `null`
    /// when the window has requests and every one was unpriced (their cost is unknown, not
    /// zero).
    pub spent_usd: Option<String>,
    /// `max(0, value − spent)`, USD: the priced spend is what the limit counts.
    pub remaining_usd: String,
    /// Requests of the window no price matched (their cost is not in `spent_usd` and the limit
    /// does not count it).
    pub unpriced_requests: i64,
    /// Start of the current window (RFC 3339, UTC).
    #[schema(format = DateTime)]
    pub window_start_at: String,
    /// When the window ends and the spend starts over (RFC 3339, UTC).
    #[schema(format = DateTime)]
    pub resets_at: String,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct BudgetsResponse {
    /// The instant the windows were taken at (RFC 3339, UTC).
    #[schema(format = DateTime)]
    pub computed_at: String,
    /// One entry per spend limit, by limit id.
    pub data: Vec<BudgetView>,
}

#[derive(sqlx::FromRow)]
struct SpendLimitRow {
    id: i64,
    scope: String,
    scope_id: i64,
    period: String,
    value: i64,
    mode: String,
    scope_name: Option<String>,
}

/// The `usage_minutes` column a scope's usage is recorded under (a fixed set).
fn usage_column(scope: ScopeKind) -> Option<&'static str> {
    match scope {
        ScopeKind::Token => Some("token"),
        ScopeKind::Team => Some("team"),
        ScopeKind::Route => Some("route"),
        // Spend limits on channels and members are refused when they are written.
        ScopeKind::Channel | ScopeKind::Member => None,
    }
}

fn internal(context: &'static str) -> impl FnOnce(sqlx::Error) -> ApiError {
    move |error| {
        if crate::error::is_unavailable(&error) {
            ApiError::from(error)
        } else {
            ApiError::Internal(anyhow::Error::new(error).context(context))
        }
    }
}

/// Every spend limit with its scope's spend in the current UTC window (`day` or `month`).
///
/// The spend is read from the usage the proxies report, so it trails the proxies by the
/// reporting interval (seconds): it is what `GET /api/v1/usage` would sum for the scope over
/// the window, not the proxies' live counters, which are what a hard limit is enforced with. A
/// token or team is matched by its current name and a route by its model pattern: usage
/// recorded before a rename is not counted.
#[utoipa::path(get, path = "/api/v1/budgets", tag = "limits", operation_id = "list_budgets",
    responses(
        (status = 200, description = "every spend limit with its scope's spend in the current \
                                      window, from the usage the proxies report", body = BudgetsResponse),
        (status = 401, body = ErrorBody),
        (status = 503, body = ErrorBody)))]
pub async fn budgets(State(state): State<AppState>) -> ApiResult<Json<BudgetsResponse>> {
    let now = unix_ms();
    let rows: Vec<SpendLimitRow> = sqlx::query_as(
        "SELECT l.id, l.scope, l.scope_id, l.period, l.value, l.mode, \
           CASE l.scope \
             WHEN 'token' THEN (SELECT name FROM tokens WHERE id = l.scope_id) \
             WHEN 'team' THEN (SELECT name FROM teams WHERE id = l.scope_id) \
             WHEN 'route' THEN (SELECT model_pattern FROM routes WHERE id = l.scope_id) \
           END AS scope_name \
         FROM limits l WHERE l.metric = 'spend' ORDER BY l.id",
    )
    .fetch_all(&state.pool)
    .await
    .map_err(internal("reading the spend limits"))?;
    let mut data = Vec::with_capacity(rows.len());
    for row in rows {
        let (Some(scope), Some(window), Some(name)) = (
            ScopeKind::parse(&row.scope),
            Window::parse(&row.period),
            row.scope_name,
        ) else {
            // Not a client scope, or its row is gone (the delete trigger removes the limit).
            continue;
        };
        let Some(column) = usage_column(scope) else {
            continue;
        };
        let (start, end) = window.bounds(now);
        let (spent, requests, unpriced): (String, i64, i64) = sqlx::query_as(&format!(
            "SELECT coalesce(sum(cost_pico_usd), 0)::text, \
                    least(coalesce(sum(requests), 0), $4)::bigint, \
                    least(coalesce(sum(unpriced_requests), 0), $4)::bigint \
             FROM usage_minutes WHERE {column} = $1 \
               AND bucket >= to_timestamp($2::bigint / 1000) \
               AND bucket < to_timestamp($3::bigint / 1000)"
        ))
        .bind(&name)
        .bind(i64::try_from(start).unwrap_or(i64::MAX))
        .bind(i64::try_from(end).unwrap_or(i64::MAX))
        .bind(i64::MAX)
        .fetch_one(&state.pool)
        .await
        .map_err(internal("summing a budget's spend"))?;
        let spent: u128 = spent.trim().parse().unwrap_or(u128::MAX);
        let value = u64::try_from(row.value).unwrap_or(0);
        // Micro-USD to pico-USD.
        let value_pico = u128::from(value) * (PICO_PER_USD / 1_000_000);
        data.push(BudgetView {
            limit_id: row.id,
            scope: row.scope,
            scope_id: row.scope_id,
            scope_name: name,
            window: row.period,
            mode: row.mode,
            value_usd: format_micros(value),
            spent_usd: (requests == 0 || unpriced < requests).then(|| format_pico_usd(spent)),
            remaining_usd: format_pico_usd(value_pico.saturating_sub(spent)),
            unpriced_requests: unpriced,
            window_start_at: format_rfc3339(start),
            resets_at: format_rfc3339(end),
        });
    }
    Ok(Json(BudgetsResponse {
        computed_at: format_rfc3339(now),
        data,
    }))
}
