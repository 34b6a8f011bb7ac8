//! A proxied request's phases, in order, over its one context ([`Ctx`]): receive → route →
//! admit → guard (a block ends here) → cache (a hit ends here, its answer checked) → proxy ([`crate::failover`]) → finish, with the shadow
//! offer and the cache's store set up after the proxy and the log line written after the
//! answer. Receive makes the context; route, admit and proxy
//! take it by `&mut` and read the request's facts from it; finish takes what is left of it (the
//! trail and the model). An error before the proxy phase is the client's answer. A Realtime API
//! session's handshake runs receive, route and admit the same way, then opens its session
//! ([`crate::realtime`]) in place of the proxy phase.

pub(crate) mod admit;
mod cache;
pub(crate) mod finish;
pub(crate) mod guard;
pub mod passthrough;
pub(crate) mod receive;
mod route;
mod semantic;

use std::future::{poll_fn, Future};
use std::pin::pin;
use std::sync::Arc;

use axum::extract::Request;
use axum::response::Response;

use crate::context::{Arrival, Ctx};
use crate::errors::GatewayError;
use crate::failover::proxy;
use crate::realtime;
use crate::record::Trail;
use crate::shadow;
use crate::state::AppState;
use switchyard_provider::{Protocol, Usage};

/// Serves one proxied request from its arrival to its finish. `path_model` is a Gemini path's
/// model and stream flag.
pub async fn serve(
    state: Arc<AppState>,
    arrival: Arrival,
    path_model: Option<(String, bool)>,
    request: Request,
) -> Response {
    let path_model = path_model.as_ref().map(|(m, s)| (m.as_str(), *s));
    let view = state.views.load_full();
    let result = {
        // Pinned where it is and polled inside the request's span: moving it into
        // `Instrumented` would copy its whole state (the context, the phases' futures) again.
        let mut served = pin!(async {
            let view = view.as_ref().ok_or_else(GatewayError::not_ready)?;
            let mut ctx = receive::receive(&arrival, view, path_model, request).await?;
            let response = run(&state, &mut ctx).await?;
            let Ctx {
                trail, inspected, ..
            } = ctx;
            Ok::<_, GatewayError>((trail, inspected.model, response))
        });
        poll_fn(|cx| arrival.span.in_scope(|| served.as_mut().poll(cx))).await
    };
    finish_served(&state, arrival, result)
}

/// Finishes what the phases served; an error before anything was routed is answered with no
/// trail and no model named.
fn finish_served(
    state: &AppState,
    arrival: Arrival,
    result: Result<Served, GatewayError>,
) -> Response {
    let (trail, model, response) = match result {
        Ok(served) => served,
        Err(e) => {
            let trail = Box::new(Trail {
                error_code: Some(e.code()),
                ..Trail::default()
            });
            let response = e.into_response(arrival.endpoint.protocol());
            (trail, String::new(), response)
        }
    };
    finish::finish(state, arrival, response, trail, model)
}

/// What the phases served: the trail, the model asked for and the answer.
type Served = (Box<Trail>, String, Response);

/// Serves a Realtime API session's handshake: received (its key, the WebSocket handshake, the
/// model of its query), routed to members whose channel serves realtime sessions, admitted (the
/// limits taken stay held by the session until it ends), then opened upstream by the
/// [`realtime`] phase, which answers `101` and relays the session. Finished like any request:
/// its headers, its metrics and its log line (its usage is the session's, per response).
pub async fn serve_realtime(state: Arc<AppState>, arrival: Arrival, request: Request) -> Response {
    let view = state.views.load_full();
    let result = {
        let mut served = pin!(async {
            let view = view.as_ref().ok_or_else(GatewayError::not_ready)?;
            // A draining proxy closes its sessions: a new one would be closed as it opens.
            if state.draining.is_cancelled() {
                return Err(GatewayError::ShuttingDown);
            }
            let (mut ctx, upgrade) = realtime::receive(&arrival, view, request)?;
            route::route(&mut ctx)?;
            let scope = (
                ctx.route.map(|r| r.id),
                ctx.token.team_id,
                Some(ctx.token.id),
            );
            let guards = view.snapshot.guards();
            guard::refuse_uninspectable(&state, guards, arrival.endpoint, scope, ctx.request_id)?;
            realtime::keep_to_realtime_channels(&mut ctx);
            if let Err(refused) = admit::admit(&state, &mut ctx).await {
                ctx.trail.route = ctx.route.map(|r| (r.id, r.model_pattern.clone()));
                ctx.trail.error_code = Some(refused.code());
                name_client(&mut ctx);
                return Ok((
                    ctx.trail,
                    ctx.inspected.model,
                    refused.into_response(Protocol::OpenAi),
                ));
            }
            name_client(&mut ctx);
            let (Ok(response) | Err(response)) = realtime::open(&state, &mut ctx, upgrade).await;
            let Ctx {
                trail, inspected, ..
            } = ctx;
            Ok::<_, GatewayError>((trail, inspected.model, response))
        });
        poll_fn(|cx| arrival.span.in_scope(|| served.as_mut().poll(cx))).await
    };
    finish_served(&state, arrival, result)
}

/// The phases after receive: route, admit, proxy, and the shadow offer. A refused admission is
/// answered here (with its rate-limit headers, its route and its client named in the trail).
async fn run(state: &Arc<AppState>, ctx: &mut Ctx<'_>) -> Result<Response, GatewayError> {
    route::route(ctx)?;
    if let Err(refused) = admit::admit(state, ctx).await {
        ctx.trail.route = ctx.route.map(|r| (r.id, r.model_pattern.clone()));
        ctx.trail.error_code = Some(refused.code());
        name_client(ctx);
        return Ok(refused.into_response(ctx.endpoint.protocol()));
    }
    // Boxed, and only when the snapshot has guardrails: most requests never enter it.
    let guard = if ctx.view.snapshot.guards().rules().is_empty() {
        None
    } else {
        match Box::pin(guard::request(state, ctx)).await {
            Ok(guard) => guard,
            Err(refused) => {
                // Counted as a request with no tokens; nothing was looked up or sent.
                ctx.trail.usage = Some(Usage::default());
                ctx.trail.route = ctx.route.map(|r| (r.id, r.model_pattern.clone()));
                name_client(ctx);
                return Ok(refused.into_response(ctx.endpoint.protocol()));
            }
        }
    };
    // Boxed, as the proxy's: a request no rule covers leaves it at once.
    let store = match Box::pin(cache::lookup(state, ctx)).await {
        cache::Looked::Hit(response) => {
            let response = checked(state, ctx, guard, response).await;
            name_client(ctx);
            return Ok(response);
        }
        cache::Looked::Proxy(store) => store,
    };
    // Boxed: the failover's future (about 1.7 KB, the attempt in a box of its own) is moved
    // once, into its box, rather than being part of this future, which is itself moved into a
    // box by the edge: that copy is of this function's own states only.
    let response = Box::pin(proxy(state, ctx)).await;
    if ctx.trail.stream.is_some() {
        // A committed stream's first chunk has arrived (the relay sends it on at once): its
        // time to first token.
        let elapsed = ctx.started.elapsed();
        ctx.trail.first_token_ms = u64::try_from(elapsed.as_millis()).ok();
        let micros = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
        let (channel, model) = (&ctx.trail.final_channel, &ctx.trail.final_model);
        state.metrics.time_to_first_token.observe_micros(
            [
                channel.as_deref().unwrap_or_default(),
                model.as_deref().unwrap_or_default(),
            ],
            micros,
        );
    }
    let response = checked(state, ctx, guard, response).await;
    offer_shadow(ctx);
    if let Some(store) = store {
        cache::keep(state, ctx, store);
    }
    name_client(ctx);
    Ok(response)
}

/// The answer under the request's answer guard, when it has one (boxed: most requests have
/// none).
async fn checked(
    state: &Arc<AppState>,
    ctx: &mut Ctx<'_>,
    guard: Option<Box<guard::AnswerGuard>>,
    response: Response,
) -> Response {
    match guard {
        None => response,
        Some(guard) => Box::pin(guard::answer(state, ctx, *guard, response)).await,
    }
}

/// When a shadow rule samples the request, a copy of it is kept and offered to the rules once
/// the request has finished (a stream: at its end), never waited for. A stream keeps its chunks
/// from here on (its body is not polled yet).
fn offer_shadow(ctx: &mut Ctx<'_>) {
    let view = ctx.view;
    if view.snapshot.shadows().is_empty()
        || !shadow::Candidate::wanted(view, ctx.endpoint, &ctx.inspected, ctx.seed)
    {
        return;
    }
    let trail = &mut ctx.trail;
    let stream = trail.stream.as_ref().map(|slot| slot.gather());
    let candidate = shadow::Candidate {
        view: Arc::clone(view),
        endpoint: ctx.endpoint,
        inspected: ctx.inspected.clone(),
        body: ctx.body.clone(),
        headers: ctx.headers.clone(),
        query: ctx.query.clone(),
        seed: ctx.seed,
        started: ctx.started,
        first_byte_ms: u64::try_from(ctx.started.elapsed().as_millis()).unwrap_or(u64::MAX),
        answer: trail.answer.clone(),
        stream,
    };
    trail.on_finish = Some(Box::new(move |state, finished| {
        candidate.offer(&state.shadows, &state.metrics, finished);
    }));
}

/// The trail names the request's key and its team, and takes its tags and end user.
fn name_client(ctx: &mut Ctx<'_>) {
    finish::name_client(ctx.view, ctx.token, &mut ctx.trail);
    ctx.trail.tags = std::mem::take(&mut ctx.inspected.tags);
    ctx.trail.end_user = ctx.inspected.end_user.take();
}
