//! Trials that finished: a shadow rule that stopped by itself (it expired, or passed its spend
//! cap or error-rate stop) and a semantic cache rule in `trial` whose report has compared enough
//! answers to decide on. Both are read from the tables each notification round, so an event
//! exists only for a stop (or a sample) that committed; each is recorded once by its key.

use serde_json::json;
use switchyard_engine::limit::format_rfc3339;
use switchyard_engine::UnixMillis;

use super::event::{record_new, Event, NewEvent};

/// The compared answers a semantic trial's report needs by default before it is called ready:
/// with 400, the agreement rate is known within about ±5 percentage points (95 % confidence,
/// at its widest, a rate of one half).
pub const DEFAULT_TRIAL_SAMPLE: u64 = 400;

/// How far back a shadow stop is still told (a control plane first started long after a rule
/// stopped does not tell the old stop).
const SHADOW_LOOKBACK_MS: u64 = 7 * 86_400_000;

#[derive(sqlx::FromRow)]
struct ShadowStop {
    id: i64,
    name: String,
    reason: String,
    at_ms: i64,
}

/// The event of shadow rule `stop` having stopped by itself. Its key names the stop (the rule,
/// the reason and when), so a rule resumed and stopped again is told again.
fn shadow_event(stop: &ShadowStop) -> NewEvent {
    let why = match stop.reason.as_str() {
        "expired" => "it expired",
        "spend_cap" => "it reached its daily spend cap",
        "error_rate" => "its target's error rate passed the stop",
        _ => "it stopped",
    };
    let at = format_rfc3339(u64::try_from(stop.at_ms).unwrap_or(0));
    NewEvent {
        key: format!("trial:shadow:{}:{}:{}", stop.id, stop.reason, stop.at_ms),
        event: Event::TrialFinished,
        payload: json!({
            "text": format!("Shadow rule {:?} finished at {at}: {why}; its report is ready", stop.name),
            "trial": "shadow",
            "shadow_id": stop.id,
            "name": stop.name,
            "reason": stop.reason,
            "stopped_at": at,
            "report": format!("/api/v1/shadows/{}/report", stop.id),
        }),
        threshold: None,
    }
}

/// Records the shadow rules that stopped by themselves (an enabled rule with a stop reason, or
/// past its expiry) in the last week. Returns how many events were new.
pub async fn check_shadows(pool: &sqlx::PgPool, now: UnixMillis) -> Result<usize, sqlx::Error> {
    let now_ms = i64::try_from(now).unwrap_or(i64::MAX);
    let since_ms = now_ms.saturating_sub(SHADOW_LOOKBACK_MS as i64);
    let stops: Vec<ShadowStop> = sqlx::query_as(
        "SELECT id, name, reason, at_ms FROM ( \
           SELECT id, name, coalesce(stopped_reason, 'expired') AS reason, \
             (extract(epoch FROM coalesce(stopped_at, expires_at)) * 1000)::bigint AS at_ms \
           FROM shadows \
           WHERE enabled AND (stopped_reason IS NOT NULL \
                              OR expires_at <= to_timestamp($1::bigint / 1000.0))) s \
         WHERE at_ms >= $2 ORDER BY id",
    )
    .bind(now_ms)
    .bind(since_ms)
    .fetch_all(pool)
    .await?;
    record_new(pool, stops.iter().map(shadow_event)).await
}

#[derive(sqlx::FromRow)]
struct TrialSample {
    id: i64,
    name: String,
    looked_up: i64,
    would_hit: i64,
    compared: i64,
    agreed: i64,
}

/// The event of semantic cache rule `t`'s trial having compared `sample` answers or more.
fn semantic_event(t: &TrialSample, sample: u64) -> NewEvent {
    // Per mille, rounded down: the agreement among the compared answers.
    let agreed_per_mille = t.agreed.saturating_mul(1000) / t.compared.max(1);
    let percent = format!("{}.{}", agreed_per_mille / 10, agreed_per_mille % 10);
    NewEvent {
        key: format!("trial:semantic:{}:{sample}", t.id),
        event: Event::TrialFinished,
        payload: json!({
            "text": format!(
                "Semantic cache rule {:?} in trial has compared {} answers: {percent} % agreed \
                 with the live answer; its report is ready to decide on",
                t.name, t.compared
            ),
            "trial": "semantic_cache",
            "cache_rule_id": t.id,
            "name": t.name,
            "sample": sample,
            "looked_up": t.looked_up,
            "would_hit": t.would_hit,
            "compared": t.compared,
            "agreed": t.agreed,
            "report": format!("/api/v1/cache_rules/{}/trial", t.id),
        }),
        threshold: None,
    }
}

/// Records each semantic cache rule in `trial` whose report has compared at least `sample`
/// answers. Returns how many events were new.
pub async fn check_semantic_trials(pool: &sqlx::PgPool, sample: u64) -> Result<usize, sqlx::Error> {
    let trials: Vec<TrialSample> = sqlx::query_as(
        "SELECT c.id, c.name, \
           least(sum(m.looked_up), 9223372036854775807)::bigint AS looked_up, \
           least(sum(m.would_hit), 9223372036854775807)::bigint AS would_hit, \
           least(sum(m.compared), 9223372036854775807)::bigint AS compared, \
           least(sum(m.agreed), 9223372036854775807)::bigint AS agreed \
         FROM cache_rules c JOIN semantic_trial_minutes m ON m.cache_rule_id = c.id \
         WHERE c.semantic_mode = 'trial' AND c.semantic_channel_id IS NOT NULL \
         GROUP BY c.id, c.name HAVING sum(m.compared) >= $1 ORDER BY c.id",
    )
    .bind(i64::try_from(sample).unwrap_or(i64::MAX))
    .fetch_all(pool)
    .await?;
    record_new(pool, trials.iter().map(|t| semantic_event(t, sample))).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shadow_stop_is_keyed_by_rule_reason_and_time() {
        let stop = ShadowStop {
            id: 3,
            name: "cand".into(),
            reason: "spend_cap".into(),
            at_ms: 1_700_000_000_000,
        };
        let e = shadow_event(&stop);
        assert_eq!(e.key, "trial:shadow:3:spend_cap:1700000000000");
        assert_eq!(e.event, Event::TrialFinished);
        assert_eq!(e.payload["trial"], "shadow");
        let text = e.payload["text"].as_str().unwrap_or_default();
        assert!(text.contains("daily spend cap"), "{text}");
    }

    #[test]
    fn a_semantic_trial_event_states_the_agreement() {
        let t = TrialSample {
            id: 9,
            name: "faq".into(),
            looked_up: 2000,
            would_hit: 900,
            compared: 400,
            agreed: 351,
        };
        let e = semantic_event(&t, 400);
        assert_eq!(e.key, "trial:semantic:9:400");
        let text = e.payload["text"].as_str().unwrap_or_default();
        assert!(text.contains("87.7 % agreed"), "{text}");
    }
}
