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

/// The counters and sums of a `shadow_minutes` row, in the order `store` binds them after the
/// bucket, the rule and the four histograms.
const SUMS: [&str; 17] = [
    "live_input_tokens",
    "live_output_tokens",
    "shadow_input_tokens",
    "shadow_output_tokens",
    "live_cost_pico_usd",
    "shadow_cost_pico_usd",
    "live_unpriced",
    "shadow_unpriced",
    "compared",
    "same_finish_reason",
    "same_tool_names",
    "shadow_tool_args_valid",
    "json_mode_asked",
    "shadow_json_valid",
    "length_ratio_milli_sum",
    "similarity_milli_sum",
    "pairs",
];

const HISTS: [&str; 4] = [
    "live_total_ms_hist",
    "live_first_byte_ms_hist",
    "shadow_total_ms_hist",
    "shadow_first_byte_ms_hist",
];

/// The upsert of one shadow record: a new row, or every figure added to the row's, saturating
/// at `bigint`'s largest value (as usage rows do) so no figure can fail the batch.
fn upsert_sql() -> &'static str {
    static SQL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SQL.get_or_init(|| {
        let columns: Vec<&str> = ["live_ok", "shadow_ok"]
            .into_iter()
            .chain(HISTS)
            .chain(SUMS)
            .collect();
        let params: Vec<String> = (0..columns.len()).map(|i| format!("${}", i + 3)).collect();
        let mut sets: Vec<String> = HISTS
            .iter()
            .map(|c| format!("{c} = shadow_hist_add(m.{c}, excluded.{c})"))
            .collect();
        sets.extend(["live_ok", "shadow_ok"].into_iter().chain(SUMS).map(|c| {
            format!("{c} = least(m.{c}::numeric + excluded.{c}, 9223372036854775807)::bigint")
        }));
        format!(
            "INSERT INTO shadow_minutes AS m (bucket, shadow_id, {}) \
             SELECT to_timestamp($1), $2, {} \
             WHERE EXISTS (SELECT 1 FROM shadows WHERE id = $2) \
             ON CONFLICT (shadow_id, bucket) DO UPDATE SET {}",
            columns.join(", "),
            params.join(", "),
            sets.join(", ")
        )
    })
}

/// Adds a batch's shadow records to `shadow_minutes` inside the batch's transaction; records of
/// rules that no longer exist are left out, and so is a record the database refuses as data (each
/// is written under its own savepoint): one record never costs the rest of the batch, live usage
/// above all. Returns the rules touched.
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
        let mut savepoint = sqlx::Acquire::begin(&mut **tx).await?;
        match upsert(&mut savepoint, r).await {
            Ok(added) => {
                savepoint.commit().await?;
                if added > 0 && !touched.contains(&r.rule_id) {
                    touched.push(r.rule_id);
                }
            }
            Err(sqlx::Error::Database(db)) if crate::db::is_data_error(db.as_ref()) => {
                savepoint.rollback().await?;
                tracing::warn!(
                    batch_id = %batch.batch_id,
                    client_id = %batch.client_id,
                    record = i,
                    rule = r.rule_id,
                    error = %db.message(),
                    "the database refused a shadow record; left out"
                );
            }
            Err(error) => return Err(error),
        }
    }
    Ok(touched)
}

/// Adds one shadow record to its (minute, rule) row: the rows written (0: the rule is gone).
async fn upsert(conn: &mut sqlx::PgConnection, r: &v1::ShadowRecord) -> Result<u64, sqlx::Error> {
    let sums = [
        r.live_input_tokens,
        r.live_output_tokens,
        r.shadow_input_tokens,
        r.shadow_output_tokens,
        r.live_cost_pico_usd,
        r.shadow_cost_pico_usd,
        r.live_unpriced,
        r.shadow_unpriced,
        r.compared,
        r.same_finish_reason,
        r.same_tool_names,
        r.shadow_tool_args_valid,
        r.json_mode_asked,
        r.shadow_json_valid,
        r.length_ratio_milli_sum,
        r.similarity_milli_sum,
        r.pairs,
    ];
    let mut query = sqlx::query(upsert_sql())
        .bind(r.bucket_start_unix_s)
        .bind(r.rule_id)
        .bind(clamp(r.live_ok))
        .bind(clamp(r.shadow_ok))
        .bind(hist(&r.live_total_ms_hist))
        .bind(hist(&r.live_first_byte_ms_hist))
        .bind(hist(&r.shadow_total_ms_hist))
        .bind(hist(&r.shadow_first_byte_ms_hist));
    for sum in sums {
        query = query.bind(clamp(sum));
    }
    Ok(query.execute(conn).await?.rows_affected())
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
        // Each sum saturates at `bigint`'s largest value, as the rows it adds up do.
        "SELECT s.max_daily_spend_micros, s.error_rate_stop_per_mille, s.error_rate_min_sample, \
           least(coalesce((SELECT sum(shadow_cost_pico_usd) FROM shadow_minutes m \
                     WHERE m.shadow_id = s.id \
                       AND m.bucket >= date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'), 0), \
                 9223372036854775807)::bigint, \
           least(coalesce((SELECT sum(pairs) FROM shadow_minutes m \
                     WHERE m.shadow_id = s.id AND m.bucket >= date_trunc('minute', s.updated_at)), 0), \
                 9223372036854775807)::bigint, \
           least(coalesce((SELECT sum(shadow_ok) FROM shadow_minutes m \
                     WHERE m.shadow_id = s.id AND m.bucket >= date_trunc('minute', s.updated_at)), 0), \
                 9223372036854775807)::bigint \
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
        // In i128: saturated sums times 1000 do not fit an i64.
        let (pairs, failed) = (i128::from(pairs), i128::from(pairs) - i128::from(ok));
        pairs >= i128::from(min_sample) && failed * 1000 >= i128::from(rate) * pairs
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
                "shadow_failed": pairs.saturating_sub(ok),
            }),
            team: None,
        },
    )
    .await
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    /// A channel and a shadow rule targeting it, with an optional spend cap (micro-USD) and
    /// error-rate stop (per mille): the rule's id.
    async fn rule(pool: &PgPool, name: &str, cap: Option<i64>, stop: Option<i32>) -> i64 {
        let channel: i64 = sqlx::query_scalar(
            "INSERT INTO channels (name, provider, base_url) VALUES ($1, 'mock', 'mock://sim') \
             RETURNING id",
        )
        .bind(name)
        .fetch_one(pool)
        .await
        .unwrap();
        sqlx::query_scalar(
            "INSERT INTO shadows (name, model_pattern, target_channel_id, target_model, \
               sample_basis_points, max_rps, max_daily_spend_micros, error_rate_stop_per_mille, \
               error_rate_min_sample) \
             VALUES ($1, 'm', $2, 'cand', 10000, 100, $3, $4, 1) RETURNING id",
        )
        .bind(name)
        .bind(channel)
        .bind(cap)
        .bind(stop)
        .fetch_one(pool)
        .await
        .unwrap()
    }

    /// 2026-01-01T00:00:00Z.
    const T0: i64 = 1_767_225_600;

    fn live(token: &str) -> v1::UsageRecord {
        v1::UsageRecord {
            bucket_start_unix_s: T0,
            token: token.to_owned(),
            requests: 1,
            input_tokens: 10,
            ..v1::UsageRecord::default()
        }
    }

    /// What a shadow target reporting a billion input and output tokens on a priced channel
    /// sends: a cost beyond half of `bigint`, so two such minutes overflow a plain sum.
    fn absurd(rule: i64) -> v1::ShadowRecord {
        v1::ShadowRecord {
            bucket_start_unix_s: T0,
            rule_id: rule,
            pairs: 1,
            shadow_ok: 1,
            live_ok: 1,
            shadow_input_tokens: 1_000_000_000,
            shadow_output_tokens: 1_000_000_000,
            shadow_cost_pico_usd: 6_000_000_000_000_000_000,
            shadow_total_ms_hist: vec![1],
            ..v1::ShadowRecord::default()
        }
    }

    fn batch(
        id: &str,
        records: Vec<v1::UsageRecord>,
        shadows: Vec<v1::ShadowRecord>,
    ) -> v1::UsageBatch {
        v1::UsageBatch {
            batch_id: id.to_owned(),
            client_id: "test".to_owned(),
            records,
            dropped_requests: 0,
            shadows,
            requests: Vec::new(),
            semantic_trials: Vec::new(),
            guardrails: Vec::new(),
            events: Vec::new(),
        }
    }

    async fn live_requests(pool: &PgPool) -> i64 {
        sqlx::query_scalar("SELECT coalesce(sum(requests), 0)::bigint FROM usage_minutes")
            .fetch_one(pool)
            .await
            .unwrap()
    }

    /// The loss: the second minute of an absurd shadow cost overflowed the shadow row,
    /// the database refused the whole batch, and the proxy dropped its live usage with it.
    #[sqlx::test(migrations = "../migrations")]
    async fn an_absurd_shadow_figure_never_costs_the_live_usage_of_its_batch(pool: PgPool) {
        let id = rule(&pool, "trial", None, None).await;
        // A histogram bucket already at the largest value: adding to it saturates too.
        sqlx::query(
            "INSERT INTO shadow_minutes (bucket, shadow_id, shadow_total_ms_hist) \
             VALUES (to_timestamp($1), $2, ARRAY[9223372036854775807, 5]::bigint[])",
        )
        .bind(T0)
        .bind(id)
        .execute(&pool)
        .await
        .unwrap();
        for (n, batch_id) in ["b-1", "b-2", "b-3"].into_iter().enumerate() {
            let records = vec![live("a"), live("b"), live(&format!("c{n}"))];
            let applied =
                crate::usage::apply_batch(&pool, &batch(batch_id, records, vec![absurd(id)]))
                    .await
                    .unwrap_or_else(|e| panic!("{batch_id}: {e}"));
            assert_eq!(applied.records, 3, "{batch_id}");
        }
        assert_eq!(
            live_requests(&pool).await,
            9,
            "every live request is counted"
        );
        let row: (i64, i64, i64, i64, Vec<i64>) = sqlx::query_as(
            "SELECT pairs, shadow_input_tokens, shadow_output_tokens, shadow_cost_pico_usd, \
               shadow_total_ms_hist FROM shadow_minutes WHERE shadow_id = $1",
        )
        .bind(id)
        .fetch_one(&pool)
        .await
        .unwrap();
        assert_eq!(
            row,
            (3, 3_000_000_000, 3_000_000_000, i64::MAX, vec![i64::MAX, 5]),
            "the shadow row saturates"
        );
    }

    /// A shadow record the database refuses for any reason (here a trigger standing for one)
    /// is left out alone: the batch's live usage and its other shadow records are stored.
    #[sqlx::test(migrations = "../migrations")]
    async fn a_shadow_record_the_database_refuses_is_left_out_alone(pool: PgPool) {
        let good = rule(&pool, "good", None, None).await;
        let bad = rule(&pool, "bad", None, None).await;
        sqlx::query(
            "CREATE FUNCTION refuse_bad() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
               RAISE EXCEPTION 'refused' USING ERRCODE = '22003'; END $$",
        )
        .execute(&pool)
        .await
        .unwrap();
        sqlx::query(&format!(
            "CREATE TRIGGER refuse_bad BEFORE INSERT ON shadow_minutes FOR EACH ROW \
             WHEN (NEW.shadow_id = {bad}) EXECUTE FUNCTION refuse_bad()"
        ))
        .execute(&pool)
        .await
        .unwrap();
        let b = batch(
            "b-1",
            vec![live("a"), live("b")],
            vec![absurd(bad), absurd(good)],
        );
        let applied = crate::usage::apply_batch(&pool, &b).await.unwrap();
        assert_eq!(applied.records, 2);
        assert_eq!(live_requests(&pool).await, 2);
        let stored: Vec<i64> = sqlx::query_scalar("SELECT shadow_id FROM shadow_minutes")
            .fetch_all(&pool)
            .await
            .unwrap();
        assert_eq!(stored, vec![good]);
    }

    /// Today's sums beyond `bigint` failed the stop check's `::bigint` casts, so a rule whose
    /// shadow spent the most money of all was never stopped.
    #[sqlx::test(migrations = "../migrations")]
    async fn the_stops_hold_when_the_sums_saturate(pool: PgPool) {
        let capped = rule(&pool, "capped", Some(1), None).await;
        let failing = rule(&pool, "failing", None, Some(500)).await;
        for (id, cost, pairs) in [(capped, i64::MAX, 1), (failing, 0, i64::MAX)] {
            sqlx::query(
                "INSERT INTO shadow_minutes (bucket, shadow_id, pairs, shadow_cost_pico_usd) \
                 SELECT date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' \
                          + make_interval(mins => n), $1, $3, $2 \
                 FROM generate_series(0, 1) AS n",
            )
            .bind(id)
            .bind(cost)
            .bind(pairs)
            .execute(&pool)
            .await
            .unwrap();
        }
        // The rules started before today's rows (the error-rate stop counts since then).
        sqlx::query("UPDATE shadows SET updated_at = now() - interval '2 days'")
            .execute(&pool)
            .await
            .unwrap();
        check_stops(&pool, &[capped, failing]).await;
        let reasons: Vec<(i64, Option<String>)> =
            sqlx::query_as("SELECT id, stopped_reason FROM shadows ORDER BY id")
                .fetch_all(&pool)
                .await
                .unwrap();
        assert_eq!(
            reasons,
            vec![
                (capped, Some("spend_cap".to_owned())),
                (failing, Some("error_rate".to_owned())),
            ]
        );
    }
}
