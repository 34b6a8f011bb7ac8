//! Usage accounting, the control plane's side: applies the proxies' `ReportUsage` batches to
//! `usage_minutes` (one row per minute and dimensions, `ON CONFLICT DO UPDATE` adding) and
//! answers `GET /api/v1/usage` from it.
//!
//! Idempotent under retry: a batch's id is inserted into `usage_batches` in the same transaction
//! as its totals, so a batch is applied exactly once however often a proxy resends it (a resend
//! racing the first attempt waits on the id's row lock and then sees it taken).

use std::collections::BTreeMap;

use sqlx::PgPool;
use switchyard_proto::v1;

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
}

type Dimensions = (i64, String, String, String, String, String);

#[derive(Default, Clone, Copy)]
struct Totals {
    requests: i64,
    input: i64,
    output: i64,
    cached: i64,
}

fn clamp(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

fn check_name(field: &str, index: usize, value: &str) -> Result<(), UsageError> {
    if value.chars().count() > MAX_NAME_CHARS {
        return Err(UsageError::Invalid(format!(
            "records[{index}].{field} is longer than {MAX_NAME_CHARS} characters"
        )));
    }
    if value.contains('\0') {
        return Err(UsageError::Invalid(format!(
            "records[{index}].{field} contains a NUL character"
        )));
    }
    Ok(())
}

/// Checks a batch and sums its records per (bucket, dimensions), in key order (so concurrent
/// batches lock rows in the same order and cannot deadlock).
fn aggregate(batch: &v1::UsageBatch) -> Result<BTreeMap<Dimensions, Totals>, UsageError> {
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
    let mut sums: BTreeMap<Dimensions, Totals> = BTreeMap::new();
    for (i, r) in batch.records.iter().enumerate() {
        if !(0..=MAX_BUCKET).contains(&r.bucket_start_unix_s) || r.bucket_start_unix_s % 60 != 0 {
            return Err(UsageError::Invalid(format!(
                "records[{i}].bucket_start_unix_s must be the start of a minute, got {}",
                r.bucket_start_unix_s
            )));
        }
        for (field, value) in [
            ("token", &r.token),
            ("team", &r.team),
            ("route", &r.route),
            ("channel", &r.channel),
            ("model", &r.model),
        ] {
            check_name(field, i, value)?;
        }
        let key = (
            r.bucket_start_unix_s,
            r.token.clone(),
            r.team.clone(),
            r.route.clone(),
            r.channel.clone(),
            r.model.clone(),
        );
        let t = sums.entry(key).or_default();
        t.requests = t.requests.saturating_add(clamp(r.requests));
        t.input = t.input.saturating_add(clamp(r.input_tokens));
        t.output = t.output.saturating_add(clamp(r.output_tokens));
        t.cached = t.cached.saturating_add(clamp(r.cached_tokens));
    }
    Ok(sums)
}

/// Applies one batch, exactly once per batch id.
pub async fn apply_batch(pool: &PgPool, batch: &v1::UsageBatch) -> Result<Applied, UsageError> {
    let sums = aggregate(batch)?;
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
        return Ok(Applied {
            records: 0,
            duplicate: true,
        });
    }
    let records = sums.len();
    if records > 0 {
        let mut buckets = Vec::with_capacity(records);
        let mut tokens = Vec::with_capacity(records);
        let mut teams = Vec::with_capacity(records);
        let mut routes = Vec::with_capacity(records);
        let mut channels = Vec::with_capacity(records);
        let mut models = Vec::with_capacity(records);
        let mut requests = Vec::with_capacity(records);
        let mut inputs = Vec::with_capacity(records);
        let mut outputs = Vec::with_capacity(records);
        let mut cached = Vec::with_capacity(records);
        for ((bucket, token, team, route, channel, model), t) in sums {
            buckets.push(bucket);
            tokens.push(token);
            teams.push(team);
            routes.push(route);
            channels.push(channel);
            models.push(model);
            requests.push(t.requests);
            inputs.push(t.input);
            outputs.push(t.output);
            cached.push(t.cached);
        }
        sqlx::query(
            "INSERT INTO usage_minutes AS u (bucket, token, team, route, channel, model, \
                                             requests, input_tokens, output_tokens, cached_tokens) \
             SELECT to_timestamp(b), t, tm, r, c, m, rq, i, o, ca \
             FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::text[], \
                         $6::text[], $7::bigint[], $8::bigint[], $9::bigint[], $10::bigint[]) \
                  AS x(b, t, tm, r, c, m, rq, i, o, ca) \
             ON CONFLICT (bucket, token, team, route, channel, model) DO UPDATE SET \
               requests = u.requests + excluded.requests, \
               input_tokens = u.input_tokens + excluded.input_tokens, \
               output_tokens = u.output_tokens + excluded.output_tokens, \
               cached_tokens = u.cached_tokens + excluded.cached_tokens",
        )
        .bind(buckets)
        .bind(tokens)
        .bind(teams)
        .bind(routes)
        .bind(channels)
        .bind(models)
        .bind(requests)
        .bind(inputs)
        .bind(outputs)
        .bind(cached)
        .execute(&mut *tx)
        .await?;
    }
    // Forget ids far older than any retry (the index makes this a short range scan).
    sqlx::query("DELETE FROM usage_batches WHERE applied_at < now() - interval '7 days'")
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(Applied {
        records,
        duplicate: false,
    })
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
        .unwrap();
        assert_eq!(sums.len(), 2);
        let first = sums.values().next().unwrap();
        assert_eq!((first.requests, first.input), (2, 4));
    }

    #[test]
    fn invalid_batches_are_refused() {
        let mut b = batch(vec![record(61, "a")]);
        assert!(matches!(aggregate(&b), Err(UsageError::Invalid(_))));
        b.records = vec![record(60, "a\0")];
        assert!(matches!(aggregate(&b), Err(UsageError::Invalid(_))));
        b.records = vec![record(60, &"x".repeat(257))];
        assert!(matches!(aggregate(&b), Err(UsageError::Invalid(_))));
        b.records = vec![record(-60, "a")];
        assert!(matches!(aggregate(&b), Err(UsageError::Invalid(_))));
        b.records = vec![record(60, "a")];
        b.batch_id = String::new();
        assert!(matches!(aggregate(&b), Err(UsageError::Invalid(_))));
        b.batch_id = "has space".to_owned();
        assert!(matches!(aggregate(&b), Err(UsageError::Invalid(_))));
    }
}
