//! Semantic cache trials, the control plane's side: the proxies' per-minute counts of each
//! rule's lookups by meaning (carried by the usage batches, so applied exactly once with them)
//! are added to `semantic_trial_minutes`; the report sums them per rule.

use sqlx::{Postgres, Transaction};
use switchyard_proto::{v1, MAX_RECORD_REQUESTS};

/// Whether a trial record's figures can be true (else it is left out, with a warning). A
/// comparison is counted when its answer is whole, maybe in a later minute than its lookup, so
/// only `agreed <= compared` and `would_hit <= looked_up` hold within one record.
fn plausible(r: &v1::SemanticTrialRecord) -> bool {
    (0..=253_402_300_740).contains(&r.bucket_start_unix_s)
        && r.bucket_start_unix_s % 60 == 0
        && r.looked_up <= MAX_RECORD_REQUESTS
        && r.would_hit <= r.looked_up
        && r.agreed <= r.compared
        && r.score_milli_sum <= r.would_hit.saturating_mul(1000)
        && r.similarity_milli_sum <= r.compared.saturating_mul(1000)
        && r.compared <= MAX_RECORD_REQUESTS
}

fn clamp(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

const UPSERT: &str = "INSERT INTO semantic_trial_minutes AS m (cache_rule_id, bucket, looked_up, \
    would_hit, compared, agreed, score_milli_sum, similarity_milli_sum) \
    SELECT $1, to_timestamp($2), $3, $4, $5, $6, $7, $8 \
    WHERE EXISTS (SELECT 1 FROM cache_rules WHERE id = $1) \
    ON CONFLICT (cache_rule_id, bucket) DO UPDATE SET \
    looked_up = least(m.looked_up::numeric + excluded.looked_up, 9223372036854775807)::bigint, \
    would_hit = least(m.would_hit::numeric + excluded.would_hit, 9223372036854775807)::bigint, \
    compared = least(m.compared::numeric + excluded.compared, 9223372036854775807)::bigint, \
    agreed = least(m.agreed::numeric + excluded.agreed, 9223372036854775807)::bigint, \
    score_milli_sum = least(m.score_milli_sum::numeric + excluded.score_milli_sum, \
        9223372036854775807)::bigint, \
    similarity_milli_sum = least(m.similarity_milli_sum::numeric + excluded.similarity_milli_sum, \
        9223372036854775807)::bigint";

/// Adds a batch's trial records inside the batch's transaction; records of rules that no
/// longer exist, and implausible ones, are left out (each under its own savepoint, so one
/// record the database refuses never costs the rest of the batch).
pub async fn store(
    tx: &mut Transaction<'_, Postgres>,
    batch: &v1::UsageBatch,
) -> Result<(), sqlx::Error> {
    for (i, r) in batch.semantic_trials.iter().enumerate() {
        if !plausible(r) {
            tracing::warn!(batch_id = %batch.batch_id, record = i, rule = r.rule_id,
                "a semantic trial record reports impossible figures; left out");
            continue;
        }
        let mut savepoint = sqlx::Acquire::begin(&mut **tx).await?;
        let written = sqlx::query(UPSERT)
            .bind(r.rule_id)
            .bind(r.bucket_start_unix_s)
            .bind(clamp(r.looked_up))
            .bind(clamp(r.would_hit))
            .bind(clamp(r.compared))
            .bind(clamp(r.agreed))
            .bind(clamp(r.score_milli_sum))
            .bind(clamp(r.similarity_milli_sum))
            .execute(&mut *savepoint)
            .await;
        match written {
            Ok(_) => savepoint.commit().await?,
            Err(sqlx::Error::Database(db)) if crate::db::is_data_error(db.as_ref()) => {
                savepoint.rollback().await?;
                tracing::warn!(batch_id = %batch.batch_id, record = i, rule = r.rule_id,
                    error = %db.message(), "the database refused a semantic trial record; left out");
            }
            Err(error) => return Err(error),
        }
    }
    Ok(())
}
