//! Model pattern matching (`wildcard_match`, `validate_pattern`) and route resolution
//! (`RouteIndex`), checked against a plain reference.
//!
//! Input: lines. The first is the model asked for; every other line is a route's pattern
//! (`!` first: a disabled route). Route ids are derived from the input, and may repeat.
//!
//! Invariants: `wildcard_match` agrees with a dynamic-programming matcher on every
//! (pattern, line) pair; `RouteIndex::resolve` gives what a scan of every route gives (exact
//! first, lowest id; else the longest matching wildcard, lowest id); an accepted pattern has no
//! `**`, no surrounding whitespace and at most 256 characters.
#![no_main]

use std::cmp::Reverse;

use libfuzzer_sys::fuzz_target;
use switchyard_engine::pattern::{is_wildcard, MAX_PATTERN_CHARS};
use switchyard_engine::{validate_pattern, wildcard_match, RouteIndex};
use switchyard_fuzz::{reference_match, seed, Rng};

fn reference_resolve(routes: &[(&str, i64, bool)], model: &str) -> Option<i64> {
    let enabled = || {
        routes
            .iter()
            .filter(|r| r.2)
            .map(|&(pattern, id, _)| (pattern.trim(), id))
    };
    let exact = enabled()
        .filter(|(p, _)| !is_wildcard(p) && *p == model)
        .map(|(_, id)| id)
        .min();
    exact.or_else(|| {
        enabled()
            .filter(|(p, _)| is_wildcard(p) && reference_match(p, model))
            .max_by_key(|(p, id)| (p.chars().count(), Reverse(*id)))
            .map(|(_, id)| id)
    })
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let mut lines = text.split('\n');
    let model = lines.next().unwrap_or_default();
    let lines: Vec<&str> = lines.take(64).collect();
    let mut rng = Rng::new(seed(data));
    let routes: Vec<(&str, i64, bool)> = lines
        .iter()
        .map(|line| match line.strip_prefix('!') {
            Some(pattern) => (pattern, rng.below(16) as i64, false),
            None => (*line, rng.below(16) as i64, true),
        })
        .collect();

    for &(pattern, _, _) in &routes {
        if validate_pattern(pattern).is_ok() {
            assert!(!pattern.contains("**") && pattern.trim() == pattern && !pattern.is_empty());
            assert!(pattern.chars().count() <= MAX_PATTERN_CHARS);
        }
        for candidate in std::iter::once(model).chain(lines.iter().copied()) {
            assert_eq!(
                wildcard_match(pattern, candidate),
                reference_match(pattern, candidate),
                "wildcard_match({pattern:?}, {candidate:?})"
            );
        }
    }

    let index = RouteIndex::build(routes.iter().copied());
    for candidate in std::iter::once(model).chain(lines.iter().copied()) {
        let candidate = candidate.trim();
        assert_eq!(
            index.resolve(candidate),
            reference_resolve(&routes, candidate),
            "resolve({candidate:?}) over {routes:?}"
        );
    }
});
