//! A guardrail rule as the proxies apply it: what it is attached to, when it runs, what it looks
//! for and what it does about a finding; and [`Guardrail::check`], the one validation every edge
//! (admin API, configuration file, snapshot stream) runs, naming the field of a problem.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::detect::{parse_detectors, Detector};
use super::schema::check_schema;
use crate::model::{RouteId, TeamId, TokenId};

/// What a rule is attached to. A rule attached to nothing (`All`) runs on every request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "scope", content = "id", rename_all = "snake_case")]
pub enum GuardScope {
    All,
    Route(RouteId),
    Team(TeamId),
    Token(TokenId),
}

impl GuardScope {
    /// `all`, `route`, `team` or `token`.
    pub fn kind(self) -> &'static str {
        match self {
            GuardScope::All => "all",
            GuardScope::Route(_) => "route",
            GuardScope::Team(_) => "team",
            GuardScope::Token(_) => "token",
        }
    }

    /// The id of what the rule is attached to (`None` for all traffic).
    pub fn id(self) -> Option<i64> {
        match self {
            GuardScope::All => None,
            GuardScope::Route(id) | GuardScope::Team(id) | GuardScope::Token(id) => Some(id),
        }
    }

    /// The scope from its kind and id: `all` takes no id, the others need one.
    pub fn from_parts(kind: &str, id: Option<i64>) -> Result<GuardScope, String> {
        match (kind.trim(), id) {
            ("all", None) => Ok(GuardScope::All),
            ("all", Some(_)) => Err("scope all takes no scope_id".to_owned()),
            ("route", Some(id)) => Ok(GuardScope::Route(id)),
            ("team", Some(id)) => Ok(GuardScope::Team(id)),
            ("token", Some(id)) => Ok(GuardScope::Token(id)),
            ("route" | "team" | "token", None) => Err(format!("scope {kind} needs a scope_id")),
            (other, _) => Err(format!(
                "unknown scope {:?} (all, route, team or token)",
                other.chars().take(40).collect::<String>()
            )),
        }
    }
}

/// When a rule runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GuardStage {
    /// On the request, before any upstream call.
    Request,
    /// On the answer.
    Response,
    /// On both.
    Both,
}

/// The stage a proxy is at when it asks which rules apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    Request,
    Response,
}

impl GuardStage {
    pub const ALL: [GuardStage; 3] = [GuardStage::Request, GuardStage::Response, GuardStage::Both];

    pub fn as_str(self) -> &'static str {
        match self {
            GuardStage::Request => "request",
            GuardStage::Response => "response",
            GuardStage::Both => "both",
        }
    }

    pub fn parse(text: &str) -> Option<GuardStage> {
        GuardStage::ALL
            .into_iter()
            .find(|s| s.as_str() == text.trim())
    }

    /// Whether a rule with this setting runs at `stage`.
    pub fn covers(self, stage: Stage) -> bool {
        matches!(
            (self, stage),
            (GuardStage::Both, _)
                | (GuardStage::Request, Stage::Request)
                | (GuardStage::Response, Stage::Response)
        )
    }
}

/// What a rule does about a finding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GuardAction {
    /// Refuse the request (or end the answer) with a refusal in the client's protocol.
    Block,
    /// Replace each match by a placeholder before it goes on (patterns and detectors only).
    Redact,
    /// Only record what was found.
    Log,
}

impl GuardAction {
    pub const ALL: [GuardAction; 3] = [GuardAction::Block, GuardAction::Redact, GuardAction::Log];

    pub fn as_str(self) -> &'static str {
        match self {
            GuardAction::Block => "block",
            GuardAction::Redact => "redact",
            GuardAction::Log => "log",
        }
    }

    pub fn parse(text: &str) -> Option<GuardAction> {
        GuardAction::ALL
            .into_iter()
            .find(|a| a.as_str() == text.trim())
    }
}

/// Whether a rule acts or only reports what it would have done.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum GuardMode {
    #[default]
    Enforce,
    /// Never changes a request or an answer; reports what the rule would have done.
    Shadow,
}

impl GuardMode {
    pub fn as_str(self) -> &'static str {
        match self {
            GuardMode::Enforce => "enforce",
            GuardMode::Shadow => "shadow",
        }
    }

    pub fn parse(text: &str) -> Option<GuardMode> {
        match text.trim() {
            "enforce" => Some(GuardMode::Enforce),
            "shadow" => Some(GuardMode::Shadow),
            _ => None,
        }
    }
}

/// What a rule does with a request whose content the gateway cannot inspect (a pass-through
/// call, a Files or Batch API call, a Realtime session, an audio upload to transcribe), where
/// the rule's stage would look at it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Uninspectable {
    /// Lets it through unchecked (the default).
    #[default]
    Allow,
    /// Refuses it, as a block refuses a finding.
    Block,
}

impl Uninspectable {
    pub fn as_str(self) -> &'static str {
        match self {
            Uninspectable::Allow => "allow",
            Uninspectable::Block => "block",
        }
    }

    pub fn parse(text: &str) -> Option<Uninspectable> {
        match text.trim() {
            "allow" => Some(Uninspectable::Allow),
            "block" => Some(Uninspectable::Block),
            _ => None,
        }
    }
}

/// What a webhook's failure (timeout, error, an answer it cannot read) does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnFailure {
    /// The request goes on as if the webhook had allowed it.
    Open,
    /// The request is treated as if the webhook had found a problem.
    Closed,
}

impl OnFailure {
    pub fn as_str(self) -> &'static str {
        match self {
            OnFailure::Open => "open",
            OnFailure::Closed => "closed",
        }
    }

    pub fn parse(text: &str) -> Option<OnFailure> {
        match text.trim() {
            "open" => Some(OnFailure::Open),
            "closed" => Some(OnFailure::Closed),
            _ => None,
        }
    }
}

/// A user pattern.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PatternCheck {
    /// A regular expression (the `regex` crate's syntax: linear time, no look-around or
    /// back-references).
    pub regex: String,
    /// The longest text a match may span (bytes): a stream holds back this much answer text.
    #[serde(default = "default_max_match_bytes")]
    pub max_match_bytes: u32,
    /// The kind its findings have and its placeholders' stem (`[EMPLOYEE_ID_1]`): capital
    /// letters, digits and `_`; default `PATTERN`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
}

/// The default longest match of a user pattern (bytes).
pub const DEFAULT_MAX_MATCH_BYTES: u32 = 256;
/// The largest `max_match_bytes` accepted.
pub const MAX_MATCH_BYTES: u32 = 16 * 1024;
/// Longest user pattern accepted (bytes of its text).
pub const MAX_PATTERN_BYTES: usize = 1024;
/// Most user patterns in one rule.
pub const MAX_PATTERNS: usize = 32;
/// Most tool names in one list.
pub const MAX_TOOL_NAMES: usize = 256;
/// Longest webhook timeout (ms).
pub const MAX_WEBHOOK_TIMEOUT_MS: u32 = 30_000;

fn default_max_match_bytes() -> u32 {
    DEFAULT_MAX_MATCH_BYTES
}

/// Allowed and denied tool names: a request's declared tools, an answer's tool calls.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ToolPolicy {
    /// When given, only these tools may be declared or called.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed: Option<Vec<String>>,
    /// These tools may never be declared or called.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub denied: Vec<String>,
}

/// A JSON-mode answer must be JSON and, with a schema, valid against it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct JsonSchemaCheck {
    /// A schema in the supported subset (see the `schema` module); none: any JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<Value>,
}

/// An external check the proxy calls with the text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookCheck {
    /// `http://` or `https://`.
    pub url: String,
    pub timeout_ms: u32,
    pub on_failure: OnFailure,
}

/// A moderation call through one of the gateway's channels.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModerationCheck {
    /// The channel's name (checked to exist when the rule is written; a channel removed since
    /// makes the call fail).
    pub channel: String,
    /// The categories that count as a finding; empty: any flagged category.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub categories: Vec<String>,
}

/// The names of the checks a rule can hold.
pub const KNOWN_CHECKS: [&str; 8] = [
    "patterns",
    "detectors",
    "max_input_tokens",
    "max_messages",
    "tools",
    "json_schema",
    "webhook",
    "moderation",
];

/// The checks one rule holds (at least one).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct GuardChecks {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub patterns: Vec<PatternCheck>,
    /// Detector names; `api_keys` stands for every API key detector.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "detector_names"
    )]
    pub detectors: Vec<Detector>,
    /// The request's estimated input tokens (the gateway's estimate: characters / 4 over all
    /// text, plus a fixed amount per image, audio or document part).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_input_tokens: Option<u64>,
    /// The request's messages (conversation turns, system included).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_messages: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<ToolPolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub json_schema: Option<JsonSchemaCheck>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook: Option<WebhookCheck>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moderation: Option<ModerationCheck>,
}

/// Reads detector names (`api_keys` expanded), for every serde form of a rule's checks.
pub fn detector_names<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<Detector>, D::Error> {
    let names: Vec<String> = Vec::deserialize(d)?;
    parse_detectors(&names).map_err(serde::de::Error::custom)
}

impl GuardChecks {
    /// The checks as the JSON object the admin API takes and the snapshot stream carries.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| "{}".to_owned())
    }

    /// Reads the checks from a JSON value, naming the check of a problem
    /// (`checks.detectors`, or `checks` for what is not an object or names an unknown check).
    pub fn from_value(value: &Value) -> Result<GuardChecks, FieldError> {
        let Value::Object(map) = value else {
            return Err(field_err("checks", "checks is a JSON object"));
        };
        for (key, item) in map {
            let one = Value::Object([(key.clone(), item.clone())].into_iter().collect());
            if let Err(e) = GuardChecks::deserialize(&one) {
                let known = KNOWN_CHECKS.contains(&key.as_str());
                let field = if known {
                    format!("checks.{key}")
                } else {
                    "checks".to_owned()
                };
                return Err(field_err(field, e.to_string()));
            }
        }
        GuardChecks::deserialize(value).map_err(|e| field_err("checks", e.to_string()))
    }

    /// Reads [`GuardChecks::to_json`]'s JSON (unknown fields refused); the error names the
    /// problem without repeating the text.
    pub fn from_json(text: &str) -> Result<GuardChecks, String> {
        serde_json::from_str(text).map_err(|e| {
            let line = e.line();
            let column = e.column();
            let what = e.to_string();
            // serde's message names the field or value kind; cut the location it appends.
            let what = what
                .split(" at line ")
                .next()
                .unwrap_or("invalid")
                .to_owned();
            format!("{what} (line {line}, column {column})")
        })
    }

    /// Whether the rule looks at text with patterns or detectors.
    pub fn scans_text(&self) -> bool {
        !self.patterns.is_empty() || !self.detectors.is_empty()
    }

    /// Whether the rule holds a check that is not a pattern or a detector.
    fn has_other_checks(&self) -> bool {
        self.max_input_tokens.is_some()
            || self.max_messages.is_some()
            || self.tools.is_some()
            || self.json_schema.is_some()
            || self.webhook.is_some()
            || self.moderation.is_some()
    }
}

/// A guardrail rule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Guardrail {
    pub id: i64,
    pub name: String,
    pub scope: GuardScope,
    pub stage: GuardStage,
    pub action: GuardAction,
    /// With `redact`: the placeholders in the answer are replaced by the original text again.
    pub restore: bool,
    pub mode: GuardMode,
    pub enabled: bool,
    pub checks: GuardChecks,
    /// What the rule does with content it cannot inspect.
    #[serde(default)]
    pub uninspectable: Uninspectable,
}

/// A problem with a rule: the field's path (`checks.patterns[0].regex`) and what is wrong.
pub type FieldError = (String, String);

fn field_err(field: impl Into<String>, message: impl Into<String>) -> FieldError {
    (field.into(), message.into())
}

impl Guardrail {
    /// Checks the rule's own fields, naming the field of the first problem. Pattern syntax is
    /// checked by compiling each pattern (the regex error is the message).
    pub fn check(&self) -> Result<(), FieldError> {
        if self.name.trim().is_empty() || self.name.chars().count() > 128 {
            return Err(field_err("name", "name must be 1 to 128 characters"));
        }
        crate::validate::check_single_line(&self.name).map_err(|m| field_err("name", m))?;
        self.check_combination()?;
        check_patterns(&self.checks.patterns)?;
        self.check_limits()?;
        if let Some(tools) = &self.checks.tools {
            check_tools(tools)?;
        }
        if let Some(schema) = self
            .checks
            .json_schema
            .as_ref()
            .and_then(|j| j.schema.as_ref())
        {
            check_schema(schema).map_err(|(at, m)| {
                field_err("checks.json_schema.schema", format!("at {at:?}: {m}"))
            })?;
        }
        if let Some(webhook) = &self.checks.webhook {
            check_webhook(webhook)?;
        }
        if let Some(moderation) = &self.checks.moderation {
            if moderation.channel.trim().is_empty() || moderation.channel.len() > 128 {
                return Err(field_err(
                    "checks.moderation.channel",
                    "name the channel the moderation call goes through",
                ));
            }
            check_categories(&moderation.categories)?;
        }
        Ok(())
    }

    /// The checks, the action and the stage fit together.
    fn check_combination(&self) -> Result<(), FieldError> {
        let checks = &self.checks;
        if !checks.scans_text() && !checks.has_other_checks() {
            return Err(field_err("checks", "a rule holds at least one check"));
        }
        if self.action == GuardAction::Redact && !checks.scans_text() {
            return Err(field_err(
                "action",
                "redact replaces what patterns or detectors find; the rule has neither",
            ));
        }
        if self.action == GuardAction::Redact && checks.has_other_checks() {
            return Err(field_err(
                "action",
                "redact applies to patterns and detectors only; put the rule's other checks \
                 in a rule of their own",
            ));
        }
        if self.restore && self.action != GuardAction::Redact {
            return Err(field_err(
                "restore",
                "restore applies to action redact only",
            ));
        }
        if self.restore && self.stage == GuardStage::Response {
            return Err(field_err(
                "restore",
                "restore puts back what the request's redaction replaced; the rule never runs \
                 on the request",
            ));
        }
        let request_only = checks.max_input_tokens.is_some() || checks.max_messages.is_some();
        if request_only && self.stage == GuardStage::Response {
            return Err(field_err(
                "stage",
                "max_input_tokens and max_messages check requests; the stage is response",
            ));
        }
        if checks.json_schema.is_some() && self.stage == GuardStage::Request {
            return Err(field_err(
                "stage",
                "json_schema checks answers; the stage is request",
            ));
        }
        Ok(())
    }

    fn check_limits(&self) -> Result<(), FieldError> {
        if self.checks.max_input_tokens == Some(0) {
            return Err(field_err(
                "checks.max_input_tokens",
                "max_input_tokens must be 1 or more",
            ));
        }
        if self.checks.max_messages == Some(0) {
            return Err(field_err(
                "checks.max_messages",
                "max_messages must be 1 or more",
            ));
        }
        Ok(())
    }
}

/// Each pattern compiles, within its bounds.
fn check_patterns(patterns: &[PatternCheck]) -> Result<(), FieldError> {
    if patterns.len() > MAX_PATTERNS {
        return Err(field_err(
            "checks.patterns",
            format!("at most {MAX_PATTERNS} patterns are allowed"),
        ));
    }
    for (i, p) in patterns.iter().enumerate() {
        let at = format!("checks.patterns[{i}]");
        if p.regex.is_empty() || p.regex.len() > MAX_PATTERN_BYTES {
            return Err(field_err(
                format!("{at}.regex"),
                format!("a pattern is 1 to {MAX_PATTERN_BYTES} bytes"),
            ));
        }
        let compiled = super::detect::compile_pattern(&p.regex)
            .map_err(|e| field_err(format!("{at}.regex"), e.to_string()))?;
        if compiled.is_match("") {
            return Err(field_err(
                format!("{at}.regex"),
                "the pattern matches empty text, so it would match everywhere",
            ));
        }
        if !(1..=MAX_MATCH_BYTES).contains(&p.max_match_bytes) {
            return Err(field_err(
                format!("{at}.max_match_bytes"),
                format!("max_match_bytes must be 1 to {MAX_MATCH_BYTES}"),
            ));
        }
        if let Some(label) = &p.label {
            let ok = (1..=32).contains(&label.len())
                && label
                    .bytes()
                    .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_');
            if !ok {
                return Err(field_err(
                    format!("{at}.label"),
                    "a label is 1 to 32 capital letters, digits or _",
                ));
            }
        }
    }
    Ok(())
}

fn check_tools(tools: &ToolPolicy) -> Result<(), FieldError> {
    if tools.allowed.is_none() && tools.denied.is_empty() {
        return Err(field_err(
            "checks.tools",
            "name allowed tools, denied tools or both",
        ));
    }
    let lists = [
        ("allowed", tools.allowed.as_deref().unwrap_or(&[])),
        ("denied", tools.denied.as_slice()),
    ];
    for (which, names) in lists {
        if names.len() > MAX_TOOL_NAMES {
            return Err(field_err(
                format!("checks.tools.{which}"),
                format!("at most {MAX_TOOL_NAMES} tool names are allowed"),
            ));
        }
        for (i, name) in names.iter().enumerate() {
            if name.trim().is_empty() || name.len() > 128 {
                return Err(field_err(
                    format!("checks.tools.{which}[{i}]"),
                    "a tool name is 1 to 128 bytes",
                ));
            }
            crate::validate::check_single_line(name)
                .map_err(|m| field_err(format!("checks.tools.{which}[{i}]"), m))?;
        }
    }
    Ok(())
}

fn check_webhook(webhook: &WebhookCheck) -> Result<(), FieldError> {
    let url = webhook.url.trim();
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"));
    let host = rest.map(|r| r.split(['/', '?', '#']).next().unwrap_or(""));
    let ok = host.is_some_and(|h| !h.is_empty() && !h.contains('@'))
        && url.len() <= 2048
        && crate::validate::check_single_line(url).is_ok()
        && !url.contains(' ');
    if !ok {
        return Err(field_err(
            "checks.webhook.url",
            "the webhook url is an http:// or https:// URL with a host (no credentials, at \
             most 2048 bytes)",
        ));
    }
    if !(1..=MAX_WEBHOOK_TIMEOUT_MS).contains(&webhook.timeout_ms) {
        return Err(field_err(
            "checks.webhook.timeout_ms",
            format!("timeout_ms must be 1 to {MAX_WEBHOOK_TIMEOUT_MS}"),
        ));
    }
    Ok(())
}

fn check_categories(categories: &[String]) -> Result<(), FieldError> {
    for (i, c) in categories.iter().enumerate() {
        let ok = (1..=64).contains(&c.len())
            && c.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"_-/".contains(&b));
        if !ok {
            return Err(field_err(
                format!("checks.moderation.categories[{i}]"),
                "a category is 1 to 64 lowercase letters, digits, _, - or / (e.g. \
                 harassment/threatening)",
            ));
        }
    }
    if categories.len() > 64 {
        return Err(field_err(
            "checks.moderation.categories",
            "at most 64 categories are allowed",
        ));
    }
    Ok(())
}

/// A rule with its names in words, as every edge (admin API, configuration file, snapshot
/// stream, database row) carries it; [`GuardrailSpec::into_rule`] is the one way in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GuardrailSpec {
    pub name: String,
    /// `all`, `route`, `team` or `token`.
    pub scope: String,
    /// The route's, team's or token's id; none with `all`.
    pub scope_id: Option<i64>,
    /// `request`, `response` or `both`.
    pub stage: String,
    /// `block`, `redact` or `log`.
    pub action: String,
    pub restore: bool,
    /// `enforce` or `shadow`.
    pub mode: String,
    pub enabled: bool,
    pub checks: GuardChecks,
    /// `allow` (default) or `block`.
    #[serde(default = "allow_uninspectable")]
    pub uninspectable: String,
}

fn allow_uninspectable() -> String {
    Uninspectable::Allow.as_str().to_owned()
}

impl GuardrailSpec {
    /// The rule, its names parsed and the whole of it checked ([`Guardrail::check`]).
    pub fn into_rule(self, id: i64) -> Result<Guardrail, FieldError> {
        let scope = GuardScope::from_parts(&self.scope, self.scope_id)
            .map_err(|m| field_err("scope", m))?;
        let stage = GuardStage::parse(&self.stage).ok_or_else(|| {
            field_err(
                "stage",
                format!(
                    "unknown stage {:?} (request, response or both)",
                    short(&self.stage)
                ),
            )
        })?;
        let action = GuardAction::parse(&self.action).ok_or_else(|| {
            field_err(
                "action",
                format!(
                    "unknown action {:?} (block, redact or log)",
                    short(&self.action)
                ),
            )
        })?;
        let mode = GuardMode::parse(&self.mode).ok_or_else(|| {
            field_err(
                "mode",
                format!("unknown mode {:?} (enforce or shadow)", short(&self.mode)),
            )
        })?;
        let uninspectable = if self.uninspectable.trim().is_empty() {
            Uninspectable::Allow
        } else {
            Uninspectable::parse(&self.uninspectable).ok_or_else(|| {
                field_err(
                    "uninspectable",
                    format!(
                        "unknown value {:?} (allow or block)",
                        short(&self.uninspectable)
                    ),
                )
            })?
        };
        let rule = Guardrail {
            id,
            name: self.name,
            scope,
            stage,
            action,
            restore: self.restore,
            mode,
            enabled: self.enabled,
            checks: self.checks,
            uninspectable,
        };
        rule.check()?;
        Ok(rule)
    }
}

fn short(text: &str) -> String {
    text.chars().take(40).collect()
}

impl Guardrail {
    /// The rule in words ([`GuardrailSpec::into_rule`] gives it back).
    pub fn spec(&self) -> GuardrailSpec {
        GuardrailSpec {
            name: self.name.clone(),
            scope: self.scope.kind().to_owned(),
            scope_id: self.scope.id(),
            stage: self.stage.as_str().to_owned(),
            action: self.action.as_str().to_owned(),
            restore: self.restore,
            mode: self.mode.as_str().to_owned(),
            enabled: self.enabled,
            checks: self.checks.clone(),
            uninspectable: self.uninspectable.as_str().to_owned(),
        }
    }
}
