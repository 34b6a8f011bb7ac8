//! The OpenAPI description of a guardrail's fields: the names each takes and the shape of its
//! checks (the engine's `GuardChecks`, which the API reads and validates; these types only
//! document it).

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// What a guardrail is attached to: every request, or one route, team or token.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum GuardScopeName {
    All,
    Route,
    Team,
    Token,
}

/// When a guardrail runs.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum GuardStageName {
    Request,
    Response,
    Both,
}

/// What a guardrail does about a finding.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum GuardActionName {
    Block,
    Redact,
    Log,
}

/// Whether a guardrail acts (`enforce`) or only reports what it would have done (`shadow`).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum GuardModeName {
    Enforce,
    Shadow,
}

/// What a guardrail does with content it cannot inspect (pass-through, Files and Batch API
/// calls, Realtime sessions, audio to transcribe): `allow` lets it through unchecked, `block`
/// refuses it.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum GuardUninspectableName {
    Allow,
    Block,
}

/// A built-in detector; `api_keys` stands for the six key detectors.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum DetectorName {
    Email,
    Phone,
    Card,
    Iban,
    OpenaiKey,
    AnthropicKey,
    AwsAccessKey,
    GoogleApiKey,
    GithubToken,
    SlackToken,
    PrivateKey,
    ApiKeys,
}

/// What a failed webhook call does: `open` lets the request go on, `closed` counts as a
/// finding.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum OnFailureName {
    Open,
    Closed,
}

/// A guardrail's checks (at least one).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct GuardChecksDoc {
    pub patterns: Option<Vec<GuardPatternDoc>>,
    pub detectors: Option<Vec<DetectorName>>,
    /// The request's estimated input tokens (characters / 4, plus a fixed amount per media
    /// part), at least 1.
    pub max_input_tokens: Option<u64>,
    /// The request's messages, at least 1.
    pub max_messages: Option<u32>,
    pub tools: Option<GuardToolsDoc>,
    pub json_schema: Option<GuardJsonSchemaDoc>,
    pub webhook: Option<GuardWebhookDoc>,
    pub moderation: Option<GuardModerationDoc>,
}

/// A user pattern.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct GuardPatternDoc {
    /// A regular expression (the `regex` crate's syntax), at most 1024 bytes.
    pub regex: String,
    /// The longest text a match may span (bytes; default 256, at most 16384).
    pub max_match_bytes: Option<u32>,
    /// Capital letters, digits and `_`; the placeholders' stem (default `PATTERN`).
    pub label: Option<String>,
}

/// Allowed and denied tool names (either or both).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct GuardToolsDoc {
    pub allowed: Option<Vec<String>>,
    pub denied: Option<Vec<String>>,
}

/// A JSON-mode answer must be JSON and, with `schema`, valid against it.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct GuardJsonSchemaDoc {
    /// A JSON Schema in the supported subset (the guardrails guide lists its keywords).
    #[schema(value_type = Option<Object>)]
    pub schema: Option<serde_json::Value>,
}

/// An external check the proxy calls.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct GuardWebhookDoc {
    /// `http://` or `https://` with a host; never shown in the audit log.
    pub url: String,
    /// 1 to 30000.
    pub timeout_ms: u32,
    pub on_failure: OnFailureName,
}

/// A moderation call through one of the gateway's channels.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct GuardModerationDoc {
    /// The channel's name.
    pub channel: String,
    /// The categories that count (none: any flagged one).
    pub categories: Option<Vec<String>>,
}

#[cfg(test)]
mod tests {
    use super::DetectorName;
    use switchyard_engine::guard::detect::Detector;

    /// The document's list of detectors is written beside the engine's: every detector the
    /// engine knows is one the document names, and `api_keys` too.
    #[test]
    fn the_documented_detectors_are_the_engines() {
        for detector in Detector::ALL {
            let name = serde_json::to_value(detector).unwrap();
            serde_json::from_value::<DetectorName>(name.clone())
                .unwrap_or_else(|e| panic!("{name} is not documented: {e}"));
        }
        serde_json::from_value::<DetectorName>(serde_json::json!("api_keys")).unwrap();
        let documented = serde_json::to_value([
            DetectorName::Email,
            DetectorName::Phone,
            DetectorName::Card,
            DetectorName::Iban,
            DetectorName::OpenaiKey,
            DetectorName::AnthropicKey,
            DetectorName::AwsAccessKey,
            DetectorName::GoogleApiKey,
            DetectorName::GithubToken,
            DetectorName::SlackToken,
            DetectorName::PrivateKey,
        ])
        .unwrap();
        assert_eq!(documented, serde_json::to_value(Detector::ALL).unwrap());
    }
}
