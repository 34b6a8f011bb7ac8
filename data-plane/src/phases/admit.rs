//! Admit: the key's, its team's, the route's, its tags' and its end user's limits take the
//! request, or refuse it.

use switchyard_engine::{Limit, Token};

use crate::admission::{self, Held};
use crate::context::Ctx;
use crate::errors::GatewayError;
use crate::record::Trail;
use crate::state::AppState;

/// Admits the request when every hard limit of its key, its team and its route has room: the
/// trail holds the limits taken (none when there are none) and the rate-limit headers either
/// way; a refusal is the error the client gets.
pub async fn admit(state: &AppState, ctx: &mut Ctx<'_>) -> Result<(), GatewayError> {
    ctx.estimate = admission::estimate(ctx.body.len(), ctx.inspected.max_output_tokens);
    let model = Some(ctx.inspected.model.as_str()).filter(|m| !m.is_empty());
    let route = ctx.route.map(|r| r.id);
    let snapshot = &ctx.view.snapshot;
    let who = snapshot
        .subject_limits()
        .attribution(&ctx.inspected.tags, ctx.inspected.end_user.as_deref());
    let limits = admission::client_limits(snapshot, ctx.token, route, model, who);
    admit_under(state, ctx.token, limits, ctx.estimate, &mut ctx.trail).await
}

/// Tells the control plane (with the next usage batch) that the hard `limit` refused, once per
/// window on this proxy: it notifies when a limit starts refusing.
fn report_refusing(state: &AppState, limit: &Limit) {
    let Some(usage) = &state.usage else {
        return;
    };
    let now = switchyard_state::unix_ms();
    let window_start = limit.key.bounds(now).0;
    // One report per limit and window: an each-end-user limit's, whichever end user it refused
    // (the report names no end user, and their number does not grow the buffer).
    let mut key = limit.key;
    if key.scope.attributed() {
        key.scope_id = 0;
    }
    usage.record_refusing(key, window_start, now, || {
        let view = state.views.load_full()?;
        let rule = view.snapshot.limits().iter().find(|r| r.limit.key == key)?;
        Some(rule.id)
    });
}

/// Admits a request of `token` under `limits` with a token estimate of `estimate`: the trail
/// holds the limits taken and the rate-limit headers either way.
pub async fn admit_under(
    state: &AppState,
    token: &Token,
    limits: Vec<Limit>,
    estimate: u64,
    trail: &mut Trail,
) -> Result<(), GatewayError> {
    if limits.is_empty() {
        return Ok(());
    }
    let (outcome, held) = Held::admit(&state.store, limits, estimate).await;
    trail.rate = admission::RateHeaders::of(&outcome);
    match held {
        Ok(held) => {
            for crossed in admission::soft_crossed(held.limits(), &outcome) {
                state.metrics.limit(&crossed.key, false);
                tracing::warn!(
                    token = %token.name,
                    limit = %crossed.key.name(),
                    value = crossed.value,
                    "soft limit crossed"
                );
            }
            trail.admitted = Some(held);
            Ok(())
        }
        Err(refused) => {
            state.metrics.limit(&refused.limit.key, true);
            report_refusing(state, &refused.limit);
            Err(refused.error())
        }
    }
}
