//! What each spend limit's scope has spent in its current window, from the usage the proxies
//! report (`usage_minutes`): the budgets view and the budget notifications read the same sums.
//!
//! A token or team is matched by its current name and a route by its model pattern (usage
//! recorded before a rename is not counted); a limit narrowed to a route counts that route's
//! usage only. A limit narrowed to a model pattern is left out: usage is recorded by upstream
//! model, not by the model the client asked for, so its spend cannot be told apart here (the
//! proxies still enforce it).

use sqlx::PgPool;
use switchyard_engine::limit::{ScopeKind, Window};
use switchyard_engine::UnixMillis;

/// One spend limit and its scope's spend in the window holding `now`.
#[derive(Debug, Clone)]
pub struct Spend {
    pub limit_id: i64,
    pub scope: ScopeKind,
    pub scope_id: i64,
    /// The token's or team's name, or the route's model pattern.
    pub scope_name: String,
    pub window: Window,
    pub mode: String,
    /// The limit, micro-USD.
    pub value_micros: u64,
    /// Spent by the priced requests, pico-USD.
    pub spent_pico: u128,
    pub requests: i64,
    /// Requests no price matched (their cost is unknown, not zero).
    pub unpriced: i64,
    /// The window: its first instant (a rolling window: its first day's) and its end.
    pub start: UnixMillis,
    pub end: UnixMillis,
    /// The route it is narrowed to (its model pattern), if any.
    pub route: Option<String>,
    /// Its own notification thresholds (percentages); `None`: the webhooks'.
    pub notify_at: Option<Vec<i32>>,
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
    route: Option<String>,
    notify_at: Option<Vec<i32>>,
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

/// Every spend limit (not narrowed to models) whose scope still exists, with its spend in the
/// window holding `now`, by limit id.
pub async fn spend_limits(pool: &PgPool, now: UnixMillis) -> Result<Vec<Spend>, sqlx::Error> {
    let rows: Vec<SpendLimitRow> = sqlx::query_as(
        "SELECT l.id, l.scope, l.scope_id, l.period, l.value, l.mode, l.notify_at, \
           CASE l.scope \
             WHEN 'token' THEN (SELECT name FROM tokens WHERE id = l.scope_id) \
             WHEN 'team' THEN (SELECT name FROM teams WHERE id = l.scope_id) \
             WHEN 'route' THEN (SELECT model_pattern FROM routes WHERE id = l.scope_id) \
           END AS scope_name, \
           (SELECT model_pattern FROM routes WHERE id = l.route_id) AS route \
         FROM limits l WHERE l.metric = 'spend' AND l.model_pattern IS NULL ORDER BY l.id",
    )
    .fetch_all(pool)
    .await?;
    let mut out = Vec::with_capacity(rows.len());
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
        // A rolling window spans its first day bucket to the end of today.
        let (start, end) = (window.first_day(now), window.bounds(now).1);
        let (spent, requests, unpriced): (String, i64, i64) = sqlx::query_as(&format!(
            "SELECT coalesce(sum(cost_pico_usd), 0)::text, \
                    least(coalesce(sum(requests), 0), $4)::bigint, \
                    least(coalesce(sum(unpriced_requests), 0), $4)::bigint \
             FROM usage_minutes WHERE {column} = $1 \
               AND bucket >= to_timestamp($2::bigint / 1000) \
               AND bucket < to_timestamp($3::bigint / 1000) \
               AND ($5::text IS NULL OR route = $5)"
        ))
        .bind(&name)
        .bind(i64::try_from(start).unwrap_or(i64::MAX))
        .bind(i64::try_from(end).unwrap_or(i64::MAX))
        .bind(i64::MAX)
        .bind(row.route.as_deref())
        .fetch_one(pool)
        .await?;
        out.push(Spend {
            limit_id: row.id,
            scope,
            scope_id: row.scope_id,
            scope_name: name,
            window,
            mode: row.mode,
            value_micros: u64::try_from(row.value).unwrap_or(0),
            spent_pico: spent.trim().parse().unwrap_or(u128::MAX),
            requests,
            unpriced,
            start,
            end,
            route: row.route,
            notify_at: row.notify_at,
        });
    }
    Ok(out)
}
