//! Recovery probes and the live shared-state view, against real Postgres (`#[sqlx::test]`), real
//! Redis (`REDIS_URL`, a fresh key prefix per test) and a scripted mock upstream.
// Helpers outside #[test] fns are test code too: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{test_app, test_app_with_live, TestApp};
use serde_json::{json, Value};
use sqlx::PgPool;
use switchyard_control_plane::live::LiveState;
use switchyard_control_plane::recovery::{Recovery, RecoveryConfig, RoundReport};
use switchyard_mock_upstream::{Behavior, Matcher, MockUpstream};
use switchyard_state::{
    AttemptFailure, AttemptSuccess, FailureKind, FailurePolicy, RedisConfig, RedisStore, StateStore,
};
use tokio_util::sync::CancellationToken;

const PATIENCE: Duration = Duration::from_secs(15);

// ---------------------------------------------------------------------------------------------
// Redis helpers

/// The test Redis (`REDIS_URL`, default local). A Redis-backed test fails, never skips, when
/// nothing answers there: the test command (`scripts/test`) starts one.
fn redis_url() -> String {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    let up = redis::Client::open(url.as_str())
        .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(2)))
        .is_ok();
    assert!(
        up,
        "no Redis answers at {url}: this test needs one (scripts/test starts it)"
    );
    url
}

fn unique_prefix(tag: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("cp-test-{tag}-{nanos:x}-{:x}", std::process::id())
}

/// A store playing one proxy of the fleet.
fn proxy_store(url: &str, prefix: &str) -> RedisStore {
    let mut config = RedisConfig::new(url, prefix);
    config.resync_every = Duration::from_millis(200);
    config.lease_refresh = Duration::from_millis(200);
    config.lease_ttl = Duration::from_millis(2000);
    config.state_ttl = Duration::from_secs(600);
    RedisStore::start(config).unwrap()
}

/// The fleet state itself, as Redis holds it: every state hash and the sticky index. Leases and
/// the version counter are left out (each live process refreshes its own lease).
fn redis_state(url: &str, prefix: &str) -> Vec<(String, Vec<String>)> {
    let client = redis::Client::open(url).unwrap();
    let mut con = client
        .get_connection_with_timeout(Duration::from_secs(2))
        .unwrap();
    let mut out = Vec::new();
    for key in ["member", "channel", "health", "cred", "sticky"] {
        let name = format!("{{sy:{prefix}}}:{key}");
        let mut fields: Vec<String> = redis::cmd("HGETALL").arg(&name).query(&mut con).unwrap();
        fields.sort();
        out.push((name, fields));
    }
    let name = format!("{{sy:{prefix}}}:sticky_exp");
    let members: Vec<String> = redis::cmd("ZRANGE")
        .arg(&name)
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query(&mut con)
        .unwrap();
    out.push((name, members));
    out
}

fn cleanup(url: &str, prefix: &str) {
    let Ok(client) = redis::Client::open(url) else {
        return;
    };
    let Ok(mut con) = client.get_connection_with_timeout(Duration::from_secs(1)) else {
        return;
    };
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{{sy:{prefix}}}:*"))
        .query(&mut con)
        .unwrap_or_default();
    if !keys.is_empty() {
        let _: Result<(), _> = redis::cmd("DEL").arg(&keys).query(&mut con);
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

const POLICY: FailurePolicy = FailurePolicy {
    fault_protection: true,
    cooldown_ms: 60_000,
    breaker_threshold: 5,
};

/// Five failed channel attempts: the breaker trips (the default `breaker_failure_threshold`).
fn trip(store: &dyn StateStore, channel: i64) {
    for _ in 0..5 {
        store.record_channel_failure(channel, &POLICY, now_ms());
    }
}

fn breaker_open(store: &dyn StateStore, channel: i64) -> bool {
    store
        .dump(now_ms())
        .channels
        .iter()
        .any(|c| c.channel_id == channel && c.breaker_open)
}

async fn eventually(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !condition() {
        assert!(tokio::time::Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

// ---------------------------------------------------------------------------------------------
// Postgres helpers

fn config() -> RecoveryConfig {
    RecoveryConfig {
        tick: Duration::from_millis(100),
        probe_timeout: Duration::from_secs(2),
        ..RecoveryConfig::default()
    }
}

/// A recovery job that reads the app's published snapshots.
fn recovery_job(app: &TestApp, live: Option<LiveState>, config: RecoveryConfig) -> Arc<Recovery> {
    let recovery = Recovery::new(app.pool.clone(), live, config);
    recovery.read_snapshots_from(Arc::clone(&app.publisher));
    recovery
}

/// One round on the latest committed tables: the publisher's LISTEN task does not run in these
/// tests, so the snapshot is compiled and published first, as that task would on the NOTIFY.
async fn round(app: &TestApp, recovery: &Recovery) -> RoundReport {
    app.refresh().await;
    recovery.run_round().await.unwrap()
}

/// The upstream model a channel made by `channel_at` is probed with.
fn probe_model(name: &str) -> String {
    format!("{name}-model")
}

/// A channel pointing at the mock upstream, with these inline secrets, and one member (route
/// `{name}-model`, upstream model `{name}-model`): the model its probes ask for.
async fn channel_at(app: &TestApp, name: &str, mock: &MockUpstream, secrets: &[&str]) -> i64 {
    channel_of(app, name, "openai", mock, secrets).await
}

async fn channel_of(
    app: &TestApp,
    name: &str,
    provider: &str,
    mock: &MockUpstream,
    secrets: &[&str],
) -> i64 {
    let id = app
        .create(
            "/api/v1/channels",
            json!({"name": name, "provider": provider, "base_url": mock.base_url()}),
        )
        .await;
    for secret in secrets {
        app.create(
            &format!("/api/v1/channels/{id}/credentials"),
            json!({ "secret": secret }),
        )
        .await;
    }
    let route = app.route(&probe_model(name)).await;
    app.member(
        route,
        json!({"channel_id": id, "upstream_model": probe_model(name)}),
    )
    .await;
    id
}

/// What the breaker would have done: only the system sets `auto_disabled` (through
/// `commit_write`, which bumps the revision the publisher compiles).
async fn auto_disable(pool: &PgPool, channel: i64) {
    sqlx::query("UPDATE channels SET status = 'auto_disabled' WHERE id = $1")
        .bind(channel)
        .execute(pool)
        .await
        .unwrap();
    sqlx::query("UPDATE snapshot_revision SET revision = revision + 1")
        .execute(pool)
        .await
        .unwrap();
}

async fn status(app: &TestApp, channel: i64) -> String {
    let reply = app.get(&format!("/api/v1/channels/{channel}")).await;
    reply.body["status"].as_str().unwrap().to_owned()
}

async fn events(app: &TestApp, channel: i64) -> Vec<Value> {
    let reply = app.get(&format!("/api/v1/channels/{channel}/events")).await;
    reply.body["data"].as_array().unwrap().clone()
}

/// The OpenAI probe (a one-token chat completion) with this credential.
fn probes(credential: &str) -> Matcher {
    Matcher::path("/v1/chat/completions").credential(credential)
}

// ---------------------------------------------------------------------------------------------
// Probes

#[sqlx::test(migrations = "../migrations")]
async fn probe_re_enables_an_auto_disabled_channel_whose_upstream_answers(pool: PgPool) {
    let app = test_app(pool.clone());
    let mock = MockUpstream::start().await.unwrap();
    let channel = channel_at(&app, "primary", &mock, &["sk-good-0001"]).await;
    auto_disable(&pool, channel).await;
    let revision = app.revision().await;
    let audits = app.audit_rows().await;

    let recovery = recovery_job(&app, None, config());
    let report = round(&app, &recovery).await;

    assert_eq!(report.probed, vec![channel]);
    assert_eq!(report.recovered, vec![channel]);
    assert_eq!(status(&app, channel).await, "enabled");
    assert_eq!(mock.hits_matching(&probes("sk-good-0001")), 1);
    // The probe is a one-token generation of the channel's member's upstream model.
    let request = &mock.requests()[0];
    assert_eq!(request.method, "POST");
    assert_eq!(request.path, "/v1/chat/completions");
    assert_eq!(
        request.model.as_deref(),
        Some(probe_model("primary").as_str())
    );
    let body: Value = serde_json::from_slice(&request.body).unwrap();
    assert_eq!(body["max_completion_tokens"], 1, "{body}");
    assert_eq!(body["messages"][0]["role"], "user", "{body}");
    assert_eq!(mock.hits_matching(&Matcher::path("/v1/models")), 0);
    let events = events(&app, channel).await;
    let last = events.last().unwrap();
    assert_eq!(last["from_status"], "auto_disabled");
    assert_eq!(last["to_status"], "enabled");
    assert_eq!(last["actor"], "system:recovery-probe");
    assert!(
        last["reason"]
            .as_str()
            .unwrap()
            .starts_with("recovery probe passed"),
        "{last}"
    );
    // Through the audited write path: one audit row, one revision; and the notification
    // event the recovery is (audited too, without a revision of its own).
    assert_eq!(app.revision().await, revision + 1);
    assert_eq!(app.audit_rows().await, audits + 2);
    let audit = app
        .get(&format!(
            "/api/v1/audit?resource=channel&resource_id={channel}"
        ))
        .await;
    let last_audit = audit.body["data"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last_audit["actor"], "system:recovery-probe");
    assert_eq!(last_audit["detail"]["status"], "enabled");
    assert!(!audit.text.contains("sk-good-0001"));

    // Nothing left to probe.
    let report = round(&app, &recovery).await;
    assert!(report.probed.is_empty(), "{report:?}");
}

#[sqlx::test(migrations = "../migrations")]
async fn failed_probe_tries_every_credential_and_changes_nothing(pool: PgPool) {
    let app = test_app(pool.clone());
    let mock = MockUpstream::start().await.unwrap();
    mock.on(Matcher::path("/v1/chat/completions"), Behavior::status(401));
    let channel = channel_at(&app, "bad-keys", &mock, &["sk-revoked-a"]).await;
    // The second key lives in the control plane's environment.
    std::env::set_var("SWITCHYARD_TEST_PROBE_KEY_B", "sk-revoked-b");
    app.create(
        &format!("/api/v1/channels/{channel}/credentials"),
        json!({"secret_env": "SWITCHYARD_TEST_PROBE_KEY_B"}),
    )
    .await;
    // A disabled credential is not tried.
    app.create(
        &format!("/api/v1/channels/{channel}/credentials"),
        json!({"secret": "sk-disabled-c", "enabled": false}),
    )
    .await;
    auto_disable(&pool, channel).await;
    let events_before = events(&app, channel).await.len();
    let revision = app.revision().await;

    let recovery = recovery_job(&app, None, config());
    let report = round(&app, &recovery).await;

    assert_eq!(report.probed, vec![channel]);
    assert_eq!(report.failed, vec![channel]);
    assert!(report.recovered.is_empty());
    assert_eq!(mock.hits_matching(&probes("sk-revoked-a")), 1);
    assert_eq!(mock.hits_matching(&probes("sk-revoked-b")), 1);
    assert_eq!(mock.hits_matching(&probes("sk-disabled-c")), 0);
    assert_eq!(status(&app, channel).await, "auto_disabled");
    assert_eq!(events(&app, channel).await.len(), events_before);
    assert_eq!(app.revision().await, revision);
}

#[sqlx::test(migrations = "../migrations")]
async fn a_hanging_upstream_fails_the_probe_within_its_budget(pool: PgPool) {
    let app = test_app(pool.clone());
    let mock = MockUpstream::start().await.unwrap();
    mock.on(Matcher::path("/v1/chat/completions"), Behavior::ok().hang());
    let channel = channel_at(&app, "stuck", &mock, &["sk-stuck-1", "sk-stuck-2"]).await;
    auto_disable(&pool, channel).await;
    let recovery = recovery_job(
        &app,
        None,
        RecoveryConfig {
            probe_timeout: Duration::from_millis(300),
            ..config()
        },
    );
    let started = tokio::time::Instant::now();
    let report = round(&app, &recovery).await;
    assert_eq!(report.failed, vec![channel]);
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(mock.hits(), 2);
    assert_eq!(status(&app, channel).await, "auto_disabled");
}

#[sqlx::test(migrations = "../migrations")]
async fn second_credential_passing_is_enough(pool: PgPool) {
    let app = test_app(pool.clone());
    let mock = MockUpstream::start().await.unwrap();
    mock.on(probes("sk-old-1"), Behavior::status(401));
    let channel = channel_at(&app, "rotated", &mock, &["sk-old-1", "sk-new-2"]).await;
    auto_disable(&pool, channel).await;
    let report = round(&app, &recovery_job(&app, None, config())).await;
    assert_eq!(report.recovered, vec![channel]);
    assert_eq!(mock.hits_matching(&probes("sk-old-1")), 1);
    assert_eq!(mock.hits_matching(&probes("sk-new-2")), 1);
    assert_eq!(status(&app, channel).await, "enabled");
}

#[sqlx::test(migrations = "../migrations")]
async fn probe_never_re_enables_a_manually_disabled_channel(pool: PgPool) {
    let url = redis_url();
    let prefix = unique_prefix("manual");
    let app = test_app(pool.clone());
    let mock = MockUpstream::start().await.unwrap();
    let channel = channel_at(&app, "paused", &mock, &["sk-fine-0001"]).await;
    let reply = app
        .patch(
            &format!("/api/v1/channels/{channel}"),
            json!({"status": "disabled"}),
        )
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    // Its breaker is open in the fleet too: still no probe, no status change.
    let proxy = proxy_store(&url, &prefix);
    trip(&proxy, channel);
    let live = LiveState::start_redis(&url, &prefix).unwrap();
    eventually("the control plane sees the breaker", || {
        breaker_open(live.store(), channel)
    })
    .await;
    let events_before = events(&app, channel).await.len();

    let recovery = recovery_job(&app, Some(live.clone()), config());
    let report = round(&app, &recovery).await;

    assert_eq!(report, RoundReport::default(), "{report:?}");
    assert_eq!(mock.hits(), 0);
    assert_eq!(status(&app, channel).await, "disabled");
    assert_eq!(events(&app, channel).await.len(), events_before);
    assert!(breaker_open(live.store(), channel));
    cleanup(&url, &prefix);
}

#[sqlx::test(migrations = "../migrations")]
async fn a_manual_disable_during_the_probe_wins(pool: PgPool) {
    let app = test_app(pool.clone());
    let mock = MockUpstream::start().await.unwrap();
    mock.on(
        Matcher::path("/v1/chat/completions"),
        Behavior::ok().latency(Duration::from_millis(500)),
    );
    let channel = channel_at(&app, "racing", &mock, &["sk-slow-0001"]).await;
    auto_disable(&pool, channel).await;
    let recovery = recovery_job(&app, None, config());
    app.refresh().await;
    let round = tokio::spawn({
        let recovery = Arc::clone(&recovery);
        async move { recovery.run_round().await.unwrap() }
    });
    eventually("the probe is in flight", || mock.hits() == 1).await;
    let reply = app
        .patch(
            &format!("/api/v1/channels/{channel}"),
            json!({"status": "disabled"}),
        )
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    round.await.unwrap();
    assert_eq!(status(&app, channel).await, "disabled");
}

#[sqlx::test(migrations = "../migrations")]
async fn probes_are_off_when_the_settings_say_so(pool: PgPool) {
    let app = test_app(pool.clone());
    let mock = MockUpstream::start().await.unwrap();
    let channel = channel_at(&app, "waiting", &mock, &["sk-fine-0002"]).await;
    auto_disable(&pool, channel).await;
    let recovery = recovery_job(&app, None, config());
    for (settings, why) in [
        (
            json!({"recovery_probe_enabled": false}),
            "recovery_probe_enabled is off",
        ),
        (
            json!({"recovery_probe_enabled": true, "recovery_probe_interval_seconds": 0}),
            "recovery_probe_interval_seconds is 0",
        ),
        (
            json!({"recovery_probe_interval_seconds": 600, "fault_protection_enabled": false}),
            "fault_protection_enabled is off",
        ),
    ] {
        let reply = app.patch("/api/v1/settings", settings).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        let report = round(&app, &recovery).await;
        assert_eq!(report.skipped, Some(why));
        assert!(report.probed.is_empty());
    }
    assert_eq!(mock.hits(), 0);
    assert_eq!(status(&app, channel).await, "auto_disabled");
    // Back on: the next round probes.
    app.patch(
        "/api/v1/settings",
        json!({"fault_protection_enabled": true}),
    )
    .await;
    let report = round(&app, &recovery).await;
    assert_eq!(report.recovered, vec![channel]);
}

/// A mock channel with one member, its options in `base_url`.
async fn mock_channel(app: &TestApp, name: &str, base_url: &str) -> i64 {
    let channel = app
        .create(
            "/api/v1/channels",
            json!({"name": name, "provider": "mock", "base_url": base_url}),
        )
        .await;
    let route = app.route(&probe_model(name)).await;
    app.member(
        route,
        json!({"channel_id": channel, "upstream_model": probe_model(name)}),
    )
    .await;
    channel
}

#[sqlx::test(migrations = "../migrations")]
async fn mock_channels_are_answered_by_the_simulation(pool: PgPool) {
    let app = test_app(pool.clone());
    let healthy = mock_channel(&app, "sim", "mock://").await;
    // The simulation fails every request of this one, as a proxy's `provider: mock` would.
    let failing = mock_channel(
        &app,
        "sim-down",
        "mock://sim?failure_rate=1&failure_status=503",
    )
    .await;
    auto_disable(&pool, healthy).await;
    auto_disable(&pool, failing).await;
    let report = round(&app, &recovery_job(&app, None, config())).await;
    assert_eq!(report.recovered, vec![healthy], "{report:?}");
    assert_eq!(report.failed, vec![failing], "{report:?}");
    assert_eq!(status(&app, healthy).await, "enabled");
    assert_eq!(status(&app, failing).await, "auto_disabled");
    let last = events(&app, healthy).await.last().unwrap().clone();
    assert_eq!(last["reason"], "recovery probe passed (mock channel)");
}

#[sqlx::test(migrations = "../migrations")]
async fn a_listing_upstream_that_cannot_generate_fails_its_probe(pool: PgPool) {
    // The flap the old `GET /v1/models` probe allowed: the model list answers, generation does
    // not. The channel stays auto_disabled.
    let app = test_app(pool.clone());
    let mock = MockUpstream::start().await.unwrap();
    mock.on(Matcher::path("/v1/models"), Behavior::ok());
    mock.on(Matcher::path("/v1/chat/completions"), Behavior::status(503));
    let channel = channel_at(&app, "lister", &mock, &["sk-list-0001"]).await;
    auto_disable(&pool, channel).await;
    let events_before = events(&app, channel).await.len();
    let revision = app.revision().await;

    let recovery = recovery_job(&app, None, config());
    let report = round(&app, &recovery).await;

    assert_eq!(report.probed, vec![channel]);
    assert_eq!(report.failed, vec![channel]);
    assert!(report.recovered.is_empty(), "{report:?}");
    assert_eq!(mock.hits_matching(&probes("sk-list-0001")), 1);
    assert_eq!(mock.hits_matching(&Matcher::path("/v1/models")), 0);
    assert_eq!(status(&app, channel).await, "auto_disabled");
    assert_eq!(events(&app, channel).await.len(), events_before);
    assert_eq!(app.revision().await, revision);
}

#[sqlx::test(migrations = "../migrations")]
async fn a_channel_without_an_enabled_member_is_not_probed(pool: PgPool) {
    let app = test_app(pool.clone());
    let mock = MockUpstream::start().await.unwrap();
    let orphan = app
        .create(
            "/api/v1/channels",
            json!({"name": "orphan", "provider": "openai", "base_url": mock.base_url()}),
        )
        .await;
    app.create(
        &format!("/api/v1/channels/{orphan}/credentials"),
        json!({"secret": "sk-orphan-0001"}),
    )
    .await;
    // Another channel whose only member is disabled: no model to ask for either.
    let idle = app
        .create(
            "/api/v1/channels",
            json!({"name": "idle", "provider": "openai", "base_url": mock.base_url()}),
        )
        .await;
    app.create(
        &format!("/api/v1/channels/{idle}/credentials"),
        json!({"secret": "sk-idle-0001"}),
    )
    .await;
    let route = app.route("idle-model").await;
    app.member(
        route,
        json!({"channel_id": idle, "upstream_model": "idle-model", "enabled": false}),
    )
    .await;
    auto_disable(&pool, orphan).await;
    auto_disable(&pool, idle).await;

    let report = round(&app, &recovery_job(&app, None, config())).await;
    assert_eq!(report.unprobed, vec![orphan, idle], "{report:?}");
    assert!(report.probed.is_empty(), "{report:?}");
    assert_eq!(mock.hits(), 0);
    assert_eq!(status(&app, orphan).await, "auto_disabled");
    assert_eq!(status(&app, idle).await, "auto_disabled");
}

#[sqlx::test(migrations = "../migrations")]
async fn anthropic_and_gemini_channels_are_probed_in_their_own_protocol(pool: PgPool) {
    let app = test_app(pool.clone());
    let mock = MockUpstream::start().await.unwrap();
    let anthropic = channel_of(&app, "claude", "anthropic", &mock, &["sk-ant-0001"]).await;
    let gemini = channel_of(&app, "gemini", "gemini", &mock, &["g-key-0001"]).await;
    auto_disable(&pool, anthropic).await;
    auto_disable(&pool, gemini).await;

    let report = round(&app, &recovery_job(&app, None, config())).await;
    assert_eq!(report.recovered, vec![anthropic, gemini], "{report:?}");
    let requests = mock.requests();
    assert_eq!(requests.len(), 2, "{requests:?}");
    let claude = &requests[0];
    assert_eq!(
        (claude.method.as_str(), claude.path.as_str()),
        ("POST", "/v1/messages")
    );
    assert_eq!(claude.credential.as_deref(), Some("sk-ant-0001"));
    assert_eq!(claude.headers["anthropic-version"], "2023-06-01");
    let body: Value = serde_json::from_slice(&claude.body).unwrap();
    assert_eq!(body["model"], probe_model("claude"));
    assert_eq!(body["max_tokens"], 1);
    let gem = &requests[1];
    assert_eq!(gem.method, "POST");
    assert_eq!(
        gem.path,
        format!("/v1beta/models/{}:generateContent", probe_model("gemini"))
    );
    assert_eq!(gem.credential.as_deref(), Some("g-key-0001"));
    assert!(gem.headers.contains_key("x-goog-api-key"));
    let body: Value = serde_json::from_slice(&gem.body).unwrap();
    assert_eq!(body["generationConfig"]["maxOutputTokens"], 1, "{body}");
    assert_eq!(body["contents"][0]["role"], "user", "{body}");
}

#[sqlx::test(migrations = "../migrations")]
async fn an_azure_channel_is_probed_at_its_deployment_with_its_api_key(pool: PgPool) {
    let app = test_app(pool.clone());
    let mock = MockUpstream::start().await.unwrap();
    let azure = channel_of(&app, "azure", "azure", &mock, &["azure-key-0001"]).await;
    auto_disable(&pool, azure).await;

    let report = round(&app, &recovery_job(&app, None, config())).await;
    assert_eq!(report.recovered, vec![azure], "{report:?}");
    let requests = mock.requests();
    assert_eq!(requests.len(), 1, "{requests:?}");
    let probe = &requests[0];
    assert_eq!(
        probe.path,
        format!(
            "/openai/deployments/{}/chat/completions",
            probe_model("azure")
        )
    );
    assert_eq!(probe.query_param("api-version"), Some("2024-10-21"));
    assert_eq!(probe.credential.as_deref(), Some("azure-key-0001"));
    assert_eq!(probe.headers["api-key"], "azure-key-0001");
    assert!(!probe.headers.contains_key("authorization"));
    let body: Value = serde_json::from_slice(&probe.body).unwrap();
    assert_eq!(body["max_completion_tokens"], 1, "{body}");
    assert_eq!(status(&app, azure).await, "enabled");
}

#[sqlx::test(migrations = "../migrations")]
async fn a_vertex_channel_is_probed_at_its_model_path_with_an_access_token(pool: PgPool) {
    let app = test_app(pool.clone());
    let mock = MockUpstream::start().await.unwrap();
    let vertex = channel_of(
        &app,
        "vertex",
        "vertex",
        &mock,
        &[&mock.vertex_service_account()],
    )
    .await;
    // A key the token endpoint refuses: the probe fails before any model request.
    let refused = channel_of(
        &app,
        "vertex-old-key",
        "vertex",
        &mock,
        &[&mock.vertex_unregistered_service_account()],
    )
    .await;
    auto_disable(&pool, vertex).await;
    auto_disable(&pool, refused).await;

    let report = round(&app, &recovery_job(&app, None, config())).await;
    assert_eq!(report.recovered, vec![vertex], "{report:?}");
    let requests = mock.requests();
    assert_eq!(requests.len(), 1, "{requests:?}");
    let probe = &requests[0];
    assert_eq!(
        probe.path,
        format!(
            "/v1/projects/{}/locations/us-central1/publishers/google/models/{}:generateContent",
            switchyard_mock_upstream::vertex::TEST_PROJECT,
            probe_model("vertex")
        )
    );
    assert!(probe
        .credential
        .as_deref()
        .is_some_and(|t| t.starts_with("ya29.mock-")));
    assert!(!probe.headers.contains_key("x-goog-api-key"));
    let body: Value = serde_json::from_slice(&probe.body).unwrap();
    assert_eq!(body["generationConfig"]["maxOutputTokens"], 1, "{body}");
    assert_eq!(
        (mock.vertex_token_exchanges(), mock.vertex_token_refusals()),
        (1, 1)
    );
    assert_eq!(status(&app, vertex).await, "enabled");
    assert_eq!(status(&app, refused).await, "auto_disabled");
}

#[sqlx::test(migrations = "../migrations")]
async fn a_bedrock_channel_is_probed_at_converse_with_a_sigv4_signature(pool: PgPool) {
    use switchyard_mock_upstream::bedrock;
    let app = test_app(pool.clone());
    let mock = MockUpstream::start().await.unwrap();
    let signed = channel_of(
        &app,
        "bedrock",
        "bedrock",
        &mock,
        &[&mock.bedrock_credential()],
    )
    .await;
    // A wrong secret: Bedrock refuses the signature (403), the probe fails.
    let refused = channel_of(
        &app,
        "bedrock-old-key",
        "bedrock",
        &mock,
        &[&mock.bedrock_wrong_secret_credential()],
    )
    .await;
    auto_disable(&pool, signed).await;
    auto_disable(&pool, refused).await;

    let report = round(&app, &recovery_job(&app, None, config())).await;
    assert_eq!(report.recovered, vec![signed], "{report:?}");
    let requests = mock.requests();
    assert_eq!(requests.len(), 2, "{requests:?}");
    for probe in &requests {
        assert!(
            [probe_model("bedrock"), probe_model("bedrock-old-key")]
                .iter()
                .any(|model| probe.path == format!("/model/{model}/converse")),
            "{}",
            probe.path
        );
        assert_eq!(
            probe.credential.as_deref(),
            Some(bedrock::TEST_ACCESS_KEY_ID)
        );
        let auth = probe.headers["authorization"].to_str().unwrap();
        assert!(auth.starts_with("AWS4-HMAC-SHA256 "), "{auth}");
        let body: Value = serde_json::from_slice(&probe.body).unwrap();
        assert_eq!(body["inferenceConfig"]["maxTokens"], 1, "{body}");
        assert_eq!(body["messages"][0]["content"][0]["text"], "ping", "{body}");
    }
    assert_eq!(status(&app, signed).await, "enabled");
    assert_eq!(status(&app, refused).await, "auto_disabled");
}

#[sqlx::test(migrations = "../migrations")]
async fn without_a_published_snapshot_nothing_is_probed(pool: PgPool) {
    let app = test_app(pool.clone());
    let mock = MockUpstream::start().await.unwrap();
    let channel = channel_at(&app, "early", &mock, &["sk-early-0001"]).await;
    auto_disable(&pool, channel).await;
    // Not wired to a publisher, then wired to one that has published nothing yet.
    let unwired = Recovery::new(pool.clone(), None, config());
    let report = unwired.run_round().await.unwrap();
    assert_eq!(report.skipped, Some("no snapshot published yet"));
    let recovery = recovery_job(&app, None, config());
    let report = recovery.run_round().await.unwrap();
    assert_eq!(report.skipped, Some("no snapshot published yet"));
    assert_eq!(recovery.rounds(), 0);
    assert_eq!(mock.hits(), 0);
    // Once published, the round probes.
    let report = round(&app, &recovery).await;
    assert_eq!(report.recovered, vec![channel]);
}

// ---------------------------------------------------------------------------------------------
// One leader

#[sqlx::test(migrations = "../migrations")]
async fn only_one_replica_probes_and_the_lead_moves_when_it_stops(pool: PgPool) {
    let app = test_app(pool.clone());
    let mock = MockUpstream::start().await.unwrap();
    mock.on(Matcher::path("/v1/chat/completions"), Behavior::status(503));
    let channel = channel_at(&app, "down", &mock, &["sk-down-0001"]).await;
    auto_disable(&pool, channel).await;
    app.patch(
        "/api/v1/settings",
        json!({"recovery_probe_interval_seconds": 1}),
    )
    .await;

    app.refresh().await;
    let options = (*pool.connect_options()).clone();
    let a = recovery_job(&app, None, config());
    let b = recovery_job(&app, None, config());
    let stop_a = CancellationToken::new();
    let stop_b = CancellationToken::new();
    let task_a = tokio::spawn(Arc::clone(&a).run(options.clone(), stop_a.clone()));
    let task_b = tokio::spawn(Arc::clone(&b).run(options.clone(), stop_b.clone()));

    eventually("someone leads", || a.is_leader() || b.is_leader()).await;
    eventually("the leader runs two rounds", || {
        (a.is_leader() && a.rounds() >= 2) || (b.is_leader() && b.rounds() >= 2)
    })
    .await;
    assert!(a.is_leader() != b.is_leader(), "exactly one leader");
    let (leader, follower, stop_leader, task_leader, stop_follower, task_follower) =
        if a.is_leader() {
            (&a, &b, stop_a, task_a, stop_b, task_b)
        } else {
            (&b, &a, stop_b, task_b, stop_a, task_a)
        };
    assert!(
        leader.rounds() >= 2,
        "leader ran {} rounds",
        leader.rounds()
    );
    assert_eq!(follower.rounds(), 0);
    // Every probe came from the leader's rounds (one credential each), none from the follower.
    let probes = mock.hits_matching(&probes("sk-down-0001")) as u64;
    assert!(
        probes == leader.rounds() || probes + 1 == leader.rounds(),
        "{probes} probes, {} rounds",
        leader.rounds()
    );

    // The leader stops: its lock connection closes and the other replica takes over.
    stop_leader.cancel();
    task_leader.await.unwrap();
    eventually("the lead moves", || follower.is_leader()).await;
    eventually("the new leader probes", || follower.rounds() >= 1).await;
    assert_eq!(status(&app, channel).await, "auto_disabled");
    stop_follower.cancel();
    task_follower.await.unwrap();
}

// ---------------------------------------------------------------------------------------------
// Breakers in the shared state

#[sqlx::test(migrations = "../migrations")]
async fn open_breaker_is_recorded_then_a_passing_probe_re_enables_and_clears_it(pool: PgPool) {
    let url = redis_url();
    let prefix = unique_prefix("breaker");
    let app = test_app(pool.clone());
    let mock = MockUpstream::start().await.unwrap();
    mock.on(
        Matcher::path("/v1/chat/completions"),
        Behavior::status(503).times(1),
    );
    let channel = channel_at(&app, "flaky", &mock, &["sk-flaky-0001"]).await;
    let route = app.route("gpt-4o").await;
    let member = app
        .member(
            route,
            json!({"channel_id": channel, "upstream_model": "gpt-4o"}),
        )
        .await;

    // A proxy sees the channel fail five times (breaker) and cools its member.
    let proxy = proxy_store(&url, &prefix);
    proxy.record_failure(
        &AttemptFailure {
            member,
            channel,
            upstream_model: "gpt-4o",
            kind: FailureKind::Retryable,
            retry_after_ms: None,
        },
        &POLICY,
        now_ms(),
    );
    trip(&proxy, channel);
    assert!(proxy.wait_flushed(PATIENCE).await);

    let live = LiveState::start_redis(&url, &prefix).unwrap();
    eventually("the control plane sees the breaker", || {
        breaker_open(live.store(), channel)
    })
    .await;
    let recovery = recovery_job(&app, Some(live.clone()), config());

    // First round: recorded as auto_disabled; the probe fails (503), nothing else changes.
    let report = round(&app, &recovery).await;
    assert_eq!(report.breakers_recorded, vec![channel]);
    assert_eq!(report.failed, vec![channel]);
    assert_eq!(status(&app, channel).await, "auto_disabled");
    let events_now = events(&app, channel).await;
    let last = events_now.last().unwrap();
    assert_eq!(last["from_status"], "enabled");
    assert_eq!(last["to_status"], "auto_disabled");
    assert_eq!(last["actor"], "system:breaker");
    assert_eq!(
        last["reason"], "breaker tripped (5 consecutive failed attempts)",
        "{last}"
    );
    assert!(breaker_open(live.store(), channel));

    // Recorded once, not on every round.
    let report = round(&app, &recovery).await;
    assert!(report.breakers_recorded.is_empty());
    assert_eq!(report.recovered, vec![channel]);
    assert_eq!(status(&app, channel).await, "enabled");
    let last = events(&app, channel).await.last().unwrap().clone();
    assert_eq!(last["to_status"], "enabled");
    assert_eq!(last["actor"], "system:recovery-probe");
    // One notification event each: the auto-disable and the recovery.
    let notified: Vec<(String, i64)> = sqlx::query_as(
        "SELECT event, (payload->>'channel_id')::bigint FROM notification_events ORDER BY id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        notified,
        [
            ("channel_auto_disabled".to_owned(), channel),
            ("channel_recovered".to_owned(), channel)
        ]
    );

    // The breaker and the member's cooldown are gone fleet-wide: the proxy's view, and a fresh
    // store that knows only what Redis holds.
    eventually("the proxy sees the breaker closed", || {
        !breaker_open(&proxy, channel)
    })
    .await;
    eventually("the proxy sees the cooldown cleared", || {
        proxy
            .dump(now_ms())
            .cooldowns
            .iter()
            .all(|c| c.member_id != member)
    })
    .await;
    let fresh = proxy_store(&url, &prefix);
    assert!(fresh.wait_resynced(1, PATIENCE).await);
    let dump = fresh.dump(now_ms());
    assert!(!dump.channels.iter().any(|c| c.breaker_open), "{dump:?}");
    assert!(dump.cooldowns.is_empty(), "{dump:?}");
    // Nothing to record or probe any more.
    let report = round(&app, &recovery).await;
    assert_eq!(report, RoundReport::default());
    live.close(Duration::from_secs(2)).await;
    cleanup(&url, &prefix);
}

/// A member id no test route has: its cooldown only orders notifications.
const BARRIER_MEMBER: i64 = 9_999_999;

fn credential_disabled(store: &dyn StateStore, credential: i64) -> bool {
    store
        .dump(now_ms())
        .credentials_disabled
        .iter()
        .any(|c| c.credential_id == credential)
}

#[sqlx::test(migrations = "../migrations")]
async fn a_runtime_disabled_credential_is_re_enabled_only_by_a_passing_probe(pool: PgPool) {
    let url = redis_url();
    let prefix = unique_prefix("credential");
    let app = test_app(pool.clone());
    let mock = MockUpstream::start().await.unwrap();
    // The quota is still exhausted at the first probe, restored by the second.
    mock.on(probes("sk-quota-a"), Behavior::status(429).times(1));
    let channel = channel_at(&app, "multi-key", &mock, &[]).await;
    let credentials = format!("/api/v1/channels/{channel}/credentials");
    let quota = app
        .create(&credentials, json!({ "secret": "sk-quota-a" }))
        .await;
    app.create(&credentials, json!({ "secret": "sk-fine-b" }))
        .await;
    // A manually disabled channel's runtime-disabled credential is left alone.
    let paused = channel_at(&app, "paused", &mock, &[]).await;
    let paused_key = app
        .create(
            &format!("/api/v1/channels/{paused}/credentials"),
            json!({ "secret": "sk-paused-c" }),
        )
        .await;
    let reply = app
        .patch(
            &format!("/api/v1/channels/{paused}"),
            json!({"status": "disabled"}),
        )
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text);

    // A proxy hit the keyword rule on a multi-key channel: only that credential is disabled.
    let proxy = proxy_store(&url, &prefix);
    proxy.disable_credential(quota, "insufficient_quota", now_ms());
    proxy.disable_credential(paused_key, "invalid_api_key", now_ms());
    assert!(proxy.wait_flushed(PATIENCE).await);
    let live = LiveState::start_redis(&url, &prefix).unwrap();
    eventually("the control plane sees the disabled credentials", || {
        credential_disabled(live.store(), quota) && credential_disabled(live.store(), paused_key)
    })
    .await;
    let recovery = recovery_job(&app, Some(live.clone()), config());
    let events_before = events(&app, channel).await.len();
    let revision = app.revision().await;

    // First round: the probe of that credential fails (429); it stays disabled. The channel
    // itself is enabled with a closed breaker: not probed.
    let report = round(&app, &recovery).await;
    assert_eq!(report.credentials_probed, vec![quota], "{report:?}");
    assert_eq!(report.credentials_failed, vec![quota]);
    assert!(report.credentials_recovered.is_empty());
    assert!(report.probed.is_empty(), "{report:?}");
    assert!(credential_disabled(live.store(), quota));
    // A barrier instead of a pause: an update the control plane's store publishes after the
    // round reaches the proxy after anything the round published, so once it is there, a lifted
    // disable would be too.
    live.store()
        .extend_cooldown(BARRIER_MEMBER, now_ms() + 60_000);
    eventually("the barrier reaches the proxy", || {
        proxy
            .dump(now_ms())
            .cooldowns
            .iter()
            .any(|c| c.member_id == BARRIER_MEMBER)
    })
    .await;
    assert!(credential_disabled(&proxy, quota));
    assert_eq!(mock.hits_matching(&probes("sk-quota-a")), 1);
    assert_eq!(mock.hits_matching(&probes("sk-fine-b")), 0);
    assert_eq!(mock.hits_matching(&probes("sk-paused-c")), 0);

    // Second round: it passes; the disable is lifted fleet-wide, the other one stays.
    let report = round(&app, &recovery).await;
    assert_eq!(report.credentials_probed, vec![quota], "{report:?}");
    assert_eq!(report.credentials_recovered, vec![quota]);
    assert!(report.credentials_failed.is_empty());
    assert!(!credential_disabled(live.store(), quota));
    eventually("the proxy sees the credential re-enabled", || {
        !credential_disabled(&proxy, quota)
    })
    .await;
    assert!(credential_disabled(&proxy, paused_key));
    let fresh = proxy_store(&url, &prefix);
    assert!(fresh.wait_resynced(1, PATIENCE).await);
    assert!(!credential_disabled(&fresh, quota));
    assert!(credential_disabled(&fresh, paused_key));
    assert_eq!(mock.hits_matching(&probes("sk-quota-a")), 2);
    assert_eq!(mock.hits_matching(&probes("sk-fine-b")), 0);
    assert_eq!(mock.hits_matching(&probes("sk-paused-c")), 0);
    // Runtime state only: the channel's status, events and the snapshot revision are untouched.
    assert_eq!(status(&app, channel).await, "enabled");
    assert_eq!(events(&app, channel).await.len(), events_before);
    assert_eq!(app.revision().await, revision);

    // Nothing left to probe.
    let report = round(&app, &recovery).await;
    assert_eq!(report, RoundReport::default(), "{report:?}");
    live.close(Duration::from_secs(2)).await;
    cleanup(&url, &prefix);
}

#[sqlx::test(migrations = "../migrations")]
async fn an_operator_enabling_an_auto_disabled_channel_closes_its_breaker(pool: PgPool) {
    let url = redis_url();
    let prefix = unique_prefix("override");
    let live = LiveState::start_redis(&url, &prefix).unwrap();
    let app = test_app_with_live(pool.clone(), live.clone());
    let mock = MockUpstream::start().await.unwrap();
    mock.on(Matcher::path("/v1/chat/completions"), Behavior::status(503));
    let channel = channel_at(&app, "trusted", &mock, &["sk-trusted-0001"]).await;
    let proxy = proxy_store(&url, &prefix);
    trip(&proxy, channel);
    eventually("the control plane sees the breaker", || {
        breaker_open(live.store(), channel)
    })
    .await;
    let recovery = recovery_job(&app, Some(live.clone()), config());
    let report = round(&app, &recovery).await;
    assert_eq!(report.breakers_recorded, vec![channel]);

    let reply = app
        .patch(
            &format!("/api/v1/channels/{channel}"),
            json!({"status": "enabled"}),
        )
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    eventually("the proxy sees the breaker closed", || {
        !breaker_open(&proxy, channel)
    })
    .await;
    // Not recorded again: the operator's word stands until the breaker trips anew.
    let report = round(&app, &recovery).await;
    assert!(report.breakers_recorded.is_empty(), "{report:?}");
    assert_eq!(status(&app, channel).await, "enabled");
    live.close(Duration::from_secs(2)).await;
    cleanup(&url, &prefix);
}

// ---------------------------------------------------------------------------------------------
// Explain and /api/v1/state with the Redis view

#[sqlx::test(migrations = "../migrations")]
async fn explain_with_a_redis_view_shows_cooling_down_and_changes_nothing(pool: PgPool) {
    let url = redis_url();
    let prefix = unique_prefix("explain");
    let live = LiveState::start_redis(&url, &prefix).unwrap();
    let app = test_app_with_live(pool.clone(), live.clone());
    let mock = MockUpstream::start().await.unwrap();
    let channel = channel_at(&app, "main", &mock, &["sk-explain-0001"]).await;
    let route = app.route("gpt-4o").await;
    let cooled = app
        .member(
            route,
            json!({"channel_id": channel, "upstream_model": "gpt-4o", "priority": 10}),
        )
        .await;
    let other = app
        .member(
            route,
            json!({"channel_id": channel, "upstream_model": "gpt-4o-mini", "priority": 10}),
        )
        .await;

    let proxy = proxy_store(&url, &prefix);
    proxy.record_failure(
        &AttemptFailure {
            member: cooled,
            channel,
            upstream_model: "gpt-4o",
            kind: FailureKind::Retryable,
            retry_after_ms: None,
        },
        &POLICY,
        now_ms(),
    );
    assert!(proxy.wait_flushed(PATIENCE).await);
    eventually("the control plane sees the cooldown", || {
        live.store()
            .dump(now_ms())
            .cooldowns
            .iter()
            .any(|c| c.member_id == cooled)
    })
    .await;

    app.refresh().await;
    let redis_before = redis_state(&url, &prefix);
    assert!(
        redis_before
            .iter()
            .any(|(key, fields)| key.ends_with(":member") && !fields.is_empty()),
        "the cooled member is in Redis: {redis_before:?}"
    );
    let revision = app.revision().await;
    let audits = app.audit_rows().await;
    let dump_before = live.store().dump(now_ms()).cooldowns;

    let reply = app
        .get("/api/v1/routes/explain?model=gpt-4o&session=abc&seed=7")
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.body["health_view"], "redis");
    let candidates = reply.body["candidates"].as_array().unwrap();
    let find = |id: i64| candidates.iter().find(|c| c["member_id"] == id).unwrap();
    assert_eq!(find(cooled)["eligible"], false);
    assert!(
        find(cooled)["reasons"]
            .as_array()
            .unwrap()
            .contains(&json!("cooling_down")),
        "{}",
        find(cooled)
    );
    assert_eq!(find(other)["eligible"], true);
    assert_eq!(reply.body["member_id"], other, "{}", reply.body);
    assert!(!reply.text.contains("sk-explain-0001"));

    // Explain changed nothing: not Redis, not Postgres, not the view.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(redis_state(&url, &prefix), redis_before);
    assert_eq!(app.revision().await, revision);
    assert_eq!(app.audit_rows().await, audits);
    assert_eq!(live.store().dump(now_ms()).cooldowns, dump_before);
    assert_eq!(mock.hits(), 0);
    live.close(Duration::from_secs(2)).await;
    cleanup(&url, &prefix);
}

#[sqlx::test(migrations = "../migrations")]
async fn state_endpoint_shows_the_fleet_dump_and_never_a_secret(pool: PgPool) {
    let url = redis_url();
    let prefix = unique_prefix("state");
    let live = LiveState::start_redis(&url, &prefix).unwrap();
    let app = test_app_with_live(pool.clone(), live.clone());
    let mock = MockUpstream::start().await.unwrap();
    let channel = channel_at(&app, "busy", &mock, &["sk-state-secret-0001"]).await;
    let route = app.route("gpt-4o").await;
    let member = app
        .member(
            route,
            json!({"channel_id": channel, "upstream_model": "gpt-4o"}),
        )
        .await;

    let proxy = Arc::new(proxy_store(&url, &prefix));
    let now = now_ms();
    proxy.record_success(
        &AttemptSuccess {
            member,
            channel,
            upstream_model: "gpt-4o",
            latency_ms: 120.0,
            canary: false,
            promote_after: 100,
        },
        now,
    );
    proxy.record_failure(
        &AttemptFailure {
            member,
            channel,
            upstream_model: "gpt-4o",
            kind: FailureKind::Retryable,
            retry_after_ms: None,
        },
        &POLICY,
        now,
    );
    trip(proxy.as_ref(), channel);
    proxy.bind_sticky(route, "session-1", member, 60_000, now);
    let store: Arc<dyn StateStore> = proxy.clone();
    let _in_flight = switchyard_state::InFlightGuard::acquire(&store, channel);
    assert!(proxy.wait_flushed(PATIENCE).await);

    let deadline = tokio::time::Instant::now() + PATIENCE;
    let body = loop {
        let reply = app.get("/api/v1/state").await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        assert!(!reply.text.contains("sk-state-secret"));
        let body = reply.body;
        let complete = body["in_flight"].as_array().is_some_and(|a| {
            a.iter()
                .any(|e| e["channel_id"] == channel && e["in_flight"] == 1)
        }) && body["sticky_bindings"] == 1
            && body["breakers"].as_array().is_some_and(|a| !a.is_empty());
        if complete || tokio::time::Instant::now() > deadline {
            break body;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(body["configured"], true, "{body}");
    assert_eq!(body["source"], "redis");
    assert_eq!(body["connected"], true);
    assert!(
        body["cooldowns"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["member_id"] == member),
        "{body}"
    );
    let breaker = &body["breakers"][0];
    assert_eq!(breaker["channel_id"], channel, "{body}");
    assert_eq!(breaker["breaker_open"], true);
    assert_eq!(breaker["consecutive_failures"], 5);
    assert!(
        body["in_flight"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["channel_id"] == channel && e["in_flight"] == 1),
        "{body}"
    );
    let health = body["health"].as_array().unwrap();
    assert!(
        health
            .iter()
            .any(|h| h["channel_id"] == channel && h["upstream_model"] == "gpt-4o"),
        "{body}"
    );
    assert_eq!(body["sticky_bindings"], 1);
    // Sessions are counted, never listed.
    assert!(!body.to_string().contains("session-1"));
    live.close(Duration::from_secs(2)).await;
    cleanup(&url, &prefix);
}

#[sqlx::test(migrations = "../migrations")]
async fn without_redis_state_is_unconfigured_and_explain_has_no_view(pool: PgPool) {
    let app = test_app(pool);
    let reply = app.get("/api/v1/state").await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.body["configured"], false);
    let channel = app.channel("c").await;
    app.create(
        &format!("/api/v1/channels/{channel}/credentials"),
        json!({"secret": "sk-x-0123456789"}),
    )
    .await;
    let route = app.route("m").await;
    app.member(route, json!({"channel_id": channel, "upstream_model": "m"}))
        .await;
    app.refresh().await;
    let reply = app.get("/api/v1/routes/explain?model=m").await;
    assert_eq!(reply.body["health_view"], "none");
}

// ---------------------------------------------------------------------------------------------
// Recovering (slow start)

#[sqlx::test(migrations = "../migrations")]
async fn a_passing_probe_starts_a_fleet_wide_ramp_that_explain_and_state_show(pool: PgPool) {
    let url = redis_url();
    let prefix = unique_prefix("ramp");
    let live = LiveState::start_redis(&url, &prefix).unwrap();
    let app = test_app_with_live(pool.clone(), live.clone());
    let mock = MockUpstream::start().await.unwrap();
    let healed = channel_at(&app, "healed", &mock, &["sk-ramp-0001"]).await;
    let steady = channel_at(&app, "steady", &mock, &["sk-ramp-0002"]).await;
    // One route over both, equal priority and weight: without slow start each takes half.
    let route = app.route("gpt-4o").await;
    let healed_member = app
        .member(
            route,
            json!({"channel_id": healed, "upstream_model": "gpt-4o"}),
        )
        .await;
    let steady_member = app
        .member(
            route,
            json!({"channel_id": steady, "upstream_model": "gpt-4o"}),
        )
        .await;
    app.patch(
        "/api/v1/settings",
        json!({"slow_start_seconds": 120, "slow_start_initial_percent": 20}),
    )
    .await;

    let proxy = proxy_store(&url, &prefix);
    trip(&proxy, healed);
    assert!(proxy.wait_flushed(PATIENCE).await);
    eventually("the control plane sees the breaker", || {
        breaker_open(live.store(), healed)
    })
    .await;
    let recovery = recovery_job(&app, Some(live.clone()), config());
    let before = now_ms();
    let report = round(&app, &recovery).await;
    assert_eq!(report.breakers_recorded, vec![healed]);
    assert_eq!(report.recovered, vec![healed]);
    assert_eq!(status(&app, healed).await, "enabled");

    // The proxy (another process in a fleet) sees the window: 120 s from the probe.
    eventually("the proxy sees the recovering window", || {
        let mut window = None;
        proxy.with_view(&mut |v| window = v.recovering(healed));
        window.is_some_and(|w| w.since >= before && w.until - w.since == 120_000)
    })
    .await;
    assert!(!breaker_open(&proxy, healed));

    // Explain: the healed member's weight is ramped (0.2 at first), its score is not.
    app.refresh().await;
    let reply = app.get("/api/v1/routes/explain?model=gpt-4o&seed=1").await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let candidates = reply.body["candidates"].as_array().unwrap();
    let find = |id: i64| candidates.iter().find(|c| c["member_id"] == id).unwrap();
    let (h, s) = (find(healed_member), find(steady_member));
    assert_eq!(h["recovering"], true, "{h}");
    assert_eq!(s["recovering"], false, "{s}");
    let ramp = h["ramp_factor"].as_f64().unwrap();
    assert!((0.2..0.3).contains(&ramp), "{h}");
    assert_eq!(s["ramp_factor"], 1.0);
    assert_eq!(h["score"], s["score"]);
    let p = h["probability"].as_f64().unwrap();
    assert!((p - ramp / (ramp + 1.0)).abs() < 0.01, "{h}");
    assert!(p < 0.3, "well below its full share of one half: {h}");

    // The state endpoint: the ramp with its factor and time left.
    let state = app.get("/api/v1/state").await;
    let recovering = state.body["recovering"].as_array().unwrap();
    assert_eq!(recovering.len(), 1, "{}", state.text);
    let entry = &recovering[0];
    assert_eq!(entry["channel_id"], healed);
    assert!(
        (0.2..0.3).contains(&entry["ramp_factor"].as_f64().unwrap()),
        "{entry}"
    );
    let left = entry["seconds_left"].as_u64().unwrap();
    assert!(left > 60 && left <= 120, "{entry}");
    // Both answers match their OpenAPI schemas (which deny unknown fields).
    use switchyard_control_plane::api::schema::{ExplainResponse, SharedStateResponse};
    let explained: ExplainResponse = serde_json::from_value(reply.body.clone()).unwrap();
    assert!(explained.candidates.iter().any(|c| c.recovering));
    let parsed: SharedStateResponse = serde_json::from_value(state.body.clone()).unwrap();
    assert_eq!(parsed.recovering.map(|r| r.len()), Some(1));

    // The re-enable's audit row records the window; its status event is the usual one.
    let last = events(&app, healed).await.last().unwrap().clone();
    assert_eq!(
        (last["from_status"].as_str(), last["to_status"].as_str()),
        (Some("auto_disabled"), Some("enabled"))
    );
    let audit = app
        .get(&format!(
            "/api/v1/audit?resource=channel&resource_id={healed}"
        ))
        .await;
    let last_audit = audit.body["data"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(
        last_audit["detail"]["recovering"]["slow_start_seconds"], 120,
        "{last_audit}"
    );

    // A failed channel attempt on the proxy re-trips at once; the next round records it.
    assert!(
        proxy
            .record_channel_failure(healed, &POLICY, now_ms())
            .tripped
    );
    assert!(proxy.wait_flushed(PATIENCE).await);
    eventually("the control plane sees the re-trip", || {
        breaker_open(live.store(), healed)
    })
    .await;
    mock.on(Matcher::path("/v1/chat/completions"), Behavior::status(503));
    let report = round(&app, &recovery).await;
    assert_eq!(report.breakers_recorded, vec![healed]);
    assert_eq!(report.failed, vec![healed]);
    let last = events(&app, healed).await.last().unwrap().clone();
    assert_eq!(last["to_status"], "auto_disabled");
    assert_eq!(
        last["reason"], "breaker tripped (failed while recovering (slow start))",
        "{last}"
    );
    let state = app.get("/api/v1/state").await;
    assert_eq!(state.body["recovering"], json!([]), "{}", state.text);
    live.close(Duration::from_secs(2)).await;
    cleanup(&url, &prefix);
}

#[sqlx::test(migrations = "../migrations")]
async fn without_slow_start_a_passing_probe_gives_full_weight_at_once(pool: PgPool) {
    let url = redis_url();
    let prefix = unique_prefix("noramp");
    let live = LiveState::start_redis(&url, &prefix).unwrap();
    let app = test_app_with_live(pool.clone(), live.clone());
    let mock = MockUpstream::start().await.unwrap();
    let channel = channel_at(&app, "healed", &mock, &["sk-noramp-0001"]).await;
    app.patch("/api/v1/settings", json!({"slow_start_seconds": 0}))
        .await;
    auto_disable(&pool, channel).await;
    let recovery = recovery_job(&app, Some(live.clone()), config());
    let report = round(&app, &recovery).await;
    assert_eq!(report.recovered, vec![channel]);
    let mut window = Some(switchyard_engine::Recovering { since: 0, until: 1 });
    live.store()
        .with_view(&mut |v| window = v.recovering(channel));
    assert_eq!(window, None);
    live.close(Duration::from_secs(2)).await;
    cleanup(&url, &prefix);
}
