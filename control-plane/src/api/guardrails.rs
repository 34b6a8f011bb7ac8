//! `/api/v1/guardrails`: guardrail rules (checks on what requests send upstream and what
//! answers bring back). Validated by the engine's own [`GuardrailSpec::into_rule`], the one the
//! configuration file and the snapshot stream use; what it is attached to and the moderation
//! channel are checked to exist here.

use axum::response::Response;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use switchyard_engine::guard::rule::{GuardChecks, GuardScope, Guardrail, GuardrailSpec};
use utoipa::ToSchema;

use super::crud::{crud, Item};
use super::guard_schema::{
    GuardActionName, GuardChecksDoc, GuardModeName, GuardScopeName, GuardStageName,
    GuardUninspectableName,
};
use super::rows::{
    commit_view, delete_locked, insert_sql, lock_row, table_row, update_sql, By, Change, Db,
    RowQuery, RowView,
};
use crate::db::ts;
use crate::error::{bounded, ApiError, ApiResult};

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct GuardrailView {
    pub id: i64,
    pub name: String,
    #[schema(value_type = GuardScopeName)]
    pub scope: String,
    /// The route's, team's or token's id; `null` with `all`.
    pub scope_id: Option<i64>,
    #[schema(value_type = GuardStageName)]
    pub stage: String,
    #[schema(value_type = GuardActionName)]
    pub action: String,
    pub restore: bool,
    #[schema(value_type = GuardModeName)]
    pub mode: String,
    pub enabled: bool,
    #[schema(value_type = GuardChecksDoc)]
    pub checks: Value,
    #[schema(value_type = GuardUninspectableName)]
    pub uninspectable: String,
    #[schema(format = DateTime)]
    pub created_at: String,
    #[schema(format = DateTime)]
    pub updated_at: String,
}

#[derive(sqlx::FromRow)]
pub(super) struct GuardrailRow {
    id: i64,
    name: String,
    scope: String,
    scope_id: Option<i64>,
    stage: String,
    action: String,
    restore: bool,
    mode: String,
    enabled: bool,
    checks: Value,
    uninspectable: String,
    created_at: String,
    updated_at: String,
}

table_row!(GuardrailRow, "guardrails", "guardrail", columns);

impl RowView for GuardrailView {
    type Row = GuardrailRow;
}

crud!(
    GuardrailView,
    GuardrailCreate,
    GuardrailPatch,
    Item::new("guardrail")
        .invalid("a field is invalid, the name is taken, or what it names does not exist")
);

impl From<GuardrailRow> for GuardrailView {
    fn from(r: GuardrailRow) -> GuardrailView {
        GuardrailView {
            id: r.id,
            name: r.name,
            scope: r.scope,
            scope_id: r.scope_id,
            stage: r.stage,
            action: r.action,
            restore: r.restore,
            mode: r.mode,
            enabled: r.enabled,
            checks: r.checks,
            uninspectable: r.uninspectable,
            created_at: r.created_at,
            updated_at: r.updated_at,
        }
    }
}

fn columns() -> String {
    format!(
        "id, name, scope, scope_id, stage, action, restore, mode, enabled, checks, \
         uninspectable, {} AS created_at, {} AS updated_at",
        ts("created_at"),
        ts("updated_at")
    )
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct GuardrailCreate {
    pub name: String,
    /// Default `all`: every request.
    #[schema(value_type = Option<GuardScopeName>)]
    pub scope: Option<String>,
    /// The route's, team's or token's id; absent with `all`.
    pub scope_id: Option<i64>,
    /// Default `both`.
    #[schema(value_type = Option<GuardStageName>)]
    pub stage: Option<String>,
    #[schema(value_type = GuardActionName)]
    pub action: String,
    /// With `redact`: the answer gets the replaced text back. Default false.
    pub restore: Option<bool>,
    /// Default `enforce`.
    #[schema(value_type = Option<GuardModeName>)]
    pub mode: Option<String>,
    pub enabled: Option<bool>,
    #[schema(value_type = GuardChecksDoc)]
    pub checks: Value,
    /// Default `allow`.
    #[schema(value_type = Option<GuardUninspectableName>)]
    pub uninspectable: Option<String>,
}

/// Any subset; `checks` replaces the rule's checks whole. `scope: all` detaches the rule (its
/// `scope_id` goes).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct GuardrailPatch {
    pub name: Option<String>,
    #[schema(value_type = Option<GuardScopeName>)]
    pub scope: Option<String>,
    #[serde(default, deserialize_with = "super::extract::nullable")]
    #[schema(value_type = Option<i64>)]
    pub scope_id: Option<Option<i64>>,
    #[schema(value_type = Option<GuardStageName>)]
    pub stage: Option<String>,
    #[schema(value_type = Option<GuardActionName>)]
    pub action: Option<String>,
    pub restore: Option<bool>,
    #[schema(value_type = Option<GuardModeName>)]
    pub mode: Option<String>,
    pub enabled: Option<bool>,
    #[schema(value_type = Option<GuardChecksDoc>)]
    pub checks: Option<Value>,
    #[schema(value_type = Option<GuardUninspectableName>)]
    pub uninspectable: Option<String>,
}

/// The checks of a request body (a 422 naming `checks`).
fn checks(value: &Value) -> ApiResult<GuardChecks> {
    GuardChecks::from_value(value).map_err(|(field, message)| {
        ApiError::validation(&field, format!("{field}: {}", bounded(&message, 300)))
    })
}

/// The rule from its spec, checked by the engine (a 422 naming the field).
fn checked(spec: GuardrailSpec, id: i64) -> ApiResult<Guardrail> {
    spec.into_rule(id)
        .map_err(|(field, message)| ApiError::validation(&field, format!("{field}: {message}")))
}

impl GuardrailCreate {
    fn into_spec(self) -> ApiResult<GuardrailSpec> {
        Ok(GuardrailSpec {
            checks: checks(&self.checks)?,
            name: self.name,
            scope: self.scope.unwrap_or_else(|| "all".to_owned()),
            scope_id: self.scope_id,
            stage: self.stage.unwrap_or_else(|| "both".to_owned()),
            action: self.action,
            restore: self.restore.unwrap_or(false),
            mode: self.mode.unwrap_or_else(|| "enforce".to_owned()),
            enabled: self.enabled.unwrap_or(true),
            uninspectable: self.uninspectable.unwrap_or_else(|| "allow".to_owned()),
        })
    }
}

/// The rule as stored, in words (the table's checks keep it readable; a stored rule the engine
/// would refuse is refused by the snapshot compiler, not here).
fn stored(row: GuardrailRow) -> ApiResult<GuardrailSpec> {
    Ok(GuardrailSpec {
        checks: checks(&row.checks)?,
        name: row.name,
        scope: row.scope,
        scope_id: row.scope_id,
        stage: row.stage,
        action: row.action,
        restore: row.restore,
        mode: row.mode,
        enabled: row.enabled,
        uninspectable: row.uninspectable,
    })
}

/// The audit log's record of a rule (the webhook URL is kept out: it may carry a key).
fn detail(rule: &Guardrail) -> Value {
    let mut checks = serde_json::to_value(&rule.checks).unwrap_or(Value::Null);
    if let Some(hook) = checks.get_mut("webhook").and_then(Value::as_object_mut) {
        hook.insert("url".into(), json!("(set)"));
    }
    json!({
        "name": rule.name,
        "scope": rule.scope.kind(),
        "scope_id": rule.scope.id(),
        "stage": rule.stage.as_str(),
        "action": rule.action.as_str(),
        "restore": rule.restore,
        "mode": rule.mode.as_str(),
        "enabled": rule.enabled,
        "checks": checks,
        "uninspectable": rule.uninspectable.as_str(),
    })
}

/// The columns a create or patch writes, in [`bind`]'s order.
const WRITTEN: &str =
    "name, scope, scope_id, stage, action, restore, mode, enabled, checks, uninspectable";

fn bind<'q>(query: RowQuery<'q, GuardrailRow>, rule: &'q Guardrail) -> RowQuery<'q, GuardrailRow> {
    query
        .bind(&rule.name)
        .bind(rule.scope.kind())
        .bind(rule.scope.id())
        .bind(rule.stage.as_str())
        .bind(rule.action.as_str())
        .bind(rule.restore)
        .bind(rule.mode.as_str())
        .bind(rule.enabled)
        .bind(serde_json::to_value(&rule.checks).unwrap_or(Value::Null))
        .bind(rule.uninspectable.as_str())
}

/// What the rule names exists (locked until the write commits, so a concurrent delete waits
/// and its trigger removes this rule too), and no other rule has its name.
async fn check(tx: &mut sqlx::PgConnection, rule: &Guardrail, id: Option<i64>) -> ApiResult<()> {
    let table = match rule.scope {
        GuardScope::All => None,
        GuardScope::Route(_) => Some("routes"),
        GuardScope::Team(_) => Some("teams"),
        GuardScope::Token(_) => Some("tokens"),
    };
    if let (Some(table), Some(scope_id)) = (table, rule.scope.id()) {
        let exists: Option<i64> = sqlx::query_scalar(&format!(
            "SELECT id FROM {table} WHERE id = $1 FOR KEY SHARE"
        ))
        .bind(scope_id)
        .fetch_optional(&mut *tx)
        .await?;
        if exists.is_none() {
            return Err(ApiError::validation(
                "scope_id",
                format!("scope_id: {} {scope_id} does not exist", rule.scope.kind()),
            ));
        }
    }
    if let Some(m) = &rule.checks.moderation {
        let channel: Option<i64> = sqlx::query_scalar("SELECT id FROM channels WHERE name = $1")
            .bind(&m.channel)
            .fetch_optional(&mut *tx)
            .await?;
        if channel.is_none() {
            return Err(ApiError::validation(
                "checks.moderation.channel",
                format!(
                    "checks.moderation.channel: unknown channel {:?}",
                    bounded(&m.channel, 64)
                ),
            ));
        }
    }
    let other: Option<i64> =
        sqlx::query_scalar("SELECT id FROM guardrails WHERE name = $1 AND id IS DISTINCT FROM $2")
            .bind(&rule.name)
            .bind(id)
            .fetch_optional(&mut *tx)
            .await?;
    match other {
        Some(other) => Err(duplicate(&rule.name, Some(other))),
        None => Ok(()),
    }
}

fn duplicate(name: &str, other: Option<i64>) -> ApiError {
    let which = other
        .map(|id| format!(" (guardrail {id})"))
        .unwrap_or_default();
    ApiError::validation(
        "name",
        format!(
            "name: a guardrail named {:?} exists already{which}",
            bounded(name, 64)
        ),
    )
}

/// A write's error: a unique violation of the name that raced the check is the same 422.
fn write_error(rule: &Guardrail) -> impl FnOnce(sqlx::Error) -> ApiError + '_ {
    move |error| match &error {
        sqlx::Error::Database(db) if db.constraint() == Some("guardrails_name_key") => {
            duplicate(&rule.name, None)
        }
        _ => ApiError::from(error),
    }
}

/// The create of `POST /api/v1/guardrails`, in `db` (see [`Db`]).
pub(super) async fn create_in<'c>(
    db: impl Db<'c>,
    by: By<'_>,
    raw: GuardrailCreate,
) -> ApiResult<Response> {
    let rule = checked(raw.into_spec()?, 0)?;
    let mut tx = db.begin().await?;
    check(&mut tx, &rule, None).await?;
    let sql = insert_sql::<GuardrailRow>(WRITTEN);
    let row = bind(sqlx::query_as(&sql), &rule)
        .fetch_one(&mut *tx)
        .await
        .map_err(write_error(&rule))?;
    let (id, view) = (row.id, GuardrailView::from(row));
    commit_view::<GuardrailRow>(tx, by, Change::Create, id, detail(&rule), view).await
}

/// The update of `PATCH /api/v1/guardrails/{id}`, in `db` (see [`Db`]).
pub(super) async fn patch_in<'c>(
    db: impl Db<'c>,
    by: By<'_>,
    id: i64,
    patch: GuardrailPatch,
) -> ApiResult<Response> {
    let (mut tx, current) = lock_row::<GuardrailRow>(db, id).await?;
    let current = stored(current)?;
    let rule = checked(
        GuardrailSpec {
            checks: match &patch.checks {
                Some(value) => checks(value)?,
                None => current.checks,
            },
            name: patch.name.unwrap_or(current.name),
            scope_id: match patch.scope_id {
                Some(id) => id,
                None if patch.scope.as_deref() == Some("all") => None,
                None => current.scope_id,
            },
            scope: patch.scope.unwrap_or(current.scope),
            stage: patch.stage.unwrap_or(current.stage),
            action: patch.action.unwrap_or(current.action),
            restore: patch.restore.unwrap_or(current.restore),
            mode: patch.mode.unwrap_or(current.mode),
            enabled: patch.enabled.unwrap_or(current.enabled),
            uninspectable: patch.uninspectable.unwrap_or(current.uninspectable),
        },
        id,
    )?;
    check(&mut tx, &rule, Some(id)).await?;
    let sql = update_sql::<GuardrailRow>(WRITTEN);
    let row = bind(sqlx::query_as(&sql), &rule)
        .bind(id)
        .fetch_one(&mut *tx)
        .await
        .map_err(write_error(&rule))?;
    let view = GuardrailView::from(row);
    commit_view::<GuardrailRow>(tx, by, Change::Update, id, detail(&rule), view).await
}

/// The delete of `DELETE /api/v1/guardrails/{id}`, in `db` (see [`Db`]).
pub(super) async fn delete_in<'c>(db: impl Db<'c>, by: By<'_>, id: i64) -> ApiResult<Response> {
    delete_locked::<GuardrailRow>(db, by, id, |current| json!({ "name": current.name })).await
}
