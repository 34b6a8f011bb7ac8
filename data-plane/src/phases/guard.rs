//! Guard: between admit and the cache, the guardrails that apply to the request (by its route,
//! its key's team and its key) check its texts. A block is answered here (400 in the client's
//! protocol; nothing is looked up or sent); a redaction rewrites the body's texts in place, so
//! the cache keys on and the upstream receives the redacted request; a log only records. After
//! the answer (from the cache or an upstream), the answer-stage rules check it the same way and
//! the request's placeholders are put back when a redacting rule asked for it. A shadow-mode
//! rule never changes anything: it reports what it would have done. A request whose content
//! cannot be inspected (pass-through, Files and Batch API calls, Realtime sessions, audio to
//! transcribe) is refused by a rule that says `uninspectable: block` ([`refuse_uninspectable`],
//! which the pass-through, files and realtime phases call too).
//!
//! A request no rule applies to costs nothing here: no parse. The answer stored in the cache
//! (and offered to shadow rules) is the upstream's, before the answer checks and the restore:
//! a hit is checked and restored for its own request.

use std::sync::Arc;

use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use switchyard_engine::guard::compile::{CompiledGuards, CompiledRule};
use switchyard_engine::guard::redact::RestoreMap;
use switchyard_engine::guard::rule::{GuardAction, GuardChecks, GuardMode, Stage, Uninspectable};
use switchyard_engine::model::{RouteId, TeamId, TokenId};

use crate::context::Ctx;
use crate::endpoint::Endpoint;
use crate::errors::GatewayError;
use crate::guard::check::{self, Facts, Found};
use crate::guard::stream::guard_stream;
use crate::guard::text::{self, Piece, Side};
use crate::guard::whole::EndCheck;
use crate::guard::window::AnswerWindow;
use crate::shadow::compare::json_mode_asked;
use crate::snapshot::View;
use crate::state::AppState;

/// What the request's guard leaves for its answer.
pub struct AnswerGuard {
    guards: Arc<CompiledGuards>,
    /// The answer-stage rules that apply (positions in `guards`).
    rules: Vec<usize>,
    /// The request's redactions, when a redacting rule asked for them to be put back.
    restore: Option<Arc<RestoreMap>>,
    /// The request asked for JSON mode (the answer's `json_schema` checks apply).
    json_asked: bool,
}

/// Checks the request against the rules that apply to it; `Err` when one blocks it. `None`:
/// nothing to do for the answer either (boxed: the request's future holds it across the proxy
/// phase).
pub async fn request(
    state: &AppState,
    ctx: &mut Ctx<'_>,
) -> Result<Option<Box<AnswerGuard>>, GatewayError> {
    let view = ctx.view;
    let guards = view.snapshot.guards();
    if guards.rules().is_empty() {
        return Ok(None);
    }
    let scope = (
        ctx.route.map(|r| r.id),
        ctx.token.team_id,
        Some(ctx.token.id),
    );
    refuse_uninspectable(state, guards, ctx.endpoint, scope, ctx.request_id)?;
    let (route, team, token) = scope;
    let asked: Vec<&CompiledRule> = match text::request_side(ctx.endpoint) {
        Side::Texts => guards
            .applicable(route, team, token, Stage::Request)
            .collect(),
        Side::Nothing | Side::Opaque => Vec::new(),
    };
    let rules: Vec<usize> = match text::answer_side(ctx.endpoint) {
        Side::Texts => guards
            .applicable(route, team, token, Stage::Response)
            .map(CompiledRule::position)
            .collect(),
        Side::Nothing | Side::Opaque => Vec::new(),
    };
    if asked.is_empty() && rules.is_empty() {
        return Ok(None);
    }
    let restore = if asked.is_empty() {
        None
    } else {
        Box::pin(check_request(state, ctx, &asked)).await?
    };
    let guards = Arc::clone(guards);
    let json_asked = !rules.is_empty() && json_mode_asked(ctx.endpoint, &ctx.body);
    Ok(Some(Box::new(AnswerGuard {
        guards,
        rules,
        restore,
        json_asked,
    })))
}

/// What a rule is matched by: the request's route, its key's team and its key.
pub type Scope = (Option<RouteId>, Option<TeamId>, Option<TokenId>);

/// Refuses a request of `endpoint` when a rule that applies to it would look at a side of it
/// the gateway cannot inspect (see [`Side::Opaque`]) and says `uninspectable: block`; a rule in
/// shadow mode only reports that it would have. Each such rule is reported once. Pass-through,
/// Files and Batch API calls and Realtime sessions are refused here before anything is sent.
pub fn refuse_uninspectable(
    state: &AppState,
    guards: &CompiledGuards,
    endpoint: Endpoint,
    scope: Scope,
    request_id: &str,
) -> Result<(), GatewayError> {
    let (route, team, token) = scope;
    let sides = [
        (text::request_side(endpoint), Stage::Request),
        (text::answer_side(endpoint), Stage::Response),
    ];
    let mut seen: Vec<usize> = Vec::new();
    let mut refused = None;
    for (_, stage) in sides.iter().filter(|(side, _)| *side == Side::Opaque) {
        for rule in guards.applicable(route, team, token, *stage) {
            if rule.rule().uninspectable != Uninspectable::Block || seen.contains(&rule.position())
            {
                continue;
            }
            seen.push(rule.position());
            let found = Found {
                uninspectable: true,
                ..Found::default()
            };
            check::report(state, rule, *stage, &[], &found, request_id);
            if rule.rule().mode == GuardMode::Enforce && refused.is_none() {
                refused = Some(blocked(rule, false));
            }
        }
    }
    refused.map_or(Ok(()), Err)
}

/// Runs the request-stage rules in order over the request's texts (each sees what the ones
/// before it redacted); the body is rewritten once when a text changed.
async fn check_request(
    state: &AppState,
    ctx: &mut Ctx<'_>,
    rules: &[&CompiledRule],
) -> Result<Option<Arc<RestoreMap>>, GatewayError> {
    let pieces = text::request_texts(ctx.endpoint, &ctx.body);
    let mut texts: Vec<String> = pieces.iter().map(|p| p.text.clone()).collect();
    let tools = text::request_tools(ctx.endpoint, &ctx.body);
    let sized = rules.iter().any(|r| {
        let checks = &r.rule().checks;
        checks.max_input_tokens.is_some() || checks.max_messages.is_some()
    });
    let size = sized.then(|| {
        (
            input_tokens(ctx),
            text::message_count(ctx.endpoint, &ctx.body),
        )
    });
    let facts = Facts {
        size,
        tools: &tools,
        json_answer: None,
        scanned: false,
    };
    let mut map = RestoreMap::new();
    let mut restore = false;
    for rule in rules {
        let found = check::run(state, ctx.view, rule, Stage::Request, &texts, &facts).await;
        check::report(state, rule, Stage::Request, &texts, &found, ctx.request_id);
        if !found.hit() {
            continue;
        }
        match rule.effective_action() {
            GuardAction::Block => return Err(blocked(rule, false)),
            GuardAction::Redact => {
                for (text, findings) in texts.iter_mut().zip(&found.findings) {
                    if !findings.is_empty() {
                        *text = map.redact(text, findings);
                    }
                }
                restore |= rule.rule().restore;
            }
            GuardAction::Log => {}
        }
    }
    if !map.is_empty() {
        rewrite(ctx, &pieces, &texts)?;
    }
    Ok((restore && !map.is_empty()).then(|| Arc::new(map)))
}

/// The gateway's estimate of the request's input tokens (its neutral form's: characters / 4
/// over its text, plus a fixed amount per media part); a body that does not parse: its texts'.
fn input_tokens(ctx: &Ctx<'_>) -> u64 {
    if let Some(chat) = &ctx.chat {
        return chat.estimate_input_tokens();
    }
    match super::route::parse(ctx) {
        Ok(chat) => chat.estimate_input_tokens(),
        Err(_) => {
            let texts = text::request_texts(ctx.endpoint, &ctx.body);
            (texts.iter().map(|p| p.text.chars().count()).sum::<usize>() / 4) as u64
        }
    }
}

fn blocked(rule: &CompiledRule, answer: bool) -> GatewayError {
    GatewayError::GuardrailBlocked {
        rule: rule.rule().name.clone(),
        answer,
    }
}

/// The body with its changed texts spliced in, read again (the model's and the stream flag's
/// byte ranges moved), and translated again when a member of another protocol may serve it.
fn rewrite(ctx: &mut Ctx<'_>, pieces: &[Piece], texts: &[String]) -> Result<(), GatewayError> {
    let changes: Vec<(&Piece, String)> = pieces
        .iter()
        .zip(texts)
        .filter(|(p, t)| p.text != **t)
        .map(|(p, t)| (p, t.clone()))
        .collect();
    let body = Bytes::from(text::splice(&ctx.body, &changes));
    let gemini = matches!(
        ctx.endpoint,
        Endpoint::GeminiGenerate | Endpoint::GeminiCountTokens
    );
    let path_model = gemini.then(|| (ctx.inspected.model.clone(), ctx.inspected.stream));
    let path_model = path_model.as_ref().map(|(m, s)| (m.as_str(), *s));
    let inspected = super::receive::inspect(ctx.endpoint, &ctx.headers, &body, path_model)
        .map_err(|_| {
            GatewayError::InvalidRequest("the redacted request could not be read".into())
        })?;
    ctx.body = body;
    ctx.inspected = inspected;
    if ctx.chat.is_some() {
        super::route::translate_again(ctx);
    }
    Ok(())
}

/// The answer under the answer-stage rules and with the request's placeholders put back: a plain
/// answer checked whole (a block answers the refusal instead), a stream through the rules'
/// window. An error answer is left as it is.
pub async fn answer(
    state: &Arc<AppState>,
    ctx: &mut Ctx<'_>,
    guard: AnswerGuard,
    response: Response,
) -> Response {
    if !response.status().is_success() {
        return response;
    }
    if ctx.inspected.stream {
        return stream_answer(state, ctx, guard, response);
    }
    let asked = Asked {
        view: ctx.view,
        endpoint: ctx.endpoint,
        request_id: ctx.request_id,
    };
    plain_answer(state, asked, guard, response).await
}

/// What a plain answer's checks need of its request (the context itself is not shared across
/// the checks' awaits).
struct Asked<'a> {
    view: &'a View,
    endpoint: Endpoint,
    request_id: &'a str,
}

fn stream_answer(
    state: &Arc<AppState>,
    ctx: &Ctx<'_>,
    guard: AnswerGuard,
    response: Response,
) -> Response {
    let has = |p: &usize, what: fn(&GuardChecks) -> bool| {
        guard
            .guards
            .rule_at(*p)
            .is_some_and(|r| what(&r.rule().checks))
    };
    let scanning: Vec<usize> = guard
        .rules
        .iter()
        .copied()
        .filter(|p| has(p, GuardChecks::scans_text))
        .collect();
    let tools: Vec<usize> = guard
        .rules
        .iter()
        .copied()
        .filter(|p| has(p, |c| c.tools.is_some()))
        .collect();
    let end = EndCheck::of(
        state,
        ctx.view,
        &guard.guards,
        &guard.rules,
        guard.json_asked,
        ctx.request_id,
    );
    if scanning.is_empty() && tools.is_empty() && end.is_none() && guard.restore.is_none() {
        return response;
    }
    let mut window = AnswerWindow::new(
        Arc::clone(state),
        guard.guards,
        &scanning,
        guard.restore,
        ctx.request_id,
    )
    .with_tools(&tools);
    if end.is_some() {
        window = window.keeping_text();
    }
    let (parts, body) = response.into_parts();
    Response::from_parts(parts, guard_stream(body, ctx.endpoint, window, end))
}

async fn plain_answer(
    state: &AppState,
    ctx: Asked<'_>,
    guard: AnswerGuard,
    response: Response,
) -> Response {
    let protocol = ctx.endpoint.protocol();
    let (mut parts, body) = response.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
        return GatewayError::UpstreamInvalidAnswer("the answer could not be read".into())
            .into_response(protocol);
    };
    let pieces = text::answer_texts(ctx.endpoint, &bytes);
    let mut texts: Vec<String> = pieces.iter().map(|p| p.text.clone()).collect();
    let tools = text::answer_tools(ctx.endpoint, &bytes);
    let joined = guard.json_asked.then(|| texts.concat());
    let facts = Facts {
        size: None,
        tools: &tools,
        json_answer: joined.as_deref(),
        scanned: false,
    };
    let mut redactor = RestoreMap::new();
    for rule in guard.rules.iter().filter_map(|p| guard.guards.rule_at(*p)) {
        let found = check::run(state, ctx.view, rule, Stage::Response, &texts, &facts).await;
        check::report(state, rule, Stage::Response, &texts, &found, ctx.request_id);
        if !found.hit() {
            continue;
        }
        match rule.effective_action() {
            GuardAction::Block => return blocked(rule, true).into_response(protocol),
            GuardAction::Redact => {
                for (text, findings) in texts.iter_mut().zip(&found.findings) {
                    if !findings.is_empty() {
                        *text = redactor.redact(text, findings);
                    }
                }
            }
            GuardAction::Log => {}
        }
    }
    if let Some(map) = &guard.restore {
        for text in &mut texts {
            *text = map.restore(text);
        }
    }
    let changes: Vec<(&Piece, String)> = pieces
        .iter()
        .zip(texts)
        .filter(|(p, t)| p.text != *t)
        .collect();
    if changes.is_empty() {
        return Response::from_parts(parts, Body::from(bytes));
    }
    parts.headers.remove(http::header::CONTENT_LENGTH);
    let body = text::splice(&bytes, &changes);
    Response::from_parts(parts, Body::from(body))
}
