//! Explain's word on the semantic cache: for the rule that would cover the request, whether a
//! prompt would be matched by meaning and with what score. The prompt (`prompt`) is embedded
//! through the rule's channel — the one upstream call explain makes, and only when asked with a
//! prompt under a semantic rule — and scored, with the proxies' own code, against every vector
//! of the rule's shared stream in Redis (any partition: explain has no request body, so it says
//! the best a request with this prompt could reach). Without Redis the part cannot be
//! evaluated, and the answer says so.

use std::time::Duration;

use serde_json::{json, Value};
use switchyard_engine::cache::{applicable, CacheEndpoint, CacheRule, SemanticPart};
use switchyard_engine::semantic::{normalise, SemanticIndex, MAX_SEMANTIC_VECTORS};
use switchyard_engine::Snapshot;
use switchyard_state::unix_ms;
use switchyard_upstream::embed::embed;
use switchyard_upstream::ChannelRuntime;

use crate::state::AppState;

/// The longest the embeddings call may take (as on the proxies).
const EMBED_TIMEOUT: Duration = Duration::from_secs(2);

/// The `semantic_cache` part of explain's answer for a request for `model` at `endpoint` from
/// a token of `team`: `null` when no semantic rule covers the request.
pub async fn evaluate(
    state: &AppState,
    snapshot: &Snapshot,
    (model, endpoint, team): (&str, CacheEndpoint, Option<i64>),
    prompt: Option<&str>,
) -> Value {
    let Some(route) = snapshot.resolve_route(model) else {
        return Value::Null;
    };
    let rule = applicable(
        snapshot.cache_rules(),
        &route.model_pattern,
        model,
        endpoint,
        team,
    );
    let Some((rule, part)) = rule.and_then(|r| r.semantic.as_ref().map(|p| (r, p))) else {
        return Value::Null;
    };
    let mut out = json!({
        "rule_id": rule.id,
        "mode": part.mode.as_str(),
        "threshold": part.threshold,
        "evaluated": false,
    });
    match score(state, snapshot, rule, part, prompt).await {
        Ok((vectors, best)) => {
            out["evaluated"] = json!(true);
            out["vectors"] = json!(vectors);
            out["score"] = json!(best.map(|s| (f64::from(s) * 1000.0).round() / 1000.0));
            out["would_hit"] = json!(best.is_some_and(|s| f64::from(s) >= part.threshold));
        }
        Err(reason) => out["reason"] = json!(reason),
    }
    out
}

/// The count of the rule's live shared vectors and the best score among them.
async fn score(
    state: &AppState,
    snapshot: &Snapshot,
    rule: &CacheRule,
    part: &SemanticPart,
    prompt: Option<&str>,
) -> Result<(usize, Option<f32>), String> {
    let Some(prompt) = prompt.filter(|p| !p.trim().is_empty()) else {
        return Err("give a prompt to see its score".to_owned());
    };
    let Some(live) = &state.live else {
        return Err("the control plane has no Redis: the semantic part cannot be evaluated".into());
    };
    let Some(entries) = live.shared_vectors(rule.id).await else {
        return Err("Redis cannot be read now: the semantic part cannot be evaluated".into());
    };
    let channel = snapshot
        .channel(part.channel)
        .ok_or_else(|| format!("channel {} is not in the snapshot", part.channel))?;
    let env = |name: &str| std::env::var(name).ok();
    let runtime = ChannelRuntime::compile(channel, &env);
    let client = switchyard_upstream::HttpClient::new(state.upstream.clone());
    let embedded = embed(&client, &runtime, &part.model, prompt, EMBED_TIMEOUT)
        .await
        .map_err(|e| format!("the embeddings call failed: {e}"))?;
    let mut vector = embedded.vector;
    if !normalise(&mut vector) {
        return Err("the embedding has no direction".into());
    }
    let now = unix_ms();
    let mut index = SemanticIndex::new(MAX_SEMANTIC_VECTORS);
    for entry in entries {
        index.insert(entry, now);
    }
    let best = index.best_anywhere(&vector, now).map(|m| m.score);
    Ok((index.len(), best))
}
