//! One named test per routing rule (docs/src/concepts/routing.md).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

mod support;

use support::*;
use switchyard_engine::*;

fn constraint() -> SelectionConstraint {
    SelectionConstraint::default()
}

macro_rules! decide {
    ($world:expr, $c:expr, $model:expr, $rng:expr) => {{
        let snap = $world.snapshot();
        let d = select(&snap, &$world.health, &$c, $model, NOW, $rng);
        (
            d.selected().map(|c| c.member.id),
            serde_json::to_value(&d).unwrap(),
            d.outcome,
        )
    }};
}

// ---------------------------------------------------------------- §2.1 route resolution

fn multi_route_world(patterns: &[(RouteId, &str)]) -> World {
    let mut w = World::one_route(vec![member(1, 1, 0, 1)]);
    w.routes = patterns
        .iter()
        .map(|(id, p)| route(*id, p, vec![member(*id * 10, 1, 0, 1)]))
        .collect();
    w
}

fn route_for(w: &World, model: &str) -> Option<RouteId> {
    w.snapshot().resolve_route(model).map(|r| r.id)
}

#[test]
fn exact_route_beats_wildcard() {
    let w = multi_route_world(&[(1, "gpt-*"), (2, "gpt-4o"), (3, "*")]);
    assert_eq!(route_for(&w, "gpt-4o"), Some(2));
    assert_eq!(route_for(&w, "gpt-4"), Some(1));
}

#[test]
fn longest_wildcard_pattern_wins() {
    let w = multi_route_world(&[(1, "*"), (2, "gpt-*"), (3, "gpt-4o-*")]);
    assert_eq!(route_for(&w, "gpt-4o-mini"), Some(3));
    assert_eq!(route_for(&w, "gpt-3.5"), Some(2));
    assert_eq!(route_for(&w, "claude"), Some(1));
}

#[test]
fn star_matches_runs_and_question_mark_exactly_one() {
    let w = multi_route_world(&[(1, "gpt-?"), (2, "o*")]);
    assert_eq!(route_for(&w, "gpt-4"), Some(1));
    assert_eq!(route_for(&w, "gpt-4o"), None);
    assert_eq!(route_for(&w, "o"), Some(2));
    assert_eq!(route_for(&w, "o3-mini"), Some(2));
}

#[test]
fn equal_length_wildcards_tie_break_on_lowest_route_id() {
    let w = multi_route_world(&[(7, "gpt-*"), (3, "*-4o?"), (5, "g?t-*")]);
    // "gpt-*" (5 chars), "*-4o?" (5 chars) and "g?t-*" (5 chars) all match "gpt-4oX".
    assert_eq!(route_for(&w, "gpt-4oX"), Some(3));
}

#[test]
fn model_name_is_trimmed_and_case_sensitive() {
    let w = multi_route_world(&[(1, "gpt-4o")]);
    assert_eq!(route_for(&w, "  gpt-4o \n"), Some(1));
    assert_eq!(route_for(&w, "GPT-4o"), None);
}

#[test]
fn disabled_routes_are_not_matched() {
    let mut w = multi_route_world(&[(1, "gpt-4o"), (2, "gpt-*")]);
    w.routes[0].enabled = false;
    assert_eq!(route_for(&w, "gpt-4o"), Some(2));
}

#[test]
fn no_matching_route_is_model_not_found() {
    let w = multi_route_world(&[(1, "gpt-*")]);
    let (sel, json, outcome) = decide!(w, constraint(), "claude-3", &mut SplitMix64::new(1));
    assert_eq!(sel, None);
    assert_eq!(outcome, Outcome::ModelNotFound);
    assert_eq!(json["outcome"], "model_not_found");
    assert!(json["route"].is_null());
    assert_eq!(json["candidates"].as_array().unwrap().len(), 0);
}

// ---------------------------------------------------------------- §2.1 groups

fn grouped(id: MemberId, group: &str) -> Member {
    Member {
        group_name: group.into(),
        ..member(id, id, 0, 1)
    }
}

fn group_req(group: &str) -> SelectionConstraint {
    SelectionConstraint {
        route_group: Some(group.into()),
        ..constraint()
    }
}

#[test]
fn requested_group_present_keeps_only_its_members() {
    let w = World::one_route(vec![
        grouped(1, "default"),
        grouped(2, "vip"),
        grouped(3, "vip"),
    ]);
    let (_, json, _) = decide!(w, group_req("vip"), "m", &mut SplitMix64::new(1));
    let ids: Vec<i64> = json["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["member_id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, [2, 3]);
    assert_eq!(json["requested_group"], "vip");
    assert_eq!(json["route_group"], "vip");
    assert_eq!(json["group_fallback"], false);
}

#[test]
fn requested_group_absent_falls_back_to_default() {
    let w = World::one_route(vec![grouped(1, "default"), grouped(2, "vip")]);
    let (sel, json, _) = decide!(w, group_req("gold"), "m", &mut SplitMix64::new(1));
    assert_eq!(sel, Some(1));
    assert_eq!(json["requested_group"], "gold");
    assert_eq!(json["route_group"], "default");
    assert_eq!(json["group_fallback"], true);
}

#[test]
fn no_default_group_uses_whole_pool_and_route_group_is_null_across_groups() {
    let w = World::one_route(vec![grouped(1, "a"), grouped(2, "b")]);
    let (_, json, _) = decide!(w, group_req("gold"), "m", &mut SplitMix64::new(1));
    assert_eq!(json["candidates"].as_array().unwrap().len(), 2);
    assert!(json["route_group"].is_null());
    assert_eq!(json["group_fallback"], true);
}

#[test]
fn route_group_names_the_only_group_when_no_narrowing_applies() {
    // Requested group absent and no `default`: the whole pool, which is all of group "a".
    let w = World::one_route(vec![grouped(1, "a"), grouped(2, "a")]);
    let (_, json, _) = decide!(w, group_req("gold"), "m", &mut SplitMix64::new(1));
    assert_eq!(json["group_fallback"], true);
    assert_eq!(json["route_group"], "a");
    // A pin skips group narrowing; the route still has a single group.
    let c = SelectionConstraint {
        pinned_member: Some(2),
        ..group_req("gold")
    };
    let (sel, json, _) = decide!(w, c, "m", &mut SplitMix64::new(1));
    assert_eq!(sel, Some(2));
    assert_eq!(json["route_group"], "a");
}

#[test]
fn empty_or_blank_group_means_default() {
    let w = World::one_route(vec![grouped(1, "default"), grouped(2, "vip")]);
    for g in ["", "   "] {
        let (sel, json, _) = decide!(w, group_req(g), "m", &mut SplitMix64::new(1));
        assert_eq!(sel, Some(1));
        assert_eq!(json["requested_group"], "default");
        assert_eq!(json["group_fallback"], false);
    }
    let (_, json, _) = decide!(w, group_req("  vip "), "m", &mut SplitMix64::new(1));
    assert_eq!(json["requested_group"], "vip");
}

#[test]
fn group_names_longer_than_64_characters_are_invalid() {
    assert!(model::validate_group(&"g".repeat(64)).is_ok());
    assert!(model::validate_group(&"g".repeat(65)).is_err());
}

// ---------------------------------------------------------------- §2.2 eligibility

fn two_members() -> World {
    World::one_route(vec![member(1, 1, 0, 1), member(2, 2, 0, 1)])
}

fn reasons(w: &World, c: &SelectionConstraint, id: MemberId) -> Vec<String> {
    let (_, json, _) = decide!(w, c.clone(), "m", &mut SplitMix64::new(1));
    json["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["member_id"] == id)
        .map(|c| {
            c["reasons"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r.as_str().unwrap().to_owned())
                .collect()
        })
        .unwrap_or_else(|| panic!("member {id} is not a candidate"))
}

#[test]
fn reason_member_disabled() {
    let mut w = two_members();
    w.member_mut(1).enabled = false;
    assert_eq!(reasons(&w, &constraint(), 1), ["member_disabled"]);
    assert_eq!(chosen(&w, &constraint(), 3), Some(2));
}

#[test]
fn reason_channel_disabled_for_manual_auto_and_open_breaker() {
    for case in 0..3 {
        let mut w = two_members();
        match case {
            0 => w.channel_mut(1).status = ChannelStatus::Disabled,
            1 => w.channel_mut(1).status = ChannelStatus::AutoDisabled,
            _ => w.health.breakers_open.push(1),
        }
        assert_eq!(
            reasons(&w, &constraint(), 1),
            ["channel_disabled"],
            "case {case}"
        );
    }
}

#[test]
fn reason_credential_unavailable() {
    for case in 0..3 {
        let mut w = two_members();
        match case {
            0 => w.channel_mut(1).credentials.clear(),
            1 => w.channel_mut(1).credentials[0].enabled = false,
            _ => w.health.credentials_disabled.push(100),
        }
        assert_eq!(
            reasons(&w, &constraint(), 1),
            ["credential_unavailable"],
            "case {case}"
        );
    }
}

#[test]
fn reason_secrets_withheld() {
    let mut w = two_members();
    w.channel_mut(1).secrets_withheld = true;
    assert_eq!(reasons(&w, &constraint(), 1), ["secrets_withheld"]);
    // A channel sent without the credentials it needs shows both reasons.
    w.channel_mut(1).credentials.clear();
    assert_eq!(
        reasons(&w, &constraint(), 1),
        ["credential_unavailable", "secrets_withheld"]
    );
    assert!(reasons(&w, &constraint(), 2).is_empty());
}

#[test]
fn reason_cooling_down_only_while_the_cooldown_lasts() {
    let mut w = two_members();
    w.cool(1, NOW + 1_000);
    assert_eq!(reasons(&w, &constraint(), 1), ["cooling_down"]);
    w.cool(1, NOW);
    assert!(reasons(&w, &constraint(), 1).is_empty());
}

#[test]
fn reason_already_attempted() {
    let w = two_members();
    let c = SelectionConstraint {
        attempted: vec![1],
        ..constraint()
    };
    assert_eq!(reasons(&w, &c, 1), ["already_attempted"]);
    assert_eq!(chosen(&w, &c, 9), Some(2));
}

#[test]
fn reason_rate_limited() {
    let w = two_members();
    let c = SelectionConstraint {
        rate_limited: vec![1],
        ..constraint()
    };
    assert_eq!(reasons(&w, &c, 1), ["rate_limited"]);
    assert_eq!(chosen(&w, &c, 9), Some(2), "the next member serves");
    let both = SelectionConstraint {
        rate_limited: vec![1, 2],
        ..constraint()
    };
    assert_eq!(
        chosen(&w, &both, 9),
        None,
        "no cooling fallback for a member without room"
    );
}

#[test]
fn reason_invalid_weight() {
    let mut w = two_members();
    w.member_mut(1).weight = -1;
    assert_eq!(reasons(&w, &constraint(), 1), ["invalid_weight"]);
}

#[test]
fn reason_single_mode_other_member() {
    let mut w = two_members();
    w.route_mut().routing_mode = RoutingMode::Single;
    w.route_mut().single_member_id = Some(2);
    assert_eq!(reasons(&w, &constraint(), 1), ["single_mode_other_member"]);
    assert!(reasons(&w, &constraint(), 2).is_empty());
    for seed in 0..20 {
        assert_eq!(chosen(&w, &constraint(), seed), Some(2));
    }
}

#[test]
fn reason_capability_mismatch_for_each_declared_feature() {
    for feature in ["streaming", "tools", "vision", "json_mode"] {
        let mut w = two_members();
        let caps = &mut w.channel_mut(1).capabilities;
        let mut needs = RequestNeeds::default();
        match feature {
            "streaming" => (caps.streaming, needs.streaming) = (Some(false), true),
            "tools" => (caps.tools, needs.tools) = (Some(false), true),
            "vision" => (caps.vision, needs.vision) = (Some(false), true),
            _ => (caps.json_mode, needs.json_mode) = (Some(false), true),
        }
        let c = SelectionConstraint {
            needs,
            ..constraint()
        };
        assert_eq!(reasons(&w, &c, 1), ["capability_mismatch"], "{feature}");
        // Undeclared (None) capabilities are assumed supported.
        assert!(reasons(&w, &c, 2).is_empty(), "{feature}");
        // A request that does not need the feature is unaffected.
        assert!(reasons(&w, &constraint(), 1).is_empty(), "{feature}");
    }
}

#[test]
fn reason_protocol_unsupported_for_providers_that_cannot_express_the_request() {
    let mut w = two_members();
    w.channel_mut(1).provider = Provider::Anthropic;
    w.channel_mut(2).provider = Provider::Openai;
    let c = SelectionConstraint {
        needs: RequestNeeds {
            unsupported_providers: Provider::Anthropic.protocol_bit(),
            ..Default::default()
        },
        ..constraint()
    };
    assert_eq!(reasons(&w, &c, 1), ["protocol_unsupported"]);
    assert!(reasons(&w, &c, 2).is_empty());
    for seed in 0..20 {
        assert_eq!(
            chosen(&w, &c, seed),
            Some(2),
            "the member that can serve it"
        );
    }
    // Azure speaks OpenAI's protocol: what OpenAI cannot express, Azure cannot either.
    w.channel_mut(1).provider = Provider::Azure;
    let not_openai = SelectionConstraint {
        needs: RequestNeeds {
            unsupported_providers: Provider::Openai.protocol_bit(),
            ..Default::default()
        },
        ..constraint()
    };
    assert_eq!(reasons(&w, &not_openai, 1), ["protocol_unsupported"]);
    assert_eq!(reasons(&w, &not_openai, 2), ["protocol_unsupported"]);
    assert!(reasons(&w, &c, 1).is_empty(), "not Anthropic's protocol");
    // The in-process mock answers in the client's own protocol: never unsupported.
    w.channel_mut(1).provider = Provider::Mock;
    let all = SelectionConstraint {
        needs: RequestNeeds {
            unsupported_providers: 0b111,
            ..Default::default()
        },
        ..constraint()
    };
    assert!(reasons(&w, &all, 1).is_empty());
    assert_eq!(reasons(&w, &all, 2), ["protocol_unsupported"]);
}

#[test]
fn a_mock_channel_needs_no_credential() {
    let mut w = two_members();
    w.channel_mut(1).credentials.clear();
    w.channel_mut(2).credentials.clear();
    w.channel_mut(1).provider = Provider::Mock;
    assert!(reasons(&w, &constraint(), 1).is_empty());
    assert_eq!(reasons(&w, &constraint(), 2), ["credential_unavailable"]);
}

#[test]
fn member_capabilities_override_the_channels() {
    let mut w = two_members();
    w.channel_mut(1).capabilities.tools = Some(false);
    w.member_mut(1).capabilities.tools = Some(true);
    let c = SelectionConstraint {
        needs: RequestNeeds {
            tools: true,
            ..Default::default()
        },
        ..constraint()
    };
    assert!(reasons(&w, &c, 1).is_empty());
}

#[test]
fn reason_context_too_long() {
    let mut w = two_members();
    w.channel_mut(1).capabilities.max_context = Some(8_000);
    let needs = |t| SelectionConstraint {
        needs: RequestNeeds {
            estimated_prompt_tokens: Some(t),
            ..Default::default()
        },
        ..constraint()
    };
    assert_eq!(reasons(&w, &needs(8_001), 1), ["context_too_long"]);
    assert!(reasons(&w, &needs(8_000), 1).is_empty());
}

#[test]
fn several_reasons_are_all_reported() {
    let mut w = two_members();
    w.member_mut(1).enabled = false;
    w.member_mut(1).weight = -5;
    w.channel_mut(1).status = ChannelStatus::Disabled;
    w.channel_mut(1).credentials.clear();
    w.cool(1, NOW + 5);
    let c = SelectionConstraint {
        attempted: vec![1],
        ..constraint()
    };
    assert_eq!(
        reasons(&w, &c, 1),
        [
            "member_disabled",
            "channel_disabled",
            "credential_unavailable",
            "cooling_down",
            "already_attempted",
            "invalid_weight"
        ]
    );
}

#[test]
fn fault_protection_off_ignores_cooldowns_and_breakers() {
    let mut w = two_members();
    w.settings.fault_protection_enabled = false;
    w.cool(1, NOW + 10_000);
    w.health.breakers_open.push(1);
    assert!(reasons(&w, &constraint(), 1).is_empty());
}

#[test]
fn caller_exclusions_filter_without_a_reason_code() {
    let w = World::one_route(vec![
        member(1, 1, 0, 1),
        member(2, 1, 0, 1),
        member(3, 2, 0, 1),
    ]);
    let c = SelectionConstraint {
        excluded_members: vec![1],
        ..constraint()
    };
    let (_, json, _) = decide!(w, c, "m", &mut SplitMix64::new(1));
    let ids: Vec<i64> = json["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["member_id"].as_i64().unwrap())
        .collect();
    assert_eq!(
        ids,
        [2, 3],
        "excluded member is filtered, its channel sibling stays"
    );

    let c = SelectionConstraint {
        excluded_channels: vec![1],
        ..constraint()
    };
    let (sel, json, _) = decide!(w, c, "m", &mut SplitMix64::new(1));
    let ids: Vec<i64> = json["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["member_id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, [3], "an excluded channel removes all its members");
    assert_eq!(sel, Some(3));
}

fn team(id: TeamId, models: &[&str], members: &[MemberId]) -> Team {
    Team {
        id,
        name: format!("team{id}"),
        models: models.iter().map(|m| m.to_string()).collect(),
        members: members.to_vec(),
        plan: Default::default(),
        retry_limit: None,
        disable_failover: false,
    }
}

#[test]
fn team_member_authorisation_filters_silently() {
    let mut w = World::one_route(vec![member(1, 1, 0, 1), member(2, 2, 0, 1)]);
    w.teams.push(team(9, &["m"], &[2]));
    let c = SelectionConstraint {
        team: Some(9),
        ..constraint()
    };
    let (sel, json, _) = decide!(w, c, "m", &mut SplitMix64::new(1));
    assert_eq!(sel, Some(2));
    assert_eq!(json["candidates"].as_array().unwrap().len(), 1);
}

#[test]
fn team_without_the_model_is_not_allowed() {
    let mut w = World::one_route(vec![member(1, 1, 0, 1)]);
    w.teams.push(team(9, &["gpt-*"], &[]));
    let c = SelectionConstraint {
        team: Some(9),
        ..constraint()
    };
    let (sel, json, outcome) = decide!(w, c, "m", &mut SplitMix64::new(1));
    assert_eq!((sel, outcome), (None, Outcome::ModelNotAllowed));
    assert_eq!(json["outcome"], "model_not_allowed");
    // A team id that no longer exists grants nothing either.
    let c = SelectionConstraint {
        team: Some(404),
        ..constraint()
    };
    let (_, _, outcome) = decide!(w, c, "m", &mut SplitMix64::new(1));
    assert_eq!(outcome, Outcome::ModelNotAllowed);
}

#[test]
fn team_wildcard_model_grant_authorises_the_model() {
    let mut w = World::one_route(vec![member(1, 1, 0, 1)]);
    w.teams.push(team(9, &["?"], &[]));
    let c = SelectionConstraint {
        team: Some(9),
        ..constraint()
    };
    assert_eq!(chosen(&w, &c, 1), Some(1));
}

#[test]
fn team_plan_overrides_priority_and_weight() {
    let mut w = World::one_route(vec![member(1, 1, 10, 1), member(2, 2, 0, 1)]);
    let mut t = team(9, &["m"], &[]);
    t.plan.insert(
        2,
        PlanEntry {
            priority: Some(20),
            weight: Some(7),
        },
    );
    w.teams.push(t);
    let c = SelectionConstraint {
        team: Some(9),
        ..constraint()
    };
    let (sel, json, _) = decide!(w, c, "m", &mut SplitMix64::new(1));
    assert_eq!(sel, Some(2), "the plan lifted member 2 into the top tier");
    assert_eq!(json["tier"], 20);
    assert_eq!(json["candidates"][0]["member_id"], 2);
    assert_eq!(json["candidates"][0]["weight"], 7);
    // Without the team the route's own priorities apply.
    assert_eq!(chosen(&w, &constraint(), 1), Some(1));
}

// ---------------------------------------------------------------- §2.3 tiers

#[test]
fn only_the_highest_tier_with_an_eligible_member_is_used() {
    let w = World::one_route(vec![
        member(1, 1, 5, 1),
        member(2, 2, 10, 1),
        member(3, 3, 10, 100),
    ]);
    let counts = histogram(&w, &constraint(), 2_000);
    assert!(
        !counts.contains_key(&1),
        "lower tier never mixed in: {counts:?}"
    );
    assert!(counts[&3] > counts[&2]);
}

#[test]
fn next_tier_is_used_when_the_top_tier_has_no_eligible_member() {
    let mut w = World::one_route(vec![member(1, 1, 5, 1), member(2, 2, 10, 1)]);
    w.member_mut(2).enabled = false;
    let (sel, json, _) = decide!(w, constraint(), "m", &mut SplitMix64::new(1));
    assert_eq!(sel, Some(1));
    assert_eq!(json["tier"], 5);
}

#[test]
fn candidates_are_ordered_priority_descending_then_member_id() {
    let w = World::one_route(vec![
        member(4, 1, 0, 1),
        member(2, 1, 5, 1),
        member(3, 1, 5, 1),
        member(1, 1, 0, 1),
    ]);
    let (_, json, _) = decide!(w, constraint(), "m", &mut SplitMix64::new(1));
    let ids: Vec<i64> = json["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["member_id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, [2, 3, 1, 4]);
}

// ---------------------------------------------------------------- §2.4 strategies

#[test]
fn weight_zero_never_wins_beside_positive_weights() {
    let w = World::one_route(vec![member(1, 1, 0, 0), member(2, 2, 0, 1)]);
    let counts = histogram(&w, &constraint(), 2_000);
    assert_eq!(counts.get(&1), None);
    assert_eq!(counts[&2], 2_000);
}

#[test]
fn all_zero_weights_choose_uniformly() {
    let w = World::one_route(vec![
        member(1, 1, 0, 0),
        member(2, 2, 0, 0),
        member(3, 3, 0, 0),
    ]);
    let counts = histogram(&w, &constraint(), 30_000);
    for id in 1..=3 {
        let share = counts[&id] as f64 / 30_000.0;
        assert!((share - 1.0 / 3.0).abs() < 0.02, "{counts:?}");
    }
}

#[test]
fn weighted_distribution_matches_weights() {
    let w = World::one_route(vec![
        member(1, 1, 0, 1),
        member(2, 2, 0, 3),
        member(3, 3, 0, 6),
    ]);
    let n = 50_000;
    let counts = histogram(&w, &constraint(), n);
    for (id, weight) in [(1, 1.0), (2, 3.0), (3, 6.0)] {
        let share = counts[&id] as f64 / n as f64;
        assert!(
            (share - weight / 10.0).abs() < 0.015,
            "member {id}: {share} ({counts:?})"
        );
    }
}

fn factors(w: &World, id: MemberId) -> (f64, f64, f64) {
    let (_, json, _) = decide!(w, constraint(), "m", &mut SplitMix64::new(1));
    let c = json["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["member_id"] == id)
        .unwrap();
    (
        c["latency_factor"].as_f64().unwrap(),
        c["error_factor"].as_f64().unwrap(),
        c["score"].as_f64().unwrap(),
    )
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

#[test]
fn latency_mode_scores_weight_times_3000_over_3000_plus_latency() {
    let mut w = two_members();
    w.route_mut().routing_mode = RoutingMode::Latency;
    w.member_mut(1).weight = 4;
    w.latency(1, "up-1", 3000.0);
    let (lf, ef, score) = factors(&w, 1);
    assert!(
        close(lf, 0.5) && close(ef, 1.0) && close(score, 2.0),
        "{lf} {ef} {score}"
    );
}

#[test]
fn latency_cold_start_keeps_full_weight() {
    let mut w = two_members();
    w.route_mut().routing_mode = RoutingMode::Latency;
    w.member_mut(2).weight = 3;
    let (lf, _, score) = factors(&w, 2);
    assert!(close(lf, 1.0) && close(score, 3.0));
}

#[test]
fn error_aware_scores_weight_times_one_minus_propensity_floored() {
    let mut w = two_members();
    w.settings.error_aware_enabled = true; // auto mode follows the global switch
    w.member_mut(1).weight = 2;
    w.propensity(1, "up-1", 0.875);
    w.propensity(2, "up-2", 1.0);
    let (_, ef1, s1) = factors(&w, 1);
    let (_, ef2, s2) = factors(&w, 2);
    assert!(close(ef1, 0.125) && close(s1, 0.25), "{ef1} {s1}");
    assert!(
        close(ef2, 0.05) && close(s2, 0.05),
        "floor 0.05: {ef2} {s2}"
    );
}

#[test]
fn adaptive_mode_multiplies_latency_and_error_factors() {
    let mut w = two_members();
    w.route_mut().routing_mode = RoutingMode::Adaptive;
    w.member_mut(1).weight = 10;
    w.latency(1, "up-1", 1000.0);
    w.propensity(1, "up-1", 0.5);
    let (lf, ef, score) = factors(&w, 1);
    assert!(
        close(lf, 0.75) && close(ef, 0.5) && close(score, 3.75),
        "{lf} {ef} {score}"
    );
}

#[test]
fn aware_modes_count_weight_zero_or_less_as_one() {
    let mut w = World::one_route(vec![member(1, 1, 0, 0), member(2, 2, 0, 1)]);
    w.route_mut().routing_mode = RoutingMode::Latency;
    let (_, _, score) = factors(&w, 1);
    assert!(close(score, 1.0));
    let counts = histogram(&w, &constraint(), 4_000);
    assert!(
        counts[&1] > 1_500,
        "a weight-0 member still gets traffic in aware modes: {counts:?}"
    );
}

#[test]
fn routing_mode_resolves_against_the_global_switches() {
    // (mode, global latency, global error) -> (latency aware, error aware)
    let table = [
        (RoutingMode::Auto, false, false, false, false),
        (RoutingMode::Auto, true, false, true, false),
        (RoutingMode::Auto, false, true, false, true),
        (RoutingMode::Auto, true, true, true, true),
        (RoutingMode::Weighted, true, true, false, false),
        (RoutingMode::Latency, false, false, true, false),
        (RoutingMode::Latency, false, true, true, false),
        (RoutingMode::Adaptive, false, false, true, true),
        (RoutingMode::Single, true, false, true, false),
        (RoutingMode::Single, false, true, false, true),
    ];
    for (mode, gl, ge, el, ee) in table {
        let mut w = two_members();
        w.route_mut().routing_mode = mode;
        w.settings.latency_aware_enabled = gl;
        w.settings.error_aware_enabled = ge;
        let (_, json, _) = decide!(w, constraint(), "m", &mut SplitMix64::new(1));
        assert_eq!(json["strategy"]["latency_aware"], el, "{mode:?} {gl} {ge}");
        assert_eq!(json["strategy"]["error_aware"], ee, "{mode:?} {gl} {ge}");
    }
}

#[test]
fn concurrency_factor_idle_busy_and_at_limit() {
    let mut w = World::one_route(vec![
        member(1, 1, 0, 1),
        member(2, 2, 0, 1),
        member(3, 3, 0, 1),
    ]);
    w.channel_mut(1).max_concurrency = Some(10);
    w.channel_mut(2).max_concurrency = Some(10);
    w.health.in_flight.insert(1, 4); // busy: 0.6
    w.health.in_flight.insert(2, 12); // over the limit: 0.01
    let snap = w.snapshot();
    let d = select(
        &snap,
        &w.health,
        &constraint(),
        "m",
        NOW,
        &mut SplitMix64::new(1),
    );
    let cf = |id| d.candidate(id).unwrap().concurrency_factor;
    assert!(close(cf(1), 0.6) && close(cf(2), 0.01) && close(cf(3), 1.0));
    // Probabilities follow score x concurrency factor.
    let p = |id| d.candidate(id).unwrap().probability;
    let total = 0.6 + 0.01 + 1.0;
    assert!(close(p(1), 0.6 / total) && close(p(2), 0.01 / total) && close(p(3), 1.0 / total));
}

#[test]
fn concurrency_uses_the_default_limit_of_64() {
    let mut w = two_members();
    w.health.in_flight.insert(1, 16);
    let snap = w.snapshot();
    let d = select(
        &snap,
        &w.health,
        &constraint(),
        "m",
        NOW,
        &mut SplitMix64::new(1),
    );
    assert!(close(d.candidate(1).unwrap().concurrency_factor, 0.75));
}

#[test]
fn explained_score_never_includes_the_concurrency_factor() {
    let mut w = two_members();
    w.member_mut(1).weight = 8;
    w.health.in_flight.insert(1, 63);
    let (_, _, score) = factors(&w, 1);
    assert!(close(score, 8.0));
}

#[test]
fn concurrency_awareness_can_be_switched_off() {
    let mut w = two_members();
    w.settings.concurrency_aware_enabled = false;
    w.health.in_flight.insert(1, 1_000);
    let snap = w.snapshot();
    let d = select(
        &snap,
        &w.health,
        &constraint(),
        "m",
        NOW,
        &mut SplitMix64::new(1),
    );
    assert!(close(d.candidate(1).unwrap().probability, 0.5));
}

// ---------------------------------------------------------------- §2.5 health keys

#[test]
fn health_is_keyed_by_channel_and_upstream_model_so_aliases_score_apart() {
    let mut a = member(1, 1, 0, 1);
    a.upstream_model = "glm-5".into();
    let mut b = member(2, 1, 0, 1);
    b.upstream_model = "cn:glm-5".into();
    let mut w = World::one_route(vec![a, b]);
    w.route_mut().routing_mode = RoutingMode::Latency;
    w.latency(1, "glm-5", 3000.0);
    w.latency(1, "cn:glm-5", 0.0);
    let (lf1, _, _) = factors(&w, 1);
    let (lf2, _, _) = factors(&w, 2);
    assert!(close(lf1, 0.5) && close(lf2, 1.0));
}

// ---------------------------------------------------------------- §2.6 canary

fn canary_world() -> World {
    let mut w = World::one_route(vec![member(1, 1, 0, 1), member(2, 2, 0, 1)]);
    w.member_mut(2).canary = true;
    w.settings.stable_first_enabled = true;
    w.settings.stable_first_denominator = 4;
    w
}

#[test]
fn canary_draw_hit_selects_in_the_canary_pool() {
    let w = canary_world();
    // next_u64 % 4 == 0 is a hit; the following draw is the roulette.
    let (sel, json, _) = decide!(w, constraint(), "m", &mut Scripted::new(&[8, 0]));
    assert_eq!(sel, Some(2));
    assert_eq!(json["canary"]["pool"], "canary");
    assert_eq!(json["canary"]["drawn"], true);
}

#[test]
fn canary_draw_miss_selects_in_the_stable_pool() {
    let w = canary_world();
    let (sel, json, _) = decide!(w, constraint(), "m", &mut Scripted::new(&[9, 0]));
    assert_eq!(sel, Some(1));
    assert_eq!(json["canary"]["pool"], "stable");
}

#[test]
fn canary_share_is_one_over_n() {
    let w = canary_world();
    let counts = histogram(&w, &constraint(), 40_000);
    let share = counts[&2] as f64 / 40_000.0;
    assert!((share - 0.25).abs() < 0.015, "{counts:?}");
    let snap = w.snapshot();
    let d = select(
        &snap,
        &w.health,
        &constraint(),
        "m",
        NOW,
        &mut SplitMix64::new(1),
    );
    assert!(close(d.candidate(2).unwrap().probability, 0.25));
    assert!(close(d.candidate(1).unwrap().probability, 0.75));
}

/// Each pool keeps the route's strategy: weights (and, in latency mode, latency) decide inside
/// the stable pool and inside the canary pool, not a uniform pick.
#[test]
fn both_canary_pools_apply_their_strategy() {
    let mut w = World::one_route(vec![
        member(1, 1, 0, 1),
        member(2, 2, 0, 9),
        member(3, 3, 0, 1),
        member(4, 4, 0, 3),
    ]);
    w.member_mut(3).canary = true;
    w.member_mut(4).canary = true;
    w.settings.stable_first_enabled = true;
    w.settings.stable_first_denominator = 4;
    let n = 80_000;
    let counts = histogram(&w, &constraint(), n);
    for (id, want) in [
        (1, 0.75 * 0.1),
        (2, 0.75 * 0.9),
        (3, 0.25 * 0.25),
        (4, 0.25 * 0.75),
    ] {
        let share = counts.get(&id).copied().unwrap_or(0) as f64 / n as f64;
        assert!(
            (share - want).abs() < 0.015,
            "member {id}: {share} ({counts:?})"
        );
    }

    // Latency mode, equal weights: the slower member of each pool gets the smaller share.
    for id in 1..=4 {
        w.member_mut(id).weight = 1;
    }
    w.route_mut().routing_mode = RoutingMode::Latency;
    w.latency(1, "up-1", 3000.0); // factor 0.5 against 1.0
    w.latency(3, "up-3", 9000.0); // factor 0.25 against 1.0
    let counts = histogram(&w, &constraint(), n);
    for (id, want) in [
        (1, 0.75 / 3.0),
        (2, 0.75 * 2.0 / 3.0),
        (3, 0.25 * 0.2),
        (4, 0.25 * 0.8),
    ] {
        let share = counts.get(&id).copied().unwrap_or(0) as f64 / n as f64;
        assert!(
            (share - want).abs() < 0.015,
            "member {id}: {share} ({counts:?})"
        );
    }
}

#[test]
fn empty_canary_pool_selects_stable_and_empty_stable_pool_selects_canary() {
    let mut w = canary_world();
    w.member_mut(2).enabled = false;
    let (sel, json, _) = decide!(w, constraint(), "m", &mut Scripted::new(&[0, 0]));
    assert_eq!(
        (sel, json["canary"]["pool"].clone()),
        (Some(1), "stable".into())
    );
    assert_eq!(json["canary"]["drawn"], false);

    let mut w = canary_world();
    w.member_mut(1).enabled = false;
    let (sel, json, _) = decide!(w, constraint(), "m", &mut Scripted::new(&[1, 0]));
    assert_eq!(
        (sel, json["canary"]["pool"].clone()),
        (Some(2), "canary".into())
    );
}

#[test]
fn canary_denominator_of_one_or_less_disables_the_draw() {
    for n in [0, 1] {
        let mut w = canary_world();
        w.route_mut().stable_first_denominator = Some(n);
        let (_, json, _) = decide!(w, constraint(), "m", &mut SplitMix64::new(3));
        assert_eq!(json["canary"]["enabled"], false, "N = {n}");
        assert!(json["canary"]["pool"].is_null());
    }
}

#[test]
fn canary_defaults_off_with_denominator_25_and_route_overrides_apply() {
    let s = Settings::default();
    assert!(!s.stable_first_enabled);
    assert_eq!(s.stable_first_denominator, 25);

    let mut w = canary_world();
    w.settings.stable_first_enabled = false;
    let (_, json, _) = decide!(w, constraint(), "m", &mut SplitMix64::new(3));
    assert_eq!(json["canary"]["enabled"], false, "global off");
    w.route_mut().stable_first = Some(true);
    w.route_mut().stable_first_denominator = Some(2);
    let (_, json, _) = decide!(w, constraint(), "m", &mut SplitMix64::new(3));
    assert_eq!(json["canary"]["enabled"], true, "route on");
    assert_eq!(json["canary"]["denominator"], 2);

    let mut w = canary_world();
    w.route_mut().stable_first = Some(false);
    let (_, json, _) = decide!(w, constraint(), "m", &mut SplitMix64::new(3));
    assert_eq!(
        json["canary"]["enabled"], false,
        "route off beats global on"
    );
}

#[test]
fn promoted_canary_joins_the_stable_pool() {
    let mut w = canary_world();
    w.health.canaries_promoted.push(2);
    let snap = w.snapshot();
    let d = select(
        &snap,
        &w.health,
        &constraint(),
        "m",
        NOW,
        &mut SplitMix64::new(1),
    );
    assert!(!d.candidate(2).unwrap().canary);
    assert!(close(d.candidate(2).unwrap().probability, 0.5));
}

// ---------------------------------------------------------------- §2.7 stickiness

fn sticky_world() -> World {
    let mut w = World::one_route(vec![member(1, 1, 10, 1), member(2, 2, 0, 1)]);
    w.settings.sticky_enabled = true;
    w.health.bind(
        1,
        "s1",
        StickyBinding {
            member_id: 2,
            expires_at: NOW + 60_000,
        },
    );
    w
}

fn session(key: &str) -> SelectionConstraint {
    SelectionConstraint {
        session_key: Some(key.into()),
        ..constraint()
    }
}

#[test]
fn sticky_binding_is_used_even_from_a_lower_tier() {
    let w = sticky_world();
    let (sel, json, _) = decide!(w, session("s1"), "m", &mut SplitMix64::new(1));
    assert_eq!(sel, Some(2));
    assert_eq!(json["sticky"]["state"], "hit");
    assert_eq!(json["via"], "sticky");
}

#[test]
fn sticky_binding_escapes_with_reasons_when_ineligible() {
    let mut w = sticky_world();
    w.cool(2, NOW + 1_000);
    let (sel, json, _) = decide!(w, session("s1"), "m", &mut SplitMix64::new(1));
    assert_eq!(sel, Some(1));
    assert_eq!(json["sticky"]["state"], "escaped");
    assert_eq!(
        json["sticky"]["reasons"],
        serde_json::json!(["cooling_down"])
    );
    assert_eq!(json["sticky"]["in_pool"], true);
}

#[test]
fn sticky_never_widens_the_candidate_pool() {
    let mut w = sticky_world();
    w.member_mut(2).group_name = "vip".into();
    let (sel, json, _) = decide!(w, session("s1"), "m", &mut SplitMix64::new(1));
    assert_eq!(sel, Some(1), "member 2 is in another group");
    assert_eq!(json["sticky"]["state"], "escaped");
    assert_eq!(json["sticky"]["in_pool"], false);
}

#[test]
fn expired_sticky_binding_is_ignored() {
    let mut w = sticky_world();
    w.health.bind(
        1,
        "s1",
        StickyBinding {
            member_id: 2,
            expires_at: NOW,
        },
    );
    let (sel, json, _) = decide!(w, session("s1"), "m", &mut SplitMix64::new(1));
    assert_eq!(sel, Some(1));
    assert_eq!(json["sticky"]["state"], "expired");
}

#[test]
fn sticky_route_override_unset_true_false() {
    // (global, route override) -> used
    for (global, route_override, used) in [
        (true, None, true),
        (false, None, false),
        (true, Some(false), false),
        (false, Some(true), true),
    ] {
        let mut w = sticky_world();
        w.settings.sticky_enabled = global;
        w.route_mut().sticky_session = route_override;
        let sel = chosen(&w, &session("s1"), 1);
        assert_eq!(
            sel == Some(2),
            used,
            "global {global}, route {route_override:?}"
        );
    }
}

#[test]
fn sticky_is_not_used_for_pinned_requests() {
    let w = sticky_world();
    let c = SelectionConstraint {
        pinned_member: Some(1),
        ..session("s1")
    };
    let (sel, json, _) = decide!(w, c, "m", &mut SplitMix64::new(1));
    assert_eq!(sel, Some(1));
    assert_eq!(json["sticky"]["state"], "pinned");
}

// ---------------------------------------------------------------- §2.9 cooling fallback

#[test]
fn cooling_fallback_prefers_priority_then_earliest_expiry_then_member_id() {
    let mut w = World::one_route(vec![
        member(1, 1, 0, 1),
        member(2, 2, 5, 1),
        member(3, 3, 5, 1),
        member(4, 4, 5, 1),
    ]);
    w.cool(1, NOW + 10);
    w.cool(2, NOW + 3_000);
    w.cool(3, NOW + 2_000);
    w.cool(4, NOW + 2_000);
    let (sel, json, _) = decide!(w, constraint(), "m", &mut SplitMix64::new(1));
    assert_eq!(
        sel,
        Some(3),
        "priority 5 beats 0; 2000 beats 3000; id 3 beats 4"
    );
    assert_eq!(json["via"], "cooling_fallback");
}

#[test]
fn cooling_fallback_takes_only_cooling_only_candidates() {
    let mut w = World::one_route(vec![member(1, 1, 9, 1), member(2, 2, 0, 1)]);
    w.cool(1, NOW + 10);
    w.member_mut(1).enabled = false;
    w.cool(2, NOW + 99);
    assert_eq!(chosen(&w, &constraint(), 1), Some(2));
    w.member_mut(2).weight = -1;
    let (sel, json, outcome) = decide!(w, constraint(), "m", &mut SplitMix64::new(1));
    assert_eq!((sel, outcome), (None, Outcome::NoEligibleMember));
    assert_eq!(json["outcome"], "no_eligible_member");
}

// ---------------------------------------------------------------- §2.10 constraints

#[test]
fn prefer_channel_finishes_its_variants_in_member_order_within_the_top_tier() {
    let w = World::one_route(vec![
        member(1, 1, 10, 100),
        member(2, 2, 10, 1),
        member(3, 2, 10, 1),
        member(4, 2, 0, 1),
    ]);
    let mut c = SelectionConstraint {
        prefer_channel: Some(2),
        attempted: vec![],
        ..constraint()
    };
    let (sel, json, _) = decide!(w, c, "m", &mut SplitMix64::new(1));
    assert_eq!(sel, Some(2));
    assert_eq!(json["via"], "preferred_channel");
    c.attempted = vec![2];
    assert_eq!(chosen(&w, &c, 1), Some(3));
    c.attempted = vec![2, 3];
    // Member 4 of the preferred channel is in a lower tier: prefer no longer applies.
    assert_eq!(chosen(&w, &c, 1), Some(1));
}

#[test]
fn member_pin_beats_channel_pin() {
    let w = World::one_route(vec![
        member(1, 1, 0, 1),
        member(2, 2, 0, 1),
        member(3, 2, 0, 1),
    ]);
    let c = SelectionConstraint {
        pinned_member: Some(1),
        pinned_channel: Some(2),
        ..constraint()
    };
    let (sel, json, _) = decide!(w, c, "m", &mut SplitMix64::new(1));
    assert_eq!(sel, Some(1));
    assert_eq!(json["via"], "pinned");
    let c = SelectionConstraint {
        pinned_channel: Some(2),
        ..constraint()
    };
    let counts = histogram(&w, &c, 200);
    assert_eq!(counts.keys().copied().collect::<Vec<_>>(), [2, 3]);
}

#[test]
fn pin_beats_single_member_mode() {
    let mut w = two_members();
    w.route_mut().routing_mode = RoutingMode::Single;
    w.route_mut().single_member_id = Some(2);
    let c = SelectionConstraint {
        pinned_member: Some(1),
        ..constraint()
    };
    let (sel, json, _) = decide!(w, c, "m", &mut SplitMix64::new(1));
    assert_eq!(sel, Some(1));
    assert_eq!(json["candidates"][0]["reasons"], serde_json::json!([]));
}

#[test]
fn single_mode_with_a_deleted_pin_behaves_as_auto() {
    let mut w = two_members();
    w.route_mut().routing_mode = RoutingMode::Single;
    w.route_mut().single_member_id = Some(99);
    assert!(reasons(&w, &constraint(), 1).is_empty());
    let counts = histogram(&w, &constraint(), 1_000);
    assert_eq!(counts.len(), 2);
    let (_, json, _) = decide!(w, constraint(), "m", &mut SplitMix64::new(1));
    assert_eq!(
        json["budget"]["retry_times"], 2,
        "no live pin: retries unchanged"
    );
}

#[test]
fn live_single_mode_zeroes_cross_channel_retries() {
    let mut w = two_members();
    w.route_mut().routing_mode = RoutingMode::Single;
    w.route_mut().single_member_id = Some(1);
    let (_, json, _) = decide!(w, constraint(), "m", &mut SplitMix64::new(1));
    assert_eq!(json["budget"]["retry_times"], 0);
    assert_eq!(
        json["budget"]["channel_retry_times"], 1,
        "credential rotation stays"
    );
}

#[test]
fn route_overrides_and_team_caps_shape_the_retry_budget() {
    let mut w = two_members();
    w.route_mut().retry_times = Some(5);
    w.route_mut().channel_retry_times = Some(3);
    w.route_mut().cooldown_seconds = Some(7);
    let snap = w.snapshot();
    let d = select(
        &snap,
        &w.health,
        &constraint(),
        "m",
        NOW,
        &mut SplitMix64::new(1),
    );
    assert_eq!(
        d.budget,
        Some(RetryBudget {
            retry_times: 5,
            channel_retry_times: 3,
            cross_channel_failover: true,
            cooldown_seconds: 7
        })
    );

    let mut t = team(9, &["m"], &[]);
    t.retry_limit = Some(1);
    w.teams.push(t);
    let mut t = team(10, &["m"], &[]);
    t.disable_failover = true;
    w.teams.push(t);
    let snap = w.snapshot();
    let capped = select(
        &snap,
        &w.health,
        &SelectionConstraint {
            team: Some(9),
            ..constraint()
        },
        "m",
        NOW,
        &mut SplitMix64::new(1),
    );
    assert_eq!(capped.budget.unwrap().retry_times, 1);
    let off = select(
        &snap,
        &w.health,
        &SelectionConstraint {
            team: Some(10),
            ..constraint()
        },
        "m",
        NOW,
        &mut SplitMix64::new(1),
    );
    let budget = off.budget.unwrap();
    assert_eq!(
        (
            budget.retry_times,
            budget.cross_channel_failover,
            budget.cross_channel_rounds()
        ),
        (0, false, 0)
    );
}

#[test]
fn global_cross_channel_switch_off_keeps_the_saved_retry_times() {
    let mut w = two_members();
    w.settings.cross_channel_failover_enabled = false;
    let snap = w.snapshot();
    let d = select(
        &snap,
        &w.health,
        &constraint(),
        "m",
        NOW,
        &mut SplitMix64::new(1),
    );
    let b = d.budget.unwrap();
    assert_eq!(
        (
            b.retry_times,
            b.cross_channel_failover,
            b.cross_channel_rounds()
        ),
        (2, false, 0)
    );
}

// ---------------------------------------------------------------- §2.11 determinism

#[test]
fn same_inputs_and_seed_give_the_same_decision() {
    let mut w = World::one_route(
        (1..=12)
            .map(|i| member(i, i % 4 + 1, (i % 3) as i32, i as i32))
            .collect(),
    );
    w.route_mut().routing_mode = RoutingMode::Adaptive;
    w.settings.stable_first_enabled = true;
    w.member_mut(5).canary = true;
    w.latency(2, "up-5", 250.0);
    w.propensity(3, "up-6", 0.5);
    for seed in 0..200 {
        let (a, ja, _) = decide!(w, constraint(), "m", &mut SplitMix64::new(seed));
        let (b, jb, _) = decide!(w, constraint(), "m", &mut SplitMix64::new(seed));
        assert_eq!(a, b);
        assert_eq!(ja, jb);
    }
}

// ---------------------------------------------------------------- explanation shape

#[test]
fn explanation_carries_every_field_explain_promises() {
    let mut w = two_members();
    w.member_mut(2).enabled = false;
    let (_, json, _) = decide!(w, constraint(), "m", &mut SplitMix64::new(1));
    for key in [
        "model",
        "route",
        "outcome",
        "requested_group",
        "route_group",
        "group_fallback",
        "tier",
        "strategy",
        "budget",
        "candidates",
        "sticky",
        "canary",
    ] {
        assert!(json.get(key).is_some(), "missing {key}: {json}");
    }
    let c = &json["candidates"][1];
    for key in [
        "member_id",
        "channel_id",
        "channel",
        "upstream_model",
        "group",
        "priority",
        "weight",
        "eligible",
        "reasons",
        "latency_factor",
        "error_factor",
        "score",
        "probability",
    ] {
        assert!(c.get(key).is_some(), "candidate missing {key}: {c}");
    }
    assert_eq!(c["eligible"], false);
    assert_eq!(c["reasons"], serde_json::json!(["member_disabled"]));
    assert_eq!(json["candidates"][0]["probability"], 1.0);
    assert_eq!(json["route"]["model_pattern"], "m");
}

#[test]
fn explanation_never_contains_secrets() {
    let w = two_members();
    let (_, json, _) = decide!(w, constraint(), "m", &mut SplitMix64::new(1));
    assert!(!json.to_string().contains("sk-secret"));
    let snap = w.snapshot();
    assert!(!format!("{snap:?}").contains("sk-secret"));
}

#[test]
fn probabilities_of_the_used_tier_sum_to_one() {
    let w = World::one_route(vec![
        member(1, 1, 1, 3),
        member(2, 2, 1, 5),
        member(3, 3, 0, 9),
    ]);
    let snap = w.snapshot();
    let d = select(
        &snap,
        &w.health,
        &constraint(),
        "m",
        NOW,
        &mut SplitMix64::new(1),
    );
    let sum: f64 = d.candidates.iter().map(|c| c.probability).sum();
    assert!(close(sum, 1.0));
    assert_eq!(d.candidate(3).unwrap().probability, 0.0);
}

#[test]
fn bad_health_data_never_breaks_selection() {
    let mut w = two_members();
    w.route_mut().routing_mode = RoutingMode::Adaptive;
    w.latency(1, "up-1", f64::NAN);
    w.propensity(1, "up-1", f64::INFINITY);
    w.latency(2, "up-2", -1.0);
    w.propensity(2, "up-2", f64::NAN);
    for seed in 0..50 {
        assert!(chosen(&w, &constraint(), seed).is_some());
    }
}

// ---------------------------------------------------------------- §4 recovering (slow start)

/// Two equal members on channels 1 and 2; channel 1 recovering since `NOW - elapsed_ms` over a
/// 60 s window.
fn recovering_world(elapsed_ms: u64) -> World {
    let mut w = World::one_route(vec![member(1, 1, 0, 1), member(2, 2, 0, 1)]);
    let since = NOW - elapsed_ms;
    w.health.recovering.insert(
        1,
        Recovering {
            since,
            until: since + 60_000,
        },
    );
    w
}

fn candidate_json(w: &World, id: MemberId) -> serde_json::Value {
    let (_, json, _) = decide!(w, constraint(), "m", &mut SplitMix64::new(1));
    json["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["member_id"] == id)
        .unwrap()
        .clone()
}

#[test]
fn recovering_channel_starts_at_the_initial_share_of_its_weight() {
    let w = recovering_world(0);
    let c = candidate_json(&w, 1);
    assert_eq!(c["recovering"], true);
    assert!(close(c["ramp_factor"].as_f64().unwrap(), 0.1), "{c}");
    // Weights 1 × 0.1 against 1: probability 0.1 / 1.1.
    assert!(close(c["probability"].as_f64().unwrap(), 0.1 / 1.1), "{c}");
    // The explained score stays weight × latency × error.
    assert!(close(c["score"].as_f64().unwrap(), 1.0), "{c}");
    let other = candidate_json(&w, 2);
    assert_eq!(other["recovering"], false);
    assert_eq!(other["ramp_factor"], 1.0);
}

#[test]
fn recovering_ramp_is_linear_over_the_window() {
    let c = candidate_json(&recovering_world(30_000), 1);
    // 0.1 + 0.9 × 0.5
    assert!(close(c["ramp_factor"].as_f64().unwrap(), 0.55), "{c}");
    assert!(
        close(c["probability"].as_f64().unwrap(), 0.55 / 1.55),
        "{c}"
    );
}

#[test]
fn recovering_ends_with_full_weight_after_the_window() {
    let c = candidate_json(&recovering_world(60_000), 1);
    assert_eq!(c["recovering"], false);
    assert_eq!(c["ramp_factor"], 1.0);
    assert!(close(c["probability"].as_f64().unwrap(), 0.5), "{c}");
}

#[test]
fn recovering_initial_percent_is_a_setting() {
    let mut w = recovering_world(0);
    w.settings.slow_start_initial_percent = 50;
    let c = candidate_json(&w, 1);
    assert!(close(c["ramp_factor"].as_f64().unwrap(), 0.5), "{c}");
}

#[test]
fn slow_start_zero_seconds_turns_the_ramp_off() {
    let mut w = recovering_world(0);
    w.settings.slow_start_seconds = 0;
    let c = candidate_json(&w, 1);
    assert_eq!(c["recovering"], false);
    assert_eq!(c["ramp_factor"], 1.0);
}

#[test]
fn recovering_ramp_obeys_fault_protection() {
    let mut w = recovering_world(0);
    w.settings.fault_protection_enabled = false;
    assert_eq!(candidate_json(&w, 1)["ramp_factor"], 1.0);
}

#[test]
fn recovering_share_of_traffic_follows_the_ramp() {
    let w = recovering_world(0);
    let n = 20_000;
    let counts = histogram(&w, &constraint(), n);
    let share = counts.get(&1).copied().unwrap_or(0) as f64 / n as f64;
    assert!(
        (share - 0.1 / 1.1).abs() < 0.015,
        "recovering member share {share} ({counts:?})"
    );
}

#[test]
fn recovering_alone_in_its_tier_still_serves() {
    // The ramp scales a share relative to the tier; alone, the channel takes what comes.
    let mut w = World::one_route(vec![member(1, 1, 0, 1)]);
    w.health.recovering.insert(
        1,
        Recovering {
            since: NOW,
            until: NOW + 60_000,
        },
    );
    assert_eq!(chosen(&w, &constraint(), 7), Some(1));
}

#[test]
fn latency_factor_applies_only_in_latency_aware_modes_and_to_finite_samples() {
    // Error-aware only (auto mode, global error switch): the latency sample is not used.
    let mut w = two_members();
    w.settings.error_aware_enabled = true;
    w.latency(1, "up-1", 3000.0);
    let (lf, _, _) = factors(&w, 1);
    assert!(close(lf, 1.0), "{lf}");
    // Latency mode with an infinite sample: treated as no sample.
    let mut w = two_members();
    w.route_mut().routing_mode = RoutingMode::Latency;
    w.latency(1, "up-1", f64::INFINITY);
    let (lf, _, score) = factors(&w, 1);
    assert!(close(lf, 1.0) && close(score, 1.0), "{lf} {score}");
}

#[test]
fn concurrency_factor_is_neutral_when_awareness_is_off() {
    let mut w = two_members();
    w.settings.concurrency_aware_enabled = false;
    w.health.in_flight.insert(1, 32);
    let snap = w.snapshot();
    let d = select(
        &snap,
        &w.health,
        &constraint(),
        "m",
        NOW,
        &mut SplitMix64::new(1),
    );
    assert_eq!(d.candidate(1).unwrap().concurrency_factor, 1.0);
    assert!(!d.strategy.unwrap().concurrency_aware);
}

#[test]
fn the_roulette_walks_only_the_drawn_pool_when_pools_share_a_tier() {
    // Canary, stable, canary in one tier: the stable member sits inside the canary block.
    let mut w = World::one_route(vec![
        member(1, 1, 0, 1),
        member(2, 2, 0, 1),
        member(3, 3, 0, 1),
    ]);
    w.member_mut(1).canary = true;
    w.member_mut(3).canary = true;
    w.settings.stable_first_enabled = true;
    w.settings.stable_first_denominator = 4;
    // 0 % 4 == 0: the canary pool; then the highest roulette draw, past member 1's share.
    let (sel, json, _) = decide!(w, constraint(), "m", &mut Scripted::new(&[0, u64::MAX]));
    assert_eq!(json["canary"]["pool"], "canary");
    assert_eq!(sel, Some(3), "the stable member 2 is not in the drawn pool");
}

#[test]
fn a_roulette_draw_on_a_boundary_goes_to_the_next_candidate() {
    // Two equal members: probabilities 0.5 and 0.5. A draw of exactly 0.5 is past the first
    // candidate's interval [0, 0.5), so it lands in the second's [0.5, 1).
    let w = two_members();
    let half = 1u64 << 63; // next_f64() == 0.5
    let (sel, _, _) = decide!(w, constraint(), "m", &mut Scripted::new(&[half]));
    assert_eq!(sel, Some(2));
    let (sel, _, _) = decide!(w, constraint(), "m", &mut Scripted::new(&[half - 2048]));
    assert_eq!(sel, Some(1), "just under 0.5");
}

#[test]
fn an_exact_pick_gives_the_chosen_member_all_the_probability() {
    // Sticky hit, pin and cooling fallback all choose one member outright.
    let w = sticky_world();
    let (sel, json, _) = decide!(w, session("s1"), "m", &mut SplitMix64::new(1));
    assert_eq!(sel, Some(2));
    let probability = |json: &serde_json::Value, id: i64| {
        json["candidates"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["member_id"] == id)
            .unwrap()["probability"]
            .as_f64()
            .unwrap()
    };
    assert_eq!((probability(&json, 2), probability(&json, 1)), (1.0, 0.0));

    let mut w = two_members();
    w.cool(1, NOW + 10);
    w.cool(2, NOW + 20);
    let (sel, json, _) = decide!(w, constraint(), "m", &mut SplitMix64::new(1));
    assert_eq!(sel, Some(1));
    assert_eq!(json["via"], "cooling_fallback");
    assert_eq!((probability(&json, 1), probability(&json, 2)), (1.0, 0.0));
}

#[test]
fn a_chat_completions_only_member_is_skipped_for_what_chat_completions_cannot_express() {
    let mut w = two_members();
    w.channel_mut(1).responses_api = false;
    let responses_only = SelectionConstraint {
        needs: RequestNeeds {
            unsupported_providers: CHAT_COMPLETIONS_ONLY_BIT,
            ..Default::default()
        },
        ..constraint()
    };
    assert_eq!(reasons(&w, &responses_only, 1), ["protocol_unsupported"]);
    assert!(reasons(&w, &responses_only, 2).is_empty());
    for seed in 0..20 {
        assert_eq!(chosen(&w, &responses_only, seed), Some(2));
    }
    // What OpenAI's protocol cannot express, it cannot either.
    let not_openai = SelectionConstraint {
        needs: RequestNeeds {
            unsupported_providers: Provider::Openai.protocol_bit(),
            ..Default::default()
        },
        ..constraint()
    };
    assert_eq!(reasons(&w, &not_openai, 1), ["protocol_unsupported"]);
    assert_eq!(reasons(&w, &not_openai, 2), ["protocol_unsupported"]);
    // The flag means nothing on another protocol's channel.
    w.channel_mut(1).provider = Provider::Anthropic;
    assert!(reasons(&w, &responses_only, 1).is_empty());
}
