//! `POST /api/v1/members/{id}/trial`: a real call through one member, made by the control plane;
//! a failure lands in the fleet's shared state (real Redis) as a proxy's failed attempt would.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use axum::http::StatusCode;
use common::test_app_with_live;
use serde_json::json;
use sqlx::PgPool;
use switchyard_control_plane::live::LiveState;

#[sqlx::test(migrations = "../migrations")]
async fn a_failing_trial_cools_the_member_and_a_passing_one_changes_nothing(pool: PgPool) {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let prefix = format!("trial-{}-{nanos:x}", std::process::id());
    let live = LiveState::start_redis(&url, &prefix).unwrap();
    assert!(live.wait_synced(std::time::Duration::from_secs(10)).await);
    let app = test_app_with_live(pool, live.clone());
    let mut channels = Vec::new();
    for (name, base_url) in [
        ("ok", "mock://sim?latency_ms=0&failure_rate=0"),
        (
            "bad",
            "mock://sim?latency_ms=0&failure_rate=1&failure_status=503",
        ),
    ] {
        channels.push(
            app.create(
                "/api/v1/channels",
                json!({"name": name, "provider": "mock", "base_url": base_url}),
            )
            .await,
        );
    }
    let route = app.route("m").await;
    let ok = app
        .member(
            route,
            json!({"channel_id": channels[0], "upstream_model": "a"}),
        )
        .await;
    let bad = app
        .member(
            route,
            json!({"channel_id": channels[1], "upstream_model": "b"}),
        )
        .await;
    app.refresh().await;

    let reply = app
        .post(&format!("/api/v1/members/{ok}/trial"), json!({}))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.body["passed"], true, "{}", reply.body);
    assert_eq!(reply.body["status"], 200);
    assert_eq!(reply.body["recorded"], false);

    let reply = app
        .post(&format!("/api/v1/members/{bad}/trial"), json!({}))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.body["passed"], false, "{}", reply.body);
    assert_eq!(reply.body["status"], 503);
    assert_eq!(reply.body["failure"], "status");
    assert_eq!(reply.body["recorded"], true);
    assert!(
        reply.body["cooled_until"].as_u64().is_some(),
        "{}",
        reply.body
    );
    // A 503 counts toward the channel's breaker, once, as a proxy's failed attempt does.
    assert_eq!(reply.body["channel_failures"], 1, "{}", reply.body);
    assert_eq!(reply.body["breaker_tripped"], false);

    let state = app.get("/api/v1/state").await;
    let cooling: Vec<i64> = state.body["cooldowns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["member_id"].as_i64().unwrap())
        .collect();
    assert_eq!(cooling, vec![bad], "{}", state.body);

    let reply = app.post("/api/v1/members/999999/trial", json!({})).await;
    assert_eq!(reply.status, StatusCode::NOT_FOUND);
}

/// A TLS upstream (HTTP/2 by ALPN) whose certificate the operator trusts with
/// `SWITCHYARD_UPSTREAM_CA`: trial calls reach it; without the extra root they fail as a
/// transport failure and the upstream sees nothing.
#[sqlx::test(migrations = "../migrations")]
async fn a_trial_reaches_a_tls_upstream_through_the_operators_ca(pool: PgPool) {
    use switchyard_mock_upstream::{MockOptions, MockUpstream};
    let mock = MockUpstream::start_with(MockOptions {
        tls: true,
        ..MockOptions::default()
    })
    .await
    .unwrap();
    let dir = std::env::temp_dir().join(format!("switchyard-cp-{}-trial-tls", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ca = dir.join("ca.pem");
    std::fs::write(&ca, mock.certificate_pem().unwrap()).unwrap();
    let mut upstream = switchyard_upstream::ClientOptions::new(std::time::Duration::from_secs(5));
    upstream.extra_roots = switchyard_upstream::read_roots(&ca).unwrap();
    for (trusted, app) in [
        (true, common::test_app_with_upstream(pool.clone(), upstream)),
        (false, common::test_app(pool.clone())),
    ] {
        mock.reset();
        let name = format!("tls-{trusted}");
        let channel = app
            .create(
                "/api/v1/channels",
                json!({"name": name, "provider": "openai", "base_url": format!("{}/v1", mock.base_url())}),
            )
            .await;
        app.create(
            &format!("/api/v1/channels/{channel}/credentials"),
            json!({"secret": "sk-tls"}),
        )
        .await;
        let route = app.route(&format!("m-{trusted}")).await;
        let member = app
            .member(
                route,
                json!({"channel_id": channel, "upstream_model": "gpt-4o-mini"}),
            )
            .await;
        app.refresh().await;
        let reply = app
            .post(&format!("/api/v1/members/{member}/trial"), json!({}))
            .await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
        assert_eq!(reply.body["passed"], trusted, "{}", reply.body);
        let versions: Vec<_> = mock.requests().iter().map(|r| r.version).collect();
        if trusted {
            assert_eq!(
                versions,
                vec![axum::http::Version::HTTP_2],
                "{}",
                reply.body
            );
        } else {
            assert_eq!(reply.body["failure"], "transport", "{}", reply.body);
            assert_eq!(reply.body["cause"], "tls", "{}", reply.body);
            assert!(versions.is_empty());
        }
    }
}

/// A trial call that fails in transport names the cause: a port nothing listens on is
/// `refused`, a host name that cannot resolve (`.invalid` never does) is `dns`; any other
/// failure has no cause.
#[sqlx::test(migrations = "../migrations")]
async fn a_trial_failing_in_transport_names_its_cause(pool: PgPool) {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let app = common::test_app(pool);
    let mut members = Vec::new();
    for (name, base_url) in [
        ("closed", format!("http://127.0.0.1:{port}/v1")),
        (
            "nowhere",
            "http://upstream.switchyard.invalid/v1".to_owned(),
        ),
    ] {
        let channel = app
            .create(
                "/api/v1/channels",
                json!({"name": name, "provider": "openai", "base_url": base_url}),
            )
            .await;
        app.create(
            &format!("/api/v1/channels/{channel}/credentials"),
            json!({"secret": "sk-cause"}),
        )
        .await;
        let route = app.route(&format!("m-{name}")).await;
        members.push(
            app.member(
                route,
                json!({"channel_id": channel, "upstream_model": "gpt-4o-mini"}),
            )
            .await,
        );
    }
    app.refresh().await;
    for (member, cause) in members.into_iter().zip(["refused", "dns"]) {
        let reply = app
            .post(&format!("/api/v1/members/{member}/trial"), json!({}))
            .await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
        assert_eq!(reply.body["passed"], false, "{}", reply.body);
        assert_eq!(reply.body["failure"], "transport", "{}", reply.body);
        assert_eq!(reply.body["cause"], cause, "{}", reply.body);
        assert!(!reply.text.contains("sk-cause"), "{}", reply.text);
    }
}
