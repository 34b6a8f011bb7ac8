//! `/api/v1/webhooks`: where notifications go. A webhook names a URL, the body it takes
//! (`json`: the whole event; `slack`: a Slack-compatible `{"text": …}`), the events it hears and
//! the budget percentages it hears about; each delivery is signed with its secret
//! (`x-switchyard-signature`). The secret is write-only, and a read shows the URL's origin only
//! (a Slack-style URL carries its own secret in the path).

use axum::extract::State;
use axum::response::Response;
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::json;
use utoipa::ToSchema;

use super::crud::{crud, Item};
use super::extract::Path;
use super::rows::{
    commit_view, delete_locked, fetch_row, insert_sql, lock_row, table_row, update_sql, By, Change,
    Db, RowQuery,
};
use crate::db::ts;
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::notify::event::Event;
use crate::state::AppState;

/// The budget percentages a webhook hears about unless it says otherwise.
pub const DEFAULT_THRESHOLDS: [i32; 3] = [50, 80, 100];

#[derive(Debug, Clone, Serialize, sqlx::FromRow, ToSchema)]
pub struct WebhookView {
    pub id: i64,
    pub name: String,
    /// The URL's origin, and `/****` when it has a path (never the path itself).
    pub url: String,
    /// `json` or `slack`.
    pub kind: String,
    /// `budget_threshold`, `limit_refusing`, `channel_auto_disabled`, `channel_recovered`,
    /// `trial_finished`.
    pub events: Vec<String>,
    /// Budget percentages (of a spend limit's value) this webhook is told about, for budgets
    /// without thresholds of their own (`notify_at`).
    pub thresholds: Vec<i32>,
    /// The control plane's environment variable the signing secret is read from; `null`: the
    /// secret is stored (and never shown).
    pub secret_env: Option<String>,
    pub enabled: bool,
    #[schema(format = DateTime)]
    pub created_at: String,
    #[schema(format = DateTime)]
    pub updated_at: String,
}

table_row!(WebhookView, "webhooks", "webhook", columns);

crud!(
    table WebhookView,
    WebhookCreate,
    WebhookPatch,
    Item::new("webhook").invalid("a field is invalid, or the name is taken")
);

/// SQL of the URL in `column` as a read shows it: its origin and `/****` when it has a path.
pub(crate) fn shown_url_sql(column: &str) -> String {
    format!(
        "CASE WHEN {column} ~ '^[a-z]+://[^/]+/.' \
              THEN substring({column} from '^[a-z]+://[^/]+') || '/****' ELSE {column} END"
    )
}

fn columns() -> String {
    format!(
        "id, name, {} AS url, \
         kind, events, thresholds, secret_env, enabled, {} AS created_at, {} AS updated_at",
        shown_url_sql("url"),
        ts("created_at"),
        ts("updated_at")
    )
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WebhookCreate {
    pub name: String,
    /// An `http://` or `https://` URL.
    pub url: String,
    /// `json` (the default) or `slack`.
    pub kind: Option<String>,
    pub events: Vec<String>,
    /// Default `[50, 80, 100]`; each 1 to 1000.
    pub thresholds: Option<Vec<i32>>,
    /// 16 to 256 bytes; signs every delivery. Write-only. Give this or `secret_env`.
    pub secret: Option<String>,
    /// The name of an environment variable of the control plane that holds the secret, read
    /// when a delivery is signed (each replica needs it). Give this or `secret`.
    pub secret_env: Option<String>,
    pub enabled: Option<bool>,
}

/// Any subset; `secret` or `secret_env` replaces the secret (not both).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WebhookPatch {
    pub name: Option<String>,
    pub url: Option<String>,
    pub kind: Option<String>,
    pub events: Option<Vec<String>>,
    pub thresholds: Option<Vec<i32>>,
    pub secret: Option<String>,
    pub secret_env: Option<String>,
    pub enabled: Option<bool>,
}

/// Where a webhook's signing secret comes from.
#[derive(Debug, Clone)]
enum Secret {
    Stored(String),
    /// An environment variable of the control plane, by name.
    Env(String),
}

impl Secret {
    /// The secret from a body's `secret` and `secret_env`: exactly one, checked (`None` when
    /// neither is given).
    fn given(secret: Option<String>, secret_env: Option<String>) -> ApiResult<Option<Secret>> {
        match (secret, secret_env) {
            (Some(_), Some(_)) => Err(invalid(
                "secret_env",
                "give `secret` or `secret_env`, not both".into(),
            )),
            (Some(secret), None) => {
                check_secret(&secret)?;
                Ok(Some(Secret::Stored(secret)))
            }
            (None, Some(name)) => {
                let valid = (1..=128).contains(&name.len())
                    && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
                if !valid {
                    return Err(invalid(
                        "secret_env",
                        "must be an environment variable's name (1 to 128 letters, digits and `_`)"
                            .into(),
                    ));
                }
                Ok(Some(Secret::Env(name)))
            }
            (None, None) => Ok(None),
        }
    }

    /// The `secret` and `secret_env` columns.
    fn columns(&self) -> (Option<&str>, Option<&str>) {
        match self {
            Secret::Stored(secret) => (Some(secret.as_str()), None),
            Secret::Env(name) => (None, Some(name.as_str())),
        }
    }
}

/// A webhook as written, checked.
struct Webhook {
    name: String,
    url: String,
    kind: String,
    events: Vec<String>,
    thresholds: Vec<i32>,
    enabled: bool,
}

fn invalid(field: &'static str, message: String) -> ApiError {
    ApiError::validation(field, format!("{field}: {message}"))
}

impl Webhook {
    fn check(self) -> ApiResult<Webhook> {
        let name = self.name.trim().to_owned();
        if name.is_empty() || name.chars().count() > 128 || name.chars().any(char::is_control) {
            return Err(invalid(
                "name",
                "must be 1 to 128 characters, none a control character".into(),
            ));
        }
        check_url(&self.url)?;
        if !matches!(self.kind.as_str(), "json" | "slack") {
            let kind = crate::error::bounded(&self.kind, 32);
            return Err(invalid(
                "kind",
                format!("{kind:?} is not one of json, slack"),
            ));
        }
        let mut events = Vec::with_capacity(self.events.len());
        for event in &self.events {
            let Some(event) = Event::parse(event) else {
                let shown = crate::error::bounded(event, 64);
                let names = Event::names();
                return Err(invalid(
                    "events",
                    format!("{shown:?} is not one of {names}"),
                ));
            };
            if !events.contains(&event.as_str().to_owned()) {
                events.push(event.as_str().to_owned());
            }
        }
        if events.is_empty() {
            return Err(invalid("events", "name at least one event".into()));
        }
        let mut thresholds = self.thresholds;
        thresholds.sort_unstable();
        thresholds.dedup();
        if thresholds.is_empty()
            || thresholds.len() > 10
            || thresholds.iter().any(|t| !(1..=1000).contains(t))
        {
            return Err(invalid(
                "thresholds",
                "1 to 10 percentages, each 1 to 1000".into(),
            ));
        }
        Ok(Webhook {
            name,
            events,
            thresholds,
            ..self
        })
    }
}

fn check_url(url: &str) -> ApiResult<()> {
    let parsed: http::Uri = url
        .parse()
        .map_err(|_| invalid("url", "is not a URL".into()))?;
    let scheme_ok = matches!(parsed.scheme_str(), Some("http" | "https"));
    if !scheme_ok || parsed.host().is_none_or(str::is_empty) || url.len() > 2048 {
        return Err(invalid(
            "url",
            "must be an http:// or https:// URL of at most 2048 bytes".into(),
        ));
    }
    Ok(())
}

fn check_secret(secret: &str) -> ApiResult<()> {
    if !(16..=256).contains(&secret.len()) {
        return Err(invalid("secret", "must be 16 to 256 bytes".into()));
    }
    Ok(())
}

/// The origin of `url`, what the audit log may say about it.
fn origin(url: &str) -> String {
    let parsed: Option<http::Uri> = url.parse().ok();
    parsed
        .and_then(|u| Some(format!("{}://{}", u.scheme_str()?, u.authority()?.host())))
        .unwrap_or_default()
}

/// The audit log's record of a webhook: never the secret, never the URL's path.
fn detail(w: &Webhook, secret: &Secret, secret_changed: bool) -> serde_json::Value {
    // The variable's name, never its value; a stored secret is never recorded.
    let secret_env = secret.columns().1;
    json!({
        "name": w.name,
        "url_origin": origin(&w.url),
        "kind": w.kind,
        "events": w.events,
        "thresholds": w.thresholds,
        "enabled": w.enabled,
        "secret_changed": secret_changed,
        "secret_env": secret_env,
    })
}

fn from_create(raw: WebhookCreate) -> ApiResult<(Webhook, Secret)> {
    let secret = Secret::given(raw.secret, raw.secret_env)?
        .ok_or_else(|| invalid("secret", "give `secret` or `secret_env`".into()))?;
    let webhook = Webhook {
        name: raw.name,
        url: raw.url,
        kind: raw.kind.unwrap_or_else(|| "json".to_owned()),
        events: raw.events,
        thresholds: raw
            .thresholds
            .unwrap_or_else(|| DEFAULT_THRESHOLDS.to_vec()),
        enabled: raw.enabled.unwrap_or(true),
    }
    .check()?;
    Ok((webhook, secret))
}

/// The columns a create or patch writes, in [`bind`]'s order.
const WRITTEN: &str = "name, url, kind, events, thresholds, enabled, secret, secret_env";

fn bind<'q>(
    query: RowQuery<'q, WebhookView>,
    w: &'q Webhook,
    secret: &'q Secret,
) -> RowQuery<'q, WebhookView> {
    let (stored, env) = secret.columns();
    query
        .bind(&w.name)
        .bind(&w.url)
        .bind(&w.kind)
        .bind(&w.events)
        .bind(&w.thresholds)
        .bind(w.enabled)
        .bind(stored)
        .bind(env)
}

/// A unique violation of the name is a 422 naming `name`.
fn write_error(error: sqlx::Error) -> ApiError {
    match &error {
        sqlx::Error::Database(db) if db.constraint() == Some("webhooks_name_key") => {
            invalid("name", "a webhook of that name exists already".into())
        }
        _ => ApiError::from(error),
    }
}

/// The create of `POST /api/v1/webhooks`, in `db` (see [`Db`]).
pub(super) async fn create_in<'c>(
    db: impl Db<'c>,
    by: By<'_>,
    raw: WebhookCreate,
) -> ApiResult<Response> {
    let (webhook, secret) = from_create(raw)?;
    let mut tx = db.begin().await?;
    let sql = insert_sql::<WebhookView>(WRITTEN);
    let view = bind(sqlx::query_as(&sql), &webhook, &secret)
        .fetch_one(&mut *tx)
        .await
        .map_err(write_error)?;
    let detail = detail(&webhook, &secret, true);
    commit_view::<WebhookView>(tx, by, Change::Create, view.id, detail, view).await
}

#[derive(sqlx::FromRow)]
struct Stored {
    url: String,
    secret: Option<String>,
    secret_env: Option<String>,
}

/// The update of `PATCH /api/v1/webhooks/{id}`, in `db` (see [`Db`]).
pub(super) async fn patch_in<'c>(
    db: impl Db<'c>,
    by: By<'_>,
    id: i64,
    patch: WebhookPatch,
) -> ApiResult<Response> {
    let given = Secret::given(patch.secret, patch.secret_env)?;
    let (mut tx, current) = lock_row::<WebhookView>(db, id).await?;
    // The view masks the URL and leaves the secret out: what is kept is read as stored.
    let stored: Stored =
        sqlx::query_as("SELECT url, secret, secret_env FROM webhooks WHERE id = $1")
            .bind(id)
            .fetch_one(&mut *tx)
            .await?;
    let secret_changed = given.is_some();
    let secret = match (given, stored.secret, stored.secret_env) {
        (Some(given), _, _) => given,
        (None, Some(secret), _) => Secret::Stored(secret),
        (None, None, env) => Secret::Env(env.unwrap_or_default()),
    };
    let webhook = Webhook {
        name: patch.name.unwrap_or(current.name),
        url: patch.url.unwrap_or(stored.url),
        kind: patch.kind.unwrap_or(current.kind),
        events: patch.events.unwrap_or(current.events),
        thresholds: patch.thresholds.unwrap_or(current.thresholds),
        enabled: patch.enabled.unwrap_or(current.enabled),
    }
    .check()?;
    let sql = update_sql::<WebhookView>(WRITTEN);
    let view = bind(sqlx::query_as(&sql), &webhook, &secret)
        .bind(id)
        .fetch_one(&mut *tx)
        .await
        .map_err(write_error)?;
    let detail = detail(&webhook, &secret, secret_changed);
    commit_view::<WebhookView>(tx, by, Change::Update, id, detail, view).await
}

/// One delivery of an event to a webhook, as `GET /api/v1/webhooks/{id}/deliveries` shows it.
#[derive(Debug, Serialize, sqlx::FromRow, ToSchema)]
pub struct DeliveryView {
    pub event_id: i64,
    /// The event's name (`budget_threshold`, …).
    pub event: String,
    /// The event's line for a person.
    pub text: Option<String>,
    /// When the event was recorded.
    #[schema(format = DateTime)]
    pub at: String,
    /// `pending` (sent again at `next_at`), `delivered` or `failed` (no attempt left).
    pub state: String,
    pub attempts: i32,
    /// The last failed attempt's error (`answered 500`, a timeout, …).
    pub last_error: Option<String>,
    #[schema(format = DateTime)]
    pub next_at: Option<String>,
    #[schema(format = DateTime)]
    pub delivered_at: Option<String>,
}

/// A webhook's recent deliveries, newest first.
#[derive(Debug, Serialize, ToSchema)]
pub struct DeliveryList {
    pub data: Vec<DeliveryView>,
}

/// The deliveries a listing shows at most.
const RECENT_DELIVERIES: i64 = 50;

#[utoipa::path(get, path = "/api/v1/webhooks/{id}/deliveries", tag = "webhooks",
    operation_id = "webhook_deliveries",
    params(("id" = i64, Path, description = "The webhook's id")),
    responses((status = 200, body = DeliveryList,
               description = "The webhook's 50 most recent deliveries, newest first"),
              (status = 404, body = ErrorBody)))]
pub async fn deliveries(
    State(state): State<AppState>,
    Path(id): Path<i64>,
) -> ApiResult<Json<DeliveryList>> {
    fetch_row::<WebhookView>(&state.pool, id, false).await?;
    let sql = format!(
        "SELECT d.event_id, e.event, e.payload->>'text' AS text, {} AS at, d.state, d.attempts, \
           d.last_error, CASE WHEN d.state = 'pending' THEN {} END AS next_at, \
           {} AS delivered_at \
         FROM notification_deliveries d JOIN notification_events e ON e.id = d.event_id \
         WHERE d.webhook_id = $1 ORDER BY e.at DESC, d.event_id DESC LIMIT $2",
        ts("e.at"),
        ts("d.next_at"),
        ts("d.delivered_at")
    );
    let data = sqlx::query_as(&sql)
        .bind(id)
        .bind(RECENT_DELIVERIES)
        .fetch_all(&state.pool)
        .await?;
    Ok(Json(DeliveryList { data }))
}

/// The delete of `DELETE /api/v1/webhooks/{id}`, in `db` (see [`Db`]); its pending deliveries
/// go with it.
pub(super) async fn delete_in<'c>(db: impl Db<'c>, by: By<'_>, id: i64) -> ApiResult<Response> {
    delete_locked::<WebhookView>(db, by, id, |current| json!({ "name": current.name })).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_and_the_audit_log_show_the_origin_only() {
        assert_eq!(
            origin("https://hooks.slack.com/services/T0/B0/secret"),
            "https://hooks.slack.com"
        );
        assert_eq!(origin("http://127.0.0.1:9000/hook"), "http://127.0.0.1");
        assert_eq!(origin("not a url"), "");
        assert!(check_url("ftp://example.com/x").is_err());
        assert!(check_url("https:///x").is_err());
        assert!(check_url("/relative").is_err());
        assert!(check_url("https://example.com/hook").is_ok());
    }
}
