//! The answer-stage rules over a streamed answer: the engine's [`StreamWindow`] holds back only
//! as much text as the rules need to see a match whole; what it releases is blocked, redacted or
//! passed as each rule says, then has the request's placeholders put back (holding back a
//! placeholder split between deltas). What each rule found is reported once the stream is over.

use std::sync::Arc;

use switchyard_engine::guard::compile::CompiledGuards;
use switchyard_engine::guard::finding::Finding;
use switchyard_engine::guard::redact::RestoreMap;
use switchyard_engine::guard::rule::{GuardAction, Stage};
use switchyard_engine::guard::window::{Release, StreamWindow};

use crate::guard::check::{report, Blocked, Found};
use crate::guard::stream::Window;
use crate::state::AppState;

/// One answer-stage rule's part of a stream: what it found, for its report.
struct Seen {
    position: usize,
    texts: Vec<String>,
    findings: Vec<Vec<Finding>>,
}

/// A streamed answer's guard: see the module's documentation.
pub struct AnswerWindow {
    state: Arc<AppState>,
    guards: Arc<CompiledGuards>,
    window: Option<StreamWindow>,
    /// The rules the window runs (positions in `guards`), for a new window after a flush.
    positions: Vec<usize>,
    /// The rules that check the answer's tool calls, with the check that refused one.
    tool_rules: Vec<(usize, Option<&'static str>)>,
    /// The answer's text as the rules saw it, kept for the whole-answer checks.
    kept: Option<String>,
    seen: Vec<Seen>,
    /// The answer's own redactions (not put back).
    redactor: RestoreMap,
    /// The request's redactions to put back, and the text held while a placeholder may be
    /// incomplete.
    restore: Option<(Arc<RestoreMap>, String)>,
    request_id: String,
}

impl AnswerWindow {
    /// A window over `positions` (answer-stage rules that scan text, of `guards`), restoring
    /// `restore`'s placeholders.
    pub fn new(
        state: Arc<AppState>,
        guards: Arc<CompiledGuards>,
        positions: &[usize],
        restore: Option<Arc<RestoreMap>>,
        request_id: &str,
    ) -> AnswerWindow {
        let rules: Vec<_> = positions
            .iter()
            .filter_map(|p| guards.rule_at(*p))
            .collect();
        let window = (!rules.is_empty()).then(|| StreamWindow::new(Arc::clone(&guards), &rules));
        let seen = rules
            .iter()
            .map(|r| Seen {
                position: r.position(),
                texts: Vec::new(),
                findings: Vec::new(),
            })
            .collect();
        AnswerWindow {
            state,
            guards,
            window,
            positions: positions.to_vec(),
            tool_rules: Vec::new(),
            kept: None,
            seen,
            redactor: RestoreMap::new(),
            restore: restore.map(|map| (map, String::new())),
            request_id: request_id.to_owned(),
        }
    }

    /// The window also checks the tool calls the answer makes against `positions`' tool lists.
    pub fn with_tools(mut self, positions: &[usize]) -> AnswerWindow {
        self.tool_rules = positions.iter().map(|p| (*p, None)).collect();
        self
    }

    /// The window keeps the answer's text for the checks that need it whole.
    pub fn keeping_text(mut self) -> AnswerWindow {
        self.kept = Some(String::new());
        self
    }

    /// Released text: the rules' findings in it acted on, then the placeholders put back.
    fn released(&mut self, release: Release, last: bool) -> Result<String, Blocked> {
        let mut text = release.text;
        if !release.findings.is_empty() {
            text = self.act(text, &release.findings)?;
        }
        if let Some(kept) = &mut self.kept {
            kept.push_str(&text);
        }
        Ok(match &mut self.restore {
            None => text,
            Some((map, held)) => {
                held.push_str(&text);
                restore_ready(map, held, last)
            }
        })
    }

    /// Records each rule's findings; a blocking rule ends the stream, redacting ones rewrite
    /// the text.
    fn act(&mut self, text: String, findings: &[Finding]) -> Result<String, Blocked> {
        let mut redact = Vec::new();
        let mut blocked = None;
        for seen in &mut self.seen {
            let Some(rule) = self.guards.rule_at(seen.position) else {
                continue;
            };
            let own: Vec<Finding> = findings
                .iter()
                .filter(|f| f.rule_id == rule.id())
                .cloned()
                .collect();
            if own.is_empty() {
                continue;
            }
            match rule.effective_action() {
                GuardAction::Block if blocked.is_none() => {
                    blocked = Some(rule.rule().name.clone());
                }
                GuardAction::Redact => redact.extend(own.iter().cloned()),
                _ => {}
            }
            seen.texts.push(text.clone());
            seen.findings.push(own);
        }
        if let Some(name) = blocked {
            return Err(Blocked(name));
        }
        Ok(if redact.is_empty() {
            text
        } else {
            self.redactor.redact(&text, &redact)
        })
    }
}

/// The part of `held` that can go out, with `map`'s placeholders put back: all of it at the
/// end, else what the map's stream release lets go.
fn restore_ready(map: &RestoreMap, held: &mut String, last: bool) -> String {
    if last {
        return map.restore(&std::mem::take(held));
    }
    map.release(held)
}

impl Window for AnswerWindow {
    fn push(&mut self, delta: &str) -> Result<String, Blocked> {
        let release = match self.window.as_mut() {
            Some(window) => window.push(delta),
            None => Release {
                text: delta.to_owned(),
                ..Release::default()
            },
        };
        self.released(release, false)
    }

    fn finish(&mut self) -> Result<String, Blocked> {
        let release = self
            .window
            .take()
            .map(StreamWindow::finish)
            .unwrap_or_default();
        self.released(release, true)
    }

    fn flush(&mut self) -> Result<String, Blocked> {
        let release = match self.window.take() {
            Some(window) => {
                let release = window.finish();
                let rules: Vec<_> = self
                    .positions
                    .iter()
                    .filter_map(|p| self.guards.rule_at(*p))
                    .collect();
                self.window = Some(StreamWindow::new(Arc::clone(&self.guards), &rules));
                release
            }
            None => Release::default(),
        };
        self.released(release, true)
    }

    fn wants_tools(&self) -> bool {
        !self.tool_rules.is_empty()
    }

    fn tool(&mut self, name: &str) -> Result<(), Blocked> {
        for (position, refused) in &mut self.tool_rules {
            let Some(rule) = self.guards.rule_at(*position) else {
                continue;
            };
            let Some(violation) = rule.tools_verdict([name]) else {
                continue;
            };
            refused.get_or_insert(violation.check);
            if rule.effective_action() == GuardAction::Block {
                return Err(Blocked(rule.rule().name.clone()));
            }
        }
        Ok(())
    }

    fn answer_text(&mut self) -> String {
        self.kept.take().unwrap_or_default()
    }
}

impl Drop for AnswerWindow {
    /// The stream is over (ended, blocked or abandoned): each rule's report.
    fn drop(&mut self) {
        for (position, violation) in std::mem::take(&mut self.tool_rules) {
            if let Some(rule) = self.guards.rule_at(position) {
                let found = Found {
                    violation,
                    ..Found::default()
                };
                report(
                    &self.state,
                    rule,
                    Stage::Response,
                    &[],
                    &found,
                    &self.request_id,
                );
            }
        }
        for seen in std::mem::take(&mut self.seen) {
            let Some(rule) = self.guards.rule_at(seen.position) else {
                continue;
            };
            let found = Found {
                findings: seen.findings,
                ..Found::default()
            };
            report(
                &self.state,
                rule,
                Stage::Response,
                &seen.texts,
                &found,
                &self.request_id,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchyard_engine::guard::finding::TextCheck;

    #[test]
    fn a_placeholder_split_between_deltas_is_held_until_whole_then_put_back() {
        let mut map = RestoreMap::new();
        let finding = Finding {
            rule_id: 1,
            check: TextCheck::Pattern(0),
            range: 0..3,
            kind: "EMAIL".into(),
        };
        assert_eq!(map.redact("a@b", &[finding]), "[EMAIL_1]");
        let mut held = String::new();
        let mut out = String::new();
        for delta in ["Hi [EM", "AIL", "_1] and [", "not one] ["] {
            held.push_str(delta);
            out.push_str(&restore_ready(&map, &mut held, false));
        }
        assert_eq!(out, "Hi a@b and [not one] ");
        assert_eq!(held, "[");
        out.push_str(&restore_ready(&map, &mut held, true));
        assert_eq!(out, "Hi a@b and [not one] [");
    }
}
