//! The request log, the control plane's side: the rows the proxies send with their usage batches
//! (one per finished request: metadata, never a body) are checked and stored in `request_log`,
//! a table partitioned by the UTC day the request arrived; [`maintain`] makes the coming days'
//! partitions and drops whole partitions past the retention (`log_retention` runs it on one
//! replica).
//!
//! Stored at least once and at most once: the rows are inserted in the usage batch's own
//! transaction (a batch id applied once), and a row already stored under its arrival time and
//! request id is skipped (`ON CONFLICT DO NOTHING`), so the parts of a refused batch resent
//! under new ids add nothing twice. A row that cannot be stored as it is (a malformed request id,
//! a name too long or with a NUL, a status outside 100–599, a tag outside the tag rules, a token
//! figure beyond one request's bound) is left out alone, with a warning; so is a row of a day
//! that has no partition and is not within a day of now (a day already dropped by the retention,
//! or a proxy's clock far off). Ingest makes a missing partition of yesterday, today or tomorrow
//! itself, outside the batch's transaction.

use std::collections::BTreeSet;

use sqlx::PgPool;
use switchyard_proto::usage::{valid_tag, MAX_END_USER_CHARS, MAX_TAGS};
use switchyard_proto::{v1, MAX_TOKENS_PER_REQUEST};

/// Longest name a row may carry (characters).
const MAX_NAME_CHARS: usize = 256;
/// Latest accepted arrival (9999-12-31T23:59:59.999Z), Unix ms.
const MAX_AT_MS: i64 = 253_402_300_799_999;
const DAY_MS: i64 = 86_400_000;
/// Partitions made ahead of today by [`maintain`] (today and the next two days).
pub const DAYS_AHEAD: i64 = 2;

/// The UTC day (days since 1970-01-01) of a Unix-ms instant.
pub fn day_of_ms(ms: i64) -> i64 {
    ms.div_euclid(DAY_MS)
}

/// What makes a row impossible to store as it is, if anything.
fn check_row(r: &v1::RequestLogRecord) -> Result<(), String> {
    let id = &r.request_id;
    if id.is_empty() || id.len() > 128 || !id.bytes().all(|b| b.is_ascii_graphic()) {
        return Err("request_id must be 1 to 128 printable ASCII characters".to_owned());
    }
    if !(0..=MAX_AT_MS).contains(&r.started_unix_ms) {
        return Err(format!(
            "started_unix_ms {} is out of range",
            r.started_unix_ms
        ));
    }
    if !(100..=599).contains(&r.status) {
        return Err(format!("status {} is not an HTTP status", r.status));
    }
    for (field, value) in [
        ("trace_id", &r.trace_id),
        ("token", &r.token),
        ("team", &r.team),
        ("route", &r.route),
        ("endpoint", &r.endpoint),
        ("model", &r.model),
        ("served_model", &r.served_model),
        ("channel", &r.channel),
        ("error_code", &r.error_code),
        ("cache", &r.cache),
    ] {
        crate::db::check_reported_name(field, value, MAX_NAME_CHARS)?;
    }
    crate::db::check_reported_name("end_user", &r.end_user, MAX_END_USER_CHARS)?;
    if r.tags.len() > MAX_TAGS || !r.tags.iter().all(|t| valid_tag(t)) {
        return Err(format!(
            "tags must be at most {MAX_TAGS}, each 1 to 64 of ASCII letters, digits and _ - . : / ="
        ));
    }
    for (field, value) in [
        ("input_tokens", r.input_tokens),
        ("output_tokens", r.output_tokens),
        ("cached_tokens", r.cached_tokens),
    ] {
        if value > MAX_TOKENS_PER_REQUEST {
            return Err(format!("{field} {value} is beyond one request's bound"));
        }
    }
    Ok(())
}

fn clamp(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// The rows of a batch that can be stored, as one array per column (for one `unnest` insert).
#[derive(Default)]
pub struct LogColumns {
    at_ms: Vec<i64>,
    request_ids: Vec<String>,
    trace_ids: Vec<String>,
    token_ids: Vec<i64>,
    tokens: Vec<String>,
    teams: Vec<String>,
    routes: Vec<String>,
    endpoints: Vec<String>,
    models: Vec<String>,
    served_models: Vec<String>,
    channels: Vec<String>,
    attempts: Vec<i32>,
    statuses: Vec<i16>,
    error_codes: Vec<String>,
    latencies: Vec<i64>,
    first_tokens: Vec<Option<i64>>,
    inputs: Vec<i64>,
    outputs: Vec<i64>,
    cached: Vec<i64>,
    costs: Vec<Option<i64>>,
    caches: Vec<String>,
    /// Each row's tags joined by commas (a tag has none).
    tags: Vec<String>,
    end_users: Vec<String>,
}

impl LogColumns {
    pub fn len(&self) -> usize {
        self.at_ms.len()
    }

    pub fn is_empty(&self) -> bool {
        self.at_ms.is_empty()
    }

    fn push(&mut self, r: &v1::RequestLogRecord) {
        self.at_ms.push(r.started_unix_ms);
        self.request_ids.push(r.request_id.clone());
        self.trace_ids.push(r.trace_id.clone());
        self.token_ids.push(r.token_id);
        self.tokens.push(r.token.clone());
        self.teams.push(r.team.clone());
        self.routes.push(r.route.clone());
        self.endpoints.push(r.endpoint.clone());
        self.models.push(r.model.clone());
        self.served_models.push(r.served_model.clone());
        self.channels.push(r.channel.clone());
        self.attempts
            .push(i32::try_from(r.attempts).unwrap_or(i32::MAX));
        self.statuses.push(i16::try_from(r.status).unwrap_or(0));
        self.error_codes.push(r.error_code.clone());
        self.latencies.push(clamp(r.latency_ms));
        self.first_tokens.push(r.first_token_ms.map(clamp));
        self.inputs.push(clamp(r.input_tokens));
        self.outputs.push(clamp(r.output_tokens));
        self.cached.push(clamp(r.cached_tokens));
        self.costs.push(r.cost_pico_usd.map(clamp));
        self.caches.push(r.cache.clone());
        self.tags.push(r.tags.join(","));
        self.end_users.push(r.end_user.clone());
    }
}

/// The rows of `batch` that can be stored now: each checked, and its day's partition there
/// (made here when the day is within one of today's, `today` in days since 1970-01-01). Returns
/// them with the number left out. Runs before the batch's transaction: a partition is made in a
/// statement of its own.
pub async fn prepare(
    pool: &PgPool,
    batch: &v1::UsageBatch,
    today: i64,
) -> Result<(LogColumns, usize), sqlx::Error> {
    let mut refused = 0;
    let mut valid = Vec::with_capacity(batch.requests.len());
    for (i, r) in batch.requests.iter().enumerate() {
        match check_row(r) {
            Ok(()) => valid.push(r),
            Err(problem) => {
                tracing::warn!(batch_id = %batch.batch_id, client_id = %batch.client_id, row = i,
                    problem, "a request-log row cannot be stored; left out");
                refused += 1;
            }
        }
    }
    let days: BTreeSet<i64> = valid.iter().map(|r| day_of_ms(r.started_unix_ms)).collect();
    let mut open = BTreeSet::new();
    for day in days {
        let there = if (day - today).abs() <= 1 {
            ensure_partition(pool, day).await?;
            true
        } else {
            partition_exists(pool, day).await?
        };
        if there {
            open.insert(day);
        }
    }
    let mut columns = LogColumns::default();
    for r in valid {
        if open.contains(&day_of_ms(r.started_unix_ms)) {
            columns.push(r);
        } else {
            refused += 1;
            tracing::warn!(batch_id = %batch.batch_id, request_id = %r.request_id,
                started_unix_ms = r.started_unix_ms,
                "a request-log row's day has no partition (past the retention, or a clock far off); left out");
        }
    }
    Ok((columns, refused))
}

/// Makes the partition of `day` (days since 1970-01-01) unless it exists.
pub async fn ensure_partition(pool: &PgPool, day: i64) -> Result<(), sqlx::Error> {
    sqlx::query("SELECT request_log_partition(date '1970-01-01' + $1::integer)")
        .bind(i32::try_from(day).unwrap_or(i32::MAX))
        .execute(pool)
        .await?;
    Ok(())
}

async fn partition_exists(pool: &PgPool, day: i64) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT to_regclass('request_log_' || \
                to_char(date '1970-01-01' + $1::integer, 'YYYYMMDD')) IS NOT NULL",
    )
    .bind(i32::try_from(day).unwrap_or(i32::MAX))
    .fetch_one(pool)
    .await
}

/// Inserts the rows, one statement for all of them; a row already stored (the same arrival time
/// and request id) is skipped. Returns the rows added.
pub async fn insert(tx: &mut sqlx::PgConnection, c: LogColumns) -> Result<u64, sqlx::Error> {
    let done = sqlx::query(
        "INSERT INTO request_log (at, request_id, trace_id, token_id, token, team, route, \
                                  endpoint, model, served_model, channel, attempts, status, \
                                  error_code, latency_ms, first_token_ms, input_tokens, \
                                  output_tokens, cached_tokens, cost_pico_usd, cache, tags, \
                                  end_user) \
         SELECT timestamptz 'epoch' + a * interval '1 millisecond', rid, tid, tkid, tk, tm, r, \
                ep, m, sm, ch, att, st, ec, lat, ftt, i, o, ca, co, cc, \
                string_to_array(tg, ','), eu \
         FROM unnest($1::bigint[], $2::text[], $3::text[], $4::bigint[], $5::text[], \
                     $6::text[], $7::text[], $8::text[], $9::text[], $10::text[], $11::text[], \
                     $12::integer[], $13::smallint[], $14::text[], $15::bigint[], $16::bigint[], \
                     $17::bigint[], $18::bigint[], $19::bigint[], $20::bigint[], $21::text[], \
                     $22::text[], $23::text[]) \
              AS x(a, rid, tid, tkid, tk, tm, r, ep, m, sm, ch, att, st, ec, lat, ftt, i, o, \
                   ca, co, cc, tg, eu) \
         ON CONFLICT (at, request_id) DO NOTHING",
    )
    .bind(c.at_ms)
    .bind(c.request_ids)
    .bind(c.trace_ids)
    .bind(c.token_ids)
    .bind(c.tokens)
    .bind(c.teams)
    .bind(c.routes)
    .bind(c.endpoints)
    .bind(c.models)
    .bind(c.served_models)
    .bind(c.channels)
    .bind(c.attempts)
    .bind(c.statuses)
    .bind(c.error_codes)
    .bind(c.latencies)
    .bind(c.first_tokens)
    .bind(c.inputs)
    .bind(c.outputs)
    .bind(c.cached)
    .bind(c.costs)
    .bind(c.caches)
    .bind(c.tags)
    .bind(c.end_users)
    .execute(tx)
    .await?;
    Ok(done.rows_affected())
}

/// What one maintenance pass did: the partitions it dropped.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Maintained {
    pub dropped: Vec<String>,
}

/// One maintenance pass at `now_ms` (Unix ms, injected): makes the partitions of today and the
/// [`DAYS_AHEAD`] next days, and drops every partition of a day before the retention's first
/// (today − `retention_days`): whole partitions, never row by row.
pub async fn maintain(
    pool: &PgPool,
    now_ms: i64,
    retention_days: u32,
) -> Result<Maintained, sqlx::Error> {
    let today = day_of_ms(now_ms);
    for day in today..=today + DAYS_AHEAD {
        ensure_partition(pool, day).await?;
    }
    let first_kept = today - i64::from(retention_days);
    let old: Vec<String> = sqlx::query_scalar(
        "SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid \
         WHERE i.inhparent = 'request_log'::regclass \
           AND c.relname ~ '^request_log_[0-9]{8}$' \
           AND to_date(substr(c.relname, 13), 'YYYYMMDD') \
               < date '1970-01-01' + $1::integer \
         ORDER BY 1",
    )
    .bind(i32::try_from(first_kept).unwrap_or(i32::MIN))
    .fetch_all(pool)
    .await?;
    let mut out = Maintained::default();
    for name in old {
        // The name matched `request_log_` and eight digits: nothing to quote.
        sqlx::query(&format!("DROP TABLE IF EXISTS \"{name}\""))
            .execute(pool)
            .await?;
        tracing::info!(partition = %name, retention_days, "request-log partition dropped");
        out.dropped.push(name);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    fn row() -> v1::RequestLogRecord {
        v1::RequestLogRecord {
            started_unix_ms: 1_765_000_000_000,
            request_id: "req-1".into(),
            status: 200,
            tags: vec!["a".into()],
            ..v1::RequestLogRecord::default()
        }
    }

    #[test]
    fn a_row_is_checked_field_by_field() {
        assert!(check_row(&row()).is_ok());
        let bad: [fn(&mut v1::RequestLogRecord); 8] = [
            |r| r.request_id.clear(),
            |r| r.request_id = "a b".into(),
            |r| r.status = 99,
            |r| r.status = 600,
            |r| r.started_unix_ms = -1,
            |r| r.token = "x".repeat(257),
            |r| r.tags = vec!["a,b".into()],
            |r| r.input_tokens = MAX_TOKENS_PER_REQUEST + 1,
        ];
        for (i, spoil) in bad.iter().enumerate() {
            let mut r = row();
            spoil(&mut r);
            assert!(check_row(&r).is_err(), "case {i}");
        }
        let mut r = row();
        r.tags = (0..17).map(|i| format!("t{i}")).collect();
        assert!(check_row(&r).is_err());
        r.tags.pop();
        assert!(check_row(&r).is_ok());
        r.end_user = "u".repeat(257);
        assert!(check_row(&r).is_err());
    }

    #[test]
    fn a_day_is_the_utc_day_of_an_instant() {
        assert_eq!(day_of_ms(0), 0);
        assert_eq!(day_of_ms(DAY_MS - 1), 0);
        assert_eq!(day_of_ms(DAY_MS), 1);
        assert_eq!(day_of_ms(-1), -1);
    }
}
