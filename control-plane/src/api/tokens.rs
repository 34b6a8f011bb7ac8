//! `/api/v1/tokens`: downstream API keys. The plaintext is generated here, returned once by the
//! create call, and only its SHA-256 (lowercase hex) is stored.

use axum::response::Response;
use serde::{Deserialize, Serialize};
use serde_json::json;
use switchyard_engine::limit::{format_rfc3339, parse_rfc3339};
use switchyard_engine::model::validate_group;
use switchyard_engine::validate::check_single_line;
use switchyard_engine::UnixMillis;
use utoipa::ToSchema;

use super::access::Owned;
use super::admin_tokens::refuse_past_expiry;
use super::channels::{checked_name, text};
use super::crud::{crud, Item};
use super::extract::nullable;
use super::rows::{
    check_reference, commit_view, delete_row, lock_row, table_row, team_after, team_before, By,
    Change, Db, RowQuery,
};
use crate::db::ts;
use crate::error::{ApiError, ApiResult};

/// Prefix of every generated token, so leaked keys are easy to recognise and scan for.
pub const TOKEN_PREFIX: &str = "sk-sy-";

#[derive(Debug, Clone, Serialize, sqlx::FromRow, ToSchema)]
pub struct TokenView {
    pub id: i64,
    pub name: String,
    /// The first characters of the plaintext, to recognise the token.
    pub prefix: String,
    pub route_group_name: Option<String>,
    pub team_id: Option<i64>,
    pub allow_pinning: bool,
    pub enabled: bool,
    /// After this instant the token is refused (401 `token_expired`); `null`: never expires.
    #[schema(format = DateTime)]
    pub expires_at: Option<String>,
    #[schema(format = DateTime)]
    pub created_at: String,
    #[schema(format = DateTime)]
    pub updated_at: String,
}

/// The create response: the token's fields plus the plaintext, shown this once.
#[derive(Debug, Serialize, ToSchema)]
pub struct CreatedToken {
    #[serde(flatten)]
    pub view: TokenView,
    /// The plaintext token. It is not stored and cannot be shown again.
    pub token: String,
}

table_row!(TokenView, "tokens", "token", columns);

crud!(
    table TokenView,
    TokenCreate => CreatedToken,
    TokenPatch,
    Item::new("token")
        .created("the plaintext `token` is returned only here")
        .owned(Owned::Token)
);

fn columns() -> String {
    format!(
        "id, name, prefix, route_group_name, team_id, allow_pinning, enabled, \
         {} AS expires_at, {} AS created_at, {} AS updated_at",
        ts("expires_at"),
        ts("created_at"),
        ts("updated_at")
    )
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TokenCreate {
    pub name: String,
    pub route_group_name: Option<String>,
    pub team_id: Option<i64>,
    pub allow_pinning: Option<bool>,
    pub enabled: Option<bool>,
    /// RFC 3339 (`2027-01-31T23:59:59Z`, any offset); absent or `null`: never expires.
    #[schema(format = DateTime)]
    pub expires_at: Option<String>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TokenPatch {
    pub name: Option<String>,
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<String>)]
    pub route_group_name: Option<Option<String>>,
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<i64>)]
    pub team_id: Option<Option<i64>>,
    pub allow_pinning: Option<bool>,
    pub enabled: Option<bool>,
    /// RFC 3339; `null` clears it (the token never expires).
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub expires_at: Option<Option<String>>,
}

#[derive(Debug, Serialize)]
struct TokenSpec {
    name: String,
    route_group_name: Option<String>,
    team_id: Option<i64>,
    allow_pinning: bool,
    enabled: bool,
    /// Unix ms; the audit log shows it as RFC 3339 UTC.
    #[serde(serialize_with = "expiry_text")]
    expires_at: Option<UnixMillis>,
}

fn expiry_text<S: serde::Serializer>(ms: &Option<UnixMillis>, s: S) -> Result<S::Ok, S::Error> {
    match ms {
        Some(ms) => s.serialize_str(&format_rfc3339(*ms)),
        None => s.serialize_none(),
    }
}

/// An RFC 3339 `expires_at` as Unix ms; a 422 naming it otherwise.
fn expiry(text: Option<&str>) -> ApiResult<Option<UnixMillis>> {
    text.map(|text| {
        parse_rfc3339(text).ok_or_else(|| {
            ApiError::validation(
                "expires_at",
                format!(
                    "expires_at must be an RFC 3339 date-time such as 2027-01-31T23:59:59Z, got {:?}",
                    crate::error::bounded(text, 64)
                ),
            )
        })
    })
    .transpose()
}

impl TryFrom<TokenCreate> for TokenSpec {
    type Error = ApiError;

    fn try_from(raw: TokenCreate) -> ApiResult<TokenSpec> {
        TokenSpec {
            name: raw.name,
            route_group_name: raw.route_group_name,
            team_id: raw.team_id,
            allow_pinning: raw.allow_pinning.unwrap_or(false),
            enabled: raw.enabled.unwrap_or(true),
            expires_at: expiry(raw.expires_at.as_deref())?,
        }
        .validate()
    }
}

/// A create body's validated spec, as the audit log records it ([`super::validate_body`]).
pub(super) fn create_detail(raw: TokenCreate) -> ApiResult<serde_json::Value> {
    Ok(json!(TokenSpec::try_from(raw)?))
}

impl TokenSpec {
    /// Binds the token's settings as `$1`..`$6`: name, route group, team, pinning, enabled and
    /// the expiry's Unix ms (for [`EXPIRY`]).
    fn bind<'q, O>(&'q self, query: RowQuery<'q, O>) -> RowQuery<'q, O> {
        query
            .bind(&self.name)
            .bind(&self.route_group_name)
            .bind(self.team_id)
            .bind(self.allow_pinning)
            .bind(self.enabled)
            .bind(expiry_ms(self.expires_at))
    }

    fn validate(mut self) -> ApiResult<TokenSpec> {
        self.name = checked_name("name", &self.name)?;
        if let Some(group) = self.route_group_name.take() {
            text("route_group_name", &group, check_single_line)?;
            validate_group(&group)
                .map_err(|message| ApiError::validation("route_group_name", message))?;
            let group = group.trim();
            // An empty group means "none": the request's group or `default` applies.
            self.route_group_name = (!group.is_empty()).then(|| group.to_owned());
        }
        Ok(self)
    }

    async fn check_team(&self, tx: &mut sqlx::PgConnection) -> ApiResult<()> {
        match self.team_id {
            Some(team) => check_reference(tx, "teams", "team_id", team).await,
            None => Ok(()),
        }
    }
}

/// `expires_at` from the Unix ms [`TokenSpec::bind`] binds as `$6`: exact to the millisecond.
const EXPIRY: &str = "'epoch'::timestamptz + $6 * interval '1 millisecond'";

fn expiry_ms(ms: Option<UnixMillis>) -> Option<i64> {
    ms.map(|ms| i64::try_from(ms).unwrap_or(i64::MAX))
}

use switchyard_proto::hex;
/// Lowercase hex SHA-256, the form tokens are stored and shipped in.
pub use switchyard_proto::token_hash;

fn generate_token() -> ApiResult<String> {
    let mut bytes = [0u8; 24];
    getrandom::fill(&mut bytes)
        .map_err(|e| ApiError::Internal(anyhow::anyhow!("no system randomness: {e}")))?;
    Ok(format!("{TOKEN_PREFIX}{}", hex(&bytes)))
}

/// The create of `POST /api/v1/tokens`, in `db` (see [`Db`]).
pub(super) async fn create_in<'c>(
    db: impl Db<'c>,
    by: By<'_>,
    raw: TokenCreate,
) -> ApiResult<Response> {
    create_as(db, by, raw, None).await
}

/// A token's hash and shown prefix, given rather than generated: a configuration file names a
/// token whose plaintext the control plane never sees.
pub(super) struct Given<'a> {
    pub hash: &'a str,
    pub prefix: &'a str,
}

/// [`create_in`]; with `given`, the token is that hash and prefix, and the answer is its view
/// (there is no plaintext to return).
pub(super) async fn create_as<'c>(
    db: impl Db<'c>,
    by: By<'_>,
    raw: TokenCreate,
    given: Option<Given<'_>>,
) -> ApiResult<Response> {
    let mut spec = TokenSpec::try_from(raw)?;
    if let Some(team) = by.team {
        // A team admin's token is its team's: absent, the team is its own; another is refused.
        let team_id = *spec.team_id.get_or_insert(team);
        if team_id != team {
            return Err(outside_team(team_id, team));
        }
    }
    let plaintext = match given {
        Some(_) => None,
        None => Some(generate_token()?),
    };
    let (hash, prefix) = match (&given, &plaintext) {
        (Some(given), _) => (given.hash.to_owned(), given.prefix.to_owned()),
        (None, Some(plaintext)) => (
            token_hash(plaintext),
            plaintext.chars().take(TOKEN_PREFIX.len() + 6).collect(),
        ),
        (None, None) => {
            return Err(ApiError::Internal(anyhow::anyhow!(
                "a token without a secret"
            )))
        }
    };
    let mut tx = db.begin().await?;
    spec.check_team(&mut tx).await?;
    if let Some(ms) = expiry_ms(spec.expires_at) {
        refuse_past_expiry(&mut tx, ms).await?;
    }
    let sql = format!(
        "INSERT INTO tokens (name, route_group_name, team_id, allow_pinning, enabled, expires_at, \
         hash, prefix) VALUES ($1, $2, $3, $4, $5, {EXPIRY}, $7, $8) RETURNING {}",
        columns()
    );
    let view = spec
        .bind(sqlx::query_as::<_, TokenView>(&sql))
        .bind(hash)
        .bind(&prefix)
        .fetch_one(&mut *tx)
        .await?;
    let id = view.id;
    team_after(&mut tx, by, Owned::Token, id).await?;
    match plaintext {
        Some(token) => {
            let created = CreatedToken { view, token };
            commit_view::<TokenView>(tx, by, Change::Create, id, json!(spec), created).await
        }
        None => commit_view::<TokenView>(tx, by, Change::Create, id, json!(spec), view).await,
    }
}

/// Sets the prefix shown for token `id` (a configuration file may give one).
pub(super) async fn set_prefix(
    executor: impl sqlx::PgExecutor<'_>,
    id: i64,
    prefix: &str,
) -> ApiResult<()> {
    sqlx::query("UPDATE tokens SET prefix = $2, updated_at = now() WHERE id = $1")
        .bind(id)
        .bind(prefix)
        .execute(executor)
        .await?;
    Ok(())
}

/// The update of `PATCH /api/v1/tokens/{id}`, in `db` (see [`Db`]).
pub(super) async fn patch_in<'c>(
    db: impl Db<'c>,
    by: By<'_>,
    id: i64,
    patch: TokenPatch,
) -> ApiResult<Response> {
    let (mut tx, current) = lock_row::<TokenView>(db, id).await?;
    team_before(&mut tx, by, Owned::Token, id).await?;
    if let (Some(team), Some(moved)) = (by.team, patch.team_id) {
        if moved != Some(team) {
            return Err(outside_team_field(moved, team));
        }
    }
    let new_expiry = patch.expires_at.is_some();
    let spec = TokenSpec {
        name: patch.name.unwrap_or(current.name),
        route_group_name: patch.route_group_name.unwrap_or(current.route_group_name),
        team_id: patch.team_id.unwrap_or(current.team_id),
        allow_pinning: patch.allow_pinning.unwrap_or(current.allow_pinning),
        enabled: patch.enabled.unwrap_or(current.enabled),
        expires_at: match patch.expires_at {
            Some(text) => expiry(text.as_deref())?,
            // The stored instant, as read back (RFC 3339 with microseconds).
            None => expiry(current.expires_at.as_deref())?,
        },
    }
    .validate()?;
    spec.check_team(&mut tx).await?;
    // A new expiry must be in the future; the stored one is kept even when it has passed.
    if let Some(ms) = expiry_ms(spec.expires_at).filter(|_| new_expiry) {
        refuse_past_expiry(&mut tx, ms).await?;
    }
    let sql = format!(
        "UPDATE tokens SET name = $1, route_group_name = $2, team_id = $3, allow_pinning = $4, \
         enabled = $5, expires_at = {EXPIRY}, updated_at = now() WHERE id = $7 RETURNING {}",
        columns()
    );
    let view = spec
        .bind(sqlx::query_as::<_, TokenView>(&sql))
        .bind(id)
        .fetch_one(&mut *tx)
        .await?;
    team_after(&mut tx, by, Owned::Token, id).await?;
    commit_view::<TokenView>(tx, by, Change::Update, id, json!(spec), view).await
}

/// The 403 of a team admin of `team` naming another team (`team_id`) for a token.
fn outside_team(team_id: i64, team: i64) -> ApiError {
    ApiError::OutsideTeam {
        message: format!(
            "team_id: team {team_id} is not team {team}, the only team this admin token \
             administers"
        ),
    }
}

/// [`outside_team`] for a patch's `team_id` (`None`: taking the token out of every team).
fn outside_team_field(team_id: Option<i64>, team: i64) -> ApiError {
    match team_id {
        Some(team_id) => outside_team(team_id, team),
        None => ApiError::OutsideTeam {
            message: format!(
                "team_id: a token of team {team} cannot be taken out of it by this admin token"
            ),
        },
    }
}

/// The delete of `DELETE /api/v1/tokens/{id}`, in `db` (see [`Db`]).
pub(super) async fn delete_in<'c>(db: impl Db<'c>, by: By<'_>, id: i64) -> ApiResult<Response> {
    let (mut tx, current) = lock_row::<TokenView>(db, id).await?;
    team_before(&mut tx, by, Owned::Token, id).await?;
    delete_row::<TokenView>(tx, by, id, json!({ "name": current.name })).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_is_lowercase_hex_sha256() {
        assert_eq!(
            token_hash("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
