//! Response cache rules: which requests the proxy may answer from its exact response cache, for
//! how long, how large an answer may be kept, and who shares an entry. A rule names a model
//! pattern; a route's own pattern names exactly the requests that route serves. The proxy and
//! explain ask the same question through [`applicable`]: which rule applies to this request.

use serde::{Deserialize, Serialize};

use crate::ids::ChannelId;
use crate::pattern::{validate_pattern, wildcard_match};

/// The endpoints a cache rule can cover.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CacheEndpoint {
    /// OpenAI `POST /v1/chat/completions`.
    ChatCompletions,
    /// OpenAI `POST /v1/completions`.
    Completions,
    /// OpenAI `POST /v1/embeddings`.
    Embeddings,
    /// Anthropic `POST /v1/messages`.
    Messages,
    /// Gemini `:generateContent` and `:streamGenerateContent`.
    GenerateContent,
    /// OpenAI `POST /v1/responses`, stateless only (no `previous_response_id`, `store: false`,
    /// not in the background).
    Responses,
}

impl CacheEndpoint {
    pub const ALL: [CacheEndpoint; 6] = [
        CacheEndpoint::ChatCompletions,
        CacheEndpoint::Completions,
        CacheEndpoint::Embeddings,
        CacheEndpoint::Messages,
        CacheEndpoint::GenerateContent,
        CacheEndpoint::Responses,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            CacheEndpoint::ChatCompletions => "chat_completions",
            CacheEndpoint::Completions => "completions",
            CacheEndpoint::Embeddings => "embeddings",
            CacheEndpoint::Messages => "messages",
            CacheEndpoint::GenerateContent => "generate_content",
            CacheEndpoint::Responses => "responses",
        }
    }

    pub fn parse(text: &str) -> Option<CacheEndpoint> {
        CacheEndpoint::ALL
            .into_iter()
            .find(|e| e.as_str() == text.trim())
    }
}

/// Who shares a cache entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum CacheScope {
    /// Every caller of the route reads every other caller's answers.
    Route,
    /// The callers of one team share; a token without a team shares with nobody.
    #[default]
    Team,
    /// Each token reads only its own answers.
    Token,
}

impl CacheScope {
    pub fn as_str(self) -> &'static str {
        match self {
            CacheScope::Route => "route",
            CacheScope::Team => "team",
            CacheScope::Token => "token",
        }
    }

    pub fn parse(text: &str) -> Option<CacheScope> {
        match text.trim() {
            "route" => Some(CacheScope::Route),
            "team" => Some(CacheScope::Team),
            "token" => Some(CacheScope::Token),
            _ => None,
        }
    }
}

/// Longest accepted time to live: 30 days.
pub const MAX_CACHE_TTL_SECONDS: u64 = 30 * 24 * 3600;
/// Largest accepted entry: 8 MiB.
pub const MAX_CACHE_ENTRY_BYTES: u64 = 8 << 20;

/// What a rule's semantic part does with a request whose prompt means the same as a stored one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum SemanticMode {
    /// Never served: the match is counted and, once the live answer is whole, compared with the
    /// stored one.
    #[default]
    Trial,
    /// Served as an exact hit is.
    Serve,
}

impl SemanticMode {
    pub fn as_str(self) -> &'static str {
        match self {
            SemanticMode::Trial => "trial",
            SemanticMode::Serve => "serve",
        }
    }

    pub fn parse(text: &str) -> Option<SemanticMode> {
        match text.trim() {
            "trial" => Some(SemanticMode::Trial),
            "serve" => Some(SemanticMode::Serve),
            _ => None,
        }
    }
}

/// A cache rule's match by meaning: the prompt's embedding (asked of `channel` for `model`)
/// against the stored ones of requests alike in every other part, a match at cosine similarity
/// `threshold` or more.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SemanticPart {
    pub channel: ChannelId,
    pub model: String,
    /// Above 0, at most 1.
    pub threshold: f64,
    #[serde(default)]
    pub mode: SemanticMode,
}

impl SemanticPart {
    /// The part stored as columns: present when the channel is; then the others must be too.
    pub fn from_columns(
        channel: Option<ChannelId>,
        model: Option<String>,
        threshold: Option<f64>,
        mode: Option<&str>,
    ) -> Result<Option<SemanticPart>, String> {
        let Some(channel) = channel else {
            return Ok(None);
        };
        let (Some(model), Some(threshold), Some(mode)) = (model, threshold, mode) else {
            return Err("a semantic part without its model, threshold or mode".to_owned());
        };
        let mode = SemanticMode::parse(mode).ok_or_else(|| format!("unknown mode {mode:?}"))?;
        Ok(Some(SemanticPart {
            channel,
            model,
            threshold,
            mode,
        }))
    }

    /// Checks the part's own fields: `(field, message)`; the channel is checked where channels
    /// are known.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        if self.model.trim().is_empty() || self.model.chars().count() > 256 {
            return Err((
                "semantic.model",
                "semantic.model must be 1 to 256 characters".to_owned(),
            ));
        }
        if !(self.threshold > 0.0 && self.threshold <= 1.0) {
            return Err((
                "semantic.threshold",
                "semantic.threshold must be above 0 and at most 1".to_owned(),
            ));
        }
        Ok(())
    }
}

/// A cache rule as the proxies apply it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CacheRule {
    pub id: i64,
    pub name: String,
    /// Matched against the model the client asked for (`*`/`?` wildcards), or equal to the
    /// pattern of the route serving it.
    pub model_pattern: String,
    /// The endpoints covered; never empty.
    pub endpoints: Vec<CacheEndpoint>,
    pub ttl_seconds: u64,
    /// The largest answer kept (bytes of its canonical, plain form).
    pub max_entry_bytes: u64,
    pub scope: CacheScope,
    /// Only requests that ask for a reproducible answer (temperature 0 or a seed; embeddings
    /// always) are cached.
    pub deterministic_only: bool,
    pub enabled: bool,
    /// The match by meaning, after an exact miss.
    #[serde(default)]
    pub semantic: Option<SemanticPart>,
    /// The one team whose requests the rule covers (its tokens'); `None`: every request.
    #[serde(default)]
    pub team: Option<i64>,
}

impl CacheRule {
    /// Whether the rule covers a request for `model` at `endpoint`, served by the route whose
    /// pattern is `route_pattern`, from a token of `team` (`None`: a token without a team). A
    /// rule limited to a team covers its tokens' requests only.
    pub fn covers(
        &self,
        route_pattern: &str,
        model: &str,
        endpoint: CacheEndpoint,
        team: Option<i64>,
    ) -> bool {
        self.enabled
            && (self.team.is_none() || self.team == team)
            && self.endpoints.contains(&endpoint)
            && (self.model_pattern == route_pattern
                || self.model_pattern == model
                || wildcard_match(&self.model_pattern, model))
    }

    /// Checks the rule's own fields: `(field, message)`.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        if self.name.trim().is_empty() || self.name.chars().count() > 128 {
            return Err(("name", "name must be 1 to 128 characters".to_owned()));
        }
        validate_pattern(&self.model_pattern).map_err(|m| ("model_pattern", m))?;
        if self.endpoints.is_empty() {
            return Err(("endpoints", "name at least one endpoint".to_owned()));
        }
        if !(1..=MAX_CACHE_TTL_SECONDS).contains(&self.ttl_seconds) {
            return Err((
                "ttl_seconds",
                format!("ttl_seconds must be 1 to {MAX_CACHE_TTL_SECONDS}"),
            ));
        }
        if !(1..=MAX_CACHE_ENTRY_BYTES).contains(&self.max_entry_bytes) {
            return Err((
                "max_entry_bytes",
                format!("max_entry_bytes must be 1 to {MAX_CACHE_ENTRY_BYTES}"),
            ));
        }
        match &self.semantic {
            Some(part) => part.check(),
            None => Ok(()),
        }
    }
}

/// Parses endpoint names, naming the first unknown one.
pub fn parse_endpoints<S: AsRef<str>>(names: &[S]) -> Result<Vec<CacheEndpoint>, String> {
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        let name = name.as_ref();
        let endpoint = CacheEndpoint::parse(name).ok_or_else(|| {
            let known: Vec<&str> = CacheEndpoint::ALL.iter().map(|e| e.as_str()).collect();
            format!("unknown endpoint {name:?} (one of {})", known.join(", "))
        })?;
        if !out.contains(&endpoint) {
            out.push(endpoint);
        }
    }
    Ok(out)
}

/// The rule that applies to a request from a token of `team` (the first, in id order, that
/// covers it: another team's rule is passed over); `rules` are a snapshot's, in id order.
pub fn applicable<'r>(
    rules: &'r [CacheRule],
    route_pattern: &str,
    model: &str,
    endpoint: CacheEndpoint,
    team: Option<i64>,
) -> Option<&'r CacheRule> {
    rules
        .iter()
        .find(|rule| rule.covers(route_pattern, model, endpoint, team))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn rule(id: i64, pattern: &str, endpoints: &[CacheEndpoint]) -> CacheRule {
        CacheRule {
            id,
            name: format!("r{id}"),
            model_pattern: pattern.to_owned(),
            endpoints: endpoints.to_vec(),
            ttl_seconds: 60,
            max_entry_bytes: 1 << 20,
            scope: CacheScope::Team,
            deterministic_only: false,
            enabled: true,
            semantic: None,
            team: None,
        }
    }

    #[test]
    fn the_first_rule_covering_the_endpoint_and_model_applies() {
        let rules = [
            rule(1, "gpt-4o", &[CacheEndpoint::Embeddings]),
            rule(2, "gpt-*", &[CacheEndpoint::ChatCompletions]),
            rule(3, "gpt-4o", &[CacheEndpoint::ChatCompletions]),
        ];
        let chat = CacheEndpoint::ChatCompletions;
        assert_eq!(
            applicable(&rules, "gpt-4o", "gpt-4o", chat, None)
                .unwrap()
                .id,
            2
        );
        assert_eq!(
            applicable(&rules, "gpt-4o", "gpt-4o", CacheEndpoint::Embeddings, None)
                .unwrap()
                .id,
            1
        );
        assert!(applicable(&rules, "claude", "claude", chat, None).is_none());
        assert!(applicable(&rules, "gpt-4o", "gpt-4o", CacheEndpoint::Messages, None).is_none());
    }

    #[test]
    fn a_rule_naming_a_routes_pattern_covers_every_request_of_that_route() {
        let rules = [rule(1, "team-?-*", &[CacheEndpoint::Messages])];
        let hit = applicable(
            &rules,
            "team-?-*",
            "anything",
            CacheEndpoint::Messages,
            None,
        );
        assert_eq!(hit.unwrap().id, 1);
    }

    #[test]
    fn a_rule_limited_to_a_team_covers_only_its_tokens_requests() {
        let chat = CacheEndpoint::ChatCompletions;
        let mut mine = rule(1, "*", &[chat]);
        mine.team = Some(7);
        let rules = [mine, rule(2, "*", &[chat])];
        // The team's requests: its own rule, first in id order.
        assert_eq!(applicable(&rules, "m", "m", chat, Some(7)).unwrap().id, 1);
        // Another team's, and a token without a team: passed over, the fleet rule applies.
        assert_eq!(applicable(&rules, "m", "m", chat, Some(8)).unwrap().id, 2);
        assert_eq!(applicable(&rules, "m", "m", chat, None).unwrap().id, 2);
        assert!(applicable(&rules[..1], "m", "m", chat, Some(8)).is_none());
    }

    #[test]
    fn a_disabled_rule_never_applies() {
        let mut r = rule(1, "*", &[CacheEndpoint::ChatCompletions]);
        r.enabled = false;
        assert!(applicable(&[r], "m", "m", CacheEndpoint::ChatCompletions, None).is_none());
    }

    #[test]
    fn bad_fields_are_named() {
        let mut r = rule(1, "m", &[CacheEndpoint::ChatCompletions]);
        assert!(r.check().is_ok());
        r.ttl_seconds = 0;
        assert_eq!(r.check().unwrap_err().0, "ttl_seconds");
        r.ttl_seconds = 1;
        r.endpoints.clear();
        assert_eq!(r.check().unwrap_err().0, "endpoints");
        r.endpoints.push(CacheEndpoint::Responses);
        r.model_pattern = String::new();
        assert_eq!(r.check().unwrap_err().0, "model_pattern");
        r.model_pattern = "m".into();
        r.max_entry_bytes = MAX_CACHE_ENTRY_BYTES + 1;
        assert_eq!(r.check().unwrap_err().0, "max_entry_bytes");
        r.max_entry_bytes = 1;
        let part = |threshold: f64, model: &str| SemanticPart {
            channel: 1,
            model: model.to_owned(),
            threshold,
            mode: SemanticMode::Trial,
        };
        for (threshold, model, field) in [
            (0.0, "e", Some("semantic.threshold")),
            (1.0, "e", None),
            (1.0001, "e", Some("semantic.threshold")),
            (f64::NAN, "e", Some("semantic.threshold")),
            (0.9, " ", Some("semantic.model")),
            (0.9, &"m".repeat(257), Some("semantic.model")),
            (0.9, &"m".repeat(256), None),
        ] {
            r.semantic = Some(part(threshold, model));
            assert_eq!(r.check().err().map(|e| e.0), field, "{threshold} {model}");
        }
        assert_eq!(SemanticMode::parse(" serve"), Some(SemanticMode::Serve));
        assert_eq!(SemanticMode::parse("trial"), Some(SemanticMode::Trial));
        assert_eq!(SemanticMode::parse("both"), None);
        assert_eq!(SemanticMode::default().as_str(), "trial");
        assert_eq!(SemanticMode::Serve.as_str(), "serve");
        let columns = |c, m: Option<&str>, t, mode| {
            SemanticPart::from_columns(c, m.map(str::to_owned), t, mode)
        };
        assert_eq!(columns(None, Some("e"), Some(0.5), Some("trial")), Ok(None));
        let part = columns(Some(2), Some("e"), Some(0.5), Some("serve"))
            .unwrap()
            .unwrap();
        assert_eq!((part.channel, part.model.as_str()), (2, "e"));
        assert_eq!((part.threshold, part.mode), (0.5, SemanticMode::Serve));
        assert!(columns(Some(2), None, Some(0.5), Some("trial")).is_err());
        assert!(columns(Some(2), Some("e"), None, Some("trial")).is_err());
        assert!(columns(Some(2), Some("e"), Some(0.5), None).is_err());
        assert!(columns(Some(2), Some("e"), Some(0.5), Some("x")).is_err());
        let unknown = parse_endpoints(&["chat_completions", "images"]).unwrap_err();
        assert!(unknown.contains("\"images\""), "{unknown}");
    }
}
