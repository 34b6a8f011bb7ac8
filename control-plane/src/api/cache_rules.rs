//! `/api/v1/cache_rules`: response cache rules (which requests the proxies answer from their
//! exact response cache, for how long, and who shares an answer). Validated by the engine's own
//! [`CacheRule::check`], the one the standalone file and the snapshot stream use.

use axum::response::Response;
use serde::{Deserialize, Serialize};
use serde_json::json;
use switchyard_engine::cache::{
    parse_endpoints, CacheRule, CacheScope, SemanticMode, SemanticPart,
};
use utoipa::ToSchema;

use super::access::Owned;
use super::crud::{crud, Item};
use super::extract::nullable;
use super::rows::{
    check_reference, commit_view, delete_row, insert_sql, lock_row, table_row, team_after,
    team_before, update_sql, By, Change, Db, RowQuery, RowView,
};
use crate::db::ts;
use crate::error::{ApiError, ApiResult};

/// The default largest answer kept: 1 MiB.
pub const DEFAULT_MAX_ENTRY_BYTES: u64 = 1 << 20;

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct CacheRuleView {
    pub id: i64,
    pub name: String,
    /// Matched against the model the client asked for (`*`/`?` wildcards), or equal to the
    /// pattern of the route serving it.
    pub model_pattern: String,
    /// `chat_completions`, `completions`, `embeddings`, `messages`, `generate_content`,
    /// `responses`.
    pub endpoints: Vec<String>,
    pub ttl_seconds: i64,
    pub max_entry_bytes: i64,
    /// `route`, `team` or `token`.
    pub scope: String,
    pub deterministic_only: bool,
    pub enabled: bool,
    /// The match by meaning after an exact miss, or `null`.
    pub semantic: Option<SemanticView>,
    /// The one team whose tokens' requests the rule covers (and whose admins manage it);
    /// `null`: every request.
    pub team_id: Option<i64>,
    #[schema(format = DateTime)]
    pub created_at: String,
    #[schema(format = DateTime)]
    pub updated_at: String,
}

/// A cache rule's semantic part as written and shown.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SemanticView {
    /// The channel asked for the prompt's embedding (its id); it must speak OpenAI's embeddings
    /// API.
    pub channel: i64,
    /// The embedding model to ask it for.
    pub model: String,
    /// The cosine similarity a match needs: above 0, at most 1.
    pub threshold: f64,
    /// `trial` (the default: matches are counted and compared, never served) or `serve`.
    #[serde(default)]
    pub mode: Option<String>,
}

impl From<&SemanticPart> for SemanticView {
    fn from(part: &SemanticPart) -> SemanticView {
        SemanticView {
            channel: part.channel,
            model: part.model.clone(),
            threshold: part.threshold,
            mode: Some(part.mode.as_str().to_owned()),
        }
    }
}

#[derive(sqlx::FromRow)]
pub(super) struct CacheRuleRow {
    id: i64,
    name: String,
    model_pattern: String,
    endpoints: Vec<String>,
    ttl_seconds: i64,
    max_entry_bytes: i64,
    scope: String,
    deterministic_only: bool,
    enabled: bool,
    semantic_channel_id: Option<i64>,
    semantic_model: Option<String>,
    semantic_threshold: Option<f64>,
    semantic_mode: Option<String>,
    team_id: Option<i64>,
    created_at: String,
    updated_at: String,
}

table_row!(CacheRuleRow, "cache_rules", "cache rule", columns);

impl CacheRuleRow {
    /// Whether the rule has a semantic part.
    pub(super) fn has_semantic(&self) -> bool {
        self.semantic_channel_id.is_some()
    }

    /// The semantic part's mode, as stored.
    pub(super) fn semantic_mode(&self) -> Option<&str> {
        self.semantic_mode.as_deref()
    }
}

impl RowView for CacheRuleView {
    type Row = CacheRuleRow;
}

crud!(
    CacheRuleView,
    CacheRuleCreate,
    CacheRulePatch,
    Item::new("cache_rule")
        .invalid("a field is invalid, or the name is taken")
        .owned(Owned::CacheRule)
);

impl From<CacheRuleRow> for CacheRuleView {
    fn from(r: CacheRuleRow) -> CacheRuleView {
        let semantic = stored_semantic(&r).ok().flatten();
        CacheRuleView {
            id: r.id,
            name: r.name,
            model_pattern: r.model_pattern,
            endpoints: r.endpoints,
            ttl_seconds: r.ttl_seconds,
            max_entry_bytes: r.max_entry_bytes,
            scope: r.scope,
            deterministic_only: r.deterministic_only,
            enabled: r.enabled,
            semantic: semantic.as_ref().map(SemanticView::from),
            team_id: r.team_id,
            created_at: r.created_at,
            updated_at: r.updated_at,
        }
    }
}

fn columns() -> String {
    format!(
        "id, name, model_pattern, endpoints, ttl_seconds, max_entry_bytes, scope, \
         deterministic_only, enabled, semantic_channel_id, semantic_model, semantic_threshold, \
         semantic_mode, team_id, {} AS created_at, {} AS updated_at",
        ts("created_at"),
        ts("updated_at")
    )
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CacheRuleCreate {
    pub name: String,
    pub model_pattern: String,
    pub endpoints: Vec<String>,
    pub ttl_seconds: u64,
    /// Default 1048576.
    pub max_entry_bytes: Option<u64>,
    /// `route`, `team` (the default) or `token`.
    pub scope: Option<String>,
    pub deterministic_only: Option<bool>,
    pub enabled: Option<bool>,
    /// The match by meaning after an exact miss.
    pub semantic: Option<SemanticView>,
    /// Covers only requests of this team's tokens; absent: every request (for an admin limited
    /// to one team: that team).
    pub team_id: Option<i64>,
}

/// Any subset; `semantic: null` takes the semantic part away.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CacheRulePatch {
    pub name: Option<String>,
    pub model_pattern: Option<String>,
    pub endpoints: Option<Vec<String>>,
    pub ttl_seconds: Option<u64>,
    pub max_entry_bytes: Option<u64>,
    pub scope: Option<String>,
    pub deterministic_only: Option<bool>,
    pub enabled: Option<bool>,
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<SemanticView>)]
    pub semantic: Option<Option<SemanticView>>,
    /// `null`: every request.
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<i64>)]
    pub team_id: Option<Option<i64>>,
}

fn endpoints(names: &[String]) -> ApiResult<Vec<switchyard_engine::CacheEndpoint>> {
    parse_endpoints(names).map_err(|m| ApiError::validation("endpoints", format!("endpoints: {m}")))
}

fn scope(text: &str) -> ApiResult<CacheScope> {
    CacheScope::parse(text).ok_or_else(|| {
        ApiError::validation(
            "scope",
            format!(
                "scope: unknown scope {:?} (route, team or token)",
                crate::error::bounded(text, 32)
            ),
        )
    })
}

fn semantic(view: SemanticView) -> ApiResult<SemanticPart> {
    let mode = match view.mode.as_deref() {
        None => SemanticMode::Trial,
        Some(text) => SemanticMode::parse(text).ok_or_else(|| {
            ApiError::validation(
                "semantic.mode",
                format!(
                    "semantic.mode: unknown mode {:?} (trial or serve)",
                    crate::error::bounded(text, 32)
                ),
            )
        })?,
    };
    Ok(SemanticPart {
        channel: view.channel,
        model: view.model,
        threshold: view.threshold,
        mode,
    })
}

/// The stored row's semantic part.
fn stored_semantic(row: &CacheRuleRow) -> ApiResult<Option<SemanticPart>> {
    SemanticPart::from_columns(
        row.semantic_channel_id,
        row.semantic_model.clone(),
        row.semantic_threshold,
        row.semantic_mode.as_deref(),
    )
    .map_err(|m| ApiError::Internal(anyhow::anyhow!("cache rule {}: {m}", row.id)))
}

fn checked(rule: CacheRule) -> ApiResult<CacheRule> {
    rule.check()
        .map_err(|(field, message)| ApiError::validation(field, format!("{field}: {message}")))?;
    Ok(rule)
}

impl TryFrom<CacheRuleCreate> for CacheRule {
    type Error = ApiError;

    fn try_from(raw: CacheRuleCreate) -> ApiResult<CacheRule> {
        checked(CacheRule {
            id: 0,
            name: raw.name,
            model_pattern: raw.model_pattern,
            endpoints: endpoints(&raw.endpoints)?,
            ttl_seconds: raw.ttl_seconds,
            max_entry_bytes: raw.max_entry_bytes.unwrap_or(DEFAULT_MAX_ENTRY_BYTES),
            scope: raw.scope.as_deref().map_or(Ok(CacheScope::Team), scope)?,
            deterministic_only: raw.deterministic_only.unwrap_or(false),
            enabled: raw.enabled.unwrap_or(true),
            semantic: raw.semantic.map(semantic).transpose()?,
            team: raw.team_id,
        })
    }
}

/// The rule as stored (the table's checks keep it valid; a stored value the engine would refuse
/// is refused by the snapshot compiler, not here).
fn stored(row: CacheRuleRow) -> ApiResult<CacheRule> {
    let semantic = stored_semantic(&row)?;
    Ok(CacheRule {
        id: row.id,
        name: row.name,
        model_pattern: row.model_pattern,
        endpoints: endpoints(&row.endpoints)?,
        ttl_seconds: u64::try_from(row.ttl_seconds).unwrap_or(0),
        max_entry_bytes: u64::try_from(row.max_entry_bytes).unwrap_or(0),
        scope: scope(&row.scope)?,
        deterministic_only: row.deterministic_only,
        enabled: row.enabled,
        semantic,
        team: row.team_id,
    })
}

/// The audit log's record of a rule.
fn detail(rule: &CacheRule) -> serde_json::Value {
    json!({
        "name": rule.name,
        "model_pattern": rule.model_pattern,
        "endpoints": rule.endpoints.iter().map(|e| e.as_str()).collect::<Vec<_>>(),
        "ttl_seconds": rule.ttl_seconds,
        "max_entry_bytes": rule.max_entry_bytes,
        "scope": rule.scope.as_str(),
        "deterministic_only": rule.deterministic_only,
        "enabled": rule.enabled,
        "semantic": rule.semantic.as_ref().map(SemanticView::from),
        "team_id": rule.team,
    })
}

/// The columns a create or patch writes, in [`bind`]'s order.
const WRITTEN: &str = "name, model_pattern, endpoints, ttl_seconds, max_entry_bytes, scope, \
    deterministic_only, enabled, semantic_channel_id, semantic_model, semantic_threshold, \
    semantic_mode, team_id";

fn bind<'q>(query: RowQuery<'q, CacheRuleRow>, rule: &'q CacheRule) -> RowQuery<'q, CacheRuleRow> {
    let endpoints: Vec<String> = rule
        .endpoints
        .iter()
        .map(|e| e.as_str().to_owned())
        .collect();
    query
        .bind(&rule.name)
        .bind(&rule.model_pattern)
        .bind(endpoints)
        .bind(i64::try_from(rule.ttl_seconds).unwrap_or(i64::MAX))
        .bind(i64::try_from(rule.max_entry_bytes).unwrap_or(i64::MAX))
        .bind(rule.scope.as_str())
        .bind(rule.deterministic_only)
        .bind(rule.enabled)
        .bind(rule.semantic.as_ref().map(|s| s.channel))
        .bind(rule.semantic.as_ref().map(|s| s.model.clone()))
        .bind(rule.semantic.as_ref().map(|s| s.threshold))
        .bind(rule.semantic.as_ref().map(|s| s.mode.as_str()))
        .bind(rule.team)
}

/// No other rule has this name (a 422 naming `name`), the semantic part's channel exists (a 422
/// naming `semantic.channel`), and so does the team (a 422 naming `team_id`).
async fn check(tx: &mut sqlx::PgConnection, rule: &CacheRule, id: Option<i64>) -> ApiResult<()> {
    if let Some(team) = rule.team {
        check_reference(&mut *tx, "teams", "team_id", team).await?;
    }
    if let Some(part) = &rule.semantic {
        let exists: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM channels WHERE id = $1 FOR KEY SHARE)",
        )
        .bind(part.channel)
        .fetch_one(&mut *tx)
        .await?;
        if !exists {
            return Err(ApiError::validation(
                "semantic.channel",
                format!("semantic.channel: channel {} does not exist", part.channel),
            ));
        }
    }
    let other: Option<i64> =
        sqlx::query_scalar("SELECT id FROM cache_rules WHERE name = $1 AND id IS DISTINCT FROM $2")
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
        .map(|id| format!(" (cache rule {id})"))
        .unwrap_or_default();
    ApiError::validation(
        "name",
        format!(
            "name: a cache rule named {:?} exists already{which}",
            crate::error::bounded(name, 64)
        ),
    )
}

/// A write's error: a unique violation of the name that raced the check is the same 422.
fn write_error(rule: &CacheRule) -> impl FnOnce(sqlx::Error) -> ApiError + '_ {
    move |error| match &error {
        sqlx::Error::Database(db) if db.constraint() == Some("cache_rules_name_key") => {
            duplicate(&rule.name, None)
        }
        _ => ApiError::from(error),
    }
}

/// The create of `POST /api/v1/cache_rules`, in `db` (see [`Db`]).
pub(super) async fn create_in<'c>(
    db: impl Db<'c>,
    by: By<'_>,
    raw: CacheRuleCreate,
) -> ApiResult<Response> {
    let mut rule = CacheRule::try_from(raw)?;
    if let Some(team) = by.team {
        // A team admin's rule covers its team: absent, the team is its own.
        rule.team.get_or_insert(team);
        team_rule(&rule, team)?;
    }
    let mut tx = db.begin().await?;
    check(&mut tx, &rule, None).await?;
    let sql = insert_sql::<CacheRuleRow>(WRITTEN);
    let row = bind(sqlx::query_as(&sql), &rule)
        .fetch_one(&mut *tx)
        .await
        .map_err(write_error(&rule))?;
    let (id, view) = (row.id, CacheRuleView::from(row));
    team_after(&mut tx, by, Owned::CacheRule, id).await?;
    commit_view::<CacheRuleRow>(tx, by, Change::Create, id, detail(&rule), view).await
}

/// The update of `PATCH /api/v1/cache_rules/{id}`, in `db` (see [`Db`]).
pub(super) async fn patch_in<'c>(
    db: impl Db<'c>,
    by: By<'_>,
    id: i64,
    patch: CacheRulePatch,
) -> ApiResult<Response> {
    let (mut tx, current) = lock_row::<CacheRuleRow>(db, id).await?;
    team_before(&mut tx, by, Owned::CacheRule, id).await?;
    let current = stored(current)?;
    let rule = checked(CacheRule {
        id,
        name: patch.name.unwrap_or(current.name),
        model_pattern: patch.model_pattern.unwrap_or(current.model_pattern),
        endpoints: match patch.endpoints {
            Some(names) => endpoints(&names)?,
            None => current.endpoints,
        },
        ttl_seconds: patch.ttl_seconds.unwrap_or(current.ttl_seconds),
        max_entry_bytes: patch.max_entry_bytes.unwrap_or(current.max_entry_bytes),
        scope: match patch.scope {
            Some(text) => scope(&text)?,
            None => current.scope,
        },
        deterministic_only: patch
            .deterministic_only
            .unwrap_or(current.deterministic_only),
        enabled: patch.enabled.unwrap_or(current.enabled),
        semantic: match patch.semantic {
            Some(Some(view)) => Some(semantic(view)?),
            Some(None) => None,
            None => current.semantic,
        },
        team: patch.team_id.unwrap_or(current.team),
    })?;
    if let Some(team) = by.team {
        team_rule(&rule, team)?;
    }
    check(&mut tx, &rule, Some(id)).await?;
    let sql = update_sql::<CacheRuleRow>(WRITTEN);
    let row = bind(sqlx::query_as(&sql), &rule)
        .bind(id)
        .fetch_one(&mut *tx)
        .await
        .map_err(write_error(&rule))?;
    let view = CacheRuleView::from(row);
    team_after(&mut tx, by, Owned::CacheRule, id).await?;
    commit_view::<CacheRuleRow>(tx, by, Change::Update, id, detail(&rule), view).await
}

/// What an admin limited to `team` may store: a rule of that team, without a semantic part (its
/// embeddings channel is the fleet's). A 403 otherwise.
fn team_rule(rule: &CacheRule, team: i64) -> ApiResult<()> {
    let refused = |message: String| Err(ApiError::OutsideTeam { message });
    match rule.team {
        Some(of) if of != team => refused(format!(
            "team_id: team {of} is not team {team}, the only team this admin token administers"
        )),
        None => refused(format!(
            "team_id: a rule for every team is for fleet admins; this admin token administers \
             team {team} only"
        )),
        _ if rule.semantic.is_some() => refused(
            "semantic: a semantic part asks a fleet channel for embeddings; it is for fleet \
             admins"
                .to_owned(),
        ),
        _ => Ok(()),
    }
}

/// The delete of `DELETE /api/v1/cache_rules/{id}`, in `db` (see [`Db`]).
pub(super) async fn delete_in<'c>(db: impl Db<'c>, by: By<'_>, id: i64) -> ApiResult<Response> {
    let (mut tx, current) = lock_row::<CacheRuleRow>(db, id).await?;
    team_before(&mut tx, by, Owned::CacheRule, id).await?;
    delete_row::<CacheRuleRow>(tx, by, id, json!({ "name": current.name })).await
}
