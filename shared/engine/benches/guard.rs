//! Guardrails' CPU per request: ten pattern rules (one pattern each, attached to one route) over
//! a 4 KB chat request's texts (eight messages of 512 bytes): finding the rules, scanning every
//! text with each (no match, the common case, and one e-mail in every message, redacted); one
//! rule holding every built-in detector over the same texts; and the route with no guardrail,
//! which only asks which rules apply (none). The proxy's part (finding the texts in the body,
//! splicing) comes on top; the guide's "What a client sees" says what the request pays for.
#![allow(clippy::unwrap_used)]

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use switchyard_engine::guard::compile::CompiledGuards;
use switchyard_engine::guard::redact::RestoreMap;
use switchyard_engine::guard::rule::{GuardChecks, GuardrailSpec, Stage};

const GUARDED: i64 = 1;
const OPEN: i64 = 2;

fn rule(id: i64, action: &str, checks: &str) -> switchyard_engine::guard::rule::Guardrail {
    GuardrailSpec {
        name: format!("rule-{id}"),
        scope: "route".into(),
        scope_id: Some(GUARDED),
        stage: "request".into(),
        action: action.into(),
        restore: false,
        mode: "enforce".into(),
        enabled: true,
        checks: GuardChecks::from_json(checks).unwrap(),
        uninspectable: "allow".into(),
    }
    .into_rule(id)
    .unwrap()
}

fn ten_patterns() -> CompiledGuards {
    let patterns = [
        r"EMP-[0-9]{6}",
        r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}",
        r"\b(?:project|codename)\s+[A-Z][a-z]+\b",
        r"\bINV-\d{4}-\d{5}\b",
        r"(?i)\bconfidential\b",
        r"\b\d{3}-\d{2}-\d{4}\b",
        r"\bPO#\d{8}\b",
        r"(?i)internal use only",
        r"\bACCT[0-9]{10}\b",
        r"\bTICKET-[A-Z]{3}-\d{4}\b",
    ];
    let rules: Vec<_> = patterns
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let checks = serde_json::json!({"patterns": [{"regex": p}]}).to_string();
            rule(i as i64 + 1, "redact", &checks)
        })
        .collect();
    CompiledGuards::new(&rules)
}

/// Eight messages of 512 bytes of ordinary prose; with `mail`, each holds one address.
fn request_texts(mail: bool) -> Vec<String> {
    let prose = "The quarterly review covers shipping delays, the new onboarding flow and the \
                 support backlog; please summarise the open questions for the team and list \
                 what each owner promised to deliver before the next planning meeting. ";
    (0..8)
        .map(|i| {
            let mut text = String::new();
            if mail {
                text.push_str(&format!("Write to owner{i}@example.com about it. "));
            }
            while text.len() < 512 {
                text.push_str(prose);
            }
            text.truncate(512);
            text
        })
        .collect()
}

/// What the proxy's guard phase does with the engine for one request: the rules that apply,
/// each scanning every text, a redacting rule's findings replaced.
fn check_request(guards: &CompiledGuards, route: i64, texts: &[String]) -> usize {
    let mut map = RestoreMap::new();
    let mut texts = texts.to_vec();
    let mut found = 0;
    for rule in guards.applicable(Some(route), None, Some(7), Stage::Request) {
        for text in &mut texts {
            let findings = guards.scan(rule, text);
            if !findings.is_empty() {
                found += findings.len();
                *text = map.redact(text, &findings);
            }
        }
    }
    found
}

fn guard(c: &mut Criterion) {
    let mut group = c.benchmark_group("guard");
    let guards = ten_patterns();
    let clean = request_texts(false);
    let mailed = request_texts(true);
    group.bench_function("ten_pattern_rules_4k_request_no_match", |b| {
        b.iter(|| black_box(check_request(&guards, GUARDED, black_box(&clean))))
    });
    group.bench_function("ten_pattern_rules_4k_request_8_redactions", |b| {
        b.iter(|| black_box(check_request(&guards, GUARDED, black_box(&mailed))))
    });
    // What the proxy asks for a route no rule is attached to before it leaves the request be.
    group.bench_function("route_without_guardrail", |b| {
        b.iter(|| {
            black_box(
                guards
                    .applicable(black_box(Some(OPEN)), None, Some(7), Stage::Request)
                    .count(),
            )
        })
    });
    let detectors = CompiledGuards::new(&[rule(
        1,
        "redact",
        r#"{"detectors": ["email", "phone", "card", "iban", "api_keys", "private_key"]}"#,
    )]);
    group.bench_function("all_detectors_4k_request_no_match", |b| {
        b.iter(|| black_box(check_request(&detectors, GUARDED, black_box(&clean))))
    });
    group.finish();
}

criterion_group!(benches, guard);
criterion_main!(benches);
