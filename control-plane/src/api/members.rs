//! `/api/v1/routes/{id}/members`, `/api/v1/members/{id}`: the unit of selection.

use axum::response::Response;
use serde::{Deserialize, Serialize};
use serde_json::json;
use switchyard_engine::model::validate_group;
use switchyard_engine::validate::{check_single_line, check_upstream_model};
use switchyard_engine::DEFAULT_GROUP;
use utoipa::ToSchema;

use super::channels::{text, CapabilitiesDto};
use super::crud::{crud, Item};
use super::routes::RouteView;
use super::rows::{
    check_reference, commit_view, delete_row, insert_sql, lock_row, table_row, update_sql, By,
    Change, Db, RowQuery,
};
use crate::db::ts;
use crate::error::{ApiError, ApiResult};

#[derive(Debug, Clone, Serialize, sqlx::FromRow, ToSchema)]
pub struct MemberView {
    pub id: i64,
    pub route_id: i64,
    pub channel_id: i64,
    pub upstream_model: String,
    pub group_name: String,
    pub priority: i32,
    pub weight: i32,
    pub enabled: bool,
    pub canary: bool,
    /// Member-level capability declarations, overlaid on the channel's.
    #[sqlx(json)]
    pub capabilities: CapabilitiesDto,
    #[schema(format = DateTime)]
    pub created_at: String,
    #[schema(format = DateTime)]
    pub updated_at: String,
}

table_row!(MemberView, "route_members", "member", columns);

crud!(
    table MemberView under RouteView,
    MemberCreate,
    MemberPatch,
    Item::new("member").conflict("a team still grants this member")
);

fn columns() -> String {
    format!(
        "id, route_id, channel_id, upstream_model, group_name, priority, weight, enabled, canary, \
         capabilities, {} AS created_at, {} AS updated_at",
        ts("created_at"),
        ts("updated_at")
    )
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MemberCreate {
    pub channel_id: i64,
    pub upstream_model: String,
    /// Trimmed; empty or absent means `default`; at most 64 characters.
    pub group_name: Option<String>,
    pub priority: Option<i32>,
    /// 0 or more (0: never wins while a positive-weight candidate exists).
    pub weight: Option<i32>,
    pub enabled: Option<bool>,
    pub canary: Option<bool>,
    pub capabilities: Option<CapabilitiesDto>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MemberPatch {
    pub channel_id: Option<i64>,
    pub upstream_model: Option<String>,
    pub group_name: Option<String>,
    pub priority: Option<i32>,
    pub weight: Option<i32>,
    pub enabled: Option<bool>,
    pub canary: Option<bool>,
    pub capabilities: Option<CapabilitiesDto>,
}

#[derive(Debug, Serialize)]
struct MemberSpec {
    channel_id: i64,
    upstream_model: String,
    group_name: String,
    priority: i32,
    weight: i32,
    enabled: bool,
    canary: bool,
    capabilities: CapabilitiesDto,
}

impl TryFrom<MemberCreate> for MemberSpec {
    type Error = ApiError;

    fn try_from(raw: MemberCreate) -> ApiResult<MemberSpec> {
        MemberSpec {
            channel_id: raw.channel_id,
            upstream_model: raw.upstream_model,
            group_name: raw.group_name.unwrap_or_default(),
            priority: raw.priority.unwrap_or(0),
            weight: raw.weight.unwrap_or(1),
            enabled: raw.enabled.unwrap_or(true),
            canary: raw.canary.unwrap_or(false),
            capabilities: raw.capabilities.unwrap_or_default(),
        }
        .validate()
    }
}

/// A create body's validated spec, as the audit log records it ([`super::validate_body`]).
pub(super) fn create_detail(raw: MemberCreate) -> ApiResult<serde_json::Value> {
    Ok(json!(MemberSpec::try_from(raw)?))
}

/// The columns a create or patch writes, in [`MemberSpec::bind`]'s order.
const WRITTEN: &str = "channel_id, upstream_model, group_name, priority, weight, enabled, \
    canary, capabilities";

impl MemberSpec {
    /// Binds the member to the [`WRITTEN`] columns.
    fn bind<'q, O>(&'q self, query: RowQuery<'q, O>) -> RowQuery<'q, O> {
        query
            .bind(self.channel_id)
            .bind(&self.upstream_model)
            .bind(&self.group_name)
            .bind(self.priority)
            .bind(self.weight)
            .bind(self.enabled)
            .bind(self.canary)
            .bind(sqlx::types::Json(&self.capabilities))
    }

    fn validate(mut self) -> ApiResult<MemberSpec> {
        // Spliced into request bodies (JSON and multipart): one line.
        text("upstream_model", &self.upstream_model, check_upstream_model)?;
        text("group_name", &self.group_name, check_single_line)?;
        let model = self.upstream_model.trim();
        if model.is_empty() || model.chars().count() > 256 {
            return Err(ApiError::validation(
                "upstream_model",
                "upstream_model must be 1 to 256 characters",
            ));
        }
        self.upstream_model = model.to_owned();
        validate_group(&self.group_name)
            .map_err(|message| ApiError::validation("group_name", message))?;
        let group = self.group_name.trim();
        self.group_name = if group.is_empty() {
            DEFAULT_GROUP
        } else {
            group
        }
        .to_owned();
        if self.weight < 0 {
            return Err(ApiError::validation(
                "weight",
                format!("weight must be 0 or more, got {}", self.weight),
            ));
        }
        self.capabilities.validate("capabilities")?;
        Ok(self)
    }

    async fn check_channel(&self, tx: &mut sqlx::PgConnection) -> ApiResult<()> {
        check_reference(tx, "channels", "channel_id", self.channel_id).await
    }
}

/// The create of `POST /api/v1/routes/{id}/members`, in `db` (see [`Db`]).
pub(super) async fn create_in<'c>(
    db: impl Db<'c>,
    by: By<'_>,
    route_id: i64,
    raw: MemberCreate,
) -> ApiResult<Response> {
    create_as(db, by, route_id, raw, None).await
}

/// [`create_in`], under `id` when one is given (a configuration file names its members by id,
/// and teams, limits and shadow rules refer to them by it).
pub(super) async fn create_as<'c>(
    db: impl Db<'c>,
    by: By<'_>,
    route_id: i64,
    raw: MemberCreate,
    id: Option<i64>,
) -> ApiResult<Response> {
    let spec = MemberSpec::try_from(raw)?;
    let (mut tx, _route) = lock_row::<RouteView>(db, route_id).await?;
    spec.check_channel(&mut tx).await?;
    let view = match id {
        None => {
            let sql = insert_sql::<MemberView>(&format!("route_id, {WRITTEN}"));
            spec.bind(sqlx::query_as::<_, MemberView>(&sql).bind(route_id))
                .fetch_one(&mut *tx)
                .await?
        }
        Some(id) => {
            let sql = insert_sql::<MemberView>(&format!("id, route_id, {WRITTEN}")).replacen(
                ") VALUES (",
                ") OVERRIDING SYSTEM VALUE VALUES (",
                1,
            );
            let query = sqlx::query_as::<_, MemberView>(&sql)
                .bind(id)
                .bind(route_id);
            let view = spec.bind(query).fetch_one(&mut *tx).await?;
            // The id was inserted as given: the identity continues past it.
            sqlx::query(
                "SELECT setval(pg_get_serial_sequence('route_members', 'id'), \
                 (SELECT max(id) FROM route_members))",
            )
            .execute(&mut *tx)
            .await?;
            view
        }
    };
    let mut detail = json!(spec);
    detail["route_id"] = json!(route_id);
    commit_view::<MemberView>(tx, by, Change::Create, view.id, detail, view).await
}

/// The update of `PATCH /api/v1/members/{id}`, in `db` (see [`Db`]).
pub(super) async fn patch_in<'c>(
    db: impl Db<'c>,
    by: By<'_>,
    id: i64,
    patch: MemberPatch,
) -> ApiResult<Response> {
    let (mut tx, current) = lock_row::<MemberView>(db, id).await?;
    let spec = MemberSpec {
        channel_id: patch.channel_id.unwrap_or(current.channel_id),
        upstream_model: patch.upstream_model.unwrap_or(current.upstream_model),
        group_name: patch.group_name.unwrap_or(current.group_name),
        priority: patch.priority.unwrap_or(current.priority),
        weight: patch.weight.unwrap_or(current.weight),
        enabled: patch.enabled.unwrap_or(current.enabled),
        canary: patch.canary.unwrap_or(current.canary),
        capabilities: patch.capabilities.unwrap_or(current.capabilities),
    }
    .validate()?;
    spec.check_channel(&mut tx).await?;
    let sql = update_sql::<MemberView>(WRITTEN);
    let view = spec
        .bind(sqlx::query_as::<_, MemberView>(&sql))
        .bind(id)
        .fetch_one(&mut *tx)
        .await?;
    commit_view::<MemberView>(tx, by, Change::Update, id, json!(spec), view).await
}

/// The delete of `DELETE /api/v1/members/{id}`, in `db` (see [`Db`]).
pub(super) async fn delete_in<'c>(db: impl Db<'c>, by: By<'_>, id: i64) -> ApiResult<Response> {
    let (mut tx, current) = lock_row::<MemberView>(db, id).await?;
    let teams: Vec<i64> = sqlx::query_scalar(
        "SELECT team_id FROM team_members WHERE member_id = $1 ORDER BY team_id",
    )
    .bind(id)
    .fetch_all(&mut *tx)
    .await?;
    if !teams.is_empty() {
        return Err(ApiError::Conflict {
            message: format!(
                "member {id} is granted to team(s) {teams:?}; remove it from their members first"
            ),
        });
    }
    let detail = json!({ "route_id": current.route_id, "channel_id": current.channel_id });
    delete_row::<MemberView>(tx, by, id, detail).await
}
