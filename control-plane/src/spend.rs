//! What each spend limit's scope has spent in its current window, from the usage the proxies
//! report (`usage_minutes`): the budgets view and the budget notifications read the same sums.
//!
//! A token or team is matched by its current name and a route by its model pattern (usage
//! recorded before a rename is not counted); a limit narrowed to a route counts that route's
//! usage only. A tag or end user limit's spend is summed from the request log (its rows carry
//! the tags and the end user; a window longer than the log's retention counts only what the
//! log still holds); an each-end-user limit reports the end users that spent the most. A limit narrowed to a model pattern is left out: usage is recorded by upstream
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
    /// The token's or team's name, the route's model pattern, the tag or the end user (empty:
    /// each end user).
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
    /// An each-end-user limit: the end users who spent the most in the window (at most
    /// [`TOP_END_USERS`], most first), each with what it spent (pico-USD). The figures above are
    /// then the first one's: the end user nearest its budget.
    pub end_users: Vec<(String, u128)>,
}

/// How many end users an each-end-user budget lists.
pub const TOP_END_USERS: i64 = 20;

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

/// What a scope spent in a window: pico-USD (decimal text), requests, unpriced requests.
type Sums = (String, i64, i64);

/// The `usage_minutes` column a scope's usage is recorded under (a fixed set).
fn usage_column(scope: ScopeKind) -> Option<&'static str> {
    match scope {
        ScopeKind::Token => Some("token"),
        ScopeKind::Team => Some("team"),
        ScopeKind::Route => Some("route"),
        // Spend limits on channels and members are refused when they are written; a tag's or
        // an end user's spend is the request log's.
        ScopeKind::Channel | ScopeKind::Member | ScopeKind::Tag | ScopeKind::EndUser => None,
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
             WHEN 'tag' THEN l.subject \
             WHEN 'end_user' THEN coalesce(l.subject, '') \
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
        // A rolling window spans its first day bucket to the end of today.
        let (start, end) = (window.first_day(now), window.bounds(now).1);
        let bounds = (start, end);
        let mut end_users = Vec::new();
        let (spent, requests, unpriced) = match scope {
            ScopeKind::EndUser if name.is_empty() => {
                end_users = top_end_users(pool, bounds, row.route.as_deref()).await?;
                match end_users.first() {
                    Some((user, _)) => logged_spend(pool, scope, user, bounds, &row.route).await?,
                    None => ("0".to_owned(), 0, 0),
                }
            }
            ScopeKind::Tag | ScopeKind::EndUser => {
                logged_spend(pool, scope, &name, bounds, &row.route).await?
            }
            _ => {
                let Some(column) = usage_column(scope) else {
                    continue;
                };
                minute_spend(pool, column, &name, bounds, &row.route).await?
            }
        };
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
            end_users,
        });
    }
    Ok(out)
}

fn bound(ms: UnixMillis) -> i64 {
    i64::try_from(ms).unwrap_or(i64::MAX)
}

/// A token's, team's or route's spend in `[start, end)`, from `usage_minutes`.
async fn minute_spend(
    pool: &PgPool,
    column: &str,
    name: &str,
    (start, end): (UnixMillis, UnixMillis),
    route: &Option<String>,
) -> Result<Sums, sqlx::Error> {
    sqlx::query_as(&format!(
        "SELECT coalesce(sum(cost_pico_usd), 0)::text, \
                least(coalesce(sum(requests), 0), $4)::bigint, \
                least(coalesce(sum(unpriced_requests), 0), $4)::bigint \
         FROM usage_minutes WHERE {column} = $1 \
           AND bucket >= to_timestamp($2::bigint / 1000) \
           AND bucket < to_timestamp($3::bigint / 1000) \
           AND ($5::text IS NULL OR route = $5)"
    ))
    .bind(name)
    .bind(bound(start))
    .bind(bound(end))
    .bind(i64::MAX)
    .bind(route.as_deref())
    .fetch_one(pool)
    .await
}

/// A tag's or an end user's spend in `[start, end)`, from the request log.
async fn logged_spend(
    pool: &PgPool,
    scope: ScopeKind,
    name: &str,
    (start, end): (UnixMillis, UnixMillis),
    route: &Option<String>,
) -> Result<Sums, sqlx::Error> {
    let matches = if scope == ScopeKind::Tag {
        "tags @> ARRAY[$1::text]"
    } else {
        "end_user = $1"
    };
    sqlx::query_as(&format!(
        "SELECT coalesce(sum(cost_pico_usd), 0)::text, count(*), \
                count(*) FILTER (WHERE cost_pico_usd IS NULL) \
         FROM request_log WHERE {matches} \
           AND at >= to_timestamp($2::bigint / 1000) AND at < to_timestamp($3::bigint / 1000) \
           AND ($4::text IS NULL OR route = $4)"
    ))
    .bind(name)
    .bind(bound(start))
    .bind(bound(end))
    .bind(route.as_deref())
    .fetch_one(pool)
    .await
}

/// The end users who spent the most in `[start, end)` (most first), from the request log.
async fn top_end_users(
    pool: &PgPool,
    (start, end): (UnixMillis, UnixMillis),
    route: Option<&str>,
) -> Result<Vec<(String, u128)>, sqlx::Error> {
    let rows: Vec<(String, String)> = sqlx::query_as(
        "SELECT end_user, sum(cost_pico_usd)::text FROM request_log \
         WHERE end_user <> '' AND cost_pico_usd IS NOT NULL \
           AND at >= to_timestamp($1::bigint / 1000) AND at < to_timestamp($2::bigint / 1000) \
           AND ($3::text IS NULL OR route = $3) \
         GROUP BY end_user ORDER BY sum(cost_pico_usd) DESC, end_user LIMIT $4",
    )
    .bind(bound(start))
    .bind(bound(end))
    .bind(route)
    .bind(TOP_END_USERS)
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(user, spent)| (user, spent.trim().parse().unwrap_or(u128::MAX)))
        .collect())
}
