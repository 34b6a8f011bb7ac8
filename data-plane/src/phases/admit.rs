//! Admit: the key's, its team's and the route's limits take the request, or refuse it.

use crate::admission::{self, Held};
use crate::context::Ctx;
use crate::errors::GatewayError;
use crate::state::AppState;

/// Admits the request when every hard limit of its key, its team and its route has room: the
/// trail holds the limits taken (none when there are none) and the rate-limit headers either
/// way; a refusal is the error the client gets.
pub async fn admit(state: &AppState, ctx: &mut Ctx<'_>) -> Result<(), GatewayError> {
    ctx.estimate = admission::estimate(ctx.body.len(), ctx.inspected.max_output_tokens);
    let limits = admission::client_limits(&ctx.view.snapshot, ctx.token, ctx.route.map(|r| r.id));
    if limits.is_empty() {
        return Ok(());
    }
    let (outcome, held) = Held::admit(&state.store, limits, ctx.estimate).await;
    ctx.trail.rate = admission::RateHeaders::of(&outcome);
    match held {
        Ok(held) => {
            for crossed in admission::soft_crossed(held.limits(), &outcome) {
                state.metrics.limit(&crossed.key, false);
                tracing::warn!(
                    token = %ctx.token.name,
                    limit = %crossed.key.name(),
                    value = crossed.value,
                    "soft limit crossed"
                );
            }
            ctx.trail.admitted = Some(held);
            Ok(())
        }
        Err(refused) => {
            state.metrics.limit(&refused.limit.key, true);
            Err(refused.error())
        }
    }
}
