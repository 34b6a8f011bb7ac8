//! The selection engine (docs/src/concepts/routing.md): one pure function from (snapshot, health
//! view, constraint, now, rng) to a [`Decision`]. The proxy selects with it and explain serialises
//! its output.

use std::ops::Range;

use crate::constraint::{RequestNeeds, SelectionConstraint};
use crate::decision::{
    CanaryDraw, Candidate, Decision, Outcome, Pool, Reason, Reasons, RetryBudget, Sticky, Strategy,
    Via,
};
use crate::health::{clamp_unit, HealthRecord, HealthView, Recovering};
use crate::model::{
    normalize_group, Capabilities, Channel, ChannelId, ChannelStatus, Member, MemberId, Route,
    RouteMeta, RoutingMode, Snapshot, Team, UnixMillis, DEFAULT_GROUP,
};
use crate::pattern::wildcard_match;
use crate::rng::RandomSource;
use crate::settings::Settings;

/// Normalisation base of the latency factor: a 3 s channel keeps half its weight.
const LATENCY_BASE_MS: f64 = 3000.0;
/// Floor of the error factor: an unhealthy channel keeps a chance to prove it recovered.
const ERROR_FACTOR_FLOOR: f64 = 0.05;
/// Concurrency factor at or over the limit: traffic still spreads when everything is full.
const CONCURRENCY_FLOOR: f64 = 0.01;

/// Runs one selection. Never fails: every outcome, including "model not found", is a decision.
pub fn select<'s, H: HealthView + ?Sized>(
    snapshot: &'s Snapshot,
    health: &H,
    constraint: &SelectionConstraint,
    model: &str,
    now: UnixMillis,
    rng: &mut impl RandomSource,
) -> Decision<'s> {
    let model = model.trim();
    let mut decision = unresolved(model, constraint);
    let Some((route, meta)) = snapshot.resolve(model) else {
        return decision;
    };
    decision.route = Some(route);
    let team = match team_of(snapshot, constraint, model) {
        Ok(team) => team,
        Err(outcome) => {
            decision.outcome = outcome;
            return decision;
        }
    };

    let settings = &snapshot.settings;
    let single_pin = live_single_pin(route);
    let pinned = constraint.is_pinned();
    decision.budget = Some(retry_budget(settings, route, single_pin.is_some(), team));
    let strategy = resolve_strategy(settings, route.routing_mode);
    decision.strategy = Some(strategy);
    let filter_group = narrow_to_group(&mut decision, meta, pinned);

    // Aware modes read a health record per candidate: by slot when the view keeps its records
    // laid out for this snapshot, else by (channel, model) hash lookup.
    let aware = strategy.latency_aware || strategy.error_aware;
    let dense = if aware {
        health.dense_health(snapshot.health_slots())
    } else {
        None
    };
    let ctx = EvalContext {
        health,
        dense,
        constraint,
        settings,
        strategy,
        single_pin: if pinned { None } else { single_pin },
        now,
    };
    decision.candidates = ctx.candidates(snapshot, route, meta, filter_group, team);
    decision.outcome = choose(&ctx, route, &mut decision, rng);
    decision
}

/// The decision before the model is resolved: nothing found yet, the requested group named.
fn unresolved<'s>(model: &str, constraint: &SelectionConstraint) -> Decision<'s> {
    Decision {
        model: model.to_owned(),
        route: None,
        outcome: Outcome::ModelNotFound,
        requested_group: normalize_group(constraint.route_group.as_deref()).to_owned(),
        route_group: None,
        group_fallback: false,
        tier: None,
        strategy: None,
        canary: None,
        sticky: None,
        budget: None,
        candidates: Vec::new(),
    }
}

/// The request's team, if it has one: `Err` when the team was deleted or does not list this
/// model (such a team grants nothing).
fn team_of<'s>(
    snapshot: &'s Snapshot,
    constraint: &SelectionConstraint,
    model: &str,
) -> Result<Option<&'s Team>, Outcome> {
    match constraint.team {
        None => Ok(None),
        Some(id) => match snapshot.team(id) {
            Some(team) if team_allows_model(team, model) => Ok(Some(team)),
            _ => Err(Outcome::ModelNotAllowed),
        },
    }
}

/// The group narrowing of the candidate pool, written into the decision (the group used, and
/// whether that is a fallback from the requested one). A pin looks at the whole route (it names
/// a member or channel explicitly); otherwise the requested group, else `default`, else
/// everything. Answers the group every candidate must be in, `None` when no member needs the
/// test.
fn narrow_to_group<'s>(
    decision: &mut Decision<'s>,
    meta: &'s RouteMeta,
    pinned: bool,
) -> Option<&'s str> {
    let group_used = if pinned {
        None
    } else {
        narrow_group(&meta.groups, &decision.requested_group)
    };
    if !pinned {
        decision.group_fallback = group_used != Some(decision.requested_group.as_str());
    }
    // With one group in the route every member is in whichever group is used.
    let filter_group = group_used.filter(|_| meta.groups.len() > 1);
    decision.route_group = group_used.or(match meta.groups.as_slice() {
        [only] => Some(only.as_str()),
        _ => None,
    });
    filter_group
}

struct EvalContext<'a, 's, H: ?Sized> {
    health: &'a H,
    /// The view's records in this snapshot's slot order, when it keeps them so.
    dense: Option<&'a [HealthRecord]>,
    constraint: &'a SelectionConstraint,
    settings: &'s Settings,
    strategy: Strategy,
    /// The route's live single-member pin, unless a request pin beats it.
    single_pin: Option<MemberId>,
    now: UnixMillis,
}

impl<'s, H: HealthView + ?Sized> EvalContext<'_, 's, H> {
    /// The route's members that pass the silent filters (the group, a pin, the exclusions, the
    /// team's members), each evaluated, in tier order.
    fn candidates(
        &self,
        snapshot: &'s Snapshot,
        route: &'s Route,
        meta: &RouteMeta,
        filter_group: Option<&str>,
        team: Option<&Team>,
    ) -> Vec<Candidate<'s>> {
        let constraint = self.constraint;
        let filters = constraint.is_pinned()
            || team.is_some()
            || !constraint.excluded_members.is_empty()
            || !constraint.excluded_channels.is_empty();
        let pool: &[Member] = &route.members;
        let mut candidates = Vec::with_capacity(pool.len());
        for ((member, slot), health_slot) in
            pool.iter().zip(&meta.channel_slots).zip(&meta.health_slots)
        {
            let in_group = filter_group.is_none_or(|g| member.group_name == g);
            if in_group && (!filters || passes_silent_filters(member, constraint, team)) {
                let channel = slot.and_then(|slot| snapshot.channel_at(slot));
                candidates.push(self.evaluate(member, *health_slot, channel, team));
            }
        }
        // Tier order: priority descending, then member id ascending. Route members are stored in
        // that order; only a team plan can change priorities and call for a sort.
        if team.is_some_and(|t| !t.plan.is_empty()) {
            candidates.sort_by_key(|c| (std::cmp::Reverse(c.priority), c.member.id));
        }
        candidates
    }

    /// One member as a candidate: its tier and weight after the team plan, why it cannot serve
    /// (if it cannot), and the factors of its selection weight.
    fn evaluate(
        &self,
        member: &'s Member,
        health_slot: u32,
        channel: Option<&'s Channel>,
        team: Option<&Team>,
    ) -> Candidate<'s> {
        let plan = team.and_then(|t| t.plan.get(&member.id));
        let priority = plan.and_then(|p| p.priority).unwrap_or(member.priority);
        let weight = plan.and_then(|p| p.weight).unwrap_or(member.weight);
        let protect = self.settings.fault_protection_enabled;
        let cooldown_until = self
            .health
            .cooldown_until(member.id)
            .filter(|until| protect && *until > self.now);
        let reasons = self.reasons(member, channel, weight, cooldown_until.is_some());

        let record = self.record(member, health_slot);
        let latency_factor = self.latency_factor(record);
        let error_factor = self.error_factor(record);
        let concurrency_factor = self.load_factor(channel);
        let recovering = self.recovering(channel);
        let ramp_factor = recovering.map_or(1.0, |r| {
            r.ramp_factor(self.now, self.settings.slow_start_initial_percent)
        });
        Candidate {
            member,
            channel,
            priority,
            weight,
            canary: member.canary && !self.health.canary_promoted(member.id),
            reasons,
            cooldown_until,
            latency_factor,
            error_factor,
            concurrency_factor,
            ramp_factor,
            recovering: recovering.is_some(),
            score: self.base_weight(weight) * latency_factor * error_factor,
            probability: 0.0,
        }
    }

    /// Why the member cannot serve this request (none: it is eligible).
    fn reasons(
        &self,
        member: &Member,
        channel: Option<&Channel>,
        weight: i32,
        cooling: bool,
    ) -> Reasons {
        let mut reasons = Reasons::default();
        if !member.enabled {
            reasons.insert(Reason::MemberDisabled);
        }
        match channel {
            None => reasons.insert(Reason::ChannelDisabled),
            Some(ch) => self.channel_reasons(member, ch, &mut reasons),
        }
        if cooling {
            reasons.insert(Reason::CoolingDown);
        }
        if self.constraint.attempted.contains(&member.id) {
            reasons.insert(Reason::AlreadyAttempted);
        }
        if self.constraint.rate_limited.contains(&member.id) {
            reasons.insert(Reason::RateLimited);
        }
        if weight < 0 {
            reasons.insert(Reason::InvalidWeight);
        }
        if self.single_pin.is_some_and(|pin| pin != member.id) {
            reasons.insert(Reason::SingleModeOtherMember);
        }
        reasons
    }

    /// The reasons the member's channel gives: its status and breaker, its credentials, secrets
    /// withheld from this proxy, and what the request needs that the channel lacks.
    fn channel_reasons(&self, member: &Member, ch: &Channel, reasons: &mut Reasons) {
        let protect = self.settings.fault_protection_enabled;
        if ch.status != ChannelStatus::Enabled || (protect && self.health.breaker_open(ch.id)) {
            reasons.insert(Reason::ChannelDisabled);
        }
        if !has_usable_credential(ch, self.health) {
            reasons.insert(Reason::CredentialUnavailable);
        }
        if ch.secrets_withheld {
            reasons.insert(Reason::SecretsWithheld);
        }
        let needs = self.constraint.needs;
        if needs != RequestNeeds::default() {
            let caps = ch.capabilities.overlay(member.capabilities);
            if lacks_capability(caps, needs) {
                reasons.insert(Reason::CapabilityMismatch);
            }
            if too_long(caps, needs) {
                reasons.insert(Reason::ContextTooLong);
            }
            if needs.unsupported_providers & ch.protocol_bits() != 0 {
                reasons.insert(Reason::ProtocolUnsupported);
            }
        }
    }

    /// The member's health record. Health records only matter to the aware modes; weighted
    /// mode skips the lookup.
    fn record(&self, member: &Member, health_slot: u32) -> HealthRecord {
        if self.strategy.latency_aware || self.strategy.error_aware {
            match self.dense.and_then(|d| d.get(health_slot as usize)) {
                Some(record) => *record,
                None => self
                    .health
                    .health(member.channel_id, &member.upstream_model),
            }
        } else {
            HealthRecord::default()
        }
    }

    /// The latency factor (latency-aware modes, a finite sample): 1 at no latency, ½ at 3 s.
    fn latency_factor(&self, record: HealthRecord) -> f64 {
        match record.latency_ms {
            Some(ms) if self.strategy.latency_aware && ms.is_finite() => {
                LATENCY_BASE_MS / (LATENCY_BASE_MS + ms.max(0.0))
            }
            _ => 1.0,
        }
    }

    /// The error factor (error-aware modes): the chance of success, floored.
    fn error_factor(&self, record: HealthRecord) -> f64 {
        if self.strategy.error_aware {
            (1.0 - clamp_unit(record.error_propensity)).max(ERROR_FACTOR_FLOOR)
        } else {
            1.0
        }
    }

    /// The concurrency factor (concurrency awareness on): the room left on the channel.
    fn load_factor(&self, channel: Option<&Channel>) -> f64 {
        match channel {
            Some(ch) if self.strategy.concurrency_aware => {
                concurrency_factor(self.health.in_flight(ch.id), ch.concurrency_limit())
            }
            _ => 1.0,
        }
    }

    /// Slow start: a recovering channel's weight ramps back up (0 s window = ramp off).
    fn recovering(&self, channel: Option<&Channel>) -> Option<Recovering> {
        match channel {
            Some(ch)
                if self.settings.fault_protection_enabled
                    && self.settings.slow_start_seconds > 0 =>
            {
                self.health.recovering(ch.id).filter(|r| r.active(self.now))
            }
            _ => None,
        }
    }

    /// The weight the score starts from.
    fn base_weight(&self, weight: i32) -> f64 {
        if self.strategy.latency_aware || self.strategy.error_aware {
            // Aware modes count a weight <= 0 as 1; only pure weighted mode eliminates it.
            if weight <= 0 {
                1.0
            } else {
                f64::from(weight)
            }
        } else {
            f64::from(weight.max(0))
        }
    }
}

/// Chooses among the candidates: a sticky binding, else the preferred channel, else the canary
/// draw and the roulette in the drawn pool's highest tier; the cooling fallback when nothing is
/// eligible.
fn choose<'s, H: HealthView + ?Sized>(
    ctx: &EvalContext<'_, 's, H>,
    route: &Route,
    decision: &mut Decision<'s>,
    rng: &mut impl RandomSource,
) -> Outcome {
    let constraint = ctx.constraint;
    let pinned = constraint.is_pinned();
    let candidates = &mut decision.candidates;

    // Session stickiness: a still-eligible bound member wins, even from a lower tier.
    let sticky = sticky_lookup(ctx, route, candidates);
    decision.sticky = Some(sticky);
    if let Sticky::Hit { member_id } = sticky {
        return pick_exact(candidates, member_id, Via::Sticky);
    }
    let Some((top, top_block)) = tier_block(candidates, |_| true) else {
        return cooling_fallback(candidates);
    };

    if let Some(channel) = constraint.prefer_channel {
        if let Some(member_id) = preferred_member(candidates, top_block.clone(), channel) {
            decision.tier = Some(top);
            return pick_exact(candidates, member_id, Via::PreferredChannel);
        }
    }

    let drawn = draw_pool(ctx, route, candidates, (top, top_block), pinned, rng);
    decision.canary = Some(drawn.canary);
    decision.tier = Some(drawn.tier);
    roulette(candidates, &drawn, pinned, rng)
}

/// Prefer channel: the next variant of that channel in the top tier, lowest member id first
/// (a tier block is in member id order), so a request finishes that channel's variants first.
fn preferred_member(
    candidates: &[Candidate],
    top_block: Range<usize>,
    channel: ChannelId,
) -> Option<MemberId> {
    candidates[top_block]
        .iter()
        .find(|c| c.eligible() && c.channel_id() == channel)
        .map(Candidate::member_id)
}

/// The pool the roulette runs in, after the canary draw.
struct Drawn {
    canary: CanaryDraw,
    /// The priority of the drawn pool's highest tier with an eligible candidate.
    tier: i32,
    /// That tier's candidates (indices into the candidate list).
    block: Range<usize>,
    /// The share of all selections this pool gets (its probabilities add up to it).
    share: f64,
}

/// The canary (stable-first) draw, then the highest tier of the drawn pool, its probabilities
/// assigned by the strategy's weights. Without a draw the pool is the top tier, whole.
fn draw_pool<H: HealthView + ?Sized>(
    ctx: &EvalContext<'_, '_, H>,
    route: &Route,
    candidates: &mut [Candidate],
    (top, top_block): (i32, Range<usize>),
    pinned: bool,
    rng: &mut impl RandomSource,
) -> Drawn {
    let settings = ctx.settings;
    let enabled = route.stable_first.unwrap_or(settings.stable_first_enabled);
    let denominator = route
        .stable_first_denominator
        .unwrap_or(settings.stable_first_denominator);
    let draw_active = !pinned && enabled && denominator > 1;
    let mut canary = CanaryDraw {
        enabled: draw_active,
        denominator,
        pool: None,
        drawn: false,
    };
    let strategy = ctx.strategy;
    if !draw_active {
        distribute(candidates, top_block.clone(), |_| true, 1.0, strategy);
        return Drawn {
            canary,
            tier: top,
            block: top_block,
            share: 1.0,
        };
    }
    let canaries = tier_block(candidates, |c| c.canary);
    let stables = tier_block(candidates, |c| !c.canary);
    let (tier, block, share) = match (canaries, stables) {
        (Some(canaries), Some(stables)) => {
            // Probabilities cover the whole process: each pool's split weighted by its draw.
            let share = 1.0 / f64::from(denominator);
            distribute(
                candidates,
                canaries.1.clone(),
                |c| c.canary,
                share,
                strategy,
            );
            distribute(
                candidates,
                stables.1.clone(),
                |c| !c.canary,
                1.0 - share,
                strategy,
            );
            canary.drawn = true;
            if rng.next_u64().is_multiple_of(u64::from(denominator)) {
                canary.pool = Some(Pool::Canary);
                (canaries.0, canaries.1, share)
            } else {
                canary.pool = Some(Pool::Stable);
                (stables.0, stables.1, 1.0 - share)
            }
        }
        (Some(only), None) => {
            canary.pool = Some(Pool::Canary);
            distribute(candidates, only.1.clone(), |c| c.canary, 1.0, strategy);
            (only.0, only.1, 1.0)
        }
        (None, Some(only)) => {
            canary.pool = Some(Pool::Stable);
            distribute(candidates, only.1.clone(), |c| !c.canary, 1.0, strategy);
            (only.0, only.1, 1.0)
        }
        // Unreachable: the top tier exists, so one of the pools is non-empty.
        (None, None) => (top, top_block, 1.0),
    };
    Drawn {
        canary,
        tier,
        block,
        share,
    }
}

/// The roulette inside the drawn block, over the probabilities just assigned.
fn roulette(
    candidates: &[Candidate],
    drawn: &Drawn,
    pinned: bool,
    rng: &mut impl RandomSource,
) -> Outcome {
    let pool = drawn.canary.pool;
    let in_pool = |c: &Candidate| pool.is_none_or(|p| (p == Pool::Canary) == c.canary);
    let mut target = rng.next_f64() * drawn.share;
    let mut chosen = None;
    for (index, c) in candidates
        .iter()
        .enumerate()
        .skip(drawn.block.start)
        .take(drawn.block.len())
    {
        // Zero-probability candidates never win, even through rounding at the end of the walk.
        if !(c.eligible() && in_pool(c)) || c.probability <= 0.0 {
            continue;
        }
        chosen = Some(index);
        target -= c.probability;
        if target < 0.0 {
            break;
        }
    }
    match chosen {
        Some(index) => Outcome::Selected {
            index,
            member_id: candidates[index].member_id(),
            channel_id: candidates[index].channel_id(),
            via: if pinned { Via::Pinned } else { Via::Strategy },
        },
        None => Outcome::NoEligibleMember,
    }
}

/// The highest tier holding an eligible candidate of the pool, as (priority, index range).
/// Candidates are in tier order, so a tier is one contiguous block.
fn tier_block(
    candidates: &[Candidate],
    in_pool: impl Fn(&Candidate) -> bool,
) -> Option<(i32, std::ops::Range<usize>)> {
    let start = candidates.iter().position(|c| c.eligible() && in_pool(c))?;
    let priority = candidates[start].priority;
    let len = candidates[start..]
        .iter()
        .position(|c| c.priority != priority)
        .unwrap_or(candidates.len() - start);
    Some((priority, start..start + len))
}

/// Spreads `share` over the pool's eligible candidates in `block` by selection weight
/// (uniformly when every weight is zero).
fn distribute(
    candidates: &mut [Candidate],
    block: std::ops::Range<usize>,
    in_pool: impl Fn(&Candidate) -> bool,
    share: f64,
    strategy: Strategy,
) {
    let block = &mut candidates[block];
    let (mut total, mut count) = (0.0, 0usize);
    for c in block.iter_mut() {
        if c.eligible() && in_pool(c) {
            // Park the weight in `probability` until the total is known.
            c.probability = selection_weight(c, strategy);
            total += c.probability;
            count += 1;
        }
    }
    for c in block.iter_mut() {
        if c.eligible() && in_pool(c) {
            c.probability = share
                * if total > 0.0 {
                    c.probability / total
                } else {
                    1.0 / count as f64
                };
        }
    }
}

/// The roulette weight: the explained score times the concurrency and slow-start factors.
fn selection_weight(c: &Candidate, strategy: Strategy) -> f64 {
    let w = c.score
        * c.ramp_factor
        * if strategy.concurrency_aware {
            c.concurrency_factor
        } else {
            1.0
        };
    if w.is_finite() && w > 0.0 {
        w
    } else {
        0.0
    }
}

fn pick_exact(candidates: &mut [Candidate], member_id: MemberId, via: Via) -> Outcome {
    for c in candidates.iter_mut() {
        c.probability = if c.member_id() == member_id { 1.0 } else { 0.0 };
    }
    match candidates.iter().position(|c| c.member_id() == member_id) {
        Some(index) => Outcome::Selected {
            index,
            member_id,
            channel_id: candidates[index].channel_id(),
            via,
        },
        None => Outcome::NoEligibleMember,
    }
}

/// Nothing eligible: the candidate whose only reason is `cooling_down` and that recovers first
/// (higher priority, then earliest expiry, then lowest member id).
fn cooling_fallback(candidates: &mut [Candidate]) -> Outcome {
    let best = candidates
        .iter()
        .filter(|c| c.reasons.is_only(Reason::CoolingDown))
        .min_by_key(|c| {
            (
                std::cmp::Reverse(c.priority),
                c.cooldown_until.unwrap_or(0),
                c.member_id(),
            )
        })
        .map(Candidate::member_id);
    match best {
        Some(member_id) => pick_exact(candidates, member_id, Via::CoolingFallback),
        None => Outcome::NoEligibleMember,
    }
}

fn sticky_enabled<H: HealthView + ?Sized>(ctx: &EvalContext<'_, '_, H>, route: &Route) -> bool {
    route.sticky_session.unwrap_or(ctx.settings.sticky_enabled)
}

fn sticky_lookup<H: HealthView + ?Sized>(
    ctx: &EvalContext<'_, '_, H>,
    route: &Route,
    candidates: &[Candidate],
) -> Sticky {
    if ctx.constraint.is_pinned() {
        return Sticky::Pinned;
    }
    if !sticky_enabled(ctx, route) {
        return Sticky::Disabled;
    }
    let Some(key) = ctx.constraint.session_key.as_deref() else {
        return Sticky::NoSession;
    };
    let Some(binding) = ctx.health.sticky(route.id, key) else {
        return Sticky::Unbound;
    };
    if binding.expires_at <= ctx.now {
        return Sticky::Expired {
            member_id: binding.member_id,
        };
    }
    match candidates
        .iter()
        .find(|c| c.member_id() == binding.member_id)
    {
        Some(c) if c.eligible() => Sticky::Hit {
            member_id: binding.member_id,
        },
        Some(c) => Sticky::Escaped {
            member_id: binding.member_id,
            reasons: c.reasons,
            in_pool: true,
        },
        None => Sticky::Escaped {
            member_id: binding.member_id,
            reasons: Reasons::default(),
            in_pool: false,
        },
    }
}

fn concurrency_factor(in_flight: u32, limit: u32) -> f64 {
    if in_flight == 0 {
        1.0
    } else if in_flight >= limit {
        CONCURRENCY_FLOOR
    } else {
        (f64::from(limit - in_flight) / f64::from(limit)).max(CONCURRENCY_FLOOR)
    }
}

fn has_usable_credential<H: HealthView + ?Sized>(channel: &Channel, health: &H) -> bool {
    !channel.provider.needs_credential()
        || channel
            .credentials
            .iter()
            .any(|cred| cred.enabled && !health.credential_disabled(cred.id))
}

fn lacks_capability(caps: Capabilities, needs: RequestNeeds) -> bool {
    let refuses = |declared: Option<bool>, needed: bool| needed && declared == Some(false);
    refuses(caps.streaming, needs.streaming)
        || refuses(caps.tools, needs.tools)
        || refuses(caps.vision, needs.vision)
        || refuses(caps.json_mode, needs.json_mode)
}

fn too_long(caps: Capabilities, needs: RequestNeeds) -> bool {
    matches!(
        (caps.max_context, needs.estimated_prompt_tokens),
        (Some(max), Some(tokens)) if tokens > max
    )
}

fn passes_silent_filters(m: &Member, c: &SelectionConstraint, team: Option<&Team>) -> bool {
    if let Some(pin) = c.pinned_member {
        if m.id != pin {
            return false;
        }
    } else if let Some(pin) = c.pinned_channel {
        if m.channel_id != pin {
            return false;
        }
    }
    if c.excluded_members.contains(&m.id) || c.excluded_channels.contains(&m.channel_id) {
        return false;
    }
    team.is_none_or(|t| t.members.is_empty() || t.members.contains(&m.id))
}

fn team_allows_model(team: &Team, model: &str) -> bool {
    team.models
        .iter()
        .any(|p| p.trim() == model || wildcard_match(p.trim(), model))
}

/// The group narrowing (a token's route group, else the request's header) over the route's distinct
/// groups: `Some(group)` filtered to, or `None` for the whole pool.
fn narrow_group<'s>(groups: &'s [String], requested: &str) -> Option<&'s str> {
    let find = |g: &str| groups.iter().find(|name| *name == g).map(String::as_str);
    find(requested).or_else(|| find(DEFAULT_GROUP))
}

/// The route's single-member pin, if the route is in single mode and the member still exists.
/// A pin to a deleted member is void: the route then behaves as `auto`.
fn live_single_pin(route: &Route) -> Option<MemberId> {
    if route.routing_mode != RoutingMode::Single {
        return None;
    }
    let pin = route.single_member_id?;
    route.members.iter().any(|m| m.id == pin).then_some(pin)
}

fn resolve_strategy(settings: &Settings, mode: RoutingMode) -> Strategy {
    let (latency_aware, error_aware) = match mode {
        RoutingMode::Auto | RoutingMode::Single => {
            (settings.latency_aware_enabled, settings.error_aware_enabled)
        }
        RoutingMode::Weighted => (false, false),
        RoutingMode::Latency => (true, false),
        RoutingMode::Adaptive => (true, true),
    };
    Strategy {
        mode,
        latency_aware,
        error_aware,
        concurrency_aware: settings.concurrency_aware_enabled,
    }
}

fn retry_budget(
    settings: &Settings,
    route: &Route,
    single_pin_live: bool,
    team: Option<&Team>,
) -> RetryBudget {
    let mut budget = RetryBudget {
        retry_times: route.retry_times.unwrap_or(settings.retry_times),
        channel_retry_times: route
            .channel_retry_times
            .unwrap_or(settings.channel_retry_times),
        cross_channel_failover: settings.cross_channel_failover_enabled,
        cooldown_seconds: route.cooldown_seconds.unwrap_or(settings.cooldown_seconds),
    };
    if single_pin_live {
        // Only one member can serve: there is nothing to fail over to.
        budget.retry_times = 0;
    }
    if let Some(team) = team {
        if let Some(limit) = team.retry_limit {
            budget.retry_times = budget.retry_times.min(limit);
        }
        if team.disable_failover {
            budget.retry_times = 0;
            budget.cross_channel_failover = false;
        }
    }
    budget
}
