//! `GET /api/v1/requests`: the request log (one row per finished request the proxies reported:
//! metadata, never a body), newest first, filtered, paged by an opaque cursor that is stable
//! under new arrivals (time, then request id), and exported whole as CSV or JSON Lines
//! (`format=csv|jsonl`, streamed page by page, at most [`EXPORT_MAX_ROWS`] rows).

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};
use sqlx::Row;
use switchyard_engine::limit::format_pico_usd;
use utoipa::{IntoParams, ToSchema};

use super::access::Caller;
use super::extract::Query;
use super::reply::{Page, DEFAULT_PAGE, MAX_PAGE};
use super::usage::{is_rfc3339, team_name};
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::state::AppState;

/// Most rows one export streams (narrow `since`/`until` to export more, a range at a time).
pub const EXPORT_MAX_ROWS: usize = 100_000;
/// Rows an export reads per query.
const EXPORT_PAGE: i64 = 1000;
/// Longest filter value (characters).
const MAX_FILTER_CHARS: usize = 256;

/// How the rows are answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RequestsFormat {
    /// One page of JSON (`data`, `next_cursor`).
    Json,
    /// Every matching row as CSV (a header line first), streamed.
    Csv,
    /// Every matching row as one JSON object per line, streamed.
    Jsonl,
}

#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct RequestsQuery {
    /// Only requests of this token (its name).
    pub token: Option<String>,
    /// Only requests of tokens of this team (its name).
    pub team: Option<String>,
    /// Only requests that matched this route (its model pattern).
    pub route: Option<String>,
    /// Only requests that asked for, or were served by, this model.
    pub model: Option<String>,
    /// Only requests whose final attempt went to this channel (its name).
    pub channel: Option<String>,
    /// Only requests answered with this HTTP status.
    pub status: Option<i32>,
    /// Only requests that failed with this error code.
    pub error_code: Option<String>,
    /// Only requests carrying this tag.
    pub tag: Option<String>,
    /// Only requests of this end user.
    pub end_user: Option<String>,
    /// Only requests that arrived at or after this instant (RFC 3339).
    #[param(value_type = Option<String>, format = DateTime)]
    pub since: Option<String>,
    /// Only requests that arrived before this instant (RFC 3339).
    #[param(value_type = Option<String>, format = DateTime)]
    pub until: Option<String>,
    /// Rows per page (1 to 500, default 50; `format=json` only).
    pub limit: Option<i64>,
    /// The previous page's `next_cursor`: the rows after it.
    pub cursor: Option<String>,
    /// `json` (default), `csv` or `jsonl`.
    #[param(inline)]
    pub format: Option<RequestsFormat>,
}

/// One finished request. Empty values are `null`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RequestLogEntry {
    /// When the request arrived (RFC 3339, UTC, millisecond precision).
    #[schema(format = DateTime)]
    pub at: String,
    pub request_id: String,
    /// The trace the request's spans belong to, when traces are exported.
    pub trace_id: Option<String>,
    pub token_id: Option<i64>,
    pub token: Option<String>,
    pub team: Option<String>,
    /// The matched route's model pattern.
    pub route: Option<String>,
    /// The endpoint (`chat_completions`, `messages`, `generate_content`, ...).
    pub endpoint: Option<String>,
    /// The model the client asked for.
    pub model: Option<String>,
    /// The upstream model the final attempt asked for.
    pub served_model: Option<String>,
    /// The channel of the final attempt.
    pub channel: Option<String>,
    pub attempts: i32,
    /// The HTTP status the client got.
    pub status: i16,
    /// Why the request failed: the gateway's error code, or the final attempt's error class,
    /// or how a stream ended early.
    pub error_code: Option<String>,
    pub latency_ms: i64,
    /// Streams: milliseconds until the first chunk arrived from the upstream.
    pub first_token_ms: Option<i64>,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cached_tokens: i64,
    /// USD, an exact decimal string; `null` when no price matched (unpriced).
    pub cost_usd: Option<String>,
    /// `hit`, `miss` or `bypass`; `null` when no cache rule covered the request.
    pub cache: Option<String>,
    pub tags: Vec<String>,
    pub end_user: Option<String>,
}

/// The query's filters and where to start, checked.
#[derive(Debug, Clone, Default)]
struct Filters {
    token: Option<String>,
    team: Option<String>,
    route: Option<String>,
    model: Option<String>,
    channel: Option<String>,
    status: Option<i32>,
    error_code: Option<String>,
    tag: Option<String>,
    end_user: Option<String>,
    since: Option<String>,
    until: Option<String>,
    /// The last row of the previous page: (arrival in Unix µs, request id).
    after: Option<(i64, String)>,
}

fn check_filters(q: RequestsQuery) -> ApiResult<Filters> {
    for (param, value) in [
        ("token", &q.token),
        ("team", &q.team),
        ("route", &q.route),
        ("model", &q.model),
        ("channel", &q.channel),
        ("error_code", &q.error_code),
        ("tag", &q.tag),
        ("end_user", &q.end_user),
    ] {
        if value
            .as_deref()
            .is_some_and(|v| v.chars().count() > MAX_FILTER_CHARS || v.contains('\0'))
        {
            return Err(ApiError::bad_request(
                Some(param),
                format!("{param} must be at most {MAX_FILTER_CHARS} characters, without NUL"),
            ));
        }
    }
    for (param, value) in [("since", &q.since), ("until", &q.until)] {
        if value.as_deref().is_some_and(|v| !is_rfc3339(v)) {
            return Err(ApiError::bad_request(
                Some(param),
                format!("{param} must be an RFC 3339 date-time such as 2026-01-31T12:00:00Z"),
            ));
        }
    }
    if q.status.is_some_and(|s| !(100..=599).contains(&s)) {
        return Err(ApiError::bad_request(
            Some("status"),
            "status must be an HTTP status, 100 to 599",
        ));
    }
    let after = match q.cursor.as_deref() {
        None | Some("") => None,
        Some(cursor) => Some(decode_cursor(cursor).ok_or_else(|| {
            ApiError::bad_request(Some("cursor"), "cursor is not one this API returned")
        })?),
    };
    Ok(Filters {
        token: q.token,
        team: q.team,
        route: q.route,
        model: q.model,
        channel: q.channel,
        status: q.status,
        error_code: q.error_code,
        tag: q.tag,
        end_user: q.end_user,
        since: q.since,
        until: q.until,
        after,
    })
}

/// A page's cursor: its last row's arrival (Unix µs) and request id, in hex.
fn encode_cursor(at_us: i64, request_id: &str) -> String {
    format!("{at_us}.{}", switchyard_proto::hex(request_id.as_bytes()))
}

fn decode_cursor(cursor: &str) -> Option<(i64, String)> {
    let (at, id) = cursor.split_once('.')?;
    let at = at.parse::<i64>().ok()?;
    if id.is_empty() || id.len() % 2 != 0 || id.len() > 256 {
        return None;
    }
    let bytes = (0..id.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(id.get(i..i + 2)?, 16).ok())
        .collect::<Option<Vec<u8>>>()?;
    let id = String::from_utf8(bytes).ok()?;
    id.bytes().all(|b| b.is_ascii_graphic()).then_some((at, id))
}

/// Newest first; every filter is a bound parameter (`NULL`: not filtered).
const SELECT: &str = "SELECT \
       to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"') AS at_text, \
       (extract(epoch FROM at) * 1000000)::bigint AS at_us, request_id, \
       nullif(trace_id, '') AS trace_id, nullif(token_id, 0) AS token_id, \
       nullif(token, '') AS token, nullif(team, '') AS team, nullif(route, '') AS route, \
       nullif(endpoint, '') AS endpoint, nullif(model, '') AS model, \
       nullif(served_model, '') AS served_model, nullif(channel, '') AS channel, attempts, \
       status, nullif(error_code, '') AS error_code, latency_ms, first_token_ms, \
       input_tokens, output_tokens, cached_tokens, cost_pico_usd, \
       nullif(cache, '') AS cache, tags, nullif(end_user, '') AS end_user \
     FROM request_log \
     WHERE ($1::text IS NULL OR token = $1) AND ($2::text IS NULL OR team = $2) \
       AND ($3::text IS NULL OR route = $3) \
       AND ($4::text IS NULL OR model = $4 OR served_model = $4) \
       AND ($5::text IS NULL OR channel = $5) AND ($6::integer IS NULL OR status = $6) \
       AND ($7::text IS NULL OR error_code = $7) \
       AND ($8::text IS NULL OR tags @> ARRAY[$8::text]) \
       AND ($9::text IS NULL OR end_user = $9) \
       AND ($10::timestamptz IS NULL OR at >= $10::timestamptz) \
       AND ($11::timestamptz IS NULL OR at < $11::timestamptz) \
       AND ($12::bigint IS NULL OR (at, request_id) < \
            (timestamptz 'epoch' + $12::bigint * interval '1 microsecond', $13::text)) \
     ORDER BY at DESC, request_id DESC LIMIT $14";

/// Up to `limit` rows after `filters.after`, each with its cursor.
async fn fetch(
    pool: &sqlx::PgPool,
    filters: &Filters,
    limit: i64,
) -> ApiResult<Vec<(RequestLogEntry, String)>> {
    let (after_at, after_id) = match &filters.after {
        Some((at, id)) => (Some(*at), Some(id.as_str())),
        None => (None, None),
    };
    let rows = sqlx::query(SELECT)
        .bind(filters.token.as_deref())
        .bind(filters.team.as_deref())
        .bind(filters.route.as_deref())
        .bind(filters.model.as_deref())
        .bind(filters.channel.as_deref())
        .bind(filters.status)
        .bind(filters.error_code.as_deref())
        .bind(filters.tag.as_deref())
        .bind(filters.end_user.as_deref())
        .bind(filters.since.as_deref())
        .bind(filters.until.as_deref())
        .bind(after_at)
        .bind(after_id)
        .bind(limit)
        .fetch_all(pool)
        .await
        .map_err(read_error)?;
    rows.iter()
        .map(|row| entry(row).map_err(read_error))
        .collect()
}

/// An impossible date that passes the format check (February 30th) is the client's; the
/// database away is a 503; anything else the server's.
fn read_error(error: sqlx::Error) -> ApiError {
    if let sqlx::Error::Database(db) = &error {
        if db.code().is_some_and(|c| c.starts_with("22")) {
            return ApiError::bad_request(None, "since/until is not a valid date-time");
        }
    }
    if crate::error::is_unavailable(&error) {
        return ApiError::from(error);
    }
    ApiError::Internal(anyhow::Error::new(error).context("reading the request log"))
}

fn entry(row: &sqlx::postgres::PgRow) -> Result<(RequestLogEntry, String), sqlx::Error> {
    let request_id: String = row.try_get("request_id")?;
    let cursor = encode_cursor(row.try_get("at_us")?, &request_id);
    let cost: Option<i64> = row.try_get("cost_pico_usd")?;
    let entry = RequestLogEntry {
        at: row.try_get("at_text")?,
        request_id,
        trace_id: row.try_get("trace_id")?,
        token_id: row.try_get("token_id")?,
        token: row.try_get("token")?,
        team: row.try_get("team")?,
        route: row.try_get("route")?,
        endpoint: row.try_get("endpoint")?,
        model: row.try_get("model")?,
        served_model: row.try_get("served_model")?,
        channel: row.try_get("channel")?,
        attempts: row.try_get("attempts")?,
        status: row.try_get("status")?,
        error_code: row.try_get("error_code")?,
        latency_ms: row.try_get("latency_ms")?,
        first_token_ms: row.try_get("first_token_ms")?,
        input_tokens: row.try_get("input_tokens")?,
        output_tokens: row.try_get("output_tokens")?,
        cached_tokens: row.try_get("cached_tokens")?,
        cost_usd: cost.map(|c| format_pico_usd(u128::try_from(c).unwrap_or(0))),
        cache: row.try_get("cache")?,
        tags: row.try_get("tags")?,
        end_user: row.try_get("end_user")?,
    };
    Ok((entry, cursor))
}

#[utoipa::path(get, path = "/api/v1/requests", tag = "usage", operation_id = "list_requests",
    params(RequestsQuery),
    responses(
        (status = 200, description = "the request log, newest first: one page of JSON, or with \
                                      `format=csv|jsonl` every matching row (at most 100000) \
                                      streamed",
         content((Page<RequestLogEntry> = "application/json"), (String = "text/csv"),
                 (String = "application/x-ndjson"))),
        (status = 400, description = "a malformed filter, `since`/`until`, `limit` or `cursor`",
         body = ErrorBody),
        (status = 401, description = "missing or invalid admin token", body = ErrorBody),
        (status = 503, description = "the database is unavailable", body = ErrorBody)))]
pub async fn list_requests(
    State(state): State<AppState>,
    caller: Caller,
    Query(query): Query<RequestsQuery>,
) -> ApiResult<Response> {
    let format = query.format.unwrap_or(RequestsFormat::Json);
    let limit = query.limit.unwrap_or(DEFAULT_PAGE);
    if !(1..=MAX_PAGE).contains(&limit) {
        return Err(ApiError::bad_request(
            Some("limit"),
            format!("limit must be between 1 and {MAX_PAGE}, got {limit}"),
        ));
    }
    let mut filters = check_filters(query)?;
    // An admin limited to one team reads its team's requests only.
    if let Some(own) = team_name(&state.pool, caller.identity.team).await? {
        if filters.team.as_ref().is_some_and(|asked| *asked != own) {
            return Err(ApiError::OutsideTeam {
                message: format!("team: this admin token reads the requests of team {own:?} only"),
            });
        }
        filters.team = Some(own);
    }
    if format != RequestsFormat::Json {
        return export(state.pool.clone(), filters, format).await;
    }
    let mut rows = fetch(&state.pool, &filters, limit + 1).await?;
    let next_cursor = if rows.len() > usize::try_from(limit).unwrap_or(0) {
        rows.truncate(usize::try_from(limit).unwrap_or(0));
        rows.last().map(|(_, cursor)| cursor.clone())
    } else {
        None
    };
    let data = rows.into_iter().map(|(entry, _)| entry).collect();
    Ok(Json(Page { data, next_cursor }).into_response())
}

/// Every matching row in `format`, streamed a page at a time (the first page read before the
/// answer starts, so a bad filter is still a 400).
async fn export(
    pool: sqlx::PgPool,
    filters: Filters,
    format: RequestsFormat,
) -> ApiResult<Response> {
    let first = fetch(&pool, &filters, EXPORT_PAGE).await?;
    let (sender, receiver) = tokio::sync::mpsc::channel::<Bytes>(4);
    tokio::spawn(stream_rows(pool, filters, format, first, sender));
    let stream = futures_util::stream::unfold(receiver, |mut receiver| async move {
        let bytes = receiver.recv().await?;
        Some((Ok::<_, std::io::Error>(bytes), receiver))
    });
    let content_type = match format {
        RequestsFormat::Csv => "text/csv; charset=utf-8",
        _ => "application/x-ndjson",
    };
    Ok((
        [(header::CONTENT_TYPE, content_type)],
        Body::from_stream(stream),
    )
        .into_response())
}

/// Sends `page` and the pages after it to `sender`, encoded, until the rows or
/// [`EXPORT_MAX_ROWS`] run out or the client goes away.
async fn stream_rows(
    pool: sqlx::PgPool,
    mut filters: Filters,
    format: RequestsFormat,
    mut page: Vec<(RequestLogEntry, String)>,
    sender: tokio::sync::mpsc::Sender<Bytes>,
) {
    let mut sent = 0usize;
    if format == RequestsFormat::Csv {
        let _ = sender.send(Bytes::from_static(CSV_HEADER.as_bytes())).await;
    }
    loop {
        let full = page.len() == EXPORT_PAGE as usize;
        page.truncate(EXPORT_MAX_ROWS - sent);
        sent += page.len();
        let mut out = Vec::with_capacity(page.len() * 256);
        for (entry, _) in &page {
            write_row(&mut out, entry, format);
        }
        if sender.send(Bytes::from(out)).await.is_err() {
            return;
        }
        let Some((_, cursor)) = page.last().filter(|_| full && sent < EXPORT_MAX_ROWS) else {
            return;
        };
        filters.after = decode_cursor(cursor);
        page = match fetch(&pool, &filters, EXPORT_PAGE).await {
            Ok(page) => page,
            Err(error) => {
                // The answer has started: it ends short, and the log says why.
                tracing::warn!(error = %error, "request-log export stopped early");
                return;
            }
        };
    }
}

const CSV_HEADER: &str = "at,request_id,trace_id,token_id,token,team,route,endpoint,model,\
served_model,channel,attempts,status,error_code,latency_ms,first_token_ms,input_tokens,\
output_tokens,cached_tokens,cost_usd,cache,tags,end_user\n";

fn write_row(out: &mut Vec<u8>, entry: &RequestLogEntry, format: RequestsFormat) {
    if format == RequestsFormat::Jsonl {
        if serde_json::to_writer(&mut *out, entry).is_ok() {
            out.push(b'\n');
        }
        return;
    }
    let text = |v: &Option<String>| v.clone().unwrap_or_default();
    let number = |v: Option<i64>| v.map(|n| n.to_string()).unwrap_or_default();
    let cells = [
        entry.at.clone(),
        entry.request_id.clone(),
        text(&entry.trace_id),
        number(entry.token_id),
        text(&entry.token),
        text(&entry.team),
        text(&entry.route),
        text(&entry.endpoint),
        text(&entry.model),
        text(&entry.served_model),
        text(&entry.channel),
        entry.attempts.to_string(),
        entry.status.to_string(),
        text(&entry.error_code),
        entry.latency_ms.to_string(),
        number(entry.first_token_ms),
        entry.input_tokens.to_string(),
        entry.output_tokens.to_string(),
        entry.cached_tokens.to_string(),
        text(&entry.cost_usd),
        text(&entry.cache),
        entry.tags.join(";"),
        text(&entry.end_user),
    ];
    for (i, cell) in cells.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        csv_cell(out, cell);
    }
    out.push(b'\n');
}

/// One CSV cell (RFC 4180 quoting). A cell a spreadsheet would read as a formula (starting with
/// `=`, `+`, `-`, `@`, a tab or a carriage return) and that is not a number gets a leading `'`.
fn csv_cell(out: &mut Vec<u8>, cell: &str) {
    let formula =
        cell.starts_with(['=', '+', '-', '@', '\t', '\r']) && cell.parse::<f64>().is_err();
    let quote = formula || cell.contains([',', '"', '\n', '\r']);
    if quote {
        out.push(b'"');
    }
    if formula {
        out.push(b'\'');
    }
    for b in cell.bytes() {
        if b == b'"' {
            out.push(b'"');
        }
        out.push(b);
    }
    if quote {
        out.push(b'"');
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    #[test]
    fn a_cursor_round_trips_and_a_forged_one_is_refused() {
        let c = encode_cursor(1_765_000_000_123_000, "req-1.a/b");
        assert_eq!(
            decode_cursor(&c),
            Some((1_765_000_000_123_000, "req-1.a/b".to_owned()))
        );
        for bad in ["", "x", "12", "12.", "12.zz", "12.6", "a.6162", "12.20"] {
            assert_eq!(decode_cursor(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_csv_cell_is_quoted_when_needed_and_never_read_as_a_formula() {
        let cell = |s: &str| {
            let mut out = Vec::new();
            csv_cell(&mut out, s);
            String::from_utf8(out).unwrap()
        };
        assert_eq!(cell("plain"), "plain");
        assert_eq!(cell("a,b"), "\"a,b\"");
        assert_eq!(cell("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(cell("=1+1"), "\"'=1+1\"");
        assert_eq!(cell("-5"), "-5", "a number stays a number");
        assert_eq!(cell("@x"), "\"'@x\"");
    }
}
