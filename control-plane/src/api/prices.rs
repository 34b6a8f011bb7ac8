//! `/api/v1/prices`: what a channel charges per million tokens of an upstream model (or a
//! wildcard pattern of them). The proxies price each request with the most specific pattern of
//! the channel that served it; a request no price matches is counted as unpriced, never as free.
//! Amounts are exact: stored in micro-USD per million tokens, answered as decimal strings.

use axum::response::Response;
use serde::{Deserialize, Serialize};
use serde_json::json;
use switchyard_engine::limit::format_micros;
use switchyard_engine::validate_pattern;
use utoipa::ToSchema;

use super::amount::DecimalText;
use super::crud::{crud, Item};
use super::extract::nullable;
use super::rows::{
    check_reference, commit_view, delete_locked, insert_sql, lock_row, table_row, update_sql, By,
    Change, Db, RowQuery, RowView,
};
use crate::db::ts;
use crate::error::{ApiError, ApiResult};

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct PriceView {
    pub id: i64,
    pub channel_id: i64,
    /// An upstream model name, or a pattern with `*`/`?` wildcards.
    pub model_pattern: String,
    /// USD per million input tokens, an exact decimal string.
    pub input_per_million: String,
    /// USD per million output tokens.
    pub output_per_million: String,
    /// USD per million cache-read input tokens; `null`: charged as other input.
    pub cached_input_per_million: Option<String>,
    #[schema(format = DateTime)]
    pub created_at: String,
    #[schema(format = DateTime)]
    pub updated_at: String,
}

#[derive(sqlx::FromRow)]
pub(super) struct PriceRow {
    id: i64,
    channel_id: i64,
    model_pattern: String,
    input_per_million: i64,
    output_per_million: i64,
    cached_input_per_million: Option<i64>,
    created_at: String,
    updated_at: String,
}

table_row!(PriceRow, "prices", "price", columns);

impl RowView for PriceView {
    type Row = PriceRow;
}

crud!(
    PriceView,
    PriceCreate,
    PricePatch,
    Item::new("price").invalid(
        "a field is invalid, or the channel already has a price for this pattern (`model_pattern`)",
    )
);

/// Micro-USD as stored (never negative: the table checks it).
fn usd(micros: i64) -> String {
    format_micros(u64::try_from(micros).unwrap_or(0))
}

impl From<PriceRow> for PriceView {
    fn from(r: PriceRow) -> PriceView {
        PriceView {
            id: r.id,
            channel_id: r.channel_id,
            model_pattern: r.model_pattern,
            input_per_million: usd(r.input_per_million),
            output_per_million: usd(r.output_per_million),
            cached_input_per_million: r.cached_input_per_million.map(usd),
            created_at: r.created_at,
            updated_at: r.updated_at,
        }
    }
}

fn columns() -> String {
    format!(
        "id, channel_id, model_pattern, input_per_million, output_per_million, \
         cached_input_per_million, {} AS created_at, {} AS updated_at",
        ts("created_at"),
        ts("updated_at")
    )
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PriceCreate {
    pub channel_id: i64,
    pub model_pattern: String,
    #[schema(value_type = super::amount::UsdAmount)]
    pub input_per_million: DecimalText,
    #[schema(value_type = super::amount::UsdAmount)]
    pub output_per_million: DecimalText,
    /// Absent or `null`: cache-read input tokens are charged as other input.
    #[schema(value_type = Option<super::amount::UsdAmount>)]
    pub cached_input_per_million: Option<DecimalText>,
}

/// Any subset; `cached_input_per_million: null` clears the cached-input price.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PricePatch {
    pub channel_id: Option<i64>,
    pub model_pattern: Option<String>,
    #[schema(value_type = Option<super::amount::UsdAmount>)]
    pub input_per_million: Option<DecimalText>,
    #[schema(value_type = Option<super::amount::UsdAmount>)]
    pub output_per_million: Option<DecimalText>,
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<super::amount::UsdAmount>)]
    pub cached_input_per_million: Option<Option<DecimalText>>,
}

/// A validated price, amounts in micro-USD per million tokens.
#[derive(Debug, Serialize)]
struct PriceSpec {
    channel_id: i64,
    model_pattern: String,
    input_per_million: u64,
    output_per_million: u64,
    cached_input_per_million: Option<u64>,
}

fn pattern(value: &str) -> ApiResult<String> {
    validate_pattern(value).map_err(|message| ApiError::validation("model_pattern", message))?;
    Ok(value.to_owned())
}

fn micros(value: u64) -> ApiResult<i64> {
    i64::try_from(value)
        .map_err(|_| ApiError::Internal(anyhow::anyhow!("amount {value} beyond i64")))
}

/// The columns a create or patch writes, in [`PriceSpec::bind`]'s order.
const WRITTEN: &str = "channel_id, model_pattern, input_per_million, output_per_million, \
    cached_input_per_million";

impl PriceSpec {
    /// Binds the price to the [`WRITTEN`] columns.
    fn bind<'q, O>(&'q self, query: RowQuery<'q, O>) -> ApiResult<RowQuery<'q, O>> {
        Ok(query
            .bind(self.channel_id)
            .bind(&self.model_pattern)
            .bind(micros(self.input_per_million)?)
            .bind(micros(self.output_per_million)?)
            .bind(self.cached_input_per_million.map(micros).transpose()?))
    }
}

impl TryFrom<PriceCreate> for PriceSpec {
    type Error = ApiError;

    fn try_from(raw: PriceCreate) -> ApiResult<PriceSpec> {
        Ok(PriceSpec {
            channel_id: raw.channel_id,
            model_pattern: pattern(&raw.model_pattern)?,
            input_per_million: raw.input_per_million.usd_micros("input_per_million")?,
            output_per_million: raw.output_per_million.usd_micros("output_per_million")?,
            cached_input_per_million: raw
                .cached_input_per_million
                .map(|v| v.usd_micros("cached_input_per_million"))
                .transpose()?,
        })
    }
}

/// A create body's validated spec, as the audit log records it ([`super::validate_body`]).
pub(super) fn create_detail(raw: PriceCreate) -> ApiResult<serde_json::Value> {
    Ok(PriceSpec::try_from(raw)?.detail())
}

impl PriceSpec {
    /// The audit log's record of the price, amounts as the API shows them.
    fn detail(&self) -> serde_json::Value {
        json!({
            "channel_id": self.channel_id,
            "model_pattern": self.model_pattern,
            "input_per_million": format_micros(self.input_per_million),
            "output_per_million": format_micros(self.output_per_million),
            "cached_input_per_million": self.cached_input_per_million.map(format_micros),
        })
    }

    /// The channel exists, and no other price has this channel and pattern (a 422 naming `model_pattern`, as a duplicate of any resource is).
    async fn check(&self, tx: &mut sqlx::PgConnection, id: Option<i64>) -> ApiResult<()> {
        check_reference(tx, "channels", "channel_id", self.channel_id).await?;
        let other: Option<i64> = sqlx::query_scalar(
            "SELECT id FROM prices WHERE channel_id = $1 AND model_pattern = $2 \
             AND id IS DISTINCT FROM $3",
        )
        .bind(self.channel_id)
        .bind(&self.model_pattern)
        .bind(id)
        .fetch_optional(&mut *tx)
        .await?;
        match other {
            Some(other) => Err(duplicate(self.channel_id, &self.model_pattern, Some(other))),
            None => Ok(()),
        }
    }
}

fn duplicate(channel: i64, pattern: &str, other: Option<i64>) -> ApiError {
    let which = other.map(|id| format!(" (price {id})")).unwrap_or_default();
    ApiError::validation(
        "model_pattern",
        format!(
            "model_pattern: channel {channel} already has a price for {:?}{which}; patch that one",
            crate::error::bounded(pattern, 64)
        ),
    )
}

/// A write's error: a unique violation of (channel, pattern) that raced the check is the same 422.
fn write_error(spec: &PriceSpec) -> impl FnOnce(sqlx::Error) -> ApiError + '_ {
    move |error| match &error {
        sqlx::Error::Database(db) if db.constraint() == Some("prices_channel_pattern_unique") => {
            duplicate(spec.channel_id, &spec.model_pattern, None)
        }
        _ => ApiError::from(error),
    }
}

/// The create of `POST /api/v1/prices`, in `db` (see [`Db`]).
pub(super) async fn create_in<'c>(
    db: impl Db<'c>,
    by: By<'_>,
    raw: PriceCreate,
) -> ApiResult<Response> {
    let spec = PriceSpec::try_from(raw)?;
    let mut tx = db.begin().await?;
    spec.check(&mut tx, None).await?;
    let sql = insert_sql::<PriceRow>(WRITTEN);
    let row = spec
        .bind(sqlx::query_as::<_, PriceRow>(&sql))?
        .fetch_one(&mut *tx)
        .await
        .map_err(write_error(&spec))?;
    let id = row.id;
    let view = PriceView::from(row);
    commit_view::<PriceRow>(tx, by, Change::Create, id, spec.detail(), view).await
}

/// The update of `PATCH /api/v1/prices/{id}`, in `db` (see [`Db`]).
pub(super) async fn patch_in<'c>(
    db: impl Db<'c>,
    by: By<'_>,
    id: i64,
    patch: PricePatch,
) -> ApiResult<Response> {
    let (mut tx, current) = lock_row::<PriceRow>(db, id).await?;
    let stored = |v: i64| u64::try_from(v).unwrap_or(0);
    let spec = PriceSpec {
        channel_id: patch.channel_id.unwrap_or(current.channel_id),
        model_pattern: match patch.model_pattern {
            Some(p) => pattern(&p)?,
            None => current.model_pattern,
        },
        input_per_million: match patch.input_per_million {
            Some(v) => v.usd_micros("input_per_million")?,
            None => stored(current.input_per_million),
        },
        output_per_million: match patch.output_per_million {
            Some(v) => v.usd_micros("output_per_million")?,
            None => stored(current.output_per_million),
        },
        cached_input_per_million: match patch.cached_input_per_million {
            Some(Some(v)) => Some(v.usd_micros("cached_input_per_million")?),
            Some(None) => None,
            None => current.cached_input_per_million.map(stored),
        },
    };
    spec.check(&mut tx, Some(id)).await?;
    let sql = update_sql::<PriceRow>(WRITTEN);
    let row = spec
        .bind(sqlx::query_as::<_, PriceRow>(&sql))?
        .bind(id)
        .fetch_one(&mut *tx)
        .await
        .map_err(write_error(&spec))?;
    let view = PriceView::from(row);
    commit_view::<PriceRow>(tx, by, Change::Update, id, spec.detail(), view).await
}

/// The delete of `DELETE /api/v1/prices/{id}`, in `db` (see [`Db`]).
pub(super) async fn delete_in<'c>(db: impl Db<'c>, by: By<'_>, id: i64) -> ApiResult<Response> {
    delete_locked::<PriceRow>(db, by, id, |current| {
        json!({ "channel_id": current.channel_id, "model_pattern": current.model_pattern })
    })
    .await
}
