//! Guardrail reports, the control plane's side: the proxies' per-minute counts (carried by the
//! usage batches, so applied exactly once with them) are added to `guardrail_minutes`; reports
//! of guardrails that no longer exist are left out, and so is a record that cannot be true or
//! that the database refuses as data (each under its own savepoint): one record never costs the
//! rest of its batch.

use sqlx::{Postgres, Transaction};
use switchyard_proto::guardrail::{
    MAX_FINDING_KINDS, MAX_GUARDRAIL_EXAMPLES, MAX_GUARDRAIL_TEXT_CHARS,
};
use switchyard_proto::{v1, MAX_RECORD_REQUESTS};

/// Whether a guardrail record's figures can be true and stored as they are.
fn plausible(r: &v1::GuardrailRecord) -> bool {
    let text_ok =
        |t: &String| t.chars().count() <= MAX_GUARDRAIL_TEXT_CHARS + 8 && !t.contains('\0');
    (0..=253_402_300_740).contains(&r.bucket_start_unix_s)
        && r.bucket_start_unix_s % 60 == 0
        && r.checked <= MAX_RECORD_REQUESTS
        && [
            r.blocked,
            r.would_block,
            r.redacted,
            r.would_redact,
            r.external_failures,
        ]
        .iter()
        .all(|n| *n <= r.checked)
        && r.findings.len() <= MAX_FINDING_KINDS + 1
        && r.findings.keys().all(text_ok)
        && r.examples.len() <= MAX_GUARDRAIL_EXAMPLES
        && r.examples.iter().all(text_ok)
}

fn clamp(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// Adds one record to its (minute, guardrail) row, saturating every count at `bigint`'s largest
/// value; finding kinds add up by name; the first examples are kept.
const UPSERT: &str = "INSERT INTO guardrail_minutes AS m (bucket, guardrail_id, checked, blocked, \
     would_block, redacted, would_redact, external_failures, findings, examples) \
     SELECT to_timestamp($1), $2, $3, $4, $5, $6, $7, $8, $9, $10 \
     WHERE EXISTS (SELECT 1 FROM guardrails WHERE id = $2) \
     ON CONFLICT (guardrail_id, bucket) DO UPDATE SET \
     checked = least(m.checked::numeric + excluded.checked, 9223372036854775807)::bigint, \
     blocked = least(m.blocked::numeric + excluded.blocked, 9223372036854775807)::bigint, \
     would_block = least(m.would_block::numeric + excluded.would_block, 9223372036854775807)::bigint, \
     redacted = least(m.redacted::numeric + excluded.redacted, 9223372036854775807)::bigint, \
     would_redact = least(m.would_redact::numeric + excluded.would_redact, 9223372036854775807)::bigint, \
     external_failures = least(m.external_failures::numeric + excluded.external_failures, \
         9223372036854775807)::bigint, \
     findings = (SELECT coalesce(jsonb_object_agg(k, least(coalesce((m.findings->>k)::numeric, 0) \
         + coalesce((excluded.findings->>k)::numeric, 0), 9223372036854775807)::bigint), '{}') \
         FROM (SELECT jsonb_object_keys(m.findings) UNION \
               SELECT jsonb_object_keys(excluded.findings)) AS keys(k)), \
     examples = (m.examples || excluded.examples)[1:5]";

/// Adds a batch's guardrail records to `guardrail_minutes` inside the batch's transaction.
pub async fn store(
    tx: &mut Transaction<'_, Postgres>,
    batch: &v1::UsageBatch,
) -> Result<(), sqlx::Error> {
    for (i, r) in batch.guardrails.iter().enumerate() {
        if !plausible(r) {
            tracing::warn!(
                batch_id = %batch.batch_id,
                client_id = %batch.client_id,
                record = i,
                guardrail = r.guardrail_id,
                "a guardrail record reports impossible figures; left out"
            );
            continue;
        }
        let findings: serde_json::Map<String, serde_json::Value> = r
            .findings
            .iter()
            .map(|(k, v)| (k.clone(), serde_json::Value::from(clamp(*v))))
            .collect();
        let mut savepoint = sqlx::Acquire::begin(&mut **tx).await?;
        let upserted = sqlx::query(UPSERT)
            .bind(r.bucket_start_unix_s)
            .bind(r.guardrail_id)
            .bind(clamp(r.checked))
            .bind(clamp(r.blocked))
            .bind(clamp(r.would_block))
            .bind(clamp(r.redacted))
            .bind(clamp(r.would_redact))
            .bind(clamp(r.external_failures))
            .bind(sqlx::types::Json(findings))
            .bind(&r.examples)
            .execute(&mut *savepoint)
            .await;
        match upserted {
            Ok(_) => savepoint.commit().await?,
            Err(sqlx::Error::Database(db)) if crate::db::is_data_error(db.as_ref()) => {
                savepoint.rollback().await?;
                tracing::warn!(
                    batch_id = %batch.batch_id,
                    record = i,
                    guardrail = r.guardrail_id,
                    error = %db.message(),
                    "the database refused a guardrail record; left out"
                );
            }
            Err(error) => return Err(error),
        }
    }
    Ok(())
}
