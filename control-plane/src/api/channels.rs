//! `/api/v1/channels`: upstream endpoints, and their status history.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::response::Response;
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::json;
use utoipa::ToSchema;

use super::crud::{Crud, Item};
use super::extract::{nullable, Path, Query, Writer};
use super::reply::{Page, PageQuery};
use super::rows::RowView;
use super::rows::{
    commit_view, delete_row, insert_sql, list_children, lock_row, table_row, update_sql, By,
    Change, Db, RowQuery,
};
use crate::db::{record_status_event, ts};
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::state::AppState;
use switchyard_engine::catalog::{self, Preset};
use switchyard_engine::passthrough;
use switchyard_engine::validate::{
    check_header_name, check_header_value, check_retry_error_pattern, check_retry_error_patterns,
    check_single_line, redact_url_userinfo,
};
use switchyard_engine::{ChannelAuth, ChannelStatus, Provider};

use super::schema::{ChannelAuthName, ChannelStatusName, ProviderName};

/// What a channel (or a member, overriding its channel) declares it supports. Unset: not
/// declared, and the engine assumes support.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CapabilitiesDto {
    pub max_context: Option<u32>,
    pub streaming: Option<bool>,
    pub tools: Option<bool>,
    pub vision: Option<bool>,
    pub json_mode: Option<bool>,
}

impl CapabilitiesDto {
    pub fn validate(&self, field: &str) -> ApiResult<()> {
        if self.max_context == Some(0) {
            return Err(ApiError::validation(
                format!("{field}.max_context"),
                format!("{field}.max_context must be positive when set"),
            ));
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Serialize, sqlx::FromRow, ToSchema)]
pub struct ChannelView {
    pub id: i64,
    pub name: String,
    /// The provider preset the channel was created from (`GET /api/v1/presets`), if any.
    pub preset: Option<String>,
    #[schema(value_type = ProviderName)]
    pub provider: String,
    pub base_url: String,
    #[schema(value_type = ChannelStatusName)]
    pub status: String,
    pub auto_ban: bool,
    pub max_concurrency: Option<i32>,
    #[sqlx(json)]
    pub capabilities: CapabilitiesDto,
    pub retry_status_codes: Vec<i32>,
    pub retry_error_patterns: Vec<String>,
    #[sqlx(json)]
    pub headers: BTreeMap<String, String>,
    /// Whether the upstream has the OpenAI Responses API; `false` only on `openai` and `azure`
    /// channels, whose Responses requests are then translated into Chat Completions.
    pub responses_api: bool,
    /// The path patterns clients may reach on this channel's base URL through the proxies'
    /// pass-through routes (`/passthrough/{channel}/...`); empty: no pass-through.
    pub passthrough: Vec<String>,
    /// `credentials` (the channel's stored credentials) or `workload` (no stored secret: the
    /// proxies' own workload identity; `azure`, `bedrock` and `vertex` channels).
    #[schema(value_type = ChannelAuthName)]
    pub auth: String,
    #[schema(format = DateTime)]
    pub created_at: String,
    #[schema(format = DateTime)]
    pub updated_at: String,
}

table_row!(ChannelView, "channels", "channel", columns);

/// The select list of a channel as the API shows it. Header values often carry keys and a
/// `base_url` may carry a password, so both are masked here, in SQL, like credential secrets:
/// the real values never reach this process on a read (the snapshot compiler reads them
/// itself). Header values: `****` plus the last 4 characters for values of 12 characters or
/// more, but an Azure channel's `api-version` entries, versions and no secrets, shown as they are
/// (as the export shows it); `base_url`: `user:password@` becomes `user:***@` (the rule of
/// `switchyard_engine::validate::redact_url_userinfo`, which the audit detail uses).
fn columns() -> String {
    // The names are fixed identifiers (letters and `-`), safe inside the SQL text.
    let azure_versions = switchyard_upstream::azure_api_version_entries()
        .map(|name| format!("'{name}'"))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "id, name, preset, provider, {MASKED_BASE_URL} AS base_url, status, auto_ban, \
         max_concurrency, capabilities, retry_status_codes, retry_error_patterns, \
         (SELECT COALESCE(jsonb_object_agg(key, CASE \
                 WHEN provider = 'azure' AND lower(key) IN ({azure_versions}) THEN value \
                 WHEN char_length(value) >= 12 THEN '****' || right(value, 4) \
                 ELSE '****' END), '{{}}'::jsonb) \
          FROM jsonb_each_text(headers)) AS headers, responses_api, passthrough, auth, \
         {} AS created_at, {} AS updated_at",
        ts("created_at"),
        ts("updated_at")
    )
}

/// `base_url` with the password of its userinfo replaced by `***`.
pub(crate) const MASKED_BASE_URL: &str =
    r"regexp_replace(base_url, '^([^:/?#]+://[^/?#:]*:)[^/?#]*@', '\1***@')";

/// The unmasked values a PATCH keeps when it does not send them.
#[derive(sqlx::FromRow)]
struct Secrets {
    base_url: String,
    #[sqlx(json)]
    headers: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ChannelCreate {
    pub name: String,
    /// A provider preset (`GET /api/v1/presets`: `groq`, `ollama`, ...) supplying `provider`,
    /// `base_url` and `responses_api` where the body gives none.
    pub preset: Option<String>,
    /// Required unless `preset` gives it.
    #[serde(default)]
    #[schema(value_type = ProviderName)]
    pub provider: String,
    /// Required (except for `mock`) unless `preset` gives it.
    #[serde(default)]
    pub base_url: String,
    /// `enabled` (default) or `disabled`.
    #[schema(value_type = Option<ChannelStatusName>)]
    pub status: Option<String>,
    pub auto_ban: Option<bool>,
    pub max_concurrency: Option<i64>,
    pub capabilities: Option<CapabilitiesDto>,
    pub retry_status_codes: Option<Vec<i64>>,
    pub retry_error_patterns: Option<Vec<String>>,
    pub headers: Option<BTreeMap<String, String>>,
    /// `false` for an OpenAI-compatible upstream without the Responses API (`/v1/responses`):
    /// Responses requests are translated into Chat Completions for it. `openai` and `azure`
    /// only; default `true`.
    pub responses_api: Option<bool>,
    /// Path patterns (each starting with `/`; `*` matches any run of characters, `/` included)
    /// a client may reach on this channel's base URL through the proxies' pass-through routes
    /// (`/passthrough/{channel}/...`), with the channel's credential. Default: none (no
    /// pass-through). Not for `mock` channels.
    pub passthrough: Option<Vec<String>>,
    /// `credentials` (default) or `workload`: the channel stores no secret and the proxies
    /// authenticate with their own workload identity (AWS web identity or EKS Pod Identity,
    /// Google's metadata server or application default credentials, Entra ID workload
    /// identity). `azure`, `bedrock` and `vertex` only; such a channel takes no credentials.
    #[schema(value_type = Option<ChannelAuthName>)]
    pub auth: Option<String>,
}

/// Any subset of the create fields; `max_concurrency: null` clears the limit.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ChannelPatch {
    pub name: Option<String>,
    /// A known preset's name, or `null` to clear it; the fields it would supply are left as
    /// they are (only a create fills them in).
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<String>)]
    pub preset: Option<Option<String>>,
    #[schema(value_type = Option<ProviderName>)]
    pub provider: Option<String>,
    pub base_url: Option<String>,
    /// `enabled` or `disabled` (`auto_disabled` is kept, never set, through the API).
    #[schema(value_type = Option<ChannelStatusName>)]
    pub status: Option<String>,
    pub auto_ban: Option<bool>,
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<i64>)]
    pub max_concurrency: Option<Option<i64>>,
    pub capabilities: Option<CapabilitiesDto>,
    pub retry_status_codes: Option<Vec<i64>>,
    pub retry_error_patterns: Option<Vec<String>>,
    pub headers: Option<BTreeMap<String, String>>,
    /// `false` for an OpenAI-compatible upstream without the Responses API (`/v1/responses`):
    /// Responses requests are translated into Chat Completions for it. `openai` and `azure`
    /// only; default `true`.
    pub responses_api: Option<bool>,
    /// Path patterns (each starting with `/`; `*` matches any run of characters, `/` included)
    /// a client may reach on this channel's base URL through the proxies' pass-through routes
    /// (`/passthrough/{channel}/...`), with the channel's credential. Default: none (no
    /// pass-through). Not for `mock` channels.
    pub passthrough: Option<Vec<String>>,
    /// `credentials` or `workload` (a channel with stored credentials cannot become one).
    #[schema(value_type = Option<ChannelAuthName>)]
    pub auth: Option<String>,
}

/// A validated channel, ready to write.
struct ChannelSpec {
    name: String,
    preset: Option<&'static Preset>,
    provider: Provider,
    base_url: String,
    status: ChannelStatus,
    auto_ban: bool,
    max_concurrency: Option<i32>,
    capabilities: CapabilitiesDto,
    retry_status_codes: Vec<i32>,
    retry_error_patterns: Vec<String>,
    headers: BTreeMap<String, String>,
    responses_api: bool,
    passthrough: Vec<String>,
    auth: ChannelAuth,
}

/// `credentials` or `workload`, else a 422 naming `auth`.
fn parse_auth(value: &str) -> ApiResult<ChannelAuth> {
    ChannelAuth::parse(value.trim()).ok_or_else(|| {
        ApiError::validation(
            "auth",
            format!(
                "auth must be credentials or workload; got {:?}",
                crate::error::bounded(value, 64)
            ),
        )
    })
}

/// A known preset, or a 422 naming `preset` with the known ones.
fn parse_preset(value: &str) -> ApiResult<&'static Preset> {
    catalog::preset(value.trim()).ok_or_else(|| {
        ApiError::validation(
            "preset",
            format!(
                "preset must be one of {}; got {:?}",
                catalog::preset_names(),
                crate::error::bounded(value, 64)
            ),
        )
    })
}

fn parse_provider(value: &str) -> ApiResult<Provider> {
    Provider::parse(value).ok_or_else(|| {
        ApiError::validation(
            "provider",
            format!(
                "provider must be one of openai, azure, anthropic, gemini, vertex, bedrock, mock; got {:?}",
                crate::error::bounded(value, 64)
            ),
        )
    })
}

/// Operators may set `enabled` or `disabled`; `auto_disabled` belongs to the breaker.
fn parse_status(value: &str, current: Option<ChannelStatus>) -> ApiResult<ChannelStatus> {
    match ChannelStatus::parse(value) {
        Some(ChannelStatus::AutoDisabled) if current == Some(ChannelStatus::AutoDisabled) => {
            Ok(ChannelStatus::AutoDisabled)
        }
        Some(ChannelStatus::AutoDisabled) => Err(ApiError::validation(
            "status",
            "status auto_disabled is set by the system; use enabled or disabled",
        )),
        Some(status) => Ok(status),
        None => Err(ApiError::validation(
            "status",
            format!(
                "status must be enabled or disabled; got {:?}",
                crate::error::bounded(value, 64)
            ),
        )),
    }
}

/// Applies one of the engine's text rules to `value`, a 422 naming `field` when it fails. The
/// rules' messages never quote the value.
pub(super) fn text(
    field: &str,
    value: &str,
    rule: fn(&str) -> Result<(), String>,
) -> ApiResult<()> {
    rule(value).map_err(|message| ApiError::validation(field, format!("{field}: {message}")))
}

/// A name (channel, token, team): one line, 1 to 128 characters after trimming.
pub(super) fn checked_name(field: &str, value: &str) -> ApiResult<String> {
    text(field, value, check_single_line)?;
    let name = value.trim();
    if name.is_empty() || name.chars().count() > 128 {
        return Err(ApiError::validation(
            field,
            format!("{field} must be 1 to 128 characters"),
        ));
    }
    Ok(name.to_owned())
}

/// The columns a create or patch writes, in [`ChannelSpec::bind`]'s order.
const WRITTEN: &str = "name, provider, base_url, status, auto_ban, max_concurrency, \
    capabilities, retry_status_codes, retry_error_patterns, headers, responses_api, preset, passthrough, \
    auth";

impl ChannelSpec {
    /// Binds the channel to the [`WRITTEN`] columns.
    fn bind<'q, O>(&'q self, query: RowQuery<'q, O>) -> RowQuery<'q, O> {
        query
            .bind(&self.name)
            .bind(self.provider.as_str())
            .bind(&self.base_url)
            .bind(self.status.as_str())
            .bind(self.auto_ban)
            .bind(self.max_concurrency)
            .bind(sqlx::types::Json(&self.capabilities))
            .bind(&self.retry_status_codes)
            .bind(&self.retry_error_patterns)
            .bind(sqlx::types::Json(&self.headers))
            .bind(self.responses_api)
            .bind(self.preset.map(|p| p.name))
            .bind(&self.passthrough)
            .bind(self.auth.as_str())
    }

    fn validate(self) -> ApiResult<ChannelSpec> {
        text("base_url", &self.base_url, check_single_line)?;
        if self.provider != Provider::Mock {
            switchyard_upstream::check_base_url(&self.base_url)
                .map_err(|m| ApiError::validation("base_url", format!("base_url {m}")))?;
        }
        if self.provider == Provider::Vertex {
            text(
                "base_url",
                &self.base_url,
                switchyard_upstream::check_vertex_base_url,
            )?;
        }
        if self.provider == Provider::Bedrock {
            text(
                "base_url",
                &self.base_url,
                switchyard_upstream::check_bedrock_base_url,
            )?;
        }
        if self.base_url.len() > 2048 {
            return Err(ApiError::validation("base_url", "base_url is too long"));
        }
        if let Some(limit) = self.max_concurrency {
            if !(1..=1_000_000).contains(&limit) {
                return Err(ApiError::validation(
                    "max_concurrency",
                    "max_concurrency must be between 1 and 1000000, or null",
                ));
            }
        }
        if !self.responses_api && !matches!(self.provider, Provider::Openai | Provider::Azure) {
            return Err(ApiError::validation(
                "responses_api",
                format!(
                    "responses_api: only openai and azure channels can be without the Responses API, not {}",
                    self.provider.as_str()
                ),
            ));
        }
        if self.auth == ChannelAuth::Workload {
            switchyard_upstream::workload::check_channel(self.provider, &self.base_url)
                .map_err(|message| ApiError::validation("auth", format!("auth: {message}")))?;
        }
        self.validate_passthrough()?;
        self.capabilities.validate("capabilities")?;
        self.validate_retry_patterns()?;
        self.validate_headers()?;
        Ok(self)
    }

    /// The pass-through path patterns: each valid, none twice, at most the engine's number; none
    /// on a `mock` channel (it has no upstream to reach).
    fn validate_passthrough(&self) -> ApiResult<()> {
        if let Err((index, message)) = passthrough::validate_patterns(&self.passthrough) {
            let field =
                index.map_or_else(|| "passthrough".to_owned(), |i| format!("passthrough[{i}]"));
            return Err(ApiError::validation(
                field.clone(),
                format!("{field}: {message}"),
            ));
        }
        if self.provider == Provider::Mock && !self.passthrough.is_empty() {
            return Err(ApiError::validation(
                "passthrough",
                "passthrough: a mock channel has no upstream to pass requests through to",
            ));
        }
        Ok(())
    }

    /// The channel's own retryable error patterns: bounded, each a non-empty single line.
    fn validate_retry_patterns(&self) -> ApiResult<()> {
        check_retry_error_patterns(&self.retry_error_patterns).map_err(|message| {
            ApiError::validation(
                "retry_error_patterns",
                format!("retry_error_patterns {message}"),
            )
        })?;
        for (i, pattern) in self.retry_error_patterns.iter().enumerate() {
            if pattern.is_empty() {
                return Err(ApiError::validation(
                    format!("retry_error_patterns[{i}]"),
                    "retry_error_patterns entries must not be empty",
                ));
            }
            text(
                &format!("retry_error_patterns[{i}]"),
                pattern,
                check_retry_error_pattern,
            )?;
        }
        Ok(())
    }

    /// The channel's extra headers: valid names and values; an Azure `api-version` one that
    /// Azure knows.
    fn validate_headers(&self) -> ApiResult<()> {
        for (name, value) in &self.headers {
            check_header_name(name).map_err(|message| {
                ApiError::validation(
                    "headers",
                    format!("headers: {message}: {:?}", crate::error::bounded(name, 64)),
                )
            })?;
            // The value is never quoted: header values often carry keys.
            text(&format!("headers.{name}"), value, check_header_value)?;
            if self.provider == Provider::Azure
                && switchyard_upstream::is_azure_api_version_entry(name)
            {
                text(
                    &format!("headers.{name}"),
                    value.trim(),
                    switchyard_upstream::check_api_version,
                )?;
            }
        }
        Ok(())
    }
}

fn status_codes(codes: Vec<i64>) -> ApiResult<Vec<i32>> {
    codes
        .into_iter()
        .enumerate()
        .map(|(i, code)| match i32::try_from(code) {
            Ok(code) if (100..=599).contains(&code) => Ok(code),
            _ => Err(ApiError::validation(
                format!("retry_status_codes[{i}]"),
                format!("retry_status_codes: {code} is not an HTTP status code (100..599)"),
            )),
        })
        .collect()
}

fn concurrency(value: Option<i64>) -> ApiResult<Option<i32>> {
    value
        .map(|v| {
            i32::try_from(v).map_err(|_| {
                ApiError::validation("max_concurrency", "max_concurrency is out of range")
            })
        })
        .transpose()
}

impl TryFrom<ChannelCreate> for ChannelSpec {
    type Error = ApiError;

    fn try_from(raw: ChannelCreate) -> ApiResult<ChannelSpec> {
        let preset = raw.preset.as_deref().map(parse_preset).transpose()?;
        let provider = match (raw.provider.trim(), preset) {
            ("", Some(preset)) => parse_provider(preset.provider)?,
            ("", None) => {
                return Err(ApiError::validation(
                    "provider",
                    format!(
                        "provider is required (or a preset: {})",
                        catalog::preset_names()
                    ),
                ))
            }
            (provider, _) => parse_provider(provider)?,
        };
        let base_url = match (raw.base_url.trim(), preset) {
            ("", Some(preset)) => preset.base_url,
            (url, _) => url,
        };
        let preset_responses = preset.is_none_or(|p| p.responses_api);
        ChannelSpec {
            name: checked_name("name", &raw.name)?,
            preset,
            provider,
            base_url: base_url.to_owned(),
            status: match raw.status.as_deref() {
                Some(status) => parse_status(status, None)?,
                None => ChannelStatus::Enabled,
            },
            auto_ban: raw.auto_ban.unwrap_or(false),
            max_concurrency: concurrency(raw.max_concurrency)?,
            capabilities: raw.capabilities.unwrap_or_default(),
            retry_status_codes: status_codes(raw.retry_status_codes.unwrap_or_default())?,
            retry_error_patterns: raw.retry_error_patterns.unwrap_or_default(),
            headers: raw.headers.unwrap_or_default(),
            responses_api: raw.responses_api.unwrap_or(preset_responses),
            passthrough: raw.passthrough.unwrap_or_default(),
            auth: match raw.auth.as_deref() {
                Some(auth) => parse_auth(auth)?,
                None => ChannelAuth::Credentials,
            },
        }
        .validate()
    }
}

/// A create body's validated spec, as the audit log records it (header names only, `base_url`
/// password masked; [`super::validate_body`]).
pub(super) fn create_detail(raw: ChannelCreate) -> ApiResult<serde_json::Value> {
    Ok(audit_detail(&ChannelSpec::try_from(raw)?))
}

fn stored_status(view: &ChannelView) -> ApiResult<ChannelStatus> {
    ChannelStatus::parse(&view.status).ok_or_else(|| {
        ApiError::Internal(anyhow::anyhow!("stored channel status {:?}", view.status))
    })
}

impl ChannelSpec {
    /// `current` is the (masked) view; `secrets` its real `base_url` and headers.
    fn patched(
        current: &ChannelView,
        secrets: Secrets,
        patch: ChannelPatch,
    ) -> ApiResult<ChannelSpec> {
        let current_status = stored_status(current)?;
        ChannelSpec {
            name: match patch.name {
                Some(name) => checked_name("name", &name)?,
                None => current.name.clone(),
            },
            preset: match patch.preset {
                Some(Some(name)) => Some(parse_preset(&name)?),
                Some(None) => None,
                None => current.preset.as_deref().and_then(catalog::preset),
            },
            provider: parse_provider(patch.provider.as_deref().unwrap_or(&current.provider))?,
            base_url: patch
                .base_url
                .map(|u| u.trim().to_owned())
                .unwrap_or(secrets.base_url),
            status: match patch.status.as_deref() {
                Some(status) => parse_status(status, Some(current_status))?,
                None => current_status,
            },
            auto_ban: patch.auto_ban.unwrap_or(current.auto_ban),
            max_concurrency: match patch.max_concurrency {
                Some(value) => concurrency(value)?,
                None => current.max_concurrency,
            },
            capabilities: patch.capabilities.unwrap_or(current.capabilities),
            retry_status_codes: match patch.retry_status_codes {
                Some(codes) => status_codes(codes)?,
                None => current.retry_status_codes.clone(),
            },
            retry_error_patterns: patch
                .retry_error_patterns
                .unwrap_or_else(|| current.retry_error_patterns.clone()),
            headers: patch.headers.unwrap_or(secrets.headers),
            responses_api: patch.responses_api.unwrap_or(current.responses_api),
            passthrough: patch
                .passthrough
                .unwrap_or_else(|| current.passthrough.clone()),
            auth: parse_auth(patch.auth.as_deref().unwrap_or(&current.auth))?,
        }
        .validate()
    }
}

/// Audit detail: header values may hold secrets, so only their names are recorded; a password in
/// `base_url` is masked.
fn audit_detail(spec: &ChannelSpec) -> serde_json::Value {
    json!({
        "name": spec.name,
        "preset": spec.preset.map(|p| p.name),
        "provider": spec.provider.as_str(),
        "base_url": redact_url_userinfo(&spec.base_url),
        "status": spec.status.as_str(),
        "auto_ban": spec.auto_ban,
        "max_concurrency": spec.max_concurrency,
        "capabilities": spec.capabilities,
        "retry_status_codes": spec.retry_status_codes,
        "retry_error_patterns": spec.retry_error_patterns,
        "header_names": spec.headers.keys().collect::<Vec<_>>(),
        "responses_api": spec.responses_api,
        "passthrough": spec.passthrough,
        "auth": spec.auth.as_str(),
    })
}

/// The create of `POST /api/v1/channels`, in `db` (see [`Db`]).
pub(super) async fn create_in<'c>(
    db: impl Db<'c>,
    by: By<'_>,
    raw: ChannelCreate,
) -> ApiResult<Response> {
    let spec = ChannelSpec::try_from(raw)?;
    let mut tx = db.begin().await?;
    let sql = insert_sql::<ChannelView>(WRITTEN);
    let view = spec
        .bind(sqlx::query_as::<_, ChannelView>(&sql))
        .fetch_one(&mut *tx)
        .await?;
    record_status_event(&mut tx, view.id, None, spec.status, "created", by.actor).await?;
    commit_view::<ChannelView>(tx, by, Change::Create, view.id, audit_detail(&spec), view).await
}

impl RowView for ChannelView {
    type Row = ChannelView;
}

/// As [`crud!`] would, but an update passes the fleet's shared state on (see [`patch_in`]).
impl Crud for ChannelView {
    type Create = ChannelCreate;
    type Created = ChannelView;
    type Parent = ();
    type Patch = ChannelPatch;
    const ITEM: Item = Item::new("channel")
        .malformed()
        .conflict("members still use the channel");

    async fn create(w: Writer, (): (), raw: ChannelCreate) -> ApiResult<Response> {
        create_in(&w.pool, w.by(), raw).await
    }

    async fn patch(
        state: AppState,
        w: Writer,
        id: i64,
        patch: ChannelPatch,
    ) -> ApiResult<Response> {
        patch_in(&w.pool, state.live.as_ref(), w.by(), id, patch).await
    }

    async fn delete(w: Writer, id: i64) -> ApiResult<Response> {
        delete_in(&w.pool, w.by(), id).await
    }
}

/// The update of `PATCH /api/v1/channels/{id}`, in `db` (see [`Db`]). A dry run passes no `live`: the breaker reset below is a write
/// to the fleet's shared state and must not happen for a change that is rolled back.
pub(super) async fn patch_in<'c>(
    db: impl Db<'c>,
    live: Option<&crate::live::LiveState>,
    by: By<'_>,
    id: i64,
    patch: ChannelPatch,
) -> ApiResult<Response> {
    let (mut tx, current) = lock_row::<ChannelView>(db, id).await?;
    let before = stored_status(&current)?;
    let secrets: Secrets = sqlx::query_as("SELECT base_url, headers FROM channels WHERE id = $1")
        .bind(id)
        .fetch_one(&mut *tx)
        .await?;
    let spec = ChannelSpec::patched(&current, secrets, patch)?;
    if spec.auth == ChannelAuth::Workload {
        let stored: i64 =
            sqlx::query_scalar("SELECT count(*) FROM credentials WHERE channel_id = $1")
                .bind(id)
                .fetch_one(&mut *tx)
                .await?;
        if stored > 0 {
            return Err(ApiError::validation(
                "auth",
                format!("auth: workload: the channel has {stored} stored credential(s); delete them first (the workload identity is its credential)"),
            ));
        }
    }
    let sql = update_sql::<ChannelView>(WRITTEN);
    let view = spec
        .bind(sqlx::query_as::<_, ChannelView>(&sql))
        .bind(id)
        .fetch_one(&mut *tx)
        .await?;
    if before != spec.status {
        record_status_event(
            &mut tx,
            id,
            Some(before),
            spec.status,
            "set by an operator",
            by.actor,
        )
        .await?;
    }
    // An operator re-enabling an auto-disabled channel overrides the breaker: close it fleet-wide
    // too, or the channel would stay excluded (and be recorded auto_disabled again) until a probe.
    let reset = match live {
        Some(live)
            if before == ChannelStatus::AutoDisabled && spec.status == ChannelStatus::Enabled =>
        {
            let members: Vec<i64> =
                sqlx::query_scalar("SELECT id FROM route_members WHERE channel_id = $1")
                    .bind(id)
                    .fetch_all(&mut *tx)
                    .await?;
            Some((live, members))
        }
        _ => None,
    };
    let response =
        commit_view::<ChannelView>(tx, by, Change::Update, id, audit_detail(&spec), view).await?;
    if let Some((live, members)) = reset {
        live.store().reset_channel(id, &members);
    }
    Ok(response)
}

/// The delete of `DELETE /api/v1/channels/{id}`, in `db` (see [`Db`]).
pub(super) async fn delete_in<'c>(db: impl Db<'c>, by: By<'_>, id: i64) -> ApiResult<Response> {
    let (mut tx, current) = lock_row::<ChannelView>(db, id).await?;
    let members: i64 =
        sqlx::query_scalar("SELECT count(*) FROM route_members WHERE channel_id = $1")
            .bind(id)
            .fetch_one(&mut *tx)
            .await?;
    if members > 0 {
        return Err(ApiError::Conflict {
            message: format!(
                "channel {id} is used by {members} route member(s); delete or move them first"
            ),
        });
    }
    delete_row::<ChannelView>(tx, by, id, json!({ "name": current.name })).await
}

#[derive(Debug, Serialize, sqlx::FromRow, ToSchema)]
pub struct ChannelEvent {
    pub id: i64,
    pub channel_id: i64,
    /// `null` for the channel's creation.
    #[schema(value_type = Option<ChannelStatusName>)]
    pub from_status: Option<String>,
    #[schema(value_type = ChannelStatusName)]
    pub to_status: String,
    pub reason: String,
    pub actor: String,
    #[schema(format = DateTime)]
    pub at: String,
}

table_row!(
    ChannelEvent,
    "channel_status_events",
    "channel event",
    event_columns
);

fn event_columns() -> String {
    format!(
        "id, channel_id, from_status, to_status, reason, actor, {} AS at",
        ts("at")
    )
}

#[utoipa::path(get, path = "/api/v1/channels/{id}/events", tag = "channels", operation_id = "list_channel_events", params(PageQuery),
    responses((status = 200, description = "status changes, oldest first", body = Page<ChannelEvent>),
              (status = 404, body = ErrorBody)))]
pub async fn events(
    State(state): State<AppState>,
    Path(id): Path<i64>,
    Query(page): Query<PageQuery>,
) -> ApiResult<Json<Page<ChannelEvent>>> {
    let parent = ("channel_id", id);
    let page = list_children::<ChannelView, _>(&state.pool, parent, page.bounds()?).await?;
    Ok(Json(page))
}
