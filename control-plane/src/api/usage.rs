//! `GET /api/v1/usage`: token usage reported by the proxies, summed over a time range and
//! grouped by one dimension (token, team, route, channel or upstream model).

use axum::extract::State;
use axum::Json;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::extract::Query;
use super::AppState;
use crate::db::ts;
use crate::error::{ApiError, ApiResult, ErrorBody};

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
}

impl UsageDimension {
    /// The `usage_minutes` column (a fixed set: safe to put in SQL text).
    fn column(self) -> &'static str {
        match self {
            UsageDimension::Token => "token",
            UsageDimension::Team => "team",
            UsageDimension::Route => "route",
            UsageDimension::Channel => "channel",
            UsageDimension::Model => "model",
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
    /// Group the totals by this dimension; absent: the total only.
    #[param(inline)]
    pub group_by: Option<UsageDimension>,
}

/// What a set of requests used. `input_tokens` includes the cached tokens. Sums saturate at
/// 9223372036854775807 (the largest 64-bit integer).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema, sqlx::FromRow,
)]
pub struct UsageTotals {
    pub requests: i64,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cached_tokens: i64,
}

/// The totals of one value of the grouping dimension.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema, sqlx::FromRow)]
pub struct UsageGroup {
    /// The dimension's value (`""` for tokens without a team).
    pub key: String,
    pub requests: i64,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cached_tokens: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct UsageReport {
    /// The range's start as applied (RFC 3339, UTC).
    #[schema(format = DateTime)]
    pub from: String,
    /// The range's end as applied (RFC 3339, UTC).
    #[schema(format = DateTime)]
    pub to: String,
    pub group_by: Option<UsageDimension>,
    /// Every request in the range.
    pub total: UsageTotals,
    /// One entry per value of `group_by`, ordered by it; empty without `group_by`.
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
        (status = 200, description = "token usage reported by the proxies (per-minute \
                                      aggregates; requests, input, output and cached tokens) \
                                      summed over the range, in total and per value of \
                                      `group_by`", body = UsageReport),
        (status = 400, description = "a malformed `from`/`to`, an unknown `group_by`, or \
                                      `from` not before `to`", body = ErrorBody),
        (status = 401, description = "missing or invalid admin token", body = ErrorBody),
        (status = 503, description = "the database is unavailable", body = ErrorBody)))]
pub async fn usage(
    State(state): State<AppState>,
    Query(query): Query<UsageQuery>,
) -> ApiResult<Json<UsageReport>> {
    check_time("from", query.from.as_deref())?;
    check_time("to", query.to.as_deref())?;
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
    let groups: Vec<UsageGroup> = match query.group_by {
        Some(dimension) => {
            let column = dimension.column();
            sqlx::query_as(&format!(
                "SELECT {column} AS key, least(sum(requests), $3)::bigint AS requests, \
                        least(sum(input_tokens), $3)::bigint AS input_tokens, \
                        least(sum(output_tokens), $3)::bigint AS output_tokens, \
                        least(sum(cached_tokens), $3)::bigint AS cached_tokens \
                 FROM usage_minutes WHERE bucket >= $1::timestamptz AND bucket < $2::timestamptz \
                 GROUP BY {column} ORDER BY {column}"
            ))
            .bind(&from)
            .bind(&to)
            .bind(i64::MAX)
            .fetch_all(&state.pool)
            .await
            .map_err(report_error)?
        }
        None => Vec::new(),
    };
    let total: UsageTotals = sqlx::query_as(
        "SELECT least(coalesce(sum(requests), 0), $3)::bigint AS requests, \
                least(coalesce(sum(input_tokens), 0), $3)::bigint AS input_tokens, \
                least(coalesce(sum(output_tokens), 0), $3)::bigint AS output_tokens, \
                least(coalesce(sum(cached_tokens), 0), $3)::bigint AS cached_tokens \
         FROM usage_minutes WHERE bucket >= $1::timestamptz AND bucket < $2::timestamptz",
    )
    .bind(&from)
    .bind(&to)
    .bind(i64::MAX)
    .fetch_one(&state.pool)
    .await
    .map_err(report_error)?;
    Ok(Json(UsageReport {
        from,
        to,
        group_by: query.group_by,
        total,
        groups,
    }))
}

#[cfg(test)]
mod tests {
    use super::is_rfc3339;

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
}
