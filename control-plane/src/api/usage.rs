//! `GET /api/v1/usage`: usage reported by the proxies (requests, tokens, cost), summed over a
//! time range, in total and grouped by any of token, team, route, channel and upstream model, and
//! optionally by UTC hour or day.

use axum::extract::State;
use axum::Json;
use serde::{Deserialize, Serialize};
use sqlx::Row;
use switchyard_engine::limit::format_pico_usd;
use utoipa::{IntoParams, ToSchema};

use super::access::Caller;
use super::extract::Query;
use crate::db::ts;
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::state::AppState;

/// A dimension usage can be grouped by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum UsageDimension {
    /// The Switchyard token's name.
    Token,
    /// The token's team (`""`: tokens without a team).
    Team,
    /// The matched route's model pattern.
    Route,
    /// The channel that served.
    Channel,
    /// The upstream model the channel was asked for.
    Model,
    /// A tag of the request (read from the request log: a request counts once under each of
    /// its tags; requests without tags are in no group).
    Tag,
    /// The request's end user (read from the request log; `""`: none named).
    EndUser,
}

impl UsageDimension {
    const ALL: [UsageDimension; 7] = [
        UsageDimension::Token,
        UsageDimension::Team,
        UsageDimension::Route,
        UsageDimension::Channel,
        UsageDimension::Model,
        UsageDimension::Tag,
        UsageDimension::EndUser,
    ];

    /// Its name in `group_by` and in the groups' fields.
    fn name(self) -> &'static str {
        match self {
            UsageDimension::Token => "token",
            UsageDimension::Team => "team",
            UsageDimension::Route => "route",
            UsageDimension::Channel => "channel",
            UsageDimension::Model => "model",
            UsageDimension::Tag => "tag",
            UsageDimension::EndUser => "end_user",
        }
    }

    fn parse(text: &str) -> Option<UsageDimension> {
        UsageDimension::ALL.into_iter().find(|d| d.name() == text)
    }

    /// Only the request log knows it.
    fn in_log_only(self) -> bool {
        matches!(self, UsageDimension::Tag | UsageDimension::EndUser)
    }
}

/// Where a report's figures are read: the per-minute aggregates, or (grouped by tag or end user)
/// the request log, as far back as its retention keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    Minutes,
    Log,
}

impl Source {
    fn of(dimensions: &[UsageDimension]) -> Source {
        if dimensions.iter().any(|d| d.in_log_only()) {
            Source::Log
        } else {
            Source::Minutes
        }
    }

    /// The rows summed (`tagged`: one per (request, tag)), a fixed text.
    fn table(self, tagged: bool) -> &'static str {
        match (self, tagged) {
            (Source::Minutes, _) => "usage_minutes",
            (Source::Log, false) => "request_log",
            (Source::Log, true) => "(SELECT * FROM request_log, unnest(tags) AS tag) AS l",
        }
    }

    /// The time column.
    fn time(self) -> &'static str {
        match self {
            Source::Minutes => "bucket",
            Source::Log => "at",
        }
    }

    /// The column of `d` (a fixed set: safe to put in SQL text).
    fn column(self, d: UsageDimension) -> &'static str {
        match (self, d) {
            (Source::Log, UsageDimension::Model) => "served_model",
            _ => d.name(),
        }
    }

    fn sums(self) -> &'static str {
        match self {
            Source::Minutes => SUMS,
            Source::Log => LOG_SUMS,
        }
    }

    /// The rows counted: the request log's that reached a channel or were a cache hit (as the
    /// per-minute aggregates count them).
    fn counted(self) -> &'static str {
        match self {
            Source::Minutes => "TRUE",
            Source::Log => "(channel <> '' OR cache = 'hit')",
        }
    }

    /// `SELECT {keys}{sums} FROM … WHERE` the range (`$1`, `$2`), the rows counted and, when
    /// `$4` is not null, the team named `$4`.
    fn select(self, keys: &str, tagged: bool) -> String {
        format!(
            "SELECT {keys}{} FROM {} WHERE {t} >= $1::timestamptz AND {t} < $2::timestamptz \
             AND {} AND ($4::text IS NULL OR team = $4)",
            self.sums(),
            self.table(tagged),
            self.counted(),
            t = self.time(),
        )
    }
}

/// What the request log sums to the per-minute aggregates' figures, saturating at `$3` (a hit's
/// savings are not in the log: 0).
const LOG_SUMS: &str = "least(count(*), $3)::bigint AS requests, \
     least(coalesce(sum(input_tokens), 0), $3)::bigint AS input_tokens, \
     least(coalesce(sum(output_tokens), 0), $3)::bigint AS output_tokens, \
     least(coalesce(sum(cached_tokens), 0), $3)::bigint AS cached_tokens, \
     least(count(*) FILTER (WHERE cost_pico_usd IS NULL AND cache <> 'hit'), $3)::bigint \
       AS unpriced_requests, \
     coalesce(sum(cost_pico_usd), 0)::text AS cost_pico_usd, \
     least(count(*) FILTER (WHERE cache = 'hit'), $3)::bigint AS cache_hits, \
     0::bigint AS saved_input_tokens, 0::bigint AS saved_output_tokens, \
     '0' AS saved_cost_pico_usd";

/// A time bucket usage can be grouped by (UTC).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum UsageBucket {
    Hour,
    Day,
}

impl UsageBucket {
    fn unit(self) -> &'static str {
        match self {
            UsageBucket::Hour => "hour",
            UsageBucket::Day => "day",
        }
    }
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct UsageQuery {
    /// Start of the range (RFC 3339, inclusive); default: 24 hours before `to`. A minute counts
    /// when its start is in [from, to).
    #[param(value_type = Option<String>, format = DateTime)]
    pub from: Option<String>,
    /// End of the range (RFC 3339, exclusive); default: now.
    #[param(value_type = Option<String>, format = DateTime)]
    pub to: Option<String>,
    /// Group the totals by these dimensions, comma-separated, each at most once: any of
    /// `token`, `team`, `route`, `channel`, `model`, `tag`, `end_user` (e.g. `team,model`);
    /// absent: no dimension. With `tag` or `end_user` the whole report (total included) is read
    /// from the request log, so it reaches back as far as the log's retention; a request counts
    /// once under each of its tags, and what cache hits saved is not in the log (0).
    #[param(value_type = Option<String>, example = "team,model")]
    pub group_by: Option<String>,
    /// Also group by this UTC time bucket (`hour` or `day`).
    #[param(inline)]
    pub bucket: Option<UsageBucket>,
}

/// What a set of requests used and cost. `input_tokens` includes the cached tokens. Sums
/// saturate at 9223372036854775807 (the largest 64-bit integer).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct UsageTotals {
    pub requests: i64,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cached_tokens: i64,
    /// Cost of the priced requests in USD, an exact decimal string (`"0.00725"`); `null` when
    /// every request was unpriced (no price matched its channel and upstream model). With
    /// `unpriced_requests` above 0 it covers the priced requests only.
    pub cost_usd: Option<String>,
    /// Requests no price matched: their cost is unknown, not zero.
    pub unpriced_requests: i64,
    /// Requests answered from the response cache (counted in `requests`, with no tokens and
    /// no cost).
    pub cache_hits: i64,
    /// What the answers the hits served had used when they were fresh.
    pub saved_input_tokens: i64,
    pub saved_output_tokens: i64,
    /// What those answers had cost, in USD (an exact decimal string; unpriced ones count 0).
    pub saved_cost_usd: String,
}

/// The totals of one combination of the grouping dimensions' values (and time bucket).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct UsageGroup {
    /// The value of the first `group_by` dimension (with a single dimension, the group's key;
    /// `""` for tokens without a team, and when grouped by `bucket` only).
    pub key: String,
    /// With `token` in `group_by`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// With `team` in `group_by` (`""`: tokens without a team).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub team: Option<String>,
    /// With `route` in `group_by`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route: Option<String>,
    /// With `channel` in `group_by`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel: Option<String>,
    /// With `model` in `group_by`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// With `tag` in `group_by`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
    /// With `end_user` in `group_by` (`""`: requests naming none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_user: Option<String>,
    /// With `bucket`: the start of the hour or day (RFC 3339, UTC).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(format = DateTime)]
    pub bucket_start: Option<String>,
    pub requests: i64,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cached_tokens: i64,
    /// As in [`UsageTotals`]: `null` when every request of the group was unpriced.
    pub cost_usd: Option<String>,
    pub unpriced_requests: i64,
    /// As in [`UsageTotals`].
    pub cache_hits: i64,
    pub saved_input_tokens: i64,
    pub saved_output_tokens: i64,
    pub saved_cost_usd: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct UsageReport {
    /// The range's start as applied (RFC 3339, UTC).
    #[schema(format = DateTime)]
    pub from: String,
    /// The range's end as applied (RFC 3339, UTC).
    #[schema(format = DateTime)]
    pub to: String,
    /// The grouping dimension when `group_by` names exactly one.
    pub group_by: Option<UsageDimension>,
    /// Every grouping dimension, in the order `group_by` names them.
    pub dimensions: Vec<UsageDimension>,
    pub bucket: Option<UsageBucket>,
    /// Every request in the range.
    pub total: UsageTotals,
    /// One entry per combination of the grouping values, ordered by them (dimensions first, in
    /// `group_by` order, then the bucket); empty without `group_by` and `bucket`.
    pub groups: Vec<UsageGroup>,
}

/// A strict RFC 3339 date-time: `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)`.
pub fn is_rfc3339(value: &str) -> bool {
    let b = value.as_bytes();
    let digits = |range: std::ops::Range<usize>| {
        b.get(range.clone())
            .is_some_and(|s| s.iter().all(u8::is_ascii_digit))
    };
    let number = |range: std::ops::Range<usize>| -> u32 {
        value
            .get(range)
            .and_then(|s| s.parse().ok())
            .unwrap_or(u32::MAX)
    };
    if b.len() < 20
        || !digits(0..4)
        || b[4] != b'-'
        || !digits(5..7)
        || b[7] != b'-'
        || !digits(8..10)
        || !matches!(b[10], b'T' | b't')
        || !digits(11..13)
        || b[13] != b':'
        || !digits(14..16)
        || b[16] != b':'
        || !digits(17..19)
    {
        return false;
    }
    if !(1..=12).contains(&number(5..7))
        || !(1..=31).contains(&number(8..10))
        || number(11..13) > 23
        || number(14..16) > 59
        || number(17..19) > 60
    {
        return false;
    }
    let mut rest = &b[19..];
    if rest.first() == Some(&b'.') {
        let fraction = rest[1..].iter().take_while(|c| c.is_ascii_digit()).count();
        if fraction == 0 {
            return false;
        }
        rest = &rest[1 + fraction..];
    }
    match rest {
        [b'Z' | b'z'] => true,
        [b'+' | b'-', h1, h2, b':', m1, m2] => {
            [h1, h2, m1, m2].iter().all(|c| c.is_ascii_digit())
                && (u32::from(*h1 - b'0') * 10 + u32::from(*h2 - b'0')) <= 23
                && (u32::from(*m1 - b'0') * 10 + u32::from(*m2 - b'0')) <= 59
        }
        _ => false,
    }
}

fn check_time(param: &'static str, value: Option<&str>) -> ApiResult<()> {
    match value {
        Some(v) if !is_rfc3339(v) => Err(ApiError::bad_request(
            Some(param),
            format!("{param} must be an RFC 3339 date-time such as 2026-01-31T12:00:00Z"),
        )),
        _ => Ok(()),
    }
}

/// An error reading the stored usage: the database being away is a 503; anything else is the
/// server's fault (the client's range was checked already), never a validation error.
fn report_error(error: sqlx::Error) -> ApiError {
    if crate::error::is_unavailable(&error) {
        return ApiError::from(error);
    }
    ApiError::Internal(anyhow::Error::new(error).context("reading the stored usage"))
}

#[utoipa::path(get, path = "/api/v1/usage", tag = "usage", operation_id = "get_usage",
    params(UsageQuery),
    responses(
        (status = 200, description = "usage reported by the proxies (per-minute aggregates; \
                                      requests, input, output and cached tokens, cost) summed \
                                      over the range, in total and per combination of the \
                                      `group_by` values and `bucket`", body = UsageReport),
        (status = 400, description = "a malformed `from`/`to`, an unknown or repeated \
                                      `group_by` dimension, an unknown `bucket`, or `from` not \
                                      before `to`", body = ErrorBody),
        (status = 401, description = "missing or invalid admin token", body = ErrorBody),
        (status = 503, description = "the database is unavailable", body = ErrorBody)))]
pub async fn usage(
    State(state): State<AppState>,
    caller: Caller,
    Query(query): Query<UsageQuery>,
) -> ApiResult<Json<UsageReport>> {
    check_time("from", query.from.as_deref())?;
    // An admin limited to one team sees only its usage (recorded under the team's name).
    let team = team_name(&state.pool, caller.identity.team).await?;
    check_time("to", query.to.as_deref())?;
    let dimensions = parse_dimensions(query.group_by.as_deref())?;
    let (from, to, ordered): (String, String, bool) = sqlx::query_as(&format!(
        "WITH b AS (SELECT coalesce($2::timestamptz, now()) AS t), \
              r AS (SELECT coalesce($1::timestamptz, b.t - interval '1 day') AS f, b.t FROM b) \
         SELECT {}, {}, f < t FROM r",
        ts("f"),
        ts("t")
    ))
    .bind(query.from.as_deref())
    .bind(query.to.as_deref())
    .fetch_one(&state.pool)
    .await
    .map_err(|error| match &error {
        // An impossible date that passes the format check (February 30th).
        sqlx::Error::Database(db) if db.code().is_some_and(|c| c.starts_with("22")) => {
            ApiError::bad_request(None, "from/to is not a valid date-time")
        }
        _ => ApiError::from(error),
    })?;
    if !ordered {
        return Err(ApiError::bad_request(
            Some("from"),
            "from must be before to",
        ));
    }
    // The groups and the total are read from one snapshot of the table, so they always add up
    // even while the proxies' reports keep arriving.
    let mut tx = state.pool.begin().await.map_err(report_error)?;
    sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        .execute(&mut *tx)
        .await
        .map_err(report_error)?;
    let groups = if dimensions.is_empty() && query.bucket.is_none() {
        Vec::new()
    } else {
        let range = (from.as_str(), to.as_str(), team.as_deref());
        grouped(&mut tx, range, &dimensions, query.bucket).await?
    };
    let row = sqlx::query(&Source::of(&dimensions).select("", false))
        .bind(&from)
        .bind(&to)
        .bind(i64::MAX)
        .bind(team.as_deref())
        .fetch_one(&mut *tx)
        .await
        .map_err(report_error)?;
    let total = totals(&row).map_err(report_error)?;
    tx.commit().await.map_err(report_error)?;
    Ok(Json(UsageReport {
        from,
        to,
        group_by: match dimensions.as_slice() {
            [one] => Some(*one),
            _ => None,
        },
        dimensions,
        bucket: query.bucket,
        total,
        groups,
    }))
}

/// The sums every total and group reads, saturating at `$3` (cost is summed exactly, as text).
const SUMS: &str = "least(coalesce(sum(requests), 0), $3)::bigint AS requests, \
     least(coalesce(sum(input_tokens), 0), $3)::bigint AS input_tokens, \
     least(coalesce(sum(output_tokens), 0), $3)::bigint AS output_tokens, \
     least(coalesce(sum(cached_tokens), 0), $3)::bigint AS cached_tokens, \
     least(coalesce(sum(unpriced_requests), 0), $3)::bigint AS unpriced_requests, \
     coalesce(sum(cost_pico_usd), 0)::text AS cost_pico_usd, \
     least(coalesce(sum(cache_hits), 0), $3)::bigint AS cache_hits, \
     least(coalesce(sum(saved_input_tokens), 0), $3)::bigint AS saved_input_tokens, \
     least(coalesce(sum(saved_output_tokens), 0), $3)::bigint AS saved_output_tokens, \
     coalesce(sum(saved_cost_pico_usd), 0)::text AS saved_cost_pico_usd";

/// `group_by` as a list of distinct dimensions (`None` or `""`: none).
fn parse_dimensions(text: Option<&str>) -> ApiResult<Vec<UsageDimension>> {
    let Some(text) = text.filter(|t| !t.trim().is_empty()) else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for item in text.split(',') {
        let item = item.trim();
        let dimension = UsageDimension::parse(item).ok_or_else(|| {
            ApiError::bad_request(
                Some("group_by"),
                format!(
                    "group_by: `{}` is not one of token, team, route, channel, model, tag, \
                     end_user",
                    crate::error::bounded(item, 64)
                ),
            )
        })?;
        if out.contains(&dimension) {
            return Err(ApiError::bad_request(
                Some("group_by"),
                format!("group_by names `{item}` twice"),
            ));
        }
        out.push(dimension);
    }
    Ok(out)
}

/// The name of `team` (the caller's, when it administers one team only), which usage and the
/// request log record; `None` for a fleet admin.
pub(super) async fn team_name(pool: &sqlx::PgPool, team: Option<i64>) -> ApiResult<Option<String>> {
    let Some(team) = team else {
        return Ok(None);
    };
    let name: Option<String> = sqlx::query_scalar("SELECT name FROM teams WHERE id = $1")
        .bind(team)
        .fetch_optional(pool)
        .await?;
    // A team admin's team always exists (its tokens go with it); were it gone, nothing matches.
    Ok(Some(name.unwrap_or_default()))
}

/// The cost of `requests` requests of which `unpriced` matched no price: `None` when all did.
fn cost_usd(pico: &str, requests: i64, unpriced: i64) -> Result<Option<String>, sqlx::Error> {
    if requests > 0 && unpriced >= requests {
        return Ok(None);
    }
    // An integral numeric; beyond u128 (never: rows × i64::MAX) it saturates.
    let digits = pico.trim();
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(sqlx::Error::Decode(
            format!("summed cost {pico:?} is not a whole number of pico-USD").into(),
        ));
    }
    let pico = digits.parse::<u128>().unwrap_or(u128::MAX);
    Ok(Some(format_pico_usd(pico)))
}

fn totals(row: &sqlx::postgres::PgRow) -> Result<UsageTotals, sqlx::Error> {
    let requests: i64 = row.try_get("requests")?;
    let unpriced: i64 = row.try_get("unpriced_requests")?;
    let pico: String = row.try_get("cost_pico_usd")?;
    let saved_pico: String = row.try_get("saved_cost_pico_usd")?;
    Ok(UsageTotals {
        requests,
        input_tokens: row.try_get("input_tokens")?,
        output_tokens: row.try_get("output_tokens")?,
        cached_tokens: row.try_get("cached_tokens")?,
        cost_usd: cost_usd(&pico, requests, unpriced)?,
        unpriced_requests: unpriced,
        cache_hits: row.try_get("cache_hits")?,
        saved_input_tokens: row.try_get("saved_input_tokens")?,
        saved_output_tokens: row.try_get("saved_output_tokens")?,
        // Never "all unpriced": a saving is reported as what is known of it.
        saved_cost_usd: cost_usd(&saved_pico, 0, 0)?.unwrap_or_default(),
    })
}

/// The sums per combination of the dimensions' values (and bucket), ordered by them, over the
/// range `from`..`to` (of the team named, when one is).
async fn grouped(
    db: &mut sqlx::PgConnection,
    (from, to, team): (&str, &str, Option<&str>),
    dimensions: &[UsageDimension],
    bucket: Option<UsageBucket>,
) -> ApiResult<Vec<UsageGroup>> {
    // Only fixed column names and units reach the SQL text.
    let source = Source::of(dimensions);
    let mut keys: Vec<String> = dimensions
        .iter()
        .map(|d| format!("{} AS d_{}", source.column(*d), d.name()))
        .collect();
    if let Some(bucket) = bucket {
        keys.push(format!(
            "{} AS bucket_start",
            ts(&format!(
                "date_trunc('{}', {}, 'UTC')",
                bucket.unit(),
                source.time()
            ))
        ));
    }
    let positions: Vec<String> = (1..=keys.len()).map(|i| i.to_string()).collect();
    let positions = positions.join(", ");
    let tagged = dimensions.contains(&UsageDimension::Tag);
    let select = source.select(&format!("{}, ", keys.join(", ")), tagged);
    let rows = sqlx::query(&format!(
        "{select} GROUP BY {positions} ORDER BY {positions}"
    ))
    .bind(from)
    .bind(to)
    .bind(i64::MAX)
    .bind(team)
    .fetch_all(db)
    .await
    .map_err(report_error)?;
    rows.iter()
        .map(|row| group_of(row, dimensions, bucket))
        .collect::<Result<Vec<_>, sqlx::Error>>()
        .map_err(report_error)
}

/// One group's row as the report states it.
fn group_of(
    row: &sqlx::postgres::PgRow,
    dimensions: &[UsageDimension],
    bucket: Option<UsageBucket>,
) -> Result<UsageGroup, sqlx::Error> {
    let value = |d: UsageDimension| -> Result<Option<String>, sqlx::Error> {
        if dimensions.contains(&d) {
            row.try_get(format!("d_{}", d.name()).as_str()).map(Some)
        } else {
            Ok(None)
        }
    };
    let t = totals(row)?;
    let key = match dimensions.first() {
        Some(first) => value(*first)?.unwrap_or_default(),
        None => String::new(),
    };
    Ok(UsageGroup {
        key,
        token: value(UsageDimension::Token)?,
        team: value(UsageDimension::Team)?,
        route: value(UsageDimension::Route)?,
        channel: value(UsageDimension::Channel)?,
        model: value(UsageDimension::Model)?,
        tag: value(UsageDimension::Tag)?,
        end_user: value(UsageDimension::EndUser)?,
        bucket_start: if bucket.is_some() {
            Some(row.try_get("bucket_start")?)
        } else {
            None
        },
        requests: t.requests,
        input_tokens: t.input_tokens,
        output_tokens: t.output_tokens,
        cached_tokens: t.cached_tokens,
        cost_usd: t.cost_usd,
        unpriced_requests: t.unpriced_requests,
        cache_hits: t.cache_hits,
        saved_input_tokens: t.saved_input_tokens,
        saved_output_tokens: t.saved_output_tokens,
        saved_cost_usd: t.saved_cost_usd,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_date_times_are_recognised() {
        for ok in [
            "2026-01-31T12:00:00Z",
            "2026-01-31t12:00:00z",
            "2026-01-31T12:00:00.123456Z",
            "2026-01-31T12:00:00+02:00",
            "2026-01-31T12:00:00.5-07:30",
        ] {
            assert!(is_rfc3339(ok), "{ok}");
        }
        for bad in [
            "",
            "2026-01-31",
            "2026-01-31 12:00:00Z",
            "2026-13-01T00:00:00Z",
            "2026-01-31T24:00:00Z",
            "2026-01-31T12:00:00",
            "2026-01-31T12:00:00.Z",
            "2026-01-31T12:00:00+0200",
            "yesterday",
            "2026-01-31T12:00:00Zjunk",
        ] {
            assert!(!is_rfc3339(bad), "{bad}");
        }
    }

    #[test]
    fn every_field_of_a_date_time_is_checked_at_its_bounds() {
        let base = "2026-01-31T12:00:00Z";
        // Each field replaced: (start, end, accepted values, refused values).
        let fields: [(usize, usize, &[&str], &[&str]); 6] = [
            (0, 4, &["0000", "9999"], &["20x6", "+026"]),
            (5, 7, &["01", "12"], &["00", "13", "1a"]),
            (8, 10, &["01", "31"], &["00", "32", "-1"]),
            (11, 13, &["00", "23"], &["24", "2:"]),
            (14, 16, &["00", "59"], &["60", "5x"]),
            (17, 19, &["00", "59", "60"], &["61", "x0"]),
        ];
        for (start, end, good, bad) in fields {
            for value in good {
                let text = format!("{}{value}{}", &base[..start], &base[end..]);
                assert!(is_rfc3339(&text), "{text}");
            }
            for value in bad {
                let text = format!("{}{value}{}", &base[..start], &base[end..]);
                assert!(!is_rfc3339(&text), "{text}");
            }
        }
        // Each separator in its place.
        for (at, wrong) in [(4, "/"), (7, "/"), (10, "_"), (13, "."), (16, ".")] {
            let text = format!("{}{wrong}{}", &base[..at], &base[at + 1..]);
            assert!(!is_rfc3339(&text), "{text}");
        }
        // The shortest form is 20 characters; offsets at their bounds.
        assert!(!is_rfc3339("2026-01-31T12:00:00"));
        for ok in ["2026-01-31T12:00:00+23:59", "2026-01-31T12:00:00-00:00"] {
            assert!(is_rfc3339(ok), "{ok}");
        }
        for bad in [
            "2026-01-31T12:00:00+24:00",
            "2026-01-31T12:00:00+23:60",
            "2026-01-31T12:00:00+00:61",
            "2026-01-31T12:00:00+25:00",
            "2026-01-31T12:00:00+2a:00",
            "2026-01-31T12:00:00+02:0a",
            "2026-01-31T12:00:00+02-00",
            "2026-01-31T12:00:00.1",
            "2026-01-31T12:00:00.12x",
            "2026-01-31T12:00:00ZZ",
        ] {
            assert!(!is_rfc3339(bad), "{bad}");
        }
    }

    #[test]
    fn a_time_parameter_is_refused_by_its_name() {
        assert!(check_time("from", None).is_ok());
        assert!(check_time("from", Some("2026-01-31T12:00:00Z")).is_ok());
        match check_time("to", Some("soon")) {
            Err(ApiError::BadRequest { param, message }) => {
                assert_eq!(param.as_deref(), Some("to"));
                assert!(message.starts_with("to must be an RFC 3339"), "{message}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn group_by_names_distinct_dimensions_in_order() {
        assert_eq!(parse_dimensions(None).unwrap(), []);
        assert_eq!(parse_dimensions(Some(" ")).unwrap(), []);
        assert_eq!(
            parse_dimensions(Some("model, token,team,route,channel")).unwrap(),
            [
                UsageDimension::Model,
                UsageDimension::Token,
                UsageDimension::Team,
                UsageDimension::Route,
                UsageDimension::Channel
            ]
        );
        for bad in ["team,team", "colour", "team,", "Team"] {
            match parse_dimensions(Some(bad)) {
                Err(ApiError::BadRequest { param, .. }) => {
                    assert_eq!(param.as_deref(), Some("group_by"), "{bad}");
                }
                other => panic!("{bad}: {other:?}"),
            }
        }
        // Each dimension's column is its name in the API; each bucket's unit too.
        for d in UsageDimension::ALL {
            assert_eq!(serde_json::to_value(d).unwrap(), d.name());
        }
        for b in [UsageBucket::Hour, UsageBucket::Day] {
            assert_eq!(serde_json::to_value(b).unwrap(), b.unit());
        }
    }

    #[test]
    fn a_cost_is_reported_unless_no_request_had_a_price() {
        let cost = |pico: &str, requests, unpriced| cost_usd(pico, requests, unpriced).unwrap();
        assert_eq!(cost("1500000000000", 3, 0), Some("1.5".to_owned()));
        assert_eq!(cost(" 2 ", 3, 2), Some(format_pico_usd(2)));
        // Every request unpriced: no cost at all, rather than a cost of 0.
        assert_eq!(cost("0", 3, 3), None);
        assert_eq!(cost("0", 3, 4), None);
        // No request: a cost of 0.
        assert_eq!(cost("0", 0, 0), Some("0".to_owned()));
        // Beyond u128 it saturates.
        let huge = "9".repeat(60);
        assert_eq!(cost(&huge, 1, 0), Some(format_pico_usd(u128::MAX)));
        for bad in ["", "  ", "1.5", "-3", "1e9"] {
            assert!(cost_usd(bad, 1, 0).is_err(), "{bad:?}");
        }
    }
}
