//! Shadow comparisons, the control plane's side: the proxies' per-minute sums (carried by the
//! usage batches, so applied exactly once with them) are added to `shadow_minutes`, and after
//! each batch the rules it touched are checked against their spend cap and error-rate stop; a
//! rule that passed one is stopped (`stopped_reason`) through the same audited write as an
//! operator's, so the next snapshot tells every proxy to stop shadowing it.

use sqlx::{PgPool, Postgres, Transaction};
use switchyard_proto::{v1, MAX_RECORD_REQUESTS, SHADOW_HIST_BUCKETS};

use crate::db::{commit_write, Audit};

/// Whether a shadow record's figures can be true (else it is left out, with a warning).
fn plausible(r: &v1::ShadowRecord) -> bool {
    let hists = [
        &r.live_total_ms_hist,
        &r.live_first_byte_ms_hist,
        &r.shadow_total_ms_hist,
        &r.shadow_first_byte_ms_hist,
    ];
    (0..=253_402_300_740).contains(&r.bucket_start_unix_s)
        && r.bucket_start_unix_s % 60 == 0
        && r.pairs <= MAX_RECORD_REQUESTS
        && r.live_ok <= r.pairs
        && r.shadow_ok <= r.pairs
        && r.compared <= r.pairs
        && r.live_unpriced <= r.pairs
        && r.shadow_unpriced <= r.pairs
        && r.json_mode_asked <= r.compared
        && r.shadow_json_valid <= r.json_mode_asked
        && [
            r.same_finish_reason,
            r.same_tool_names,
            r.shadow_tool_args_valid,
        ]
        .iter()
        .all(|n| *n <= r.compared)
        && hists
            .iter()
            .all(|h| h.len() <= SHADOW_HIST_BUCKETS && h.iter().all(|n| *n <= r.pairs))
}

fn clamp(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn hist(h: &[u64]) -> Vec<i64> {
    h.iter().map(|n| clamp(*n)).collect()
}

/// Adds a batch's shadow records to `shadow_minutes` inside the batch's transaction; records of
/// rules that no longer exist are left out. Returns the rules touched.
pub async fn store(
    tx: &mut Transaction<'_, Postgres>,
    batch: &v1::UsageBatch,
) -> Result<Vec<i64>, sqlx::Error> {
    let mut touched = Vec::new();
    for (i, r) in batch.shadows.iter().enumerate() {
        if !plausible(r) {
            tracing::warn!(
                batch_id = %batch.batch_id,
                client_id = %batch.client_id,
                record = i,
                rule = r.rule_id,
                "a shadow record reports impossible figures; left out"
            );
            continue;
        }
        let added = sqlx::query(
            "INSERT INTO shadow_minutes AS m (bucket, shadow_id, pairs, live_ok, shadow_ok, \
               live_total_ms_hist, live_first_byte_ms_hist, shadow_total_ms_hist, \
               shadow_first_byte_ms_hist, live_input_tokens, live_output_tokens, \
               shadow_input_tokens, shadow_output_tokens, live_cost_pico_usd, \
               shadow_cost_pico_usd, live_unpriced, shadow_unpriced, compared, \
               same_finish_reason, same_tool_names, shadow_tool_args_valid, json_mode_asked, \
               shadow_json_valid, length_ratio_milli_sum, similarity_milli_sum) \
             SELECT to_timestamp($1), $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, \
               $15, $16, $17, $18, $19, $20, $21, $22, $23, $24, $25 \
             WHERE EXISTS (SELECT 1 FROM shadows WHERE id = $2) \
             ON CONFLICT (shadow_id, bucket) DO UPDATE SET \
               pairs = m.pairs + excluded.pairs, \
               live_ok = m.live_ok + excluded.live_ok, \
               shadow_ok = m.shadow_ok + excluded.shadow_ok, \
               live_total_ms_hist = shadow_hist_add(m.live_total_ms_hist, excluded.live_total_ms_hist), \
               live_first_byte_ms_hist = shadow_hist_add(m.live_first_byte_ms_hist, excluded.live_first_byte_ms_hist), \
               shadow_total_ms_hist = shadow_hist_add(m.shadow_total_ms_hist, excluded.shadow_total_ms_hist), \
               shadow_first_byte_ms_hist = shadow_hist_add(m.shadow_first_byte_ms_hist, excluded.shadow_first_byte_ms_hist), \
               live_input_tokens = m.live_input_tokens + excluded.live_input_tokens, \
               live_output_tokens = m.live_output_tokens + excluded.live_output_tokens, \
               shadow_input_tokens = m.shadow_input_tokens + excluded.shadow_input_tokens, \
               shadow_output_tokens = m.shadow_output_tokens + excluded.shadow_output_tokens, \
               live_cost_pico_usd = m.live_cost_pico_usd + excluded.live_cost_pico_usd, \
               shadow_cost_pico_usd = m.shadow_cost_pico_usd + excluded.shadow_cost_pico_usd, \
               live_unpriced = m.live_unpriced + excluded.live_unpriced, \
               shadow_unpriced = m.shadow_unpriced + excluded.shadow_unpriced, \
               compared = m.compared + excluded.compared, \
               same_finish_reason = m.same_finish_reason + excluded.same_finish_reason, \
               same_tool_names = m.same_tool_names + excluded.same_tool_names, \
               shadow_tool_args_valid = m.shadow_tool_args_valid + excluded.shadow_tool_args_valid, \
               json_mode_asked = m.json_mode_asked + excluded.json_mode_asked, \
               shadow_json_valid = m.shadow_json_valid + excluded.shadow_json_valid, \
               length_ratio_milli_sum = m.length_ratio_milli_sum + excluded.length_ratio_milli_sum, \
               similarity_milli_sum = m.similarity_milli_sum + excluded.similarity_milli_sum",
        )
        .bind(r.bucket_start_unix_s)
        .bind(r.rule_id)
        .bind(clamp(r.pairs))
        .bind(clamp(r.live_ok))
        .bind(clamp(r.shadow_ok))
        .bind(hist(&r.live_total_ms_hist))
        .bind(hist(&r.live_first_byte_ms_hist))
        .bind(hist(&r.shadow_total_ms_hist))
        .bind(hist(&r.shadow_first_byte_ms_hist))
        .bind(clamp(r.live_input_tokens))
        .bind(clamp(r.live_output_tokens))
        .bind(clamp(r.shadow_input_tokens))
        .bind(clamp(r.shadow_output_tokens))
        .bind(clamp(r.live_cost_pico_usd))
        .bind(clamp(r.shadow_cost_pico_usd))
        .bind(clamp(r.live_unpriced))
        .bind(clamp(r.shadow_unpriced))
        .bind(clamp(r.compared))
        .bind(clamp(r.same_finish_reason))
        .bind(clamp(r.same_tool_names))
        .bind(clamp(r.shadow_tool_args_valid))
        .bind(clamp(r.json_mode_asked))
        .bind(clamp(r.shadow_json_valid))
        .bind(clamp(r.length_ratio_milli_sum))
        .bind(clamp(r.similarity_milli_sum))
        .execute(&mut **tx)
        .await?
        .rows_affected();
        if added > 0 && !touched.contains(&r.rule_id) {
            touched.push(r.rule_id);
        }
    }
    Ok(touched)
}

/// Stops each of `rules` that passed its spend cap for the current UTC day or its error-rate
/// threshold (over at least its minimum sample since it last started), recording why. Errors are
/// logged: the comparisons are stored already, and the next batch checks again.
pub async fn check_stops(pool: &PgPool, rules: &[i64]) {
    for rule in rules {
        if let Err(error) = check_stop(pool, *rule).await {
            tracing::warn!(rule = *rule, error = %error, "checking a shadow rule's stops failed");
        }
    }
}

/// A rule's caps and what its comparisons add up to: the spend cap (micro-USD), the error-rate
/// threshold (per mille), the minimum sample, today's shadow spend (pico-USD), and the pairs and
/// shadow successes since the rule last changed.
type StopFigures = (Option<i64>, Option<i32>, i32, i64, i64, i64);

async fn check_stop(pool: &PgPool, rule: i64) -> anyhow::Result<()> {
    let mut tx = pool.begin().await?;
    // Sums since the rule last (re)started: `stopped_at` is cleared on resume, `updated_at`
    // marks it; the spend cap counts today (UTC) only.
    let row: Option<StopFigures> = sqlx::query_as(
        "SELECT s.max_daily_spend_micros, s.error_rate_stop_per_mille, s.error_rate_min_sample, \
           coalesce((SELECT sum(shadow_cost_pico_usd) FROM shadow_minutes m \
                     WHERE m.shadow_id = s.id \
                       AND m.bucket >= date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'), 0)::bigint, \
           coalesce((SELECT sum(pairs) FROM shadow_minutes m \
                     WHERE m.shadow_id = s.id AND m.bucket >= date_trunc('minute', s.updated_at)), 0)::bigint, \
           coalesce((SELECT sum(shadow_ok) FROM shadow_minutes m \
                     WHERE m.shadow_id = s.id AND m.bucket >= date_trunc('minute', s.updated_at)), 0)::bigint \
         FROM shadows s WHERE s.id = $1 AND s.stopped_reason IS NULL AND s.enabled \
         FOR UPDATE",
    )
    .bind(rule)
    .fetch_optional(&mut *tx)
    .await?;
    let Some((cap, stop_rate, min_sample, spent_pico, pairs, ok)) = row else {
        return Ok(());
    };
    let spent_micros = spent_pico / 1_000_000;
    let reason = if cap.is_some_and(|cap| spent_micros >= cap) {
        Some("spend_cap")
    } else if stop_rate.is_some_and(|rate| {
        pairs >= i64::from(min_sample) && (pairs - ok) * 1000 >= i64::from(rate) * pairs
    }) {
        Some("error_rate")
    } else {
        None
    };
    let Some(reason) = reason else {
        return Ok(());
    };
    sqlx::query("UPDATE shadows SET stopped_reason = $2, stopped_at = now() WHERE id = $1")
        .bind(rule)
        .bind(reason)
        .execute(&mut *tx)
        .await?;
    tracing::info!(rule, reason, "shadow rule stopped");
    commit_write(
        tx,
        Audit {
            actor: "system",
            // Audited as an update of the rule by `system`: its stop reason changed.
            action: "update",
            resource: "shadow",
            resource_id: Some(rule),
            detail: serde_json::json!({
                "stopped_reason": reason,
                "spent_pico_usd": spent_pico,
                "pairs": pairs,
                "shadow_failed": pairs - ok,
            }),
        },
    )
    .await
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(())
}
