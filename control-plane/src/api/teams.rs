//! `/api/v1/teams`: authorization scopes (allowed model patterns, allowed members, per-member
//! priority/weight plan, failover caps). Grants are rows with foreign keys, not JSON blobs, so a
//! team can never list a member that does not exist.

use std::collections::BTreeMap;

use axum::response::Response;
use serde::{Deserialize, Serialize};
use serde_json::json;
use switchyard_engine::settings::check_range;
use switchyard_engine::validate_pattern;
use utoipa::ToSchema;

use super::access::Owned;
use super::channels::checked_name;
use super::crud::{crud, Item};
use super::extract::nullable;
use super::rows::{commit_view, delete_row, fetch_row, table_row, By, Change, Db, Resource};
use crate::db::ts;
use crate::error::{ApiError, ApiResult};

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PlanEntryDto {
    pub priority: Option<i32>,
    pub weight: Option<i32>,
}

#[derive(Debug, Clone, Serialize, ToSchema, sqlx::FromRow)]
pub struct TeamView {
    pub id: i64,
    pub name: String,
    /// Model patterns the team may call; empty: none.
    pub models: Vec<String>,
    /// Member ids the team may use; empty: every member of an allowed model.
    pub members: Vec<i64>,
    /// Per-member overrides, keyed by member id.
    #[sqlx(json)]
    pub plan: BTreeMap<String, PlanEntryDto>,
    pub retry_limit: Option<i32>,
    pub disable_failover: bool,
    #[schema(format = DateTime)]
    pub created_at: String,
    #[schema(format = DateTime)]
    pub updated_at: String,
}

table_row!(TeamView, "teams", "team", columns);

crud!(
    table TeamView,
    TeamCreate,
    TeamPatch,
    Item::new("team")
        .conflict("tokens still belong to the team")
        .owned(Owned::Team)
);

/// The select list of a team with its grants gathered from the grant tables.
fn columns() -> String {
    format!(
        "id, name, \
           COALESCE((SELECT array_agg(model_pattern ORDER BY model_pattern) FROM team_models m \
                     WHERE m.team_id = teams.id), '{{}}') AS models, \
           COALESCE((SELECT array_agg(member_id ORDER BY member_id) FROM team_members m \
                     WHERE m.team_id = teams.id), '{{}}') AS members, \
           COALESCE((SELECT jsonb_object_agg(member_id::text, \
                             jsonb_build_object('priority', priority, 'weight', weight)) \
                     FROM team_plans p WHERE p.team_id = teams.id), '{{}}'::jsonb) AS plan, \
           retry_limit, disable_failover, {} AS created_at, {} AS updated_at",
        ts("created_at"),
        ts("updated_at")
    )
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TeamCreate {
    pub name: String,
    pub models: Option<Vec<String>>,
    pub members: Option<Vec<i64>>,
    pub plan: Option<BTreeMap<String, PlanEntryDto>>,
    pub retry_limit: Option<i64>,
    pub disable_failover: Option<bool>,
}

/// Any subset; a list or plan sent replaces the stored one whole.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TeamPatch {
    pub name: Option<String>,
    pub models: Option<Vec<String>>,
    pub members: Option<Vec<i64>>,
    pub plan: Option<BTreeMap<String, PlanEntryDto>>,
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<i64>)]
    pub retry_limit: Option<Option<i64>>,
    pub disable_failover: Option<bool>,
}

#[derive(Debug, Serialize)]
struct TeamSpec {
    name: String,
    models: Vec<String>,
    members: Vec<i64>,
    plan: BTreeMap<i64, PlanEntryDto>,
    retry_limit: Option<i32>,
    disable_failover: bool,
}

fn plan_from(raw: BTreeMap<String, PlanEntryDto>) -> ApiResult<BTreeMap<i64, PlanEntryDto>> {
    raw.into_iter()
        .map(|(key, entry)| {
            let id = key.trim().parse::<i64>().map_err(|_| {
                let key = crate::error::bounded(&key, 32);
                ApiError::validation(
                    format!("plan.{key}"),
                    format!("plan keys must be member ids, got {key:?}"),
                )
            })?;
            if entry.weight.is_some_and(|w| w < 0) {
                return Err(ApiError::validation(
                    format!("plan.{key}.weight"),
                    "plan weight must be 0 or more",
                ));
            }
            Ok((id, entry))
        })
        .collect()
}

fn retry_limit(value: Option<i64>) -> ApiResult<Option<i32>> {
    let Some(value) = value else { return Ok(None) };
    let in_range = u64::try_from(value)
        .ok()
        .is_some_and(|v| check_range("retry_times", v).is_none());
    if !in_range {
        return Err(ApiError::validation(
            "retry_limit",
            format!("retry_limit must be between 0 and 100, got {value}"),
        ));
    }
    i32::try_from(value)
        .map(Some)
        .map_err(|_| ApiError::validation("retry_limit", "retry_limit is out of range"))
}

impl TryFrom<TeamCreate> for TeamSpec {
    type Error = ApiError;

    fn try_from(raw: TeamCreate) -> ApiResult<TeamSpec> {
        TeamSpec {
            name: raw.name,
            models: raw.models.unwrap_or_default(),
            members: raw.members.unwrap_or_default(),
            plan: plan_from(raw.plan.unwrap_or_default())?,
            retry_limit: retry_limit(raw.retry_limit)?,
            disable_failover: raw.disable_failover.unwrap_or(false),
        }
        .validate()
    }
}

/// A create body's validated spec, as the audit log records it ([`super::validate_body`]).
pub(super) fn create_detail(raw: TeamCreate) -> ApiResult<serde_json::Value> {
    Ok(json!(TeamSpec::try_from(raw)?))
}

impl TeamSpec {
    fn validate(mut self) -> ApiResult<TeamSpec> {
        self.name = checked_name("name", &self.name)?;
        for (i, pattern) in self.models.iter().enumerate() {
            validate_pattern(pattern)
                .map_err(|message| ApiError::validation(format!("models[{i}]"), message))?;
        }
        self.models.sort();
        self.models.dedup();
        self.members.sort_unstable();
        self.members.dedup();
        Ok(self)
    }

    async fn check_members(&self, tx: &mut sqlx::PgConnection) -> ApiResult<()> {
        let ids: Vec<i64> = self
            .members
            .iter()
            .chain(self.plan.keys())
            .copied()
            .collect();
        let known: Vec<i64> = sqlx::query_scalar("SELECT id FROM route_members WHERE id = ANY($1)")
            .bind(&ids)
            .fetch_all(&mut *tx)
            .await?;
        if let Some((i, missing)) = self
            .members
            .iter()
            .enumerate()
            .find(|(_, m)| !known.contains(m))
        {
            return Err(ApiError::validation(
                format!("members[{i}]"),
                format!("member {missing} does not exist"),
            ));
        }
        if let Some(missing) = self.plan.keys().find(|m| !known.contains(m)) {
            return Err(ApiError::validation(
                format!("plan.{missing}"),
                format!("plan names member {missing}, which does not exist"),
            ));
        }
        Ok(())
    }

    /// Replaces the team's grant rows.
    async fn write_grants(&self, tx: &mut sqlx::PgConnection, team: i64) -> ApiResult<()> {
        for table in ["team_models", "team_members", "team_plans"] {
            sqlx::query(&format!("DELETE FROM {table} WHERE team_id = $1"))
                .bind(team)
                .execute(&mut *tx)
                .await?;
        }
        sqlx::query(
            "INSERT INTO team_models (team_id, model_pattern) SELECT $1, unnest($2::text[])",
        )
        .bind(team)
        .bind(&self.models)
        .execute(&mut *tx)
        .await?;
        sqlx::query(
            "INSERT INTO team_members (team_id, member_id) SELECT $1, unnest($2::bigint[])",
        )
        .bind(team)
        .bind(&self.members)
        .execute(&mut *tx)
        .await?;
        let ids: Vec<i64> = self.plan.keys().copied().collect();
        let priorities: Vec<Option<i32>> = self.plan.values().map(|e| e.priority).collect();
        let weights: Vec<Option<i32>> = self.plan.values().map(|e| e.weight).collect();
        sqlx::query(
            "INSERT INTO team_plans (team_id, member_id, priority, weight) \
             SELECT $1, * FROM unnest($2::bigint[], $3::int[], $4::int[])",
        )
        .bind(team)
        .bind(&ids)
        .bind(&priorities)
        .bind(&weights)
        .execute(&mut *tx)
        .await?;
        Ok(())
    }
}

async fn lock(tx: &mut sqlx::PgConnection, id: i64) -> ApiResult<()> {
    sqlx::query_scalar::<_, i64>("SELECT id FROM teams WHERE id = $1 FOR UPDATE")
        .bind(id)
        .fetch_optional(&mut *tx)
        .await?
        .map(|_| ())
        .ok_or_else(|| ApiError::not_found(TeamView::NOUN, id))
}

/// The create of `POST /api/v1/teams`, in `db` (see [`Db`]).
pub(super) async fn create_in<'c>(
    db: impl Db<'c>,
    by: By<'_>,
    raw: TeamCreate,
) -> ApiResult<Response> {
    let spec = TeamSpec::try_from(raw)?;
    let mut tx = db.begin().await?;
    spec.check_members(&mut tx).await?;
    let id: i64 = sqlx::query_scalar(
        "INSERT INTO teams (name, retry_limit, disable_failover) VALUES ($1, $2, $3) RETURNING id",
    )
    .bind(&spec.name)
    .bind(spec.retry_limit)
    .bind(spec.disable_failover)
    .fetch_one(&mut *tx)
    .await?;
    spec.write_grants(&mut tx, id).await?;
    let view = fetch_row::<TeamView>(&mut *tx, id, false).await?;
    commit_view::<TeamView>(tx, by, Change::Create, id, json!(spec), view).await
}

/// The update of `PATCH /api/v1/teams/{id}`, in `db` (see [`Db`]).
pub(super) async fn patch_in<'c>(
    db: impl Db<'c>,
    by: By<'_>,
    id: i64,
    patch: TeamPatch,
) -> ApiResult<Response> {
    let mut tx = db.begin().await?;
    lock(&mut tx, id).await?;
    let current = fetch_row::<TeamView>(&mut *tx, id, false).await?;
    let spec = TeamSpec {
        name: patch.name.unwrap_or(current.name),
        models: patch.models.unwrap_or(current.models),
        members: patch.members.unwrap_or(current.members),
        plan: plan_from(patch.plan.unwrap_or(current.plan))?,
        retry_limit: match patch.retry_limit {
            Some(value) => retry_limit(value)?,
            None => current.retry_limit,
        },
        disable_failover: patch.disable_failover.unwrap_or(current.disable_failover),
    }
    .validate()?;
    spec.check_members(&mut tx).await?;
    sqlx::query(
        "UPDATE teams SET name = $2, retry_limit = $3, disable_failover = $4, updated_at = now() \
         WHERE id = $1",
    )
    .bind(id)
    .bind(&spec.name)
    .bind(spec.retry_limit)
    .bind(spec.disable_failover)
    .execute(&mut *tx)
    .await?;
    spec.write_grants(&mut tx, id).await?;
    let view = fetch_row::<TeamView>(&mut *tx, id, false).await?;
    commit_view::<TeamView>(tx, by, Change::Update, id, json!(spec), view).await
}

/// The delete of `DELETE /api/v1/teams/{id}`, in `db` (see [`Db`]).
pub(super) async fn delete_in<'c>(db: impl Db<'c>, by: By<'_>, id: i64) -> ApiResult<Response> {
    let mut tx = db.begin().await?;
    lock(&mut tx, id).await?;
    let tokens: i64 = sqlx::query_scalar("SELECT count(*) FROM tokens WHERE team_id = $1")
        .bind(id)
        .fetch_one(&mut *tx)
        .await?;
    if tokens > 0 {
        return Err(ApiError::Conflict {
            message: format!(
                "team {id} still has {tokens} token(s); move or delete them first (a token that \
                 lost its team would lose its restrictions)"
            ),
        });
    }
    // The team's admin tokens go with it (a foreign key cascade); the audit row names them.
    let admins: Vec<String> = sqlx::query_scalar(
        "SELECT name FROM admin_tokens WHERE team_id = $1 AND revoked_at IS NULL ORDER BY id",
    )
    .bind(id)
    .fetch_all(&mut *tx)
    .await?;
    let detail = if admins.is_empty() {
        json!({})
    } else {
        json!({ "removed_admin_tokens": admins })
    };
    delete_row::<TeamView>(tx, by, id, detail).await
}
