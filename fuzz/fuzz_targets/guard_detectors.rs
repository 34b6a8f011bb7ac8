//! Guardrail scanning, redaction and the stream windows over any text.
//!
//! Input: the text, scanned by one rule holding every built-in detector and two user patterns.
//! Split points for the windows are drawn from the input.
//!
//! Invariants: every finding is a non-empty range on character boundaries inside the text, no
//! longer than its check's longest match; `restore(redact(x)) == x`; a stream window releases
//! exactly the text it was given, in order, each release's findings inside it; a restore window
//! releases exactly what restoring the whole text gives. Nothing panics.
#![no_main]

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use switchyard_engine::guard::compile::CompiledGuards;
use switchyard_engine::guard::detect::Detector;
use switchyard_engine::guard::redact::{redact, restore};
use switchyard_engine::guard::rule::{GuardChecks, GuardrailSpec};
use switchyard_engine::guard::window::StreamWindow;
use switchyard_fuzz::{seed, Rng};

fn guards() -> Option<CompiledGuards> {
    let checks = GuardChecks::from_json(
        r#"{"detectors": ["email", "phone", "card", "iban", "api_keys", "private_key"],
            "patterns": [{"regex": "EMP-[0-9]{3,6}", "max_match_bytes": 10, "label": "EMP"},
                         {"regex": "(?i)secret\\w{0,8}", "max_match_bytes": 14}]}"#,
    )
    .ok()?;
    let rule = GuardrailSpec {
        name: "fuzz".into(),
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
    .ok()?;
    Some(CompiledGuards::new(&[rule]))
}

/// `text` cut at up to 8 character boundaries drawn from `rng`.
fn pieces<'t>(text: &'t str, rng: &mut Rng) -> Vec<&'t str> {
    let mut cuts: Vec<usize> = (0..rng.below(9))
        .map(|_| rng.below(text.len() + 1))
        .filter(|at| text.is_char_boundary(*at))
        .collect();
    cuts.push(0);
    cuts.push(text.len());
    cuts.sort_unstable();
    cuts.dedup();
    cuts.windows(2).map(|w| &text[w[0]..w[1]]).collect()
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let Some(guards) = guards() else {
        panic!("the fuzz rule is valid");
    };
    let guards = Arc::new(guards);
    let rule = &guards.rules()[0];
    let findings = guards.scan(rule, &text);
    for f in &findings {
        let r = f.range.clone();
        assert!(r.start < r.end && r.end <= text.len(), "{r:?}");
        assert!(text.is_char_boundary(r.start) && text.is_char_boundary(r.end));
        if let switchyard_engine::guard::finding::TextCheck::Detector(d) = f.check {
            assert!(r.len() <= d.max_match_bytes(), "{d:?} {r:?}");
            assert!(Detector::ALL.contains(&d));
        }
    }
    let (redacted, map) = redact(&text, &findings);
    assert_eq!(restore(&redacted, &map), text, "restore(redact(x)) == x");

    let mut rng = Rng::new(seed(data));
    let mut window = StreamWindow::new(Arc::clone(&guards), &[rule]);
    let mut released = String::new();
    let check = |release: switchyard_engine::guard::window::Release, out: &mut String| {
        assert_eq!(release.offset, out.len());
        for f in &release.findings {
            assert!(f.range.start < f.range.end && f.range.end <= release.text.len());
            assert!(release.text.is_char_boundary(f.range.start));
            assert!(release.text.is_char_boundary(f.range.end));
        }
        out.push_str(&release.text);
    };
    for piece in pieces(&text, &mut rng) {
        let release = window.push(piece);
        check(release, &mut released);
    }
    check(window.finish(), &mut released);
    assert_eq!(released, text, "a window never loses or repeats text");

    let whole = map.restore(&redacted);
    let mut stream = map.stream();
    let mut restored = String::new();
    for piece in pieces(&redacted, &mut rng) {
        restored.push_str(&stream.push(piece));
    }
    restored.push_str(&stream.finish());
    assert_eq!(restored, whole, "a restore window restores as the whole text does");
});
