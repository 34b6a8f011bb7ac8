//! Usage accounting, the control plane's side: applies the proxies' `ReportUsage` batches to
//! `usage_minutes` (one row per minute and dimensions, `ON CONFLICT DO UPDATE` adding) and
//! answers `GET /api/v1/usage` from it.
//!
//! Idempotent under retry: a batch's id is inserted into `usage_batches` in the same transaction
//! as its totals, so a batch is applied exactly once however often a proxy resends it (a resend
//! racing the first attempt waits on the id's row lock and then sees it taken).
//!
//! A proxy's figures are checked where they enter, and one record never costs the rest of its
//! batch: a record that cannot be stored as it is (a bucket that is no minute's start, a
//! dimension too long or with a NUL, more unpriced requests than requests) or that counts more
//! than [`MAX_RECORD_REQUESTS`] requests is left out, and a token figure beyond `requests` times
//! [`MAX_TOKENS_PER_REQUEST`] (or cached tokens beyond the input they are part of) counts as not
//! reported; the rest of the batch is applied, with a warning. A record's cost (pico-USD) is
//! taken as reported, saturating; a cost on a record none of whose requests was priced counts as
//! not reported. A shadow record the database refuses is left out alone ([`crate::shadow`]).
//! Sums saturate at `i64::MAX`, in Rust and in SQL (usage and shadow rows alike), so no batch
//! can fail on its figures. Only the batch itself can be refused (a malformed id, too many
//! records), and so can a batch whose usage rows meet a database error that retrying cannot cure
//! (a data or constraint error), instead of having the proxy resend it forever while its later
//! usage waits.

use std::collections::BTreeMap;

use sqlx::PgPool;
use switchyard_proto::{v1, MAX_RECORD_REQUESTS, MAX_TOKENS_PER_REQUEST};

/// Records one batch may carry.
pub const MAX_RECORDS: usize = 50_000;
/// Longest dimension value (characters).
pub const MAX_NAME_CHARS: usize = 256;
/// Latest accepted bucket start (9999-12-31T23:59:00Z).
const MAX_BUCKET: i64 = 253_402_300_740;

#[derive(Debug, thiserror::Error)]
pub enum UsageError {
    /// The batch can never be applied (a proxy drops it rather than retrying).
    #[error("invalid usage batch: {0}")]
    Invalid(String),
    #[error(transparent)]
    Database(#[from] sqlx::Error),
}

/// What applying a batch did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Applied {
    /// Rows added to or created in `usage_minutes` (0 for a duplicate).
    pub records: usize,
    /// The batch id had been applied before; nothing was added.
    pub duplicate: bool,
    /// Figures of the batch not taken because they cannot be true (records left out count one).
    pub refused_figures: usize,
    /// Request-log rows added (0 for a duplicate; a row stored before is not added again).
    pub log_rows: u64,
    /// Request-log rows left out (they cannot be stored, or their day has no partition).
    pub log_rows_refused: usize,
}

type Dimensions = (i64, String, String, String, String, String);

#[derive(Default, Clone, Copy)]
struct Totals {
    requests: i64,
    input: i64,
    output: i64,
    cached: i64,
    /// Pico-USD (10⁻¹² USD) of the priced requests.
    cost: i64,
    unpriced: i64,
    hits: i64,
    saved_input: i64,
    saved_output: i64,
    saved_cost: i64,
}

impl Totals {
    /// Adds `other`'s figures, saturating.
    fn add(&mut self, other: Totals) {
        self.requests = self.requests.saturating_add(other.requests);
        self.input = self.input.saturating_add(other.input);
        self.output = self.output.saturating_add(other.output);
        self.cached = self.cached.saturating_add(other.cached);
        self.cost = self.cost.saturating_add(other.cost);
        self.unpriced = self.unpriced.saturating_add(other.unpriced);
        self.hits = self.hits.saturating_add(other.hits);
        self.saved_input = self.saved_input.saturating_add(other.saved_input);
        self.saved_output = self.saved_output.saturating_add(other.saved_output);
        self.saved_cost = self.saved_cost.saturating_add(other.saved_cost);
    }
}

fn clamp(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// A token figure of a record counting `requests` requests, if it can be true.
fn plausible_tokens(requests: u64, tokens: u64) -> bool {
    requests
        .checked_mul(MAX_TOKENS_PER_REQUEST)
        .is_some_and(|max| tokens <= max)
}

/// What makes a record impossible to store as it is (a bucket that is no minute's start, a
/// malformed dimension, more unpriced requests than requests), if anything.
fn check_record(r: &v1::UsageRecord) -> Result<(), String> {
    if !(0..=MAX_BUCKET).contains(&r.bucket_start_unix_s) || r.bucket_start_unix_s % 60 != 0 {
        return Err(format!(
            "bucket_start_unix_s must be the start of a minute, got {}",
            r.bucket_start_unix_s
        ));
    }
    for (field, value) in [
        ("token", &r.token),
        ("team", &r.team),
        ("route", &r.route),
        ("channel", &r.channel),
        ("model", &r.model),
    ] {
        crate::db::check_reported_name(field, value, MAX_NAME_CHARS)?;
    }
    if r.unpriced_requests > r.requests {
        return Err(format!(
            "unpriced_requests ({}) is more than its requests ({})",
            r.unpriced_requests, r.requests
        ));
    }
    if r.cache_hits > r.requests {
        return Err(format!(
            "cache_hits ({}) is more than its requests ({})",
            r.cache_hits, r.requests
        ));
    }
    Ok(())
}

/// A batch checked and summed: the totals per (bucket, dimensions), in key order (so concurrent
/// batches lock rows in the same order and cannot deadlock), and the figures refused.
#[derive(Default)]
struct Aggregated {
    sums: BTreeMap<Dimensions, Totals>,
    refused_figures: usize,
}

/// Checks a batch and sums its records per (bucket, dimensions). A malformed batch id or too many
/// records refuse the batch; impossible records and figures are left out (see the module's
/// documentation).
fn aggregate(batch: &v1::UsageBatch) -> Result<Aggregated, UsageError> {
    check_batch(batch)?;
    let mut out = Aggregated::default();
    for (i, r) in batch.records.iter().enumerate() {
        let Some(figures) = record_figures(batch, i, r, &mut out.refused_figures) else {
            continue;
        };
        let key = (
            r.bucket_start_unix_s,
            r.token.clone(),
            r.team.clone(),
            r.route.clone(),
            r.channel.clone(),
            r.model.clone(),
        );
        out.sums.entry(key).or_default().add(figures);
    }
    Ok(out)
}

/// A malformed batch id or too many records (or shadow records) refuse the whole batch.
fn check_batch(batch: &v1::UsageBatch) -> Result<(), UsageError> {
    let id = &batch.batch_id;
    if id.is_empty() || id.len() > 128 || !id.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(UsageError::Invalid(
            "batch_id must be 1 to 128 printable ASCII characters".to_owned(),
        ));
    }
    if batch.records.len() > MAX_RECORDS {
        return Err(UsageError::Invalid(format!(
            "{} records in one batch; at most {MAX_RECORDS}",
            batch.records.len()
        )));
    }
    if batch.requests.len() > MAX_RECORDS {
        return Err(UsageError::Invalid(format!(
            "{} request-log rows in one batch; at most {MAX_RECORDS}",
            batch.requests.len()
        )));
    }
    if batch.shadows.len() > MAX_RECORDS {
        return Err(UsageError::Invalid(format!(
            "{} shadow records in one batch; at most {MAX_RECORDS}",
            batch.shadows.len()
        )));
    }
    if batch.semantic_trials.len() > MAX_RECORDS {
        return Err(UsageError::Invalid(format!(
            "{} semantic trial records in one batch; at most {MAX_RECORDS}",
            batch.semantic_trials.len()
        )));
    }
    if batch.guardrails.len() > MAX_RECORDS {
        return Err(UsageError::Invalid(format!(
            "{} guardrail records in one batch; at most {MAX_RECORDS}",
            batch.guardrails.len()
        )));
    }
    Ok(())
}

/// Whether a record can be stored at all; one that cannot is named in a warning and left out.
fn storable(batch: &v1::UsageBatch, i: usize, r: &v1::UsageRecord) -> bool {
    let id = &batch.batch_id;
    if let Err(problem) = check_record(r) {
        tracing::warn!(
            batch_id = %id,
            client_id = %batch.client_id,
            record = i,
            problem,
            "a usage record cannot be stored; left out"
        );
        return false;
    }
    if r.requests > MAX_RECORD_REQUESTS {
        tracing::warn!(
            batch_id = %id,
            client_id = %batch.client_id,
            record = i,
            requests = r.requests,
            max = MAX_RECORD_REQUESTS,
            "a usage record counts more requests than one proxy can serve; left out"
        );
        return false;
    }
    true
}

/// Record `i`'s figures as they count: `None` when the record is left out, and a figure that
/// cannot be true as 0. Each record or figure refused is logged and counted in `refused`.
fn record_figures(
    batch: &v1::UsageBatch,
    i: usize,
    r: &v1::UsageRecord,
    refused: &mut usize,
) -> Option<Totals> {
    if !storable(batch, i, r) {
        *refused += 1;
        return None;
    }
    let id = &batch.batch_id;
    let mut figure = |field: &'static str, value: u64, plausible: bool| -> u64 {
        if plausible {
            return value;
        }
        tracing::warn!(
            batch_id = %id,
            client_id = %batch.client_id,
            record = i,
            field,
            value,
            requests = r.requests,
            "a usage record reports an impossible figure; counted as not reported"
        );
        *refused += 1;
        0
    };
    let input = figure(
        "input_tokens",
        r.input_tokens,
        plausible_tokens(r.requests, r.input_tokens),
    );
    let output = figure(
        "output_tokens",
        r.output_tokens,
        plausible_tokens(r.requests, r.output_tokens),
    );
    // Cached tokens are part of the input.
    let cached = figure("cached_tokens", r.cached_tokens, r.cached_tokens <= input);
    // A cost needs a priced request to come from.
    let cost = figure(
        "cost_pico_usd",
        r.cost_pico_usd,
        r.cost_pico_usd == 0 || r.unpriced_requests < r.requests,
    );
    let saved_input = figure(
        "saved_input_tokens",
        r.saved_input_tokens,
        plausible_tokens(r.cache_hits, r.saved_input_tokens),
    );
    let saved_output = figure(
        "saved_output_tokens",
        r.saved_output_tokens,
        plausible_tokens(r.cache_hits, r.saved_output_tokens),
    );
    // A saving needs a hit to come from.
    let saved_cost = figure(
        "saved_cost_pico_usd",
        r.saved_cost_pico_usd,
        r.saved_cost_pico_usd == 0 || r.cache_hits > 0,
    );
    Some(Totals {
        requests: clamp(r.requests),
        input: clamp(input),
        output: clamp(output),
        cached: clamp(cached),
        cost: clamp(cost),
        unpriced: clamp(r.unpriced_requests),
        hits: clamp(r.cache_hits),
        saved_input: clamp(saved_input),
        saved_output: clamp(saved_output),
        saved_cost: clamp(saved_cost),
    })
}

/// A database error applying a batch: one that the same batch would meet again (a data or
/// constraint error, SQLSTATE classes 22 and 23) refuses it, so the proxy drops it rather than
/// resending it forever; any other (the database away, a conflict) is worth a retry.
fn storage_error(error: sqlx::Error) -> UsageError {
    if let sqlx::Error::Database(db) = &error {
        if crate::db::is_data_error(db.as_ref()) {
            return UsageError::Invalid(format!(
                "the database refused the batch ({})",
                db.message()
            ));
        }
    }
    UsageError::Database(error)
}

/// Applies one batch, exactly once per batch id.
pub async fn apply_batch(pool: &PgPool, batch: &v1::UsageBatch) -> Result<Applied, UsageError> {
    let Aggregated {
        sums,
        refused_figures,
    } = aggregate(batch)?;
    let today = crate::request_log::day_of_ms(switchyard_proto::usage::unix_now_s() * 1000);
    let (log, log_rows_refused) = crate::request_log::prepare(pool, batch, today)
        .await
        .map_err(storage_error)?;
    let stored = store(pool, batch, sums, log).await.map_err(storage_error)?;
    // The shadow rules these comparisons belong to may have reached a stop.
    crate::shadow::check_stops(pool, &stored.shadows).await;
    Ok(Applied {
        records: stored.records,
        duplicate: stored.duplicate,
        refused_figures,
        log_rows: stored.log_rows,
        log_rows_refused,
    })
}

/// What storing a batch did.
#[derive(Default)]
struct Stored {
    /// Usage rows added or created.
    records: usize,
    /// The batch id was already applied: nothing was stored.
    duplicate: bool,
    /// The shadow rules touched.
    shadows: Vec<i64>,
    /// Request-log rows added.
    log_rows: u64,
}

/// Stores summed records, shadow comparisons and request-log rows under the batch's id.
async fn store(
    pool: &PgPool,
    batch: &v1::UsageBatch,
    sums: BTreeMap<Dimensions, Totals>,
    log: crate::request_log::LogColumns,
) -> Result<Stored, sqlx::Error> {
    let mut tx = pool.begin().await?;
    let fresh = sqlx::query(
        "INSERT INTO usage_batches (batch_id, records) VALUES ($1, $2) \
         ON CONFLICT (batch_id) DO NOTHING",
    )
    .bind(&batch.batch_id)
    .bind(i32::try_from(sums.len()).unwrap_or(i32::MAX))
    .execute(&mut *tx)
    .await?
    .rows_affected()
        == 1;
    if !fresh {
        tx.rollback().await?;
        return Ok(Stored {
            duplicate: true,
            ..Stored::default()
        });
    }
    let records = sums.len();
    if records > 0 {
        add_minutes(&mut tx, sums).await?;
    }
    let shadows = crate::shadow::store(&mut tx, batch).await?;
    let log_rows = if log.is_empty() {
        0
    } else {
        crate::request_log::insert(&mut tx, log).await?
    };
    crate::semantic::store(&mut tx, batch).await?;
    crate::guardrail_report::store(&mut tx, batch).await?;
    // Hard limits the proxy saw start refusing: notified once per limit and window.
    crate::notify::sources::limit_refusals(&mut tx, &batch.events).await?;
    // Forget ids far older than any retry (the index makes this a short range scan).
    sqlx::query("DELETE FROM usage_batches WHERE applied_at < now() - interval '7 days'")
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(Stored {
        records,
        duplicate: false,
        shadows,
        log_rows,
    })
}

/// The minute sums as one array per column, for one `unnest` insert.
#[derive(Default)]
struct MinuteColumns {
    buckets: Vec<i64>,
    tokens: Vec<String>,
    teams: Vec<String>,
    routes: Vec<String>,
    channels: Vec<String>,
    models: Vec<String>,
    requests: Vec<i64>,
    inputs: Vec<i64>,
    outputs: Vec<i64>,
    cached: Vec<i64>,
    costs: Vec<i64>,
    unpriced: Vec<i64>,
    hits: Vec<i64>,
    saved_inputs: Vec<i64>,
    saved_outputs: Vec<i64>,
    saved_costs: Vec<i64>,
}

impl MinuteColumns {
    fn of(sums: BTreeMap<Dimensions, Totals>) -> MinuteColumns {
        let mut c = MinuteColumns::default();
        for ((bucket, token, team, route, channel, model), t) in sums {
            c.buckets.push(bucket);
            c.tokens.push(token);
            c.teams.push(team);
            c.routes.push(route);
            c.channels.push(channel);
            c.models.push(model);
            c.requests.push(t.requests);
            c.inputs.push(t.input);
            c.outputs.push(t.output);
            c.cached.push(t.cached);
            c.costs.push(t.cost);
            c.unpriced.push(t.unpriced);
            c.hits.push(t.hits);
            c.saved_inputs.push(t.saved_input);
            c.saved_outputs.push(t.saved_output);
            c.saved_costs.push(t.saved_cost);
        }
        c
    }
}

/// Adds the summed records to `usage_minutes`, one upsert for all of them.
async fn add_minutes(
    tx: &mut sqlx::PgConnection,
    sums: BTreeMap<Dimensions, Totals>,
) -> Result<(), sqlx::Error> {
    let c = MinuteColumns::of(sums);
    sqlx::query(
        "INSERT INTO usage_minutes AS u (bucket, token, team, route, channel, model, \
                                         requests, input_tokens, output_tokens, cached_tokens, \
                                         cost_pico_usd, unpriced_requests, cache_hits, \
                                         saved_input_tokens, saved_output_tokens, \
                                         saved_cost_pico_usd) \
         SELECT to_timestamp(b), t, tm, r, c, m, rq, i, o, ca, co, up, h, si, so, sc \
         FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::text[], \
                     $6::text[], $7::bigint[], $8::bigint[], $9::bigint[], $10::bigint[], \
                     $12::bigint[], $13::bigint[], $14::bigint[], $15::bigint[], \
                     $16::bigint[], $17::bigint[]) \
              AS x(b, t, tm, r, c, m, rq, i, o, ca, co, up, h, si, so, sc) \
         ON CONFLICT (bucket, token, team, route, channel, model) DO UPDATE SET \
           requests = least(u.requests::numeric + excluded.requests, $11)::bigint, \
           input_tokens = least(u.input_tokens::numeric + excluded.input_tokens, $11)::bigint, \
           output_tokens = least(u.output_tokens::numeric + excluded.output_tokens, $11)::bigint, \
           cached_tokens = least(u.cached_tokens::numeric + excluded.cached_tokens, $11)::bigint, \
           cost_pico_usd = least(u.cost_pico_usd::numeric + excluded.cost_pico_usd, $11)::bigint, \
           unpriced_requests = \
             least(u.unpriced_requests::numeric + excluded.unpriced_requests, $11)::bigint, \
           cache_hits = least(u.cache_hits::numeric + excluded.cache_hits, $11)::bigint, \
           saved_input_tokens = \
             least(u.saved_input_tokens::numeric + excluded.saved_input_tokens, $11)::bigint, \
           saved_output_tokens = \
             least(u.saved_output_tokens::numeric + excluded.saved_output_tokens, $11)::bigint, \
           saved_cost_pico_usd = \
             least(u.saved_cost_pico_usd::numeric + excluded.saved_cost_pico_usd, $11)::bigint",
    )
    .bind(c.buckets)
    .bind(c.tokens)
    .bind(c.teams)
    .bind(c.routes)
    .bind(c.channels)
    .bind(c.models)
    .bind(c.requests)
    .bind(c.inputs)
    .bind(c.outputs)
    .bind(c.cached)
    // The sums saturate at the column's largest value rather than failing the batch.
    .bind(i64::MAX)
    .bind(c.costs)
    .bind(c.unpriced)
    .bind(c.hits)
    .bind(c.saved_inputs)
    .bind(c.saved_outputs)
    .bind(c.saved_costs)
    .execute(&mut *tx)
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    fn record(bucket: i64, token: &str) -> v1::UsageRecord {
        v1::UsageRecord {
            bucket_start_unix_s: bucket,
            token: token.to_owned(),
            requests: 1,
            input_tokens: 2,
            ..v1::UsageRecord::default()
        }
    }

    fn batch(records: Vec<v1::UsageRecord>) -> v1::UsageBatch {
        v1::UsageBatch {
            batch_id: "b-1".to_owned(),
            records,
            ..v1::UsageBatch::default()
        }
    }

    #[test]
    fn repeated_keys_in_one_batch_are_summed() {
        let sums = aggregate(&batch(vec![
            record(60, "a"),
            record(60, "a"),
            record(120, "a"),
        ]))
        .unwrap()
        .sums;
        assert_eq!(sums.len(), 2);
        let first = sums.values().next().unwrap();
        assert_eq!((first.requests, first.input), (2, 4));
    }

    /// The poison: a proxy relaying `prompt_tokens = u64::MAX` (or any figure no
    /// request can have) was stored as `i64::MAX`, and the next such figure overflowed the row.
    #[test]
    fn impossible_figures_are_left_out_and_the_rest_is_summed() {
        let mut poisoned = record(60, "a");
        poisoned.input_tokens = u64::MAX;
        poisoned.output_tokens = 5;
        let mut too_many_cached = record(60, "a");
        too_many_cached.cached_tokens = 3;
        let mut crowd = record(60, "b");
        crowd.requests = MAX_RECORD_REQUESTS + 1;
        let mut at_bound = record(120, "a");
        at_bound.requests = 2;
        at_bound.input_tokens = 2 * MAX_TOKENS_PER_REQUEST;
        let out = aggregate(&batch(vec![poisoned, too_many_cached, crowd, at_bound])).unwrap();
        assert_eq!(out.refused_figures, 3);
        assert_eq!(out.sums.len(), 2, "the crowded record is left out");
        let mut totals = out.sums.values();
        let first = totals.next().unwrap();
        assert_eq!(
            (first.requests, first.input, first.output, first.cached),
            (2, 2, 5, 0),
            "the requests count, the impossible figures do not"
        );
        let second = totals.next().unwrap();
        assert_eq!(second.input, 2 * MAX_TOKENS_PER_REQUEST as i64);
    }

    #[test]
    fn cost_and_unpriced_requests_are_summed_and_checked() {
        let mut priced = record(60, "a");
        priced.requests = 3;
        priced.unpriced_requests = 1;
        priced.cost_pico_usd = u64::MAX;
        let mut more = record(60, "a");
        more.cost_pico_usd = 5;
        // Every request unpriced, yet a cost: not taken.
        let mut unpriced = record(120, "a");
        unpriced.unpriced_requests = 1;
        unpriced.cost_pico_usd = 7;
        let out = aggregate(&batch(vec![priced, more, unpriced])).unwrap();
        assert_eq!(out.refused_figures, 1);
        let mut totals = out.sums.values();
        let first = totals.next().unwrap();
        assert_eq!(
            (first.requests, first.cost, first.unpriced),
            (4, i64::MAX, 1)
        );
        let second = totals.next().unwrap();
        assert_eq!((second.cost, second.unpriced), (0, 1));
        // More unpriced requests than requests: that record is left out, the rest is taken.
        let mut bad = record(60, "a");
        bad.unpriced_requests = 2;
        let out = aggregate(&batch(vec![bad, record(60, "b")])).unwrap();
        assert_eq!(out.refused_figures, 1);
        assert_eq!(
            out.sums.keys().map(|k| k.1.as_str()).collect::<Vec<_>>(),
            ["b"]
        );
    }

    /// One record that cannot be stored as it is never costs the rest of its batch (the proxy
    /// would drop the whole batch); only a malformed batch is refused.
    #[test]
    fn a_record_that_cannot_be_stored_is_left_out_and_a_malformed_batch_refused() {
        for bad in [
            record(61, "a"),
            record(60, "a\0"),
            record(60, &"x".repeat(257)),
            record(-60, "a"),
        ] {
            let out = aggregate(&batch(vec![
                record(60, "good"),
                bad.clone(),
                record(120, "good"),
            ]))
            .unwrap();
            assert_eq!(out.refused_figures, 1, "{bad:?}");
            assert_eq!(out.sums.len(), 2, "{bad:?}");
            assert!(out.sums.keys().all(|k| k.1 == "good"), "{bad:?}");
        }
        let mut b = batch(vec![record(60, "a")]);
        b.batch_id = String::new();
        assert!(matches!(aggregate(&b), Err(UsageError::Invalid(_))));
        b.batch_id = "has space".to_owned();
        assert!(matches!(aggregate(&b), Err(UsageError::Invalid(_))));
    }

    #[test]
    fn each_bound_of_a_batch_is_inclusive() {
        let refused = |b: &v1::UsageBatch| matches!(aggregate(b), Err(UsageError::Invalid(_)));
        let left_out = |b: &v1::UsageBatch| aggregate(b).unwrap().refused_figures == 1;
        // A name of exactly the longest length is taken, one character more is not.
        let mut b = batch(vec![record(60, &"x".repeat(MAX_NAME_CHARS))]);
        assert!(!left_out(&b));
        b.records = vec![record(60, &"é".repeat(MAX_NAME_CHARS))];
        assert!(!left_out(&b), "characters are counted, not bytes");
        b.records = vec![record(60, &"x".repeat(MAX_NAME_CHARS + 1))];
        assert!(left_out(&b));
        // A batch id of 128 characters is taken, 129 are not.
        b.records = vec![record(60, "a")];
        b.batch_id = "i".repeat(128);
        assert!(!refused(&b));
        b.batch_id = "i".repeat(129);
        assert!(refused(&b));
        // As many records (and shadow records) as allowed, and one more.
        b.batch_id = "b-1".to_owned();
        b.records = vec![record(60, "a"); MAX_RECORDS];
        assert_eq!(aggregate(&b).unwrap().sums.len(), 1);
        b.records.push(record(60, "a"));
        assert!(refused(&b));
        b.records.clear();
        b.shadows = vec![v1::ShadowRecord::default(); MAX_RECORDS];
        assert!(!refused(&b));
        b.shadows.push(v1::ShadowRecord::default());
        assert!(refused(&b));
    }

    #[test]
    fn a_record_of_the_most_requests_one_proxy_can_serve_is_taken() {
        let mut busiest = record(60, "a");
        busiest.requests = MAX_RECORD_REQUESTS;
        let out = aggregate(&batch(vec![busiest])).unwrap();
        assert_eq!(out.refused_figures, 0);
        assert_eq!(
            out.sums.values().next().unwrap().requests,
            MAX_RECORD_REQUESTS as i64
        );
    }

    /// Real database errors, each sorted as the rule says: a data error (class 22) or a
    /// constraint violation (class 23) refuses the batch; any other is worth a retry.
    #[sqlx::test]
    async fn errors_the_same_batch_would_meet_again_refuse_it(pool: PgPool) {
        let data = sqlx::query("SELECT 1 / 0")
            .execute(&pool)
            .await
            .unwrap_err();
        assert!(
            matches!(storage_error(data), UsageError::Invalid(ref m) if m.contains("division by zero"))
        );
        sqlx::query("CREATE TABLE t (x int NOT NULL)")
            .execute(&pool)
            .await
            .unwrap();
        let constraint = sqlx::query("INSERT INTO t VALUES (NULL)")
            .execute(&pool)
            .await
            .unwrap_err();
        assert!(matches!(storage_error(constraint), UsageError::Invalid(_)));
        let other = sqlx::query("SELECT * FROM nowhere")
            .execute(&pool)
            .await
            .unwrap_err();
        assert!(matches!(storage_error(other), UsageError::Database(_)));
    }
}
