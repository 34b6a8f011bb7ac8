//! `/api/v1/admin-tokens`: named admin API tokens with a role, and `/api/v1/whoami`. The secret
//! is generated here, returned once by the create call, and only its SHA-256 (lowercase hex, as
//! for downstream tokens) is stored. Revoking keeps the row (with `revoked_at`), so the names in
//! the audit log stay meaningful; the token is refused from its next request on.
//!
//! A token with a `team_id` administers that team only (see [`super::access::TEAM_ROUTES`]);
//! without one, the whole fleet. Only fleet admins manage admin tokens, team-limited ones
//! included. Deleting a team removes its admin tokens.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::json;
use switchyard_engine::limit::{format_rfc3339, parse_rfc3339};
use utoipa::ToSchema;

use super::access::{Caller, Role, SessionCsrf, BOOTSTRAP_NAME};
use super::channels::checked_name;
use super::extract::{Actor, JsonBody, Path, Query};
use super::reply::{Page, PageQuery};
use super::rows::{
    answer, check_reference, commit_row, commit_view, fetch_row, list_rows, lock_row, table_row,
    By, Change,
};
use crate::db::ts;
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::state::AppState;

/// Prefix of every generated admin token, so a leaked one is easy to recognise and scan for.
pub const ADMIN_TOKEN_PREFIX: &str = "sy-admin-";

#[derive(Debug, Clone, Serialize, sqlx::FromRow, ToSchema)]
pub struct AdminTokenView {
    pub id: i64,
    pub name: String,
    #[sqlx(try_from = "String")]
    pub role: Role,
    /// The one team the token administers; `null`: the whole fleet.
    pub team_id: Option<i64>,
    /// The first characters of the secret, to recognise the token.
    pub prefix: String,
    /// After this instant the token is refused (401); `null`: never expires.
    #[schema(format = DateTime)]
    pub expires_at: Option<String>,
    #[schema(format = DateTime)]
    pub created_at: String,
    /// Who created it (the creator's actor).
    pub created_by: String,
    /// The last request made with it, recorded at most once a minute; `null`: never used.
    #[schema(format = DateTime)]
    pub last_used_at: Option<String>,
    /// When it was revoked; `null`: live.
    #[schema(format = DateTime)]
    pub revoked_at: Option<String>,
}

/// The create response: the token's fields plus its secret, shown this once.
#[derive(Debug, Serialize, ToSchema)]
pub struct CreatedAdminToken {
    #[serde(flatten)]
    pub view: AdminTokenView,
    /// The secret (`Authorization: Bearer ...`). It is not stored and cannot be shown again.
    pub token: String,
}

table_row!(AdminTokenView, "admin_tokens", "admin_token", columns);

fn columns() -> String {
    format!(
        "id, name, role, team_id, prefix, {} AS expires_at, {} AS created_at, created_by, \
         {} AS last_used_at, {} AS revoked_at",
        ts("expires_at"),
        ts("created_at"),
        ts("last_used_at"),
        ts("revoked_at")
    )
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AdminTokenCreate {
    /// Who holds it (a person or a pipeline); the audit and access logs record changes under it.
    /// Unique among live tokens; `bootstrap` and names starting with `system:` are reserved.
    pub name: String,
    pub role: Role,
    /// Limits the token to administering this team (its tokens, limits, budgets, cache rules,
    /// usage and request log) with its role; absent or `null`: the whole fleet.
    pub team_id: Option<i64>,
    /// RFC 3339 (`2027-01-31T23:59:59Z`, any offset), in the future; absent or `null`: never
    /// expires.
    #[schema(format = DateTime)]
    pub expires_at: Option<String>,
}

/// `GET /api/v1/whoami`: the caller's token name and role.
#[derive(Debug, Serialize, ToSchema)]
pub struct WhoAmI {
    /// The admin token's name, or `bootstrap` for `SWITCHYARD_ADMIN_TOKEN`.
    pub name: String,
    pub role: Role,
    /// The admin token's id; `null` for the bootstrap token.
    pub token_id: Option<i64>,
    /// The one team the caller administers; `null`: the whole fleet.
    pub team_id: Option<i64>,
    /// When the token stops working; `null`: never.
    #[schema(format = DateTime)]
    pub expires_at: Option<String>,
    /// Only for a console session of single sign-on: the token every write made with the session
    /// cookie must carry in the `x-switchyard-csrf` header.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub csrf_token: Option<String>,
}

fn generate_secret() -> ApiResult<String> {
    let mut bytes = [0u8; 24];
    getrandom::fill(&mut bytes)
        .map_err(|e| ApiError::Internal(anyhow::anyhow!("no system randomness: {e}")))?;
    Ok(format!(
        "{ADMIN_TOKEN_PREFIX}{}",
        switchyard_proto::hex(&bytes)
    ))
}

fn checked_token_name(raw: &str) -> ApiResult<String> {
    let name = checked_name("name", raw)?;
    if name == BOOTSTRAP_NAME || name.starts_with("system:") {
        return Err(ApiError::validation(
            "name",
            format!(
                "name {name:?} is reserved (`bootstrap` is the environment's token, `system:` \
                 names the control plane's own jobs)"
            ),
        ));
    }
    Ok(name)
}

#[utoipa::path(get, path = "/api/v1/whoami", tag = "admin-tokens", operation_id = "whoami",
    responses((status = 200, description = "the caller's name, role and team", body = WhoAmI)))]
pub async fn whoami(caller: Caller, csrf: Option<axum::Extension<SessionCsrf>>) -> Json<WhoAmI> {
    let identity = caller.identity;
    Json(WhoAmI {
        name: identity.name,
        role: identity.role,
        token_id: identity.token_id,
        team_id: identity.team,
        expires_at: identity.expires_at,
        csrf_token: csrf.map(|axum::Extension(SessionCsrf(token))| token),
    })
}

#[utoipa::path(get, path = "/api/v1/admin-tokens", tag = "admin-tokens", operation_id = "list_admin_tokens",
    params(PageQuery),
    responses((status = 200, description = "live and revoked admin tokens, never their secrets",
               body = Page<AdminTokenView>)))]
pub async fn list(
    State(state): State<AppState>,
    Query(page): Query<PageQuery>,
) -> ApiResult<Json<Page<AdminTokenView>>> {
    Ok(Json(list_rows(&state.pool, None, page.bounds()?).await?))
}

/// A 422 naming `expires_at` unless `ms` (Unix ms) is later than the database's clock: an
/// admin token, a token or a shadow rule is never given an expiry that has passed. (An expiry
/// already stored may pass: the row stays, listed as expired.)
pub(crate) async fn refuse_past_expiry(tx: &mut sqlx::PgConnection, ms: i64) -> ApiResult<()> {
    let past: bool =
        sqlx::query_scalar("SELECT 'epoch'::timestamptz + $1 * interval '1 millisecond' <= now()")
            .bind(ms)
            .fetch_one(&mut *tx)
            .await?;
    if past {
        return Err(ApiError::validation(
            "expires_at",
            "expires_at must be in the future",
        ));
    }
    Ok(())
}

#[utoipa::path(post, path = "/api/v1/admin-tokens", tag = "admin-tokens", operation_id = "create_admin_token",
    request_body = AdminTokenCreate,
    responses((status = 201, description = "the secret `token` is returned only here",
               body = CreatedAdminToken),
              (status = 422, body = ErrorBody)))]
pub async fn create(
    State(state): State<AppState>,
    Actor(actor): Actor,
    JsonBody(raw): JsonBody<AdminTokenCreate>,
) -> ApiResult<Response> {
    let name = checked_token_name(&raw.name)?;
    let expires_at = match raw.expires_at.as_deref() {
        None => None,
        Some(text) => {
            let ms = parse_rfc3339(text).ok_or_else(|| {
                ApiError::validation(
                    "expires_at",
                    format!(
                        "expires_at must be an RFC 3339 date-time such as 2027-01-31T23:59:59Z, \
                         got {:?}",
                        crate::error::bounded(text, 64)
                    ),
                )
            })?;
            Some(i64::try_from(ms).unwrap_or(i64::MAX))
        }
    };
    let secret = generate_secret()?;
    let prefix: String = secret.chars().take(ADMIN_TOKEN_PREFIX.len() + 6).collect();
    let mut tx = state.pool.begin().await?;
    if let Some(ms) = expires_at {
        refuse_past_expiry(&mut tx, ms).await?;
    }
    if let Some(team) = raw.team_id {
        check_reference(&mut tx, "teams", "team_id", team).await?;
    }
    let sql = format!(
        "INSERT INTO admin_tokens (name, role, hash, prefix, expires_at, created_by, team_id) \
         VALUES ($1, $2, $3, $4, 'epoch'::timestamptz + $5 * interval '1 millisecond', $6, $7) \
         RETURNING {}",
        columns()
    );
    let view = sqlx::query_as::<_, AdminTokenView>(&sql)
        .bind(&name)
        .bind(raw.role.as_str())
        .bind(switchyard_proto::token_hash(&secret))
        .bind(&prefix)
        .bind(expires_at)
        .bind(&actor)
        .bind(raw.team_id)
        .fetch_one(&mut *tx)
        .await?;
    // The audit row says who got which role for which team; never the secret or its hash.
    let detail = json!({
        "name": view.name,
        "role": raw.role,
        "team_id": raw.team_id,
        "prefix": view.prefix,
        "expires_at": expires_at.map(|ms| format_rfc3339(u64::try_from(ms).unwrap_or(0))),
    });
    let (id, token) = (view.id, secret);
    commit_view::<AdminTokenView>(
        tx,
        By::each(&actor),
        Change::Create,
        id,
        detail,
        CreatedAdminToken { view, token },
    )
    .await
}

#[utoipa::path(get, path = "/api/v1/admin-tokens/{id}", tag = "admin-tokens", operation_id = "get_admin_token",
    responses((status = 200, body = AdminTokenView), (status = 404, body = ErrorBody)))]
pub async fn get_one(
    State(state): State<AppState>,
    Path(id): Path<i64>,
) -> ApiResult<Json<AdminTokenView>> {
    Ok(Json(fetch_row(&state.pool, id, false).await?))
}

#[utoipa::path(delete, path = "/api/v1/admin-tokens/{id}", tag = "admin-tokens", operation_id = "revoke_admin_token",
    responses((status = 204, description = "revoked: refused from its next request on"),
              (status = 404, description = "no live admin token has this id", body = ErrorBody)))]
pub async fn revoke(
    State(state): State<AppState>,
    Actor(actor): Actor,
    Path(id): Path<i64>,
) -> ApiResult<Response> {
    let (mut tx, current) = lock_row::<AdminTokenView>(&state.pool, id).await?;
    if current.revoked_at.is_some() {
        return Err(ApiError::not_found("admin_token", id));
    }
    sqlx::query("UPDATE admin_tokens SET revoked_at = now() WHERE id = $1")
        .bind(id)
        .execute(&mut *tx)
        .await?;
    let detail = json!({ "name": current.name, "role": current.role, "team_id": current.team_id });
    let revision = commit_row::<AdminTokenView>(tx, By::each(&actor), "delete", id, detail).await?;
    Ok(answer(revision, StatusCode::NO_CONTENT))
}
