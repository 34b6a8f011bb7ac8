//! The events the control plane notifies about, and recording one: once per event key
//! fleet-wide (a unique key in `notification_events`), with one pending delivery per enabled
//! webhook subscribed to it, an audit row and a count in `switchyard_notifications_total`. The
//! caller's transaction decides: an event recorded with a change exists if and only if the
//! change committed.

use std::sync::LazyLock;

use serde_json::{json, Value};
use switchyard_metrics::Family;

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// A budget (a spend limit) crossed a percentage of its value in its window.
    BudgetThreshold,
    /// A hard limit started refusing requests in a window (a proxy reported it).
    LimitRefusing,
    /// The recovery job recorded a channel's open breaker as `auto_disabled`.
    ChannelAutoDisabled,
    /// A recovery probe passed and re-enabled an `auto_disabled` channel.
    ChannelRecovered,
    /// A trial finished: a shadow rule stopped by itself (it expired, or passed its spend cap
    /// or error-rate stop), or a semantic cache rule in `trial` has compared enough answers for
    /// its report to decide on.
    TrialFinished,
}

impl Event {
    pub const ALL: [Event; 5] = [
        Event::BudgetThreshold,
        Event::LimitRefusing,
        Event::ChannelAutoDisabled,
        Event::ChannelRecovered,
        Event::TrialFinished,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Event::BudgetThreshold => "budget_threshold",
            Event::LimitRefusing => "limit_refusing",
            Event::ChannelAutoDisabled => "channel_auto_disabled",
            Event::ChannelRecovered => "channel_recovered",
            Event::TrialFinished => "trial_finished",
        }
    }

    pub fn parse(text: &str) -> Option<Event> {
        Event::ALL.into_iter().find(|e| e.as_str() == text)
    }

    /// Every event's name, comma-separated (for an error naming the valid ones).
    pub fn names() -> String {
        Event::ALL.map(Event::as_str).join(", ")
    }
}

/// `switchyard_notifications_total{event,outcome}`: events recorded (`recorded`) and their
/// deliveries (`delivered`, `retried`, `failed`). Both labels come from fixed sets.
pub static NOTIFICATIONS: LazyLock<Family<2>> = LazyLock::new(|| {
    Family::new(
        "switchyard_notifications_total",
        "Notification events recorded, and deliveries to webhooks by outcome.",
        ["event", "outcome"],
    )
});

/// Counts one `outcome` of an event named `event` (a stored name; anything else counts as
/// `unknown`, so the label stays in a fixed set).
pub fn count(event: &str, outcome: &'static str) {
    let event = Event::parse(event).map_or("unknown", Event::as_str);
    NOTIFICATIONS.add([event, outcome], 1);
}

/// One event to record: `key` names it once fleet-wide; `threshold`, for a budget event that
/// follows the webhooks' thresholds, is the percentage crossed (only webhooks listening for it
/// get a delivery); `None` reaches every webhook subscribed to the event.
#[derive(Debug, Clone)]
pub struct NewEvent {
    pub key: String,
    pub event: Event,
    /// What a receiver reads: the event's facts, and `text`, one line for a person.
    pub payload: Value,
    pub threshold: Option<i32>,
}

/// Who the audit log names for an event.
pub const ACTOR: &str = "notifications";

/// Records `new` in the caller's transaction unless its key was recorded before: the event,
/// its deliveries and its audit row. Returns its id when it is new.
pub async fn record(
    tx: &mut sqlx::PgConnection,
    new: &NewEvent,
) -> Result<Option<i64>, sqlx::Error> {
    let id: Option<i64> = sqlx::query_scalar(
        "INSERT INTO notification_events (key, event, payload) VALUES ($1, $2, $3) \
         ON CONFLICT (key) DO NOTHING RETURNING id",
    )
    .bind(&new.key)
    .bind(new.event.as_str())
    .bind(sqlx::types::Json(&new.payload))
    .fetch_optional(&mut *tx)
    .await?;
    let Some(id) = id else {
        return Ok(None);
    };
    sqlx::query(
        "INSERT INTO notification_deliveries (event_id, webhook_id) \
         SELECT $1, id FROM webhooks \
         WHERE enabled AND $2 = ANY (events) AND ($3::integer IS NULL OR $3 = ANY (thresholds))",
    )
    .bind(id)
    .bind(new.event.as_str())
    .bind(new.threshold)
    .execute(&mut *tx)
    .await?;
    // An event changes no configuration: its audit row carries the current revision.
    sqlx::query(
        "INSERT INTO audit_log (actor, action, resource, resource_id, revision, detail) \
         SELECT $1, 'create', 'notification', $2, revision, $3 FROM snapshot_revision",
    )
    .bind(ACTOR)
    .bind(id)
    .bind(sqlx::types::Json(json!({
        "event": new.event.as_str(),
        "key": new.key,
        "payload": new.payload,
    })))
    .execute(&mut *tx)
    .await?;
    count(new.event.as_str(), "recorded");
    tracing::info!(event = new.event.as_str(), event_id = id, key = %new.key, "notification event recorded");
    Ok(Some(id))
}

/// Records each of `events` not recorded before, each in its own transaction.
pub async fn record_new(
    pool: &sqlx::PgPool,
    events: impl Iterator<Item = NewEvent>,
) -> Result<usize, sqlx::Error> {
    let mut new = 0;
    for event in events {
        let known: bool =
            sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM notification_events WHERE key = $1)")
                .bind(&event.key)
                .fetch_one(pool)
                .await?;
        if known {
            continue;
        }
        let mut tx = pool.begin().await?;
        if record(&mut tx, &event).await?.is_some() {
            new += 1;
        }
        tx.commit().await?;
    }
    Ok(new)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_event_name_parses_back_and_nothing_else_does() {
        for event in Event::ALL {
            assert_eq!(Event::parse(event.as_str()), Some(event));
        }
        assert_eq!(Event::parse("budget"), None);
        assert_eq!(Event::parse(""), None);
    }
}
