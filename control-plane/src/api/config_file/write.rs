//! A configuration file's difference from the tables, as the changes a dry run takes (create,
//! patch or delete of one resource, with the body of its REST call), each applied through the
//! resource's own code ([`dry_run::apply`]) inside the caller's transaction: the file meets every
//! validation rule, check and write of the admin API. Only the resources whose canonical form
//! differs are written, in an order every foreign key and `RESTRICT` accepts (creates and updates
//! first, then deletes from the leaves up). The writes are batched ([`By::batched`]): the caller
//! commits them as one revision with one audit row.

use std::collections::{BTreeMap, HashMap, HashSet};

use axum::body::Bytes;
use axum::response::Response;
use serde::de::DeserializeOwned;
use serde_json::{json, Map, Value};
use sqlx::PgConnection;
use switchyard_config::{
    env_reference, Amount, RawCacheRule, RawChannel, RawConfig, RawCredential, RawGuardrail,
    RawLimit, RawMember, RawPrice, RawRoute, RawShadow, RawTeam, RawToken,
};
use switchyard_engine::{Settings, SnapshotParts, DEFAULT_GROUP};

use super::super::dry_run::{self, ChangeOp, ProposedChange, ResourceKind};
use super::super::extract::parse_body;
use super::super::rows::By;
use super::super::{members, tokens};
use super::canonical::{limit_key, price_key, raw_limits, raw_prices};
use super::webhooks;
use crate::error::{ApiError, ApiResult};

/// (kind, key) → canonical fields, as [`super::canonical::index`] builds them.
pub(super) type Index = BTreeMap<(&'static str, String), Value>;

/// (kind, key) → where the resource stands in the file (`routes[2]`), for errors.
pub(super) type Paths = HashMap<(&'static str, String), String>;

/// A stored credential, as the file's credentials are matched to it.
#[derive(Debug, Clone)]
pub(super) struct StoredCredential {
    pub id: i64,
    pub secret_env: Option<String>,
    pub enabled: bool,
}

/// What writing a file needs: the tables' canonical form and the file's, their indexes, and
/// what identifies the stored rows.
pub(super) struct Writing<'a> {
    pub parts: &'a SnapshotParts,
    /// Channel name → its stored credentials, by id.
    pub credentials: &'a HashMap<String, Vec<StoredCredential>>,
    pub before: &'a RawConfig,
    pub after: &'a RawConfig,
    pub before_index: &'a Index,
    pub after_index: &'a Index,
    pub paths: &'a Paths,
    /// The stored webhooks (no snapshot holds them).
    pub webhooks: &'a [super::webhooks::StoredWebhook],
}

impl Writing<'_> {
    fn differs(&self, kind: &'static str, key: &str) -> bool {
        let k = (kind, key.to_owned());
        self.before_index.get(&k) != self.after_index.get(&k)
    }

    fn stored(&self, kind: &'static str, key: &str) -> bool {
        self.before_index.contains_key(&(kind, key.to_owned()))
    }

    /// Where the resource stands in the file.
    fn path(&self, kind: &'static str, key: &str) -> String {
        self.paths
            .get(&(kind, key.to_owned()))
            .cloned()
            .unwrap_or_else(|| format!("{kind}s"))
    }
}

/// The ids of the stored rows by their natural keys, and of those the apply creates.
#[derive(Default)]
struct Ids {
    channels: HashMap<String, i64>,
    routes: HashMap<String, i64>,
    teams: HashMap<String, i64>,
    /// By hash.
    tokens: HashMap<String, i64>,
    token_names: HashMap<String, i64>,
    shadows: HashMap<String, i64>,
    cache_rules: HashMap<String, i64>,
    guardrails: HashMap<String, i64>,
    prices: HashMap<String, i64>,
    limits: HashMap<String, i64>,
    webhooks: HashMap<String, i64>,
}

impl Ids {
    fn of(parts: &SnapshotParts) -> Ids {
        let by = |items: Vec<(String, i64)>| items.into_iter().collect::<HashMap<_, _>>();
        Ids {
            channels: by(parts
                .channels
                .iter()
                .map(|c| (c.name.clone(), c.id))
                .collect()),
            routes: by(parts
                .routes
                .iter()
                .map(|r| (r.model_pattern.clone(), r.id))
                .collect()),
            teams: by(parts.teams.iter().map(|t| (t.name.clone(), t.id)).collect()),
            tokens: by(parts
                .tokens
                .iter()
                .map(|t| (t.hash.clone(), t.id))
                .collect()),
            token_names: by(parts
                .tokens
                .iter()
                .map(|t| (t.name.clone(), t.id))
                .collect()),
            shadows: by(parts
                .shadows
                .iter()
                .map(|s| (s.name.clone(), s.id))
                .collect()),
            cache_rules: by(parts
                .cache_rules
                .iter()
                .map(|c| (c.name.clone(), c.id))
                .collect()),
            guardrails: by(parts
                .guardrails
                .iter()
                .map(|g| (g.name.clone(), g.id))
                .collect()),
            prices: by(raw_prices(parts)
                .into_iter()
                .map(|(id, p)| (price_key(&p), id))
                .collect()),
            limits: by(raw_limits(parts)
                .into_iter()
                .map(|(id, l)| (limit_key(&l), id))
                .collect()),
            webhooks: HashMap::new(),
        }
    }
}

fn id_in(ids: &HashMap<String, i64>, what: &str, name: &str) -> ApiResult<i64> {
    ids.get(name).copied().ok_or_else(|| {
        ApiError::Internal(anyhow::anyhow!(
            "{what} {name:?} has no id during the apply"
        ))
    })
}

fn id_of(ids: &HashMap<String, i64>, what: &str, name: Option<&String>) -> ApiResult<Value> {
    name.map(|name| id_in(ids, what, name))
        .transpose()
        .map(|id| json!(id))
}

/// An object's fields (a `json!` object; anything else has none).
fn object(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

/// A create's body: the fields that are set.
fn create_body(fields: &Map<String, Value>) -> Value {
    Value::Object(
        fields
            .iter()
            .filter(|(_, v)| !v.is_null())
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
    )
}

/// A patch's body: the fields whose value changes (`null` clears one).
fn patch_body(before: &Map<String, Value>, after: &Map<String, Value>) -> Map<String, Value> {
    after
        .iter()
        .filter(|(k, v)| before.get(*k) != Some(v))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

fn amount(value: &Amount) -> Value {
    Value::String(value.text())
}

/// One change through the resource layer; a refusal names the resource's place in the file.
async fn run(
    tx: &mut PgConnection,
    by: By<'_>,
    at: &str,
    resource: ResourceKind,
    op: ChangeOp,
    (id, parent_id): (Option<i64>, Option<i64>),
    body: Option<Value>,
) -> ApiResult<Response> {
    let change = ProposedChange {
        op,
        resource,
        id,
        parent_id,
        body,
    };
    dry_run::apply(tx, by, change)
        .await
        .map_err(|error| dry_run::at_place(at, at, error))
}

async fn create(
    tx: &mut PgConnection,
    by: By<'_>,
    at: &str,
    resource: ResourceKind,
    parent_id: Option<i64>,
    fields: &Map<String, Value>,
) -> ApiResult<i64> {
    let body = Some(create_body(fields));
    let response = run(
        tx,
        by,
        at,
        resource,
        ChangeOp::Create,
        (None, parent_id),
        body,
    )
    .await?;
    created_id(response).await
}

/// Patches resource `id` with the fields of `after` that differ from `before`, if any.
async fn patch(
    tx: &mut PgConnection,
    by: By<'_>,
    at: &str,
    (resource, id): (ResourceKind, i64),
    before: &Map<String, Value>,
    after: &Map<String, Value>,
) -> ApiResult<()> {
    let body = patch_body(before, after);
    if body.is_empty() {
        return Ok(());
    }
    let id = (Some(id), None);
    let body = Some(Value::Object(body));
    run(tx, by, at, resource, ChangeOp::Patch, id, body).await?;
    Ok(())
}

async fn delete(
    tx: &mut PgConnection,
    by: By<'_>,
    at: &str,
    resource: ResourceKind,
    id: i64,
) -> ApiResult<()> {
    run(
        tx,
        by,
        at,
        resource,
        ChangeOp::Delete,
        (Some(id), None),
        None,
    )
    .await?;
    Ok(())
}

/// A resource of the file: its kind, as a plan names it and as a change does, and its key.
type Key<'k> = (&'static str, ResourceKind, &'k str);

/// Writes resource `key` if the file changes it: creates it (its id then goes into `ids`) when
/// the tables lack it (`before` is `None`), else patches the fields of `after` that differ from
/// `before`.
async fn put(
    tx: &mut PgConnection,
    by: By<'_>,
    w: &Writing<'_>,
    (kind, resource, key): Key<'_>,
    ids: &mut HashMap<String, i64>,
    (before, after): (Option<Map<String, Value>>, Map<String, Value>),
) -> ApiResult<()> {
    if !w.differs(kind, key) {
        return Ok(());
    }
    let at = w.path(kind, key);
    match before {
        Some(before) => {
            let id = id_in(ids, kind, key)?;
            patch(tx, by, &at, (resource, id), &before, &after).await
        }
        None => {
            let id = create(tx, by, &at, resource, None, &after).await?;
            ids.insert(key.to_owned(), id);
            Ok(())
        }
    }
}

/// The `id` of what a create answered.
async fn created_id(response: Response) -> ApiResult<i64> {
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .map_err(|e| ApiError::Internal(anyhow::anyhow!("reading a create's answer: {e}")))?;
    serde_json::from_slice::<Value>(&bytes)
        .ok()
        .and_then(|value| value.get("id").and_then(Value::as_i64))
        .ok_or_else(|| ApiError::Internal(anyhow::anyhow!("a create answered no id")))
}

/// A REST body of type `T` made of `fields`, validated as the REST call validates it.
fn typed<T: DeserializeOwned>(fields: &Map<String, Value>) -> ApiResult<T> {
    let bytes = serde_json::to_vec(&create_body(fields))
        .map_err(|e| ApiError::Internal(anyhow::anyhow!("encoding a body: {e}")))?;
    parse_body(&Bytes::from(bytes))
}

/// Writes the file over the tables.
pub(super) async fn write(tx: &mut PgConnection, by: By<'_>, w: &Writing<'_>) -> ApiResult<()> {
    let mut ids = Ids::of(w.parts);
    ids.webhooks = w.webhooks.iter().map(|h| (h.name.clone(), h.id)).collect();
    write_settings(tx, by, w).await?;
    for channel in &w.after.channels {
        write_channel(tx, by, w, &mut ids, channel).await?;
    }
    for route in &w.after.routes {
        let stored = w
            .before
            .routes
            .iter()
            .find(|r| r.model_pattern == route.model_pattern);
        let key = ("route", ResourceKind::Route, route.model_pattern.as_str());
        let fields = (stored.map(route_fields), route_fields(route));
        put(tx, by, w, key, &mut ids.routes, fields).await?;
    }
    write_members(tx, by, w, &ids).await?;
    for route in &w.after.routes {
        write_mode(tx, by, w, &ids, route).await?;
    }
    for team in &w.after.teams {
        let stored = w.before.teams.iter().find(|t| t.name == team.name);
        let key = ("team", ResourceKind::Team, team.name.as_str());
        let fields = (stored.map(team_fields), team_fields(team));
        put(tx, by, w, key, &mut ids.teams, fields).await?;
    }
    for token in &w.after.tokens {
        write_token(tx, by, w, &mut ids, token).await?;
    }
    for shadow in &w.after.shadows {
        write_shadow(tx, by, w, &mut ids, shadow).await?;
    }
    for rule in &w.after.cache_rules {
        let stored = w.before.cache_rules.iter().find(|c| c.name == rule.name);
        let key = ("cache_rule", ResourceKind::CacheRule, rule.name.as_str());
        let before = stored.map(|r| cache_rule_fields(r, &ids)).transpose()?;
        let fields = (before, cache_rule_fields(rule, &ids)?);
        put(tx, by, w, key, &mut ids.cache_rules, fields).await?;
    }
    for price in &w.after.prices {
        let key = price_key(price);
        let stored = w.before.prices.iter().find(|p| price_key(p) == key);
        let before = stored.map(|p| price_fields(p, &ids)).transpose()?;
        let fields = (before, price_fields(price, &ids)?);
        let key = ("price", ResourceKind::Price, key.as_str());
        put(tx, by, w, key, &mut ids.prices, fields).await?;
    }
    for limit in &w.after.limits {
        let key = limit_key(limit);
        let stored = w.before.limits.iter().find(|l| limit_key(l) == key);
        let before = stored.map(|l| limit_fields(l, &ids)).transpose()?;
        let fields = (before, limit_fields(limit, &ids)?);
        let key = ("limit", ResourceKind::Limit, key.as_str());
        put(tx, by, w, key, &mut ids.limits, fields).await?;
    }
    write_guardrails(tx, by, w, &mut ids).await?;
    write_webhooks(tx, by, w, &mut ids).await?;
    delete_unwanted(tx, by, w, &ids).await
}

/// The file's webhooks (they refer to nothing else).
async fn write_webhooks(
    tx: &mut PgConnection,
    by: By<'_>,
    w: &Writing<'_>,
    ids: &mut Ids,
) -> ApiResult<()> {
    for hook in &w.after.webhooks {
        let stored = w.before.webhooks.iter().find(|h| h.name == hook.name);
        let fields = (stored.map(webhooks::fields), webhooks::fields(hook));
        let key = ("webhook", ResourceKind::Webhook, hook.name.as_str());
        put(tx, by, w, key, &mut ids.webhooks, fields).await?;
    }
    Ok(())
}

/// The file's guardrails, after what they are attached to exists.
async fn write_guardrails(
    tx: &mut PgConnection,
    by: By<'_>,
    w: &Writing<'_>,
    ids: &mut Ids,
) -> ApiResult<()> {
    for rule in &w.after.guardrails {
        let stored = w.before.guardrails.iter().find(|g| g.name == rule.name);
        let before = stored.map(|g| guardrail_fields(g, ids)).transpose()?;
        let fields = (before, guardrail_fields(rule, ids)?);
        let key = ("guardrail", ResourceKind::Guardrail, rule.name.as_str());
        put(tx, by, w, key, &mut ids.guardrails, fields).await?;
    }
    Ok(())
}

fn guardrail_fields(rule: &RawGuardrail, ids: &Ids) -> ApiResult<Map<String, Value>> {
    let (scope, scope_id) = match (&rule.route, &rule.team, &rule.token) {
        (Some(route), _, _) => ("route", Some(id_in(&ids.routes, "route", route)?)),
        (_, Some(team), _) => ("team", Some(id_in(&ids.teams, "team", team)?)),
        (_, _, Some(token)) => ("token", Some(id_in(&ids.token_names, "token", token)?)),
        _ => ("all", None),
    };
    Ok(object(json!({
        "name": rule.name,
        "scope": scope,
        "scope_id": scope_id,
        "stage": rule.stage,
        "action": rule.action,
        "restore": rule.restore,
        "mode": rule.mode,
        "enabled": rule.enabled,
        "checks": rule.checks,
        "uninspectable": rule.uninspectable,
    })))
}

/// The stored settings document: only what differs from the defaults.
fn stored_settings(settings: &Settings) -> ApiResult<Map<String, Value>> {
    let to_map = |s: &Settings| match serde_json::to_value(s) {
        Ok(Value::Object(map)) => Ok(map),
        _ => Err(ApiError::Internal(anyhow::anyhow!(
            "settings do not serialise to an object"
        ))),
    };
    let defaults = to_map(&Settings::default())?;
    Ok(to_map(settings)?
        .into_iter()
        .filter(|(k, v)| defaults.get(k) != Some(v))
        .collect())
}

async fn write_settings(tx: &mut PgConnection, by: By<'_>, w: &Writing<'_>) -> ApiResult<()> {
    if !w.differs("settings", "settings") {
        return Ok(());
    }
    let body = Some(Value::Object(stored_settings(&w.after.settings)?));
    let (resource, op) = (ResourceKind::Settings, ChangeOp::Put);
    run(tx, by, "settings", resource, op, (None, None), body).await?;
    Ok(())
}

/// A channel as its REST body gives it. `status` is the file's: `enabled` leaves an automatic
/// disable to the recovery job (the tables' canonical form says `enabled` for it too, so an
/// unchanged status is never written).
fn channel_fields(channel: &RawChannel) -> Map<String, Value> {
    object(json!({
        "name": channel.name,
        "preset": channel.preset,
        "provider": channel.resolved_provider(),
        "base_url": channel.resolved_base_url().unwrap_or_default(),
        "status": channel.status,
        "auto_ban": channel.auto_ban,
        "max_concurrency": channel.max_concurrency,
        "capabilities": channel.capabilities,
        "retry_status_codes": channel.retry_status_codes,
        "retry_error_patterns": channel.retry_error_patterns,
        "headers": channel.headers,
        "responses_api": channel.resolved_responses_api(),
        "passthrough": channel.passthrough,
        "auth": channel.auth.as_deref().map_or("credentials", str::trim),
    }))
}

async fn write_channel(
    tx: &mut PgConnection,
    by: By<'_>,
    w: &Writing<'_>,
    ids: &mut Ids,
    channel: &RawChannel,
) -> ApiResult<()> {
    if !w.differs("channel", &channel.name) {
        return Ok(());
    }
    let before = w.before.channels.iter().find(|c| c.name == channel.name);
    let stored = w
        .credentials
        .get(&channel.name)
        .map_or(&[][..], Vec::as_slice);
    let at = format!("{}.credentials", w.path("channel", &channel.name));
    // A channel turning to its workload identity first loses its stored credentials (it cannot
    // hold both).
    let workload = channel.auth.as_deref().map(str::trim) == Some("workload");
    let existing = before.and_then(|_| id_in(&ids.channels, "channel", &channel.name).ok());
    if let (true, Some(id)) = (workload, existing) {
        sync_credentials(tx, by, &at, id, stored, &[]).await?;
    }
    let key = ("channel", ResourceKind::Channel, channel.name.as_str());
    let fields = (before.map(channel_fields), channel_fields(channel));
    put(tx, by, w, key, &mut ids.channels, fields).await?;
    let id = id_in(&ids.channels, "channel", &channel.name)?;
    if workload && existing.is_some() {
        return Ok(());
    }
    sync_credentials(tx, by, &at, id, stored, &channel.credentials).await
}

/// A credential's secret source: a stored credential's id, an environment variable's name or an
/// inline secret.
enum Source<'a> {
    Stored(i64),
    Env(&'a str),
    Inline(&'a str),
}

fn source(credential: &RawCredential) -> (Source<'_>, bool) {
    let (secret, id, enabled) = match credential {
        RawCredential::Plain(s) => (Some(s), None, true),
        RawCredential::Full {
            id,
            secret,
            enabled,
        } => (secret.as_ref(), *id, *enabled),
    };
    let source = match (secret, id) {
        (Some(s), _) => match env_reference(s) {
            Some(name) => Source::Env(name),
            None => Source::Inline(s.trim()),
        },
        (None, Some(id)) => Source::Stored(id),
        // Refused by validation.
        (None, None) => Source::Stored(0),
    };
    (source, enabled)
}

/// Makes the credentials of channel `channel_id` (`stored`) those of `wanted`: a stored one is
/// kept (by id, or by its environment variable) and its `enabled` patched, a new one created,
/// the others deleted.
async fn sync_credentials(
    tx: &mut PgConnection,
    by: By<'_>,
    at: &str,
    channel_id: i64,
    stored: &[StoredCredential],
    wanted: &[RawCredential],
) -> ApiResult<()> {
    let mut kept: HashSet<i64> = HashSet::new();
    for credential in wanted {
        let (source, enabled) = source(credential);
        let existing = match source {
            Source::Stored(id) => stored.iter().find(|s| s.id == id),
            Source::Env(name) => stored
                .iter()
                .find(|s| !kept.contains(&s.id) && s.secret_env.as_deref() == Some(name)),
            Source::Inline(_) => None,
        };
        let resource = ResourceKind::Credential;
        let created = match (existing, source) {
            (Some(row), _) => {
                kept.insert(row.id);
                let before = object(json!({ "enabled": row.enabled }));
                let after = object(json!({ "enabled": enabled }));
                patch(tx, by, at, (resource, row.id), &before, &after).await?;
                continue;
            }
            (None, Source::Env(name)) => json!({ "secret_env": name, "enabled": enabled }),
            (None, Source::Inline(secret)) => json!({ "secret": secret, "enabled": enabled }),
            (None, Source::Stored(id)) => {
                return Err(ApiError::Internal(anyhow::anyhow!(
                    "stored credential {id} vanished during the apply"
                )));
            }
        };
        create(tx, by, at, resource, Some(channel_id), &object(created)).await?;
    }
    for row in stored.iter().filter(|s| !kept.contains(&s.id)) {
        delete(tx, by, at, ResourceKind::Credential, row.id).await?;
    }
    Ok(())
}

/// A route as its REST body gives it, but its routing mode and single member: those are written
/// once its members are ([`write_mode`]).
fn route_fields(route: &RawRoute) -> Map<String, Value> {
    object(json!({
        "model_pattern": route.model_pattern,
        "enabled": route.enabled,
        "sticky_session": route.sticky_session,
        "stable_first": route.stable_first,
        "stable_first_denominator": route.stable_first_denominator,
        "retry_times": route.retry_times,
        "channel_retry_times": route.channel_retry_times,
        "cooldown_seconds": route.cooldown_seconds,
    }))
}

/// A route's routing mode and single member; a route is created `auto` without one.
fn mode_fields(route: Option<&RawRoute>) -> Map<String, Value> {
    object(match route {
        Some(route) => json!({
            "routing_mode": route.routing_mode,
            "single_member_id": route.single_member_id,
        }),
        None => json!({ "routing_mode": "auto", "single_member_id": null }),
    })
}

async fn write_mode(
    tx: &mut PgConnection,
    by: By<'_>,
    w: &Writing<'_>,
    ids: &Ids,
    route: &RawRoute,
) -> ApiResult<()> {
    let pattern = &route.model_pattern;
    if !w.differs("route", pattern) {
        return Ok(());
    }
    let stored = w.before.routes.iter().find(|r| r.model_pattern == *pattern);
    let id = (ResourceKind::Route, id_in(&ids.routes, "route", pattern)?);
    let at = w.path("route", pattern);
    patch(
        tx,
        by,
        &at,
        id,
        &mode_fields(stored),
        &mode_fields(Some(route)),
    )
    .await
}

fn member_fields(route: &RawRoute, member: &RawMember, ids: &Ids) -> ApiResult<Map<String, Value>> {
    Ok(object(json!({
        "channel_id": id_in(&ids.channels, "channel", &member.channel)?,
        "upstream_model": member.upstream_model.as_deref().unwrap_or(&route.model_pattern),
        "group_name": member.group.as_deref().unwrap_or(DEFAULT_GROUP),
        "priority": member.priority,
        "weight": member.weight,
        "enabled": member.enabled,
        "canary": member.canary,
        "capabilities": member.capabilities,
    })))
}

/// Members by id (a member the file gives no id is new): created (with the file's id when it
/// gives one), patched or, moved to another route, created again there under its id.
async fn write_members(
    tx: &mut PgConnection,
    by: By<'_>,
    w: &Writing<'_>,
    ids: &Ids,
) -> ApiResult<()> {
    let stored: HashMap<i64, (&RawRoute, &RawMember)> = w
        .before
        .routes
        .iter()
        .flat_map(|r| r.members.iter().map(move |m| (m, r)))
        .filter_map(|(m, r)| m.id.map(|id| (id, (r, m))))
        .collect();
    for route in &w.after.routes {
        let route_id = id_in(&ids.routes, "route", &route.model_pattern)?;
        for (n, member) in route.members.iter().enumerate() {
            let key = match member.id {
                Some(id) => id.to_string(),
                None => format!("{}[new {n}]", route.model_pattern),
            };
            if !w.differs("member", &key) {
                continue;
            }
            let at = w.path("member", &key);
            let fields = member_fields(route, member, ids)?;
            let old = member.id.and_then(|id| stored.get(&id));
            match (member.id, old) {
                (Some(id), Some((r, m))) if r.model_pattern == route.model_pattern => {
                    let before = member_fields(r, m, ids)?;
                    patch(tx, by, &at, (ResourceKind::Member, id), &before, &fields).await?;
                }
                (id, old) => {
                    if let (Some(id), Some(_)) = (id, old) {
                        delete(tx, by, &at, ResourceKind::Member, id).await?;
                    }
                    let raw = typed(&fields).map_err(|e| dry_run::at_place(&at, &at, e.into()))?;
                    members::create_as(&mut *tx, by, route_id, raw, id)
                        .await
                        .map_err(|e| dry_run::at_place(&at, &at, e.into()))?;
                }
            }
        }
    }
    Ok(())
}

fn team_fields(team: &RawTeam) -> Map<String, Value> {
    object(json!({
        "name": team.name,
        "models": team.models,
        "members": team.members,
        "plan": team.plan,
        "retry_limit": team.retry_limit,
        "disable_failover": team.disable_failover,
    }))
}

fn token_fields(token: &RawToken, ids: &Ids) -> ApiResult<Map<String, Value>> {
    Ok(object(json!({
        "name": token.name,
        "route_group_name": token.route_group,
        "team_id": id_of(&ids.teams, "team", token.team.as_ref())?,
        "allow_pinning": token.allow_pinning,
        "enabled": token.enabled,
        "expires_at": token.expires_at,
    })))
}

/// Tokens by hash: the file gives the hash (and prefix) of a token whose plaintext the control
/// plane never sees.
async fn write_token(
    tx: &mut PgConnection,
    by: By<'_>,
    w: &Writing<'_>,
    ids: &mut Ids,
    token: &RawToken,
) -> ApiResult<()> {
    let hash = token.token_sha256.clone().unwrap_or_default();
    if !w.differs("token", &hash) {
        return Ok(());
    }
    let at = w.path("token", &hash);
    let fields = token_fields(token, ids)?;
    let prefix = token.prefix.as_deref().unwrap_or_default();
    let located = |e: ApiError| dry_run::at_place(&at, &at, e.into());
    match w
        .before
        .tokens
        .iter()
        .find(|t| t.token_sha256 == token.token_sha256)
    {
        Some(stored) => {
            let id = id_in(&ids.tokens, "token", &hash)?;
            let before = token_fields(stored, ids)?;
            patch(tx, by, &at, (ResourceKind::Token, id), &before, &fields).await?;
            // A limit names its token by the name the file gives it.
            ids.token_names.insert(token.name.clone(), id);
            if stored.prefix != token.prefix {
                tokens::set_prefix(&mut *tx, id, prefix).await?;
            }
        }
        None => {
            let raw = typed(&fields).map_err(located)?;
            let given = tokens::Given {
                hash: &hash,
                prefix,
            };
            let id = tokens::create_as(&mut *tx, by, raw, Some(given))
                .await
                .map_err(located)?;
            let id = created_id(id).await?;
            ids.tokens.insert(hash, id);
            ids.token_names.insert(token.name.clone(), id);
        }
    }
    Ok(())
}

fn shadow_fields(shadow: &RawShadow, ids: &Ids) -> ApiResult<Map<String, Value>> {
    Ok(object(json!({
        "name": shadow.name,
        "model_pattern": shadow.model_pattern,
        "target_member_id": shadow.target_member,
        "target_channel_id": id_of(&ids.channels, "channel", shadow.target_channel.as_ref())?,
        "target_model": shadow.target_model,
        "sample_percent": shadow.sample_percent,
        "max_rps": shadow.max_rps,
        "max_daily_spend_usd": shadow.max_daily_spend_usd.as_ref().map(amount),
        "expires_at": shadow.expires_at,
        "error_rate_stop": shadow.error_rate_stop,
        "error_rate_min_sample": shadow.error_rate_min_sample,
        "enabled": shadow.enabled,
    })))
}

/// Shadow rules, by name. A rule the file changes runs again if it had stopped by itself (its
/// patch says `enabled`, which clears a stop as it does in the admin API): the operator has
/// changed what stopped it. A rule the file leaves as it is keeps its stop. A target given
/// replaces the old one whole, so a changed target is given whole.
async fn write_shadow(
    tx: &mut PgConnection,
    by: By<'_>,
    w: &Writing<'_>,
    ids: &mut Ids,
    shadow: &RawShadow,
) -> ApiResult<()> {
    let fields = shadow_fields(shadow, ids)?;
    let stored = w.before.shadows.iter().find(|s| s.name == shadow.name);
    let before = stored.map(|s| shadow_fields(s, ids)).transpose()?;
    let before = before.map(|mut before| {
        let target = ["target_member_id", "target_channel_id", "target_model"];
        let retarget = target.iter().any(|k| before.get(*k) != fields.get(*k));
        for key in target.iter().filter(|_| retarget).chain(&["enabled"]) {
            before.remove(*key);
        }
        before
    });
    let key = ("shadow", ResourceKind::Shadow, shadow.name.as_str());
    put(tx, by, w, key, &mut ids.shadows, (before, fields)).await
}

fn cache_rule_fields(rule: &RawCacheRule, ids: &Ids) -> ApiResult<Map<String, Value>> {
    let semantic = match &rule.semantic {
        Some(part) => json!({
            "channel": id_in(&ids.channels, "channel", &part.channel)?,
            "model": part.model,
            "threshold": part.threshold,
            "mode": part.mode,
        }),
        None => Value::Null,
    };
    Ok(object(json!({
        "name": rule.name,
        "model_pattern": rule.model_pattern,
        "endpoints": rule.endpoints,
        "ttl_seconds": rule.ttl_seconds,
        "max_entry_bytes": rule.max_entry_bytes,
        "scope": rule.scope,
        "deterministic_only": rule.deterministic_only,
        "enabled": rule.enabled,
        "semantic": semantic,
        "team_id": id_of(&ids.teams, "team", rule.team.as_ref())?,
    })))
}

fn price_fields(price: &RawPrice, ids: &Ids) -> ApiResult<Map<String, Value>> {
    Ok(object(json!({
        "channel_id": id_in(&ids.channels, "channel", &price.channel)?,
        "model_pattern": price.model_pattern,
        "input_per_million": amount(&price.input_per_million),
        "output_per_million": amount(&price.output_per_million),
        "cached_input_per_million": price.cached_input_per_million.as_ref().map(amount),
    })))
}

fn limit_fields(limit: &RawLimit, ids: &Ids) -> ApiResult<Map<String, Value>> {
    let (scope, scope_id) = if let Some(name) = &limit.token {
        ("token", id_in(&ids.token_names, "token", name)?)
    } else if let Some(name) = &limit.team {
        ("team", id_in(&ids.teams, "team", name)?)
    } else if let Some(pattern) = &limit.route {
        ("route", id_in(&ids.routes, "route", pattern)?)
    } else if let Some(name) = &limit.channel {
        ("channel", id_in(&ids.channels, "channel", name)?)
    } else if limit.tag.is_some() {
        ("tag", 0)
    } else if limit.end_user.is_some() || limit.each_end_user {
        ("end_user", 0)
    } else {
        ("member", limit.member.unwrap_or_default())
    };
    let route_id = match &limit.on_route {
        Some(pattern) => Some(id_in(&ids.routes, "route", pattern)?),
        None => None,
    };
    Ok(object(json!({
        "scope": scope,
        "scope_id": scope_id,
        "metric": limit.metric,
        "window": limit.window,
        "value": amount(&limit.value),
        "mode": limit.mode,
        "model_pattern": limit.model_pattern,
        "route_id": route_id,
        "notify_at": limit.notify_at,
        "tag": limit.tag,
        "end_user": limit.end_user,
    })))
}

/// Deletes what the tables hold and the file does not, from the leaves up.
async fn delete_unwanted(
    tx: &mut PgConnection,
    by: By<'_>,
    w: &Writing<'_>,
    ids: &Ids,
) -> ApiResult<()> {
    let wanted =
        |kind: &'static str, key: &str| w.after_index.contains_key(&(kind, key.to_owned()));
    let kinds: [(&'static str, ResourceKind, &HashMap<String, i64>); 10] = [
        ("webhook", ResourceKind::Webhook, &ids.webhooks),
        ("limit", ResourceKind::Limit, &ids.limits),
        ("guardrail", ResourceKind::Guardrail, &ids.guardrails),
        ("cache_rule", ResourceKind::CacheRule, &ids.cache_rules),
        ("price", ResourceKind::Price, &ids.prices),
        ("shadow", ResourceKind::Shadow, &ids.shadows),
        ("token", ResourceKind::Token, &ids.tokens),
        ("team", ResourceKind::Team, &ids.teams),
        ("route", ResourceKind::Route, &ids.routes),
        ("channel", ResourceKind::Channel, &ids.channels),
    ];
    for (kind, resource, ids) in kinds {
        if kind == "route" {
            delete_members(tx, by, w).await?;
        }
        for (key, id) in ids {
            if w.stored(kind, key) && !wanted(kind, key) {
                delete(tx, by, kind, resource, *id).await?;
            }
        }
    }
    Ok(())
}

/// Deletes the stored members the file no longer has (a route deleted takes its own along).
async fn delete_members(tx: &mut PgConnection, by: By<'_>, w: &Writing<'_>) -> ApiResult<()> {
    let kept: HashSet<&str> = w
        .after
        .routes
        .iter()
        .map(|r| r.model_pattern.as_str())
        .collect();
    for route in w
        .before
        .routes
        .iter()
        .filter(|r| kept.contains(r.model_pattern.as_str()))
    {
        for id in route.members.iter().filter_map(|m| m.id) {
            if !w.after_index.contains_key(&("member", id.to_string())) {
                delete(tx, by, "member", ResourceKind::Member, id).await?;
            }
        }
    }
    Ok(())
}
