//! `GET /api/v1/budgets`: every spend limit with what its scope has spent in the current UTC
//! window, from the usage the proxies report (`usage_minutes`).

use std::collections::HashSet;

use axum::extract::State;
use axum::Json;
use serde::Serialize;
use switchyard_engine::limit::{format_micros, format_pico_usd, format_rfc3339, PICO_PER_USD};
use switchyard_state::unix_ms;
use utoipa::ToSchema;

use super::access::{Caller, Owned};
use super::schema::{LimitModeName, LimitScopeName, LimitWindowName};
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::spend::spend_limits;
use crate::state::AppState;

/// One spend limit and its scope's spend in the current window.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct BudgetView {
    pub limit_id: i64,
    #[schema(value_type = LimitScopeName)]
    pub scope: String,
    pub scope_id: i64,
    /// The token's or team's name, the route's model pattern, the tag or the end user: what
    /// usage is recorded under (empty for a limit counting each end user separately).
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
    /// When the window ends and the spend starts over (RFC 3339, UTC); a rolling window: when
    /// its oldest day leaves it (the end of the current UTC day).
    #[schema(format = DateTime)]
    pub resets_at: String,
    /// The route (its model pattern) the limit is narrowed to: only its usage counts.
    pub route: Option<String>,
    /// A limit counting each end user separately: the end users who spent the most in the
    /// window, most first (at most 20); the figures above are the first one's, the end user
    /// nearest the budget. Empty for every other limit.
    pub end_users: Vec<EndUserBudget>,
}

/// One end user's spend under a limit counting each end user separately.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct EndUserBudget {
    pub end_user: String,
    /// USD (exact decimal string): its priced requests' cost in the window.
    pub spent_usd: String,
    /// `max(0, value − spent)`, USD.
    pub remaining_usd: String,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct BudgetsResponse {
    /// The instant the windows were taken at (RFC 3339, UTC).
    #[schema(format = DateTime)]
    pub computed_at: String,
    /// One entry per spend limit, by limit id.
    pub data: Vec<BudgetView>,
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

/// Every spend limit with its scope's spend in the current UTC window (`day`, `week`, `month`
/// or a rolling `Nd`); a tag's or an end user's from the request log, and for a limit counting
/// each end user separately, the end users who spent the most. A limit narrowed to a model
/// pattern is not listed: usage is recorded by
/// upstream model, so its spend cannot be told apart here (the proxies enforce it all the same).
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
pub async fn budgets(
    State(state): State<AppState>,
    caller: Caller,
) -> ApiResult<Json<BudgetsResponse>> {
    let now = unix_ms();
    // An admin limited to one team sees the budgets of its team's limits only.
    let owned: Option<HashSet<i64>> = match caller.identity.team {
        None => None,
        Some(team) => Some(
            sqlx::query_scalar::<_, i64>(&format!(
                "SELECT id FROM limits WHERE {}",
                Owned::Limit.belongs(1)
            ))
            .bind(team)
            .fetch_all(&state.pool)
            .await?
            .into_iter()
            .collect(),
        ),
    };
    let spends = spend_limits(&state.pool, now)
        .await
        .map_err(internal("reading the spend limits and their spend"))?;
    let data = spends
        .into_iter()
        .filter(|s| owned.as_ref().is_none_or(|ids| ids.contains(&s.limit_id)))
        .map(|s| {
            // Micro-USD to pico-USD.
            let value_pico = u128::from(s.value_micros) * (PICO_PER_USD / 1_000_000);
            BudgetView {
                limit_id: s.limit_id,
                scope: s.scope.as_str().to_owned(),
                scope_id: s.scope_id,
                scope_name: s.scope_name,
                window: s.window.as_str().to_owned(),
                mode: s.mode,
                value_usd: format_micros(s.value_micros),
                spent_usd: (s.requests == 0 || s.unpriced < s.requests)
                    .then(|| format_pico_usd(s.spent_pico)),
                remaining_usd: format_pico_usd(value_pico.saturating_sub(s.spent_pico)),
                unpriced_requests: s.unpriced,
                window_start_at: format_rfc3339(s.start),
                resets_at: format_rfc3339(s.end),
                route: s.route,
                end_users: s
                    .end_users
                    .into_iter()
                    .map(|(end_user, spent)| EndUserBudget {
                        end_user,
                        spent_usd: format_pico_usd(spent),
                        remaining_usd: format_pico_usd(value_pico.saturating_sub(spent)),
                    })
                    .collect(),
            }
        })
        .collect();
    Ok(Json(BudgetsResponse {
        computed_at: format_rfc3339(now),
        data,
    }))
}
