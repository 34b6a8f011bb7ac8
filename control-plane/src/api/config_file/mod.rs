//! Configuration as code (docs/src/guides/config-as-code.md): the fleet's configuration as one
//! YAML file in the standalone proxy's schema (`switchyard-config`).
//!
//! - **export**: the tables in canonical form ([`canonical`]), so two exports of one state are
//!   byte-identical.
//! - **plan**: the file is validated exactly as the standalone proxy validates it (field paths in
//!   every error), then compared with the tables resource by resource and field by field; the
//!   changes are written in a transaction that is rolled back, and the dry run's comparison of the
//!   snapshots before and after says what traffic would move.
//! - **apply**: the same writes in one transaction, committed through [`crate::db::commit_write`]
//!   as one revision with one audit row (`resource: config`). A file that changes nothing writes
//!   nothing: no revision, no audit row.
//!
//! The writes are the changes a dry run takes (`write`: a create, patch or delete of one
//! resource with its REST body), each through the resource's own code, so the file meets every
//! rule the admin API applies.
//!
//! Secrets: a credential in the file is `${ENV_NAME}` (stored as the reference; each proxy
//! resolves it from its own environment), `{id: N}` (keep the secret the control plane stores
//! for credential N) or an inline value (stored; never shown by a plan or an export).

mod canonical;
mod size;
mod webhooks;
mod write;

use std::collections::{BTreeMap, HashMap, HashSet};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;
use serde_json::Value;
use sqlx::{PgConnection, PgPool};
use switchyard_config::{env_reference, ConfigError, RawConfig, RawCredential};
use switchyard_engine::{HealthView, NoHealth, Snapshot};
use switchyard_state::unix_ms;
use utoipa::ToSchema;

use super::dry_run::{self, AffectedSelection, ModelMove, NewlyFailing, UnreachableMember};
use super::extract::{Actor, RawBody};
use super::reply::with_revision;
use super::rows::By;
use crate::db::{commit_write, Audit};
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::live::LiveState;
use crate::state::AppState;
use canonical::{canonical, index, mask_header, redact, Extras};
use size::{check_snapshot_size, MAX_SNAPSHOT_BYTES};
use write::{Index, Paths, StoredCredential, Writing};

/// How `${ENV}` references of the file (a token's plaintext) are resolved: the environment of
/// whoever applies.
pub type Env = dyn Fn(&str) -> Option<String> + Sync;

/// One field of a resource, before and after (`null`: unset, or the resource is absent).
#[derive(Debug, Clone, Serialize, ToSchema, PartialEq)]
pub struct FieldChange {
    pub field: String,
    #[schema(value_type = FieldValue)]
    pub before: Value,
    #[schema(value_type = FieldValue)]
    pub after: Value,
}

/// Schema only: a field's value as the file writes it.
pub struct FieldValue;

impl utoipa::PartialSchema for FieldValue {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{
            AdditionalProperties, ArrayBuilder, ObjectBuilder, OneOfBuilder, Schema, SchemaType,
            Type,
        };
        let scalar = |t: Type| ObjectBuilder::new().schema_type(SchemaType::Type(t));
        let map = || {
            ObjectBuilder::new()
                .schema_type(SchemaType::Type(Type::Object))
                .additional_properties(Some(AdditionalProperties::FreeForm(true)))
        };
        utoipa::openapi::RefOr::T(Schema::OneOf(
            OneOfBuilder::new()
                .item(scalar(Type::Null))
                .item(scalar(Type::Boolean))
                .item(scalar(Type::Number))
                .item(scalar(Type::String))
                .item(
                    ArrayBuilder::new().items(
                        OneOfBuilder::new()
                            .item(scalar(Type::Number))
                            .item(scalar(Type::String))
                            .item(map()),
                    ),
                )
                .item(map())
                .description(Some(
                    "The field's value as the configuration file writes it (a default is shown \
                     as its value; `null`: unset). A credential's secret is `(secret)` unless \
                     it is an `${ENV}` reference.",
                ))
                .build(),
        ))
    }
}

impl ToSchema for FieldValue {
    fn name() -> std::borrow::Cow<'static, str> {
        std::borrow::Cow::Borrowed("FieldValue")
    }
}

/// A resource the file adds, changes or removes.
#[derive(Debug, Clone, Serialize, ToSchema, PartialEq)]
pub struct ResourceChange {
    /// `settings`, `channel`, `route`, `member`, `team`, `token`, `price`, `limit`, `shadow`,
    /// `cache_rule`, `guardrail` or `webhook`.
    pub resource: String,
    /// Its natural key: a name, a model pattern, a member id, a token's SHA-256,
    /// `channel/pattern` for a price, `scope:name:metric:window` for a limit, a shadow, cache
    /// or guardrail rule's or a webhook's name.
    pub key: String,
    /// `add`, `change` or `remove`.
    pub action: String,
    /// The fields that differ (every field of an added resource; none of a removed one).
    pub fields: Vec<FieldChange>,
}

/// The traffic a plan would move: the dry run's comparison of the snapshots before and after.
#[derive(Debug, Serialize, ToSchema)]
pub struct Traffic {
    /// "redis" (the fleet's live health view) or "none".
    pub health_view: String,
    /// Every (model, group, team) whose selection would change, with each member's
    /// probability before and after.
    pub affected: Vec<AffectedSelection>,
    pub unreachable_members: Vec<UnreachableMember>,
    pub models_unresolved: Vec<ModelMove>,
    pub models_rerouted: Vec<ModelMove>,
    pub newly_failing: Vec<NewlyFailing>,
    pub truncated: bool,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct PlanResponse {
    /// The revision the plan compared against; nothing was written.
    pub base_revision: u64,
    pub changes: Vec<ResourceChange>,
    pub traffic: Traffic,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ApplyResponse {
    /// The revision the apply produced; `null` when the file changed nothing.
    pub revision: Option<i64>,
    pub changes: Vec<ResourceChange>,
}

/// The tables as the configuration sees them.
struct Current {
    parts: switchyard_engine::SnapshotParts,
    /// Channel name → credentials in file form.
    credentials: HashMap<String, Vec<RawCredential>>,
    /// Channel name → its stored inline secrets: (credential id, secret). Never shown.
    inline: HashMap<String, Vec<(i64, String)>>,
    /// Channel name → its stored credentials, by id.
    stored_credentials: HashMap<String, Vec<StoredCredential>>,
    prefixes: HashMap<String, String>,
    /// Token name → how many tokens have it.
    token_names: HashMap<String, usize>,
    /// Limit id → its own notification thresholds.
    notify_at: HashMap<i64, Vec<i32>>,
    /// The webhooks, which no snapshot holds.
    webhooks: Vec<webhooks::StoredWebhook>,
}

#[derive(sqlx::FromRow)]
struct CredentialRow {
    id: i64,
    channel: String,
    secret: Option<String>,
    secret_env: Option<String>,
    enabled: bool,
}

fn env_credential(name: &str, enabled: bool) -> RawCredential {
    let reference = format!("${{{name}}}");
    if enabled {
        RawCredential::Plain(reference)
    } else {
        RawCredential::Full {
            id: None,
            secret: Some(reference),
            enabled,
        }
    }
}

async fn load(tx: &mut PgConnection) -> ApiResult<Current> {
    let parts = crate::compile::parts_in(&mut *tx)
        .await
        .map_err(ApiError::Internal)?;
    let rows: Vec<CredentialRow> = sqlx::query_as(
        "SELECT c.id, ch.name AS channel, c.secret, c.secret_env, c.enabled FROM credentials c \
         JOIN channels ch ON ch.id = c.channel_id ORDER BY ch.name, c.id",
    )
    .fetch_all(&mut *tx)
    .await?;
    let mut credentials: HashMap<String, Vec<RawCredential>> = HashMap::new();
    let mut inline: HashMap<String, Vec<(i64, String)>> = HashMap::new();
    let mut stored_credentials: HashMap<String, Vec<StoredCredential>> = HashMap::new();
    for row in rows {
        stored_credentials
            .entry(row.channel.clone())
            .or_default()
            .push(StoredCredential {
                id: row.id,
                secret_env: row.secret_env.clone(),
                enabled: row.enabled,
            });
        let form = match (row.secret, row.secret_env) {
            (_, Some(name)) => env_credential(&name, row.enabled),
            (Some(secret), None) => {
                inline
                    .entry(row.channel.clone())
                    .or_default()
                    .push((row.id, secret));
                RawCredential::Full {
                    id: Some(row.id),
                    secret: None,
                    enabled: row.enabled,
                }
            }
            (None, None) => continue,
        };
        credentials.entry(row.channel).or_default().push(form);
    }
    let prefixes: HashMap<String, String> = sqlx::query_as("SELECT hash, prefix FROM tokens")
        .fetch_all(&mut *tx)
        .await?
        .into_iter()
        .collect();
    let mut token_names: HashMap<String, usize> = HashMap::new();
    for token in &parts.tokens {
        *token_names.entry(token.name.clone()).or_default() += 1;
    }
    let notify_at: HashMap<i64, Vec<i32>> =
        sqlx::query_as("SELECT id, notify_at FROM limits WHERE notify_at IS NOT NULL")
            .fetch_all(&mut *tx)
            .await?
            .into_iter()
            .collect();
    let webhooks = webhooks::stored(&mut *tx).await?;
    Ok(Current {
        webhooks,
        parts,
        credentials,
        inline,
        stored_credentials,
        prefixes,
        token_names,
        notify_at,
    })
}

impl Current {
    fn canonical(&self) -> RawConfig {
        let mut config = canonical(
            &self.parts,
            &Extras {
                credentials: &self.credentials,
                prefixes: &self.prefixes,
                explicit_member: &|_| true,
                notify_at: &self.notify_at,
            },
        );
        config.webhooks = webhooks::canonical(&self.webhooks);
        config
    }
}

/// The tables as a canonical file, read in one consistent view. Fails (500) only if a limit
/// names a token whose name several tokens share (the file names tokens by name there).
pub async fn export(pool: &PgPool) -> ApiResult<RawConfig> {
    let mut tx = pool.begin().await?;
    sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        .execute(&mut *tx)
        .await?;
    let current = load(&mut tx).await?;
    tx.commit().await?;
    check_exportable(&current)?;
    let mut config = current.canonical();
    canonical::mask_secrets(&mut config);
    Ok(config)
}

fn check_exportable(current: &Current) -> ApiResult<()> {
    for rule in &current.parts.limits {
        if rule.limit.key.scope != switchyard_engine::ScopeKind::Token {
            continue;
        }
        if let Some(token) = current
            .parts
            .tokens
            .iter()
            .find(|t| t.id == rule.limit.key.scope_id)
        {
            if current.token_names.get(&token.name).copied().unwrap_or(0) > 1 {
                return Err(ApiError::Conflict {
                    message: format!(
                        "limit {} is on token {} whose name {:?} other tokens share: the file \
                         names a limit's token by name, so rename one of them first",
                        rule.id, token.id, token.name
                    ),
                });
            }
        }
    }
    Ok(())
}

/// [`export`] as YAML text.
pub async fn export_yaml(pool: &PgPool) -> ApiResult<String> {
    let config = export(pool).await?;
    switchyard_config::to_yaml(&config).map_err(|e| ApiError::Internal(anyhow::anyhow!("{e}")))
}

fn invalid(error: ConfigError) -> ApiError {
    if error.path.is_empty() {
        // The whole file (a YAML syntax error says its line and column).
        return ApiError::Validation {
            param: "file".to_owned(),
            message: format!("file: {}", error.message),
        };
    }
    ApiError::Validation {
        param: error.path.clone(),
        message: error.to_string(),
    }
}

fn config_err(path: String, message: String) -> ApiError {
    invalid(ConfigError { path, message })
}

/// The env var a stored-secret reference stands for while the file is validated (validation
/// only: never written).
const STORED_PLACEHOLDER: &str = "${SWITCHYARD_STORED_CREDENTIAL}";

/// Validates `text` as the standalone proxy would, resolves what refers to the tables (stored
/// credentials, token prefixes) and returns its canonical form, with where each resource stands
/// in the file.
fn desired(text: &str, current: &Current, env: &Env) -> ApiResult<(RawConfig, Paths)> {
    // An empty body would remove every resource: more likely a mistake than a wish.
    let blank = |line: &str| line.trim().is_empty() || line.trim_start().starts_with('#');
    if text.lines().all(blank) {
        return Err(config_err(
            String::new(),
            "is empty, which would remove every resource; to mean that, say it: `channels: []`"
                .to_owned(),
        ));
    }
    let raw = switchyard_config::parse_raw(text).map_err(invalid)?;
    let mut for_validation = raw.clone();
    let matched = match_members(&raw, current, &mut for_validation);
    // Credentials in file form, each matched to what the tables store.
    let mut credentials: HashMap<String, Vec<RawCredential>> = HashMap::new();
    for (ci, channel) in raw.channels.iter().enumerate() {
        keep_masked(ci, channel, current, &mut for_validation)?;
        let forms = credential_forms(ci, channel, current, &mut for_validation)?;
        credentials.insert(channel.name.trim().to_owned(), forms);
    }
    let parts = for_validation
        .clone()
        .into_parts(current.parts.revision, env)
        .map_err(invalid)?;
    let explicit = check_member_ids(&raw)?;
    // A token keeps the prefix the tables show for it unless the file gives one.
    let mut prefixes: HashMap<String, String> = HashMap::new();
    for (raw_token, token) in raw.tokens.iter().zip(&parts.tokens) {
        let prefix = raw_token
            .prefix
            .clone()
            .or_else(|| current.prefixes.get(&token.hash).cloned());
        if let Some(prefix) = prefix {
            prefixes.insert(token.hash.clone(), prefix);
        }
    }
    // A limit's thresholds, by the id the file's limit got (limits compile one for one).
    let notify_at: HashMap<i64, Vec<i32>> = raw
        .limits
        .iter()
        .zip(&parts.limits)
        .filter_map(|(raw_limit, rule)| {
            let mut at = raw_limit.notify_at.clone()?;
            at.sort_unstable();
            at.dedup();
            Some((rule.id, at))
        })
        .collect();
    let mut config = canonical(
        &parts,
        &Extras {
            credentials: &credentials,
            prefixes: &prefixes,
            explicit_member: &|id| explicit.contains(&id) || matched.contains(&id),
            notify_at: &notify_at,
        },
    );
    config.webhooks = webhooks::desired(&raw.webhooks, &current.webhooks)?;
    Ok((config, paths(&for_validation, &parts)))
}

/// The credentials of channel `ci` in file form, each matched to what the tables store: an
/// inline secret the channel stores already is that credential (`{id: N}`); a stored-secret
/// reference stands in for validation as a placeholder.
fn credential_forms(
    ci: usize,
    channel: &switchyard_config::RawChannel,
    current: &Current,
    for_validation: &mut RawConfig,
) -> ApiResult<Vec<RawCredential>> {
    let name = channel.name.trim().to_owned();
    let stored = current.inline.get(&name).cloned().unwrap_or_default();
    let mut claimed: HashSet<i64> = HashSet::new();
    let mut forms = Vec::with_capacity(channel.credentials.len());
    for (ki, credential) in channel.credentials.iter().enumerate() {
        let at = format!("channels[{ci}].credentials[{ki}]");
        let (id, secret, enabled) = match credential {
            RawCredential::Plain(s) => (None, Some(s.trim()), true),
            RawCredential::Full {
                id,
                secret,
                enabled,
            } => (*id, secret.as_deref().map(str::trim), *enabled),
        };
        let form = match (secret, id) {
            (None, None) => {
                return Err(config_err(
                    at,
                    "give `secret` (a value or `${ENV_NAME}`) or the `id` of a credential \
                     the control plane stores"
                        .to_owned(),
                ))
            }
            (None, Some(id)) => {
                if !stored.iter().any(|(sid, _)| *sid == id) || !claimed.insert(id) {
                    return Err(config_err(
                        format!("{at}.id"),
                        format!("channel {name:?} stores no secret with credential id {id}"),
                    ));
                }
                let slot = for_validation
                    .channels
                    .get_mut(ci)
                    .and_then(|c| c.credentials.get_mut(ki));
                if let Some(slot) = slot {
                    *slot = RawCredential::Full {
                        id: Some(id),
                        secret: Some(STORED_PLACEHOLDER.to_owned()),
                        enabled,
                    };
                }
                RawCredential::Full {
                    id: Some(id),
                    secret: None,
                    enabled,
                }
            }
            (Some(secret), _) => secret_form(secret, enabled, &stored, &mut claimed),
        };
        forms.push(form);
    }
    Ok(forms)
}

/// A credential the file gives a secret: an `${ENV}` reference, a secret the channel stores
/// already (claimed once), or a new one.
fn secret_form(
    secret: &str,
    enabled: bool,
    stored: &[(i64, String)],
    claimed: &mut HashSet<i64>,
) -> RawCredential {
    if let Some(env_name) = env_reference(secret) {
        return env_credential(env_name, enabled);
    }
    match stored
        .iter()
        .find(|(sid, s)| s == secret && !claimed.contains(sid))
    {
        Some((sid, _)) => {
            claimed.insert(*sid);
            RawCredential::Full {
                id: Some(*sid),
                secret: None,
                enabled,
            }
        }
        None => RawCredential::Full {
            id: None,
            secret: Some(secret.to_owned()),
            enabled,
        },
    }
}

fn unknown_member(path: String, member: i64) -> ApiError {
    config_err(
        path,
        format!("unknown member id {member} (give the member an `id` in its route)"),
    )
}

/// What the standalone proxy leaves to the engine but the tables refuse: member ids are
/// positive, a single member is one of its route's, and teams, limits and shadow rules name
/// members by the ids the file gives them. Returns those ids.
fn check_member_ids(raw: &RawConfig) -> ApiResult<HashSet<i64>> {
    let explicit: HashSet<i64> = raw
        .routes
        .iter()
        .flat_map(|r| r.members.iter().filter_map(|m| m.id))
        .collect();
    for (ri, route) in raw.routes.iter().enumerate() {
        for (mi, member) in route.members.iter().enumerate() {
            if member.id.is_some_and(|id| id < 1) {
                return Err(config_err(
                    format!("routes[{ri}].members[{mi}].id"),
                    "must be a positive integer".to_owned(),
                ));
            }
        }
        if let Some(single) = route.single_member_id {
            if !route.members.iter().any(|m| m.id == Some(single)) {
                return Err(config_err(
                    format!("routes[{ri}].single_member_id"),
                    format!("{single} is not the id of a member of this route"),
                ));
            }
        }
    }
    let known = |path: String, member: &i64| {
        if explicit.contains(member) {
            Ok(())
        } else {
            Err(unknown_member(path, *member))
        }
    };
    for (ti, team) in raw.teams.iter().enumerate() {
        for (mi, member) in team.members.iter().enumerate() {
            known(format!("teams[{ti}].members[{mi}]"), member)?;
        }
        for member in team.plan.keys() {
            known(format!("teams[{ti}].plan.{member}"), member)?;
        }
    }
    check_limit_references(raw, &known)?;
    for (si, shadow) in raw.shadows.iter().enumerate() {
        if let Some(member) = &shadow.target_member {
            known(format!("shadows[{si}].target_member"), member)?;
        }
    }
    Ok(explicit)
}

/// A limit names its token by a name no other token has, and its member by an id the file
/// gives.
fn check_limit_references(
    raw: &RawConfig,
    known: &dyn Fn(String, &i64) -> ApiResult<()>,
) -> ApiResult<()> {
    let mut token_names: HashMap<&str, usize> = HashMap::new();
    for token in &raw.tokens {
        *token_names.entry(token.name.as_str()).or_default() += 1;
    }
    for (li, limit) in raw.limits.iter().enumerate() {
        if let Some(name) = &limit.token {
            if token_names.get(name.as_str()).copied().unwrap_or(0) > 1 {
                return Err(config_err(
                    format!("limits[{li}].token"),
                    format!(
                        "several tokens are named {name:?}: a limit's token needs a unique name"
                    ),
                ));
            }
        }
        if let Some(member) = &limit.member {
            known(format!("limits[{li}].member"), member)?;
        }
    }
    Ok(())
}

/// Where each resource of the file stands in it, by the key a plan names it with.
fn paths(raw: &RawConfig, parts: &switchyard_engine::SnapshotParts) -> Paths {
    let mut paths = Paths::new();
    let mut put = |kind: &'static str, key: String, path: String| {
        paths.entry((kind, key)).or_insert(path);
    };
    put("settings", "settings".to_owned(), "settings".to_owned());
    for (i, c) in raw.channels.iter().enumerate() {
        put(
            "channel",
            c.name.trim().to_owned(),
            format!("channels[{i}]"),
        );
    }
    for (i, r) in raw.routes.iter().enumerate() {
        put(
            "route",
            r.model_pattern.trim().to_owned(),
            format!("routes[{i}]"),
        );
        // A member without an id is keyed by its place in the canonical route: after those
        // with ids, in file order.
        let with_ids = r.members.iter().filter(|m| m.id.is_some()).count();
        let mut new = with_ids;
        for (n, m) in r.members.iter().enumerate() {
            let key = match m.id {
                Some(id) => id.to_string(),
                None => {
                    new += 1;
                    format!("{}[new {}]", r.model_pattern.trim(), new - 1)
                }
            };
            put("member", key, format!("routes[{i}].members[{n}]"));
        }
    }
    for (i, t) in raw.teams.iter().enumerate() {
        put("team", t.name.trim().to_owned(), format!("teams[{i}]"));
    }
    for (i, t) in parts.tokens.iter().enumerate() {
        put("token", t.hash.clone(), format!("tokens[{i}]"));
    }
    for (i, p) in raw.prices.iter().enumerate() {
        put("price", canonical::price_key(p), format!("prices[{i}]"));
    }
    for (i, l) in raw.limits.iter().enumerate() {
        put("limit", canonical::limit_key(l), format!("limits[{i}]"));
    }
    for (i, s) in raw.shadows.iter().enumerate() {
        put("shadow", s.name.trim().to_owned(), format!("shadows[{i}]"));
    }
    for (i, c) in raw.cache_rules.iter().enumerate() {
        put(
            "cache_rule",
            c.name.trim().to_owned(),
            format!("cache_rules[{i}]"),
        );
    }
    for (i, g) in raw.guardrails.iter().enumerate() {
        put(
            "guardrail",
            g.name.trim().to_owned(),
            format!("guardrails[{i}]"),
        );
    }
    for (i, w) in raw.webhooks.iter().enumerate() {
        put(
            "webhook",
            w.name.trim().to_owned(),
            format!("webhooks[{i}]"),
        );
    }
    paths
}

/// Gives each member the file writes without an id the id of a stored member of the same route
/// with the same channel, upstream model and group (the tables do not make these unique: the
/// n-th such member of the file is the n-th unclaimed one stored, by id), so re-applying a file
/// without member ids changes nothing instead of replacing every member. A stored member
/// whose id the file gives is never matched. Returns the ids matched.
fn match_members(
    raw: &RawConfig,
    current: &Current,
    for_validation: &mut RawConfig,
) -> HashSet<i64> {
    let channel_names: HashMap<i64, &str> = current
        .parts
        .channels
        .iter()
        .map(|c| (c.id, c.name.as_str()))
        .collect();
    let mut claimed: HashSet<i64> = raw
        .routes
        .iter()
        .flat_map(|r| r.members.iter().filter_map(|m| m.id))
        .collect();
    let mut matched = HashSet::new();
    for (ri, route) in raw.routes.iter().enumerate() {
        let pattern = route.model_pattern.trim();
        let Some(stored) = current
            .parts
            .routes
            .iter()
            .find(|r| r.model_pattern == pattern)
        else {
            continue;
        };
        for (mi, member) in route.members.iter().enumerate() {
            if member.id.is_some() {
                continue;
            }
            let channel = member.channel.trim();
            let upstream = member.upstream_model.as_deref().unwrap_or(pattern);
            let group = member
                .group
                .as_deref()
                .map(str::trim)
                .filter(|g| !g.is_empty())
                .unwrap_or(switchyard_engine::DEFAULT_GROUP);
            let found = stored
                .members
                .iter()
                .filter(|m| {
                    !claimed.contains(&m.id)
                        && channel_names.get(&m.channel_id) == Some(&channel)
                        && m.upstream_model == upstream
                        && m.group_name == group
                })
                .map(|m| m.id)
                .min();
            let Some(id) = found else {
                continue;
            };
            claimed.insert(id);
            matched.insert(id);
            if let Some(slot) = for_validation
                .routes
                .get_mut(ri)
                .and_then(|r| r.members.get_mut(mi))
            {
                slot.id = Some(id);
            }
        }
    }
    matched
}

/// A header value or `base_url` written masked, as an export writes them (`****abcd`,
/// `user:***@`), keeps what the control plane stores for that channel; a masked value with
/// nothing stored to keep is refused with its path (it would be stored as the mask).
fn keep_masked(
    ci: usize,
    channel: &switchyard_config::RawChannel,
    current: &Current,
    for_validation: &mut RawConfig,
) -> ApiResult<()> {
    let name = channel.name.trim();
    let stored = current.parts.channels.iter().find(|c| c.name == name);
    let Some(target) = for_validation.channels.get_mut(ci) else {
        return Ok(());
    };
    for (header, value) in &channel.headers {
        let kept = stored.and_then(|c| {
            c.headers
                .iter()
                .find(|(h, v)| h == header && mask_header(v) == *value)
                .map(|(_, v)| v.clone())
        });
        match kept {
            Some(real) => {
                target.headers.insert(header.clone(), real);
            }
            None if value.starts_with("****") => {
                return Err(config_err(
                    format!("channels[{ci}].headers.{header}"),
                    "is masked (as an export writes it) but this channel stores no such value \
                     to keep: give the value"
                        .to_owned(),
                ));
            }
            None => {}
        }
    }
    if let Some(url) = &channel.base_url {
        let url = url.trim().trim_end_matches('/');
        let kept = stored.and_then(|c| {
            let real = c.base_url.trim_end_matches('/');
            let masked = switchyard_engine::validate::redact_url_userinfo(real);
            (masked != real && masked == url).then(|| real.to_owned())
        });
        match kept {
            Some(real) => target.base_url = Some(real),
            None if url.contains(":***@") => {
                return Err(config_err(
                    format!("channels[{ci}].base_url"),
                    "its password is masked (as an export writes it) but this channel stores no \
                     such URL to keep: give the password"
                        .to_owned(),
                ));
            }
            None => {}
        }
    }
    Ok(())
}

/// The order a plan lists resources in.
fn rank(kind: &str) -> usize {
    [
        "settings",
        "channel",
        "route",
        "member",
        "team",
        "token",
        "price",
        "limit",
        "shadow",
        "cache_rule",
        "guardrail",
        "webhook",
    ]
    .iter()
    .position(|k| *k == kind)
    .unwrap_or(usize::MAX)
}

/// What a channel's preset supplies for a field the canonical form leaves out because the
/// preset gives it, so a plan says `responses_api: false -> true` for a channel whose preset
/// has no Responses API.
fn preset_default(
    kind: &str,
    values: &serde_json::Map<String, Value>,
    field: &str,
) -> Option<Value> {
    if kind != "channel" {
        return None;
    }
    let preset = switchyard_engine::catalog::preset(values.get("preset")?.as_str()?)?;
    match field {
        "provider" => Some(Value::from(preset.provider)),
        "base_url" => Some(Value::from(preset.base_url)),
        "responses_api" => Some(Value::Bool(preset.responses_api)),
        _ => None,
    }
}

/// What a field the canonical form leaves out (because it has its default) stands for, so a
/// plan says `weight: 1 -> 3` rather than `null -> 3`.
fn default_of(kind: &str, field: &str) -> Value {
    use serde_json::json;
    match (kind, field) {
        ("member", "weight") => json!(1),
        ("member", "priority") => json!(0),
        ("member", "group") => json!(switchyard_engine::DEFAULT_GROUP),
        (
            "member" | "route" | "token" | "shadow" | "cache_rule" | "guardrail" | "webhook",
            "enabled",
        )
        | ("channel", "responses_api") => {
            json!(true)
        }
        ("member", "canary")
        | ("channel", "auto_ban")
        | ("team", "disable_failover")
        | ("token", "allow_pinning")
        | ("cache_rule", "deterministic_only")
        | ("guardrail", "restore") => json!(false),
        ("guardrail", "stage") => json!("both"),
        ("guardrail", "mode") => json!("enforce"),
        ("guardrail", "uninspectable") => json!("allow"),
        ("channel", "status") => json!("enabled"),
        ("channel", "auth") => json!("credentials"),
        ("route", "routing_mode") => json!("auto"),
        ("limit", "mode") => json!("hard"),
        ("webhook", "kind") => json!("json"),
        ("webhook", "thresholds") => json!(crate::api::webhooks::DEFAULT_THRESHOLDS),
        (
            _,
            "credentials"
            | "retry_status_codes"
            | "retry_error_patterns"
            | "models"
            | "members"
            | "passthrough",
        ) => json!([]),
        (_, "headers" | "plan" | "capabilities") => json!({}),
        _ => Value::Null,
    }
}

fn fields(kind: &str, before: &Value, after: &Value) -> Vec<FieldChange> {
    let empty = serde_json::Map::new();
    let (b, a) = (
        before.as_object().unwrap_or(&empty),
        after.as_object().unwrap_or(&empty),
    );
    let names: std::collections::BTreeSet<&String> = b.keys().chain(a.keys()).collect();
    names
        .into_iter()
        .filter(|name| b.get(*name) != a.get(*name))
        .map(|name| {
            let side = |values: &serde_json::Map<String, Value>| match values.get(name) {
                Some(value) => {
                    let provider = values.get("provider").and_then(Value::as_str);
                    redact(name, value, provider.unwrap_or_default())
                }
                None => {
                    preset_default(kind, values, name).unwrap_or_else(|| default_of(kind, name))
                }
            };
            FieldChange {
                field: name.clone(),
                before: if before.is_null() {
                    Value::Null
                } else {
                    side(b)
                },
                after: side(a),
            }
        })
        .collect()
}

/// Resource by resource, field by field: what `after` changes of `before`.
fn diff(before: &Index, after: &Index) -> Vec<ResourceChange> {
    let keys: std::collections::BTreeSet<&(&'static str, String)> =
        before.keys().chain(after.keys()).collect();
    let mut changes: Vec<ResourceChange> = keys
        .into_iter()
        .filter_map(|key| {
            let (action, fields) = match (before.get(key), after.get(key)) {
                (None, Some(a)) => ("add", fields(key.0, &Value::Null, a)),
                (Some(_), None) => ("remove", Vec::new()),
                (Some(b), Some(a)) if b != a => ("change", fields(key.0, b, a)),
                _ => return None,
            };
            Some(ResourceChange {
                resource: key.0.to_owned(),
                key: key.1.clone(),
                action: action.to_owned(),
                fields,
            })
        })
        .collect();
    changes.sort_by_key(|c| rank(&c.resource));
    changes
}

/// Begins the transaction a plan or an apply works in. The revision row is locked first, so
/// no other write commits between what the comparison read and what it writes.
async fn begin(pool: &PgPool) -> ApiResult<sqlx::Transaction<'static, sqlx::Postgres>> {
    let mut tx = pool.begin().await?;
    sqlx::query("SET LOCAL lock_timeout = '5s'")
        .execute(&mut *tx)
        .await?;
    sqlx::query("SELECT revision FROM snapshot_revision FOR UPDATE")
        .execute(&mut *tx)
        .await?;
    Ok(tx)
}

struct Prepared {
    changes: Vec<ResourceChange>,
    current: Current,
    stored: RawConfig,
    desired: RawConfig,
    before: Index,
    after: Index,
    paths: Paths,
}

impl Prepared {
    /// Writes the file's changes through the resource layer, batched into the caller's
    /// transaction.
    async fn write(&self, tx: &mut PgConnection, actor: &str) -> ApiResult<()> {
        let writing = Writing {
            parts: &self.current.parts,
            credentials: &self.current.stored_credentials,
            before: &self.stored,
            after: &self.desired,
            before_index: &self.before,
            after_index: &self.after,
            paths: &self.paths,
            webhooks: &self.current.webhooks,
        };
        write::write(tx, By::batched(actor), &writing).await
    }
}

async fn prepare(tx: &mut PgConnection, text: &str, env: &Env) -> ApiResult<Prepared> {
    let current = load(tx).await?;
    let (desired, paths) = desired(text, &current, env)?;
    let stored = current.canonical();
    let before = index(&stored);
    let after = index(&desired);
    Ok(Prepared {
        changes: diff(&before, &after),
        current,
        stored,
        desired,
        before,
        after,
        paths,
    })
}

/// What applying `text` would change, and the traffic it would move; nothing is kept.
pub async fn plan(
    pool: &PgPool,
    live: Option<&LiveState>,
    text: &str,
    env: &Env,
) -> ApiResult<PlanResponse> {
    let mut tx = begin(pool).await?;
    let prepared = prepare(&mut tx, text, env).await?;
    let before = crate::compile::compile_in(&mut tx)
        .await
        .map_err(ApiError::Internal)?;
    prepared.write(&mut tx, "config-plan").await?;
    let after = crate::compile::compile_in(&mut tx)
        .await
        .map_err(ApiError::Internal)?;
    tx.rollback().await?;
    check_snapshot_size(&after, MAX_SNAPSHOT_BYTES)?;
    Ok(PlanResponse {
        base_revision: before.revision,
        changes: prepared.changes,
        traffic: traffic(&before, &after, live)?,
    })
}

fn traffic(before: &Snapshot, after: &Snapshot, live: Option<&LiveState>) -> ApiResult<Traffic> {
    let now_ms = unix_ms();
    let mut report = None;
    let health_view = match live {
        Some(live) => {
            live.store().with_view(&mut |view: &dyn HealthView| {
                report = Some(dry_run::compare(before, after, view, now_ms));
            });
            live.source()
        }
        None => {
            report = Some(dry_run::compare(before, after, &NoHealth, now_ms));
            "none"
        }
    };
    let report = report.ok_or_else(|| {
        ApiError::Internal(anyhow::anyhow!("the state store never ran the comparison"))
    })?;
    Ok(Traffic {
        health_view: health_view.to_owned(),
        affected: report.affected,
        unreachable_members: report.unreachable,
        models_unresolved: report.unresolved,
        models_rerouted: report.rerouted,
        newly_failing: report.newly_failing,
        truncated: report.truncated,
    })
}

/// Applies `text` in one transaction as one revision with one audit row naming the apply; a
/// file that changes nothing writes nothing.
pub async fn apply(pool: &PgPool, actor: &str, text: &str, env: &Env) -> ApiResult<ApplyResponse> {
    let mut tx = begin(pool).await?;
    let prepared = prepare(&mut tx, text, env).await?;
    if prepared.changes.is_empty() {
        tx.rollback().await?;
        return Ok(ApplyResponse {
            revision: None,
            changes: Vec::new(),
        });
    }
    prepared.write(&mut tx, actor).await?;
    // What was written compiles, within the size every proxy is sent, or nothing is kept.
    let compiled = crate::compile::compile_in(&mut tx)
        .await
        .map_err(ApiError::Internal)?;
    check_snapshot_size(&compiled, MAX_SNAPSHOT_BYTES)?;
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for change in &prepared.changes {
        *counts.entry(change.action.as_str()).or_default() += 1;
    }
    let summary: Vec<Value> = prepared
        .changes
        .iter()
        .map(|c| serde_json::json!({"action": c.action, "resource": c.resource, "key": c.key}))
        .collect();
    let detail = serde_json::json!({
        "apply": {
            "file_sha256": switchyard_proto::sha256_hex(text.as_bytes()),
            "added": counts.get("add").copied().unwrap_or(0),
            "changed": counts.get("change").copied().unwrap_or(0),
            "removed": counts.get("remove").copied().unwrap_or(0),
            "changes": summary,
        }
    });
    let revision = commit_write(
        tx,
        Audit {
            actor,
            action: "update",
            resource: "config",
            resource_id: None,
            detail,
            team: None,
        },
    )
    .await?;
    tracing::info!(
        revision,
        changes = prepared.changes.len(),
        actor,
        "configuration applied"
    );
    Ok(ApplyResponse {
        revision: Some(revision),
        changes: prepared.changes,
    })
}

fn body_text(body: &Bytes) -> ApiResult<&str> {
    std::str::from_utf8(body)
        .map_err(|_| ApiError::bad_request(None, "the configuration file must be UTF-8 text"))
}

/// Export: references to environment variables and stored secrets, never a secret value.
#[utoipa::path(get, path = "/api/v1/config", tag = "config", operation_id = "export_config",
    responses(
        (status = 200, description = "the fleet's configuration as a YAML file (canonical: two \
         exports of one state are byte-identical)", content_type = "text/yaml", body = String),
        (status = 409, description = "a limit names a token whose name other tokens share",
         body = ErrorBody)))]
pub async fn get_config(State(state): State<AppState>) -> ApiResult<Response> {
    let yaml = export_yaml(&state.pool).await?;
    Ok(([(header::CONTENT_TYPE, "text/yaml; charset=utf-8")], yaml).into_response())
}

/// The body is the YAML file itself. `${ENV}` token plaintexts resolve in the control plane's
/// environment.
#[utoipa::path(post, path = "/api/v1/config/plan", tag = "config", operation_id = "plan_config",
    request_body(content = String, content_type = "application/octet-stream",
                 description = "the configuration file, as it is (YAML; any content type is \
                 accepted)"),
    responses(
        (status = 200, description = "what applying the file would change; nothing was changed",
         body = PlanResponse),
        (status = 422, description = "the file is invalid; `param` is the field path in the file",
         body = ErrorBody)))]
pub async fn plan_config(
    State(state): State<AppState>,
    RawBody(body): RawBody,
) -> ApiResult<Json<PlanResponse>> {
    let text = body_text(&body)?;
    let env = |name: &str| std::env::var(name).ok();
    Ok(Json(
        plan(&state.pool, state.live.as_ref(), text, &env).await?,
    ))
}

/// One transaction, one revision, one audit row (`resource: config`); a file that changes
/// nothing answers `revision: null` and writes nothing.
#[utoipa::path(post, path = "/api/v1/config/apply", tag = "config", operation_id = "apply_config",
    request_body(content = String, content_type = "application/octet-stream",
                 description = "the configuration file, as it is (YAML; any content type is \
                 accepted)"),
    responses(
        (status = 200, description = "applied (or nothing to change)", body = ApplyResponse),
        (status = 409, description = "the tables refused a write", body = ErrorBody),
        (status = 422, description = "the file is invalid; `param` is the field path in the file; \
         nothing was applied", body = ErrorBody)))]
pub async fn apply_config(
    State(state): State<AppState>,
    Actor(actor): Actor,
    RawBody(body): RawBody,
) -> ApiResult<Response> {
    let text = body_text(&body)?;
    let env = |name: &str| std::env::var(name).ok();
    let applied = apply(&state.pool, &actor, text, &env).await?;
    Ok(match applied.revision {
        Some(revision) => with_revision(revision, (StatusCode::OK, Json(applied))),
        None => (StatusCode::OK, Json(applied)).into_response(),
    })
}
