//! Switchyard's configuration file: one YAML schema for the standalone proxy (which loads it) and
//! the fleet (whose control plane exports, plans and applies it; docs/src/guides/config-as-code.md).
//!
//! Two stages (STYLE: wire types at the edge): `serde` parses the raw shape with field paths in its
//! errors, then [`RawConfig::into_parts`] checks references and ranges, naming the field path of
//! the first problem (`routes[0].members[1].channel: unknown channel "x"`).
//!
//! The raw types also serialize: the control plane's export writes this very shape, leaving out
//! what equals its default, so a file stays short and two exports of one state are identical.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use switchyard_engine::catalog::{self, Preset};
use switchyard_engine::{Capabilities, PlanEntry, Settings};
use switchyard_upstream::MockOptions;

mod bounds;
mod compile;
mod error;

pub use bounds::{
    read_bounded, read_file, MAX_DEPTH, MAX_EXPANDED_BYTES, MAX_FILE_BYTES, MAX_ITEMS,
    MAX_VALUE_BYTES, VALUE_OVERHEAD,
};
pub use error::{err, ConfigError};

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    /// The address to listen on when neither `--http-addr` nor `SWITCHYARD_HTTP_ADDR` is given
    /// (read at start only, by the standalone proxy; the control plane ignores it). The example
    /// binds to loopback so that a quick start is never an open proxy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listen: Option<std::net::SocketAddr>,
    /// Written with only what differs from the defaults.
    #[serde(
        default,
        skip_serializing_if = "is_default",
        serialize_with = "non_default_settings"
    )]
    pub settings: Settings,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub channels: Vec<RawChannel>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub routes: Vec<RawRoute>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub teams: Vec<RawTeam>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tokens: Vec<RawToken>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prices: Vec<RawPrice>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub limits: Vec<RawLimit>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shadows: Vec<RawShadow>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cache_rules: Vec<RawCacheRule>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub guardrails: Vec<RawGuardrail>,
    /// Where the control plane's notifications go. A standalone proxy sends none: it reads
    /// and ignores them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub webhooks: Vec<RawWebhook>,
}

/// A webhook target of notifications (the control plane's `/api/v1/webhooks`).
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RawWebhook {
    pub name: String,
    /// An `http://` or `https://` URL. A URL with a path is written as a read shows it, its
    /// origin and `/****` (such paths often hold a secret of their own); given back in that
    /// form, the stored URL is kept.
    pub url: String,
    /// `json` (the default) or `slack`.
    #[serde(default = "json_kind", skip_serializing_if = "is_json_kind")]
    pub kind: String,
    pub events: Vec<String>,
    /// The budget percentages it hears about (absent: 50, 80 and 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thresholds: Option<Vec<i32>>,
    /// The signing secret as `${ENV_NAME}`: an environment variable of the control plane, read
    /// when a delivery is signed. Never the secret itself. Absent: the secret the control plane
    /// stores for this webhook is kept (a new webhook needs one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub enabled: bool,
}

fn json_kind() -> String {
    "json".to_owned()
}

fn is_json_kind(value: &str) -> bool {
    value == "json"
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawChannel {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<i64>,
    pub name: String,
    /// A provider preset (`groq`, `ollama`, ...: `switchyard_engine::catalog::PRESETS`) that
    /// supplies `provider`, `base_url`, `responses_api` and whether a credential is needed;
    /// the fields the channel gives win.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preset: Option<String>,
    /// Required unless `preset` gives it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub provider: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    #[serde(default = "enabled_str", skip_serializing_if = "is_enabled_str")]
    pub status: String,
    #[serde(default, skip_serializing_if = "is_false")]
    pub auto_ban: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrency: Option<u32>,
    #[serde(default, skip_serializing_if = "is_default")]
    pub capabilities: Capabilities,
    /// `credentials` (the default: the channel's own) or `workload`: no stored secret, the
    /// proxy's workload identity (`azure`, `bedrock` and `vertex` channels only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub credentials: Vec<RawCredential>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub retry_status_codes: Vec<u16>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub retry_error_patterns: Vec<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// `openai` and `azure` only: `false` for an OpenAI-compatible upstream without the
    /// Responses API (`/v1/responses`), whose Responses requests are then translated into Chat
    /// Completions. Absent: the preset's, else `true`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub responses_api: Option<bool>,
    /// Path patterns clients may reach on the channel's base URL through the pass-through
    /// routes (`/passthrough/{channel}/...`); `*` matches any run of characters, `/` included.
    /// Absent or empty: no pass-through.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub passthrough: Vec<String>,
    /// `provider: mock` only: the simulation's behaviour. Never written (an export gives the
    /// equivalent `mock://` base_url).
    #[serde(default, skip_serializing)]
    pub mock: Option<MockOptions>,
}

impl RawChannel {
    /// The preset the channel names, when it names a known one.
    pub fn known_preset(&self) -> Option<&'static Preset> {
        self.preset
            .as_deref()
            .and_then(|name| catalog::preset(name.trim()))
    }

    /// `provider` as given, else the preset's.
    pub fn resolved_provider(&self) -> &str {
        match (self.provider.trim(), self.known_preset()) {
            ("", Some(preset)) => preset.provider,
            (provider, _) => provider,
        }
    }

    /// `base_url` as given, else the preset's.
    pub fn resolved_base_url(&self) -> Option<String> {
        self.base_url
            .clone()
            .or_else(|| self.known_preset().map(|p| p.base_url.to_owned()))
    }

    /// `responses_api` as given, else the preset's, else `true`.
    pub fn resolved_responses_api(&self) -> bool {
        self.responses_api
            .unwrap_or_else(|| self.known_preset().is_none_or(|p| p.responses_api))
    }

    /// Leaves out what goes without saying: what the channel's preset supplies (an export
    /// writes the preset and the channel's own overrides), and `responses_api: true` without
    /// one.
    pub fn leave_out_defaults(&mut self) {
        let preset = self.known_preset();
        let default_responses = preset.is_none_or(|p| p.responses_api);
        if self.responses_api == Some(default_responses) {
            self.responses_api = None;
        }
        let Some(preset) = preset else {
            return;
        };
        if self.provider == preset.provider {
            self.provider.clear();
        }
        if self.base_url.as_deref() == Some(preset.base_url) {
            self.base_url = None;
        }
    }
}

/// The settings that differ from their defaults, in the order `Settings` declares them.
fn non_default_settings<S: serde::Serializer>(
    settings: &Settings,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    use serde::ser::Error;
    let to_map = |s: &Settings| match yaml_serde::to_value(s) {
        Ok(yaml_serde::Value::Mapping(map)) => Ok(map),
        Ok(_) => Err(S::Error::custom("settings are not a mapping")),
        Err(e) => Err(S::Error::custom(e)),
    };
    let defaults = to_map(&Settings::default())?;
    let mut out = yaml_serde::Mapping::new();
    for (key, value) in to_map(settings)? {
        if defaults.get(&key) != Some(&value) {
            out.insert(key, value);
        }
    }
    out.serialize(serializer)
}

fn enabled_str() -> String {
    "enabled".to_owned()
}

fn is_enabled_str(value: &str) -> bool {
    value == "enabled"
}

fn yes() -> bool {
    true
}

fn is_true(value: &bool) -> bool {
    *value
}

fn is_false(value: &bool) -> bool {
    !*value
}

fn is_default<T: Default + PartialEq>(value: &T) -> bool {
    *value == T::default()
}

/// `"sk-..."`, `"${ENV_NAME}"`, or `{secret: ..., enabled: false}`.
///
/// The control plane also writes `{id: 7}` (no `secret`): "the secret stored for credential 7",
/// so an export never holds a secret value. Only an apply to the control plane that stores it
/// accepts that form; the standalone proxy refuses it.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(untagged)]
pub enum RawCredential {
    Plain(String),
    Full {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<i64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        secret: Option<String>,
        #[serde(default = "yes", skip_serializing_if = "is_true")]
        enabled: bool,
    },
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawRoute {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<i64>,
    pub model_pattern: String,
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub enabled: bool,
    #[serde(default = "auto_str", skip_serializing_if = "is_auto_str")]
    pub routing_mode: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub single_member_id: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sticky_session: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stable_first: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stable_first_denominator: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_times: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel_retry_times: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cooldown_seconds: Option<u32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub members: Vec<RawMember>,
}

fn auto_str() -> String {
    "auto".to_owned()
}

fn is_auto_str(value: &str) -> bool {
    value == "auto"
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawMember {
    /// Teams, limits and `single_member_id` name members by id; the control plane keeps it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<i64>,
    /// The channel's name.
    pub channel: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream_model: Option<String>,
    #[serde(default, alias = "group_name", skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    #[serde(default, skip_serializing_if = "is_default")]
    pub priority: i32,
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub weight: i32,
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub enabled: bool,
    #[serde(default, skip_serializing_if = "is_false")]
    pub canary: bool,
    #[serde(default, skip_serializing_if = "is_default")]
    pub capabilities: Capabilities,
}

fn one() -> i32 {
    1
}

fn is_one(value: &i32) -> bool {
    *value == 1
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawTeam {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<i64>,
    pub name: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub models: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub members: Vec<i64>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub plan: BTreeMap<i64, PlanEntry>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_limit: Option<u32>,
    #[serde(default, skip_serializing_if = "is_false")]
    pub disable_failover: bool,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawToken {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<i64>,
    pub name: String,
    /// The plaintext token (or a `${ENV}` reference to it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// Lowercase hex SHA-256 of the plaintext, instead of `token`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_sha256: Option<String>,
    /// The first characters of the plaintext, as the control plane shows them to recognise a
    /// token (never enough to use it). Informational: the standalone proxy ignores it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    #[serde(
        default,
        alias = "route_group_name",
        skip_serializing_if = "Option::is_none"
    )]
    pub route_group: Option<String>,
    /// The team's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub team: Option<String>,
    #[serde(default, skip_serializing_if = "is_false")]
    pub allow_pinning: bool,
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub enabled: bool,
    /// RFC 3339; after it the token is refused as expired.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
}

/// A decimal amount as YAML gives it: a number or a string (`"2.50"` keeps its digits exactly).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(untagged)]
pub enum Amount {
    Whole(u64),
    Decimal(f64),
    Text(String),
}

impl Amount {
    /// The amount as its decimal text (a float prints as its shortest exact form: `0.1`).
    pub fn text(&self) -> String {
        match self {
            Amount::Whole(n) => n.to_string(),
            Amount::Decimal(f) => f.to_string(),
            Amount::Text(t) => t.clone(),
        }
    }
}

/// A price per (channel, upstream model pattern), in USD per million tokens.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawPrice {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<i64>,
    /// The channel's name.
    pub channel: String,
    pub model_pattern: String,
    pub input_per_million: Amount,
    pub output_per_million: Amount,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_input_per_million: Option<Amount>,
}

/// A limit: exactly one of `token`, `team`, `route` (its model pattern), `channel` (names),
/// `member` (an id), `tag` (every request carrying it), `end_user` (that end user's requests) or
/// `each_end_user: true` (each end user on a counter of its own) says whom it applies to.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawLimit {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub team: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub member: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_user: Option<String>,
    /// Each end user counts on a counter of its own (a request without an end user is not
    /// counted).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub each_end_user: bool,
    pub metric: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<String>,
    /// A count, or USD for `spend`.
    pub value: Amount,
    #[serde(default = "hard", skip_serializing_if = "is_hard")]
    pub mode: String,
    /// Narrowed to requests for models matching this pattern (a client's limit: not a channel's
    /// or a member's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_pattern: Option<String>,
    /// Narrowed to requests through this route (its model pattern; a token, team, tag or end
    /// user limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_route: Option<String>,
    /// A spend limit's own notification thresholds (percentages of its value; `[]`: none).
    /// Notifications are the control plane's: a standalone proxy reads and ignores it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notify_at: Option<Vec<i32>>,
}

/// A shadow rule: a sample of the requests for `model_pattern` copied to a target after the
/// client's answer is complete. The target is `target_member` (a member id) or `target_channel`
/// (a channel's name) with `target_model`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawShadow {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<i64>,
    pub name: String,
    pub model_pattern: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_member: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_channel: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_model: Option<String>,
    /// 0.01 to 100.
    pub sample_percent: f64,
    pub max_rps: u32,
    /// USD per UTC day; absent: no cap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_daily_spend_usd: Option<Amount>,
    /// RFC 3339.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    /// 0 to 1; absent: no error-rate stop.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_rate_stop: Option<f64>,
    #[serde(default = "min_sample")]
    pub error_rate_min_sample: u32,
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub enabled: bool,
}

/// A response cache rule: answers to the requests for `model_pattern` (or of the route with that
/// pattern) at `endpoints` are kept for `ttl_seconds` and served again to the same `scope`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawCacheRule {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<i64>,
    pub name: String,
    pub model_pattern: String,
    /// `chat_completions`, `completions`, `embeddings`, `messages`, `generate_content`,
    /// `responses`.
    pub endpoints: Vec<String>,
    pub ttl_seconds: u64,
    #[serde(default = "cache_entry_bytes")]
    pub max_entry_bytes: u64,
    /// `route`, `team` (the default) or `token`.
    #[serde(default = "team_scope")]
    pub scope: String,
    #[serde(default, skip_serializing_if = "is_false")]
    pub deterministic_only: bool,
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub enabled: bool,
    /// The match by meaning after an exact miss.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub semantic: Option<RawSemantic>,
    /// The one team (by name) whose tokens' requests the rule covers; absent: every request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub team: Option<String>,
}

/// A cache rule's semantic part: the channel (by name) asked for prompt embeddings with `model`,
/// the cosine similarity a match needs, and `trial` (the default) or `serve`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawSemantic {
    pub channel: String,
    pub model: String,
    pub threshold: f64,
    #[serde(default = "trial_mode")]
    pub mode: String,
}

fn trial_mode() -> String {
    "trial".to_owned()
}

/// A guardrail rule: its checks run on the requests (and/or answers) of one route (`route`, its
/// model pattern), team (`team`) or token (`token`, its name), or of all traffic when none of the
/// three is given.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawGuardrail {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<i64>,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub team: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// `request`, `response` or `both` (the default).
    #[serde(default = "both_stages", skip_serializing_if = "is_both")]
    pub stage: String,
    /// `block`, `redact` or `log`.
    pub action: String,
    #[serde(default, skip_serializing_if = "is_false")]
    pub restore: bool,
    /// `enforce` (the default) or `shadow`.
    #[serde(default = "enforce", skip_serializing_if = "is_enforce")]
    pub mode: String,
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub enabled: bool,
    pub checks: switchyard_engine::guard::rule::GuardChecks,
    /// `allow` (the default) or `block`: what the rule does with content it cannot inspect.
    #[serde(default = "allow", skip_serializing_if = "is_allow")]
    pub uninspectable: String,
}

fn allow() -> String {
    "allow".to_owned()
}

fn is_allow(value: &str) -> bool {
    value == "allow"
}

fn both_stages() -> String {
    "both".to_owned()
}

fn is_both(value: &str) -> bool {
    value == "both"
}

fn enforce() -> String {
    "enforce".to_owned()
}

fn is_enforce(value: &str) -> bool {
    value == "enforce"
}

fn cache_entry_bytes() -> u64 {
    1 << 20
}

fn team_scope() -> String {
    "team".to_owned()
}

fn min_sample() -> u32 {
    20
}

fn hard() -> String {
    "hard".to_owned()
}

fn is_hard(value: &str) -> bool {
    value == "hard"
}

/// Parses a file's text into its raw shape; a problem names its field path. A file past one of
/// the bounds (its length, its size once aliases are expanded, its nesting, a value's length, a
/// list's items: `bounds.rs`) is refused before anything is built from it.
pub fn parse_raw(text: &str) -> Result<RawConfig, ConfigError> {
    bounds::check(text)?;
    let de = yaml_serde::Deserializer::from_str(text);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let path = if path == "." { String::new() } else { path };
        // The YAML parser prefixes its own (coarser) path: keep only the message.
        let message = e.into_inner().to_string();
        let message = match message.split_once(": ") {
            Some((head, rest)) if !head.contains(' ') => rest.to_owned(),
            _ => message,
        };
        err(path, message)
    })
}

/// The YAML text of a configuration (field order as declared, defaults left out).
pub fn to_yaml(config: &RawConfig) -> Result<String, ConfigError> {
    yaml_serde::to_string(config).map_err(|e| err("", format!("cannot write YAML: {e}")))
}

/// SHA-256 of a token's plaintext, lowercase hex (how tokens are stored and looked up).
pub use switchyard_proto::token_hash;

/// `${NAME}` → `Some("NAME")`.
pub fn env_reference(value: &str) -> Option<&str> {
    let name = value.trim().strip_prefix("${")?.strip_suffix('}')?;
    let valid = !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    valid.then_some(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "channels:\n- name: a\n  provider: openai\n  base_url: https://a.test/v1\n  credentials:\n  - ${KEY_A}\n  - secret: ${KEY_B}\n    enabled: false\nroutes:\n- model_pattern: m\n  members:\n  - id: 3\n    channel: a\n    weight: 2\ntokens:\n- name: t\n  token_sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08\n  prefix: sk-sy-9f86\n";

    #[test]
    fn settings_are_written_with_what_differs_from_the_defaults() {
        let config = parse_raw("settings:\n  retry_times: 4\n").unwrap();
        assert_eq!(to_yaml(&config).unwrap(), "settings:\n  retry_times: 4\n");
        assert_eq!(config.settings.retry_times, 4);
    }

    #[test]
    fn cache_rules_compile_and_bad_ones_name_their_field() {
        let file = format!(
            "{FILE}cache_rules:\n- name: c\n  model_pattern: m\n  endpoints:\n  - chat_completions\n  - messages\n  ttl_seconds: 60\n  max_entry_bytes: 1000\n  scope: route\n  deterministic_only: true\n"
        );
        let config = parse_raw(&file).unwrap();
        assert_eq!(to_yaml(&config).unwrap(), file);
        let parts = config.into_parts(1, &|_| None).unwrap();
        let rule = &parts.cache_rules[0];
        assert_eq!(rule.scope, switchyard_engine::CacheScope::Route);
        assert_eq!(rule.endpoints.len(), 2);
        assert!(rule.deterministic_only);
        let bad = |from: &str, to: &str| {
            let e = parse_raw(&file.replace(from, to))
                .unwrap()
                .into_parts(1, &|_| None)
                .unwrap_err();
            e.to_string()
        };
        assert!(bad("ttl_seconds: 60", "ttl_seconds: 0").starts_with("cache_rules[0].ttl_seconds:"));
        let unknown = bad("  - messages\n", "  - images\n");
        assert!(
            unknown.starts_with("cache_rules[0].endpoints: unknown endpoint \"images\""),
            "{unknown}"
        );
        assert!(bad("scope: route", "scope: fleet").starts_with("cache_rules[0].scope:"));
        assert!(bad(
            "model_pattern: m\n  endpoints",
            "model_pattern: ''\n  endpoints"
        )
        .starts_with("cache_rules[0].model_pattern:"));
    }

    #[test]
    fn a_cache_rules_semantic_part_names_its_channel_and_bad_fields() {
        let file = format!(
            "{FILE}cache_rules:\n- name: c\n  model_pattern: m\n  endpoints:\n  - chat_completions\n  ttl_seconds: 60\n  max_entry_bytes: 1048576\n  scope: team\n  semantic:\n    channel: a\n    model: e\n    threshold: 0.9\n    mode: serve\n"
        );
        let config = parse_raw(&file).unwrap();
        assert_eq!(to_yaml(&config).unwrap(), file);
        let parts = config.into_parts(1, &|_| None).unwrap();
        let part = parts.cache_rules[0].semantic.clone().unwrap();
        assert_eq!(part.channel, parts.channels[0].id);
        assert_eq!((part.model.as_str(), part.threshold), ("e", 0.9));
        assert_eq!(part.mode, switchyard_engine::SemanticMode::Serve);
        let bad = |from: &str, to: &str| {
            parse_raw(&file.replace(from, to))
                .unwrap()
                .into_parts(1, &|_| None)
                .unwrap_err()
                .to_string()
        };
        let at = "cache_rules[0].semantic.";
        assert!(bad("channel: a\n    model", "channel: z\n    model")
            .starts_with(&format!("{at}channel:")));
        assert!(bad("threshold: 0.9", "threshold: 1.5").starts_with(&format!("{at}threshold:")));
        assert!(bad("mode: serve", "mode: always").starts_with(&format!("{at}mode:")));
        let trial = parse_raw(&file.replace("    mode: serve\n", "")).unwrap();
        let parts = trial.into_parts(1, &|_| None).unwrap();
        let mode = parts.cache_rules[0].semantic.as_ref().unwrap().mode;
        assert_eq!(mode, switchyard_engine::SemanticMode::Trial, "the default");
    }

    #[test]
    fn a_written_file_reads_back_as_written() {
        let config = parse_raw(FILE).unwrap();
        assert_eq!(to_yaml(&config).unwrap(), FILE);
        let parts = config.into_parts(1, &|_| None).unwrap();
        assert_eq!(parts.routes[0].members[0].id, 3);
        assert_eq!(parts.channels[0].credentials.len(), 2);
    }

    #[test]
    fn a_channel_without_the_responses_api_reads_back_and_compiles() {
        let file = FILE.replace(
            "  - secret: ${KEY_B}\n    enabled: false\n",
            "  - secret: ${KEY_B}\n    enabled: false\n  responses_api: false\n",
        );
        let config = parse_raw(&file).unwrap();
        assert_eq!(config.channels[0].responses_api, Some(false));
        assert_eq!(to_yaml(&config).unwrap(), file);
        let parts = config.into_parts(1, &|_| None).unwrap();
        assert!(!parts.channels[0].responses_api);
        assert!(parts.channels[0].chat_completions_only());
        // Absent: the Responses API is there.
        let parts = parse_raw(FILE).unwrap().into_parts(1, &|_| None).unwrap();
        assert!(parts.channels[0].responses_api);
        let azure = file.replace("provider: openai", "provider: azure");
        let parts = parse_raw(&azure).unwrap().into_parts(1, &|_| None).unwrap();
        assert!(parts.channels[0].chat_completions_only());
    }

    #[test]
    fn only_openai_and_azure_channels_can_be_without_the_responses_api() {
        let file = FILE.replace(
            "  - secret: ${KEY_B}\n    enabled: false\n",
            "  - secret: ${KEY_B}\n    enabled: false\n  responses_api: false\n",
        );
        for provider in ["anthropic", "gemini"] {
            let e = parse_raw(&file.replace("provider: openai", &format!("provider: {provider}")))
                .unwrap()
                .into_parts(1, &|_| None)
                .unwrap_err();
            assert_eq!(e.path, "channels[0].responses_api");
            assert!(e.message.contains(provider), "{e}");
        }
    }

    #[test]
    fn a_preset_supplies_the_provider_base_url_and_quirks() {
        let file = "channels:\n- name: g\n  preset: groq\n  credentials:\n  - ${GROQ_API_KEY}\n";
        let config = parse_raw(file).unwrap();
        assert_eq!(to_yaml(&config).unwrap(), file, "written as given");
        let parts = config.into_parts(1, &|_| None).unwrap();
        let channel = &parts.channels[0];
        assert_eq!(channel.provider, switchyard_engine::Provider::Openai);
        assert_eq!(channel.base_url, "https://api.groq.com/openai/v1");
        assert!(!channel.responses_api);
        assert_eq!(channel.preset.as_deref(), Some("groq"));
        // What the channel gives wins over the preset.
        let own = file.replace(
            "  preset: groq\n",
            "  preset: groq\n  base_url: http://groq.internal/v1\n  responses_api: true\n",
        );
        let parts = parse_raw(&own).unwrap().into_parts(1, &|_| None).unwrap();
        assert_eq!(parts.channels[0].base_url, "http://groq.internal/v1");
        assert!(parts.channels[0].responses_api);
    }

    #[test]
    fn an_unknown_preset_is_refused_naming_the_known_ones() {
        let file = "channels:\n- name: g\n  preset: grok-cloud\n  credentials: [k]\n";
        let e = parse_raw(file)
            .unwrap()
            .into_parts(1, &|_| None)
            .unwrap_err();
        assert_eq!(e.path, "channels[0].preset");
        assert!(e.message.contains("\"grok-cloud\""), "{e}");
        assert!(e.message.contains("groq, together, fireworks"), "{e}");
        let e = parse_raw("channels:\n- name: g\n  credentials: [k]\n")
            .unwrap()
            .into_parts(1, &|_| None)
            .unwrap_err();
        assert_eq!(e.path, "channels[0].provider");
        assert!(e.message.contains("preset"), "{e}");
    }

    #[test]
    fn pass_through_patterns_read_back_compile_and_are_checked() {
        let file = FILE.replace(
            "  - secret: ${KEY_B}\n    enabled: false\n",
            "  - secret: ${KEY_B}\n    enabled: false\n  passthrough:\n  - /v1/fine_tuning/*\n  - /v1/files\n",
        );
        let config = parse_raw(&file).unwrap();
        assert_eq!(to_yaml(&config).unwrap(), file);
        let parts = config.into_parts(1, &|_| None).unwrap();
        assert_eq!(
            parts.channels[0].passthrough,
            ["/v1/fine_tuning/*", "/v1/files"]
        );
        let parts = parse_raw(FILE).unwrap().into_parts(1, &|_| None).unwrap();
        assert!(parts.channels[0].passthrough.is_empty(), "none by default");
        let bad = file.replace("  - /v1/files\n", "  - v1/files\n");
        let e = parse_raw(&bad)
            .unwrap()
            .into_parts(1, &|_| None)
            .unwrap_err();
        assert_eq!(e.path, "channels[0].passthrough[1]");
        let mock = "channels:\n- name: sim\n  provider: mock\n  passthrough: [/v1/files]\n";
        let e = parse_raw(mock)
            .unwrap()
            .into_parts(1, &|_| None)
            .unwrap_err();
        assert_eq!(e.path, "channels[0].passthrough");
    }

    #[test]
    fn a_workload_channel_has_its_identity_as_its_one_credential() {
        let parse = |yaml: &str| parse_raw(yaml).unwrap().into_parts(1, &|_| None);
        let parts = parse("channels:\n- name: b\n  provider: bedrock\n  base_url: https://bedrock-runtime.us-east-1.amazonaws.com\n  auth: workload\n").unwrap();
        let channel = &parts.channels[0];
        assert_eq!(channel.credentials.len(), 1);
        assert_eq!(
            channel.credentials[0].secret,
            switchyard_engine::SecretSource::Workload
        );
        assert_eq!(
            switchyard_engine::ChannelAuth::of(&channel.credentials),
            switchyard_engine::ChannelAuth::Workload
        );
        // A provider without workload identity; credentials too; a Vertex URL without its
        // project; an unknown kind of auth.
        for (yaml, path, words) in [
            ("channels:\n- name: o\n  provider: openai\n  base_url: https://api.openai.com/v1\n  auth: workload\n", "channels[0].auth", "not openai"),
            ("channels:\n- name: a\n  provider: azure\n  base_url: https://r.openai.azure.com\n  auth: workload\n  credentials: [k]\n", "channels[0].credentials", "must be absent"),
            ("channels:\n- name: v\n  provider: vertex\n  base_url: https://us-central1-aiplatform.googleapis.com\n  auth: workload\n", "channels[0].auth", "names its project"),
            ("channels:\n- name: a\n  provider: azure\n  base_url: https://r.openai.azure.com\n  auth: pod\n", "channels[0].auth", "credentials or workload"),
        ] {
            let e = parse(yaml).unwrap_err();
            assert_eq!(e.path, path, "{yaml}");
            assert!(e.to_string().contains(words), "{e}");
        }
    }

    #[test]
    fn a_local_server_preset_needs_no_credential() {
        let parts = parse_raw("channels:\n- name: local\n  preset: ollama\n")
            .unwrap()
            .into_parts(1, &|_| None)
            .unwrap();
        let channel = &parts.channels[0];
        assert_eq!(channel.base_url, "http://127.0.0.1:11434/v1");
        assert_eq!(channel.credentials.len(), 1);
        assert_eq!(
            channel.credentials[0].secret,
            switchyard_engine::SecretSource::Inline("no-key".to_owned())
        );
        // A hosted one does.
        let e = parse_raw("channels:\n- name: g\n  preset: groq\n")
            .unwrap()
            .into_parts(1, &|_| None)
            .unwrap_err();
        assert_eq!(e.path, "channels[0].credentials");
    }

    #[test]
    fn leaving_out_defaults_keeps_the_preset_and_the_overrides() {
        let mut channel = parse_raw(FILE).unwrap().channels.remove(0);
        channel.preset = Some("openai".to_owned());
        channel.base_url = Some("https://api.openai.com/v1".to_owned());
        channel.responses_api = Some(true);
        channel.leave_out_defaults();
        assert_eq!(
            (
                channel.provider.as_str(),
                &channel.base_url,
                channel.responses_api
            ),
            ("", &None, None)
        );
        channel.preset = Some("groq".to_owned());
        channel.provider = "openai".to_owned();
        channel.base_url = Some("https://api.openai.com/v1".to_owned());
        channel.responses_api = Some(true);
        channel.leave_out_defaults();
        assert_eq!(channel.provider, "");
        assert_eq!(
            channel.base_url.as_deref(),
            Some("https://api.openai.com/v1")
        );
        assert_eq!(channel.responses_api, Some(true));
    }

    #[test]
    fn a_stored_secret_reference_is_refused_with_its_path() {
        let e = parse_raw(&FILE.replace("  - ${KEY_A}\n", "  - id: 7\n"))
            .unwrap()
            .into_parts(1, &|_| None)
            .unwrap_err();
        assert_eq!(e.path, "channels[0].credentials[0].secret");
        assert!(e.message.starts_with("is required"), "{e}");
    }

    #[test]
    fn the_providers_page_lists_every_preset_and_catalog_entry() {
        let page = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../docs/src/reference/providers.md"
        ))
        .unwrap();
        for preset in catalog::PRESETS {
            assert!(switchyard_engine::Provider::parse(preset.provider).is_some());
            let row = format!(
                "| `{}` | `{}` | `{}` |",
                preset.name, preset.provider, preset.base_url
            );
            assert!(
                page.contains(&row),
                "providers.md lacks the row of preset {}",
                preset.name
            );
        }
        for price in catalog::PRICES {
            let shown = price
                .model_pattern
                .trim_end_matches("-20*")
                .trim_end_matches('*');
            assert!(
                page.contains(&format!("| `{}` | ", price.preset)) && page.contains(shown),
                "providers.md lacks {} {}",
                price.preset,
                price.model_pattern
            );
            assert!(
                page.contains(price.as_of),
                "providers.md lacks the date {}",
                price.as_of
            );
        }
        assert!(page.contains(&format!("compiled on {}", catalog::CATALOG_DATE)));
    }

    #[test]
    fn the_kubernetes_example_file_is_valid() {
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../deploy/components/config-as-code/fleet.yaml"
        ))
        .unwrap();
        let parts = parse_raw(&text).unwrap().into_parts(1, &|_| None).unwrap();
        assert_eq!(parts.routes.len(), 2);
    }
}
