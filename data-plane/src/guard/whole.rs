//! The checks a streamed answer gets once it is whole: a JSON schema (when the request asked for
//! JSON mode), a webhook, a moderation call. They run over the answer's text as the rules saw it
//! (after the answer's own redactions, before the request's placeholders are put back), as a
//! plain answer's do; their patterns and detectors already ran in the stream's window.

use std::sync::Arc;

use switchyard_engine::guard::compile::CompiledGuards;
use switchyard_engine::guard::rule::{GuardAction, Stage};

use crate::guard::check::{self, Blocked, Facts};
use crate::snapshot::View;
use crate::state::AppState;

/// The whole-answer checks of a stream's answer-stage rules.
pub struct EndCheck {
    state: Arc<AppState>,
    view: Arc<View>,
    guards: Arc<CompiledGuards>,
    /// The rules with a whole-answer check (positions in `guards`).
    rules: Vec<usize>,
    json_asked: bool,
    request_id: String,
}

impl EndCheck {
    /// The end check of `positions` (answer-stage rules of `guards`): `None` when none of them
    /// holds a check that needs the whole answer.
    pub fn of(
        state: &Arc<AppState>,
        view: &Arc<View>,
        guards: &Arc<CompiledGuards>,
        positions: &[usize],
        json_asked: bool,
        request_id: &str,
    ) -> Option<EndCheck> {
        let rules: Vec<usize> = positions
            .iter()
            .copied()
            .filter(|p| {
                guards.rule_at(*p).is_some_and(|r| {
                    let checks = &r.rule().checks;
                    (json_asked && checks.json_schema.is_some())
                        || checks.webhook.is_some()
                        || checks.moderation.is_some()
                })
            })
            .collect();
        (!rules.is_empty()).then(|| EndCheck {
            state: Arc::clone(state),
            view: Arc::clone(view),
            guards: Arc::clone(guards),
            rules,
            json_asked,
            request_id: request_id.to_owned(),
        })
    }

    /// Runs each rule over the whole answer `text`, in order, each reported; `Err` names the
    /// first rule that blocks it.
    pub async fn run(&self, text: String) -> Result<(), Blocked> {
        let texts = [text];
        let facts = Facts {
            size: None,
            tools: &[],
            json_answer: self.json_asked.then_some(texts[0].as_str()),
            scanned: true,
        };
        for rule in self.rules.iter().filter_map(|p| self.guards.rule_at(*p)) {
            let found = check::run(
                &self.state,
                &self.view,
                rule,
                Stage::Response,
                &texts,
                &facts,
            )
            .await;
            check::report(
                &self.state,
                rule,
                Stage::Response,
                &texts,
                &found,
                &self.request_id,
            );
            if found.hit() && rule.effective_action() == GuardAction::Block {
                return Err(Blocked(rule.rule().name.clone()));
            }
        }
        Ok(())
    }
}
