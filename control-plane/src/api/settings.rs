//! `/api/v1/settings`: the global settings (docs/src/reference/settings.md), validated against the
//! engine's ranges. GET returns every setting (defaults filled in); PUT replaces the document
//! (absent keys take their defaults); PATCH changes only the keys it sends.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{Map, Value};
use switchyard_engine::Settings;

use super::extract::{JsonBody, Writer};
use super::reply::with_revision;
use super::rows::{By, Db};
use super::schema::{SettingsChanges, SettingsDocument};
use crate::db::{commit_write, Audit};
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::state::AppState;

fn defaults() -> ApiResult<Map<String, Value>> {
    match serde_json::to_value(Settings::default()) {
        Ok(Value::Object(map)) => Ok(map),
        _ => Err(ApiError::Internal(anyhow::anyhow!(
            "settings do not serialise to an object"
        ))),
    }
}

/// Builds validated settings from `base` with `changes` applied, naming the first bad field.
pub fn merge_settings(
    base: Map<String, Value>,
    changes: Map<String, Value>,
) -> ApiResult<Settings> {
    let known = defaults()?;
    for (key, value) in &changes {
        if !known.contains_key(key) {
            return Err(ApiError::validation(
                key.clone(),
                format!("{key} is not a setting"),
            ));
        }
        // Type-check each key on its own so the error names it.
        let mut probe = known.clone();
        probe.insert(key.clone(), value.clone());
        if let Err(error) = serde_json::from_value::<Settings>(Value::Object(probe)) {
            return Err(ApiError::validation(key.clone(), format!("{key}: {error}")));
        }
    }
    let mut merged = known;
    merged.extend(base);
    merged.extend(changes);
    let settings: Settings = serde_json::from_value(Value::Object(merged))
        .map_err(|e| ApiError::Internal(anyhow::anyhow!("stored settings are unreadable: {e}")))?;
    let errors = settings.validate();
    if let Some(first) = errors.first() {
        let message = errors
            .iter()
            .map(|e| e.message.as_str())
            .collect::<Vec<_>>()
            .join("; ");
        return Err(ApiError::validation(first.field, message));
    }
    Ok(settings)
}

pub async fn load(executor: impl sqlx::PgExecutor<'_>) -> ApiResult<Settings> {
    let stored: sqlx::types::Json<Map<String, Value>> =
        sqlx::query_scalar("SELECT value FROM settings")
            .fetch_one(executor)
            .await?;
    merge_settings(stored.0, Map::new())
}

#[utoipa::path(get, path = "/api/v1/settings", tag = "settings", operation_id = "get_settings",
    responses((status = 200, description = "every global setting", body = SettingsDocument),
              (status = 401, body = ErrorBody)))]
pub async fn get_settings(State(state): State<AppState>) -> ApiResult<Json<Settings>> {
    Ok(Json(load(&state.pool).await?))
}

#[utoipa::path(put, path = "/api/v1/settings", tag = "settings", operation_id = "replace_settings", request_body = SettingsChanges,
    responses((status = 200, description = "the settings now in force", body = SettingsDocument),
              (status = 400, description = "the body is not a JSON object", body = ErrorBody),
              (status = 422, description = "an unknown key or an out-of-range value", body = ErrorBody)))]
pub async fn put_settings(
    w: Writer,
    JsonBody(changes): JsonBody<Map<String, Value>>,
) -> ApiResult<Response> {
    put_settings_in(&w.pool, w.by(), changes).await
}

/// [`put_settings`] in `db` (see [`Db`]).
pub(super) async fn put_settings_in<'c>(
    db: impl Db<'c>,
    by: By<'_>,
    changes: Map<String, Value>,
) -> ApiResult<Response> {
    let settings = merge_settings(Map::new(), changes)?;
    let tx = db.begin().await?;
    write(tx, by, settings).await
}

#[utoipa::path(patch, path = "/api/v1/settings", tag = "settings", operation_id = "update_settings",
    request_body = SettingsChanges,
    responses((status = 200, description = "the settings now in force", body = SettingsDocument),
              (status = 400, description = "the body is not a JSON object", body = ErrorBody),
              (status = 422, description = "an unknown key or an out-of-range value", body = ErrorBody)))]
pub async fn patch_settings(
    w: Writer,
    JsonBody(changes): JsonBody<Map<String, Value>>,
) -> ApiResult<Response> {
    patch_settings_in(&w.pool, w.by(), changes).await
}

/// [`patch_settings`] in `db` (see [`Db`]).
pub(super) async fn patch_settings_in<'c>(
    db: impl Db<'c>,
    by: By<'_>,
    changes: Map<String, Value>,
) -> ApiResult<Response> {
    let mut tx = db.begin().await?;
    let stored: sqlx::types::Json<Map<String, Value>> =
        sqlx::query_scalar("SELECT value FROM settings FOR UPDATE")
            .fetch_one(&mut *tx)
            .await?;
    let settings = merge_settings(stored.0, changes)?;
    write(tx, by, settings).await
}

async fn write(
    mut tx: sqlx::Transaction<'_, sqlx::Postgres>,
    by: By<'_>,
    settings: Settings,
) -> ApiResult<Response> {
    let value = serde_json::to_value(&settings)
        .map_err(|e| ApiError::Internal(anyhow::anyhow!("settings: {e}")))?;
    sqlx::query("UPDATE settings SET value = $1, updated_at = now()")
        .bind(sqlx::types::Json(&value))
        .execute(&mut *tx)
        .await?;
    if by.batched {
        tx.commit().await?;
        return Ok(Json(settings).into_response());
    }
    let audit = Audit {
        actor: by.actor,
        action: "update",
        resource: "settings",
        resource_id: None,
        detail: value,
        team: by.team,
    };
    let revision = commit_write(tx, audit).await?;
    Ok(with_revision(revision, Json(settings)))
}
