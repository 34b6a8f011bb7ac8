//! Standalone YAML configuration: raw serde structs → validated [`SnapshotParts`].
//!
//! Two stages (STYLE: wire types at the edge): `serde` parses the raw shape with field paths in its
//! errors, then [`RawConfig::into_parts`] checks references and ranges, naming the field path of
//! the first problem (`routes[0].members[1].channel: unknown channel "x"`).

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use serde::Deserialize;
use sha2::{Digest, Sha256};
use switchyard_engine::model::validate_group;
use switchyard_engine::{
    validate_pattern, Capabilities, Channel, ChannelStatus, Credential, Member, PlanEntry,
    Provider, Route, RoutingMode, SecretSource, Settings, SnapshotParts, Team, Token,
    DEFAULT_GROUP,
};

use crate::mock::MockOptions;

/// A configuration problem: the field path and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub path: String,
    pub message: String,
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

impl std::error::Error for ConfigError {}

fn err(path: impl Into<String>, message: impl Into<String>) -> ConfigError {
    ConfigError {
        path: path.into(),
        message: message.into(),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    #[serde(default)]
    pub settings: Settings,
    #[serde(default)]
    pub channels: Vec<RawChannel>,
    #[serde(default)]
    pub routes: Vec<RawRoute>,
    #[serde(default)]
    pub teams: Vec<RawTeam>,
    #[serde(default)]
    pub tokens: Vec<RawToken>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawChannel {
    pub id: Option<i64>,
    pub name: String,
    pub provider: String,
    pub base_url: Option<String>,
    #[serde(default = "enabled_str")]
    pub status: String,
    #[serde(default)]
    pub auto_ban: bool,
    pub max_concurrency: Option<u32>,
    #[serde(default)]
    pub capabilities: Capabilities,
    #[serde(default)]
    pub credentials: Vec<RawCredential>,
    #[serde(default)]
    pub retry_status_codes: Vec<u16>,
    #[serde(default)]
    pub retry_error_patterns: Vec<String>,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// `provider: mock` only: the simulation's behaviour.
    pub mock: Option<MockOptions>,
}

fn enabled_str() -> String {
    "enabled".to_owned()
}

fn yes() -> bool {
    true
}

/// `"sk-..."`, `"${ENV_NAME}"`, or `{secret: ..., enabled: false}`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum RawCredential {
    Plain(String),
    Full {
        id: Option<i64>,
        secret: String,
        #[serde(default = "yes")]
        enabled: bool,
    },
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRoute {
    pub id: Option<i64>,
    pub model_pattern: String,
    #[serde(default = "yes")]
    pub enabled: bool,
    #[serde(default = "auto_str")]
    pub routing_mode: String,
    pub single_member_id: Option<i64>,
    pub sticky_session: Option<bool>,
    pub stable_first: Option<bool>,
    pub stable_first_denominator: Option<u32>,
    pub retry_times: Option<u32>,
    pub channel_retry_times: Option<u32>,
    pub cooldown_seconds: Option<u32>,
    #[serde(default)]
    pub members: Vec<RawMember>,
}

fn auto_str() -> String {
    "auto".to_owned()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawMember {
    pub id: Option<i64>,
    /// The channel's name.
    pub channel: String,
    pub upstream_model: Option<String>,
    #[serde(alias = "group_name")]
    pub group: Option<String>,
    #[serde(default)]
    pub priority: i32,
    #[serde(default = "one")]
    pub weight: i32,
    #[serde(default = "yes")]
    pub enabled: bool,
    #[serde(default)]
    pub canary: bool,
    #[serde(default)]
    pub capabilities: Capabilities,
}

fn one() -> i32 {
    1
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTeam {
    pub id: Option<i64>,
    pub name: String,
    #[serde(default)]
    pub models: Vec<String>,
    #[serde(default)]
    pub members: Vec<i64>,
    #[serde(default)]
    pub plan: BTreeMap<i64, PlanEntry>,
    pub retry_limit: Option<u32>,
    #[serde(default)]
    pub disable_failover: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawToken {
    pub id: Option<i64>,
    pub name: String,
    /// The plaintext token (or a `${ENV}` reference to it).
    pub token: Option<String>,
    /// Lowercase hex SHA-256 of the plaintext, instead of `token`.
    pub token_sha256: Option<String>,
    #[serde(alias = "route_group_name")]
    pub route_group: Option<String>,
    /// The team's name.
    pub team: Option<String>,
    #[serde(default)]
    pub allow_pinning: bool,
    #[serde(default = "yes")]
    pub enabled: bool,
}

/// Reads, parses and validates a YAML file; `revision` becomes the snapshot's revision.
pub fn load_file(path: &Path, revision: u64) -> Result<SnapshotParts, ConfigError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| err("", format!("cannot read {}: {e}", path.display())))?;
    parse_yaml(&text, revision)
}

pub fn parse_yaml(text: &str, revision: u64) -> Result<SnapshotParts, ConfigError> {
    let de = serde_yaml::Deserializer::from_str(text);
    let raw: RawConfig = serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let path = if path == "." { String::new() } else { path };
        // serde_yaml prefixes its own (coarser) path: keep only the message.
        let message = e.into_inner().to_string();
        let message = match message.split_once(": ") {
            Some((head, rest)) if !head.contains(' ') => rest.to_owned(),
            _ => message,
        };
        err(path, message)
    })?;
    raw.into_parts(revision, &|name| std::env::var(name).ok())
}

/// Hands out ids for entries that give none: the smallest positive ids no entry claims
/// explicitly, in file order (stable across reloads of an unchanged file).
struct Ids {
    taken: std::collections::HashSet<i64>,
    next: i64,
}

impl Ids {
    fn new(explicit: impl Iterator<Item = Option<i64>>) -> Ids {
        Ids {
            taken: explicit.flatten().collect(),
            next: 1,
        }
    }

    fn next(&mut self) -> i64 {
        while self.taken.contains(&self.next) {
            self.next += 1;
        }
        self.next += 1;
        self.next - 1
    }

    fn or_next(&mut self, id: Option<i64>) -> i64 {
        id.unwrap_or_else(|| self.next())
    }
}

/// SHA-256 of a token's plaintext, lowercase hex (how tokens are stored and looked up).
pub fn token_hash(plaintext: &str) -> String {
    hex(&Sha256::digest(plaintext.as_bytes()))
}

pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 15)] as char);
    }
    out
}

/// `${NAME}` → `Some("NAME")`.
fn env_reference(value: &str) -> Option<&str> {
    let name = value.trim().strip_prefix("${")?.strip_suffix('}')?;
    let valid = !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    valid.then_some(name)
}

impl RawConfig {
    pub fn into_parts(
        self,
        revision: u64,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<SnapshotParts, ConfigError> {
        if let Some(e) = self.settings.validate().into_iter().next() {
            return Err(err(format!("settings.{}", e.field), e.message));
        }
        let mut channel_ids: HashMap<String, i64> = HashMap::new();
        let mut channels = Vec::with_capacity(self.channels.len());
        let mut channel_ids_alloc = Ids::new(self.channels.iter().map(|c| c.id));
        let mut credential_ids = Ids::new(self.channels.iter().flat_map(|c| {
            c.credentials.iter().map(|k| match k {
                RawCredential::Full { id, .. } => *id,
                RawCredential::Plain(_) => None,
            })
        }));
        for (ci, raw) in self.channels.into_iter().enumerate() {
            let at = format!("channels[{ci}]");
            let channel = raw.into_channel(&at, &mut channel_ids_alloc, &mut credential_ids)?;
            if channel_ids
                .insert(channel.name.clone(), channel.id)
                .is_some()
            {
                return Err(err(
                    format!("{at}.name"),
                    format!("duplicate channel name {:?}", channel.name),
                ));
            }
            channels.push(channel);
        }
        check_unique(channels.iter().map(|c| c.id), "channels", "channel id")?;

        let mut routes = Vec::with_capacity(self.routes.len());
        let mut route_ids = Ids::new(self.routes.iter().map(|r| r.id));
        let mut member_ids = Ids::new(
            self.routes
                .iter()
                .flat_map(|r| r.members.iter().map(|m| m.id)),
        );
        for (ri, raw) in self.routes.into_iter().enumerate() {
            let at = format!("routes[{ri}]");
            let id = route_ids.or_next(raw.id);
            routes.push(raw.into_route(id, &at, &channel_ids, &mut member_ids)?);
        }
        check_unique(routes.iter().map(|r| r.id), "routes", "route id")?;
        check_unique(
            routes.iter().flat_map(|r| r.members.iter().map(|m| m.id)),
            "routes",
            "member id",
        )?;

        let mut team_ids = HashMap::new();
        let mut team_alloc = Ids::new(self.teams.iter().map(|t| t.id));
        let mut token_alloc = Ids::new(self.tokens.iter().map(|t| t.id));
        let mut teams = Vec::with_capacity(self.teams.len());
        for (ti, raw) in self.teams.into_iter().enumerate() {
            let at = format!("teams[{ti}]");
            for (pi, pattern) in raw.models.iter().enumerate() {
                validate_pattern(pattern).map_err(|m| err(format!("{at}.models[{pi}]"), m))?;
            }
            let id = team_alloc.or_next(raw.id);
            if team_ids.insert(raw.name.clone(), id).is_some() {
                return Err(err(
                    format!("{at}.name"),
                    format!("duplicate team name {:?}", raw.name),
                ));
            }
            teams.push(Team {
                id,
                name: raw.name,
                models: raw.models,
                members: raw.members,
                plan: raw.plan,
                retry_limit: raw.retry_limit,
                disable_failover: raw.disable_failover,
            });
        }

        let mut tokens = Vec::with_capacity(self.tokens.len());
        for (ti, raw) in self.tokens.into_iter().enumerate() {
            let at = format!("tokens[{ti}]");
            let hash = match (raw.token, raw.token_sha256) {
                (Some(plain), None) => match env_reference(&plain) {
                    Some(name) => token_hash(&env(name).ok_or_else(|| {
                        err(
                            format!("{at}.token"),
                            format!("environment variable {name} is not set"),
                        )
                    })?),
                    None => token_hash(&plain),
                },
                (None, Some(hash)) => {
                    let hash = hash.trim().to_ascii_lowercase();
                    if hash.len() != 64 || !hash.chars().all(|c| c.is_ascii_hexdigit()) {
                        return Err(err(
                            format!("{at}.token_sha256"),
                            "must be 64 hex characters",
                        ));
                    }
                    hash
                }
                _ => {
                    return Err(err(
                        at,
                        "exactly one of `token` or `token_sha256` is required",
                    ));
                }
            };
            let team_id =
                match raw.team {
                    None => None,
                    Some(name) => Some(*team_ids.get(&name).ok_or_else(|| {
                        err(format!("{at}.team"), format!("unknown team {name:?}"))
                    })?),
                };
            if let Some(group) = &raw.route_group {
                validate_group(group).map_err(|m| err(format!("{at}.route_group"), m))?;
            }
            tokens.push(Token {
                id: token_alloc.or_next(raw.id),
                name: raw.name,
                hash,
                route_group_name: raw.route_group,
                team_id,
                allow_pinning: raw.allow_pinning,
                enabled: raw.enabled,
            });
        }
        check_unique(tokens.iter().map(|t| t.id), "tokens", "token id")?;

        Ok(SnapshotParts {
            revision,
            settings: self.settings,
            routes,
            channels,
            teams,
            tokens,
        })
    }
}

fn check_unique(ids: impl Iterator<Item = i64>, path: &str, what: &str) -> Result<(), ConfigError> {
    let mut seen = std::collections::HashSet::new();
    for id in ids {
        if !seen.insert(id) {
            return Err(err(path, format!("duplicate {what} {id}")));
        }
    }
    Ok(())
}

impl RawChannel {
    fn into_channel(
        self,
        at: &str,
        channel_ids: &mut Ids,
        credential_ids: &mut Ids,
    ) -> Result<Channel, ConfigError> {
        let provider = Provider::parse(self.provider.trim()).ok_or_else(|| {
            err(
                format!("{at}.provider"),
                format!(
                    "unknown provider {:?} (openai, anthropic, gemini, mock)",
                    self.provider
                ),
            )
        })?;
        let status = ChannelStatus::parse(self.status.trim()).ok_or_else(|| {
            err(
                format!("{at}.status"),
                "must be enabled, disabled or auto_disabled",
            )
        })?;
        if self.name.trim().is_empty() {
            return Err(err(format!("{at}.name"), "must not be empty"));
        }
        let base_url = match (provider, self.base_url, self.mock) {
            (Provider::Mock, None, options) => options.unwrap_or_default().to_url(),
            (Provider::Mock, Some(url), None) => url,
            (Provider::Mock, Some(_), Some(_)) => {
                return Err(err(
                    format!("{at}.mock"),
                    "give either base_url or mock, not both",
                ));
            }
            (_, _, Some(_)) => {
                return Err(err(
                    format!("{at}.mock"),
                    "only allowed with provider: mock",
                ));
            }
            (_, None, None) => return Err(err(format!("{at}.base_url"), "is required")),
            (_, Some(url), None) => {
                let trimmed = url.trim().trim_end_matches('/').to_owned();
                if !(trimmed.starts_with("http://") || trimmed.starts_with("https://"))
                    || trimmed.parse::<http::Uri>().is_err()
                {
                    return Err(err(
                        format!("{at}.base_url"),
                        format!("not an http(s) URL: {url:?}"),
                    ));
                }
                trimmed
            }
        };
        if provider == Provider::Mock {
            MockOptions::from_url(&base_url).map_err(|m| err(format!("{at}.base_url"), m))?;
        }
        let mut credentials = Vec::new();
        for (ki, raw) in self.credentials.into_iter().enumerate() {
            let (id, secret, enabled) = match raw {
                RawCredential::Plain(secret) => (None, secret, true),
                RawCredential::Full {
                    id,
                    secret,
                    enabled,
                } => (id, secret, enabled),
            };
            if secret.trim().is_empty() {
                return Err(err(
                    format!("{at}.credentials[{ki}]"),
                    "secret must not be empty",
                ));
            }
            let secret = match env_reference(&secret) {
                Some(name) => SecretSource::Env(name.to_owned()),
                None => SecretSource::Inline(secret),
            };
            let id = credential_ids.or_next(id);
            credentials.push(Credential {
                id,
                enabled,
                secret,
            });
        }
        if credentials.is_empty() {
            if provider != Provider::Mock {
                return Err(err(
                    format!("{at}.credentials"),
                    "at least one credential is required",
                ));
            }
            // The simulation needs no key, but the engine wants a usable credential.
            credentials.push(Credential {
                id: credential_ids.next(),
                enabled: true,
                secret: SecretSource::Inline("mock".to_owned()),
            });
        }
        let mut headers = Vec::with_capacity(self.headers.len());
        for (name, value) in self.headers {
            if http::HeaderName::from_bytes(name.as_bytes()).is_err()
                || http::HeaderValue::from_str(&value).is_err()
            {
                return Err(err(
                    format!("{at}.headers.{name}"),
                    "not a valid HTTP header",
                ));
            }
            headers.push((name, value));
        }
        for (i, code) in self.retry_status_codes.iter().enumerate() {
            if !(100..=599).contains(code) {
                return Err(err(
                    format!("{at}.retry_status_codes[{i}]"),
                    "not an HTTP status",
                ));
            }
        }
        Ok(Channel {
            id: channel_ids.or_next(self.id),
            name: self.name.trim().to_owned(),
            provider,
            base_url,
            status,
            auto_ban: self.auto_ban,
            max_concurrency: self.max_concurrency,
            capabilities: self.capabilities,
            credentials,
            retry_status_codes: self.retry_status_codes,
            retry_error_patterns: self.retry_error_patterns,
            headers,
        })
    }
}

impl RawRoute {
    fn into_route(
        self,
        id: i64,
        at: &str,
        channel_ids: &HashMap<String, i64>,
        member_ids: &mut Ids,
    ) -> Result<Route, ConfigError> {
        validate_pattern(&self.model_pattern).map_err(|m| err(format!("{at}.model_pattern"), m))?;
        let routing_mode = RoutingMode::parse(self.routing_mode.trim()).ok_or_else(|| {
            err(
                format!("{at}.routing_mode"),
                "must be auto, weighted, latency, adaptive or single",
            )
        })?;
        for (field, value) in [
            ("retry_times", self.retry_times),
            ("channel_retry_times", self.channel_retry_times),
            ("cooldown_seconds", self.cooldown_seconds),
            ("stable_first_denominator", self.stable_first_denominator),
        ] {
            if let Some(e) =
                value.and_then(|v| switchyard_engine::settings::check_range(field, v.into()))
            {
                return Err(err(format!("{at}.{field}"), e.message));
            }
        }
        let mut members = Vec::with_capacity(self.members.len());
        for (mi, raw) in self.members.into_iter().enumerate() {
            let mat = format!("{at}.members[{mi}]");
            let channel_id = *channel_ids.get(raw.channel.trim()).ok_or_else(|| {
                err(
                    format!("{mat}.channel"),
                    format!("unknown channel {:?}", raw.channel),
                )
            })?;
            let group = raw.group.unwrap_or_else(|| DEFAULT_GROUP.to_owned());
            validate_group(&group).map_err(|m| err(format!("{mat}.group"), m))?;
            let group = match group.trim() {
                "" => DEFAULT_GROUP.to_owned(),
                g => g.to_owned(),
            };
            let id = member_ids.or_next(raw.id);
            members.push(Member {
                id,
                channel_id,
                upstream_model: raw
                    .upstream_model
                    .unwrap_or_else(|| self.model_pattern.trim().to_owned()),
                group_name: group,
                priority: raw.priority,
                weight: raw.weight,
                enabled: raw.enabled,
                canary: raw.canary,
                capabilities: raw.capabilities,
            });
        }
        if routing_mode == RoutingMode::Single && self.single_member_id.is_none() {
            return Err(err(
                format!("{at}.single_member_id"),
                "required when routing_mode is single",
            ));
        }
        if members
            .iter()
            .any(|m| m.upstream_model.contains(['*', '?']))
        {
            return Err(err(
                format!("{at}.members"),
                "a wildcard route's members need an explicit upstream_model",
            ));
        }
        Ok(Route {
            id,
            model_pattern: self.model_pattern.trim().to_owned(),
            enabled: self.enabled,
            routing_mode,
            single_member_id: self.single_member_id,
            sticky_session: self.sticky_session,
            stable_first: self.stable_first,
            stable_first_denominator: self.stable_first_denominator,
            retry_times: self.retry_times,
            channel_retry_times: self.channel_retry_times,
            cooldown_seconds: self.cooldown_seconds,
            members,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> Result<SnapshotParts, String> {
        parse_yaml(yaml, 1).map_err(|e| e.to_string())
    }

    #[test]
    fn minimal_config_compiles_with_defaults() {
        let parts = parse(
            "channels:\n  - name: a\n    provider: mock\nroutes:\n  - model_pattern: m\n    members:\n      - channel: a\ntokens:\n  - name: t\n    token: secret\n",
        )
        .unwrap();
        assert_eq!(parts.channels[0].credentials.len(), 1);
        assert_eq!(parts.routes[0].members[0].upstream_model, "m");
        assert_eq!(parts.routes[0].members[0].group_name, "default");
        assert_eq!(parts.tokens[0].hash, token_hash("secret"));
    }

    #[test]
    fn unknown_channel_names_the_field_path() {
        let e = parse(
            "channels: []\nroutes:\n  - model_pattern: m\n    members:\n      - channel: nope\n",
        )
        .unwrap_err();
        assert_eq!(e, "routes[0].members[0].channel: unknown channel \"nope\"");
    }

    #[test]
    fn parse_errors_name_the_field_path() {
        let e = parse("settings:\n  retry_times: many\n").unwrap_err();
        assert!(e.starts_with("settings.retry_times: "), "{e}");
        let e = parse("channels:\n  - name: a\n    provider: mock\n    colour: red\n").unwrap_err();
        assert!(
            e.starts_with("channels[0].colour: unknown field `colour`"),
            "{e}"
        );
    }

    #[test]
    fn out_of_range_setting_names_the_field() {
        let e = parse("settings:\n  retry_times: 1000\n").unwrap_err();
        assert!(e.starts_with("settings.retry_times: "), "{e}");
    }

    #[test]
    fn env_credentials_are_references_and_missing_token_env_is_an_error() {
        let parts = parse(
            "channels:\n  - name: a\n    provider: openai\n    base_url: https://api.example.com/v1/\n    credentials: [\"${SWITCHYARD_TEST_KEY_X}\"]\n",
        )
        .unwrap();
        assert_eq!(
            parts.channels[0].credentials[0].secret,
            SecretSource::Env("SWITCHYARD_TEST_KEY_X".into())
        );
        assert_eq!(parts.channels[0].base_url, "https://api.example.com/v1");
        let e = parse("tokens:\n  - name: t\n    token: \"${SWITCHYARD_SURELY_UNSET_VAR}\"\n")
            .unwrap_err();
        assert_eq!(
            e,
            "tokens[0].token: environment variable SWITCHYARD_SURELY_UNSET_VAR is not set"
        );
    }

    #[test]
    fn real_channels_need_credentials_and_url() {
        let e = parse("channels:\n  - name: a\n    provider: openai\n    base_url: https://x\n")
            .unwrap_err();
        assert_eq!(
            e,
            "channels[0].credentials: at least one credential is required"
        );
        let e = parse("channels:\n  - name: a\n    provider: openai\n    credentials: [k]\n")
            .unwrap_err();
        assert_eq!(e, "channels[0].base_url: is required");
    }
}
