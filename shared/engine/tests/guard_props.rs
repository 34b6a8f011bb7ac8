//! Properties of guardrail scanning over generated texts (the fuzz target `guard_detectors`
//! checks the same over any bytes): findings are well formed, `restore(redact(x)) == x`, a
//! stream window releases exactly its text with the findings a whole scan makes, and a restore
//! window restores as the whole text does.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use proptest::prelude::*;
use switchyard_engine::guard::compile::CompiledGuards;
use switchyard_engine::guard::redact::{redact, restore};
use switchyard_engine::guard::rule::{GuardChecks, GuardrailSpec};
use switchyard_engine::guard::window::{Release, StreamWindow};

/// One rule holding every detector and a pattern, compiled once for every case.
fn guards() -> Arc<CompiledGuards> {
    static GUARDS: std::sync::OnceLock<Arc<CompiledGuards>> = std::sync::OnceLock::new();
    Arc::clone(GUARDS.get_or_init(compile))
}

fn compile() -> Arc<CompiledGuards> {
    let checks = GuardChecks::from_json(
        r#"{"detectors": ["email", "phone", "card", "iban", "api_keys", "private_key"],
            "patterns": [{"regex": "EMP-[0-9]{3,6}", "max_match_bytes": 10, "label": "EMP"}]}"#,
    )
    .unwrap();
    let rule = GuardrailSpec {
        name: "p".into(),
        scope: "all".into(),
        scope_id: None,
        stage: "both".into(),
        action: "redact".into(),
        restore: true,
        mode: "enforce".into(),
        enabled: true,
        checks,
        uninspectable: "allow".into(),
    }
    .into_rule(1)
    .unwrap();
    Arc::new(CompiledGuards::new(&[rule]))
}

const FRAGMENTS: [&str; 22] = [
    "a@b.io",
    "first.last+x@mail.example.org",
    "4111 1111 1111 1111",
    "4111111111111112",
    "DE89 3704 0044 0532 0130 00",
    "+1 212 555 0100",
    "sk-proj-AbCdEf0123456789GhIjKl",
    "AKIAIOSFODNN7EXAMPLE",
    "EMP-1234",
    "[EMAIL_1]",
    "[CARD_2]",
    "[EMP_1",
    "]",
    "[",
    " ",
    "\n",
    "é",
    "模型",
    "-----BEGIN PRIVATE KEY-----\nMIIB+/=\n",
    "-----END PRIVATE KEY-----",
    "x",
    "0",
];

fn text() -> impl Strategy<Value = String> {
    prop::collection::vec(0..FRAGMENTS.len(), 0..24)
        .prop_map(|picks| picks.into_iter().map(|i| FRAGMENTS[i]).collect())
}

/// `text` cut at the given points (moved to character boundaries).
fn pieces(text: &str, cuts: &[usize]) -> Vec<String> {
    let mut at: Vec<usize> = cuts
        .iter()
        .map(|c| {
            let mut c = c % (text.len() + 1);
            while !text.is_char_boundary(c) {
                c -= 1;
            }
            c
        })
        .collect();
    at.push(0);
    at.push(text.len());
    at.sort_unstable();
    at.dedup();
    at.windows(2).map(|w| text[w[0]..w[1]].to_owned()).collect()
}

/// The released text and the findings' texts with their absolute starts.
fn stream(guards: &Arc<CompiledGuards>, parts: &[String]) -> (String, Vec<(usize, String)>) {
    let rules: Vec<_> = guards.rules().iter().collect();
    let mut window = StreamWindow::new(Arc::clone(guards), &rules);
    let mut out = String::new();
    let mut found = Vec::new();
    let mut take = |r: Release, out: &mut String| {
        assert_eq!(r.offset, out.len());
        for f in &r.findings {
            found.push((r.offset + f.range.start, r.text[f.range.clone()].to_owned()));
        }
        out.push_str(&r.text);
    };
    for part in parts {
        let release = window.push(part);
        take(release, &mut out);
    }
    take(window.finish(), &mut out);
    (out, found)
}

proptest! {
    #[test]
    fn redaction_restores_exactly(text in text()) {
        let guards = guards();
        let findings = guards.scan(&guards.rules()[0], &text);
        for f in &findings {
            prop_assert!(f.range.start < f.range.end && f.range.end <= text.len());
            prop_assert!(text.is_char_boundary(f.range.start) && text.is_char_boundary(f.range.end));
        }
        let (redacted, map) = redact(&text, &findings);
        prop_assert_eq!(restore(&redacted, &map), text);
    }

    #[test]
    fn a_window_releases_its_text_with_the_whole_scans_findings(
        text in text(),
        cuts in prop::collection::vec(any::<usize>(), 0..8),
    ) {
        let guards = guards();
        let whole: Vec<(usize, String)> = guards
            .scan(&guards.rules()[0], &text)
            .into_iter()
            .map(|f| (f.range.start, text[f.range].to_owned()))
            .collect();
        let (out, found) = stream(&guards, &pieces(&text, &cuts));
        prop_assert_eq!(&out, &text);
        let mut found = found;
        found.sort();
        let mut whole = whole;
        whole.sort();
        prop_assert_eq!(found, whole);
    }

    #[test]
    fn a_restore_window_restores_as_the_whole_text_does(
        text in text(),
        cuts in prop::collection::vec(any::<usize>(), 0..8),
    ) {
        let guards = guards();
        let (redacted, map) = redact(&text, &guards.scan(&guards.rules()[0], &text));
        let mut stream = map.stream();
        let mut out = String::new();
        for part in pieces(&redacted, &cuts) {
            out.push_str(&stream.push(&part));
        }
        out.push_str(&stream.finish());
        prop_assert_eq!(out, map.restore(&redacted));
    }
}
