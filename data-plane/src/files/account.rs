//! A finished batch's usage, accounted once fleet-wide. The first `GET` that sees a batch
//! `completed` reads its output file from its channel (at most [`MAX_OUTPUT_BYTES`]), then
//! claims the batch in the shared state (one claim per batch, for [`CLAIM_TTL_MS`]): the proxy
//! whose claim wins records each answered request's usage, like a request's, under the key, its
//! team, the route of the request's model and the channel, priced with the channel's price for
//! the model, and charged to the key's, team's and route's token and spend limits. A proxy that
//! lost the claim, or accounted already, remembers so and reads the
//! output no more. With the shared state away nothing is claimed: a later `GET` tries again.

use serde::Deserialize;
use serde_json::value::RawValue;
use switchyard_engine::Channel;
use switchyard_provider::{usage_text, Protocol, Usage};
use switchyard_state::{unix_ms, Metric};

use super::caller::Caller;
use super::channel::{exchange, Call};
use crate::admission::client_limits;
use crate::state::AppState;
use crate::usage::UsageKey;
use switchyard_engine::subject::Attribution;

/// The largest batch output the gateway reads to account it (a larger one is logged and left
/// unaccounted).
pub const MAX_OUTPUT_BYTES: usize = 256 << 20;

/// How long a batch's claim lives: longer than OpenAI keeps a batch's files.
pub const CLAIM_TTL_MS: u64 = 35 * 24 * 3_600_000;

/// One answered request of a batch's output, as far as accounting reads it: OpenAI's
/// `response` (a status and the answer's body), or Anthropic's `result` (its type and the
/// message).
#[derive(Deserialize)]
struct OutputLine<'a> {
    #[serde(borrow)]
    response: Option<Response<'a>>,
    #[serde(borrow)]
    result: Option<MessageResult<'a>>,
}

#[derive(Deserialize)]
struct MessageResult<'a> {
    #[serde(rename = "type")]
    kind: Option<String>,
    #[serde(borrow)]
    message: Option<Body<'a>>,
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

/// Each successfully answered request's model and usage in a batch's output, in `protocol`'s
/// shape (lines that are no answer, or failed, carry none).
pub fn answered(output: &[u8], protocol: Protocol) -> Vec<(String, Usage)> {
    output
        .split(|b| *b == b'\n')
        .filter_map(|line| serde_json::from_slice::<OutputLine<'_>>(line.trim_ascii()).ok())
        .filter_map(|line| {
            let body = match protocol {
                Protocol::Anthropic => {
                    let result = line.result?;
                    if result.kind.as_deref() != Some("succeeded") {
                        return None;
                    }
                    result.message?
                }
                _ => {
                    let response = line.response?;
                    if !response
                        .status_code
                        .is_some_and(|s| (200..300).contains(&s))
                    {
                        return None;
                    }
                    response.body?
                }
            };
            let usage = body.usage.map(|u| usage_text(protocol, u.get()))?;
            Some((body.model.unwrap_or_default(), usage))
        })
        .collect()
}

/// A finished batch to account: its claim's name, where its results are read and their
/// protocol.
pub struct Finished {
    pub claim: String,
    pub results_path: String,
    pub protocol: Protocol,
}

/// Accounts the finished batch of `channel` once fleet-wide.
pub async fn completed(state: &AppState, caller: &Caller, channel: &Channel, finished: Finished) {
    let Finished {
        claim,
        results_path,
        protocol,
    } = finished;
    if state.batch_settled(&claim, false) {
        return;
    }
    let call = Call::bare(http::Method::GET, results_path);
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
        Ok(true) => record(state, caller, channel, &answered(&reply.body, protocol)),
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
    let now = unix_ms();
    for (model, usage) in answered {
        let resolved = snapshot.resolve_route(model);
        let route = resolved
            .map(|r| r.model_pattern.clone())
            .unwrap_or_default();
        // Batch traffic is charged `batch_price_percent` of the channel's price.
        let percent = u128::from(snapshot.settings.batch_price_percent);
        let cost = snapshot.price(channel.id, model).map(|p| {
            p.cost_pico(usage.input_tokens, usage.output_tokens, usage.cached_tokens) * percent
                / 100
        });
        if let Some(cost) = cost {
            state
                .metrics
                .spend(&route, &channel.name, team.as_deref(), cost);
        }
        // Charged to the key's, its team's and the route's token and spend limits, as a
        // request's usage is once it finished (the batch was admitted by nobody: nothing is
        // refused, the limits only count it).
        // (A batch's lines carry no attribution the gateway reads: no tag or end user limit.)
        let limits = client_limits(
            snapshot,
            &caller.token,
            resolved.map(|r| r.id),
            Some(model),
            Attribution::default(),
        );
        if !limits.is_empty() {
            let tokens = usage.input_tokens.saturating_add(usage.output_tokens);
            let tokens = i64::try_from(tokens).unwrap_or(i64::MAX);
            state
                .store
                .limit_settle(&limits, Metric::Tokens, tokens, now, now);
            if let Some(micros) = cost.map(|c| c.div_ceil(1_000_000)).filter(|m| *m > 0) {
                let micros = i64::try_from(micros).unwrap_or(i64::MAX);
                state
                    .store
                    .limit_settle(&limits, Metric::Spend, micros, now, now);
            }
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
        let got = answered(output, Protocol::OpenAi);
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].0, "m1");
        assert_eq!((got[0].1.input_tokens, got[0].1.output_tokens), (10, 5));
        assert_eq!(got[1].0, "m2");
        assert_eq!((got[1].1.input_tokens, got[1].1.cached_tokens), (3, 2));
        assert!(answered(output, Protocol::Anthropic).is_empty());
    }

    #[test]
    fn only_succeeded_message_results_count() {
        let output = br#"{"custom_id":"a","result":{"type":"succeeded","message":{"model":"c1","usage":{"input_tokens":7,"output_tokens":2,"cache_read_input_tokens":3}}}}
{"custom_id":"b","result":{"type":"errored","error":{"type":"error"}}}
{"custom_id":"c","result":{"type":"canceled"}}
"#;
        let got = answered(output, Protocol::Anthropic);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].0, "c1");
        assert_eq!(got[0].1.output_tokens, 2);
        assert!(got[0].1.input_tokens >= 7, "{:?}", got[0].1);
    }
}
