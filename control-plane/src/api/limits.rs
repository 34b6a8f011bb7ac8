//! `/api/v1/limits`: limits on a token, team, route, channel, member, tag or end user. Client
//! limits (token, team, route, tag, end user) refuse requests beyond them with a 429 (hard) or
//! only report the crossing (soft); upstream limits (channel, member) make members without room
//! ineligible instead. A limit follows its scope: deleting the token, team, route, channel or
//! member deletes it. A tag or end user limit names its tag or end user instead of an id (an
//! end user limit naming none counts each end user separately).

use axum::response::Response;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use switchyard_engine::limit::{format_micros, Limit, LimitOnly, Metric, ScopeKind};
use switchyard_engine::subject::subject_of;
use utoipa::ToSchema;

use super::access::{owned_target, Owned};
use super::amount::DecimalText;
use super::crud::{crud, Item};
use super::extract::nullable;
use super::rows::{
    commit_view, delete_row, insert_sql, lock_row, table_row, team_after, team_before, update_sql,
    By, Change, Db, RowQuery, RowView,
};
use super::schema::{LimitMetricName, LimitModeName, LimitScopeName, LimitWindowName};
use crate::db::ts;
use crate::error::{ApiError, ApiResult};

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct LimitView {
    pub id: i64,
    #[schema(value_type = LimitScopeName)]
    pub scope: String,
    /// The id of the token, team, route, channel or member; 0 for a tag or end user limit.
    pub scope_id: i64,
    #[schema(value_type = LimitMetricName)]
    pub metric: String,
    #[schema(value_type = LimitWindowName)]
    pub window: String,
    /// For `spend`, USD as an exact decimal string; otherwise a whole number.
    #[schema(value_type = super::amount::LimitValueOutput)]
    pub value: Value,
    #[schema(value_type = LimitModeName)]
    pub mode: String,
    /// Narrowed to requests for models matching this pattern (the model the client asked
    /// for); `null`: every model.
    pub model_pattern: Option<String>,
    /// Narrowed to requests through this route; `null`: every route.
    pub route_id: Option<i64>,
    /// A spend limit's own notification thresholds, percentages of its value (each told once
    /// per window); `null`: the subscribed webhooks' thresholds (by default 50, 80 and 100);
    /// `[]`: no threshold notifications.
    pub notify_at: Option<Vec<i32>>,
    /// A `tag` limit's tag (every request carrying it counts); `null` for other scopes.
    pub tag: Option<String>,
    /// An `end_user` limit's end user; `null` on an `end_user` limit: each end user counts
    /// separately, on a counter of its own (a request without an end user is not counted).
    pub end_user: Option<String>,
    #[schema(format = DateTime)]
    pub created_at: String,
    #[schema(format = DateTime)]
    pub updated_at: String,
}

#[derive(sqlx::FromRow)]
pub(super) struct LimitRow {
    pub id: i64,
    pub scope: String,
    pub scope_id: i64,
    pub metric: String,
    pub period: String,
    pub value: i64,
    pub mode: String,
    pub model_pattern: Option<String>,
    pub route_id: Option<i64>,
    pub notify_at: Option<Vec<i32>>,
    pub subject: Option<String>,
    pub created_at: String,
    pub updated_at: String,
}

table_row!(LimitRow, "limits", "limit", columns);

impl RowView for LimitView {
    type Row = LimitRow;
}

crud!(
    LimitView,
    LimitCreate,
    LimitPatch,
    Item::new("limit")
        .invalid(
            "a field is invalid, or the scope already has a limit of this metric and window \
             (`window`)",
        )
        .owned(Owned::Limit)
);

/// A stored value as the API shows it: micro-USD as a decimal USD string for spend.
pub(super) fn shown_value(metric: &str, value: i64) -> Value {
    let value = u64::try_from(value).unwrap_or(0);
    if metric == Metric::Spend.as_str() {
        json!(format_micros(value))
    } else {
        json!(value)
    }
}

impl From<LimitRow> for LimitView {
    fn from(r: LimitRow) -> LimitView {
        let (tag, end_user) = subject_fields(&r.scope, r.subject);
        LimitView {
            tag,
            end_user,
            id: r.id,
            value: shown_value(&r.metric, r.value),
            scope: r.scope,
            scope_id: r.scope_id,
            metric: r.metric,
            window: r.period,
            mode: r.mode,
            model_pattern: r.model_pattern,
            route_id: r.route_id,
            notify_at: r.notify_at,
            created_at: r.created_at,
            updated_at: r.updated_at,
        }
    }
}

pub(super) fn columns() -> String {
    format!(
        "id, scope, scope_id, metric, period, value, mode, model_pattern, route_id, notify_at, subject, \
         {} AS created_at, {} AS updated_at",
        ts("created_at"),
        ts("updated_at")
    )
}

/// A stored subject as the `tag` and `end_user` fields show it, by scope.
fn subject_fields(scope: &str, subject: Option<String>) -> (Option<String>, Option<String>) {
    match ScopeKind::parse(scope) {
        Some(ScopeKind::Tag) => (subject, None),
        Some(ScopeKind::EndUser) => (None, subject),
        _ => (None, None),
    }
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LimitCreate {
    #[schema(value_type = LimitScopeName)]
    pub scope: String,
    /// The id of the token, team, route, channel or member; absent (or 0) for a tag or end
    /// user limit.
    pub scope_id: Option<i64>,
    #[schema(value_type = LimitMetricName)]
    pub metric: String,
    /// `minute`, `hour`, `day`, `week` or `2d` … `90d` (rolling, in UTC day buckets) for
    /// requests and tokens; `day`, `week`, `month` or `2d` … `90d` for spend; absent (or
    /// `none`) for concurrent.
    #[schema(value_type = Option<LimitWindowName>)]
    pub window: Option<String>,
    #[schema(value_type = super::amount::LimitValueInput)]
    pub value: DecimalText,
    /// Default `hard`.
    #[schema(value_type = Option<LimitModeName>)]
    pub mode: Option<String>,
    /// Count only requests for models matching this pattern (`*`/`?` wildcards; a token, team
    /// or route limit). Absent: every model.
    pub model_pattern: Option<String>,
    /// Count only requests through this route (a token, team, tag or end user limit). Absent:
    /// every route.
    pub route_id: Option<i64>,
    /// A spend limit's notification thresholds: up to 10 percentages of its value, each 1 to
    /// 1000 (`[]`: none). Absent: the subscribed webhooks' thresholds (by default 50, 80, 100).
    pub notify_at: Option<Vec<i32>>,
    /// A `tag` limit's tag (required there): every request carrying it counts.
    pub tag: Option<String>,
    /// An `end_user` limit's end user; absent: each end user counts separately, on a counter
    /// of its own (a request without an end user is not counted).
    pub end_user: Option<String>,
}

/// Any subset; the limit is checked whole again. `window: null` means no window. Changing the
/// metric to or from `spend` needs a new `value` (its unit changes).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LimitPatch {
    #[schema(value_type = Option<LimitScopeName>)]
    pub scope: Option<String>,
    pub scope_id: Option<i64>,
    #[schema(value_type = Option<LimitMetricName>)]
    pub metric: Option<String>,
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<LimitWindowName>)]
    pub window: Option<Option<String>>,
    #[schema(value_type = Option<super::amount::LimitValueInput>)]
    pub value: Option<DecimalText>,
    #[schema(value_type = Option<LimitModeName>)]
    pub mode: Option<String>,
    /// `null`: no longer narrowed to models.
    #[serde(default, deserialize_with = "nullable")]
    pub model_pattern: Option<Option<String>>,
    /// `null`: no longer narrowed to a route.
    #[serde(default, deserialize_with = "nullable")]
    pub route_id: Option<Option<i64>>,
    /// `null`: the subscribed webhooks' thresholds again.
    #[serde(default, deserialize_with = "nullable")]
    pub notify_at: Option<Option<Vec<i32>>>,
    /// A `tag` limit's tag.
    #[serde(default, deserialize_with = "nullable")]
    pub tag: Option<Option<String>>,
    /// An `end_user` limit's end user; `null`: each end user separately.
    #[serde(default, deserialize_with = "nullable")]
    pub end_user: Option<Option<String>>,
}

/// The value of a limit counting `metric`: micro-USD for spend, a whole number otherwise.
fn parse_value(metric: Metric, value: &DecimalText) -> ApiResult<u64> {
    if metric != Metric::Spend {
        return value.whole("value");
    }
    let micros = value.usd_micros("value")?;
    if micros == 0 {
        return Err(ApiError::validation(
            "value",
            "value: a spend limit must be above 0 USD",
        ));
    }
    Ok(micros)
}

fn parse_metric(text: &str) -> ApiResult<Metric> {
    Metric::parse(text).ok_or_else(|| {
        ApiError::validation(
            "metric",
            format!(
                "metric `{}` is not one of requests, tokens, concurrent, spend",
                crate::error::bounded(text, 64)
            ),
        )
    })
}

/// Builds the limit from its fields with the engine's own checks (a 422 naming the field).
fn build(
    scope: &str,
    scope_id: i64,
    metric: &str,
    window: Option<&str>,
    value: u64,
    mode: &str,
) -> ApiResult<Limit> {
    Limit::parse(scope, scope_id, metric, window, value, mode).map_err(|(field, message)| {
        ApiError::validation(field, crate::error::bounded(&message, 256))
    })
}

/// What `limit` is narrowed to, checked against its scope (a 422 naming the field).
fn narrowed(
    limit: &Limit,
    model_pattern: Option<String>,
    route_id: Option<i64>,
) -> ApiResult<LimitOnly> {
    let only = LimitOnly {
        model_pattern,
        route_id,
    };
    only.check(limit.key.scope).map_err(|(field, message)| {
        ApiError::validation(
            field,
            format!("{field}: {}", crate::error::bounded(&message, 256)),
        )
    })?;
    Ok(only)
}

/// A limit's own notification thresholds, checked (sorted, each once): a spend limit's only,
/// up to 10, each 1 to 1000 percent (a 422 naming `notify_at`).
fn notify_at(limit: &Limit, thresholds: Option<Vec<i32>>) -> ApiResult<Option<Vec<i32>>> {
    let Some(mut thresholds) = thresholds else {
        return Ok(None);
    };
    if limit.key.metric != Metric::Spend {
        return Err(ApiError::validation(
            "notify_at",
            "notify_at: only a spend limit (a budget) notifies at percentages of its value",
        ));
    }
    thresholds.sort_unstable();
    thresholds.dedup();
    if thresholds.len() > 10 || thresholds.iter().any(|t| !(1..=1000).contains(t)) {
        return Err(ApiError::validation(
            "notify_at",
            "notify_at: up to 10 percentages, each 1 to 1000",
        ));
    }
    Ok(Some(thresholds))
}

/// A limit as validated: what it counts, what it is narrowed to, and its tag or end user.
struct Valid {
    limit: Limit,
    only: LimitOnly,
    subject: Option<String>,
    /// A spend limit's own notification thresholds.
    notify: Option<Vec<i32>>,
}

/// A limit's tag or end user, checked against its scope (a 422 naming the field).
fn subject(
    limit: &Limit,
    tag: Option<String>,
    end_user: Option<String>,
) -> ApiResult<Option<String>> {
    subject_of(limit.key.scope, tag, end_user).map_err(|(field, message)| {
        ApiError::validation(
            field,
            format!("{field}: {}", crate::error::bounded(&message, 256)),
        )
    })
}

/// The scope id a body gives: required (and an id) for a token, team, route, channel or member
/// limit; absent or 0 for a tag or end user limit.
fn scope_id_of(scope: &str, given: Option<i64>) -> ApiResult<i64> {
    match (ScopeKind::parse(scope), given) {
        (Some(kind), Some(id)) if kind.attributed() && id != 0 => Err(ApiError::validation(
            "scope_id",
            format!("scope_id: a `{scope}` limit names no id (its `tag` or `end_user` says whom)"),
        )),
        (Some(kind), _) if kind.attributed() => Ok(0),
        (_, Some(id)) => Ok(id),
        (_, None) => Err(ApiError::validation(
            "scope_id",
            format!("scope_id: a `{scope}` limit names the id of its {scope}"),
        )),
    }
}

fn validate_create(raw: &LimitCreate) -> ApiResult<Valid> {
    if ScopeKind::parse(&raw.scope).is_none() {
        // `Limit::parse` names it; checked first so a bad scope is not reported as a bad value.
        build(&raw.scope, 0, "requests", None, 1, "hard")?;
    }
    let scope_id = scope_id_of(&raw.scope, raw.scope_id)?;
    let metric = parse_metric(&raw.metric)?;
    let value = parse_value(metric, &raw.value)?;
    let limit = build(
        &raw.scope,
        scope_id,
        &raw.metric,
        raw.window.as_deref(),
        value,
        raw.mode.as_deref().unwrap_or("hard"),
    )?;
    let only = narrowed(&limit, raw.model_pattern.clone(), raw.route_id)?;
    let notify = notify_at(&limit, raw.notify_at.clone())?;
    let subject = subject(&limit, raw.tag.clone(), raw.end_user.clone())?;
    Ok(Valid {
        limit,
        only,
        subject,
        notify,
    })
}

/// A create body's validated limit, as the audit log records it ([`super::validate_body`]).
pub(super) fn create_detail(raw: LimitCreate) -> ApiResult<Value> {
    Ok(detail(&validate_create(&raw)?))
}

/// The audit log's record of a limit, the value as the API shows it.
fn detail(valid: &Valid) -> Value {
    let Valid {
        limit,
        only,
        subject,
        notify,
    } = valid;
    let value = i64::try_from(limit.value).unwrap_or(i64::MAX);
    let (tag, end_user) = subject_fields(limit.key.scope.as_str(), subject.clone());
    json!({
        "scope": limit.key.scope.as_str(),
        "scope_id": limit.key.scope_id,
        "metric": limit.key.metric.as_str(),
        "window": limit.key.window.as_str(),
        "value": shown_value(limit.key.metric.as_str(), value),
        "mode": limit.mode.as_str(),
        "model_pattern": only.model_pattern,
        "route_id": only.route_id,
        "notify_at": notify,
        "tag": tag,
        "end_user": end_user,
    })
}

/// The table holding a scope's rows (a fixed set: safe to put in SQL text); `None` for a tag or
/// an end user, which have none.
pub(super) fn scope_table(scope: ScopeKind) -> Option<&'static str> {
    match scope {
        ScopeKind::Token => Some("tokens"),
        ScopeKind::Team => Some("teams"),
        ScopeKind::Route => Some("routes"),
        ScopeKind::Channel => Some("channels"),
        ScopeKind::Member => Some("route_members"),
        ScopeKind::Tag | ScopeKind::EndUser => None,
    }
}

/// The route a limit is narrowed to exists (and stays until the write commits).
async fn check_route(tx: &mut sqlx::PgConnection, route: Option<i64>) -> ApiResult<()> {
    let Some(route) = route else {
        return Ok(());
    };
    let exists: Option<i64> =
        sqlx::query_scalar("SELECT id FROM routes WHERE id = $1 FOR KEY SHARE")
            .bind(route)
            .fetch_optional(&mut *tx)
            .await?;
    match exists {
        Some(_) => Ok(()),
        None => Err(ApiError::validation(
            "route_id",
            format!("route_id: route {route} does not exist"),
        )),
    }
}

/// The scope row exists (and stays until the write commits), so does a narrowing route, and no
/// other limit has the same scope, metric, window, narrowing and subject (a 422 naming
/// `window`, as a duplicate of any resource is).
async fn check(tx: &mut sqlx::PgConnection, valid: &Valid, id: Option<i64>) -> ApiResult<()> {
    let (limit, only) = (&valid.limit, &valid.only);
    let key = limit.key;
    check_route(tx, only.route_id).await?;
    // Locked until the write commits: a concurrent delete of the scope waits, and its trigger
    // then deletes this limit too, so no limit outlives its scope.
    if let Some(table) = scope_table(key.scope) {
        let exists: Option<i64> = sqlx::query_scalar(&format!(
            "SELECT id FROM {table} WHERE id = $1 FOR KEY SHARE"
        ))
        .bind(key.scope_id)
        .fetch_optional(&mut *tx)
        .await?;
        if exists.is_none() {
            return Err(ApiError::validation(
                "scope_id",
                format!(
                    "scope_id: {} {} does not exist",
                    key.scope.as_str(),
                    key.scope_id
                ),
            ));
        }
    }
    let other: Option<i64> = sqlx::query_scalar(
        "SELECT id FROM limits WHERE scope = $1 AND scope_id = $2 AND metric = $3 \
         AND period = $4 AND id IS DISTINCT FROM $5 \
         AND model_pattern IS NOT DISTINCT FROM $6 AND route_id IS NOT DISTINCT FROM $7 \
         AND subject IS NOT DISTINCT FROM $8",
    )
    .bind(key.scope.as_str())
    .bind(key.scope_id)
    .bind(key.metric.as_str())
    .bind(key.window.as_str())
    .bind(id)
    .bind(only.model_pattern.as_deref())
    .bind(only.route_id)
    .bind(valid.subject.as_deref())
    .fetch_optional(&mut *tx)
    .await?;
    match other {
        Some(other) => Err(duplicate(limit, Some(other))),
        None => Ok(()),
    }
}

fn duplicate(limit: &Limit, other: Option<i64>) -> ApiError {
    let which = other.map(|id| format!(" (limit {id})")).unwrap_or_default();
    // A tag or end user is the client's word: not repeated here, the scope kind says enough.
    let scope = if limit.key.scope.attributed() {
        format!("this {}", limit.key.scope.as_str())
    } else {
        format!("{} {}", limit.key.scope.as_str(), limit.key.scope_id)
    };
    ApiError::validation(
        "window",
        format!(
            "window: {scope} already has a {} limit per {}{which}; patch that one",
            limit.key.metric.as_str(),
            limit.key.window.as_str()
        ),
    )
}

/// A write's error: a unique violation that raced the check is a 422 naming `window` too.
fn write_error(limit: &Limit) -> impl FnOnce(sqlx::Error) -> ApiError + '_ {
    move |error| match &error {
        sqlx::Error::Database(db)
            if db.constraint() == Some("limits_scope_metric_period_unique") =>
        {
            duplicate(limit, None)
        }
        _ => ApiError::from(error),
    }
}

fn stored(value: u64) -> ApiResult<i64> {
    i64::try_from(value)
        .map_err(|_| ApiError::Internal(anyhow::anyhow!("limit value {value} beyond i64")))
}

/// The columns a create or patch writes, in [`bind_limit`]'s order.
const WRITTEN: &str =
    "scope, scope_id, metric, period, value, mode, model_pattern, route_id, notify_at, subject";

/// Binds `limit` to the [`WRITTEN`] columns.
fn bind_limit<'q, O>(query: RowQuery<'q, O>, valid: &'q Valid) -> ApiResult<RowQuery<'q, O>> {
    let Valid {
        limit,
        only,
        subject,
        notify,
    } = valid;
    Ok(query
        .bind(limit.key.scope.as_str())
        .bind(limit.key.scope_id)
        .bind(limit.key.metric.as_str())
        .bind(limit.key.window.as_str())
        .bind(stored(limit.value)?)
        .bind(limit.mode.as_str())
        .bind(only.model_pattern.as_deref())
        .bind(only.route_id)
        .bind(notify.as_deref())
        .bind(subject.as_deref()))
}

/// The create of `POST /api/v1/limits`, in `db` (see [`Db`]).
pub(super) async fn create_in<'c>(
    db: impl Db<'c>,
    by: By<'_>,
    raw: LimitCreate,
) -> ApiResult<Response> {
    let valid = validate_create(&raw)?;
    let mut tx = db.begin().await?;
    team_scope(&mut tx, by, &valid.limit).await?;
    check(&mut tx, &valid, None).await?;
    let sql = insert_sql::<LimitRow>(WRITTEN);
    let row = bind_limit(sqlx::query_as::<_, LimitRow>(&sql), &valid)?
        .fetch_one(&mut *tx)
        .await
        .map_err(write_error(&valid.limit))?;
    let id = row.id;
    team_after(&mut tx, by, Owned::Limit, id).await?;
    let view = LimitView::from(row);
    let detail = detail(&valid);
    commit_view::<LimitRow>(tx, by, Change::Create, id, detail, view).await
}

/// A patched limit's value: the patch's, or the current one when the unit stays.
fn patched_value(patch: &LimitPatch, current: &LimitRow, metric: Metric) -> ApiResult<u64> {
    match &patch.value {
        Some(value) => parse_value(metric, value),
        None => {
            let was_spend = current.metric == Metric::Spend.as_str();
            if was_spend != (metric == Metric::Spend) {
                return Err(ApiError::validation(
                    "value",
                    "value: changing the metric to or from spend changes the value's unit; \
                     send a new value",
                ));
            }
            Ok(u64::try_from(current.value).unwrap_or(0))
        }
    }
}

/// The limit a patch makes of the current row: the patch's fields over the current ones (a
/// scope changed takes none of the old scope's id, tag or end user).
fn patched(patch: LimitPatch, current: LimitRow) -> ApiResult<Valid> {
    let scope = patch.scope.clone().unwrap_or_else(|| current.scope.clone());
    if ScopeKind::parse(&scope).is_none() {
        build(&scope, 0, "requests", None, 1, "hard")?;
    }
    let same_scope = scope == current.scope;
    let scope_id = scope_id_of(
        &scope,
        patch
            .scope_id
            .or(same_scope.then_some(current.scope_id).filter(|id| *id != 0)),
    )?;
    let metric_text = patch
        .metric
        .clone()
        .unwrap_or_else(|| current.metric.clone());
    let metric = parse_metric(&metric_text)?;
    let value = patched_value(&patch, &current, metric)?;
    let window = match patch.window {
        Some(window) => window,
        None => Some(current.period.clone()),
    };
    let limit = build(
        &scope,
        scope_id,
        &metric_text,
        window.as_deref(),
        value,
        patch.mode.as_deref().unwrap_or(&current.mode),
    )?;
    let only = narrowed(
        &limit,
        patch.model_pattern.unwrap_or(current.model_pattern),
        patch.route_id.unwrap_or(current.route_id),
    )?;
    let (tag, end_user) = if same_scope {
        subject_fields(&current.scope, current.subject)
    } else {
        (None, None)
    };
    // Kept while the limit stays a spend limit; a limit that stops being one drops them.
    let kept = current
        .notify_at
        .clone()
        .filter(|_| metric == Metric::Spend);
    let notify = notify_at(&limit, patch.notify_at.clone().unwrap_or(kept))?;
    let subject = subject(
        &limit,
        patch.tag.unwrap_or(tag),
        patch.end_user.unwrap_or(end_user),
    )?;
    Ok(Valid {
        limit,
        only,
        subject,
        notify,
    })
}

/// The update of `PATCH /api/v1/limits/{id}`, in `db` (see [`Db`]).
pub(super) async fn patch_in<'c>(
    db: impl Db<'c>,
    by: By<'_>,
    id: i64,
    patch: LimitPatch,
) -> ApiResult<Response> {
    let (mut tx, current) = lock_row::<LimitRow>(db, id).await?;
    team_before(&mut tx, by, Owned::Limit, id).await?;
    let valid = patched(patch, current)?;
    team_scope(&mut tx, by, &valid.limit).await?;
    check(&mut tx, &valid, Some(id)).await?;
    let sql = update_sql::<LimitRow>(WRITTEN);
    let row = bind_limit(sqlx::query_as::<_, LimitRow>(&sql), &valid)?
        .bind(id)
        .fetch_one(&mut *tx)
        .await
        .map_err(write_error(&valid.limit))?;
    team_after(&mut tx, by, Owned::Limit, id).await?;
    let view = LimitView::from(row);
    let detail = detail(&valid);
    commit_view::<LimitRow>(tx, by, Change::Update, id, detail, view).await
}

/// The delete of `DELETE /api/v1/limits/{id}`, in `db` (see [`Db`]).
pub(super) async fn delete_in<'c>(db: impl Db<'c>, by: By<'_>, id: i64) -> ApiResult<Response> {
    let (mut tx, current) = lock_row::<LimitRow>(db, id).await?;
    team_before(&mut tx, by, Owned::Limit, id).await?;
    let detail = json!({
        "scope": current.scope,
        "scope_id": current.scope_id,
        "metric": current.metric,
        "window": current.period,
    });
    delete_row::<LimitRow>(tx, by, id, detail).await
}

/// For an admin limited to one team: the limit's scope is that team or one of its tokens; a 403
/// otherwise, before anything is said of whether the scope exists.
async fn team_scope(tx: &mut sqlx::PgConnection, by: By<'_>, limit: &Limit) -> ApiResult<()> {
    let Some(team) = by.team else {
        return Ok(());
    };
    let owned = match limit.key.scope {
        ScopeKind::Team => Owned::Team,
        ScopeKind::Token => Owned::Token,
        other => {
            return Err(ApiError::OutsideTeam {
                message: format!(
                    "scope: a {} limit is for fleet admins; this admin token administers team \
                     {team} only (a limit on the team or one of its tokens)",
                    other.as_str()
                ),
            })
        }
    };
    owned_target(&mut *tx, owned, ("scope_id", limit.key.scope_id), team).await
}
