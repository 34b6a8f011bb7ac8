//! Where events come from: budgets crossing a percentage (read from the reported usage each
//! round), hard limits starting to refuse (reported by the proxies with their usage), channel
//! status changes made by the recovery job. Each builds the event's key, facts and one line of
//! text, and records it with [`record`].

use serde_json::json;
use switchyard_engine::limit::{format_micros, format_pico_usd, format_rfc3339, PICO_PER_USD};
use switchyard_engine::UnixMillis;
use switchyard_proto::v1;

use super::event::{record, record_new, Event, NewEvent};
use crate::spend::{spend_limits, Spend};

/// The percentages of `spend`'s value it has reached, among `thresholds`.
pub fn crossed(spend: &Spend, thresholds: &[i32]) -> Vec<i32> {
    let value_pico = u128::from(spend.value_micros) * (PICO_PER_USD / 1_000_000);
    if value_pico == 0 {
        return Vec::new();
    }
    let mut out: Vec<i32> = thresholds
        .iter()
        .copied()
        .filter(|t| *t > 0 && spend.spent_pico.saturating_mul(100) >= value_pico * (*t as u128))
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// The percentages a budget is watched at: its own (`notify_at`), else those of the webhooks
/// subscribed to budget thresholds.
pub fn watched<'a>(spend: &'a Spend, webhooks: &'a [i32]) -> &'a [i32] {
    spend.notify_at.as_deref().unwrap_or(webhooks)
}

/// The event of `spend` having reached `threshold` percent. Its key names the window (a
/// rolling window's current day: it is told again, once a day, while it stays above). A budget
/// with thresholds of its own tells every subscribed webhook; otherwise only the webhooks
/// listening for `threshold` hear of it.
pub fn budget_event(spend: &Spend, threshold: i32, now: UnixMillis) -> NewEvent {
    let window_start = spend.window.bounds(now).0;
    let spent = format_pico_usd(spend.spent_pico);
    let value = format_micros(spend.value_micros);
    let text = format!(
        "Budget: {} {:?} has spent {spent} of {value} USD ({threshold} % reached) per {}",
        spend.scope.as_str(),
        spend.scope_name,
        spend.window.as_str(),
    );
    NewEvent {
        key: format!("budget:{}:{window_start}:{threshold}", spend.limit_id),
        event: Event::BudgetThreshold,
        payload: json!({
            "text": text,
            "limit_id": spend.limit_id,
            "scope": spend.scope.as_str(),
            "scope_id": spend.scope_id,
            "scope_name": spend.scope_name,
            "window": spend.window.as_str(),
            "threshold_percent": threshold,
            "spent_usd": spent,
            "value_usd": value,
            "window_start_at": format_rfc3339(spend.start),
            "resets_at": format_rfc3339(spend.end),
        }),
        threshold: spend.notify_at.is_none().then_some(threshold),
    }
}

/// Records every budget threshold crossed in the current windows: a budget's own thresholds,
/// else those some enabled webhook listens for (none while no enabled webhook is subscribed to
/// budget thresholds). Returns how many events were new.
pub async fn check_budgets(pool: &sqlx::PgPool, now: UnixMillis) -> Result<usize, sqlx::Error> {
    let subscribed: Option<Vec<i32>> = sqlx::query_scalar(
        "SELECT array_agg(DISTINCT t) FROM webhooks, unnest(thresholds) AS t \
         WHERE enabled AND 'budget_threshold' = ANY (events)",
    )
    .fetch_one(pool)
    .await?;
    let Some(thresholds) = subscribed else {
        return Ok(0);
    };
    let mut events = Vec::new();
    for spend in spend_limits(pool, now).await? {
        for threshold in crossed(&spend, watched(&spend, &thresholds)) {
            events.push(budget_event(&spend, threshold, now));
        }
    }
    record_new(pool, events.into_iter()).await
}

#[derive(sqlx::FromRow)]
struct LimitFacts {
    scope: String,
    scope_id: i64,
    metric: String,
    period: String,
    value: i64,
    subject: Option<String>,
}

/// Whose limit an event names: a token, team, route, channel or member by id, a tag by name,
/// one end user by name, or each end user.
fn whose(f: &LimitFacts) -> String {
    match (f.scope.as_str(), &f.subject) {
        ("tag", Some(tag)) => format!("tag {tag}"),
        ("end_user", Some(user)) => format!("end user {user}"),
        ("end_user", None) => "each end user".to_owned(),
        (scope, _) => format!("{scope} {}", f.scope_id),
    }
}

/// Records, in a usage batch's transaction, the hard limits its proxy saw start refusing: one
/// event per limit and window for the fleet. A limit deleted since is skipped.
pub async fn limit_refusals(
    tx: &mut sqlx::PgConnection,
    events: &[v1::LimitEvent],
) -> Result<(), sqlx::Error> {
    for e in events {
        let facts: Option<LimitFacts> = sqlx::query_as(
            "SELECT scope, scope_id, metric, period, value, subject FROM limits WHERE id = $1",
        )
        .bind(e.limit_id)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(f) = facts else {
            continue;
        };
        let value = u64::try_from(f.value).unwrap_or(0);
        // Spend in USD, as the API shows it.
        let shown = if f.metric == "spend" {
            format!("{} USD", format_micros(value))
        } else {
            value.to_string()
        };
        let window_start = e.window_start_unix_ms;
        let text = format!(
            "Limit {}: {}'s limit of {shown} ({}) per {} started refusing requests at {}",
            e.limit_id,
            whose(&f),
            f.metric,
            f.period,
            format_rfc3339(e.at_unix_ms),
        );
        let event = NewEvent {
            key: format!("refusing:{}:{window_start}", e.limit_id),
            event: Event::LimitRefusing,
            payload: json!({
                "text": text,
                "limit_id": e.limit_id,
                "scope": f.scope,
                "scope_id": f.scope_id,
                "metric": f.metric,
                "window": f.period,
                "value": shown,
                "window_start_at": format_rfc3339(window_start),
                "first_refused_at": format_rfc3339(e.at_unix_ms),
            }),
            threshold: None,
        };
        record(&mut *tx, &event).await?;
    }
    Ok(())
}

/// Records, in the status change's transaction, a channel the recovery job auto-disabled
/// (`recovered: false`) or re-enabled (`true`); `status_event` is the change's row id.
pub async fn channel_status(
    tx: &mut sqlx::PgConnection,
    status_event: i64,
    channel_id: i64,
    recovered: bool,
    reason: &str,
) -> Result<(), sqlx::Error> {
    let name: Option<String> = sqlx::query_scalar("SELECT name FROM channels WHERE id = $1")
        .bind(channel_id)
        .fetch_optional(&mut *tx)
        .await?;
    let name = name.unwrap_or_default();
    let (event, what) = if recovered {
        (Event::ChannelRecovered, "recovered and is enabled again")
    } else {
        (Event::ChannelAutoDisabled, "was disabled automatically")
    };
    let event = NewEvent {
        key: format!("channel:{status_event}"),
        event,
        payload: json!({
            "text": format!("Channel {name:?} ({channel_id}) {what}: {reason}"),
            "channel_id": channel_id,
            "channel": name,
            "reason": reason,
        }),
        threshold: None,
    };
    record(tx, &event).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchyard_engine::limit::{ScopeKind, Window};

    fn spend(value_micros: u64, spent_pico: u128) -> Spend {
        Spend {
            limit_id: 4,
            scope: ScopeKind::Team,
            scope_id: 2,
            scope_name: "research".into(),
            window: Window::Rolling(7),
            mode: "hard".into(),
            value_micros,
            spent_pico,
            requests: 1,
            unpriced: 0,
            start: 0,
            end: 86_400_000,
            route: None,
            notify_at: None,
            end_users: Vec::new(),
        }
    }

    #[test]
    fn a_threshold_is_crossed_at_its_percentage_exactly() {
        // 10 USD; 8 USD spent is 80 %.
        let eighty = spend(10_000_000, 8 * PICO_PER_USD);
        assert_eq!(crossed(&eighty, &[100, 50, 80, 80]), [50, 80]);
        let below = spend(10_000_000, 8 * PICO_PER_USD - 1);
        assert_eq!(crossed(&below, &[50, 80]), [50]);
        assert_eq!(
            crossed(&spend(10_000_000, 11 * PICO_PER_USD), &[100]),
            [100]
        );
        assert!(
            crossed(&spend(0, 5), &[50]).is_empty(),
            "no value, no percentage"
        );
        assert!(crossed(&eighty, &[0, -5]).is_empty());
    }

    #[test]
    fn a_budget_event_is_keyed_by_limit_window_and_threshold() {
        let now = 1_700_000_000_000;
        let e = budget_event(&spend(10_000_000, 8 * PICO_PER_USD), 80, now);
        assert_eq!(e.key, "budget:4:1699920000000:80");
        assert_eq!(e.threshold, Some(80));
        assert_eq!(e.payload["spent_usd"], "8");
        assert_eq!(e.payload["window"], "7d");
        let text = e.payload["text"].as_str().unwrap_or_default();
        assert!(text.contains("80 % reached"), "{text}");
    }

    #[test]
    fn a_budget_with_its_own_thresholds_is_watched_at_those_and_tells_every_webhook() {
        let webhooks = [50, 80, 100];
        let mut own = spend(10_000_000, 9 * PICO_PER_USD);
        assert_eq!(watched(&own, &webhooks), [50, 80, 100], "the default");
        own.notify_at = Some(vec![25, 90]);
        assert_eq!(crossed(&own, watched(&own, &webhooks)), [25, 90]);
        let event = budget_event(&own, 90, 1_700_000_000_000);
        assert_eq!(event.threshold, None, "every subscribed webhook hears it");
        assert_eq!(event.payload["threshold_percent"], 90);
        own.notify_at = Some(Vec::new());
        assert!(
            crossed(&own, watched(&own, &webhooks)).is_empty(),
            "[]: none"
        );
    }
}
