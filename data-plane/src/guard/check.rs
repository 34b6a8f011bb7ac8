//! One guardrail rule run over one set of texts (a request's or an answer's): what it found,
//! what that means for the request, and its report (the usage batches' guardrail counts, the
//! metric, the log line). Never a text in a report or a log: kinds, counts and masked examples.

use std::collections::BTreeMap;
use std::time::Duration;

use switchyard_engine::guard::compile::CompiledRule;
use switchyard_engine::guard::finding::Finding;
use switchyard_engine::guard::rule::{GuardAction, GuardMode, OnFailure, Stage};
use switchyard_proto::v1;

use crate::guard::mask::mask;
use crate::guard::moderation::moderate;
use crate::guard::webhook::{Call, Verdict};
use crate::snapshot::View;
use crate::state::AppState;

/// A rule blocked the answer: its name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blocked(pub String);

/// What the checks of one rule see besides the texts.
#[derive(Default)]
pub struct Facts<'a> {
    /// The request's estimated input tokens and its messages (request stage).
    pub size: Option<(u64, usize)>,
    /// Tool names: a request's declared tools, an answer's calls.
    pub tools: &'a [String],
    /// The answer's text when the request asked for JSON mode (answer stage).
    pub json_answer: Option<&'a str>,
    /// The texts' patterns and detectors already ran (a stream's window): only the rule's other
    /// checks run.
    pub scanned: bool,
}

/// What one rule found.
#[derive(Default)]
pub struct Found {
    /// Per text, the findings of the rule's patterns and detectors.
    pub findings: Vec<Vec<Finding>>,
    /// A check that is not about a span of text refused (its name).
    pub violation: Option<&'static str>,
    /// The external check said block (or failed, closed).
    pub external_block: bool,
    /// The external check gave no verdict.
    pub external_failed: bool,
    /// The content could not be inspected and the rule refuses what it cannot inspect: it
    /// blocks (or, in shadow mode, would block) whatever its action.
    pub uninspectable: bool,
}

impl Found {
    /// Whether the rule's action applies.
    pub fn hit(&self) -> bool {
        self.violation.is_some()
            || self.external_block
            || self.uninspectable
            || self.findings.iter().any(|f| !f.is_empty())
    }

    /// The action a hit takes: the rule's, or a block for content it could not inspect.
    fn action(&self, rule: &CompiledRule) -> GuardAction {
        if self.uninspectable {
            GuardAction::Block
        } else {
            rule.rule().action
        }
    }
}

/// Runs `rule` (of `view`'s snapshot) over `texts` at `stage`.
pub async fn run(
    state: &AppState,
    view: &View,
    rule: &CompiledRule,
    stage: Stage,
    texts: &[String],
    facts: &Facts<'_>,
) -> Found {
    let checks = &rule.rule().checks;
    let mut found = Found::default();
    if checks.scans_text() && !facts.scanned {
        let guards = view.snapshot.guards();
        found.findings = texts.iter().map(|t| guards.scan(rule, t)).collect();
    }
    let violation = facts
        .size
        .and_then(|(tokens, messages)| rule.size_verdict(tokens, messages))
        .or_else(|| rule.tools_verdict(facts.tools.iter().map(String::as_str)))
        .or_else(|| facts.json_answer.and_then(|a| rule.json_verdict(a)));
    found.violation = violation.map(|v| v.check);
    let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
    let verdict = if let Some(webhook) = &checks.webhook {
        let call = Call {
            url: &webhook.url,
            guardrail: &rule.rule().name,
            stage: stage_name(stage),
            texts: &texts,
            timeout: Duration::from_millis(u64::from(webhook.timeout_ms)),
        };
        let closed = webhook.on_failure == OnFailure::Closed;
        Some((call.ask(state.client()).await, closed))
    } else if let Some(moderation) = &checks.moderation {
        Some((moderate(state, view, moderation, &texts).await, false))
    } else {
        None
    };
    match verdict {
        None | Some((Verdict::Allow, _)) => {}
        Some((Verdict::Block, _)) => found.external_block = true,
        Some((Verdict::Failed(why), closed)) => {
            tracing::warn!(guardrail = %rule.rule().name, why, "guardrail external check gave no verdict");
            found.external_failed = true;
            found.external_block = closed;
        }
    }
    found
}

pub fn stage_name(stage: Stage) -> &'static str {
    match stage {
        Stage::Request => "request",
        Stage::Response => "response",
    }
}

/// Reports what `rule` found over `texts` (the original texts, for the masked examples): the
/// usage batches' counts, the metric and, when it found something, a log line naming the rule
/// and the finding kinds (never a text).
pub fn report(
    state: &AppState,
    rule: &CompiledRule,
    stage: Stage,
    texts: &[String],
    found: &Found,
    request_id: &str,
) {
    let mut record = record_of(rule, texts, found);
    let outcome = outcome(found.action(rule), rule.rule().mode, found.hit());
    let name = rule.rule().name.as_str();
    let metrics = &state.metrics.guardrail_checks;
    metrics.add([name, stage_name(stage), outcome], 1);
    if found.external_failed {
        metrics.add([name, stage_name(stage), "external_failure"], 1);
    }
    if found.hit() {
        let kinds: Vec<String> = record
            .findings
            .iter()
            .map(|(k, n)| format!("{k}:{n}"))
            .collect();
        tracing::info!(
            request_id,
            guardrail = name,
            stage = stage_name(stage),
            outcome,
            check = found.violation.unwrap_or(""),
            findings = %kinds.join(","),
            "guardrail matched"
        );
    }
    if let Some(usage) = &state.usage {
        record.guardrail_id = rule.id();
        usage.record_guardrail(rule.id(), &record);
    }
}

/// The counts of one check: checked once, what it did or would have done, its findings by kind
/// and a few masked examples.
fn record_of(rule: &CompiledRule, texts: &[String], found: &Found) -> v1::GuardrailRecord {
    let mut record = v1::GuardrailRecord {
        checked: 1,
        external_failures: u64::from(found.external_failed),
        ..v1::GuardrailRecord::default()
    };
    if found.hit() {
        let shadow = rule.rule().mode == GuardMode::Shadow;
        let count = match (found.action(rule), shadow) {
            (GuardAction::Block, false) => Some(&mut record.blocked),
            (GuardAction::Block, true) => Some(&mut record.would_block),
            (GuardAction::Redact, false) => Some(&mut record.redacted),
            (GuardAction::Redact, true) => Some(&mut record.would_redact),
            (GuardAction::Log, _) => None,
        };
        if let Some(count) = count {
            *count = 1;
        }
    }
    let mut kinds: BTreeMap<&str, u64> = BTreeMap::new();
    for (text, findings) in texts.iter().zip(&found.findings) {
        for f in findings {
            *kinds.entry(f.kind.as_str()).or_default() += 1;
            if let Some(matched) = text.get(f.range.clone()) {
                switchyard_proto::add_example(&mut record, &mask(&f.kind, matched));
            }
        }
    }
    for (kind, n) in kinds {
        switchyard_proto::add_finding(&mut record, kind, n);
    }
    if let Some(check) = found.violation {
        switchyard_proto::add_finding(&mut record, check, 1);
    }
    if found.uninspectable {
        switchyard_proto::add_finding(&mut record, "uninspectable", 1);
    }
    if found.external_block {
        let kind = if rule.rule().checks.webhook.is_some() {
            "webhook"
        } else {
            "moderation"
        };
        switchyard_proto::add_finding(&mut record, kind, 1);
    }
    record
}

/// The metric's outcome of one check whose hit takes `action`.
fn outcome(action: GuardAction, mode: GuardMode, hit: bool) -> &'static str {
    if !hit {
        return "pass";
    }
    match (action, mode) {
        (GuardAction::Block, GuardMode::Enforce) => "block",
        (GuardAction::Block, GuardMode::Shadow) => "would_block",
        (GuardAction::Redact, GuardMode::Enforce) => "redact",
        (GuardAction::Redact, GuardMode::Shadow) => "would_redact",
        (GuardAction::Log, _) => "log",
    }
}
