//! Guardrail rules: validation naming the field, which rules apply, scans, redaction with an
//! exact restore, the stream windows and the size, tool and JSON verdicts.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use serde_json::json;
use switchyard_engine::guard::compile::CompiledGuards;
use switchyard_engine::guard::finding::TextCheck;
use switchyard_engine::guard::redact::{redact, restore, RestoreMap};
use switchyard_engine::guard::rule::{
    GuardAction, GuardChecks, GuardScope, GuardStage, Guardrail, GuardrailSpec, Stage,
};
use switchyard_engine::guard::window::StreamWindow;
use switchyard_engine::{Snapshot, SnapshotParts};

fn spec(checks: serde_json::Value) -> GuardrailSpec {
    GuardrailSpec {
        name: "g".into(),
        scope: "all".into(),
        scope_id: None,
        stage: "both".into(),
        action: "redact".into(),
        restore: false,
        mode: "enforce".into(),
        enabled: true,
        checks: GuardChecks::from_json(&checks.to_string()).unwrap(),
        uninspectable: "allow".into(),
    }
}

/// A rule holding `checks`: redacting what patterns or detectors find, blocking otherwise, at
/// the stage its checks fit.
fn rule(id: i64, checks: serde_json::Value) -> Guardrail {
    let mut s = spec(checks);
    if !s.checks.scans_text() {
        s.action = "block".into();
    }
    if s.checks.max_messages.is_some() || s.checks.max_input_tokens.is_some() {
        s.stage = "request".into();
    }
    if s.checks.json_schema.is_some() {
        s.stage = "response".into();
    }
    s.into_rule(id).unwrap()
}

fn refused(s: GuardrailSpec) -> (String, String) {
    s.into_rule(1).unwrap_err()
}

#[test]
fn a_rule_round_trips_through_its_spec() {
    let mut s = spec(json!({"detectors": ["email"], "patterns": [{"regex": "x+y"}]}));
    s.scope = "token".into();
    s.scope_id = Some(4);
    s.restore = true;
    s.mode = "shadow".into();
    let r = s.clone().into_rule(3).unwrap();
    assert_eq!(r.scope, GuardScope::Token(4));
    assert_eq!(r.checks.patterns[0].max_match_bytes, 256);
    assert_eq!(r.spec(), s);
    let checks = GuardChecks::from_json(&r.checks.to_json()).unwrap();
    assert_eq!(checks, r.checks);
}

#[test]
fn bad_fields_are_named() {
    let base = || spec(json!({"detectors": ["email"]}));
    let field = |mutate: &dyn Fn(&mut GuardrailSpec)| {
        let mut s = base();
        mutate(&mut s);
        refused(s)
    };
    assert_eq!(field(&|s| s.name = " ".into()).0, "name");
    assert_eq!(field(&|s| s.name = "a\nb".into()).0, "name");
    assert_eq!(field(&|s| s.scope = "fleet".into()).0, "scope");
    assert_eq!(field(&|s| s.scope = "route".into()).0, "scope");
    assert_eq!(field(&|s| s.scope_id = Some(1)).0, "scope");
    assert_eq!(field(&|s| s.stage = "later".into()).0, "stage");
    assert_eq!(field(&|s| s.action = "drop".into()).0, "action");
    assert_eq!(field(&|s| s.mode = "dry".into()).0, "mode");
    assert_eq!(field(&|s| s.checks = GuardChecks::default()).0, "checks");
    let with = |checks: serde_json::Value, action: &str, stage: &str| {
        let mut s = spec(checks);
        s.action = action.into();
        s.stage = stage.into();
        refused(s)
    };
    let regex = with(json!({"patterns": [{"regex": "(a"}]}), "log", "both");
    assert_eq!(regex.0, "checks.patterns[0].regex");
    assert!(regex.1.contains("unclosed group"), "{}", regex.1);
    let empty = with(json!({"patterns": [{"regex": "a*"}]}), "log", "both");
    assert!(empty.1.contains("matches empty text"), "{}", empty.1);
    let size = json!({"patterns": [{"regex": "a", "max_match_bytes": 0}]});
    assert_eq!(
        with(size, "log", "both").0,
        "checks.patterns[0].max_match_bytes"
    );
    let label = json!({"patterns": [{"regex": "a", "label": "lower"}]});
    assert_eq!(with(label, "log", "both").0, "checks.patterns[0].label");
    assert_eq!(
        with(json!({"max_input_tokens": 0}), "block", "request").0,
        "checks.max_input_tokens"
    );
    assert_eq!(
        with(json!({"max_messages": 0}), "block", "request").0,
        "checks.max_messages"
    );
    assert_eq!(
        with(json!({"max_messages": 3}), "block", "response").0,
        "stage"
    );
    assert_eq!(
        with(json!({"json_schema": {}}), "block", "request").0,
        "stage"
    );
    assert_eq!(
        with(json!({"max_messages": 3}), "redact", "request").0,
        "action"
    );
    let mixed = json!({"detectors": ["email"], "max_messages": 3});
    assert_eq!(with(mixed, "redact", "request").0, "action");
    assert_eq!(
        with(json!({"tools": {}}), "block", "both").0,
        "checks.tools"
    );
    let tool = json!({"tools": {"denied": [""]}});
    assert_eq!(with(tool, "block", "both").0, "checks.tools.denied[0]");
    let schema = json!({"json_schema": {"schema": {"type": "object", "oneOf": []}}});
    let bad = with(schema, "block", "response");
    assert_eq!(bad.0, "checks.json_schema.schema");
    assert!(bad.1.contains("\"/oneOf\""), "{}", bad.1);
    let hook = |url: &str, ms: u32| json!({"webhook": {"url": url, "timeout_ms": ms, "on_failure": "open"}});
    assert_eq!(
        with(hook("ftp://x", 10), "block", "both").0,
        "checks.webhook.url"
    );
    assert_eq!(
        with(hook("https://u:p@x", 10), "block", "both").0,
        "checks.webhook.url"
    );
    assert_eq!(
        with(hook("https://", 10), "block", "both").0,
        "checks.webhook.url"
    );
    assert_eq!(
        with(hook("https://x", 0), "block", "both").0,
        "checks.webhook.timeout_ms"
    );
    let moderation = json!({"moderation": {"channel": "mod", "categories": ["Hate"]}});
    assert_eq!(
        with(moderation, "block", "both").0,
        "checks.moderation.categories[0]"
    );
    let mut restore = base();
    restore.action = "log".into();
    restore.restore = true;
    assert_eq!(refused(restore).0, "restore");
    let mut answer_only = base();
    answer_only.stage = "response".into();
    answer_only.restore = true;
    assert_eq!(refused(answer_only).0, "restore");
}

#[test]
fn checks_read_from_json_name_the_bad_check() {
    let field = |v: serde_json::Value| GuardChecks::from_value(&v).unwrap_err();
    let unknown = field(json!({"max_messages": 3, "detectors": ["email", "ssn"]}));
    assert_eq!(unknown.0, "checks.detectors");
    assert!(
        unknown.1.starts_with("unknown detector \"ssn\""),
        "{}",
        unknown.1
    );
    assert_eq!(field(json!({"max_messages": -1})).0, "checks.max_messages");
    assert_eq!(field(json!({"colour": 1})).0, "checks");
    assert_eq!(field(json!(["email"])).0, "checks");
    let good = GuardChecks::from_value(&json!({"detectors": ["api_keys"]})).unwrap();
    assert_eq!(good.detectors.len(), 6);
    assert!(GuardChecks::from_json("{").unwrap_err().contains("line 1"));
}

#[test]
fn good_rules_of_every_kind_pass() {
    let ok = |checks: serde_json::Value, action: &str, stage: &str| {
        let mut s = spec(checks);
        s.action = action.into();
        s.stage = stage.into();
        s.into_rule(1).unwrap()
    };
    ok(
        json!({"max_input_tokens": 1, "max_messages": 1}),
        "block",
        "request",
    );
    ok(
        json!({"json_schema": {"schema": {"type": "object"}}}),
        "block",
        "response",
    );
    ok(json!({"tools": {"allowed": []}}), "log", "both");
    let hook = json!({"webhook": {"url": "http://x:8080/check", "timeout_ms": 30000, "on_failure": "closed"}});
    ok(hook, "block", "both");
    ok(
        json!({"moderation": {"channel": "mod", "categories": ["harassment/threatening"]}}),
        "block",
        "both",
    );
    let mut s = spec(json!({"detectors": ["email"]}));
    s.restore = true;
    s.stage = "request".into();
    s.into_rule(1).unwrap();
}

#[test]
fn applicable_rules_follow_scope_stage_and_enabled() {
    let mut rules = Vec::new();
    for (id, scope, stage) in [
        (1, GuardScope::All, GuardStage::Both),
        (2, GuardScope::Route(10), GuardStage::Request),
        (3, GuardScope::Team(20), GuardStage::Response),
        (4, GuardScope::Token(30), GuardStage::Both),
        (5, GuardScope::All, GuardStage::Request),
    ] {
        let mut r = rule(id, json!({"detectors": ["email"]}));
        r.scope = scope;
        r.stage = stage;
        r.enabled = id != 5;
        rules.push(r);
    }
    let guards = CompiledGuards::new(&rules);
    let ids = |route, team, token, stage| {
        guards
            .applicable(route, team, token, stage)
            .map(|r| r.id())
            .collect::<Vec<_>>()
    };
    assert_eq!(ids(Some(10), Some(20), Some(30), Stage::Request), [1, 2, 4]);
    assert_eq!(
        ids(Some(10), Some(20), Some(30), Stage::Response),
        [1, 3, 4]
    );
    assert_eq!(ids(None, None, None, Stage::Request), [1]);
    assert_eq!(ids(Some(11), Some(21), Some(31), Stage::Response), [1]);
}

#[test]
fn shadow_mode_only_logs() {
    let mut r = rule(1, json!({"detectors": ["email"]}));
    let guards = CompiledGuards::new(std::slice::from_ref(&r));
    assert_eq!(guards.rules()[0].effective_action(), GuardAction::Redact);
    r.mode = switchyard_engine::guard::rule::GuardMode::Shadow;
    let guards = CompiledGuards::new(&[r]);
    assert_eq!(guards.rules()[0].effective_action(), GuardAction::Log);
}

#[test]
fn a_scan_reports_check_kind_and_range() {
    let r = rule(
        7,
        json!({"detectors": ["email", "card"], "patterns": [{"regex": "EMP-[0-9]{6}", "label": "EMPLOYEE_ID"}]}),
    );
    let guards = CompiledGuards::new(&[r]);
    let text = "EMP-123456 wrote from a@b.io with 4111111111111111";
    let found = guards.scan(&guards.rules()[0], text);
    let kinds: Vec<(&str, &str)> = found
        .iter()
        .map(|f| (f.kind.as_str(), &text[f.range.clone()]))
        .collect();
    assert_eq!(
        kinds,
        [
            ("EMPLOYEE_ID", "EMP-123456"),
            ("EMAIL", "a@b.io"),
            ("CARD", "4111111111111111")
        ]
    );
    assert_eq!(found[0].check, TextCheck::Pattern(0));
    assert!(found.iter().all(|f| f.rule_id == 7));
    assert_eq!(guards.scan_all(&[0, 5], text), found);
    assert!(guards.problems().is_empty());
    let longest = switchyard_engine::guard::detect::Detector::Email.max_match_bytes();
    assert_eq!(guards.rules()[0].hold_bytes(), longest + 4);
}

#[test]
fn redaction_numbers_values_stably_and_restores_exactly() {
    let r = rule(1, json!({"detectors": ["email"]}));
    let guards = CompiledGuards::new(&[r]);
    let rule = &guards.rules()[0];
    let text = "a@b.io, c@d.io and a@b.io again";
    let (redacted, map) = redact(text, &guards.scan(rule, text));
    assert_eq!(redacted, "[EMAIL_1], [EMAIL_2] and [EMAIL_1] again");
    assert_eq!(map.len(), 2);
    assert!(!map.is_empty());
    assert_eq!(restore(&redacted, &map), text);
    let mut map = map;
    let second = "and c@d.io, e@f.io";
    let again = map.redact(second, &guards.scan(rule, second));
    assert_eq!(again, "and [EMAIL_2], [EMAIL_3]");
    assert_eq!(
        map.restore("[EMAIL_3] [EMAIL_9] [EMAIL_1] [x"),
        "e@f.io [EMAIL_9] a@b.io [x"
    );
    assert_eq!(map.longest_placeholder(), "[EMAIL_1]".len());
    assert_eq!(RestoreMap::new().restore("[EMAIL_1]"), "[EMAIL_1]");
    let literal = "[EMAIL_1] is not a@b.io, nor [EMAIL_2]";
    let (redacted, map) = redact(literal, &guards.scan(rule, literal));
    assert_eq!(redacted, "[EMAIL_1] is not [EMAIL_3], nor [EMAIL_2]");
    assert_eq!(restore(&redacted, &map), literal);
    assert!(RestoreMap::new().is_empty());
}

#[test]
fn findings_outside_the_text_or_off_its_characters_are_skipped() {
    let finding = |range: std::ops::Range<usize>| switchyard_engine::guard::finding::Finding {
        rule_id: 1,
        check: TextCheck::Pattern(0),
        range,
        kind: "X".into(),
    };
    let mut map = RestoreMap::new();
    assert_eq!(map.redact("abc", &[finding(2..10)]), "abc");
    assert_eq!(map.redact("éa", &[finding(1..3)]), "éa");
    assert_eq!(map.redact("abc", &[finding(1..1)]), "abc");
    assert_eq!(map.redact("abc", &[finding(1..2)]), "a[X_1]c");
}

#[test]
fn overlapping_findings_redact_the_earliest_longest() {
    let r = rule(
        1,
        json!({"patterns": [{"regex": "bc", "label": "B"}, {"regex": "abcd", "label": "A"}, {"regex": "cde", "label": "C"}]}),
    );
    let guards = CompiledGuards::new(&[r]);
    let text = "xabcdefg";
    let (redacted, map) = redact(text, &guards.scan(&guards.rules()[0], text));
    assert_eq!(redacted, "x[A_1]efg");
    assert_eq!(restore(&redacted, &map), text);
}

#[test]
fn a_restore_window_restores_a_placeholder_split_at_every_position() {
    let (redacted, map) = {
        let r = rule(1, json!({"detectors": ["email"]}));
        let guards = CompiledGuards::new(&[r]);
        let text = "to a@b.io [not one] and [c@d.io]";
        redact(text, &guards.scan(&guards.rules()[0], text))
    };
    let whole = map.restore(&redacted);
    for cut in 0..=redacted.len() {
        for cut2 in cut..=redacted.len() {
            let mut w = map.stream();
            let mut out = w.push(&redacted[..cut]);
            out += &w.push(&redacted[cut..cut2]);
            out += &w.push(&redacted[cut2..]);
            out += &w.finish();
            assert_eq!(out, whole, "cut at {cut} and {cut2}");
        }
    }
}

#[test]
fn a_restore_releases_all_but_a_placeholder_not_yet_whole() {
    let text = "mail a@b.io";
    let r = rule(1, json!({"detectors": ["email"]}));
    let guards = CompiledGuards::new(&[r]);
    let (redacted, map) = redact(text, &guards.scan(&guards.rules()[0], text));
    assert_eq!(redacted, "mail [EMAIL_1]");
    // Released at once, restored: no placeholder can still be open.
    let mut pending = "to [EMAIL_1] now".to_owned();
    assert_eq!(map.release(&mut pending), "to a@b.io now");
    assert!(pending.is_empty());
    // A `[` that may open a placeholder stays, with what follows it.
    let mut pending = "to [EMAIL_1] and [EMA".to_owned();
    assert_eq!(map.release(&mut pending), "to a@b.io and ");
    assert_eq!(pending, "[EMA");
    let mut w = map.stream();
    assert_eq!(w.push("hi [EMAIL_1], "), "hi a@b.io, ");
    assert_eq!(w.push("[EM"), "");
    assert_eq!(w.push("AIL_1]"), "a@b.io");
}

fn window_guards(checks: serde_json::Value) -> Arc<CompiledGuards> {
    Arc::new(CompiledGuards::new(&[rule(1, checks)]))
}

/// Streams `text` in the given pieces; returns the released text and its findings' texts.
fn stream(guards: &Arc<CompiledGuards>, pieces: &[&str]) -> (String, Vec<String>) {
    let rules: Vec<_> = guards.rules().iter().collect();
    let mut w = StreamWindow::new(Arc::clone(guards), &rules);
    let mut text = String::new();
    let mut found = Vec::new();
    let mut take = |release: switchyard_engine::guard::window::Release, text: &mut String| {
        assert_eq!(release.offset, text.len());
        for f in &release.findings {
            found.push(release.text[f.range.clone()].to_owned());
        }
        text.push_str(&release.text);
    };
    for piece in pieces {
        let r = w.push(piece);
        take(r, &mut text);
    }
    take(w.finish(), &mut text);
    (text, found)
}

#[test]
fn a_window_catches_a_match_split_at_every_position() {
    let guards = window_guards(json!({"detectors": ["email", "openai_key"]}));
    let filler = "x ".repeat(300);
    let text = format!("{filler}mail a@b.io and sk-abcdefghij0123456789klmn. {filler}");
    let (whole, expected) = stream(&guards, &[&text]);
    assert_eq!(whole, text);
    assert_eq!(expected, ["a@b.io", "sk-abcdefghij0123456789klmn"]);
    for cut in 0..=text.len() {
        let (out, found) = stream(&guards, &[&text[..cut], &text[cut..]]);
        assert_eq!(out, text, "cut at {cut}");
        assert_eq!(found, expected, "cut at {cut}");
    }
    let chars: Vec<String> = text.chars().map(String::from).collect();
    let pieces: Vec<&str> = chars.iter().map(String::as_str).collect();
    let (out, found) = stream(&guards, &pieces);
    assert_eq!((out, found), (text.clone(), expected));
}

#[test]
fn a_window_holds_back_only_its_rules_longest_match() {
    let guards =
        window_guards(json!({"patterns": [{"regex": "secret-[0-9]+", "max_match_bytes": 16}]}));
    let rules: Vec<_> = guards.rules().iter().collect();
    let mut w = StreamWindow::new(Arc::clone(&guards), &rules);
    assert_eq!(w.hold_bytes(), 20);
    assert!(w.push(&"a".repeat(20)).text.is_empty());
    let release = w.push(&"b".repeat(100));
    assert_eq!(release.text.len(), 100);
    assert_eq!(w.finish().text.len(), 20);
    let none = Arc::new(CompiledGuards::new(&[]));
    let mut w = StreamWindow::new(none, &[]);
    assert_eq!(w.push("every byte at once").text, "every byte at once");
}

#[test]
fn size_tool_and_json_verdicts() {
    let mut r = rule(1, json!({"max_input_tokens": 100, "max_messages": 3}));
    r.action = GuardAction::Block;
    r.stage = GuardStage::Request;
    let guards = CompiledGuards::new(&[r]);
    let size = &guards.rules()[0];
    assert!(size.size_verdict(100, 3).is_none());
    assert_eq!(size.size_verdict(101, 1).unwrap().check, "max_input_tokens");
    assert_eq!(size.size_verdict(1, 4).unwrap().check, "max_messages");
    assert!(size.tools_verdict(["any"]).is_none());
    assert!(size.json_verdict("not json").is_none());
    let mut t = rule(
        2,
        json!({"tools": {"allowed": ["search", "shell"], "denied": ["shell"]}}),
    );
    t.action = GuardAction::Block;
    let guards = CompiledGuards::new(&[t]);
    let tools = &guards.rules()[0];
    assert!(tools.tools_verdict(["search"]).is_none());
    assert!(tools.tools_verdict([]).is_none());
    assert_eq!(
        tools.tools_verdict(["search", "shell"]).unwrap().message,
        "tool \"shell\" is denied"
    );
    assert_eq!(
        tools.tools_verdict(["fetch"]).unwrap().message,
        "tool \"fetch\" is not allowed"
    );
    assert!(tools.size_verdict(u64::MAX, usize::MAX).is_none());
    let mut j = rule(
        3,
        json!({"json_schema": {"schema": {"type": "object", "required": ["a"]}}}),
    );
    j.action = GuardAction::Block;
    j.stage = GuardStage::Response;
    let mut any = rule(4, json!({"json_schema": {}}));
    any.action = GuardAction::Block;
    let guards = CompiledGuards::new(&[j, any]);
    let (schema, json_only) = (&guards.rules()[0], &guards.rules()[1]);
    assert!(schema.json_verdict(r#"{"a": 1}"#).is_none());
    assert_eq!(
        schema.json_verdict(r#"{"b": 1}"#).unwrap().message,
        "at /: required property \"a\" is missing"
    );
    assert_eq!(
        schema.json_verdict("{\"a\":").unwrap().message,
        "the answer is not JSON (it ends early)"
    );
    assert_eq!(
        schema.json_verdict("{a}").unwrap().message,
        "the answer is not JSON (a syntax error)"
    );
    assert!(json_only.json_verdict("[1, 2]").is_none());
    assert!(json_only.json_verdict("nope").is_some());
}

#[test]
fn a_pattern_that_fails_to_compile_is_named_and_left_out_of_its_rule() {
    // Validation refuses such a rule at every edge; a rule built without it still compiles,
    // without the pattern, and the problem is named.
    let mut r = rule(4, json!({"detectors": ["email"]}));
    r.checks
        .patterns
        .push(switchyard_engine::guard::rule::PatternCheck {
            regex: "(".into(),
            max_match_bytes: 8,
            label: None,
        });
    let guards = CompiledGuards::new(&[r]);
    assert_eq!(guards.problems().len(), 1);
    assert!(
        guards.problems()[0].starts_with("guardrail 4: patterns[0]:"),
        "{:?}",
        guards.problems()
    );
    let found = guards.scan(&guards.rules()[0], "( a@b.io");
    assert_eq!(found.len(), 1, "the detector still runs");
}

#[test]
fn a_snapshot_compiles_its_guardrails_once_in_id_order() {
    let snapshot = Snapshot::new(SnapshotParts {
        guardrails: vec![
            rule(9, json!({"detectors": ["iban"]})),
            rule(2, json!({"detectors": ["email"]})),
        ],
        ..SnapshotParts::default()
    });
    let ids: Vec<i64> = snapshot.guardrails().iter().map(|g| g.id).collect();
    assert_eq!(ids, [2, 9]);
    let compiled: Vec<i64> = snapshot.guards().rules().iter().map(|r| r.id()).collect();
    assert_eq!(compiled, [2, 9]);
    assert_eq!(snapshot.guards().rules()[1].position(), 1);
    assert_eq!(snapshot.guards().rule_at(1).unwrap().id(), 9);
    assert_eq!(snapshot.to_parts().guardrails.len(), 2);
}

#[test]
fn what_a_rule_does_with_uninspectable_traffic_is_parsed_defaulted_and_named_when_wrong() {
    use switchyard_engine::guard::rule::Uninspectable;
    for (text, want) in [
        ("allow", Uninspectable::Allow),
        ("block", Uninspectable::Block),
        (" block ", Uninspectable::Block),
        ("", Uninspectable::Allow),
    ] {
        let mut s = spec(json!({"detectors": ["email"]}));
        s.uninspectable = text.into();
        assert_eq!(s.into_rule(1).unwrap().uninspectable, want, "{text:?}");
    }
    for v in [Uninspectable::Allow, Uninspectable::Block] {
        assert_eq!(Uninspectable::parse(v.as_str()), Some(v));
    }
    assert_eq!(Uninspectable::parse("Block"), None);
    let mut s = spec(json!({"detectors": ["email"]}));
    s.uninspectable = "deny".into();
    assert_eq!(refused(s).0, "uninspectable");
    // A stored rule from before the field: allowed, in words too.
    let mut stored = serde_json::to_value(spec(json!({"detectors": ["email"]}))).unwrap();
    stored.as_object_mut().unwrap().remove("uninspectable");
    let spec: GuardrailSpec = serde_json::from_value(stored).unwrap();
    assert_eq!(spec.uninspectable, "allow");
}
