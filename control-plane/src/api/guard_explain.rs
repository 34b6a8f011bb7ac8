//! Explain's guardrails: which rules a request would run at each stage (the proxy's own
//! question, `CompiledGuards::applicable`, asked of the same snapshot) and, given a sample text,
//! what each would do to it: its findings, the text a redaction would send on, a size verdict.
//! Webhook, moderation, tool and JSON schema checks need a real request or answer and are
//! listed, not run.

use serde_json::{json, Value};
use switchyard_engine::guard::compile::{CompiledGuards, CompiledRule};
use switchyard_engine::guard::finding::TextCheck;
use switchyard_engine::guard::redact::RestoreMap;
use switchyard_engine::guard::rule::{GuardAction, GuardChecks, Stage};
use switchyard_engine::{Snapshot, Token};

/// The rules that apply to a request of `route` from `token`, each with what it would do to
/// `text` at the request stage (when a text is given).
pub(super) fn guardrails_json(
    snapshot: &Snapshot,
    route: Option<i64>,
    token: Option<&Token>,
    text: Option<&str>,
) -> Value {
    let guards = snapshot.guards();
    let team = token.and_then(|t| t.team_id);
    let token = token.map(|t| t.id);
    let at = |stage| -> Vec<i64> {
        guards
            .applicable(route, team, token, stage)
            .map(CompiledRule::id)
            .collect()
    };
    let (request, response) = (at(Stage::Request), at(Stage::Response));
    let rules: Vec<Value> = guards
        .rules()
        .iter()
        .filter(|r| request.contains(&r.id()) || response.contains(&r.id()))
        .map(|rule| {
            let mut stages = Vec::new();
            if request.contains(&rule.id()) {
                stages.push("request");
            }
            if response.contains(&rule.id()) {
                stages.push("response");
            }
            rule_json(
                guards,
                rule,
                &stages,
                text.filter(|_| stages.contains(&"request")),
            )
        })
        .collect();
    Value::Array(rules)
}

fn rule_json(
    guards: &CompiledGuards,
    rule: &CompiledRule,
    stages: &[&str],
    text: Option<&str>,
) -> Value {
    let r = rule.rule();
    let mut out = json!({
        "id": r.id,
        "name": r.name,
        "scope": r.scope.kind(),
        "scope_id": r.scope.id(),
        "stages": stages,
        "action": r.action.as_str(),
        "mode": r.mode.as_str(),
        "effective_action": rule.effective_action().as_str(),
        "restore": r.restore,
        "uninspectable": r.uninspectable.as_str(),
        "checks": check_names(&r.checks),
    });
    if let (Some(text), Value::Object(map)) = (text, &mut out) {
        map.insert("sample".into(), sample_json(guards, rule, text));
    }
    out
}

/// What the rule would do to a request whose text is `text` (one message).
fn sample_json(guards: &CompiledGuards, rule: &CompiledRule, text: &str) -> Value {
    let findings = guards.scan(rule, text);
    // The gateway's estimate: characters / 4, rounded up.
    let estimate = (text.chars().count() as u64).div_ceil(4);
    let violation = rule.size_verdict(estimate, 1);
    let found = !findings.is_empty() || violation.is_some();
    let outcome = match (found, rule.effective_action()) {
        (false, _) => "pass",
        (true, GuardAction::Block) => "block",
        (true, GuardAction::Redact) => "redact",
        (true, GuardAction::Log) => "log",
    };
    let redacted = (outcome == "redact").then(|| RestoreMap::new().redact(text, &findings));
    json!({
        "outcome": outcome,
        "findings": findings.iter().map(|f| json!({
            "kind": f.kind,
            "check": match f.check {
                TextCheck::Detector(d) => d.as_str().to_owned(),
                TextCheck::Pattern(i) => format!("patterns[{i}]"),
            },
            "start": f.range.start,
            "end": f.range.end,
        })).collect::<Vec<_>>(),
        "violation": violation.map(|v| json!({"check": v.check, "message": v.message})),
        "redacted_text": redacted,
    })
}

/// The names of the checks a rule holds.
fn check_names(checks: &GuardChecks) -> Vec<&'static str> {
    let present = [
        ("patterns", !checks.patterns.is_empty()),
        ("detectors", !checks.detectors.is_empty()),
        ("max_input_tokens", checks.max_input_tokens.is_some()),
        ("max_messages", checks.max_messages.is_some()),
        ("tools", checks.tools.is_some()),
        ("json_schema", checks.json_schema.is_some()),
        ("webhook", checks.webhook.is_some()),
        ("moderation", checks.moderation.is_some()),
    ];
    present
        .into_iter()
        .filter(|(_, on)| *on)
        .map(|(name, _)| name)
        .collect()
}
