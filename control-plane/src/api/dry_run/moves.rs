//! What a dry run reports as it is, since it moves no selection: every token whose requests would
//! be served differently, and every price and limit created, changed or deleted (directly or by
//! a cascade).

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use serde_json::Value;
use switchyard_engine::Snapshot;
use utoipa::ToSchema;

use crate::api::{amount, limits, schema};

/// A token whose requests would be served differently: group, team or enabled changed, or it
/// is created or deleted. `null` side: the token does not exist there.
#[derive(Debug, Serialize, ToSchema)]
pub struct TokenMove {
    pub token_id: i64,
    pub name: String,
    pub before: Option<TokenScope>,
    pub after: Option<TokenScope>,
}

#[derive(Debug, Serialize, ToSchema, PartialEq, Eq, Clone)]
pub struct TokenScope {
    pub group: String,
    pub team_id: Option<i64>,
    pub enabled: bool,
    /// RFC 3339 UTC; `null`: never expires.
    #[schema(format = DateTime)]
    pub expires_at: Option<String>,
}

/// A price as a snapshot holds it, amounts in USD per million tokens (exact decimal strings).
#[derive(Debug, Serialize, ToSchema, PartialEq, Eq, Clone)]
pub struct PriceTerms {
    pub channel_id: i64,
    pub model_pattern: String,
    pub input_per_million: String,
    pub output_per_million: String,
    pub cached_input_per_million: Option<String>,
}

/// A price created, changed or deleted (`null` side: it does not exist there).
#[derive(Debug, Serialize, ToSchema)]
pub struct PriceMove {
    pub price_id: i64,
    pub before: Option<PriceTerms>,
    pub after: Option<PriceTerms>,
}

/// A limit as a snapshot holds it.
#[derive(Debug, Serialize, ToSchema, PartialEq, Clone)]
pub struct LimitTerms {
    #[schema(value_type = schema::LimitScopeName)]
    pub scope: String,
    pub scope_id: i64,
    #[schema(value_type = schema::LimitMetricName)]
    pub metric: String,
    #[schema(value_type = schema::LimitWindowName)]
    pub window: String,
    /// For `spend`, USD as an exact decimal string; otherwise a whole number.
    #[schema(value_type = amount::LimitValueOutput)]
    pub value: Value,
    #[schema(value_type = schema::LimitModeName)]
    pub mode: String,
    /// A `tag` limit's tag.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
    /// An `end_user` limit's end user (`null` on one: each end user separately).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub end_user: Option<String>,
}

/// A limit created, changed or deleted, directly or because its scope was deleted.
#[derive(Debug, Serialize, ToSchema)]
pub struct LimitMove {
    pub limit_id: i64,
    pub before: Option<LimitTerms>,
    pub after: Option<LimitTerms>,
}

fn scope(token: &switchyard_engine::Token) -> TokenScope {
    TokenScope {
        group: switchyard_engine::model::normalize_group(token.route_group_name.as_deref())
            .to_owned(),
        team_id: token.team_id,
        enabled: token.enabled,
        expires_at: token
            .expires_at
            .map(switchyard_engine::limit::format_rfc3339),
    }
}

fn price_terms(p: &switchyard_engine::Price) -> PriceTerms {
    use switchyard_engine::limit::format_micros;
    PriceTerms {
        channel_id: p.channel_id,
        model_pattern: p.model_pattern.clone(),
        input_per_million: format_micros(p.input_per_million),
        output_per_million: format_micros(p.output_per_million),
        cached_input_per_million: p.cached_input_per_million.map(format_micros),
    }
}

pub(super) fn price_moves(before: &Snapshot, after: &Snapshot) -> Vec<PriceMove> {
    let b: BTreeMap<i64, PriceTerms> = before
        .prices()
        .iter()
        .map(|p| (p.id, price_terms(p)))
        .collect();
    let a: BTreeMap<i64, PriceTerms> = after
        .prices()
        .iter()
        .map(|p| (p.id, price_terms(p)))
        .collect();
    let ids: BTreeSet<i64> = b.keys().chain(a.keys()).copied().collect();
    ids.into_iter()
        .filter(|id| b.get(id) != a.get(id))
        .map(|id| PriceMove {
            price_id: id,
            before: b.get(&id).cloned(),
            after: a.get(&id).cloned(),
        })
        .collect()
}

fn limit_terms(rule: &switchyard_engine::LimitRule) -> LimitTerms {
    let l = &rule.limit;
    let value = i64::try_from(l.value).unwrap_or(i64::MAX);
    let subject = |scope| rule.subject.clone().filter(|_| l.key.scope == scope);
    LimitTerms {
        tag: subject(switchyard_engine::ScopeKind::Tag),
        end_user: subject(switchyard_engine::ScopeKind::EndUser),
        scope: l.key.scope.as_str().to_owned(),
        scope_id: l.key.scope_id,
        metric: l.key.metric.as_str().to_owned(),
        window: l.key.window.as_str().to_owned(),
        value: limits::shown_value(l.key.metric.as_str(), value),
        mode: l.mode.as_str().to_owned(),
    }
}

pub(super) fn limit_moves(before: &Snapshot, after: &Snapshot) -> Vec<LimitMove> {
    let b: BTreeMap<i64, LimitTerms> = before
        .limits()
        .iter()
        .map(|l| (l.id, limit_terms(l)))
        .collect();
    let a: BTreeMap<i64, LimitTerms> = after
        .limits()
        .iter()
        .map(|l| (l.id, limit_terms(l)))
        .collect();
    let ids: BTreeSet<i64> = b.keys().chain(a.keys()).copied().collect();
    ids.into_iter()
        .filter(|id| b.get(id) != a.get(id))
        .map(|id| LimitMove {
            limit_id: id,
            before: b.get(&id).cloned(),
            after: a.get(&id).cloned(),
        })
        .collect()
}

pub(super) fn token_moves(before: &Snapshot, after: &Snapshot) -> Vec<TokenMove> {
    let b: BTreeMap<i64, &switchyard_engine::Token> =
        before.tokens().iter().map(|t| (t.id, t)).collect();
    let a: BTreeMap<i64, &switchyard_engine::Token> =
        after.tokens().iter().map(|t| (t.id, t)).collect();
    let ids: BTreeSet<i64> = b.keys().chain(a.keys()).copied().collect();
    ids.into_iter()
        .filter_map(|id| {
            let (tb, ta) = (b.get(&id), a.get(&id));
            let (sb, sa) = (tb.map(|t| scope(t)), ta.map(|t| scope(t)));
            if sb == sa {
                return None;
            }
            let name = ta.or(tb).map(|t| t.name.clone()).unwrap_or_default();
            Some(TokenMove {
                token_id: id,
                name,
                before: sb,
                after: sa,
            })
        })
        .collect()
}
