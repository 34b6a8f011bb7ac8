//! Model patterns: exact names and wildcards (`*` any run of characters, `?` exactly one), and
//! the precomputed index that resolves a model name to its route without scanning every route.

use crate::fxhash::FxHashMap;
use crate::ids::RouteId;

/// Longest accepted model pattern, in characters.
pub const MAX_PATTERN_CHARS: usize = 256;

pub fn is_wildcard(pattern: &str) -> bool {
    pattern.contains(['*', '?'])
}

/// Checks a model pattern an operator submits. Patterns are stored trimmed.
pub fn validate_pattern(pattern: &str) -> Result<(), String> {
    if pattern.is_empty() {
        return Err("model_pattern must not be empty".into());
    }
    if pattern.trim() != pattern {
        return Err("model_pattern must not start or end with whitespace".into());
    }
    let chars = pattern.chars().count();
    if chars > MAX_PATTERN_CHARS {
        return Err(format!(
            "model_pattern is {chars} characters long; at most {MAX_PATTERN_CHARS} are allowed"
        ));
    }
    if let Some(c) = pattern
        .chars()
        .find(|c| c.is_control() || c.is_whitespace())
    {
        return Err(format!(
            "model_pattern must not contain whitespace or control characters (found {c:?})"
        ));
    }
    if pattern.contains("**") {
        return Err("model_pattern must not contain `**`; a single `*` already matches any run of characters".into());
    }
    Ok(())
}

/// Does `text` match `pattern`? `*` matches any run of characters (also none), `?` exactly one
/// character; everything else matches itself, case-sensitively.
pub fn wildcard_match(pattern: &str, text: &str) -> bool {
    if pattern.is_ascii() && text.is_ascii() {
        glob(pattern.as_bytes(), text.as_bytes(), b'*', b'?')
    } else {
        let p: Vec<char> = pattern.chars().collect();
        let t: Vec<char> = text.chars().collect();
        glob(&p, &t, '*', '?')
    }
}

/// Linear-time glob matching with single-star backtracking.
pub(crate) fn glob<T: PartialEq + Copy>(p: &[T], t: &[T], star: T, one: T) -> bool {
    let (mut pi, mut ti) = (0, 0);
    let mut resume: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && p[pi] == star {
            resume = Some((pi, ti));
            pi += 1;
        } else if pi < p.len() && (p[pi] == one || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if let Some((star_at, matched_to)) = resume {
            pi = star_at + 1;
            ti = matched_to + 1;
            resume = Some((star_at, ti));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == star)
}

#[derive(Debug, Clone)]
struct Wildcard {
    pattern: String,
    chars: usize,
    route: RouteId,
}

/// Precomputed route lookup. Exact patterns resolve with one hash lookup. Wildcards are bucketed
/// by their literal prefix (the text before the first `*`/`?`), so a lookup probes only the
/// buckets whose prefix the model starts with — work grows with the model name's length and the
/// routes that could actually match, not with the number of routes.
#[derive(Debug, Clone, Default)]
pub struct RouteIndex {
    exact: FxHashMap<String, RouteId>,
    /// literal prefix -> wildcards, best first (longest pattern, then lowest route id).
    buckets: FxHashMap<String, Vec<Wildcard>>,
    /// The distinct prefix lengths (bytes) present in `buckets`, ascending.
    prefix_lengths: Vec<usize>,
}

impl RouteIndex {
    /// Indexes `(pattern, route id, enabled)`; disabled routes are left out.
    pub fn build<'a>(routes: impl IntoIterator<Item = (&'a str, RouteId, bool)>) -> RouteIndex {
        let mut index = RouteIndex::default();
        for (pattern, id, enabled) in routes {
            if !enabled {
                continue;
            }
            let pattern = pattern.trim();
            if is_wildcard(pattern) {
                let cut = pattern.find(['*', '?']).unwrap_or(pattern.len());
                index
                    .buckets
                    .entry(pattern[..cut].to_owned())
                    .or_default()
                    .push(Wildcard {
                        pattern: pattern.to_owned(),
                        chars: pattern.chars().count(),
                        route: id,
                    });
            } else {
                index
                    .exact
                    .entry(pattern.to_owned())
                    .and_modify(|existing| *existing = (*existing).min(id))
                    .or_insert(id);
            }
        }
        for bucket in index.buckets.values_mut() {
            bucket.sort_by(|a, b| b.chars.cmp(&a.chars).then(a.route.cmp(&b.route)));
        }
        index.prefix_lengths = index.buckets.keys().map(String::len).collect();
        index.prefix_lengths.sort_unstable();
        index.prefix_lengths.dedup();
        index
    }

    /// The route for an already trimmed model name.
    pub fn resolve(&self, model: &str) -> Option<RouteId> {
        if let Some(id) = self.exact.get(model) {
            return Some(*id);
        }
        let mut best: Option<&Wildcard> = None;
        for &len in &self.prefix_lengths {
            if len > model.len() {
                break;
            }
            let Some(prefix) = model.get(..len) else {
                continue; // not a char boundary: no literal prefix can end here
            };
            let Some(bucket) = self.buckets.get(prefix) else {
                continue;
            };
            // Buckets are sorted best first; the bucket can only improve on `best` while its
            // entries are at least as long.
            for wildcard in bucket {
                if let Some(b) = best {
                    if (wildcard.chars, std::cmp::Reverse(wildcard.route))
                        <= (b.chars, std::cmp::Reverse(b.route))
                    {
                        break;
                    }
                }
                if wildcard_match(&wildcard.pattern, model) {
                    best = Some(wildcard);
                    break;
                }
            }
        }
        best.map(|w| w.route)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn star_matches_any_run_including_none() {
        assert!(wildcard_match("gpt-*", "gpt-"));
        assert!(wildcard_match("gpt-*", "gpt-4o-mini"));
        assert!(wildcard_match("*", ""));
        assert!(wildcard_match("*-mini", "gpt-4o-mini"));
        assert!(wildcard_match("a*b*c", "aXXbYYc"));
        assert!(!wildcard_match("gpt-*", "gpt"));
        assert!(!wildcard_match("a*b*c", "aXXbYY"));
    }

    #[test]
    fn question_mark_matches_exactly_one_character() {
        assert!(wildcard_match("gpt-?", "gpt-4"));
        assert!(!wildcard_match("gpt-?", "gpt-"));
        assert!(!wildcard_match("gpt-?", "gpt-4o"));
        assert!(wildcard_match("模型-?", "模型-四"));
        assert!(!wildcard_match("模型-?", "模型-四五"));
    }

    #[test]
    fn matching_is_case_sensitive() {
        assert!(!wildcard_match("GPT-*", "gpt-4"));
    }

    #[test]
    fn bad_patterns_are_rejected() {
        assert!(validate_pattern("").is_err());
        assert!(validate_pattern(" gpt").is_err());
        assert!(validate_pattern("gpt 4").is_err());
        assert!(validate_pattern("gpt-**").is_err());
        assert!(validate_pattern(&"a".repeat(257)).is_err());
        assert!(validate_pattern("gpt-4o*").is_ok());
    }

    #[test]
    fn a_pattern_of_exactly_the_maximum_length_is_accepted() {
        assert!(validate_pattern(&"a".repeat(MAX_PATTERN_CHARS)).is_ok());
        // Counted in characters, not bytes: 256 two-byte characters are 512 bytes.
        assert!(validate_pattern(&"é".repeat(MAX_PATTERN_CHARS)).is_ok());
        assert!(validate_pattern(&"é".repeat(MAX_PATTERN_CHARS + 1)).is_err());
    }

    #[test]
    fn only_star_and_question_mark_make_a_wildcard() {
        assert!(is_wildcard("gpt-*"));
        assert!(is_wildcard("gpt-?"));
        for exact in ["gpt-4o", "", "a.b+c[d]", "claude-3-5-sonnet@20240620"] {
            assert!(!is_wildcard(exact), "{exact:?}");
        }
    }

    #[test]
    fn an_exact_pattern_beats_a_longer_wildcard_that_also_matches() {
        // Wildcards rank by length, but an exact name outranks every wildcard, however long.
        let index = RouteIndex::build([
            ("gpt-4o*", 1, true),
            ("gpt-4o", 2, true),
            ("gpt-4?", 3, true),
        ]);
        assert_eq!(index.resolve("gpt-4o"), Some(2));
        assert_eq!(index.resolve("gpt-4o-mini"), Some(1));
        assert_eq!(index.resolve("gpt-4x"), Some(3));
    }

    /// Reference matcher: straightforward recursion, exponential but obviously right.
    fn reference(p: &[char], t: &[char]) -> bool {
        match (p.first(), t.first()) {
            (None, None) => true,
            (Some('*'), _) => reference(&p[1..], t) || (!t.is_empty() && reference(p, &t[1..])),
            (Some('?'), Some(_)) => reference(&p[1..], &t[1..]),
            (Some(a), Some(b)) if a == b => reference(&p[1..], &t[1..]),
            _ => false,
        }
    }

    proptest! {
        #[test]
        fn matcher_agrees_with_reference(p in "[ab*?é]{0,8}", t in "[abé]{0,10}") {
            let pc: Vec<char> = p.chars().collect();
            let tc: Vec<char> = t.chars().collect();
            prop_assert_eq!(wildcard_match(&p, &t), reference(&pc, &tc));
        }

        #[test]
        fn index_agrees_with_linear_scan(
            patterns in proptest::collection::vec("[ab]{0,3}[*?]?[ab]{0,2}", 0..12),
            model in "[ab]{0,6}",
        ) {
            let routes: Vec<(String, RouteId)> =
                patterns.iter().enumerate().map(|(i, p)| (p.clone(), i as RouteId + 1)).collect();
            let index = RouteIndex::build(routes.iter().map(|(p, id)| (p.as_str(), *id, true)));
            let exact = routes.iter().filter(|(p, _)| !is_wildcard(p) && *p == model).map(|(_, id)| *id).min();
            let expected = exact.or_else(|| {
                routes
                    .iter()
                    .filter(|(p, _)| is_wildcard(p) && wildcard_match(p, &model))
                    .min_by_key(|(p, id)| (std::cmp::Reverse(p.chars().count()), *id))
                    .map(|(_, id)| *id)
            });
            prop_assert_eq!(index.resolve(&model), expected);
        }
    }
}
