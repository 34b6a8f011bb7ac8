//! Sending due deliveries: a round takes the due rows with `FOR UPDATE SKIP LOCKED` (so two
//! control planes never take the same one), sends each signed, and marks it delivered, due
//! again after a backoff, or failed after the last attempt, in the same transaction.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Method, Request};
use http_body_util::Full;
use serde_json::{json, Value};
use switchyard_upstream::HttpClient;

use super::event::count;
use super::sign::{signature, SIGNATURE_HEADER};

/// Deliveries one round takes at most (each is sent within the request timeout).
const ROUND_LIMIT: i64 = 8;

/// How deliveries are sent and retried.
#[derive(Debug, Clone)]
pub struct DeliveryPolicy {
    /// Budget of one delivery request.
    pub timeout: Duration,
    /// Attempts before a delivery is `failed`.
    pub max_attempts: i32,
    /// The wait after the first failure; it doubles with each further one, up to an hour.
    pub backoff: Duration,
}

impl Default for DeliveryPolicy {
    fn default() -> DeliveryPolicy {
        DeliveryPolicy {
            timeout: Duration::from_secs(5),
            max_attempts: 8,
            backoff: Duration::from_secs(2),
        }
    }
}

impl DeliveryPolicy {
    /// The wait before attempt `attempts + 1`, after `attempts` failed ones (at least one).
    pub fn wait_after(&self, attempts: i32) -> Duration {
        let doublings = u32::try_from(attempts.saturating_sub(1))
            .unwrap_or(0)
            .min(20);
        self.backoff
            .saturating_mul(1 << doublings)
            .min(Duration::from_secs(3600))
    }
}

/// What one round of deliveries did (tests, logs).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Delivered {
    pub delivered: usize,
    pub retried: usize,
    pub failed: usize,
}

#[derive(sqlx::FromRow)]
struct Due {
    event_id: i64,
    webhook_id: i64,
    attempts: i32,
    event: String,
    payload: sqlx::types::Json<Value>,
    url: String,
    kind: String,
    secret: Option<String>,
    /// The control plane's environment variable holding the secret, when it is not stored.
    secret_env: Option<String>,
}

impl Due {
    /// The signing secret: stored, or read from the environment variable it names now (so a
    /// rotated value is used from the next delivery on).
    fn secret(&self) -> Result<String, String> {
        if let Some(secret) = &self.secret {
            return Ok(secret.clone());
        }
        let name = self.secret_env.as_deref().unwrap_or_default();
        match std::env::var(name) {
            Ok(secret) if !secret.is_empty() => Ok(secret),
            _ => Err(format!(
                "the signing secret's environment variable {name} is not set on this control plane"
            )),
        }
    }
}

/// A delivery's body: the event (`json`), or a Slack-compatible `{"text": …}` (`slack`).
pub fn body(kind: &str, event_id: i64, event: &str, payload: &Value) -> Vec<u8> {
    let value = if kind == "slack" {
        json!({ "text": payload.get("text").cloned().unwrap_or(Value::Null) })
    } else {
        json!({ "id": event_id, "event": event, "data": payload })
    };
    value.to_string().into_bytes()
}

/// Sends one delivery: any 2xx answer within the timeout delivers it.
async fn send(client: &HttpClient, due: &Due, timeout: Duration) -> Result<(), String> {
    let body = body(&due.kind, due.event_id, &due.event, &due.payload.0);
    let now_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let secret = due.secret()?;
    let mut signed = HeaderValue::try_from(signature(secret.as_bytes(), now_s, &body))
        .map_err(|e| format!("signature header: {e}"))?;
    signed.set_sensitive(true);
    let request = Request::builder()
        .method(Method::POST)
        .uri(due.url.as_str())
        .header(http::header::CONTENT_TYPE, "application/json")
        .header("user-agent", "switchyard-notifications")
        .header("x-switchyard-event", due.event.as_str())
        .header("x-switchyard-event-id", due.event_id.to_string())
        .header(SIGNATURE_HEADER, signed)
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| format!("building the request: {e}"))?;
    let answer = tokio::time::timeout(timeout, client.request(request))
        .await
        .map_err(|_| format!("no answer within {} ms", timeout.as_millis()))?
        .map_err(|e| e.to_string())?;
    let status = answer.status();
    if status.is_success() {
        Ok(())
    } else {
        Err(format!("answered {}", status.as_u16()))
    }
}

/// One round: every due delivery (up to [`ROUND_LIMIT`]) sent and its outcome stored.
pub async fn deliver_due(
    pool: &sqlx::PgPool,
    client: &HttpClient,
    policy: &DeliveryPolicy,
) -> Result<Delivered, sqlx::Error> {
    let mut tx = pool.begin().await?;
    let due: Vec<Due> = sqlx::query_as(
        "SELECT d.event_id, d.webhook_id, d.attempts, e.event, e.payload, w.url, w.kind, w.secret, \
           w.secret_env \
         FROM notification_deliveries d \
         JOIN notification_events e ON e.id = d.event_id \
         JOIN webhooks w ON w.id = d.webhook_id \
         WHERE d.state = 'pending' AND d.next_at <= now() AND w.enabled \
         ORDER BY d.next_at, d.event_id LIMIT $1 \
         FOR UPDATE OF d SKIP LOCKED",
    )
    .bind(ROUND_LIMIT)
    .fetch_all(&mut *tx)
    .await?;
    let mut out = Delivered::default();
    for d in &due {
        let outcome = send(client, d, policy.timeout).await;
        let attempts = d.attempts.saturating_add(1);
        let (state, outcome_name) = match &outcome {
            Ok(()) => ("delivered", "delivered"),
            Err(_) if attempts >= policy.max_attempts => ("failed", "failed"),
            Err(_) => ("pending", "retried"),
        };
        if let Err(error) = &outcome {
            tracing::warn!(event_id = d.event_id, webhook_id = d.webhook_id, attempts, %error, "notification delivery failed");
        }
        let wait_ms = i64::try_from(policy.wait_after(attempts).as_millis()).unwrap_or(i64::MAX);
        sqlx::query(
            "UPDATE notification_deliveries SET state = $3, attempts = $4, \
               last_error = $5, next_at = now() + make_interval(secs => $6::double precision / 1000), \
               delivered_at = CASE WHEN $3 = 'delivered' THEN now() END \
             WHERE event_id = $1 AND webhook_id = $2",
        )
        .bind(d.event_id)
        .bind(d.webhook_id)
        .bind(state)
        .bind(attempts)
        .bind(outcome.err())
        .bind(wait_ms)
        .execute(&mut *tx)
        .await?;
        count(&d.event, outcome_name);
        match outcome_name {
            "delivered" => out.delivered += 1,
            "failed" => out.failed += 1,
            _ => out.retried += 1,
        }
    }
    tx.commit().await?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_the_first_failure_up_to_an_hour() {
        let policy = DeliveryPolicy {
            backoff: Duration::from_secs(2),
            ..DeliveryPolicy::default()
        };
        let waits: Vec<u64> = (1..=4).map(|a| policy.wait_after(a).as_secs()).collect();
        assert_eq!(waits, [2, 4, 8, 16]);
        assert_eq!(policy.wait_after(0).as_secs(), 2);
        assert_eq!(policy.wait_after(40).as_secs(), 3600);
    }

    #[test]
    fn a_slack_body_is_the_text_alone_and_a_json_body_the_whole_event() {
        let payload = json!({ "text": "budget at 80 %", "limit_id": 3 });
        let slack: Value = serde_json::from_slice(&body("slack", 7, "budget_threshold", &payload))
            .unwrap_or_default();
        assert_eq!(slack, json!({ "text": "budget at 80 %" }));
        let whole: Value = serde_json::from_slice(&body("json", 7, "budget_threshold", &payload))
            .unwrap_or_default();
        assert_eq!(
            whole,
            json!({ "id": 7, "event": "budget_threshold", "data": payload })
        );
    }
}
