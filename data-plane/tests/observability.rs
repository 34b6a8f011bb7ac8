//! What operators see after real traffic: every labelled metric family, token usage matching
//! exactly what the upstream reported (plain, streamed, passed through and translated), and the
//! live gauges.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;
use http::Method;
use serde_json::Value;
use switchyard_mock_upstream::{Behavior, Matcher, MockUpstream};

fn metric(page: &str, series: &str) -> u64 {
    page.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|v| v.strip_prefix(' ')))
        .unwrap_or_else(|| panic!("no series {series} in:\n{page}"))
        .trim()
        .parse::<f64>()
        .unwrap() as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_after_real_traffic_carry_route_channel_token_and_exact_usage() {
    let up = MockUpstream::start().await.unwrap();
    up.on(Matcher::any(), Behavior::ok().cached_tokens(7));
    let yaml = format!(
        "channels:\n{}{}routes:\n  - model_pattern: m\n    members:\n      - {{ channel: oa, upstream_model: up }}\n  - model_pattern: via-claude\n    members:\n      - {{ channel: an, upstream_model: up }}\ntokens:\n  - name: the-app\n    token: {TOKEN}\n",
        channel("oa", &up.base_url(), &["ka"]),
        channel("an", &up.base_url(), &["kb"]).replace("provider: openai", "provider: anthropic"),
    );
    let proxy = start(&yaml).await;

    // Plain answers, passed through and translated: usage as the upstream reported it.
    let plain = post(
        &proxy,
        "/v1/chat/completions",
        r#"{"model":"m","messages":[{"role":"user","content":"hello there"}]}"#,
    )
    .await;
    assert_eq!(plain.status, 200, "{}", plain.body);
    let usage = plain.json()["usage"].clone();
    let (input, output) = (
        usage["prompt_tokens"].as_u64().unwrap(),
        usage["completion_tokens"].as_u64().unwrap(),
    );
    assert_eq!(usage["prompt_tokens_details"]["cached_tokens"], 7);
    let translated = post(
        &proxy,
        "/v1/chat/completions",
        r#"{"model":"via-claude","messages":[{"role":"user","content":"hello there"}]}"#,
    )
    .await;
    assert_eq!(translated.status, 200, "{}", translated.body);
    let t_usage = translated.json()["usage"].clone();
    assert_eq!(t_usage["prompt_tokens_details"]["cached_tokens"], 7);

    // A translated stream (OpenAI client, Anthropic upstream): usage from its events.
    let streamed = post(&proxy, "/v1/chat/completions", r#"{"model":"via-claude","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hello there"}]}"#).await;
    assert_eq!(streamed.status, 200);
    let last_usage: Value = streamed
        .body
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .collect::<Vec<_>>()
        .into_iter()
        .rfind(|v| v["usage"].is_object())
        .map(|v| v["usage"].clone())
        .expect("a usage chunk");

    let page = send(
        Method::GET,
        &format!("{}/metrics", proxy.url),
        None,
        Vec::new(),
        &[],
    )
    .await
    .body;
    assert_eq!(
        metric(
            &page,
            r#"switchyard_requests_total{endpoint="chat_completions",route="m",channel="oa",code="2xx"}"#
        ),
        1
    );
    assert_eq!(
        metric(
            &page,
            r#"switchyard_requests_total{endpoint="chat_completions",route="via-claude",channel="an",code="2xx"}"#
        ),
        2
    );
    assert_eq!(
        metric(
            &page,
            r#"switchyard_attempts_total{channel="an",outcome="success"}"#
        ),
        2
    );
    assert_eq!(
        metric(
            &page,
            r#"switchyard_tokens_total{route="m",channel="oa",token="the-app",kind="input"}"#
        ),
        input
    );
    assert_eq!(
        metric(
            &page,
            r#"switchyard_tokens_total{route="m",channel="oa",token="the-app",kind="output"}"#
        ),
        output
    );
    assert_eq!(
        metric(
            &page,
            r#"switchyard_tokens_total{route="m",channel="oa",token="the-app",kind="cached"}"#
        ),
        7
    );
    assert_eq!(
        metric(
            &page,
            r#"switchyard_tokens_total{route="via-claude",channel="an",token="the-app",kind="cached"}"#
        ),
        14,
        "7 from the plain answer and 7 from the stream"
    );
    assert_eq!(
        metric(
            &page,
            r#"switchyard_tokens_total{route="via-claude",channel="an",token="the-app",kind="output"}"#
        ),
        t_usage["completion_tokens"].as_u64().unwrap()
            + last_usage["completion_tokens"].as_u64().unwrap()
    );
    assert_eq!(
        metric(&page, r#"switchyard_channel_in_flight{channel="oa"}"#),
        0
    );
    assert_eq!(
        metric(&page, r#"switchyard_channel_breaker_open{channel="an"}"#),
        0
    );
    assert_eq!(metric(&page, "switchyard_snapshot_revision"), 1);
    assert!(page.contains("switchyard_snapshot_age_seconds "));
}
