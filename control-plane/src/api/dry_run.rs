//! `POST /api/v1/dry-run`: what a proposed set of changes would move, without changing anything.
//!
//! How: one Postgres transaction (REPEATABLE READ, `lock_timeout` 5 s) compiles the "before"
//! snapshot, applies every change through the very handler code the REST API runs (each in its own
//! savepoint, so validation, foreign keys, cascades and conflicts are exactly those of a real
//! write), compiles the "after" snapshot from the same transaction, which sees its own changes,
//! and is then **rolled back**. The revision bump, the audit rows and the NOTIFY a write queues
//! live in that transaction and vanish with it: no proxy, replica or audit reader ever sees a
//! dry run. Nothing is written to the fleet's shared state either (the channel handler's breaker
//! reset is given no live state here). The one trace a dry run can leave is a gap in id sequences
//! (Postgres does not roll sequences back).
//!
//! Then both snapshots go through [`switchyard_engine::select`] — the engine the proxies and
//! explain run — with the same health view and seed, for every (model, group, team) either
//! snapshot knows, and only what differs is reported. Prices and limits do not move a selection
//! (upstream limits depend on live counters, which explain shows), so their changes are reported
//! as they are: every price and limit created, changed or deleted, directly or by a cascade.

use std::collections::{BTreeMap, BTreeSet};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use axum::Json;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use switchyard_engine::{
    select, Decision, HealthView, NoHealth, Outcome, SelectionConstraint, Snapshot, SplitMix64,
    DEFAULT_GROUP,
};
use utoipa::ToSchema;

use super::extract::{parse_body, JsonBody};
use super::rows::By;
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::state::AppState;

/// At most this many (model, group, team) selections are compared per snapshot; past it the
/// answer says `truncated`.
pub const MAX_SELECTIONS: usize = 5_000;

/// At most this many changes in one dry run.
pub const MAX_CHANGES: usize = 100;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DryRunRequest {
    /// Applied in order, as if sent one after the other; none is kept.
    pub changes: Vec<ProposedChange>,
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize, ToSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ChangeOp {
    Create,
    Patch,
    Delete,
    /// Settings only: replace the whole document (`PUT /api/v1/settings`).
    Put,
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize, ToSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ResourceKind {
    Channel,
    Credential,
    Route,
    Member,
    Token,
    Team,
    Price,
    Limit,
    Shadow,
    Settings,
}

/// One change, in the terms of the REST call it stands for.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ProposedChange {
    pub op: ChangeOp,
    pub resource: ResourceKind,
    /// The resource's id (`patch`, `delete`).
    pub id: Option<i64>,
    /// The parent's id for a `create` of a credential (its channel) or a member (its route).
    pub parent_id: Option<i64>,
    /// The request body the REST call would send (`create`, `patch`, `put`); validated the same way.
    #[schema(value_type = Option<ChangeBody>)]
    pub body: Option<Value>,
}

/// Schema only: a change's body is the body of the REST call it stands for.
#[derive(Deserialize, ToSchema)]
#[serde(untagged)]
#[allow(dead_code)]
pub enum ChangeBody {
    ChannelCreate(super::channels::ChannelCreate),
    ChannelPatch(super::channels::ChannelPatch),
    CredentialCreate(super::credentials::CredentialCreate),
    CredentialPatch(super::credentials::CredentialPatch),
    RouteCreate(super::routes::RouteCreate),
    RoutePatch(super::routes::RoutePatch),
    MemberCreate(super::members::MemberCreate),
    MemberPatch(super::members::MemberPatch),
    TokenCreate(super::tokens::TokenCreate),
    TokenPatch(super::tokens::TokenPatch),
    TeamCreate(super::teams::TeamCreate),
    TeamPatch(super::teams::TeamPatch),
    PriceCreate(super::prices::PriceCreate),
    PricePatch(super::prices::PricePatch),
    LimitCreate(super::limits::LimitCreate),
    LimitPatch(super::limits::LimitPatch),
    ShadowCreate(super::shadows::ShadowCreate),
    ShadowPatch(super::shadows::ShadowPatch),
    SettingsChanges(super::schema::SettingsChanges),
}

/// What applying one change answered inside the dry run.
#[derive(Debug, Serialize, ToSchema)]
pub struct ChangeResult {
    pub index: usize,
    /// The HTTP status the real call would have answered.
    pub status: u16,
    /// The id a create would have produced (it does not exist after the dry run).
    pub id: Option<i64>,
}

/// One member's selection probability in one (model, group, team), before and after.
#[derive(Debug, Serialize, ToSchema, PartialEq)]
pub struct MemberMove {
    pub member_id: i64,
    pub channel_id: i64,
    pub upstream_model: String,
    /// `null`: not a candidate in that snapshot.
    pub before: Option<f64>,
    pub after: Option<f64>,
    pub reasons_before: Vec<String>,
    pub reasons_after: Vec<String>,
}

/// Selection for one (model, group, team) that the change would move.
#[derive(Debug, Serialize, ToSchema)]
pub struct AffectedSelection {
    pub model: String,
    pub group: String,
    /// `null`: a token without a team.
    pub team_id: Option<i64>,
    pub route_before: Option<i64>,
    pub route_after: Option<i64>,
    /// `selected`, `model_not_found`, `model_not_allowed` or `no_eligible_member`.
    pub outcome_before: String,
    pub outcome_after: String,
    /// Served before, would fail after.
    pub newly_failing: bool,
    pub members: Vec<MemberMove>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct UnreachableMember {
    pub member_id: i64,
    pub route_id: i64,
    pub channel_id: i64,
    pub upstream_model: String,
    /// The change deletes it (rather than leaving it with no chance of selection).
    pub deleted: bool,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ModelMove {
    pub model: String,
    pub route_before: Option<i64>,
    pub route_after: Option<i64>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct NewlyFailing {
    pub model: String,
    pub group: String,
    pub team_id: Option<i64>,
    pub outcome: String,
}

/// A token whose requests would be served differently: group, team or enabled changed, or it
/// is created or deleted. `null` side: the token does not exist there.
#[derive(Debug, Serialize, ToSchema)]
pub struct TokenMove {
    pub token_id: i64,
    pub name: String,
    pub before: Option<TokenScope>,
    pub after: Option<TokenScope>,
}

#[derive(Debug, Serialize, ToSchema, PartialEq, Eq, Clone)]
pub struct TokenScope {
    pub group: String,
    pub team_id: Option<i64>,
    pub enabled: bool,
    /// RFC 3339 UTC; `null`: never expires.
    #[schema(format = DateTime)]
    pub expires_at: Option<String>,
}

/// A price as a snapshot holds it, amounts in USD per million tokens (exact decimal strings).
#[derive(Debug, Serialize, ToSchema, PartialEq, Eq, Clone)]
pub struct PriceTerms {
    pub channel_id: i64,
    pub model_pattern: String,
    pub input_per_million: String,
    pub output_per_million: String,
    pub cached_input_per_million: Option<String>,
}

/// A price created, changed or deleted (`null` side: it does not exist there).
#[derive(Debug, Serialize, ToSchema)]
pub struct PriceMove {
    pub price_id: i64,
    pub before: Option<PriceTerms>,
    pub after: Option<PriceTerms>,
}

/// A limit as a snapshot holds it.
#[derive(Debug, Serialize, ToSchema, PartialEq, Clone)]
pub struct LimitTerms {
    #[schema(value_type = super::schema::LimitScopeName)]
    pub scope: String,
    pub scope_id: i64,
    #[schema(value_type = super::schema::LimitMetricName)]
    pub metric: String,
    #[schema(value_type = super::schema::LimitWindowName)]
    pub window: String,
    /// For `spend`, USD as an exact decimal string; otherwise a whole number.
    #[schema(value_type = super::amount::LimitValueOutput)]
    pub value: Value,
    #[schema(value_type = super::schema::LimitModeName)]
    pub mode: String,
}

/// A limit created, changed or deleted, directly or because its scope was deleted.
#[derive(Debug, Serialize, ToSchema)]
pub struct LimitMove {
    pub limit_id: i64,
    pub before: Option<LimitTerms>,
    pub after: Option<LimitTerms>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct DryRunResponse {
    /// The revision the dry run started from; nothing was written, so it is still current.
    pub base_revision: u64,
    /// "redis" (the fleet's live health view) or "none".
    pub health_view: String,
    pub results: Vec<ChangeResult>,
    /// Every (model, group, team) whose selection would change, with each member's probability.
    pub affected: Vec<AffectedSelection>,
    /// Members that had a chance of selection somewhere before and have none after.
    pub unreachable_members: Vec<UnreachableMember>,
    /// Models that resolve before and not after.
    pub models_unresolved: Vec<ModelMove>,
    /// Models that would resolve to another route (or newly resolve).
    pub models_rerouted: Vec<ModelMove>,
    /// Requests that are served before and would fail after.
    pub newly_failing: Vec<NewlyFailing>,
    pub tokens: Vec<TokenMove>,
    /// Prices created, changed or deleted.
    pub prices: Vec<PriceMove>,
    /// Limits created, changed or deleted (deleting a scope deletes its limits).
    pub limits: Vec<LimitMove>,
    /// More than the comparison limit of selections exist; only the first were compared.
    pub truncated: bool,
}

#[utoipa::path(post, path = "/api/v1/dry-run", tag = "dry-run", operation_id = "dry_run",
    request_body = DryRunRequest,
    responses(
        (status = 200, description = "what the changes would move; nothing was changed",
         body = DryRunResponse),
        (status = 400, description = "the body is not a JSON object", body = ErrorBody),
        (status = 404, description = "a change names a resource that does not exist", body = ErrorBody),
        (status = 409, description = "a change could not be applied (e.g. a delete still referenced)",
         body = ErrorBody),
        (status = 422, description = "a change is invalid; `param` names `changes[i]…`",
         body = ErrorBody)))]
pub async fn dry_run(
    State(state): State<AppState>,
    JsonBody(request): JsonBody<DryRunRequest>,
) -> ApiResult<Json<DryRunResponse>> {
    if request.changes.len() > MAX_CHANGES {
        return Err(ApiError::validation(
            "changes",
            format!(
                "changes: at most {MAX_CHANGES} changes per dry run, got {}",
                request.changes.len()
            ),
        ));
    }
    let mut tx = state.pool.begin().await?;
    sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        .execute(&mut *tx)
        .await?;
    sqlx::query("SET LOCAL lock_timeout = '5s'")
        .execute(&mut *tx)
        .await?;
    let before = crate::compile::compile_in(&mut tx)
        .await
        .map_err(ApiError::Internal)?;
    let mut results = Vec::with_capacity(request.changes.len());
    for (index, change) in request.changes.into_iter().enumerate() {
        let response = apply(&mut tx, By::each("dry-run"), change)
            .await
            .map_err(|error| at_change(index, error))?;
        results.push(result_of(index, response).await);
    }
    let after = crate::compile::compile_in(&mut tx)
        .await
        .map_err(ApiError::Internal)?;
    // Nothing of the above may stay: the revision bumps, audit rows and NOTIFYs go with it.
    tx.rollback().await?;

    let now_ms = crate::now_ms();
    let mut report = None;
    let health_view = match &state.live {
        Some(live) => {
            live.store().with_view(&mut |view: &dyn HealthView| {
                report = Some(compare(&before, &after, view, now_ms));
            });
            live.source()
        }
        None => {
            report = Some(compare(&before, &after, &NoHealth, now_ms));
            "none"
        }
    };
    let report = report.ok_or_else(|| {
        ApiError::Internal(anyhow::anyhow!("the state store never ran the comparison"))
    })?;
    Ok(Json(DryRunResponse {
        base_revision: before.revision,
        health_view: health_view.to_owned(),
        results,
        affected: report.affected,
        unreachable_members: report.unreachable,
        models_unresolved: report.unresolved,
        models_rerouted: report.rerouted,
        newly_failing: report.newly_failing,
        tokens: report.tokens,
        prices: price_moves(&before, &after),
        limits: limit_moves(&before, &after),
        truncated: report.truncated,
    }))
}

/// Where in the request a failure of one change points.
enum Field {
    Op,
    Id,
    ParentId,
    Body,
}

/// A change that failed, and where in it the failure points.
pub(super) struct ChangeError {
    field: Field,
    error: ApiError,
}

impl From<ApiError> for ChangeError {
    fn from(error: ApiError) -> ChangeError {
        ChangeError {
            field: Field::Body,
            error,
        }
    }
}

/// Names the change (and the field inside it) in a failure.
fn at_change(index: usize, error: ChangeError) -> ApiError {
    let prefix = format!("changes[{index}]");
    at_place(&prefix, &format!("{prefix}.body"), error)
}

/// Names where a failed change stands: `prefix` is the change, `body` its body (a dry run's
/// `changes[i]` and `changes[i].body`; a configuration file's resource, `routes[2]`, for both).
pub(super) fn at_place(
    prefix: &str,
    body: &str,
    ChangeError { field, error }: ChangeError,
) -> ApiError {
    let field_path = match field {
        Field::Op => format!("{prefix}.op"),
        Field::Id => format!("{prefix}.id"),
        Field::ParentId => format!("{prefix}.parent_id"),
        Field::Body => body.to_owned(),
    };
    match error {
        ApiError::Validation { param, message } => {
            let param = if param.is_empty() || param == "." {
                field_path
            } else if matches!(field, Field::Body) {
                format!("{field_path}.{param}")
            } else {
                field_path
            };
            ApiError::Validation {
                message: format!("{param}: {message}"),
                param,
            }
        }
        ApiError::BadRequest { param, message } => {
            let param = match param {
                Some(p) if matches!(field, Field::Body) => format!("{field_path}.{p}"),
                _ => field_path,
            };
            ApiError::Validation {
                message: format!("{param}: {message}"),
                param,
            }
        }
        ApiError::NotFound { resource, id } => ApiError::Validation {
            message: format!("{field_path}: {resource} {id} not found"),
            param: field_path,
        },
        ApiError::Conflict { message } => ApiError::Conflict {
            message: format!("{prefix}: {message}"),
        },
        other => other,
    }
}

fn required(value: Option<i64>, field: Field, what: &str) -> Result<i64, ChangeError> {
    let name = match field {
        Field::Op => "op",
        Field::Id => "id",
        Field::ParentId => "parent_id",
        Field::Body => "body",
    };
    value.ok_or_else(|| ChangeError {
        error: ApiError::validation("", format!("{name} is required {what}")),
        field,
    })
}

fn body<T: DeserializeOwned>(change: &ProposedChange) -> Result<T, ChangeError> {
    let value = change.body.clone().ok_or_else(|| ChangeError {
        field: Field::Body,
        error: ApiError::validation("", "body is required for this change"),
    })?;
    let bytes = serde_json::to_vec(&value)
        .map_err(|e| ApiError::Internal(anyhow::anyhow!("re-encoding a change body: {e}")))?;
    Ok(parse_body(&Bytes::from(bytes))?)
}

/// Applies one change through its REST handler's code, in a savepoint of `tx`: a dry run's
/// change, or one of the changes a configuration file makes.
pub(super) async fn apply(
    tx: &mut sqlx::PgConnection,
    by: By<'_>,
    change: ProposedChange,
) -> Result<Response, ChangeError> {
    use ChangeOp::{Create, Delete, Patch, Put};
    let op_error = |message: String| ChangeError {
        field: Field::Op,
        error: ApiError::Validation {
            param: String::new(),
            message,
        },
    };
    match (change.resource, change.op) {
        (ResourceKind::Settings, Put) => {
            Ok(super::settings::put_settings_in(tx, by, body(&change)?).await?)
        }
        (ResourceKind::Settings, Patch) => {
            Ok(super::settings::patch_settings_in(tx, by, body(&change)?).await?)
        }
        (ResourceKind::Settings, op) => Err(op_error(format!(
            "settings take `put` or `patch`, not `{}`",
            op_name(op)
        ))),
        (_, Put) => Err(op_error("`put` applies to settings only".to_owned())),
        (_, Create) => create(tx, by, &change).await,
        (_, Patch) => {
            let id = required(change.id, Field::Id, "for a patch or delete")?;
            patch(tx, by, id, &change).await
        }
        (_, Delete) => {
            let id = required(change.id, Field::Id, "for a patch or delete")?;
            delete(tx, by, id, change.resource).await.map_err(on_id)
        }
    }
}

/// A failure naming the resource that is not there points at the change's `id`.
fn on_id(error: ApiError) -> ChangeError {
    let field = match error {
        ApiError::NotFound { .. } => Field::Id,
        _ => Field::Body,
    };
    ChangeError { field, error }
}

/// A failure naming the parent that is not there points at the change's `parent_id`.
fn on_parent(error: ApiError) -> ChangeError {
    let field = match error {
        ApiError::NotFound { .. } => Field::ParentId,
        _ => Field::Body,
    };
    ChangeError { field, error }
}

async fn create(
    tx: &mut sqlx::PgConnection,
    by: By<'_>,
    change: &ProposedChange,
) -> Result<Response, ChangeError> {
    use super::{channels, credentials, limits, members, prices, routes, shadows, teams, tokens};
    use ResourceKind as R;
    let response = match change.resource {
        R::Channel => channels::create_in(tx, by, body(change)?).await?,
        R::Credential => {
            let parent = required(change.parent_id, Field::ParentId, "to create a credential")?;
            let raw = body(change)?;
            credentials::create_in(tx, by, parent, raw)
                .await
                .map_err(on_parent)?
        }
        R::Route => routes::create_in(tx, by, body(change)?).await?,
        R::Member => {
            let parent = required(change.parent_id, Field::ParentId, "to create a member")?;
            let raw = body(change)?;
            members::create_in(tx, by, parent, raw)
                .await
                .map_err(on_parent)?
        }
        R::Token => tokens::create_in(tx, by, body(change)?).await?,
        R::Team => teams::create_in(tx, by, body(change)?).await?,
        R::Price => prices::create_in(tx, by, body(change)?).await?,
        R::Limit => limits::create_in(tx, by, body(change)?).await?,
        R::Shadow => shadows::create_in(tx, by, body(change)?).await?,
        R::Settings => return Err(ApiError::validation("", "settings are never created").into()),
    };
    Ok(response)
}

async fn patch(
    tx: &mut sqlx::PgConnection,
    by: By<'_>,
    id: i64,
    change: &ProposedChange,
) -> Result<Response, ChangeError> {
    use super::{channels, credentials, limits, members, prices, routes, shadows, teams, tokens};
    use ResourceKind as R;
    let result = match change.resource {
        R::Channel => channels::patch_in(tx, None, by, id, body(change)?).await,
        R::Credential => credentials::patch_in(tx, by, id, body(change)?).await,
        R::Route => routes::patch_in(tx, by, id, body(change)?).await,
        R::Member => members::patch_in(tx, by, id, body(change)?).await,
        R::Token => tokens::patch_in(tx, by, id, body(change)?).await,
        R::Team => teams::patch_in(tx, by, id, body(change)?).await,
        R::Price => prices::patch_in(tx, by, id, body(change)?).await,
        R::Limit => limits::patch_in(tx, by, id, body(change)?).await,
        R::Shadow => shadows::patch_in(tx, by, id, body(change)?).await,
        R::Settings => return Err(ApiError::validation("", "settings have no id").into()),
    };
    result.map_err(on_id)
}

async fn delete(
    tx: &mut sqlx::PgConnection,
    by: By<'_>,
    id: i64,
    resource: ResourceKind,
) -> ApiResult<Response> {
    use super::{channels, credentials, limits, members, prices, routes, shadows, teams, tokens};
    use ResourceKind as R;
    match resource {
        R::Channel => channels::delete_in(tx, by, id).await,
        R::Credential => credentials::delete_in(tx, by, id).await,
        R::Route => routes::delete_in(tx, by, id).await,
        R::Member => members::delete_in(tx, by, id).await,
        R::Token => tokens::delete_in(tx, by, id).await,
        R::Team => teams::delete_in(tx, by, id).await,
        R::Price => prices::delete_in(tx, by, id).await,
        R::Limit => limits::delete_in(tx, by, id).await,
        R::Shadow => shadows::delete_in(tx, by, id).await,
        R::Settings => Err(ApiError::validation("", "settings are never deleted")),
    }
}

fn op_name(op: ChangeOp) -> &'static str {
    match op {
        ChangeOp::Create => "create",
        ChangeOp::Patch => "patch",
        ChangeOp::Delete => "delete",
        ChangeOp::Put => "put",
    }
}

async fn result_of(index: usize, response: Response) -> ChangeResult {
    let status = response.status();
    let id = if status == StatusCode::CREATED {
        axum::body::to_bytes(response.into_body(), super::extract::MAX_BODY_BYTES * 4)
            .await
            .ok()
            .and_then(|bytes| serde_json::from_slice::<Value>(&bytes).ok())
            .and_then(|value| value.get("id").and_then(Value::as_i64))
    } else {
        None
    };
    ChangeResult {
        index,
        status: status.as_u16(),
        id,
    }
}

/// What a change of snapshot moves: the dry run's comparison, also a config plan's traffic.
pub(super) struct Report {
    pub(super) affected: Vec<AffectedSelection>,
    pub(super) unreachable: Vec<UnreachableMember>,
    pub(super) unresolved: Vec<ModelMove>,
    pub(super) rerouted: Vec<ModelMove>,
    pub(super) newly_failing: Vec<NewlyFailing>,
    pub(super) tokens: Vec<TokenMove>,
    pub(super) truncated: bool,
}

/// The (model, group, team) selections to compare: every route pattern of either snapshot as a
/// model name, each with `default`, every group its members use and every token's group, for no
/// team and for every team.
fn selections(before: &Snapshot, after: &Snapshot) -> Vec<(String, String, Option<i64>)> {
    let mut models: BTreeSet<&str> = BTreeSet::new();
    let mut token_groups: BTreeSet<String> = BTreeSet::new();
    let mut teams: BTreeSet<Option<i64>> = BTreeSet::from([None]);
    for snapshot in [before, after] {
        for route in snapshot.routes() {
            models.insert(route.model_pattern.as_str());
        }
        for token in snapshot.tokens() {
            token_groups.insert(
                switchyard_engine::model::normalize_group(token.route_group_name.as_deref())
                    .to_owned(),
            );
        }
        teams.extend(snapshot.teams().map(|t| Some(t.id)));
    }
    let mut out = Vec::new();
    for model in models {
        let mut groups: BTreeSet<String> = token_groups.clone();
        groups.insert(DEFAULT_GROUP.to_owned());
        for snapshot in [before, after] {
            if let Some(route) = snapshot.resolve_route(model) {
                groups.extend(route.members.iter().map(|m| m.group_name.clone()));
            }
        }
        for group in groups {
            for team in &teams {
                out.push((model.to_owned(), group.clone(), *team));
            }
        }
    }
    out
}

struct Summary {
    route: Option<i64>,
    outcome: &'static str,
    /// member id → (channel, upstream model, probability, reasons)
    members: BTreeMap<i64, (i64, String, f64, Vec<String>)>,
}

fn outcome_name(outcome: &Outcome) -> &'static str {
    match outcome {
        Outcome::Selected { .. } => "selected",
        Outcome::ModelNotFound => "model_not_found",
        Outcome::ModelNotAllowed => "model_not_allowed",
        Outcome::NoEligibleMember => "no_eligible_member",
    }
}

fn summarise(decision: &Decision<'_>) -> Summary {
    let members = decision
        .candidates
        .iter()
        .map(|c| {
            let reasons = c
                .reasons
                .iter()
                .filter_map(|r| serde_json::to_value(r).ok())
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect();
            let probability = if c.probability.is_finite() {
                c.probability
            } else {
                0.0
            };
            (
                c.member.id,
                (
                    c.member.channel_id,
                    c.member.upstream_model.clone(),
                    probability,
                    reasons,
                ),
            )
        })
        .collect();
    Summary {
        route: decision.route.map(|r| r.id),
        outcome: outcome_name(&decision.outcome),
        members,
    }
}

fn run(
    snapshot: &Snapshot,
    view: &dyn HealthView,
    model: &str,
    group: &str,
    team: Option<i64>,
    now_ms: u64,
) -> Summary {
    let constraint = SelectionConstraint {
        route_group: Some(group.to_owned()),
        team,
        ..SelectionConstraint::default()
    };
    // One fixed seed for both sides: a canary draw lands the same way before and after.
    let mut rng = SplitMix64::new(0x5eed);
    summarise(&select(
        snapshot,
        view,
        &constraint,
        model,
        now_ms,
        &mut rng,
    ))
}

const EPSILON: f64 = 1e-9;

pub(super) fn compare(
    before: &Snapshot,
    after: &Snapshot,
    view: &dyn HealthView,
    now_ms: u64,
) -> Report {
    let mut all = selections(before, after);
    let truncated = all.len() > MAX_SELECTIONS;
    all.truncate(MAX_SELECTIONS);

    let mut affected = Vec::new();
    let mut newly_failing = Vec::new();
    // member id → had a chance somewhere (before), has one somewhere (after)
    let mut reachable_before: BTreeSet<i64> = BTreeSet::new();
    let mut reachable_after: BTreeSet<i64> = BTreeSet::new();
    for (model, group, team) in &all {
        let b = run(before, view, model, group, *team, now_ms);
        let a = run(after, view, model, group, *team, now_ms);
        reachable_before.extend(
            b.members
                .iter()
                .filter(|(_, m)| m.2 > EPSILON)
                .map(|(id, _)| *id),
        );
        reachable_after.extend(
            a.members
                .iter()
                .filter(|(_, m)| m.2 > EPSILON)
                .map(|(id, _)| *id),
        );
        let ids: BTreeSet<i64> = b.members.keys().chain(a.members.keys()).copied().collect();
        let mut moves = Vec::new();
        let mut changed = b.route != a.route || b.outcome != a.outcome;
        for id in ids {
            let (bm, am) = (b.members.get(&id), a.members.get(&id));
            let differs = match (bm, am) {
                (Some(x), Some(y)) => {
                    (x.2 - y.2).abs() > EPSILON || x.3 != y.3 || x.0 != y.0 || x.1 != y.1
                }
                _ => true,
            };
            changed |= differs;
            let (channel_id, upstream_model) =
                am.or(bm).map(|m| (m.0, m.1.clone())).unwrap_or_default();
            moves.push(MemberMove {
                member_id: id,
                channel_id,
                upstream_model,
                before: bm.map(|m| m.2),
                after: am.map(|m| m.2),
                reasons_before: bm.map(|m| m.3.clone()).unwrap_or_default(),
                reasons_after: am.map(|m| m.3.clone()).unwrap_or_default(),
            });
        }
        if !changed {
            continue;
        }
        let fails = b.outcome == "selected" && a.outcome != "selected";
        if fails {
            newly_failing.push(NewlyFailing {
                model: model.clone(),
                group: group.clone(),
                team_id: *team,
                outcome: a.outcome.to_owned(),
            });
        }
        affected.push(AffectedSelection {
            model: model.clone(),
            group: group.clone(),
            team_id: *team,
            route_before: b.route,
            route_after: a.route,
            outcome_before: b.outcome.to_owned(),
            outcome_after: a.outcome.to_owned(),
            newly_failing: fails,
            members: moves,
        });
    }

    let unreachable = reachable_before
        .difference(&reachable_after)
        .filter_map(|id| {
            let (route, member) = before.member(*id)?;
            Some(UnreachableMember {
                member_id: *id,
                route_id: route.id,
                channel_id: member.channel_id,
                upstream_model: member.upstream_model.clone(),
                deleted: after.member(*id).is_none(),
            })
        })
        .collect();

    let mut unresolved = Vec::new();
    let mut rerouted = Vec::new();
    let models: BTreeSet<&str> = all.iter().map(|(m, _, _)| m.as_str()).collect();
    for model in models {
        let b = before.resolve_route(model).map(|r| r.id);
        let a = after.resolve_route(model).map(|r| r.id);
        let entry = ModelMove {
            model: model.to_owned(),
            route_before: b,
            route_after: a,
        };
        match (b, a) {
            (Some(_), None) => unresolved.push(entry),
            (x, y) if x != y => rerouted.push(entry),
            _ => {}
        }
    }

    Report {
        affected,
        unreachable,
        unresolved,
        rerouted,
        newly_failing,
        tokens: token_moves(before, after),
        truncated,
    }
}

fn scope(token: &switchyard_engine::Token) -> TokenScope {
    TokenScope {
        group: switchyard_engine::model::normalize_group(token.route_group_name.as_deref())
            .to_owned(),
        team_id: token.team_id,
        enabled: token.enabled,
        expires_at: token
            .expires_at
            .map(switchyard_engine::limit::format_rfc3339),
    }
}

fn price_terms(p: &switchyard_engine::Price) -> PriceTerms {
    use switchyard_engine::limit::format_micros;
    PriceTerms {
        channel_id: p.channel_id,
        model_pattern: p.model_pattern.clone(),
        input_per_million: format_micros(p.input_per_million),
        output_per_million: format_micros(p.output_per_million),
        cached_input_per_million: p.cached_input_per_million.map(format_micros),
    }
}

fn price_moves(before: &Snapshot, after: &Snapshot) -> Vec<PriceMove> {
    let b: BTreeMap<i64, PriceTerms> = before
        .prices()
        .iter()
        .map(|p| (p.id, price_terms(p)))
        .collect();
    let a: BTreeMap<i64, PriceTerms> = after
        .prices()
        .iter()
        .map(|p| (p.id, price_terms(p)))
        .collect();
    let ids: BTreeSet<i64> = b.keys().chain(a.keys()).copied().collect();
    ids.into_iter()
        .filter(|id| b.get(id) != a.get(id))
        .map(|id| PriceMove {
            price_id: id,
            before: b.get(&id).cloned(),
            after: a.get(&id).cloned(),
        })
        .collect()
}

fn limit_terms(l: &switchyard_engine::Limit) -> LimitTerms {
    let value = i64::try_from(l.value).unwrap_or(i64::MAX);
    LimitTerms {
        scope: l.key.scope.as_str().to_owned(),
        scope_id: l.key.scope_id,
        metric: l.key.metric.as_str().to_owned(),
        window: l.key.window.as_str().to_owned(),
        value: super::limits::shown_value(l.key.metric.as_str(), value),
        mode: l.mode.as_str().to_owned(),
    }
}

fn limit_moves(before: &Snapshot, after: &Snapshot) -> Vec<LimitMove> {
    let b: BTreeMap<i64, LimitTerms> = before
        .limits()
        .iter()
        .map(|l| (l.id, limit_terms(&l.limit)))
        .collect();
    let a: BTreeMap<i64, LimitTerms> = after
        .limits()
        .iter()
        .map(|l| (l.id, limit_terms(&l.limit)))
        .collect();
    let ids: BTreeSet<i64> = b.keys().chain(a.keys()).copied().collect();
    ids.into_iter()
        .filter(|id| b.get(id) != a.get(id))
        .map(|id| LimitMove {
            limit_id: id,
            before: b.get(&id).cloned(),
            after: a.get(&id).cloned(),
        })
        .collect()
}

fn token_moves(before: &Snapshot, after: &Snapshot) -> Vec<TokenMove> {
    let b: BTreeMap<i64, &switchyard_engine::Token> =
        before.tokens().iter().map(|t| (t.id, t)).collect();
    let a: BTreeMap<i64, &switchyard_engine::Token> =
        after.tokens().iter().map(|t| (t.id, t)).collect();
    let ids: BTreeSet<i64> = b.keys().chain(a.keys()).copied().collect();
    ids.into_iter()
        .filter_map(|id| {
            let (tb, ta) = (b.get(&id), a.get(&id));
            let (sb, sa) = (tb.map(|t| scope(t)), ta.map(|t| scope(t)));
            if sb == sa {
                return None;
            }
            let name = ta.or(tb).map(|t| t.name.clone()).unwrap_or_default();
            Some(TokenMove {
                token_id: id,
                name,
                before: sb,
                after: sa,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(field: Field, error: ApiError) -> ApiError {
        at_change(3, ChangeError { field, error })
    }

    /// The `param` and `message` of a 422.
    fn validation(error: ApiError) -> (String, String) {
        match error {
            ApiError::Validation { param, message } => (param, message),
            other => panic!("not a validation error: {other:?}"),
        }
    }

    #[test]
    fn a_validation_error_points_into_the_body_only_from_the_body() {
        let body = |param: &str| {
            validation(at(
                Field::Body,
                ApiError::Validation {
                    param: param.to_owned(),
                    message: "bad".to_owned(),
                },
            ))
        };
        assert_eq!(
            body("weight"),
            (
                "changes[3].body.weight".to_owned(),
                "changes[3].body.weight: bad".to_owned()
            )
        );
        // No field inside the body (or the body itself): the body.
        assert_eq!(body("").0, "changes[3].body");
        assert_eq!(body(".").0, "changes[3].body");
        // A failure of the id or the op never points into the body.
        for (field, path) in [
            (Field::Id, "changes[3].id"),
            (Field::ParentId, "changes[3].parent_id"),
            (Field::Op, "changes[3].op"),
        ] {
            let (param, _) = validation(at(field, ApiError::validation("weight", "bad")));
            assert_eq!(param, path);
        }
    }

    #[test]
    fn a_malformed_body_field_is_a_validation_error_at_its_place() {
        let (param, message) = validation(at(
            Field::Body,
            ApiError::bad_request(Some("colour"), "unknown field"),
        ));
        assert_eq!(param, "changes[3].body.colour");
        assert_eq!(message, "changes[3].body.colour: unknown field");
        let (param, _) = validation(at(Field::Body, ApiError::bad_request(None, "not JSON")));
        assert_eq!(param, "changes[3].body");
        let (param, _) = validation(at(Field::Id, ApiError::bad_request(Some("x"), "bad")));
        assert_eq!(param, "changes[3].id");
    }

    #[test]
    fn not_found_and_conflicts_name_the_change() {
        let (param, message) = validation(at(Field::Id, ApiError::not_found("route", 9)));
        assert_eq!(param, "changes[3].id");
        assert_eq!(message, "changes[3].id: route 9 not found");
        match at(
            Field::Body,
            ApiError::Conflict {
                message: "still used".to_owned(),
            },
        ) {
            ApiError::Conflict { message } => assert_eq!(message, "changes[3]: still used"),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            at(Field::Body, ApiError::Unauthorized),
            ApiError::Unauthorized
        ));
    }

    #[test]
    fn an_op_is_named_as_the_api_spells_it() {
        for op in [
            ChangeOp::Create,
            ChangeOp::Patch,
            ChangeOp::Delete,
            ChangeOp::Put,
        ] {
            assert_eq!(
                serde_json::to_value(op).unwrap(),
                Value::from(op_name(op)),
                "{op:?}"
            );
        }
    }

    #[test]
    fn a_missing_id_names_the_field_it_is_for() {
        assert_eq!(required(Some(7), Field::Id, "to patch").ok(), Some(7));
        for (field, path, name) in [
            (Field::Id, "changes[3].id", "id"),
            (Field::ParentId, "changes[3].parent_id", "parent_id"),
        ] {
            let Err(error) = required(None, field, "for this") else {
                panic!("a missing value was accepted");
            };
            let (param, message) = validation(at_change(3, error));
            assert_eq!(param, path);
            assert!(
                message.contains(&format!("{name} is required for this")),
                "{message}"
            );
        }
    }
}
