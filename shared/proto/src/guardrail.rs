//! Guardrail reports, the proxy side: per (minute, guardrail) counts of what a guardrail checked
//! and did (or, in shadow mode, would have done), sent with the usage batches
//! (`UsageBatch.guardrails`) so they share their exactly-once delivery. Only counts and masked
//! examples travel, never a text.

use crate::v1;

/// Masked examples one record keeps (the first ones seen).
pub const MAX_GUARDRAIL_EXAMPLES: usize = 3;
/// Finding kinds one record keeps (others are counted under `other`).
pub const MAX_FINDING_KINDS: usize = 32;
/// Longest example and kind kept (characters).
pub const MAX_GUARDRAIL_TEXT_CHARS: usize = 64;

/// Adds `from`'s figures to `into` (saturating): the same minute and guardrail.
pub fn add_guardrail(into: &mut v1::GuardrailRecord, from: &v1::GuardrailRecord) {
    let sums = [
        (&mut into.checked, from.checked),
        (&mut into.blocked, from.blocked),
        (&mut into.would_block, from.would_block),
        (&mut into.redacted, from.redacted),
        (&mut into.would_redact, from.would_redact),
        (&mut into.external_failures, from.external_failures),
    ];
    for (a, b) in sums {
        *a = a.saturating_add(b);
    }
    for (kind, count) in &from.findings {
        add_finding(into, kind, *count);
    }
    for example in &from.examples {
        add_example(into, example);
    }
}

/// Counts `count` findings of `kind`.
pub fn add_finding(into: &mut v1::GuardrailRecord, kind: &str, count: u64) {
    let kind = if into.findings.contains_key(kind) || into.findings.len() < MAX_FINDING_KINDS {
        cut(kind)
    } else {
        "other".to_owned()
    };
    let total = into.findings.entry(kind).or_default();
    *total = total.saturating_add(count);
}

/// Keeps a masked example while there is room.
pub fn add_example(into: &mut v1::GuardrailRecord, example: &str) {
    if into.examples.len() < MAX_GUARDRAIL_EXAMPLES {
        into.examples.push(cut(example));
    }
}

fn cut(text: &str) -> String {
    text.chars().take(MAX_GUARDRAIL_TEXT_CHARS).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_add_up_within_their_bounds() {
        let mut total = v1::GuardrailRecord::default();
        let mut one = v1::GuardrailRecord {
            checked: 1,
            would_block: 1,
            ..Default::default()
        };
        add_finding(&mut one, "email", 2);
        add_example(&mut one, "j***@e***.com");
        for _ in 0..5 {
            add_guardrail(&mut total, &one);
        }
        assert_eq!((total.checked, total.would_block, total.blocked), (5, 5, 0));
        assert_eq!(total.findings.get("email"), Some(&10));
        assert_eq!(total.examples.len(), MAX_GUARDRAIL_EXAMPLES);
        for i in 0..MAX_FINDING_KINDS + 3 {
            add_finding(&mut total, &format!("k{i}"), 1);
        }
        assert_eq!(total.findings.len(), MAX_FINDING_KINDS + 1);
        assert_eq!(total.findings.get("other"), Some(&4));
    }
}
