//! `/api/v1/routes`: logical models matched by `model_pattern`, with their route-level overrides.

use axum::response::Response;
use serde::{Deserialize, Serialize};
use serde_json::json;
use switchyard_engine::settings::check_range;
use switchyard_engine::{validate_pattern, RoutingMode};
use utoipa::ToSchema;

use super::crud::{crud, Item};
use super::extract::nullable;
use super::rows::{
    commit_view, delete_locked, insert_sql, lock_row, table_row, update_sql, By, Change, Db,
    RowQuery,
};
use crate::db::ts;
use crate::error::{ApiError, ApiResult};

#[derive(Debug, Clone, Serialize, sqlx::FromRow, ToSchema)]
pub struct RouteView {
    pub id: i64,
    pub model_pattern: String,
    pub enabled: bool,
    #[schema(value_type = super::schema::RoutingModeName)]
    pub routing_mode: String,
    pub single_member_id: Option<i64>,
    pub sticky_session: Option<bool>,
    pub stable_first: Option<bool>,
    pub stable_first_denominator: Option<i32>,
    pub retry_times: Option<i32>,
    pub channel_retry_times: Option<i32>,
    pub cooldown_seconds: Option<i32>,
    #[schema(format = DateTime)]
    pub created_at: String,
    #[schema(format = DateTime)]
    pub updated_at: String,
}

table_row!(RouteView, "routes", "route", columns);

crud!(
    table RouteView,
    RouteCreate,
    RoutePatch,
    Item::new("route")
        .deleted("the route and its members are deleted")
        .conflict("a team still grants one of its members")
);

fn columns() -> String {
    format!(
        "id, model_pattern, enabled, routing_mode, single_member_id, sticky_session, stable_first, \
         stable_first_denominator, retry_times, channel_retry_times, cooldown_seconds, \
         {} AS created_at, {} AS updated_at",
        ts("created_at"),
        ts("updated_at")
    )
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RouteCreate {
    pub model_pattern: String,
    pub enabled: Option<bool>,
    /// Default `auto`.
    #[schema(value_type = Option<super::schema::RoutingModeName>)]
    pub routing_mode: Option<String>,
    pub single_member_id: Option<i64>,
    pub sticky_session: Option<bool>,
    pub stable_first: Option<bool>,
    pub stable_first_denominator: Option<i64>,
    pub retry_times: Option<i64>,
    pub channel_retry_times: Option<i64>,
    pub cooldown_seconds: Option<i64>,
}

/// Any subset; `null` clears an override (the global setting applies again).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RoutePatch {
    pub model_pattern: Option<String>,
    pub enabled: Option<bool>,
    #[schema(value_type = Option<super::schema::RoutingModeName>)]
    pub routing_mode: Option<String>,
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<i64>)]
    pub single_member_id: Option<Option<i64>>,
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<bool>)]
    pub sticky_session: Option<Option<bool>>,
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<bool>)]
    pub stable_first: Option<Option<bool>>,
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<i64>)]
    pub stable_first_denominator: Option<Option<i64>>,
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<i64>)]
    pub retry_times: Option<Option<i64>>,
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<i64>)]
    pub channel_retry_times: Option<Option<i64>>,
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<i64>)]
    pub cooldown_seconds: Option<Option<i64>>,
}

#[derive(Debug, Serialize)]
struct RouteSpec {
    model_pattern: String,
    enabled: bool,
    routing_mode: &'static str,
    single_member_id: Option<i64>,
    sticky_session: Option<bool>,
    stable_first: Option<bool>,
    stable_first_denominator: Option<i32>,
    retry_times: Option<i32>,
    channel_retry_times: Option<i32>,
    cooldown_seconds: Option<i32>,
}

fn pattern(value: &str) -> ApiResult<String> {
    validate_pattern(value).map_err(|message| ApiError::validation("model_pattern", message))?;
    Ok(value.to_owned())
}

fn mode(value: &str) -> ApiResult<&'static str> {
    RoutingMode::parse(value)
        .map(RoutingMode::as_str)
        .ok_or_else(|| {
            ApiError::validation(
                "routing_mode",
                format!(
                    "routing_mode must be one of auto, weighted, latency, adaptive, single; got {:?}",
                    crate::error::bounded(value, 64)
                ),
            )
        })
}

/// A route override shares its global setting's range.
fn ranged(field: &'static str, value: Option<i64>) -> ApiResult<Option<i32>> {
    let Some(value) = value else { return Ok(None) };
    let unsigned = u64::try_from(value).map_err(|_| {
        ApiError::validation(field, format!("{field} must not be negative, got {value}"))
    })?;
    if let Some(error) = check_range(field, unsigned) {
        return Err(ApiError::validation(field, error.message));
    }
    i32::try_from(value)
        .map(Some)
        .map_err(|_| ApiError::validation(field, format!("{field} is out of range")))
}

impl TryFrom<RouteCreate> for RouteSpec {
    type Error = ApiError;

    fn try_from(raw: RouteCreate) -> ApiResult<RouteSpec> {
        Ok(RouteSpec {
            model_pattern: pattern(&raw.model_pattern)?,
            enabled: raw.enabled.unwrap_or(true),
            routing_mode: mode(raw.routing_mode.as_deref().unwrap_or("auto"))?,
            single_member_id: raw.single_member_id,
            sticky_session: raw.sticky_session,
            stable_first: raw.stable_first,
            stable_first_denominator: ranged(
                "stable_first_denominator",
                raw.stable_first_denominator,
            )?,
            retry_times: ranged("retry_times", raw.retry_times)?,
            channel_retry_times: ranged("channel_retry_times", raw.channel_retry_times)?,
            cooldown_seconds: ranged("cooldown_seconds", raw.cooldown_seconds)?,
        })
    }
}

/// A create body's validated spec, as the audit log records it ([`super::validate_body`]).
pub(super) fn create_detail(raw: RouteCreate) -> ApiResult<serde_json::Value> {
    Ok(json!(RouteSpec::try_from(raw)?))
}

fn keep_or<T: Copy>(
    patch: Option<Option<i64>>,
    current: Option<T>,
    f: impl Fn(Option<i64>) -> ApiResult<Option<T>>,
) -> ApiResult<Option<T>> {
    match patch {
        Some(value) => f(value),
        None => Ok(current),
    }
}

impl RouteSpec {
    fn patched(current: &RouteView, patch: RoutePatch) -> ApiResult<RouteSpec> {
        Ok(RouteSpec {
            model_pattern: match patch.model_pattern {
                Some(p) => pattern(&p)?,
                None => current.model_pattern.clone(),
            },
            enabled: patch.enabled.unwrap_or(current.enabled),
            routing_mode: mode(
                patch
                    .routing_mode
                    .as_deref()
                    .unwrap_or(&current.routing_mode),
            )?,
            single_member_id: patch.single_member_id.unwrap_or(current.single_member_id),
            sticky_session: patch.sticky_session.unwrap_or(current.sticky_session),
            stable_first: patch.stable_first.unwrap_or(current.stable_first),
            stable_first_denominator: keep_or(
                patch.stable_first_denominator,
                current.stable_first_denominator,
                |v| ranged("stable_first_denominator", v),
            )?,
            retry_times: keep_or(patch.retry_times, current.retry_times, |v| {
                ranged("retry_times", v)
            })?,
            channel_retry_times: keep_or(
                patch.channel_retry_times,
                current.channel_retry_times,
                |v| ranged("channel_retry_times", v),
            )?,
            cooldown_seconds: keep_or(patch.cooldown_seconds, current.cooldown_seconds, |v| {
                ranged("cooldown_seconds", v)
            })?,
        })
    }

    /// Checks that need the database: the single member must belong to this route, and `single`
    /// needs one.
    /// `require` is set when the request itself asks for `single` mode: a route whose single
    /// member was deleted later stays editable (it behaves as `auto`).
    async fn check_single(
        &self,
        tx: &mut sqlx::PgConnection,
        route_id: Option<i64>,
        require: bool,
    ) -> ApiResult<()> {
        if require && self.routing_mode == "single" && self.single_member_id.is_none() {
            return Err(ApiError::validation(
                "single_member_id",
                "routing_mode single needs single_member_id (a member of this route)",
            ));
        }
        if let Some(member) = self.single_member_id {
            let owner: Option<i64> =
                sqlx::query_scalar("SELECT route_id FROM route_members WHERE id = $1")
                    .bind(member)
                    .fetch_optional(&mut *tx)
                    .await?;
            if owner.is_none() || owner != route_id {
                return Err(ApiError::validation(
                    "single_member_id",
                    format!("single_member_id {member} is not a member of this route"),
                ));
            }
        }
        Ok(())
    }
}

async fn pattern_taken(
    tx: &mut sqlx::PgConnection,
    pattern: &str,
    except: Option<i64>,
) -> ApiResult<()> {
    let other: Option<i64> = sqlx::query_scalar(
        "SELECT id FROM routes WHERE model_pattern = $1 AND id IS DISTINCT FROM $2",
    )
    .bind(pattern)
    .bind(except)
    .fetch_optional(&mut *tx)
    .await?;
    if let Some(other) = other {
        return Err(ApiError::validation(
            "model_pattern",
            format!("model_pattern {pattern:?} is already used by route {other}"),
        ));
    }
    Ok(())
}

/// The create of `POST /api/v1/routes`, in `db` (see [`Db`]).
pub(super) async fn create_in<'c>(
    db: impl Db<'c>,
    by: By<'_>,
    raw: RouteCreate,
) -> ApiResult<Response> {
    let spec = RouteSpec::try_from(raw)?;
    let mut tx = db.begin().await?;
    pattern_taken(&mut tx, &spec.model_pattern, None).await?;
    spec.check_single(&mut tx, None, true).await?;
    let sql = insert_sql::<RouteView>(WRITTEN);
    let view = bind_spec(sqlx::query_as(&sql), &spec)
        .fetch_one(&mut *tx)
        .await?;
    commit_view::<RouteView>(tx, by, Change::Create, view.id, json!(spec), view).await
}

/// The columns a create or patch writes, in [`bind_spec`]'s order.
const WRITTEN: &str = "model_pattern, enabled, routing_mode, single_member_id, \
    sticky_session, stable_first, stable_first_denominator, retry_times, channel_retry_times, \
    cooldown_seconds";

/// Binds `spec` to the [`WRITTEN`] columns.
fn bind_spec<'q>(query: RowQuery<'q, RouteView>, spec: &'q RouteSpec) -> RowQuery<'q, RouteView> {
    query
        .bind(&spec.model_pattern)
        .bind(spec.enabled)
        .bind(spec.routing_mode)
        .bind(spec.single_member_id)
        .bind(spec.sticky_session)
        .bind(spec.stable_first)
        .bind(spec.stable_first_denominator)
        .bind(spec.retry_times)
        .bind(spec.channel_retry_times)
        .bind(spec.cooldown_seconds)
}

/// The update of `PATCH /api/v1/routes/{id}`, in `db` (see [`Db`]).
pub(super) async fn patch_in<'c>(
    db: impl Db<'c>,
    by: By<'_>,
    id: i64,
    patch: RoutePatch,
) -> ApiResult<Response> {
    let asks_single = patch.routing_mode.is_some() || matches!(patch.single_member_id, Some(None));
    let (mut tx, current) = lock_row::<RouteView>(db, id).await?;
    let spec = RouteSpec::patched(&current, patch)?;
    pattern_taken(&mut tx, &spec.model_pattern, Some(id)).await?;
    spec.check_single(&mut tx, Some(id), asks_single).await?;
    let sql = update_sql::<RouteView>(WRITTEN);
    let view = bind_spec(sqlx::query_as(&sql), &spec)
        .bind(id)
        .fetch_one(&mut *tx)
        .await?;
    commit_view::<RouteView>(tx, by, Change::Update, id, json!(spec), view).await
}

/// The delete of `DELETE /api/v1/routes/{id}`, in `db` (see [`Db`]).
pub(super) async fn delete_in<'c>(db: impl Db<'c>, by: By<'_>, id: i64) -> ApiResult<Response> {
    let detail = |route: &RouteView| json!({ "model_pattern": route.model_pattern });
    delete_locked(db, by, id, detail).await
}
