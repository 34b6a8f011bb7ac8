//! The dry run's comparison (also a config plan's traffic): every (model, group, team) either
//! snapshot knows goes through the engine's `select` on both, with the same health view and seed,
//! and only what differs is reported.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use switchyard_engine::{
    select, Decision, HealthView, Outcome, SelectionConstraint, Snapshot, SplitMix64, DEFAULT_GROUP,
};
use utoipa::ToSchema;

use super::moves::{token_moves, TokenMove};

/// At most this many (model, group, team) selections are compared per snapshot; past it the
/// answer says `truncated`.
pub const MAX_SELECTIONS: usize = 5_000;

/// One member's selection probability in one (model, group, team), before and after.
#[derive(Debug, Serialize, ToSchema, PartialEq)]
pub struct MemberMove {
    pub member_id: i64,
    pub channel_id: i64,
    pub upstream_model: String,
    /// `null`: not a candidate in that snapshot.
    pub before: Option<f64>,
    pub after: Option<f64>,
    pub reasons_before: Vec<String>,
    pub reasons_after: Vec<String>,
}

/// Selection for one (model, group, team) that the change would move.
#[derive(Debug, Serialize, ToSchema)]
pub struct AffectedSelection {
    pub model: String,
    pub group: String,
    /// `null`: a token without a team.
    pub team_id: Option<i64>,
    pub route_before: Option<i64>,
    pub route_after: Option<i64>,
    /// `selected`, `model_not_found`, `model_not_allowed` or `no_eligible_member`.
    pub outcome_before: String,
    pub outcome_after: String,
    /// Served before, would fail after.
    pub newly_failing: bool,
    pub members: Vec<MemberMove>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct UnreachableMember {
    pub member_id: i64,
    pub route_id: i64,
    pub channel_id: i64,
    pub upstream_model: String,
    /// The change deletes it (rather than leaving it with no chance of selection).
    pub deleted: bool,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ModelMove {
    pub model: String,
    pub route_before: Option<i64>,
    pub route_after: Option<i64>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct NewlyFailing {
    pub model: String,
    pub group: String,
    pub team_id: Option<i64>,
    pub outcome: String,
}

/// What a change of snapshot moves: the dry run's comparison, also a config plan's traffic.
pub(crate) struct Report {
    pub(crate) affected: Vec<AffectedSelection>,
    pub(crate) unreachable: Vec<UnreachableMember>,
    pub(crate) unresolved: Vec<ModelMove>,
    pub(crate) rerouted: Vec<ModelMove>,
    pub(crate) newly_failing: Vec<NewlyFailing>,
    pub(crate) tokens: Vec<TokenMove>,
    pub(crate) truncated: bool,
}

/// The (model, group, team) selections to compare: every route pattern of either snapshot as a
/// model name, each with `default`, every group its members use and every token's group, for no
/// team and for every team.
fn selections(before: &Snapshot, after: &Snapshot) -> Vec<(String, String, Option<i64>)> {
    let mut models: BTreeSet<&str> = BTreeSet::new();
    let mut token_groups: BTreeSet<String> = BTreeSet::new();
    let mut teams: BTreeSet<Option<i64>> = BTreeSet::from([None]);
    for snapshot in [before, after] {
        for route in snapshot.routes() {
            models.insert(route.model_pattern.as_str());
        }
        for token in snapshot.tokens() {
            token_groups.insert(
                switchyard_engine::model::normalize_group(token.route_group_name.as_deref())
                    .to_owned(),
            );
        }
        teams.extend(snapshot.teams().map(|t| Some(t.id)));
    }
    let mut out = Vec::new();
    for model in models {
        let mut groups: BTreeSet<String> = token_groups.clone();
        groups.insert(DEFAULT_GROUP.to_owned());
        for snapshot in [before, after] {
            if let Some(route) = snapshot.resolve_route(model) {
                groups.extend(route.members.iter().map(|m| m.group_name.clone()));
            }
        }
        for group in groups {
            for team in &teams {
                out.push((model.to_owned(), group.clone(), *team));
            }
        }
    }
    out
}

struct Summary {
    route: Option<i64>,
    outcome: &'static str,
    /// member id → (channel, upstream model, probability, reasons)
    members: BTreeMap<i64, (i64, String, f64, Vec<String>)>,
}

fn outcome_name(outcome: &Outcome) -> &'static str {
    match outcome {
        Outcome::Selected { .. } => "selected",
        Outcome::ModelNotFound => "model_not_found",
        Outcome::ModelNotAllowed => "model_not_allowed",
        Outcome::NoEligibleMember => "no_eligible_member",
    }
}

fn summarise(decision: &Decision<'_>) -> Summary {
    let members = decision
        .candidates
        .iter()
        .map(|c| {
            let reasons = c
                .reasons
                .iter()
                .filter_map(|r| serde_json::to_value(r).ok())
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect();
            let probability = if c.probability.is_finite() {
                c.probability
            } else {
                0.0
            };
            (
                c.member.id,
                (
                    c.member.channel_id,
                    c.member.upstream_model.clone(),
                    probability,
                    reasons,
                ),
            )
        })
        .collect();
    Summary {
        route: decision.route.map(|r| r.id),
        outcome: outcome_name(&decision.outcome),
        members,
    }
}

fn run(
    snapshot: &Snapshot,
    view: &dyn HealthView,
    model: &str,
    group: &str,
    team: Option<i64>,
    now_ms: u64,
) -> Summary {
    let constraint = SelectionConstraint {
        route_group: Some(group.to_owned()),
        team,
        ..SelectionConstraint::default()
    };
    // One fixed seed for both sides: a canary draw lands the same way before and after.
    let mut rng = SplitMix64::new(0x5eed);
    summarise(&select(
        snapshot,
        view,
        &constraint,
        model,
        now_ms,
        &mut rng,
    ))
}

const EPSILON: f64 = 1e-9;

impl Summary {
    /// The members with a chance of selection here.
    fn reachable(&self) -> impl Iterator<Item = i64> + '_ {
        self.members
            .iter()
            .filter(|(_, m)| m.2 > EPSILON)
            .map(|(id, _)| *id)
    }
}

pub(crate) fn compare(
    before: &Snapshot,
    after: &Snapshot,
    view: &dyn HealthView,
    now_ms: u64,
) -> Report {
    let mut all = selections(before, after);
    let truncated = all.len() > MAX_SELECTIONS;
    all.truncate(MAX_SELECTIONS);

    let mut affected = Vec::new();
    let mut newly_failing = Vec::new();
    // member id → had a chance somewhere (before), has one somewhere (after)
    let mut reachable_before: BTreeSet<i64> = BTreeSet::new();
    let mut reachable_after: BTreeSet<i64> = BTreeSet::new();
    for (model, group, team) in &all {
        let b = run(before, view, model, group, *team, now_ms);
        let a = run(after, view, model, group, *team, now_ms);
        reachable_before.extend(b.reachable());
        reachable_after.extend(a.reachable());
        let Some(selection) = affected_selection(model, group, *team, &b, &a) else {
            continue;
        };
        if selection.newly_failing {
            newly_failing.push(NewlyFailing {
                model: model.clone(),
                group: group.clone(),
                team_id: *team,
                outcome: selection.outcome_after.clone(),
            });
        }
        affected.push(selection);
    }
    let (unresolved, rerouted) = model_moves(before, after, &all);
    Report {
        affected,
        unreachable: unreachable(before, after, &reachable_before, &reachable_after),
        unresolved,
        rerouted,
        newly_failing,
        tokens: token_moves(before, after),
        truncated,
    }
}

/// One (model, group, team)'s selection before and after, when it moves: a route, an outcome
/// or any member's probability, reasons, channel or upstream model differs.
fn affected_selection(
    model: &str,
    group: &str,
    team: Option<i64>,
    b: &Summary,
    a: &Summary,
) -> Option<AffectedSelection> {
    let ids: BTreeSet<i64> = b.members.keys().chain(a.members.keys()).copied().collect();
    let mut moves = Vec::new();
    let mut changed = b.route != a.route || b.outcome != a.outcome;
    for id in ids {
        let (bm, am) = (b.members.get(&id), a.members.get(&id));
        let differs = match (bm, am) {
            (Some(x), Some(y)) => {
                (x.2 - y.2).abs() > EPSILON || x.3 != y.3 || x.0 != y.0 || x.1 != y.1
            }
            _ => true,
        };
        changed |= differs;
        let (channel_id, upstream_model) =
            am.or(bm).map(|m| (m.0, m.1.clone())).unwrap_or_default();
        moves.push(MemberMove {
            member_id: id,
            channel_id,
            upstream_model,
            before: bm.map(|m| m.2),
            after: am.map(|m| m.2),
            reasons_before: bm.map(|m| m.3.clone()).unwrap_or_default(),
            reasons_after: am.map(|m| m.3.clone()).unwrap_or_default(),
        });
    }
    if !changed {
        return None;
    }
    Some(AffectedSelection {
        model: model.to_owned(),
        group: group.to_owned(),
        team_id: team,
        route_before: b.route,
        route_after: a.route,
        outcome_before: b.outcome.to_owned(),
        outcome_after: a.outcome.to_owned(),
        newly_failing: b.outcome == "selected" && a.outcome != "selected",
        members: moves,
    })
}

/// The members that had a chance of selection somewhere before and have none after.
fn unreachable(
    before: &Snapshot,
    after: &Snapshot,
    reachable_before: &BTreeSet<i64>,
    reachable_after: &BTreeSet<i64>,
) -> Vec<UnreachableMember> {
    reachable_before
        .difference(reachable_after)
        .filter_map(|id| {
            let (route, member) = before.member(*id)?;
            Some(UnreachableMember {
                member_id: *id,
                route_id: route.id,
                channel_id: member.channel_id,
                upstream_model: member.upstream_model.clone(),
                deleted: after.member(*id).is_none(),
            })
        })
        .collect()
}

/// The compared models that resolve before and not after, and those that resolve to another
/// route (or newly resolve).
fn model_moves(
    before: &Snapshot,
    after: &Snapshot,
    all: &[(String, String, Option<i64>)],
) -> (Vec<ModelMove>, Vec<ModelMove>) {
    let mut unresolved = Vec::new();
    let mut rerouted = Vec::new();
    let models: BTreeSet<&str> = all.iter().map(|(m, _, _)| m.as_str()).collect();
    for model in models {
        let b = before.resolve_route(model).map(|r| r.id);
        let a = after.resolve_route(model).map(|r| r.id);
        let entry = ModelMove {
            model: model.to_owned(),
            route_before: b,
            route_after: a,
        };
        match (b, a) {
            (Some(_), None) => unresolved.push(entry),
            (x, y) if x != y => rerouted.push(entry),
            _ => {}
        }
    }
    (unresolved, rerouted)
}
