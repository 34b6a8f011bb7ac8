//! Cache: between admit and proxy, a request a response cache rule covers is answered from the
//! cache when its answer is there (a hit counts as a request, with no tokens charged); a miss
//! goes upstream and, once its answer is whole (a stream: at its end) and good, is stored. A
//! request no rule covers costs nothing here: no parse, no hash, no store call. One a rule
//! covers has its body read once for the key (no JSON value is built but for a lookup by
//! meaning) and waits on one store read; the store's write never holds it up.
//!
//! Concurrent identical misses are not coalesced: each goes upstream and the last to finish
//! stores its answer.
//!
//! A rule with a semantic part looks an exact miss up by meaning too (`semantic`).

use std::sync::Arc;

use axum::response::Response;
use serde_json::Value;
use switchyard_engine::cache::{applicable, CacheRule, SemanticPart};
use switchyard_provider::Usage;
use switchyard_state::cache::{CacheEntry, CacheKey};
use switchyard_state::unix_ms;

use super::semantic::{self, Asker, Found, Pending};
use crate::context::Ctx;
use crate::record::{CacheMark, CacheResult};
use crate::response_cache::answer::{canonical, fresh, replay};
use crate::response_cache::canonical::Canonical;
use crate::response_cache::key::{
    cache_endpoint, directives, not_cacheable, Asked, KeyParts, Shape,
};
use crate::response_cache::semantic::partition;
use crate::state::AppState;

/// What a miss stores once its answer is whole.
pub struct Store {
    key: CacheKey,
    /// How the answer comes (a stream is read back by its shape).
    shape: Shape,
    ttl_ms: u64,
    max_entry_bytes: u64,
    /// A lookup by meaning: the vector stored with the answer (and a trial's comparison).
    semantic: Option<Pending>,
}

/// The cache's word on a request.
pub enum Looked {
    /// Answered from the cache.
    Hit(Response),
    /// Go upstream; store the answer when there is a [`Store`].
    Proxy(Option<Store>),
}

/// Looks the request up when a rule covers it; marks the trail (hit, miss or bypass) and counts
/// it by route.
pub async fn lookup(state: &AppState, ctx: &mut Ctx<'_>) -> Looked {
    let snapshot = &ctx.view.snapshot;
    let (Some(route), Some(endpoint)) = (ctx.route, cache_endpoint(ctx.endpoint)) else {
        return Looked::Proxy(None);
    };
    let rules = snapshot.cache_rules();
    if rules.is_empty() {
        return Looked::Proxy(None);
    }
    let (model, team) = (&ctx.inspected.model, ctx.token.team_id);
    let Some(rule) = applicable(rules, &route.model_pattern, model, endpoint, team) else {
        return Looked::Proxy(None);
    };
    let (read, write) = directives(&ctx.headers);
    let body = Canonical::read(&ctx.body);
    let asked = Asked {
        endpoint: ctx.endpoint,
        body: body.as_ref(),
        stream: ctx.inspected.stream,
        query: ctx.query.as_deref(),
    };
    let why_not = not_cacheable(&asked, rule.deterministic_only);
    let shape = asked.shape();
    let Some(body) = body.filter(|_| why_not.is_none() && (read || write)) else {
        mark(state, ctx, CacheResult::Bypass, None);
        return Looked::Proxy(None);
    };
    let parts = KeyParts {
        endpoint: ctx.endpoint,
        route: route.id,
        model: &ctx.inspected.model,
        scope: rule.scope,
        token: ctx.token,
        headers: &ctx.headers,
        query: ctx.query.as_deref(),
        body: body.normalised(),
    };
    let key = parts.key();
    let semantic = by_meaning_too(rule, read && write, &parts, &ctx.body);
    let store = write.then(|| Store {
        key,
        shape,
        ttl_ms: rule.ttl_seconds.saturating_mul(1000),
        max_entry_bytes: rule.max_entry_bytes,
        semantic: None,
    });
    if !read {
        mark(state, ctx, CacheResult::Miss, None);
        return Looked::Proxy(store);
    }
    let cache = state.cache();
    let now = unix_ms();
    match cache.get(&key, now).await {
        Ok(Some(entry)) if fresh(rule, &entry, now) => {
            hit_or_miss(state, ctx, (&body, shape), &entry, now, None, store)
        }
        Ok(_) => match semantic {
            Some((part, partition, value)) => {
                let found = Box::pin(by_meaning(state, ctx, (rule, part), partition, &value)).await;
                missed(state, ctx, (&body, shape), now, found, store)
            }
            None => {
                mark(state, ctx, CacheResult::Miss, None);
                Looked::Proxy(store)
            }
        },
        Err(e) => {
            tracing::debug!(error = %e, "response cache bypassed");
            mark(state, ctx, CacheResult::Bypass, None);
            Looked::Proxy(None)
        }
    }
}

/// The rule's semantic part, the request's partition and its body as a value, when the request
/// is also looked up by meaning: only when its answer can be both read and stored (`both`), and
/// only then is the body parsed into a value (the prompt's texts are read from it).
fn by_meaning_too<'r>(
    rule: &'r CacheRule,
    both: bool,
    parts: &KeyParts<'_>,
    body: &[u8],
) -> Option<(&'r SemanticPart, [u8; 32], Value)> {
    let part = rule.semantic.as_ref().filter(|_| both)?;
    let value: Value = serde_json::from_slice(body).ok()?;
    Some((part, partition(parts, &value, &part.model), value))
}

/// The rule's search by meaning through its semantic part. The future holds only what the
/// search reads of the context (an [`Asker`]).
fn by_meaning<'a>(
    state: &'a AppState,
    ctx: &Ctx<'a>,
    (rule, part): (&'a CacheRule, &'a SemanticPart),
    partition: [u8; 32],
    body: &'a Value,
) -> impl std::future::Future<Output = Found> + Send + 'a {
    let asker = Asker {
        view: ctx.view,
        endpoint: ctx.endpoint,
        token: ctx.token,
        route: ctx.route.map_or("", |r| r.model_pattern.as_str()),
    };
    async move { semantic::search(state, &asker, rule, part, partition, body).await }
}

/// After an exact miss: a match by meaning served, or the request goes upstream (with the
/// vector to store, when there is one).
fn missed(
    state: &AppState,
    ctx: &mut Ctx<'_>,
    (body, shape): (&Canonical, Shape),
    now: u64,
    found: Found,
    mut store: Option<Store>,
) -> Looked {
    match found {
        Found::Serve(entry, score) => {
            hit_or_miss(state, ctx, (body, shape), &entry, now, Some(score), store)
        }
        Found::Proxy(pending) => {
            if let Some(store) = &mut store {
                store.semantic = pending;
            }
            mark(state, ctx, CacheResult::Miss, None);
            Looked::Proxy(store)
        }
    }
}

/// A found entry served (`similarity`: found by meaning, with that score); one that does not
/// replay (it cannot, as it was checked when stored) is replaced by a fresh answer.
fn hit_or_miss(
    state: &AppState,
    ctx: &mut Ctx<'_>,
    (body, shape): (&Canonical, Shape),
    entry: &CacheEntry,
    now: u64,
    similarity: Option<f32>,
    store: Option<Store>,
) -> Looked {
    match served(ctx, body, shape, entry) {
        Some(response) => {
            mark(state, ctx, CacheResult::Hit, Some((entry, now)));
            if let Some(mark) = &mut ctx.trail.cache {
                mark.similarity = similarity;
            }
            Looked::Hit(response)
        }
        None => {
            mark(state, ctx, CacheResult::Miss, None);
            Looked::Proxy(store)
        }
    }
}

/// The hit's answer, plain or as the client's stream; the trail says it was served with no
/// tokens.
fn served(
    ctx: &mut Ctx<'_>,
    body: &Canonical,
    shape: Shape,
    entry: &CacheEntry,
) -> Option<Response> {
    let include_usage = body
        .value("stream_options")
        .and_then(|o| o.get("include_usage").and_then(Value::as_bool))
        .unwrap_or(false);
    let response = replay(
        ctx.endpoint,
        &entry.body,
        shape,
        &ctx.inspected.model,
        include_usage,
    )?;
    ctx.trail.usage = Some(Usage::default());
    ctx.trail.route = ctx.route.map(|r| (r.id, r.model_pattern.clone()));
    Some(response)
}

fn mark(state: &AppState, ctx: &mut Ctx<'_>, result: CacheResult, hit: Option<(&CacheEntry, u64)>) {
    let route = ctx.route.map_or("", |r| r.model_pattern.as_str());
    state
        .metrics
        .cache_requests
        .add([route, result.as_str()], 1);
    let (age_seconds, saved, saved_cost_pico) = match hit {
        Some((entry, now)) => (
            now.saturating_sub(entry.stored_at) / 1000,
            Usage {
                input_tokens: entry.input_tokens,
                output_tokens: entry.output_tokens,
                cached_tokens: entry.cached_tokens,
            },
            entry.cost_pico,
        ),
        None => (0, Usage::default(), None),
    };
    ctx.trail.cache = Some(CacheMark {
        result,
        age_seconds,
        saved,
        saved_cost_pico,
        similarity: None,
    });
}

/// After the proxy phase: once the request has finished well (a whole 2xx answer that passed
/// the answer check; a stream that completed), its answer is stored in its canonical form,
/// in the background. A stream keeps its chunks from here on (its body is not polled yet).
pub fn keep(state: &AppState, ctx: &mut Ctx<'_>, store: Store) {
    let trail = &mut ctx.trail;
    let stream = trail.stream.as_ref().map(|slot| slot.gather());
    let plain = trail.answer.clone();
    if stream.is_none() && plain.is_none() {
        return;
    }
    let endpoint = ctx.endpoint;
    let model = ctx.inspected.model.clone();
    let cache = state.cache();
    let previous = trail.on_finish.take();
    let mut store = store;
    trail.on_finish = Some(Box::new(move |state, finished| {
        // Copied before a shadow offer takes the chunks.
        let chunks = stream.as_ref().and_then(|g| g.copy());
        if let Some(previous) = previous {
            previous(state, finished);
        }
        if !finished.ok {
            return;
        }
        let shape = store.shape;
        let Some(body) = canonical(
            endpoint,
            shape,
            plain.as_ref(),
            chunks,
            &model,
            finished.usage,
        ) else {
            return;
        };
        let pending = store.semantic.take();
        if let Some(pending) = &pending {
            semantic::judge(state, pending, endpoint, &body);
        }
        if body.len() as u64 > store.max_entry_bytes {
            return;
        }
        if let Some(pending) = pending {
            semantic::share(state, Arc::clone(&cache), pending, &store.key, store.ttl_ms);
        }
        let stored_at = unix_ms();
        let entry = CacheEntry {
            stored_at,
            input_tokens: finished.usage.input_tokens,
            output_tokens: finished.usage.output_tokens,
            cached_tokens: finished.usage.cached_tokens,
            cost_pico: finished.cost_pico,
            body,
        };
        // A store in memory has it at once (before the answer is out); the fleet's store
        // queues it for its writer.
        cache.offer(&store.key, entry, store.ttl_ms, stored_at);
    }));
}
