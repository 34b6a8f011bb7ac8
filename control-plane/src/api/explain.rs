//! `GET /api/v1/routes/explain` (alias `/console/routes/explain`): runs the engine's own
//! [`switchyard_engine::select`] on the snapshot this replica serves and returns its decision.
//!
//! Side-effect free by construction: it reads only the in-memory snapshot and, when the fleet's
//! shared state is configured, the local view of it (a read lock over memory; no database
//! access, no audit row, no revision bump, no Redis write), uses a throwaway RNG, and sends
//! nothing upstream.
//!
//! Limits: when the snapshot has channel or member limits, members without room under one of
//! them for one more request are `rate_limited`, as the proxy's selection makes them. With a
//! `token`, the answer also lists the limits the token's requests are under (the token's, its
//! team's and the route's), each with its status and whether it would refuse a request now.
//! Statuses are the fleet's: with `REDIS_URL`, the shared counters read from Redis (a windowed
//! counter holds what the proxies admitted plus allowance they claimed and have not used yet, so
//! it may read a little ahead); without, this replica's own store. Reading claims nothing.
//!
//! The one exception to "nothing upstream": given a `prompt` under a rule with a semantic part,
//! explain embeds it through the rule's channel to score it (`explain_semantic`).

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::extract::State;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use switchyard_engine::cache::{applicable, CacheEndpoint};
use switchyard_engine::limit::{format_rfc3339, Limit, LimitRule, Metric, ScopeKind};
use switchyard_engine::subject;
use switchyard_engine::{
    select, HealthView, MemberId, NoHealth, Outcome, SelectionConstraint, Snapshot, SplitMix64,
    Token,
};
use switchyard_state::{unix_ms, LimitMode, LimitStatus};
use utoipa::IntoParams;

use super::explain_semantic::evaluate;
use super::extract::Query;
use super::guard_explain::guardrails_json;
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::live::LiveState;
use crate::state::AppState;

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ExplainQuery {
    /// The model name as a client would send it.
    pub model: Option<String>,
    /// The requested group (as a token's `route_group_name` would set it); default `default`.
    pub route_group: Option<String>,
    /// A session key, to see what stickiness would do.
    pub session: Option<String>,
    /// Seed of the random draws, to reproduce a decision; random when absent.
    pub seed: Option<u64>,
    /// A token's id or name: select as its requests would be (its group, unless `route_group`
    /// is given, and its team) and list the limits they are under. An all-digit value is an id
    /// when a token has that id.
    pub token: Option<String>,
    /// The endpoint the request would call, for the response cache rule that applies to it:
    /// `chat_completions` (the default), `completions`, `embeddings`, `messages`,
    /// `generate_content` or `responses`.
    pub endpoint: Option<String>,
    /// A prompt, to see whether the applicable cache rule's semantic part would match it and
    /// with what score (`semantic_cache`; it is embedded through the rule's channel).
    pub prompt: Option<String>,
    /// With `token`: the request's tags (comma-separated, as the `x-switchyard-tags` header
    /// gives them), to list the tag limits it would count on too.
    pub tags: Option<String>,
    /// With `token`: the end user the request is made for (OpenAI's `user`), to list its end
    /// user limits too (one naming it, and each limit counting every end user separately).
    pub end_user: Option<String>,
    /// A sample of a request's text: explain runs each applicable guardrail's patterns,
    /// detectors and size limits over it and shows what the rule would do (never stored or
    /// logged).
    pub text: Option<String>,
}

/// The token of `text` (an id, or a unique name) in the snapshot; a 400 naming `token` when
/// there is none or the name is ambiguous.
fn find_token<'s>(snapshot: &'s Snapshot, text: &str) -> ApiResult<&'s Token> {
    let text = text.trim();
    if let Ok(id) = text.parse::<i64>() {
        if let Some(token) = snapshot.tokens().iter().find(|t| t.id == id) {
            return Ok(token);
        }
    }
    let mut named = snapshot.tokens().iter().filter(|t| t.name == text);
    match (named.next(), named.next()) {
        (Some(token), None) => Ok(token),
        (Some(_), Some(_)) => Err(ApiError::bad_request(
            Some("token"),
            format!(
                "several tokens are named {:?}; give the token's id",
                crate::error::bounded(text, 64)
            ),
        )),
        (None, _) => Err(ApiError::bad_request(
            Some("token"),
            format!(
                "no token has the id or name {:?}",
                crate::error::bounded(text, 64)
            ),
        )),
    }
}

/// Whether a limit has no room for one more request (a hard one; a soft one never refuses).
fn refuses(limit: &Limit, status: &LimitStatus) -> bool {
    limit.mode == LimitMode::Hard && status.remaining == 0
}

/// Members of the route for `model` whose channel or own limits have no room for one more
/// request (the proxy's `rate_limited`). Nothing when the statuses cannot be read.
async fn rate_limited(
    snapshot: &Snapshot,
    live: &LiveState,
    model: &str,
    now: u64,
) -> Vec<MemberId> {
    if !snapshot.has_upstream_limits() {
        return Vec::new();
    }
    let Some(route) = snapshot.resolve_route(model) else {
        return Vec::new();
    };
    // Every member's channel and own limits, read in one go (one connection with Redis).
    let mut owners: Vec<(MemberId, usize)> = Vec::new();
    let mut limits: Vec<Limit> = Vec::new();
    for member in &route.members {
        let before = limits.len();
        limits.extend_from_slice(snapshot.limits_of(ScopeKind::Channel, member.channel_id));
        limits.extend_from_slice(snapshot.limits_of(ScopeKind::Member, member.id));
        owners.push((member.id, limits.len() - before));
    }
    if limits.is_empty() {
        return Vec::new();
    }
    let Some(statuses) = live.limit_statuses(&limits, now).await else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut at = 0;
    for (member, count) in owners {
        let mine = at..at + count;
        at += count;
        let (Some(theirs), Some(states)) = (limits.get(mine.clone()), statuses.get(mine)) else {
            continue;
        };
        if theirs.iter().zip(states).any(|(l, s)| refuses(l, s)) {
            out.push(member);
        }
    }
    out
}

/// A spend figure (micro-USD) as a decimal USD string, any other as a number.
fn amount(limit: &Limit, value: u64) -> Value {
    if limit.key.metric == Metric::Spend {
        json!(switchyard_engine::limit::format_micros(value))
    } else {
        json!(value)
    }
}

/// The tags and end user explain was given for a token's request; a 400 naming the parameter
/// when one is not what a request could carry, or is given without `token`.
fn subject_of_query(query: &ExplainQuery, token: bool) -> ApiResult<(Vec<String>, Option<String>)> {
    let mut tags: Vec<String> = query
        .tags
        .as_deref()
        .map(|t| t.split(',').map(str::trim).filter(|t| !t.is_empty()))
        .into_iter()
        .flatten()
        .map(str::to_owned)
        .collect();
    // A request's tags are distinct: a tag named twice counts once.
    tags.sort();
    tags.dedup();
    let end_user = query.end_user.clone().filter(|u| !u.is_empty());
    for (given, name) in [(!tags.is_empty(), "tags"), (end_user.is_some(), "end_user")] {
        if given && !token {
            return Err(ApiError::bad_request(
                Some(name),
                format!("{name} describes a token's request: give token too"),
            ));
        }
    }
    if let Some(bad) = tags.iter().find(|t| !subject::valid_tag(t)) {
        return Err(ApiError::bad_request(
            Some("tags"),
            format!(
                "tag {bad:?} is not a tag: 1 to {} characters of ASCII letters, digits and _ - . : / =",
                subject::MAX_TAG_LEN
            ),
        ));
    }
    if end_user
        .as_ref()
        .is_some_and(|u| u.chars().count() > subject::MAX_END_USER_CHARS || u.contains('\0'))
    {
        return Err(ApiError::bad_request(
            Some("end_user"),
            format!(
                "an end user is 1 to {} characters without NUL",
                subject::MAX_END_USER_CHARS
            ),
        ));
    }
    Ok((tags, end_user))
}

/// What a token's request says about itself, for the limits explain lists.
struct Subject<'q> {
    tags: &'q [String],
    end_user: Option<&'q str>,
}

/// The limits a token's request for `model` (through its route) is under, with their status (`null` without
/// shared state or when it cannot be read): the token's, its team's and the route's, then those
/// of the request's tags and end user when explain was given them.
async fn token_limits(
    snapshot: &Snapshot,
    live: Option<&LiveState>,
    token: &Token,
    model: &str,
    subject: Subject<'_>,
    now: u64,
) -> Vec<Value> {
    let route = snapshot.resolve_route(model).map(|r| r.id);
    // The proxy's rule (`client_limits`): the scope is the request's, and a narrowed limit's
    // model pattern and route both hold.
    let applies = |rule: &&LimitRule| {
        let key = rule.limit.key;
        let scope = match key.scope {
            ScopeKind::Token => key.scope_id == token.id,
            ScopeKind::Team => Some(key.scope_id) == token.team_id,
            ScopeKind::Route => Some(key.scope_id) == route,
            // Tag and end user limits are found below, through the proxies' own index.
            ScopeKind::Channel | ScopeKind::Member | ScopeKind::Tag | ScopeKind::EndUser => false,
        };
        scope && rule.only.applies(Some(model), route)
    };
    // Each listed rule with the limit it counts on (an each-end-user limit: on the end user's
    // own counter).
    let mut listed: Vec<(&LimitRule, Limit)> = snapshot
        .limits()
        .iter()
        .filter(applies)
        .map(|rule| (rule, rule.limit))
        .collect();
    let who = snapshot
        .subject_limits()
        .attribution(subject.tags, subject.end_user);
    // The proxy's own index decides which apply (and names an end user's own counter); the
    // rule each came from is found by its id for the listing.
    for limit in snapshot.subject_limits().of(who, Some(model), route) {
        if let Some(rule) = snapshot
            .limits()
            .iter()
            .find(|r| limit.key.rule == Some(r.id))
        {
            listed.push((rule, limit));
        }
    }
    let limits: Vec<Limit> = listed.iter().map(|(_, limit)| *limit).collect();
    let statuses = match live {
        Some(live) => live.limit_statuses(&limits, now).await,
        None => None,
    };
    listed
        .iter()
        .enumerate()
        .map(|(i, &(rule, limit))| {
            let status = statuses.as_ref().and_then(|s| s.get(i)).copied();
            json!({
                "limit_id": rule.id,
                "scope": limit.key.scope.as_str(),
                "scope_id": limit.key.scope_id,
                "metric": limit.key.metric.as_str(),
                "window": limit.key.window.as_str(),
                "mode": limit.mode.as_str(),
                "model_pattern": rule.only.model_pattern,
                "route_id": rule.only.route_id,
                "why": why(rule),
                "value": amount(&limit, limit.value),
                "used": status.map(|s| amount(&limit, s.used)),
                "remaining": status.map(|s| amount(&limit, s.remaining)),
                "reset_at": status.and_then(|s| s.reset_at).map(format_rfc3339),
                "would_refuse": status.map(|s| refuses(&limit, &s)),
            })
        })
        .collect()
}

/// Why a limit applies to the request, in words: whose it is, and what it is narrowed to.
fn why(rule: &LimitRule) -> String {
    let mut why = match rule.limit.key.scope {
        ScopeKind::Token => "the key's limit".to_owned(),
        ScopeKind::Team => "the key's team's limit".to_owned(),
        ScopeKind::Tag => format!(
            "the limit of its tag {:?}",
            rule.subject.as_deref().unwrap_or("")
        ),
        ScopeKind::EndUser if rule.subject.is_some() => "its end user's limit".to_owned(),
        ScopeKind::EndUser => "each end user's limit, on its end user's own counter".to_owned(),
        _ => "the route's limit".to_owned(),
    };
    if let Some(pattern) = &rule.only.model_pattern {
        why.push_str(&format!(", on models matching {pattern:?}"));
    }
    if let Some(route) = rule.only.route_id {
        why.push_str(&format!(", through route {route}"));
    }
    why
}

pub(super) fn random_seed() -> u64 {
    let mut bytes = [0u8; 8];
    if getrandom::fill(&mut bytes).is_ok() {
        u64::from_le_bytes(bytes)
    } else {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0)
    }
}

#[utoipa::path(get, path = "/api/v1/routes/explain", tag = "explain", operation_id = "explain_route", params(ExplainQuery),
    responses(
        (status = 200, description = "the engine's decision with every candidate, its reasons, \
                                      factors, score and selection probability",
         body = super::schema::ExplainResponse),
        (status = 400, description = "`model` is missing, or `token` names no token",
         body = ErrorBody),
        (status = 404, description = "no enabled route matches the model", body = ErrorBody),
        (status = 503, description = "no snapshot compiled yet", body = ErrorBody)))]
pub async fn explain(
    State(state): State<AppState>,
    Query(query): Query<ExplainQuery>,
) -> ApiResult<Json<Value>> {
    let model = required_model(&query)?;
    let published = published(&state)?;
    let token = match query.token.as_deref().filter(|t| !t.trim().is_empty()) {
        Some(text) => Some(find_token(&published.snapshot, text)?.clone()),
        None => None,
    };
    let (tags, end_user) = subject_of_query(&query, token.is_some())?;
    let endpoint = cache_endpoint(query.endpoint.as_deref())?;
    let seed = query.seed.unwrap_or_else(random_seed);
    let now_ms = unix_ms();
    let rate_limited = match &state.live {
        Some(live) => rate_limited(&published.snapshot, live, model, now_ms).await,
        None => Vec::new(),
    };
    let constraint = constraint_of(token.as_ref(), &query, rate_limited);
    // Without a fleet token the proxies hold the snapshot without secrets; explain shows what
    // they select from, with `secrets_withheld` on the channels they cannot call.
    let snapshot = if state.proxies_without_secrets {
        published.without_secrets()
    } else {
        Arc::clone(&published.snapshot)
    };
    let mut rng = SplitMix64::new(seed);
    let (decision, health_view) = decide(state.live.as_ref(), |view| {
        select(
            snapshot.as_ref(),
            view,
            &constraint,
            model,
            now_ms,
            &mut rng,
        )
    })?;
    if decision.outcome == Outcome::ModelNotFound {
        return Err(ApiError::ModelNotFound {
            message: format!("no enabled route matches model {model:?}"),
        });
    }
    let mut body = serde_json::to_value(&decision)
        .map_err(|e| ApiError::Internal(anyhow::anyhow!("serialising the decision: {e}")))?;
    if let Value::Object(map) = &mut body {
        map.insert("revision".into(), json!(snapshot.revision));
        map.insert("seed".into(), json!(seed));
        map.insert("now_ms".into(), json!(now_ms));
        // "redis": the fleet's live state; "none": no REDIS_URL, so no cooldowns, breakers,
        // in-flight counts or health records are seen.
        map.insert("health_view".into(), json!(health_view));
        let content = Content {
            model,
            endpoint,
            token: token.as_ref(),
        };
        content_rules(&state, &query, &published.snapshot, content, map).await;
        if let Some(token) = &token {
            let subject = Subject {
                tags: &tags,
                end_user: end_user.as_deref(),
            };
            let limits = token_limits(
                &snapshot,
                state.live.as_ref(),
                token,
                model,
                subject,
                now_ms,
            )
            .await;
            map.insert("token".into(), token_json(token, now_ms));
            map.insert("limits".into(), json!(limits));
        }
    }
    Ok(Json(body))
}

/// The query's model, trimmed: a 400 naming `model` when it is missing or blank.
fn required_model(query: &ExplainQuery) -> ApiResult<&str> {
    query
        .model
        .as_deref()
        .map(str::trim)
        .filter(|m| !m.is_empty())
        .ok_or_else(|| ApiError::bad_request(Some("model"), "model is required"))
}

/// The snapshot the proxies are sent now: a 503 until the first one is compiled.
fn published(state: &AppState) -> ApiResult<Arc<crate::publisher::Published>> {
    state
        .publisher
        .current()
        .ok_or_else(|| ApiError::Unavailable {
            message:
                "no route snapshot compiled yet; the control plane is still connecting to Postgres"
                    .to_owned(),
        })
}

/// What explain says of a request's content: the model, the endpoint a cache rule names and
/// the token it is sent with.
struct Content<'a> {
    model: &'a str,
    endpoint: CacheEndpoint,
    token: Option<&'a Token>,
}

/// The rules that look at a request's content: the cache rule that applies (and whether its
/// semantic part would match the query's `prompt`) and the guardrails that run (with what each
/// would do to the query's `text`).
async fn content_rules(
    state: &AppState,
    query: &ExplainQuery,
    snapshot: &Snapshot,
    content: Content<'_>,
    map: &mut serde_json::Map<String, Value>,
) {
    let Content {
        model,
        endpoint,
        token,
    } = content;
    let team = token.and_then(|t| t.team_id);
    map.insert(
        "cache_rule".into(),
        cache_rule_json(snapshot, model, endpoint, team),
    );
    let prompt = query.prompt.as_deref();
    let semantic = evaluate(state, snapshot, (model, endpoint, team), prompt).await;
    map.insert("semantic_cache".into(), semantic);
    let route = snapshot.resolve_route(model).map(|r| r.id);
    let text = query.text.as_deref();
    map.insert(
        "guardrails".into(),
        guardrails_json(snapshot, route, token, text),
    );
}

/// What the proxy would select under for this query: the token's group wins over the one the
/// query names, as on the proxy.
fn constraint_of(
    token: Option<&Token>,
    query: &ExplainQuery,
    rate_limited: Vec<MemberId>,
) -> SelectionConstraint {
    SelectionConstraint {
        route_group: token
            .and_then(|t| t.route_group_name.clone())
            .or_else(|| query.route_group.clone()),
        team: token.and_then(|t| t.team_id),
        session_key: query.session.clone().filter(|s| !s.is_empty()),
        rate_limited,
        ..SelectionConstraint::default()
    }
}

/// The endpoint a request would be sent to, for the cache rule that would cover it (chat
/// completions when none is named).
fn cache_endpoint(text: Option<&str>) -> ApiResult<CacheEndpoint> {
    match text.filter(|e| !e.trim().is_empty()) {
        Some(text) => CacheEndpoint::parse(text).ok_or_else(|| {
            ApiError::bad_request(
                Some("endpoint"),
                "endpoint is not one a cache rule can name",
            )
        }),
        None => Ok(CacheEndpoint::ChatCompletions),
    }
}

/// Runs `select` once, inside the fleet's shared-state view when there is one (`NoHealth`
/// otherwise), and names the view it ran in (`health_view`).
fn decide<R>(
    live: Option<&LiveState>,
    mut select: impl FnMut(&dyn HealthView) -> R,
) -> ApiResult<(R, &'static str)> {
    let Some(live) = live else {
        return Ok((select(&NoHealth), "none"));
    };
    let mut decision = None;
    live.store().with_view(&mut |view: &dyn HealthView| {
        decision = Some(select(view));
    });
    let decision = decision.ok_or_else(|| {
        ApiError::Internal(anyhow::anyhow!("the state store never ran the selection"))
    })?;
    Ok((decision, live.source()))
}

/// The response cache rule a request for `model` at `endpoint` from a token of `team` would be
/// looked up under — the proxy's own question (`applicable`), asked of the same snapshot.
fn cache_rule_json(
    snapshot: &Snapshot,
    model: &str,
    endpoint: CacheEndpoint,
    team: Option<i64>,
) -> Value {
    let Some(route) = snapshot.resolve_route(model) else {
        return Value::Null;
    };
    match applicable(
        snapshot.cache_rules(),
        &route.model_pattern,
        model,
        endpoint,
        team,
    ) {
        Some(rule) => json!({
            "id": rule.id,
            "name": rule.name,
            "endpoint": endpoint.as_str(),
            "scope": rule.scope.as_str(),
            "ttl_seconds": rule.ttl_seconds,
            "max_entry_bytes": rule.max_entry_bytes,
            "deterministic_only": rule.deterministic_only,
        }),
        None => Value::Null,
    }
}

/// The token explain selected as, as the answer shows it.
fn token_json(token: &Token, now_ms: u64) -> Value {
    json!({
        "id": token.id,
        "name": token.name,
        "team_id": token.team_id,
        "route_group_name": token.route_group_name,
        "enabled": token.enabled,
        "expires_at": token.expires_at.map(format_rfc3339),
        "expired": token.expires_at.is_some_and(|at| at <= now_ms),
    })
}
