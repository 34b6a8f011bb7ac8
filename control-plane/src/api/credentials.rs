//! `/api/v1/channels/{id}/credentials`, `/api/v1/credentials/{id}`: a channel's upstream keys.
//! Secrets are write-only: reads return a mask computed in SQL, so the secret never even reaches
//! this process on a read.

use axum::response::Response;
use serde::{Deserialize, Serialize};
use serde_json::json;
use utoipa::ToSchema;

use super::channels::{text, ChannelView};
use super::crud::{crud, Item};
use super::rows::{
    commit_view, delete_locked, fetch_row, insert_sql, lock_row, table_row, By, Change, Db,
};
use crate::db::ts;
use crate::error::{ApiError, ApiResult};
use switchyard_engine::validate::check_secret;
use switchyard_engine::Provider;

#[derive(Debug, Serialize, sqlx::FromRow, ToSchema)]
pub struct CredentialView {
    pub id: i64,
    pub channel_id: i64,
    #[schema(value_type = super::schema::CredentialSource)]
    pub source: String,
    /// Masked: `****` plus the last 4 characters for secrets of 12 characters or more.
    pub secret: Option<String>,
    pub secret_env: Option<String>,
    pub enabled: bool,
    #[schema(format = DateTime)]
    pub created_at: String,
    #[schema(format = DateTime)]
    pub updated_at: String,
}

table_row!(CredentialView, "credentials", "credential", columns);

crud!(
    table CredentialView under ChannelView,
    CredentialCreate,
    CredentialPatch,
    Item::new("credential")
);

fn columns() -> String {
    format!(
        "id, channel_id, \
         CASE WHEN secret IS NULL THEN 'env' ELSE 'inline' END AS source, \
         CASE WHEN secret IS NULL THEN NULL \
              WHEN char_length(secret) >= 12 THEN '****' || right(secret, 4) \
              ELSE '****' END AS secret, \
         secret_env, enabled, {} AS created_at, {} AS updated_at",
        ts("created_at"),
        ts("updated_at")
    )
}

/// Exactly one of `secret` and `secret_env`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CredentialCreate {
    /// Write-only; read back masked.
    pub secret: Option<String>,
    /// Name of an environment variable on the proxies that holds the secret.
    pub secret_env: Option<String>,
    pub enabled: Option<bool>,
}

/// Setting `secret` replaces an env reference and vice versa; never both at once.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CredentialPatch {
    pub secret: Option<String>,
    pub secret_env: Option<String>,
    pub enabled: Option<bool>,
}

enum Source {
    Inline(String),
    Env(String),
}

fn source(secret: Option<String>, secret_env: Option<String>) -> ApiResult<Option<Source>> {
    match (secret, secret_env) {
        (Some(_), Some(_)) => Err(ApiError::validation(
            "secret",
            "secret and secret_env are mutually exclusive; send one of them",
        )),
        (Some(secret), None) => {
            let secret = secret.trim().to_owned();
            if secret.is_empty() || secret.len() > 8192 {
                return Err(ApiError::validation(
                    "secret",
                    "secret must be 1 to 8192 bytes",
                ));
            }
            // Checked against the channel's provider by [`Source::check`].
            Ok(Some(Source::Inline(secret)))
        }
        (None, Some(name)) => {
            let valid = name
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && name.len() <= 256;
            if !valid {
                return Err(ApiError::validation(
                    "secret_env",
                    "secret_env must be an environment variable name ([A-Za-z_][A-Za-z0-9_]*)",
                ));
            }
            Ok(Some(Source::Env(name)))
        }
        (None, None) => Ok(None),
    }
}

/// The secret source of a create body: exactly one of `secret` and `secret_env`.
fn create_source(raw: CredentialCreate) -> ApiResult<Source> {
    source(raw.secret, raw.secret_env)?
        .ok_or_else(|| ApiError::validation("secret", "one of secret or secret_env is required"))
}

/// A create body's validated spec, as the audit log records it (never the secret itself;
/// [`super::validate_body`]).
pub(super) fn create_detail(raw: CredentialCreate) -> ApiResult<serde_json::Value> {
    let enabled = raw.enabled.unwrap_or(true);
    let source = create_source(raw)?;
    // The channel (and so its provider) is not known here: a secret either provider kind takes.
    if let Source::Inline(secret) = &source {
        if check_secret(secret).is_err() {
            text("secret", secret, switchyard_upstream::check_service_account)?;
        }
    }
    let mut detail = source.describe();
    detail["enabled"] = json!(enabled);
    Ok(detail)
}

impl Source {
    /// An inline secret checked for its channel's provider: a Vertex channel's is a
    /// service-account key file (JSON, [`switchyard_upstream::check_service_account`]), a
    /// Bedrock channel's an AWS access key (JSON, [`switchyard_upstream::check_aws_credential`]);
    /// any other is sent as a header value, so one line. The message never quotes the secret.
    fn check(&self, provider: &str) -> ApiResult<()> {
        let Source::Inline(secret) = self else {
            return Ok(());
        };
        match Provider::parse(provider) {
            Some(Provider::Vertex) => {
                text("secret", secret, switchyard_upstream::check_service_account)
            }
            Some(Provider::Bedrock) => {
                text("secret", secret, switchyard_upstream::check_aws_credential)
            }
            _ => text("secret", secret, check_secret),
        }
    }

    fn columns(&self) -> (Option<&str>, Option<&str>) {
        match self {
            Source::Inline(secret) => (Some(secret), None),
            Source::Env(name) => (None, Some(name)),
        }
    }

    /// What the audit log may say about it.
    fn describe(&self) -> serde_json::Value {
        match self {
            Source::Inline(_) => json!({ "source": "inline" }),
            Source::Env(name) => json!({ "source": "env", "secret_env": name }),
        }
    }
}

/// The create of `POST /api/v1/channels/{id}/credentials`, in `db` (see [`Db`]).
pub(super) async fn create_in<'c>(
    db: impl Db<'c>,
    by: By<'_>,
    channel_id: i64,
    raw: CredentialCreate,
) -> ApiResult<Response> {
    let enabled = raw.enabled.unwrap_or(true);
    let source = create_source(raw)?;
    let (mut tx, channel) = lock_row::<ChannelView>(db, channel_id).await?;
    if channel.auth == switchyard_engine::ChannelAuth::Workload.as_str() {
        return Err(ApiError::validation(
            "channel_id",
            format!(
                "channel {channel_id} has auth: workload: the proxies' workload identity is its credential, it takes no stored one"
            ),
        ));
    }
    source.check(&channel.provider)?;
    let (secret, secret_env) = source.columns();
    let sql = insert_sql::<CredentialView>("channel_id, secret, secret_env, enabled");
    let view = sqlx::query_as::<_, CredentialView>(&sql)
        .bind(channel_id)
        .bind(secret)
        .bind(secret_env)
        .bind(enabled)
        .fetch_one(&mut *tx)
        .await?;
    let mut detail = source.describe();
    detail["channel_id"] = json!(channel_id);
    detail["enabled"] = json!(enabled);
    commit_view::<CredentialView>(tx, by, Change::Create, view.id, detail, view).await
}

/// The update of `PATCH /api/v1/credentials/{id}`, in `db` (see [`Db`]).
pub(super) async fn patch_in<'c>(
    db: impl Db<'c>,
    by: By<'_>,
    id: i64,
    raw: CredentialPatch,
) -> ApiResult<Response> {
    let source = source(raw.secret, raw.secret_env)?;
    let (mut tx, current) = lock_row::<CredentialView>(db, id).await?;
    if let Some(source) = &source {
        let channel = fetch_row::<ChannelView>(&mut *tx, current.channel_id, false).await?;
        source.check(&channel.provider)?;
    }
    let enabled = raw.enabled.unwrap_or(current.enabled);
    let mut detail = json!({ "enabled": enabled });
    if let Some(source) = &source {
        let (secret, secret_env) = source.columns();
        sqlx::query("UPDATE credentials SET secret = $2, secret_env = $3 WHERE id = $1")
            .bind(id)
            .bind(secret)
            .bind(secret_env)
            .execute(&mut *tx)
            .await?;
        detail["secret_changed"] = json!(true);
        if let serde_json::Value::Object(extra) = source.describe() {
            for (key, value) in extra {
                detail[key] = value;
            }
        }
    }
    let sql = format!(
        "UPDATE credentials SET enabled = $2, updated_at = now() WHERE id = $1 RETURNING {}",
        columns()
    );
    let view = sqlx::query_as::<_, CredentialView>(&sql)
        .bind(id)
        .bind(enabled)
        .fetch_one(&mut *tx)
        .await?;
    commit_view::<CredentialView>(tx, by, Change::Update, id, detail, view).await
}

/// The delete of `DELETE /api/v1/credentials/{id}`, in `db` (see [`Db`]).
pub(super) async fn delete_in<'c>(db: impl Db<'c>, by: By<'_>, id: i64) -> ApiResult<Response> {
    let detail = |credential: &CredentialView| json!({ "channel_id": credential.channel_id });
    delete_locked(db, by, id, detail).await
}
