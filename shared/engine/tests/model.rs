//! The snapshot's domain types: names and parsing, capability overlay, limits, and the
//! snapshot's lookups by id.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

mod support;

use support::*;
use switchyard_engine::limit::LimitOnly;
use switchyard_engine::*;

#[test]
fn every_name_parses_back_to_its_value_and_unknown_names_do_not_parse() {
    for p in [
        Provider::Openai,
        Provider::Azure,
        Provider::Anthropic,
        Provider::Gemini,
        Provider::Vertex,
        Provider::Bedrock,
        Provider::Mock,
    ] {
        assert_eq!(Provider::parse(p.as_str()), Some(p));
        // The names are the serde names: YAML, JSON and the database agree.
        assert_eq!(serde_json::to_value(p).unwrap(), p.as_str());
    }
    for s in [
        ChannelStatus::Enabled,
        ChannelStatus::Disabled,
        ChannelStatus::AutoDisabled,
    ] {
        assert_eq!(ChannelStatus::parse(s.as_str()), Some(s));
        assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
    }
    for m in [
        RoutingMode::Auto,
        RoutingMode::Weighted,
        RoutingMode::Latency,
        RoutingMode::Adaptive,
        RoutingMode::Single,
    ] {
        assert_eq!(RoutingMode::parse(m.as_str()), Some(m));
        assert_eq!(serde_json::to_value(m).unwrap(), m.as_str());
    }
    for bad in [
        "",
        "OpenAI",
        "xyzzy",
        " mock",
        "Azure",
        "azure_openai",
        "Vertex",
        "vertex_ai",
        "Bedrock",
        "aws_bedrock",
    ] {
        assert_eq!(Provider::parse(bad), None, "{bad:?}");
        assert_eq!(ChannelStatus::parse(bad), None, "{bad:?}");
        assert_eq!(RoutingMode::parse(bad), None, "{bad:?}");
    }
}

#[test]
fn protocol_bits_are_distinct_and_the_mock_has_none() {
    let bits = [
        Provider::Openai.protocol_bit(),
        Provider::Anthropic.protocol_bit(),
        Provider::Gemini.protocol_bit(),
    ];
    assert_eq!(bits, [1, 2, 4]);
    assert_eq!(Provider::Mock.protocol_bit(), 0);
    // Azure speaks OpenAI's protocol: the same bit.
    assert_eq!(
        Provider::Azure.protocol_bit(),
        Provider::Openai.protocol_bit()
    );
    // Vertex speaks Gemini's protocol: the same bit.
    assert_eq!(
        Provider::Vertex.protocol_bit(),
        Provider::Gemini.protocol_bit()
    );
    // Bedrock is planned as Anthropic's Messages: the same bit.
    assert_eq!(
        Provider::Bedrock.protocol_bit(),
        Provider::Anthropic.protocol_bit()
    );
    for p in [
        Provider::Openai,
        Provider::Azure,
        Provider::Anthropic,
        Provider::Gemini,
        Provider::Vertex,
        Provider::Bedrock,
    ] {
        assert!(p.needs_credential(), "{p:?}");
    }
    assert!(!Provider::Mock.needs_credential());
}

#[test]
fn member_capabilities_win_field_by_field() {
    let channel = Capabilities {
        max_context: Some(8_000),
        streaming: Some(true),
        tools: Some(false),
        vision: None,
        json_mode: Some(true),
    };
    let member = Capabilities {
        max_context: Some(4_000),
        tools: Some(true),
        vision: Some(false),
        ..Capabilities::default()
    };
    assert_eq!(
        channel.overlay(member),
        Capabilities {
            max_context: Some(4_000),
            streaming: Some(true),
            tools: Some(true),
            vision: Some(false),
            json_mode: Some(true),
        }
    );
    assert_eq!(channel.overlay(Capabilities::default()), channel);
}

#[test]
fn concurrency_limit_defaults_to_64_when_unset_or_zero() {
    let mut c = channel(1);
    assert_eq!(c.concurrency_limit(), model::DEFAULT_MAX_CONCURRENCY);
    c.max_concurrency = Some(0);
    assert_eq!(c.concurrency_limit(), model::DEFAULT_MAX_CONCURRENCY);
    c.max_concurrency = Some(1);
    assert_eq!(c.concurrency_limit(), 1);
    c.max_concurrency = Some(500);
    assert_eq!(c.concurrency_limit(), 500);
}

#[test]
fn group_names_are_trimmed_and_blank_means_default() {
    assert_eq!(model::normalize_group(None), DEFAULT_GROUP);
    assert_eq!(model::normalize_group(Some("  ")), DEFAULT_GROUP);
    assert_eq!(model::normalize_group(Some(" vip ")), "vip");
    // The limit counts characters after trimming.
    let padded = format!("  {}  ", "é".repeat(64));
    assert!(model::validate_group(&padded).is_ok());
    let err = model::validate_group(&"é".repeat(65)).unwrap_err();
    assert!(err.contains("65"), "{err}");
}

#[test]
fn inline_secrets_never_reach_debug_output() {
    assert_eq!(
        format!("{:?}", SecretSource::Inline("sk-live".into())),
        "Inline(***)"
    );
    assert_eq!(
        format!("{:?}", SecretSource::Env("OPENAI_KEY".into())),
        "Env(OPENAI_KEY)"
    );
}

fn snapshot() -> Snapshot {
    let team = Team {
        id: 7,
        name: "t".into(),
        models: vec!["*".into()],
        members: vec![],
        plan: Default::default(),
        retry_limit: None,
        disable_failover: false,
    };
    let token = Token {
        id: 3,
        name: "k".into(),
        hash: "ab".repeat(32),
        route_group_name: None,
        team_id: Some(7),
        allow_pinning: false,
        enabled: true,
        expires_at: None,
    };
    Snapshot::new(SnapshotParts {
        revision: 42,
        settings: Settings::default(),
        // Listed out of order: the snapshot sorts routes, channels and teams by id.
        routes: vec![
            route(20, "b-*", vec![member(21, 2, 0, 1)]),
            route(10, "a", vec![member(11, 1, 0, 1), member(12, 2, 5, 1)]),
        ],
        channels: vec![channel(2), channel(1)],
        teams: vec![team],
        tokens: vec![token],
        prices: vec![
            price(31, 1, "a*", 2),
            price(30, 1, "a", 1),
            price(32, 2, "*", 3),
        ],
        limits: vec![
            limit(41, "route", 10, "requests", Some("minute")),
            limit(40, "route", 10, "tokens", Some("day")),
            limit(42, "token", 3, "concurrent", None),
        ],
        shadows: Vec::new(),
        cache_rules: Vec::new(),
        guardrails: Vec::new(),
    })
}

fn price(id: i64, channel: ChannelId, pattern: &str, input: u64) -> Price {
    Price {
        id,
        channel_id: channel,
        model_pattern: pattern.into(),
        input_per_million: input,
        output_per_million: 0,
        cached_input_per_million: None,
    }
}

fn limit(id: i64, scope: &str, scope_id: i64, metric: &str, window: Option<&str>) -> LimitRule {
    let limit = Limit::parse(scope, scope_id, metric, window, 100, "hard").unwrap();
    LimitRule::new(id, limit, LimitOnly::default())
}

fn narrowed(
    id: i64,
    scope: &str,
    scope_id: i64,
    model: Option<&str>,
    route: Option<i64>,
) -> LimitRule {
    let limit = Limit::parse(
        scope,
        scope_id,
        "requests",
        Some("minute"),
        id as u64,
        "hard",
    )
    .unwrap();
    let only = LimitOnly {
        model_pattern: model.map(str::to_owned),
        route_id: route,
    };
    LimitRule::new(id, limit, only)
}

#[test]
fn narrowed_limits_apply_only_to_their_models_and_route() {
    let mut parts = snapshot().to_parts();
    parts.limits.extend([
        narrowed(52, "token", 3, Some("gpt-4*"), None),
        narrowed(51, "team", 7, None, Some(10)),
        narrowed(53, "token", 3, Some("a"), Some(20)),
    ]);
    let s = Snapshot::new(parts);
    let ids = |scope, id, model, route| -> Vec<u64> {
        s.narrowed_limits_of(scope, id, model, route)
            .map(|l| l.value)
            .collect()
    };
    // A narrowed limit is not a plain one of its scope.
    assert_eq!(s.limits_of(ScopeKind::Token, 3).len(), 1);
    assert!(s.limits_of(ScopeKind::Team, 7).is_empty());
    assert_eq!(ids(ScopeKind::Token, 3, Some("gpt-4o"), Some(10)), [52]);
    assert!(ids(ScopeKind::Token, 3, Some("gpt-3.5"), Some(10)).is_empty());
    assert!(
        ids(ScopeKind::Token, 3, None, Some(10)).is_empty(),
        "a model pattern needs a model"
    );
    assert_eq!(
        ids(ScopeKind::Token, 3, Some("a"), Some(20)),
        [53],
        "both must hold"
    );
    assert!(ids(ScopeKind::Token, 3, Some("a"), Some(10)).is_empty());
    assert_eq!(ids(ScopeKind::Team, 7, Some("x"), Some(10)), [51]);
    assert_eq!(ids(ScopeKind::Team, 7, None, Some(10)), [51]);
    assert!(ids(ScopeKind::Team, 7, Some("x"), None).is_empty());
    assert!(ids(ScopeKind::Team, 8, Some("x"), Some(10)).is_empty());
    // Each counts on a counter of its own, named by its id.
    let key = s
        .narrowed_limits_of(ScopeKind::Token, 3, Some("gpt-4o"), None)
        .next()
        .unwrap()
        .key;
    assert_eq!(key.rule, Some(52));
    assert_eq!(key.name(), "token:3:requests:minute:r52");
    assert_eq!(s.limits_of(ScopeKind::Token, 3)[0].key.rule, None);
}

#[test]
fn limits_are_found_by_scope_and_prices_by_channel_and_model() {
    let s = snapshot();
    let ids: Vec<i64> = s.limits().iter().map(|l| l.id).collect();
    assert_eq!(ids, [40, 41, 42], "in id order");
    let route: Vec<Metric> = s
        .limits_of(ScopeKind::Route, 10)
        .iter()
        .map(|l| l.key.metric)
        .collect();
    assert_eq!(route, [Metric::Tokens, Metric::Requests]);
    assert_eq!(s.limits_of(ScopeKind::Token, 3).len(), 1);
    assert!(s.limits_of(ScopeKind::Token, 10).is_empty());
    assert!(s.limits_of(ScopeKind::Route, 20).is_empty());
    assert!(!s.has_upstream_limits(), "no channel or member limit");
    let mut parts = s.to_parts();
    assert_eq!(parts.prices.len(), 3);
    parts
        .limits
        .push(limit(43, "member", 11, "requests", Some("minute")));
    assert!(Snapshot::new(parts).has_upstream_limits());
    assert_eq!(
        s.prices().iter().map(|p| p.id).collect::<Vec<_>>(),
        [30, 31, 32]
    );
    assert_eq!(s.price(1, "a").map(|p| p.id), Some(30), "exact beats a*");
    assert_eq!(s.price(1, "ab").map(|p| p.id), Some(31));
    assert_eq!(s.price(1, "b"), None, "unpriced");
    assert_eq!(s.price(2, "b").map(|p| p.id), Some(32));
}

#[test]
fn snapshot_lookups_by_id() {
    let s = snapshot();
    let ids: Vec<RouteId> = s.routes().iter().map(|r| r.id).collect();
    assert_eq!(ids, [10, 20]);
    assert_eq!(s.route(20).unwrap().model_pattern, "b-*");
    assert!(s.route(15).is_none());
    let ids: Vec<ChannelId> = s.channels().map(|c| c.id).collect();
    assert_eq!(ids, [1, 2]);
    assert_eq!(s.channel(2).unwrap().name, "ch2");
    assert!(s.channel(3).is_none());
    assert_eq!(s.teams().map(|t| t.id).collect::<Vec<_>>(), [7]);
    assert_eq!(s.team(7).unwrap().name, "t");
    assert!(s.team(8).is_none());
    assert_eq!(s.tokens().len(), 1);
    assert_eq!(s.tokens()[0].id, 3);
    let (route, member) = s.member(11).unwrap();
    assert_eq!((route.id, member.id, member.channel_id), (10, 11, 1));
    let (route, member) = s.member(21).unwrap();
    assert_eq!((route.id, member.id), (20, 21));
    assert!(s.member(99).is_none());
    assert_eq!(s.resolve_route("b-x").unwrap().id, 20);
    assert!(s.resolve_route("c").is_none());
}

#[test]
fn snapshot_gives_back_its_parts() {
    let s = snapshot();
    let parts = s.to_parts();
    assert_eq!(parts.revision, 42);
    assert_eq!(
        parts.routes.iter().map(|r| r.id).collect::<Vec<_>>(),
        [10, 20]
    );
    // Members come back in tier order: priority descending, then id.
    let members: Vec<MemberId> = parts.routes[0].members.iter().map(|m| m.id).collect();
    assert_eq!(members, [12, 11]);
    assert_eq!(parts.channels.len(), 2);
    assert_eq!(parts.teams.len(), 1);
    assert_eq!(parts.tokens.len(), 1);
    let rebuilt = Snapshot::new(s.into_parts());
    assert_eq!(rebuilt.revision, 42);
    assert_eq!(rebuilt.member(12).unwrap().0.id, 10);
}

#[test]
fn only_an_openai_protocol_channel_without_the_responses_api_is_chat_completions_only() {
    let mut ch = support::channel(1);
    assert!(!ch.chat_completions_only());
    assert_eq!(ch.protocol_bits(), Provider::Openai.protocol_bit());
    ch.responses_api = false;
    assert!(ch.chat_completions_only());
    assert_eq!(
        ch.protocol_bits(),
        Provider::Openai.protocol_bit() | CHAT_COMPLETIONS_ONLY_BIT
    );
    ch.provider = Provider::Azure;
    assert!(ch.chat_completions_only());
    assert_eq!(
        ch.protocol_bits(),
        Provider::Azure.protocol_bit() | CHAT_COMPLETIONS_ONLY_BIT | AZURE_BIT
    );
    // An Azure channel always carries its own bit too (endpoints Azure does not serve).
    ch.responses_api = true;
    assert_eq!(
        ch.protocol_bits(),
        Provider::Azure.protocol_bit() | AZURE_BIT
    );
    ch.responses_api = false;
    // The bit is no provider's.
    for p in [
        Provider::Openai,
        Provider::Anthropic,
        Provider::Gemini,
        Provider::Mock,
    ] {
        assert_eq!(p.protocol_bit() & CHAT_COMPLETIONS_ONLY_BIT, 0);
        assert_eq!(p.protocol_bit() & AZURE_BIT, 0);
    }
    assert_eq!(
        CHAT_COMPLETIONS_ONLY_BIT & AZURE_BIT,
        0,
        "two bits of their own"
    );
    for p in [
        Provider::Anthropic,
        Provider::Gemini,
        Provider::Vertex,
        Provider::Bedrock,
        Provider::Mock,
    ] {
        ch.provider = p;
        assert!(!ch.chat_completions_only(), "{p:?}");
        assert_eq!(ch.protocol_bits(), p.protocol_bit(), "{p:?}");
    }
}

#[test]
fn responses_api_defaults_to_true_when_absent_from_json() {
    let mut v = serde_json::to_value(support::channel(1)).unwrap();
    v.as_object_mut().unwrap().remove("responses_api");
    let ch: Channel = serde_json::from_value(v).unwrap();
    assert!(ch.responses_api);
}

#[test]
fn the_catalog_prices_the_channels_of_a_provider_it_knows_unless_the_setting_is_off() {
    // Known by its provider's official base URL, or by the preset it names.
    let mut official = channel(1);
    official.base_url = "https://api.openai.com/v1".into();
    let mut preset = channel(2);
    preset.preset = Some("openai".into());
    // A base URL the catalog does not know (the support channel's own).
    let unknown = channel(3);
    let parts = |price_catalog: bool| SnapshotParts {
        settings: Settings {
            price_catalog,
            ..Settings::default()
        },
        channels: vec![official.clone(), preset.clone(), unknown.clone()],
        ..SnapshotParts::default()
    };
    let on = Snapshot::new(parts(true));
    for ch in [1, 2] {
        let (price, from_catalog) = on.priced(ch, "gpt-5.4").expect("a catalog price");
        assert!(from_catalog);
        assert_eq!(price.channel_id, ch);
        assert_eq!(price.input_per_million, 2_500_000);
        assert_eq!(price.output_per_million, 15_000_000);
        assert_eq!(price.cached_input_per_million, Some(250_000));
    }
    assert!(on.price(3, "gpt-5.4").is_none());
    let off = Snapshot::new(parts(false));
    assert!(off.price(1, "gpt-5.4").is_none());
    assert!(off.price(2, "gpt-5.4").is_none());
}

fn team(models: &[&str], members: Vec<MemberId>) -> Team {
    Team {
        id: 1,
        name: "t".into(),
        models: models.iter().map(|m| (*m).to_owned()).collect(),
        members,
        plan: Default::default(),
        retry_limit: None,
        disable_failover: false,
    }
}

/// A team's key reaches a pass-through channel through an enabled route it may call with an
/// enabled member on that channel it may use; nothing else opens it.
#[test]
fn a_team_reaches_the_channels_of_the_routes_it_may_call() {
    use switchyard_engine::passthrough::team_reaches_channel;
    let mut disabled = member(4, 3, 0, 1);
    disabled.enabled = false;
    let mut off = route(3, "off", vec![member(5, 4, 0, 1)]);
    off.enabled = false;
    let routes = vec![
        route(1, "gpt-4o", vec![member(1, 1, 0, 1), member(2, 2, 0, 1)]),
        route(2, "claude-*", vec![member(3, 2, 0, 1), disabled]),
        off,
    ];
    let reaches = |t: &Team, channel| team_reaches_channel(&routes, t, channel);
    let exact = team(&["gpt-4o"], vec![]);
    assert!(reaches(&exact, 1) && reaches(&exact, 2));
    assert!(!reaches(&exact, 3), "a channel of no route it may call");
    // A team pattern matching the route's, or the route's pattern matching the team's.
    assert!(reaches(&team(&["gpt-*"], vec![]), 1));
    assert!(reaches(&team(&["claude-3-haiku"], vec![]), 2));
    assert!(!reaches(&team(&["claude-3-haiku"], vec![]), 1));
    // The team's member list narrows it to those members' channels.
    let narrowed = team(&["gpt-4o"], vec![2]);
    assert!(!reaches(&narrowed, 1) && reaches(&narrowed, 2));
    // A disabled member or route opens nothing; a team of no models reaches nothing.
    assert!(!reaches(&team(&["claude-*"], vec![]), 3));
    assert!(!reaches(&team(&["off"], vec![]), 4));
    assert!(!reaches(&team(&[], vec![]), 1));
}

#[test]
fn only_azure_bedrock_and_vertex_channels_have_a_workload_identity() {
    for (p, has) in [
        (Provider::Openai, false),
        (Provider::Azure, true),
        (Provider::Anthropic, false),
        (Provider::Gemini, false),
        (Provider::Vertex, true),
        (Provider::Bedrock, true),
        (Provider::Mock, false),
    ] {
        assert_eq!(p.has_workload_identity(), has, "{p:?}");
    }
}

#[test]
fn a_channels_auth_parses_back_and_is_workload_only_with_a_workload_credential() {
    for auth in [ChannelAuth::Credentials, ChannelAuth::Workload] {
        assert_eq!(ChannelAuth::parse(auth.as_str()), Some(auth));
    }
    assert_eq!(ChannelAuth::Credentials.as_str(), "credentials");
    assert_eq!(ChannelAuth::Workload.as_str(), "workload");
    for bad in ["", "Workload", "xyzzy", "credential"] {
        assert_eq!(ChannelAuth::parse(bad), None, "{bad:?}");
    }
    let credential = |id, secret| Credential {
        id,
        enabled: true,
        secret,
    };
    assert_eq!(ChannelAuth::of(&[]), ChannelAuth::Credentials);
    assert_eq!(
        ChannelAuth::of(&[
            credential(1, SecretSource::Inline("sk".into())),
            credential(2, SecretSource::Env("KEY".into())),
        ]),
        ChannelAuth::Credentials
    );
    assert_eq!(
        ChannelAuth::of(&[credential(3, SecretSource::Workload)]),
        ChannelAuth::Workload
    );
    assert_eq!(
        ChannelAuth::of(&[
            credential(4, SecretSource::Inline("sk".into())),
            credential(5, SecretSource::Workload),
        ]),
        ChannelAuth::Workload
    );
}

#[test]
fn the_snapshot_finds_its_tag_and_end_user_limits() {
    let s = snapshot();
    assert!(s.subject_limits().is_empty());
    let mut parts = s.to_parts();
    let tag = Limit::parse("tag", 0, "requests", Some("minute"), 10, "hard").unwrap();
    parts
        .limits
        .push(LimitRule::new(60, tag, LimitOnly::default()).about(Some("acme".into())));
    let s = Snapshot::new(parts);
    assert!(!s.subject_limits().is_empty());
    let who = switchyard_engine::subject::Attribution {
        tags: &["acme".to_owned()],
        ..Default::default()
    };
    let found: Vec<_> = s
        .subject_limits()
        .of(who, None, None)
        .map(|l| l.key.rule)
        .collect();
    assert_eq!(found, [Some(60)]);
}
