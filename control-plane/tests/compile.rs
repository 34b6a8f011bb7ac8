//! The snapshot compiler: what the admin API wrote is exactly what proxies receive.
// Helpers outside #[test] fns are test code too: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::test_app;
use serde_json::json;
use sqlx::PgPool;
use switchyard_engine::{ChannelStatus, Provider, RoutingMode, SecretSource};

#[sqlx::test(migrations = "../migrations")]
async fn every_table_reaches_the_snapshot(pool: PgPool) {
    let app = test_app(pool);
    let channel = app
        .create(
            "/api/v1/channels",
            json!({"name": "anthropic-main", "provider": "anthropic", "base_url": "https://a.test",
                   "status": "disabled", "auto_ban": true, "max_concurrency": 4,
                   "capabilities": {"vision": false}, "retry_status_codes": [409],
                   "retry_error_patterns": ["overloaded"], "headers": {"anthropic-version": "2023-06-01"}}),
        )
        .await;
    let inline = app
        .create(
            &format!("/api/v1/channels/{channel}/credentials"),
            json!({"secret": "sk-ant-secret-value"}),
        )
        .await;
    let env = app
        .create(
            &format!("/api/v1/channels/{channel}/credentials"),
            json!({"secret_env": "ANTHROPIC_KEY", "enabled": false}),
        )
        .await;
    let route = app
        .create(
            "/api/v1/routes",
            json!({"model_pattern": "claude-*", "routing_mode": "adaptive", "sticky_session": true,
                   "stable_first": false, "stable_first_denominator": 10, "retry_times": 4,
                   "channel_retry_times": 2, "cooldown_seconds": 5}),
        )
        .await;
    let member = app
        .member(route, json!({"channel_id": channel, "upstream_model": "claude-3-5", "group_name": "batch",
                              "priority": 7, "weight": 9, "canary": true, "capabilities": {"max_context": 200000}}))
        .await;
    let team = app
        .create("/api/v1/teams", json!({"name": "t", "models": ["claude-*"], "members": [member],
                                       "plan": {member.to_string(): {"priority": 1}}, "retry_limit": 0,
                                       "disable_failover": true}))
        .await;
    let token = app
        .post(
            "/api/v1/tokens",
            json!({"name": "k", "team_id": team, "allow_pinning": true}),
        )
        .await;
    let plaintext = token.body["token"].as_str().unwrap().to_owned();
    app.patch(
        "/api/v1/settings",
        json!({"latency_aware_enabled": true, "sticky_ttl_minutes": 60}),
    )
    .await;

    let revision = app.refresh().await;
    assert_eq!(revision as i64, app.revision().await);
    let published = app.publisher.current().unwrap();
    let s = &published.snapshot;

    let ch = s.channel(channel).unwrap();
    assert_eq!(
        (ch.provider, ch.status, ch.auto_ban, ch.max_concurrency),
        (Provider::Anthropic, ChannelStatus::Disabled, true, Some(4))
    );
    assert_eq!(ch.capabilities.vision, Some(false));
    assert_eq!(ch.retry_status_codes, vec![409]);
    assert_eq!(
        ch.headers,
        vec![("anthropic-version".to_owned(), "2023-06-01".to_owned())]
    );
    let creds: Vec<_> = ch
        .credentials
        .iter()
        .map(|c| (c.id, c.enabled, c.secret.clone()))
        .collect();
    assert_eq!(
        creds,
        vec![
            (
                inline,
                true,
                SecretSource::Inline("sk-ant-secret-value".into())
            ),
            (env, false, SecretSource::Env("ANTHROPIC_KEY".into())),
        ]
    );

    let r = s.route(route).unwrap();
    assert_eq!(r.routing_mode, RoutingMode::Adaptive);
    assert_eq!(
        (
            r.sticky_session,
            r.stable_first,
            r.stable_first_denominator,
            r.retry_times,
            r.channel_retry_times,
            r.cooldown_seconds
        ),
        (Some(true), Some(false), Some(10), Some(4), Some(2), Some(5))
    );
    let m = &r.members[0];
    assert_eq!(
        (m.id, m.group_name.as_str(), m.priority, m.weight, m.canary),
        (member, "batch", 7, 9, true)
    );
    assert_eq!(m.capabilities.max_context, Some(200_000));
    assert!(s.resolve_route("claude-3-opus").is_some());

    let t = s.team(team).unwrap();
    assert_eq!(t.models, vec!["claude-*".to_owned()]);
    assert_eq!(t.members, vec![member]);
    assert_eq!(t.plan[&member].priority, Some(1));
    assert_eq!((t.retry_limit, t.disable_failover), (Some(0), true));

    let k = &s.tokens()[0];
    assert_eq!(
        k.hash,
        switchyard_control_plane::api::token_hash(&plaintext)
    );
    assert_eq!(
        (k.team_id, k.allow_pinning, k.enabled),
        (Some(team), true, true)
    );

    assert!(s.settings.latency_aware_enabled);
    assert_eq!(s.settings.sticky_ttl_minutes, 60);
    assert_eq!(s.settings.retry_times, 2);

    // The bytes streamed to proxies decode to the same snapshot.
    let wire =
        <switchyard_proto::v1::Snapshot as prost::Message>::decode(published.encoded.clone())
            .unwrap();
    let decoded = switchyard_proto::snapshot_from_proto(wire).unwrap();
    assert_eq!(decoded.revision, s.revision);
    assert_eq!(decoded.routes(), s.routes());
    assert_eq!(decoded.tokens(), s.tokens());
}
