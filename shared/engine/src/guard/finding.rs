//! What a scan finds, and the rule that picks which findings a redaction replaces when they
//! overlap.

use std::ops::Range;

use serde::Serialize;

use super::detect::Detector;

/// The check that made a finding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "check", content = "which", rename_all = "snake_case")]
pub enum TextCheck {
    Detector(Detector),
    /// The rule's pattern at this position of its `patterns`.
    Pattern(usize),
}

/// One match in a text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// The rule whose check found it.
    pub rule_id: i64,
    pub check: TextCheck,
    /// Byte range in the scanned text (always on character boundaries, never empty).
    pub range: Range<usize>,
    /// The finding's kind, and its placeholders' stem: `EMAIL`, `CARD`, a pattern's label.
    pub kind: String,
}

/// The findings a redaction replaces: sorted by start; where findings overlap, the one that
/// starts first wins (the longer one on a tie) and the others are dropped.
pub fn non_overlapping(findings: &[Finding]) -> Vec<&Finding> {
    let mut sorted: Vec<&Finding> = findings.iter().collect();
    sorted.sort_by(|a, b| {
        a.range
            .start
            .cmp(&b.range.start)
            .then(b.range.end.cmp(&a.range.end))
    });
    let mut out: Vec<&Finding> = Vec::with_capacity(sorted.len());
    let mut end = 0;
    for f in sorted {
        if out.is_empty() || f.range.start >= end {
            end = f.range.end;
            out.push(f);
        }
    }
    out
}
