//! Notifications end to end against real Postgres (`#[sqlx::test]`): a webhook receiver run
//! by the test gets each budget threshold crossing once, signed as the book says to verify,
//! after a receiver that fails is retried, and never twice however many control planes run
//! rounds on one database; a hard limit a proxy reports refusing is told once per window.
// Helpers outside #[test] fns are test code too: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::Router;
use common::{test_app, TestApp};
use hmac::{Hmac, Mac};
use serde_json::{json, Value};
use sha2::Sha256;
use sqlx::PgPool;
use switchyard_control_plane::notify::deliver::DeliveryPolicy;
use switchyard_control_plane::notify::{Notifier, NotifyConfig};
use switchyard_control_plane::usage::apply_batch;
use switchyard_proto::v1::{
    LimitEvent, SemanticTrialRecord, ShadowRecord, UsageBatch, UsageRecord,
};

const SECRET: &str = "whsec-test-0123456789abcdef";

/// What the receiver got: each delivery's headers and body.
#[derive(Default)]
struct Received {
    deliveries: Mutex<Vec<(HeaderMap, Vec<u8>)>>,
    /// Answers 500 to this many deliveries before taking one.
    fail_first: AtomicUsize,
    attempts: AtomicUsize,
}

async fn receive(
    State(received): State<Arc<Received>>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> StatusCode {
    received.attempts.fetch_add(1, Ordering::SeqCst);
    let failing = received
        .fail_first
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok();
    if failing {
        return StatusCode::INTERNAL_SERVER_ERROR;
    }
    received
        .deliveries
        .lock()
        .unwrap()
        .push((headers, body.to_vec()));
    StatusCode::NO_CONTENT
}

/// A receiver on a free local port: its URL and what it got.
async fn receiver(fail_first: usize) -> (String, Arc<Received>) {
    let received = Arc::new(Received::default());
    received.fail_first.store(fail_first, Ordering::SeqCst);
    let app = Router::new()
        .route("/hook/secret-path", post(receive))
        .with_state(Arc::clone(&received));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}/hook/secret-path"), received)
}

/// Verifies a delivery as the notifications guide says: `t=<unix>,v1=<hex>`, the HMAC-SHA256
/// of `<t>.<body>` under the secret. Returns the body as JSON.
fn verified(headers: &HeaderMap, body: &[u8]) -> Value {
    let header = headers["x-switchyard-signature"].to_str().unwrap();
    let (t, v1) = header.split_once(',').unwrap();
    let t = t.strip_prefix("t=").unwrap();
    let v1 = v1.strip_prefix("v1=").unwrap();
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(SECRET.as_bytes()).unwrap();
    mac.update(t.as_bytes());
    mac.update(b".");
    mac.update(body);
    let want: String = mac
        .finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(v1, want, "the signature verifies");
    let age = switchyard_proto::usage::unix_now_s() - t.parse::<i64>().unwrap();
    assert!((0..300).contains(&age), "a fresh timestamp: {age} s");
    serde_json::from_slice(body).unwrap()
}

fn notifier(pool: &PgPool) -> Arc<Notifier> {
    Notifier::new(
        pool.clone(),
        NotifyConfig {
            delivery: DeliveryPolicy {
                // Due again at once: a round retries until delivered (no waiting in tests).
                backoff: Duration::ZERO,
                timeout: Duration::from_secs(5),
                max_attempts: 5,
            },
            ..NotifyConfig::default()
        },
    )
}

/// A token `app` with a daily 10 USD budget; returns the limit's id.
async fn budget(app: &TestApp) -> i64 {
    let token = app.create("/api/v1/tokens", json!({"name": "app"})).await;
    app.create(
        "/api/v1/limits",
        json!({"scope": "token", "scope_id": token, "metric": "spend", "window": "day",
               "value": "10"}),
    )
    .await
}

/// Reports `usd` of spend by token `app` this minute (batch ids are the caller's).
async fn spend(pool: &PgPool, batch: &str, usd: u64) {
    let minute = switchyard_proto::usage::unix_now_s() / 60 * 60;
    let record = UsageRecord {
        bucket_start_unix_s: minute,
        token: "app".into(),
        route: "gpt-*".into(),
        channel: "openai".into(),
        model: "gpt-4o".into(),
        requests: 1,
        cost_pico_usd: usd * 1_000_000_000_000,
        ..UsageRecord::default()
    };
    let batch = UsageBatch {
        batch_id: batch.into(),
        client_id: "test".into(),
        records: vec![record],
        ..UsageBatch::default()
    };
    apply_batch(pool, &batch).await.unwrap();
}

async fn webhook(app: &TestApp, url: &str, events: Value, thresholds: Value) -> i64 {
    app.create(
        "/api/v1/webhooks",
        json!({"name": "ops", "url": url, "events": events, "thresholds": thresholds,
               "secret": SECRET}),
    )
    .await
}

#[sqlx::test(migrations = "../migrations")]
async fn each_threshold_crossing_is_delivered_once_signed(pool: PgPool) {
    let app = test_app(pool.clone());
    let limit = budget(&app).await;
    let (url, received) = receiver(0).await;
    let hook = webhook(&app, &url, json!(["budget_threshold"]), json!([50, 80])).await;
    // The secret is never read back, nor the URL's path.
    let shown = app.get(&format!("/api/v1/webhooks/{hook}")).await;
    assert!(!shown.text.contains(SECRET), "{}", shown.text);
    assert!(!shown.text.contains("secret-path"), "{}", shown.text);
    let notifier = notifier(&pool);
    let now = switchyard_state::unix_ms();

    spend(&pool, "b-1", 4).await;
    let round = notifier.round(now).await.unwrap();
    assert_eq!(round.budget_events, 0, "40 % crosses nothing");
    spend(&pool, "b-2", 2).await;
    let round = notifier.round(now).await.unwrap();
    assert_eq!((round.budget_events, round.deliveries.delivered), (1, 1));
    // Again at 60 %: nothing new.
    let round = notifier.round(now).await.unwrap();
    assert_eq!((round.budget_events, round.deliveries.delivered), (0, 0));
    // 90 %: the 80 % crossing.
    spend(&pool, "b-3", 3).await;
    notifier.round(now).await.unwrap();
    notifier.round(now).await.unwrap();

    let deliveries = received.deliveries.lock().unwrap().clone();
    assert_eq!(deliveries.len(), 2, "one per crossing");
    let crossed: Vec<(i64, String)> = deliveries
        .iter()
        .map(|(headers, body)| {
            let event = verified(headers, body);
            assert_eq!(event["event"], "budget_threshold");
            assert_eq!(headers["x-switchyard-event"], "budget_threshold");
            assert_eq!(event["data"]["limit_id"], limit);
            (
                event["data"]["threshold_percent"].as_i64().unwrap(),
                event["data"]["spent_usd"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(crossed, [(50, "6".to_owned()), (80, "9".to_owned())]);
    // Each event is in the audit log too.
    let audited: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM audit_log WHERE resource = 'notification' AND actor = 'notifications'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(audited, 2);
}

#[sqlx::test(migrations = "../migrations")]
async fn a_receiver_that_fails_twice_gets_the_event_once_on_the_third_attempt(pool: PgPool) {
    let app = test_app(pool.clone());
    budget(&app).await;
    let (url, received) = receiver(2).await;
    webhook(&app, &url, json!(["budget_threshold"]), json!([100])).await;
    spend(&pool, "b-1", 11).await;
    let round = notifier(&pool)
        .round(switchyard_state::unix_ms())
        .await
        .unwrap();
    assert_eq!(round.deliveries.retried, 2);
    assert_eq!(round.deliveries.delivered, 1);
    assert_eq!(received.attempts.load(Ordering::SeqCst), 3);
    let deliveries = received.deliveries.lock().unwrap().clone();
    assert_eq!(deliveries.len(), 1);
    let event = verified(&deliveries[0].0, &deliveries[0].1);
    assert_eq!(event["data"]["threshold_percent"], 100);
    let (state, attempts): (String, i32) =
        sqlx::query_as("SELECT state, attempts FROM notification_deliveries")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!((state.as_str(), attempts), ("delivered", 3));
    // Delivered: never sent again.
    notifier(&pool)
        .round(switchyard_state::unix_ms())
        .await
        .unwrap();
    assert_eq!(received.attempts.load(Ordering::SeqCst), 3);
}

#[sqlx::test(migrations = "../migrations")]
async fn two_control_planes_on_one_database_never_send_one_event_twice(pool: PgPool) {
    let app = test_app(pool.clone());
    budget(&app).await;
    let (url, received) = receiver(0).await;
    webhook(
        &app,
        &url,
        json!(["budget_threshold", "limit_refusing"]),
        json!([10, 20, 30, 40, 50, 60, 70, 80, 90, 100]),
    )
    .await;
    spend(&pool, "b-1", 10).await;
    let (a, b) = (notifier(&pool), notifier(&pool));
    let now = switchyard_state::unix_ms();
    for _ in 0..3 {
        let (ra, rb) = tokio::join!(a.round(now), b.round(now));
        ra.unwrap();
        rb.unwrap();
    }
    let deliveries = received.deliveries.lock().unwrap().clone();
    let mut thresholds: Vec<i64> = deliveries
        .iter()
        .map(|(h, body)| {
            verified(h, body)["data"]["threshold_percent"]
                .as_i64()
                .unwrap()
        })
        .collect();
    thresholds.sort_unstable();
    assert_eq!(thresholds, [10, 20, 30, 40, 50, 60, 70, 80, 90, 100]);
}

#[sqlx::test(migrations = "../migrations")]
async fn a_hard_limit_reported_refusing_is_told_once_per_window(pool: PgPool) {
    let app = test_app(pool.clone());
    let token = app.create("/api/v1/tokens", json!({"name": "app"})).await;
    let limit = app
        .create(
            "/api/v1/limits",
            json!({"scope": "token", "scope_id": token, "metric": "requests",
                   "window": "minute", "value": 5}),
        )
        .await;
    let (url, received) = receiver(0).await;
    app.create(
        "/api/v1/webhooks",
        json!({"name": "chat", "url": url, "kind": "slack", "events": ["limit_refusing"],
               "secret": SECRET}),
    )
    .await;
    let event = |at: u64| LimitEvent {
        limit_id: limit,
        window_start_unix_ms: 1_700_000_040_000,
        at_unix_ms: at,
    };
    // Two proxies report the same window; one of them again under another batch.
    for (batch, at) in [
        ("p1-1", 1_700_000_041_000),
        ("p2-1", 1_700_000_042_000),
        ("p1-2", 1_700_000_043_000),
    ] {
        let batch = UsageBatch {
            batch_id: batch.into(),
            client_id: "test".into(),
            events: vec![event(at)],
            ..UsageBatch::default()
        };
        apply_batch(&pool, &batch).await.unwrap();
    }
    notifier(&pool)
        .round(switchyard_state::unix_ms())
        .await
        .unwrap();
    let deliveries = received.deliveries.lock().unwrap().clone();
    assert_eq!(deliveries.len(), 1);
    let body = verified(&deliveries[0].0, &deliveries[0].1);
    let text = body["text"].as_str().unwrap();
    assert_eq!(body.as_object().unwrap().len(), 1, "Slack's shape: {body}");
    assert!(text.contains(&format!("Limit {limit}")), "{text}");
    assert!(text.contains("started refusing"), "{text}");
}

/// A webhook with the default thresholds hearing `events`; its receiver.
async fn subscribed(app: &TestApp, events: Value) -> Arc<Received> {
    let (url, received) = receiver(0).await;
    app.create(
        "/api/v1/webhooks",
        json!({"name": "ops", "url": url, "events": events, "secret": SECRET}),
    )
    .await;
    received
}

/// The thresholds each delivery the receiver got told of, in order.
fn told(received: &Received) -> Vec<i64> {
    let deliveries = received.deliveries.lock().unwrap().clone();
    deliveries
        .iter()
        .map(|(h, body)| {
            verified(h, body)["data"]["threshold_percent"]
                .as_i64()
                .unwrap()
        })
        .collect()
}

#[sqlx::test(migrations = "../migrations")]
async fn a_budget_with_its_own_thresholds_notifies_once_per_crossing_of_those(pool: PgPool) {
    let app = test_app(pool.clone());
    let limit = budget(&app).await;
    let shown = app
        .patch(
            &format!("/api/v1/limits/{limit}"),
            json!({"notify_at": [90, 25, 100, 25]}),
        )
        .await;
    assert_eq!(
        shown.body["notify_at"],
        json!([25, 90, 100]),
        "{}",
        shown.text
    );
    // The webhook's own thresholds (the default) do not apply to this budget.
    let received = subscribed(&app, json!(["budget_threshold"])).await;
    let notifier = notifier(&pool);
    let now = switchyard_state::unix_ms();
    // 30 %: the 25 % crossing (50 % of the default is not one of this budget's).
    spend(&pool, "b-1", 3).await;
    notifier.round(now).await.unwrap();
    // 60 %, then 90 %: nothing, then the 90 % crossing, each told once over repeated rounds.
    spend(&pool, "b-2", 3).await;
    notifier.round(now).await.unwrap();
    spend(&pool, "b-3", 3).await;
    for _ in 0..3 {
        notifier.round(now).await.unwrap();
    }
    assert_eq!(told(&received), [25, 90]);
    // `[]`: this budget tells nothing more, even past 100 %.
    let cleared = app
        .patch(&format!("/api/v1/limits/{limit}"), json!({"notify_at": []}))
        .await;
    assert_eq!(cleared.body["notify_at"], json!([]), "{}", cleared.text);
    spend(&pool, "b-5", 5).await;
    notifier.round(now).await.unwrap();
    assert_eq!(told(&received), [25, 90]);
}

#[sqlx::test(migrations = "../migrations")]
async fn a_budget_without_thresholds_of_its_own_follows_the_default(pool: PgPool) {
    let app = test_app(pool.clone());
    let limit = budget(&app).await;
    let shown = app.get(&format!("/api/v1/limits/{limit}")).await;
    assert_eq!(shown.body["notify_at"], Value::Null, "{}", shown.text);
    let received = subscribed(&app, json!(["budget_threshold"])).await;
    let notifier = notifier(&pool);
    let now = switchyard_state::unix_ms();
    spend(&pool, "b-1", 3).await;
    notifier.round(now).await.unwrap();
    spend(&pool, "b-2", 6).await;
    notifier.round(now).await.unwrap();
    notifier.round(now).await.unwrap();
    assert_eq!(
        told(&received),
        [50, 80],
        "50/80/100 by default; 90 % spent"
    );
}

#[sqlx::test(migrations = "../migrations")]
async fn notify_at_is_refused_on_a_count_limit_and_out_of_range(pool: PgPool) {
    let app = test_app(pool.clone());
    let token = app.create("/api/v1/tokens", json!({"name": "app"})).await;
    let refused = app
        .post(
            "/api/v1/limits",
            json!({"scope": "token", "scope_id": token, "metric": "requests",
                   "window": "minute", "value": 5, "notify_at": [50]}),
        )
        .await;
    assert_eq!(
        refused.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        refused.text
    );
    assert_eq!(refused.param(), Some("notify_at"));
    let refused = app
        .post(
            "/api/v1/limits",
            json!({"scope": "token", "scope_id": token, "metric": "spend",
                   "window": "day", "value": "5", "notify_at": [0, 50]}),
        )
        .await;
    assert_eq!(
        refused.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        refused.text
    );
    assert_eq!(refused.param(), Some("notify_at"));
}

/// The `data` of every delivery the receiver got, verified.
fn events(received: &Received) -> Vec<Value> {
    let deliveries = received.deliveries.lock().unwrap().clone();
    deliveries
        .iter()
        .map(|(h, body)| {
            let event = verified(h, body);
            assert_eq!(event["event"], "trial_finished");
            event["data"].clone()
        })
        .collect()
}

async fn trial_audit_rows(pool: &PgPool) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM audit_log WHERE resource = 'notification' \
         AND detail->>'event' = 'trial_finished'",
    )
    .fetch_one(pool)
    .await
    .unwrap()
}

#[sqlx::test(migrations = "../migrations")]
async fn a_shadow_rule_that_stops_by_itself_is_told_once(pool: PgPool) {
    let app = test_app(pool.clone());
    let channel = app
        .create(
            "/api/v1/channels",
            json!({"name": "cand", "provider": "mock", "base_url": "mock://sim"}),
        )
        .await;
    let rule = |name: &str| {
        json!({"name": name, "model_pattern": "m", "target_channel_id": channel,
               "target_model": "cand-model", "sample_percent": 100, "max_rps": 10,
               "max_daily_spend_usd": "0.000001"})
    };
    let capped = app.create("/api/v1/shadows", rule("capped")).await;
    let running = app.create("/api/v1/shadows", rule("running")).await;
    let received = subscribed(&app, json!(["trial_finished"])).await;
    let notifier = notifier(&pool);
    let round = notifier.round(switchyard_state::unix_ms()).await.unwrap();
    assert_eq!(round.trial_events, 0, "nothing stopped yet");

    // A proxy reports a pair whose shadow cost more than the cap: the rule stops.
    let minute = switchyard_proto::usage::unix_now_s() / 60 * 60;
    let batch = UsageBatch {
        batch_id: "s-1".into(),
        client_id: "test".into(),
        shadows: vec![ShadowRecord {
            bucket_start_unix_s: minute,
            rule_id: capped,
            pairs: 1,
            live_ok: 1,
            shadow_ok: 1,
            shadow_cost_pico_usd: 5_000_000,
            ..ShadowRecord::default()
        }],
        ..UsageBatch::default()
    };
    apply_batch(&pool, &batch).await.unwrap();
    // Another rule's stored expiry passes (a rule is never given a past one).
    sqlx::query("UPDATE shadows SET expires_at = now() - interval '1 minute' WHERE id = $1")
        .bind(running)
        .execute(&pool)
        .await
        .unwrap();
    for _ in 0..3 {
        notifier.round(switchyard_state::unix_ms()).await.unwrap();
    }
    let mut told: Vec<(i64, String)> = events(&received)
        .iter()
        .map(|e| {
            assert_eq!(e["trial"], "shadow");
            (
                e["shadow_id"].as_i64().unwrap(),
                e["reason"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    told.sort();
    assert_eq!(
        told,
        [
            (capped, "spend_cap".to_owned()),
            (running, "expired".to_owned())
        ]
    );
    assert_eq!(trial_audit_rows(&pool).await, 2);
}

fn trial_minute(id: &str, rule: i64, minute: i64, compared: u64) -> UsageBatch {
    UsageBatch {
        batch_id: id.to_owned(),
        client_id: "test".to_owned(),
        semantic_trials: vec![SemanticTrialRecord {
            bucket_start_unix_s: minute,
            rule_id: rule,
            looked_up: compared * 2,
            would_hit: compared,
            compared,
            agreed: compared * 9 / 10,
            score_milli_sum: compared * 960,
            similarity_milli_sum: compared * 900,
        }],
        ..UsageBatch::default()
    }
}

#[sqlx::test(migrations = "../migrations")]
async fn a_semantic_trial_is_told_once_its_sample_is_decision_ready(pool: PgPool) {
    let app = test_app(pool.clone());
    let channel = app
        .create(
            "/api/v1/channels",
            json!({"name": "embedder", "provider": "openai", "base_url": "http://127.0.0.1:9"}),
        )
        .await;
    let rule = app
        .create(
            "/api/v1/cache_rules",
            json!({"name": "sem", "model_pattern": "gpt-*", "endpoints": ["chat_completions"],
                   "ttl_seconds": 60, "semantic": {"channel": channel, "model": "embed-model",
                   "threshold": 0.95, "mode": "trial"}}),
        )
        .await;
    let received = subscribed(&app, json!(["trial_finished"])).await;
    let notifier = notifier(&pool);
    let sample = switchyard_control_plane::notify::trials::DEFAULT_TRIAL_SAMPLE;
    apply_batch(&pool, &trial_minute("t-1", rule, 1_800_000_000, sample - 1))
        .await
        .unwrap();
    let round = notifier.round(switchyard_state::unix_ms()).await.unwrap();
    assert_eq!(round.trial_events, 0, "one answer short of the sample");
    apply_batch(&pool, &trial_minute("t-2", rule, 1_800_000_060, 1))
        .await
        .unwrap();
    let round = notifier.round(switchyard_state::unix_ms()).await.unwrap();
    assert_eq!(round.trial_events, 1);
    apply_batch(&pool, &trial_minute("t-3", rule, 1_800_000_120, 50))
        .await
        .unwrap();
    notifier.round(switchyard_state::unix_ms()).await.unwrap();
    let told = events(&received);
    assert_eq!(told.len(), 1, "once: {told:?}");
    assert_eq!(told[0]["trial"], "semantic_cache");
    assert_eq!(told[0]["cache_rule_id"], rule);
    assert_eq!(told[0]["compared"], sample);
    assert_eq!(trial_audit_rows(&pool).await, 1);
}
