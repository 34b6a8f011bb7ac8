//! The cache phase's match by meaning: after an exact miss under a rule with a semantic part, the
//! prompt's text is embedded through the rule's channel (one call, [`EMBED_TIMEOUT`]; any
//! failure bypasses, never fails the request) and searched in this proxy's index of the rule,
//! within the request's partition. A match at the threshold reads its answer by its exact key
//! (one store get): a `serve` rule serves it as an exact hit; a `trial` rule never does — the
//! request goes upstream, and once its answer is whole and good it is compared with the one
//! that would have been served. Either way a miss's vector is stored with its answer, in the
//! local index and (a fleet store) on the rule's shared stream.
//!
//! The embeddings call is usage of the rule's channel: its tokens and cost are recorded under
//! the request's token, team and route and the embedding model, as a request of that channel
//! (it is not charged to the token's limits, which admitted the request itself).

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use switchyard_engine::cache::{CacheRule, SemanticMode, SemanticPart};
use switchyard_engine::semantic::{normalise, SemanticEntry};
use switchyard_engine::Token;
use switchyard_provider::Usage;
use switchyard_state::cache::{CacheEntry, CacheKey, ResponseCache};
use switchyard_state::unix_ms;
use switchyard_upstream::embed::embed;

use crate::endpoint::Endpoint;
use crate::response_cache::answer::fresh;
use crate::response_cache::semantic::prompt_text;
use crate::shadow::compare::{compare, facts};
use crate::snapshot::View;
use crate::state::AppState;
use crate::usage::{TrialCounts, UsageKey};

/// The longest an embeddings call may take.
pub const EMBED_TIMEOUT: Duration = Duration::from_secs(2);
/// The text similarity (Jaccard index of word sets, thousandths) at which a trial's live answer
/// agrees with the stored one, with the same finish reason and tool names.
pub const AGREEMENT_MILLI: u64 = 900;

/// A request looked up by meaning, until its answer is stored.
pub struct Pending {
    rule: i64,
    rule_name: String,
    model: String,
    partition: [u8; 32],
    vector: Vec<f32>,
    /// A trial's would-be hit: the answer it would have served.
    trial: Option<Arc<CacheEntry>>,
}

/// Who asks, and how: what the search reads of the request's context (not the context itself,
/// which a future awaiting the embedding could not share between threads).
pub struct Asker<'a> {
    pub view: &'a View,
    pub endpoint: Endpoint,
    pub token: &'a Token,
    /// The route's pattern.
    pub route: &'a str,
}

/// The search's word.
pub enum Found {
    /// Serve this answer: the match's score.
    Serve(Arc<CacheEntry>, f32),
    /// Go upstream; store the vector with the answer when there is one.
    Proxy(Option<Pending>),
}

fn milli(x: f64) -> u64 {
    (x.clamp(0.0, 1.0) * 1000.0).round() as u64
}

/// Looks the request up by meaning under `rule`'s `part`, in `partition`.
pub async fn search(
    state: &AppState,
    ctx: &Asker<'_>,
    rule: &CacheRule,
    part: &SemanticPart,
    partition: [u8; 32],
    body: &Value,
) -> Found {
    let count = |event: &str| {
        state
            .metrics
            .semantic_cache
            .add([rule.name.as_str(), event], 1)
    };
    let runtime = ctx.view.channel_runtime(part.channel);
    let (Some(text), Some(runtime)) = (prompt_text(ctx.endpoint, body), runtime) else {
        count("bypass");
        return Found::Proxy(None);
    };
    count("looked_up");
    let embedded = match embed(state.client(), runtime, &part.model, &text, EMBED_TIMEOUT).await {
        Ok(embedded) => embedded,
        Err(e) => {
            tracing::debug!(rule = %rule.name, error = %e, "semantic cache bypassed: no embedding");
            count("bypass");
            return Found::Proxy(None);
        }
    };
    record_embedding(state, ctx, part, embedded.input_tokens);
    let mut vector = embedded.vector;
    if !normalise(&mut vector) {
        count("bypass");
        return Found::Proxy(None);
    }
    let now = unix_ms();
    let mut counts = TrialCounts {
        looked_up: 1,
        ..TrialCounts::default()
    };
    let best = state
        .semantic
        .best(rule.id, &part.model, &partition, &vector, now)
        .filter(|m| f64::from(m.score) >= part.threshold);
    let mut pending = Pending {
        rule: rule.id,
        rule_name: rule.name.clone(),
        model: part.model.clone(),
        partition,
        vector,
        trial: None,
    };
    if let Some(found) = best {
        let stored = state.cache().get(&CacheKey(found.key), now).await;
        if let Ok(Some(entry)) = stored.map(|e| e.filter(|e| fresh(rule, e, now))) {
            counts.would_hit = 1;
            counts.score_milli_sum = milli(f64::from(found.score));
            if part.mode == SemanticMode::Serve {
                count("hit");
                report(state, rule.id, &counts);
                return Found::Serve(entry, found.score);
            }
            count("would_hit");
            pending.trial = Some(entry);
        }
    }
    report(state, rule.id, &counts);
    Found::Proxy(Some(pending))
}

fn report(state: &AppState, rule: i64, counts: &TrialCounts) {
    if let Some(usage) = &state.usage {
        usage.record_trial(rule, counts);
    }
}

/// The embeddings call's usage, as a request of the rule's channel.
fn record_embedding(state: &AppState, ctx: &Asker<'_>, part: &SemanticPart, input_tokens: u64) {
    let snapshot = &ctx.view.snapshot;
    let Some(channel) = snapshot.channel(part.channel) else {
        return;
    };
    let usage = Usage {
        input_tokens,
        ..Usage::default()
    };
    let route = ctx.route;
    let team = ctx
        .token
        .team_id
        .and_then(|id| snapshot.team(id))
        .map(|t| t.name.clone());
    let cost = snapshot
        .price(channel.id, &part.model)
        .map(|p| p.cost_pico(input_tokens, 0, 0));
    state
        .metrics
        .usage(route, &channel.name, &ctx.token.name, &usage);
    if let Some(cost) = cost {
        state
            .metrics
            .spend(route, &channel.name, team.as_deref(), cost);
    }
    if let Some(reporter) = &state.usage {
        let key = UsageKey {
            token: ctx.token.name.clone(),
            team,
            route: route.to_owned(),
            channel: channel.name.clone(),
            model: part.model.clone(),
        };
        reporter.record(key, usage, cost);
    }
}

/// A trial's live answer (its canonical form), compared with the one that would have been
/// served.
pub fn judge(state: &AppState, pending: &Pending, endpoint: Endpoint, answer: &[u8]) {
    let Some(cached) = &pending.trial else {
        return;
    };
    let (Some(live), Some(stored)) = (facts(endpoint, answer), facts(endpoint, &cached.body))
    else {
        return;
    };
    let c = compare(&live, &stored, false);
    let agreed = c.same_finish_reason && c.same_tool_names && c.similarity_milli >= AGREEMENT_MILLI;
    let event = if agreed { "agreed" } else { "disagreed" };
    state
        .metrics
        .semantic_cache
        .add([pending.rule_name.as_str(), event], 1);
    let counts = TrialCounts {
        compared: 1,
        agreed: u64::from(agreed),
        similarity_milli_sum: c.similarity_milli.min(1000),
        ..TrialCounts::default()
    };
    report(state, pending.rule, &counts);
}

/// A stored answer's vector: into this proxy's index, and onto the rule's shared stream (in the
/// background).
pub fn share(
    state: &AppState,
    cache: Arc<dyn ResponseCache>,
    pending: Pending,
    key: &CacheKey,
    ttl_ms: u64,
) {
    let now = unix_ms();
    let entry = SemanticEntry {
        partition: pending.partition,
        key: key.0,
        expires_at: now.saturating_add(ttl_ms),
        vector: pending.vector,
    };
    let record = entry.encode();
    state
        .semantic
        .insert(pending.rule, &pending.model, entry, now);
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let rule = pending.rule;
    runtime.spawn(async move {
        if let Err(e) = cache.share_vector(rule, record).await {
            tracing::debug!(rule, error = %e, "semantic cache: a vector was not shared");
        }
    });
}
