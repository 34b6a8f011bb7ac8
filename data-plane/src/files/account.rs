//! A finished batch's usage, accounted once fleet-wide. The first `GET` that sees a batch
//! `completed` reads its output file from its channel (at most [`MAX_OUTPUT_BYTES`]), then
//! claims the batch in the shared state (one claim per batch, for [`CLAIM_TTL_MS`]): the proxy
//! whose claim wins records each answered request's usage, like a request's, under the key, its
//! team, the route of the request's model and the channel, priced with the channel's price for
//! the model. A proxy that lost the claim, or accounted already, remembers so and reads the
//! output no more. With the shared state away nothing is claimed: a later `GET` tries again.

use serde::Deserialize;
use serde_json::value::RawValue;
use switchyard_engine::Channel;
use switchyard_provider::{usage_text, Protocol, Usage};
use switchyard_state::unix_ms;

use super::caller::Caller;
use super::channel::{exchange, Call};
use crate::state::AppState;
use crate::usage::UsageKey;

/// The largest batch output the gateway reads to account it (a larger one is logged and left
/// unaccounted).
pub const MAX_OUTPUT_BYTES: usize = 256 << 20;

/// How long a batch's claim lives: longer than OpenAI keeps a batch's files.
pub const CLAIM_TTL_MS: u64 = 35 * 24 * 3_600_000;

/// One answered request of a batch's output, as far as accounting reads it.
#[derive(Deserialize)]
struct OutputLine<'a> {
    #[serde(borrow)]
    response: Option<Response<'a>>,
}

#[derive(Deserialize)]
struct Response<'a> {
    status_code: Option<u16>,
    #[serde(borrow)]
    body: Option<Body<'a>>,
}

#[derive(Deserialize)]
struct Body<'a> {
    model: Option<String>,
    #[serde(borrow)]
    usage: Option<&'a RawValue>,
}

/// Each successfully answered request's model and usage in a batch's output (lines that are no
/// answer, or failed, carry none).
pub fn answered(output: &[u8]) -> Vec<(String, Usage)> {
    output
        .split(|b| *b == b'\n')
        .filter_map(|line| serde_json::from_slice::<OutputLine<'_>>(line.trim_ascii()).ok())
        .filter_map(|line| {
            let response = line.response?;
            if !response
                .status_code
                .is_some_and(|s| (200..300).contains(&s))
            {
                return None;
            }
            let body = response.body?;
            let usage = body.usage.map(|u| usage_text(Protocol::OpenAi, u.get()))?;
            Some((body.model.unwrap_or_default(), usage))
        })
        .collect()
}

/// Accounts the completed batch `batch` (upstream id) of `channel`, whose output is the
/// upstream file `output`, once fleet-wide.
pub async fn completed(
    state: &AppState,
    caller: &Caller,
    channel: &Channel,
    batch: &str,
    output: &str,
) {
    let claim = format!("batch:{}:{batch}", channel.id);
    if state.batch_settled(&claim, false) {
        return;
    }
    let call = Call::bare(http::Method::GET, format!("/v1/files/{output}/content"));
    let reply = match exchange(state, &caller.view, channel, call, MAX_OUTPUT_BYTES).await {
        Ok(reply) if reply.status.is_success() => reply,
        Ok(reply) => {
            tracing::warn!(channel = %channel.name, status = reply.status.as_u16(), "a completed batch's output could not be read; its usage is accounted on a later read");
            return;
        }
        Err(e) => {
            tracing::warn!(channel = %channel.name, error = e.code(), "a completed batch's output could not be read; its usage is accounted on a later read");
            return;
        }
    };
    let now = unix_ms();
    match state
        .store
        .claim_once(&claim, now + CLAIM_TTL_MS, now)
        .await
    {
        Ok(true) => record(state, caller, channel, &answered(&reply.body)),
        Ok(false) => {}
        Err(e) => {
            tracing::warn!(error = %e, "a completed batch could not be claimed for accounting; a later read tries again");
            return;
        }
    }
    state.batch_settled(&claim, true);
}

/// Records each answered request as a request of the key on the channel.
fn record(state: &AppState, caller: &Caller, channel: &Channel, answered: &[(String, Usage)]) {
    let snapshot = &caller.view.snapshot;
    let team = caller
        .token
        .team_id
        .and_then(|id| snapshot.team(id))
        .map(|t| t.name.clone());
    for (model, usage) in answered {
        let route = snapshot
            .resolve_route(model)
            .map(|r| r.model_pattern.clone())
            .unwrap_or_default();
        let cost = snapshot
            .price(channel.id, model)
            .map(|p| p.cost_pico(usage.input_tokens, usage.output_tokens, usage.cached_tokens));
        if let Some(cost) = cost {
            state.metrics.spend(&route, &channel.name, cost);
        }
        state
            .metrics
            .usage(&route, &channel.name, &caller.token.name, usage);
        if let Some(reporter) = &state.usage {
            let key = UsageKey {
                token: caller.token.name.clone(),
                team: team.clone(),
                route,
                channel: channel.name.clone(),
                model: model.clone(),
            };
            reporter.record(key, *usage, cost);
        }
    }
    tracing::info!(channel = %channel.name, requests = answered.len(), "a completed batch's usage was accounted");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_answered_requests_with_usage_count() {
        let output = br#"{"custom_id":"a","response":{"status_code":200,"body":{"model":"m1","usage":{"prompt_tokens":10,"completion_tokens":5}}}}
{"custom_id":"b","response":{"status_code":400,"body":{"error":{"message":"bad"}}}}
not json
{"custom_id":"c","response":{"status_code":200,"body":{"model":"m2","usage":{"prompt_tokens":3,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":2}}}}}
{"custom_id":"d","response":null,"error":{"code":"x"}}
"#;
        let got = answered(output);
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].0, "m1");
        assert_eq!((got[0].1.input_tokens, got[0].1.output_tokens), (10, 5));
        assert_eq!(got[1].0, "m2");
        assert_eq!((got[1].1.input_tokens, got[1].1.cached_tokens), (3, 2));
    }
}
