//! Provider presets and the built-in price catalog at one proxy: a channel named by its preset
//! reaches the preset's protocol, and its usage is priced from the catalog unless the
//! operator's own price covers the model, or the catalog is switched off.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;
use switchyard_mock_upstream::MockUpstream;

/// Channel `up` from preset `openai`, at the mock upstream; route `m` serves `gpt-4o-mini`.
fn config(url: &str, extra: &str) -> String {
    format!(
        "channels:\n  - {{ name: up, preset: openai, base_url: \"{url}/v1\", credentials: [k] }}\nroutes:\n  - model_pattern: m\n    members:\n      - {{ channel: up, upstream_model: gpt-4o-mini }}\n{extra}"
    )
}

/// The spend metric of route `m` on channel `up`, in micro-USD (`None`: nothing priced).
fn spent(proxy: &Proxy) -> Option<u64> {
    let metrics = proxy.state.metrics.render();
    let prefix = "switchyard_spend_micro_usd_total{route=\"m\",channel=\"up\"} ";
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(prefix))
        .map(|value| value.parse().unwrap())
}

/// One chat request: its (prompt, completion) tokens.
async fn one_request(proxy: &Proxy) -> (u64, u64) {
    let reply = post(proxy, "/v1/chat/completions", CHAT).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let usage = &reply.json()["usage"];
    (
        usage["prompt_tokens"].as_u64().unwrap(),
        usage["completion_tokens"].as_u64().unwrap(),
    )
}

#[tokio::test]
async fn a_preset_channels_usage_is_priced_from_the_catalog_unless_the_operator_prices_it() {
    let upstream = MockUpstream::start().await.unwrap();
    let url = upstream.base_url();

    // The catalog: gpt-4o-mini at 0.15 USD in, 0.60 USD out per million tokens.
    let proxy = start(&config(&url, "")).await;
    let (input, output) = one_request(&proxy).await;
    let pico = u128::from(input) * 150_000 + u128::from(output) * 600_000;
    let micros = u64::try_from(pico.div_ceil(1_000_000)).unwrap();
    assert!(micros > 0);
    assert_eq!(spent(&proxy), Some(micros), "priced from the catalog");

    // The operator's price wins: 1 USD per million each way.
    let priced = "prices:\n  - { channel: up, model_pattern: '*', input_per_million: 1, output_per_million: 1 }\n";
    let proxy = start(&config(&url, priced)).await;
    let (input, output) = one_request(&proxy).await;
    assert_eq!(spent(&proxy), Some(input + output), "the operator's price");

    // The catalog switched off: unpriced.
    let off = "settings:\n  price_catalog: false\n";
    let proxy = start(&config(&url, off)).await;
    one_request(&proxy).await;
    assert_eq!(spent(&proxy), None, "unpriced without the catalog");
}

#[tokio::test]
async fn a_channel_written_out_to_another_url_stays_unpriced() {
    let upstream = MockUpstream::start().await.unwrap();
    // Field by field, no preset, and not at OpenAI's URL: the catalog does not know it (at
    // https://api.openai.com/v1 it would: `catalog::price_family`'s unit test).
    let yaml = config(&upstream.base_url(), "").replace("preset: openai", "provider: openai");
    let proxy = start(&yaml).await;
    one_request(&proxy).await;
    assert_eq!(spent(&proxy), None);
}
