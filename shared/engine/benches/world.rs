//! Snapshot and health-view builders shared by the criterion bench and the instruction-count
//! example.

use switchyard_engine::*;

pub const NOW: UnixMillis = 1_700_000_000_000;

pub fn channel(id: ChannelId) -> Channel {
    Channel {
        id,
        name: format!("ch{id}"),
        provider: Provider::Openai,
        base_url: "http://127.0.0.1:1".into(),
        status: ChannelStatus::Enabled,
        auto_ban: false,
        max_concurrency: Some(32),
        capabilities: Capabilities::default(),
        credentials: vec![Credential {
            id,
            enabled: true,
            secret: SecretSource::Env("KEY".into()),
        }],
        retry_status_codes: vec![],
        retry_error_patterns: vec![],
        headers: vec![],
        secrets_withheld: false,
        responses_api: true,
        preset: None,
        passthrough: vec![],
    }
}

/// `n` members over `n / 4` channels in two tiers, with latency/error samples for every member,
/// one in ten cooling down and some requests in flight.
pub fn world(n: i64, mode: RoutingMode) -> (Snapshot, HealthSnapshot) {
    build(n, mode, true)
}

fn build(n: i64, mode: RoutingMode, align: bool) -> (Snapshot, HealthSnapshot) {
    let channels = (n / 4).max(1);
    let members: Vec<Member> = (1..=n)
        .map(|id| Member {
            id,
            channel_id: id % channels + 1,
            upstream_model: format!("model-{id}"),
            group_name: "default".into(),
            priority: if id % 2 == 0 { 10 } else { 0 },
            weight: (id % 7 + 1) as i32,
            enabled: true,
            canary: false,
            capabilities: Capabilities::default(),
        })
        .collect();
    let mut health = HealthSnapshot::default();
    for m in &members {
        let r = health.record_mut(m.channel_id, &m.upstream_model);
        r.latency_ms = Some(100.0 + (m.id % 13) as f64 * 80.0);
        r.error_propensity = (m.id % 5) as f64 * 0.1;
        if m.id % 10 == 0 {
            health.cooldowns.insert(m.id, NOW + 5_000);
        }
    }
    for c in 1..=channels {
        health.in_flight.insert(c, (c % 9) as u32);
    }
    let route = Route {
        id: 1,
        model_pattern: "gpt-4o".into(),
        enabled: true,
        routing_mode: mode,
        single_member_id: None,
        sticky_session: None,
        stable_first: None,
        stable_first_denominator: None,
        retry_times: None,
        channel_retry_times: None,
        cooldown_seconds: None,
        members,
    };
    let snapshot = Snapshot::new(SnapshotParts {
        revision: 1,
        settings: Settings::default(),
        routes: vec![route],
        channels: (1..=channels).map(channel).collect(),
        teams: vec![],
        tokens: vec![],
        ..SnapshotParts::default()
    });
    if align {
        // As a state store does when the snapshot is installed.
        health.align(&snapshot);
    }
    (snapshot, health)
}

/// The same world with the health view not laid out for the snapshot: aware selection falls
/// back to a hash lookup per candidate (what a request sees in the moment between a snapshot's
/// install and the store's re-layout).
#[allow(dead_code)] // used by the bench and the example's `unaligned` argument
pub fn world_unaligned(n: i64, mode: RoutingMode) -> (Snapshot, HealthSnapshot) {
    build(n, mode, false)
}

#[allow(dead_code)] // used by the bench, not the example
pub fn route_snapshot(routes: i64) -> Snapshot {
    // Half exact names, half wildcards with assorted literal prefixes.
    let routes = (1..=routes)
        .map(|id| Route {
            id,
            model_pattern: if id % 2 == 0 {
                format!("model-{id}")
            } else {
                format!("family-{}-*", id % 97)
            },
            enabled: true,
            routing_mode: RoutingMode::Auto,
            single_member_id: None,
            sticky_session: None,
            stable_first: None,
            stable_first_denominator: None,
            retry_times: None,
            channel_retry_times: None,
            cooldown_seconds: None,
            members: vec![],
        })
        .collect();
    Snapshot::new(SnapshotParts {
        routes,
        ..SnapshotParts::default()
    })
}
