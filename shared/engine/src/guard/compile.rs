//! A snapshot's guardrails compiled once: each rule's patterns and the built-in detectors it uses
//! as automata, and the question every request asks, which rules apply to it at a stage.

use regex::Regex;
use serde::Serialize;

use super::detect::{compile_pattern, Detector, Matcher};
use super::finding::{Finding, TextCheck};
use super::rule::{GuardAction, GuardMode, GuardScope, Guardrail, Stage};
use super::schema;
use crate::model::{RouteId, TeamId, TokenId};

/// One rule, ready to run.
#[derive(Debug, Clone)]
pub struct CompiledRule {
    rule: Guardrail,
    /// Position in [`CompiledGuards::rules`].
    position: usize,
    /// The rule's patterns, parallel to `checks.patterns` (a pattern that failed to compile,
    /// which validation prevents, is `None` and listed in [`CompiledGuards::problems`]).
    patterns: Vec<Option<Regex>>,
    /// Bytes of answer text a stream holds back for this rule (0: the rule scans no text).
    hold: usize,
}

/// A check's verdict that is not about a span of text (size, tools, JSON).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Violation {
    pub rule_id: i64,
    /// `max_input_tokens`, `max_messages`, `tools` or `json_schema`.
    pub check: &'static str,
    /// What was wrong, for the log line and the refusal (never the client's text).
    pub message: String,
}

/// Characters of context a stream keeps after a candidate so a detector can see it stands
/// alone (one character, up to 4 bytes).
const LOOKAHEAD: usize = 4;

impl CompiledRule {
    pub fn rule(&self) -> &Guardrail {
        &self.rule
    }

    pub fn id(&self) -> i64 {
        self.rule.id
    }

    pub fn position(&self) -> usize {
        self.position
    }

    /// Bytes of answer text a stream holds back so this rule's matches crossing chunk
    /// boundaries are caught: its longest possible match plus one character (0: no text check).
    pub fn hold_bytes(&self) -> usize {
        self.hold
    }

    /// What the rule does now: its action, or `log` in shadow mode (a shadow rule reports what
    /// it would have done and never changes anything).
    pub fn effective_action(&self) -> GuardAction {
        match self.rule.mode {
            GuardMode::Enforce => self.rule.action,
            GuardMode::Shadow => GuardAction::Log,
        }
    }

    /// Whether the rule applies to a request of this route, team and token at `stage`.
    pub fn applies(
        &self,
        route: Option<RouteId>,
        team: Option<TeamId>,
        token: Option<TokenId>,
        stage: Stage,
    ) -> bool {
        let attached = match self.rule.scope {
            GuardScope::All => true,
            GuardScope::Route(id) => route == Some(id),
            GuardScope::Team(id) => team == Some(id),
            GuardScope::Token(id) => token == Some(id),
        };
        self.rule.enabled && attached && self.rule.stage.covers(stage)
    }

    /// The estimated input tokens and the message count against the rule's limits.
    pub fn size_verdict(&self, estimated_input_tokens: u64, messages: usize) -> Option<Violation> {
        let checks = &self.rule.checks;
        if let Some(max) = checks
            .max_input_tokens
            .filter(|max| estimated_input_tokens > *max)
        {
            return Some(self.violation(
                "max_input_tokens",
                format!("about {estimated_input_tokens} input tokens; at most {max} are allowed"),
            ));
        }
        let max = checks.max_messages?;
        (messages as u64 > u64::from(max)).then(|| {
            self.violation(
                "max_messages",
                format!("{messages} messages; at most {max} are allowed"),
            )
        })
    }

    /// Tool names (a request's declared tools, an answer's tool calls) against the rule's
    /// allowed and denied lists: the first name refused.
    pub fn tools_verdict<'a, I>(&self, names: I) -> Option<Violation>
    where
        I: IntoIterator<Item = &'a str>,
    {
        let tools = self.rule.checks.tools.as_ref()?;
        for name in names {
            let denied = tools.denied.iter().any(|d| d == name);
            let unlisted = tools
                .allowed
                .as_ref()
                .is_some_and(|allowed| !allowed.iter().any(|a| a == name));
            if denied || unlisted {
                let why = if denied { "denied" } else { "not allowed" };
                let shown: String = name.chars().take(64).collect();
                return Some(self.violation("tools", format!("tool {shown:?} is {why}")));
            }
        }
        None
    }

    /// A JSON-mode answer's text against the rule's `json_schema` check: it must be JSON and,
    /// when the rule gives a schema, valid against it.
    pub fn json_verdict(&self, answer: &str) -> Option<Violation> {
        let check = self.rule.checks.json_schema.as_ref()?;
        let value: serde_json::Value = match serde_json::from_str(answer) {
            Ok(value) => value,
            Err(e) => {
                return Some(self.violation(
                    "json_schema",
                    format!("the answer is not JSON ({})", e.classify_text()),
                ))
            }
        };
        let schema = check.schema.as_ref()?;
        schema::validate(&value, schema).err().map(|(at, message)| {
            let at = if at.is_empty() { "/".to_owned() } else { at };
            self.violation("json_schema", format!("at {at}: {message}"))
        })
    }

    fn violation(&self, check: &'static str, message: String) -> Violation {
        Violation {
            rule_id: self.rule.id,
            check,
            message,
        }
    }
}

/// serde_json's error category in words (its message may quote the client's text).
trait Classify {
    fn classify_text(&self) -> &'static str;
}

impl Classify for serde_json::Error {
    fn classify_text(&self) -> &'static str {
        match self.classify() {
            serde_json::error::Category::Eof => "it ends early",
            serde_json::error::Category::Syntax => "a syntax error",
            serde_json::error::Category::Data | serde_json::error::Category::Io => "unreadable",
        }
    }
}

/// A snapshot's guardrails, compiled.
#[derive(Debug, Clone, Default)]
pub struct CompiledGuards {
    rules: Vec<CompiledRule>,
    /// The built-in detectors any rule uses, compiled once.
    matchers: Vec<Matcher>,
    problems: Vec<String>,
}

impl CompiledGuards {
    /// Compiles rules (in id order). Validation has compiled every pattern already; one that
    /// fails here anyway is left out of its rule and named in [`CompiledGuards::problems`].
    pub fn new(rules: &[Guardrail]) -> CompiledGuards {
        let mut problems = Vec::new();
        let mut used: Vec<Detector> = rules
            .iter()
            .flat_map(|r| r.checks.detectors.iter().copied())
            .collect();
        used.sort();
        used.dedup();
        let matchers = used
            .into_iter()
            .filter_map(|d| match Matcher::new(d) {
                Ok(m) => Some(m),
                Err(e) => {
                    problems.push(format!("detector {}: {e}", d.as_str()));
                    None
                }
            })
            .collect();
        let rules = rules
            .iter()
            .enumerate()
            .map(|(position, rule)| compile_rule(rule, position, &mut problems))
            .collect();
        CompiledGuards {
            rules,
            matchers,
            problems,
        }
    }

    /// Every rule, in id order.
    pub fn rules(&self) -> &[CompiledRule] {
        &self.rules
    }

    pub fn rule_at(&self, position: usize) -> Option<&CompiledRule> {
        self.rules.get(position)
    }

    /// What failed to compile (empty for a validated snapshot).
    pub fn problems(&self) -> &[String] {
        &self.problems
    }

    /// The enabled rules attached to this route, team or token (or to all traffic) that run at
    /// `stage`, in id order.
    pub fn applicable(
        &self,
        route: Option<RouteId>,
        team: Option<TeamId>,
        token: Option<TokenId>,
        stage: Stage,
    ) -> impl Iterator<Item = &CompiledRule> {
        self.rules
            .iter()
            .filter(move |r| r.applies(route, team, token, stage))
    }

    /// Every finding of one rule's patterns and detectors in `text`, sorted by start.
    pub fn scan(&self, rule: &CompiledRule, text: &str) -> Vec<Finding> {
        let mut out = Vec::new();
        for (i, re) in rule.patterns.iter().enumerate() {
            let Some(re) = re else { continue };
            let kind = rule.rule.checks.patterns[i]
                .label
                .as_deref()
                .unwrap_or("PATTERN");
            for m in re.find_iter(text).filter(|m| !m.is_empty()) {
                out.push(Finding {
                    rule_id: rule.rule.id,
                    check: TextCheck::Pattern(i),
                    range: m.range(),
                    kind: kind.to_owned(),
                });
            }
        }
        for d in &rule.rule.checks.detectors {
            let Some(matcher) = self.matchers.iter().find(|m| m.detector() == *d) else {
                continue;
            };
            for range in matcher.find_all(text) {
                out.push(Finding {
                    rule_id: rule.rule.id,
                    check: TextCheck::Detector(*d),
                    range,
                    kind: d.label().to_owned(),
                });
            }
        }
        out.sort_by_key(|f| (f.range.start, f.range.end));
        out
    }

    /// [`CompiledGuards::scan`] over several rules (by position), findings sorted by start.
    pub fn scan_all(&self, positions: &[usize], text: &str) -> Vec<Finding> {
        let mut out: Vec<Finding> = positions
            .iter()
            .filter_map(|p| self.rules.get(*p))
            .flat_map(|rule| self.scan(rule, text))
            .collect();
        out.sort_by_key(|f| (f.range.start, f.range.end));
        out
    }
}

fn compile_rule(rule: &Guardrail, position: usize, problems: &mut Vec<String>) -> CompiledRule {
    let patterns = rule
        .checks
        .patterns
        .iter()
        .enumerate()
        .map(|(i, p)| match compile_pattern(&p.regex) {
            Ok(re) => Some(re),
            Err(e) => {
                problems.push(format!("guardrail {}: patterns[{i}]: {e}", rule.id));
                None
            }
        })
        .collect();
    let longest = rule
        .checks
        .patterns
        .iter()
        .map(|p| p.max_match_bytes as usize)
        .chain(rule.checks.detectors.iter().map(|d| d.max_match_bytes()))
        .max();
    CompiledRule {
        rule: rule.clone(),
        position,
        patterns,
        hold: longest.map_or(0, |n| n + LOOKAHEAD),
    }
}
