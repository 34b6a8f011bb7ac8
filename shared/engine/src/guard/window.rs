//! Scanning a stream: a match may cross the boundary between two deltas, so the window holds
//! back the last [`CompiledRule::hold_bytes`] of text (the longest match of the rules it runs,
//! plus one character), scans what it holds, and releases only text that can no longer be part
//! of a match, with the findings in it (it scans again once a quarter of a hold has gathered, so
//! the work stays linear in the stream's length). At the end it releases the rest.
//!
//! Findings never straddle a release: when one would, the release stops at its start (or, when
//! overlapping findings chain further back than a whole hold, at the usual point with the
//! straddling finding cut short). A user pattern whose match is longer than its
//! `max_match_bytes` can be missed or cut short across a boundary; that bound is the rule's
//! promise.

use std::sync::Arc;

use super::compile::{CompiledGuards, CompiledRule};
use super::detect::floor_char;
use super::finding::Finding;

/// Text a window lets go of, and what its rules found in it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Release {
    /// Where `text` starts in the whole stream (bytes).
    pub offset: usize,
    pub text: String,
    /// Ranges are relative to `text`.
    pub findings: Vec<Finding>,
}

/// Context kept before the held text, already released, so a check that looks at the character
/// before a match (a word boundary, a detector's "stands alone") sees it.
const CONTEXT: usize = 4;

/// A stream's scanning window over some of a snapshot's rules.
#[derive(Debug)]
pub struct StreamWindow {
    guards: Arc<CompiledGuards>,
    rules: Vec<usize>,
    hold: usize,
    /// Released context (the first `context` bytes) then held text.
    buf: String,
    context: usize,
    /// Where the held text starts in the whole stream.
    offset: usize,
}

impl StreamWindow {
    /// A window running `rules` (of `guards`) over a stream's text.
    pub fn new(guards: Arc<CompiledGuards>, rules: &[&CompiledRule]) -> StreamWindow {
        StreamWindow {
            hold: rules.iter().map(|r| r.hold_bytes()).max().unwrap_or(0),
            rules: rules.iter().map(|r| r.position()).collect(),
            guards,
            buf: String::new(),
            context: 0,
            offset: 0,
        }
    }

    /// Bytes of text this window holds back at most (beyond the last character).
    pub fn hold_bytes(&self) -> usize {
        self.hold
    }

    /// Adds a delta; returns the text that can no longer be part of a match.
    pub fn push(&mut self, delta: &str) -> Release {
        self.buf.push_str(delta);
        let held = self.buf.len() - self.context;
        if held <= self.hold + slack(self.hold) {
            return self.empty();
        }
        let findings = self.scan();
        let goal = floor_char(&self.buf, self.buf.len() - self.hold);
        let cut = cut_before(&findings, goal, self.context, self.hold);
        self.release(cut, findings)
    }

    /// Releases everything still held.
    pub fn finish(mut self) -> Release {
        let findings = self.scan();
        let end = self.buf.len();
        self.release(end, findings)
    }

    fn empty(&self) -> Release {
        Release {
            offset: self.offset,
            ..Release::default()
        }
    }

    /// The findings in the held text (ranges in `buf`), context before it considered.
    fn scan(&self) -> Vec<Finding> {
        let mut findings = self.guards.scan_all(&self.rules, &self.buf);
        findings.retain(|f| f.range.start >= self.context);
        findings
    }

    /// Releases `buf[context..cut]` with the findings that start in it (cut short at `cut`).
    fn release(&mut self, cut: usize, findings: Vec<Finding>) -> Release {
        let context = self.context;
        let text = self.buf[context..cut].to_owned();
        let findings = findings
            .into_iter()
            .filter(|f| f.range.start < cut)
            .map(|mut f| {
                f.range = f.range.start - context..f.range.end.min(cut) - context;
                f
            })
            .collect();
        let release = Release {
            offset: self.offset,
            text,
            findings,
        };
        self.offset += cut - context;
        let keep_from = floor_char(&self.buf, cut.saturating_sub(CONTEXT));
        self.buf.drain(..keep_from);
        self.context = cut - keep_from;
        release
    }
}

/// Text gathered beyond the hold before the window scans again: each scan reads the whole hold,
/// so scanning every quarter hold keeps the work linear in the stream's length.
fn slack(hold: usize) -> usize {
    (hold / 4).max(16)
}

/// Where to release up to: `goal`, or earlier so no finding straddles the cut; never more than
/// one hold before the goal (see the module's note).
fn cut_before(findings: &[Finding], goal: usize, context: usize, hold: usize) -> usize {
    let floor = goal.saturating_sub(hold).max(context);
    let mut cut = goal;
    while let Some(start) = findings
        .iter()
        .filter(|f| f.range.start < cut && f.range.end > cut)
        .map(|f| f.range.start)
        .min()
    {
        if start < floor {
            return goal;
        }
        cut = start;
    }
    cut
}
