//! A `moderation` guardrail's external check: the texts go to the rule's channel as one OpenAI
//! moderations request (`{"input": [...]}`), sent the way live traffic is (the same wire plan and
//! attempt, one credential of the channel, never the failover loop, no state, limit or usage).
//! A result flagged in one of the rule's categories (any category when it names none) is a
//! finding; no answer, another status or an answer that is not a moderation result gives no
//! verdict (the rule lets the request through, counted as an external failure).

use http::HeaderMap;
use serde_json::Value;
use switchyard_engine::guard::rule::ModerationCheck;
use switchyard_engine::SplitMix64;
use tokio::time::{Duration, Instant};

use crate::attempt::{Attempt, Outcome};
use crate::endpoint::{Endpoint, DEFAULT_MODERATION_MODEL};
use crate::guard::webhook::Verdict;
use crate::request::inspect_json_defaulting;
use crate::shadow_send::shadow_credential;
use crate::snapshot::View;
use crate::state::AppState;
use crate::wire::{plan, ClientRequest};

/// Asks the rule's channel to moderate `texts`.
pub async fn moderate(
    state: &AppState,
    view: &View,
    check: &ModerationCheck,
    texts: &[&str],
) -> Verdict {
    // A walk over the channels: only a moderation rule's request pays it.
    let Some(channel) = view.snapshot.channels().find(|c| c.name == check.channel) else {
        return Verdict::Failed("no_channel");
    };
    let Some(runtime) = view.channel_runtime(channel.id) else {
        return Verdict::Failed("no_channel");
    };
    let Some(credential) = runtime.credential(shadow_credential(channel, runtime)) else {
        return Verdict::Failed("no_credential");
    };
    let body = bytes::Bytes::from(serde_json::json!({ "input": texts }).to_string());
    let Ok(inspected) = inspect_json_defaulting(&body, DEFAULT_MODERATION_MODEL) else {
        return Verdict::Failed("unsendable");
    };
    let client = ClientRequest {
        endpoint: Endpoint::Moderations,
        inspected: &inspected,
        body: &body,
        query: None,
        chat: None,
    };
    let Ok(wire) = plan(&client, channel, DEFAULT_MODERATION_MODEL) else {
        return Verdict::Failed("unsendable");
    };
    let settings = &view.snapshot.settings;
    let headers = HeaderMap::new();
    let attempt = Attempt {
        client: state.client(),
        endpoint: Endpoint::Moderations,
        inspected: &inspected,
        upstream_model: DEFAULT_MODERATION_MODEL,
        call: &wire,
        client_headers: &headers,
        channel,
        runtime,
        credential,
        first_byte_timeout: Duration::from_millis(settings.first_byte_timeout_ms),
        idle_timeout: Duration::from_millis(settings.stream_idle_timeout_ms),
        deadline: Instant::now() + Duration::from_millis(settings.request_timeout_ms),
    };
    let mut rng = SplitMix64::new(state.next_seed());
    match Box::pin(attempt.run(&mut rng)).await {
        Outcome::Committed(committed) if committed.response.status.is_success() => {
            committed.answer.map_or(Verdict::Failed("body"), |answer| {
                flagged(&answer, &check.categories)
            })
        }
        _ => Verdict::Failed("upstream"),
    }
}

/// Whether a moderation answer flags one of `categories` (any category when empty).
fn flagged(answer: &[u8], categories: &[String]) -> Verdict {
    let Ok(value) = serde_json::from_slice::<Value>(answer) else {
        return Verdict::Failed("garbage");
    };
    let Some(results) = value.get("results").and_then(Value::as_array) else {
        return Verdict::Failed("garbage");
    };
    let hit = results.iter().any(|result| {
        if categories.is_empty() {
            return result.get("flagged").and_then(Value::as_bool) == Some(true);
        }
        categories.iter().any(|c| {
            result
                .get("categories")
                .and_then(|cats| cats.get(c))
                .and_then(Value::as_bool)
                == Some(true)
        })
    });
    if hit {
        Verdict::Block
    } else {
        Verdict::Allow
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_named_category_or_any_flag_is_a_finding() {
        let answer =
            br#"{"results":[{"flagged":true,"categories":{"violence":true,"hate":false}}]}"#;
        assert_eq!(flagged(answer, &[]), Verdict::Block);
        assert_eq!(flagged(answer, &["violence".into()]), Verdict::Block);
        assert_eq!(flagged(answer, &["hate".into()]), Verdict::Allow);
        assert_eq!(flagged(b"{}", &[]), Verdict::Failed("garbage"));
    }
}
