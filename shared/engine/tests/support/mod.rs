//! Small builders for engine tests: a world of routes, channels and health, and one `pick`.
#![allow(dead_code)]

use switchyard_engine::*;

pub const NOW: UnixMillis = 1_700_000_000_000;

pub fn channel(id: ChannelId) -> Channel {
    Channel {
        id,
        name: format!("ch{id}"),
        provider: Provider::Openai,
        base_url: format!("http://upstream-{id}.invalid"),
        status: ChannelStatus::Enabled,
        auto_ban: false,
        max_concurrency: None,
        capabilities: Capabilities::default(),
        credentials: vec![Credential {
            id: id * 100,
            enabled: true,
            secret: SecretSource::Inline(format!("sk-secret-{id}")),
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

/// A member of channel `channel` with the given priority and weight, group `default`.
pub fn member(id: MemberId, channel: ChannelId, priority: i32, weight: i32) -> Member {
    Member {
        id,
        channel_id: channel,
        upstream_model: format!("up-{id}"),
        group_name: "default".into(),
        priority,
        weight,
        enabled: true,
        canary: false,
        capabilities: Capabilities::default(),
    }
}

pub fn route(id: RouteId, pattern: &str, members: Vec<Member>) -> Route {
    Route {
        id,
        model_pattern: pattern.into(),
        enabled: true,
        routing_mode: RoutingMode::Auto,
        single_member_id: None,
        sticky_session: None,
        stable_first: None,
        stable_first_denominator: None,
        retry_times: None,
        channel_retry_times: None,
        cooldown_seconds: None,
        members,
    }
}

pub struct World {
    pub settings: Settings,
    pub routes: Vec<Route>,
    pub channels: Vec<Channel>,
    pub teams: Vec<Team>,
    pub health: HealthSnapshot,
}

impl World {
    /// One route `m` over the given members; a channel is created for every channel id used.
    pub fn one_route(members: Vec<Member>) -> World {
        let mut ids: Vec<ChannelId> = members.iter().map(|m| m.channel_id).collect();
        ids.sort_unstable();
        ids.dedup();
        World {
            settings: Settings::default(),
            routes: vec![route(1, "m", members)],
            channels: ids.into_iter().map(channel).collect(),
            teams: vec![],
            health: HealthSnapshot::default(),
        }
    }

    pub fn route_mut(&mut self) -> &mut Route {
        &mut self.routes[0]
    }

    pub fn channel_mut(&mut self, id: ChannelId) -> &mut Channel {
        self.channels.iter_mut().find(|c| c.id == id).unwrap()
    }

    pub fn member_mut(&mut self, id: MemberId) -> &mut Member {
        self.routes
            .iter_mut()
            .flat_map(|r| r.members.iter_mut())
            .find(|m| m.id == id)
            .unwrap()
    }

    pub fn snapshot(&self) -> Snapshot {
        Snapshot::new(SnapshotParts {
            revision: 1,
            settings: self.settings.clone(),
            routes: self.routes.clone(),
            channels: self.channels.clone(),
            teams: self.teams.clone(),
            tokens: vec![],
            ..SnapshotParts::default()
        })
    }

    pub fn cool(&mut self, member: MemberId, until: UnixMillis) {
        self.health.cooldowns.insert(member, until);
    }

    pub fn latency(&mut self, channel: ChannelId, upstream: &str, ms: f64) {
        self.health.record_mut(channel, upstream).latency_ms = Some(ms);
    }

    pub fn propensity(&mut self, channel: ChannelId, upstream: &str, p: f64) {
        self.health.record_mut(channel, upstream).error_propensity = p;
    }
}

/// An RNG that replays fixed values (then repeats the last), for forcing draws.
pub struct Scripted(pub Vec<u64>, pub usize);

impl Scripted {
    pub fn new(values: &[u64]) -> Scripted {
        Scripted(values.to_vec(), 0)
    }
}

impl RandomSource for Scripted {
    fn next_u64(&mut self) -> u64 {
        let v = self.0[self.1.min(self.0.len() - 1)];
        self.1 += 1;
        v
    }
}

/// The member chosen for model `m` with seed `seed`.
pub fn chosen(world: &World, c: &SelectionConstraint, seed: u64) -> Option<MemberId> {
    let snapshot = world.snapshot();
    let d = select(
        &snapshot,
        &world.health,
        c,
        "m",
        NOW,
        &mut SplitMix64::new(seed),
    );
    d.selected().map(|c| c.member.id)
}

/// How often each member wins over `n` seeded draws.
pub fn histogram(
    world: &World,
    c: &SelectionConstraint,
    n: u64,
) -> std::collections::BTreeMap<MemberId, u64> {
    let snapshot = world.snapshot();
    let mut rng = SplitMix64::new(42);
    let mut counts = std::collections::BTreeMap::new();
    for _ in 0..n {
        let d = select(&snapshot, &world.health, c, "m", NOW, &mut rng);
        if let Some(sel) = d.selected() {
            *counts.entry(sel.member.id).or_insert(0) += 1;
        }
    }
    counts
}
