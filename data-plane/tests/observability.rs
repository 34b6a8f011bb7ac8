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
    // Token names are counted once the operator protects `/metrics` with a credential.
    proxy.state.protect_metrics("scrape-secret");

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
        Some("scrape-secret"),
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
    // Each attempt's latency by channel and configured upstream model; time to first token
    // for the stream only (one, on `an`).
    assert_eq!(
        metric(
            &page,
            r#"switchyard_upstream_latency_seconds_count{channel="oa",model="up"}"#
        ),
        1
    );
    assert_eq!(
        metric(
            &page,
            r#"switchyard_upstream_latency_seconds_count{channel="an",model="up"}"#
        ),
        2
    );
    assert_eq!(
        metric(
            &page,
            r#"switchyard_time_to_first_token_seconds_count{channel="an",model="up"}"#
        ),
        1
    );
    assert!(
        !page.contains(r#"switchyard_time_to_first_token_seconds_count{channel="oa""#),
        "a plain answer has no time to first token:\n{page}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cooling_and_sticky_gauges_count_what_the_state_holds() {
    let (a, b) = (
        MockUpstream::start().await.unwrap(),
        MockUpstream::start().await.unwrap(),
    );
    let yaml = format!(
        "settings:\n  channel_retry_times: 0\n  cooldown_seconds: 60\n  sticky_enabled: true\nchannels:\n{}{}routes:\n  - model_pattern: m\n    members:\n      - {{ channel: a, upstream_model: up, priority: 10 }}\n      - {{ channel: b, upstream_model: up, priority: 0 }}\ntokens:\n  - name: the-app\n    token: {TOKEN}\n",
        channel("a", &a.base_url(), &["ka"]),
        channel("b", &b.base_url(), &["kb"]),
    );
    let proxy = start(&yaml).await;
    let gauges = || async {
        let page = send(
            Method::GET,
            &format!("{}/metrics", proxy.url),
            None,
            Vec::new(),
            &[],
        )
        .await
        .body;
        (
            metric(&page, "switchyard_members_cooling"),
            metric(&page, "switchyard_sticky_bindings"),
        )
    };
    assert_eq!(gauges().await, (0, 0));
    // A 503 from `a` cools its member (the request fails over to `b`, and the conversation,
    // keyed by its first message without a session header, binds there).
    a.on(Matcher::any(), Behavior::status(503).times(1));
    let reply = post(&proxy, "/v1/chat/completions", CHAT).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(gauges().await, (1, 1));
    // Two sessions bind; a third request in one of them adds none.
    for session in ["s-1", "s-2", "s-1"] {
        let reply = post_with(
            &proxy,
            "/v1/chat/completions",
            CHAT,
            &[("x-session-id", session)],
        )
        .await;
        assert_eq!(reply.status, 200, "{}", reply.body);
    }
    assert_eq!(gauges().await, (1, 3));
}

/// What an OpenAI upstream streams when asked for usage: `"usage":null` in every chunk, then a
/// usage-only chunk (`"choices":[]`) before `[DONE]`.
const ASKED: &str = concat!(
    "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Hi\"},\"finish_reason\":null}],\"usage\":null}\n\n",
    ": keep-alive\n\n",
    "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":null}\n\n",
    "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[],\"usage\":{\"prompt_tokens\":11,\"completion_tokens\":5,\"total_tokens\":16,\"prompt_tokens_details\":{\"cached_tokens\":2}}}\n\n",
    "data: [DONE]\n\n",
);

/// The same answer as OpenAI streams it when nobody asked for usage.
const UNASKED: &str = concat!(
    "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Hi\"},\"finish_reason\":null}]}\n\n",
    ": keep-alive\n\n",
    "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
    "data: [DONE]\n\n",
);

/// An upstream stream whose last event has no blank line after it (the body simply ends): the
/// gateway, which holds back whole events while it removes the usage chunk a client did not ask
/// for, still gives that last event to the client as it came.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_ending_inside_its_last_event_still_delivers_it_when_usage_is_stripped() {
    let up = MockUpstream::start().await.unwrap();
    up.on(
        Matcher::any(),
        Behavior::ok().body(ASKED.strip_suffix("\n\n").unwrap()),
    );
    let yaml = format!(
        "channels:\n{}routes:\n  - model_pattern: m\n    members:\n      - {{ channel: oa, upstream_model: up-model }}\ntokens:\n  - name: the-app\n    token: {TOKEN}\n",
        channel("oa", &up.base_url(), &["ka"]),
    );
    let proxy = start(&yaml).await;
    let reply = post(&proxy, "/v1/chat/completions", CHAT_STREAM).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.body, UNASKED.strip_suffix("\n\n").unwrap());
}

/// A default OpenAI stream (no `stream_options.include_usage`, as LangChain sends it) to an
/// OpenAI upstream used to be accounted as 0 tokens: the gateway did not ask for usage. Now the
/// upstream is asked, the client gets exactly the stream it would have got without the gateway
/// (no usage chunk, no `"usage":null`), and a client that asked gets the upstream's bytes as
/// they came. Only the model and `stream_options` change in what the upstream receives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_openai_stream_is_accounted_even_when_the_client_did_not_ask_for_usage() {
    let up = MockUpstream::start().await.unwrap();
    up.on(Matcher::any(), Behavior::ok().body(ASKED));
    let yaml = format!(
        "channels:\n{}routes:\n  - model_pattern: m\n    members:\n      - {{ channel: oa, upstream_model: up-model }}\ntokens:\n  - name: the-app\n    token: {TOKEN}\n",
        channel("oa", &up.base_url(), &["ka"]),
    );
    let proxy = start(&yaml).await;
    let messages = r#""messages":[{"role":"user","content":"hi"}]"#;
    let cases = [
        // (client body, what the upstream must receive, what the client must get)
        (
            format!(r#"{{"model":"m", "stream":true,{messages}}}"#),
            format!(
                r#"{{"model":"up-model", "stream":true,"stream_options":{{"include_usage":true}},{messages}}}"#
            ),
            UNASKED,
        ),
        (
            format!(r#"{{"stream": true ,"stream_options":null,"model":"m",{messages}}}"#),
            format!(
                r#"{{"stream": true ,"stream_options":{{"include_usage":true}},"model":"up-model",{messages}}}"#
            ),
            UNASKED,
        ),
        (
            format!(
                r#"{{"model":"m","stream":true,"stream_options":{{"include_usage":false,"x":1}},{messages}}}"#
            ),
            format!(
                r#"{{"model":"up-model","stream":true,"stream_options":{{"include_usage":true,"x":1}},{messages}}}"#
            ),
            UNASKED,
        ),
        (
            format!(
                r#"{{"model":"m","stream":true,"stream_options":{{"include_usage":true}},{messages}}}"#
            ),
            format!(
                r#"{{"model":"up-model","stream":true,"stream_options":{{"include_usage":true}},{messages}}}"#
            ),
            ASKED,
        ),
    ];
    for (i, (client_body, upstream_body, client_gets)) in cases.iter().enumerate() {
        let reply = post(&proxy, "/v1/chat/completions", client_body).await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        assert_eq!(reply.body, *client_gets, "case {i}: {client_body}");
        let sent = up.requests().last().unwrap().body.clone();
        assert_eq!(
            String::from_utf8_lossy(&sent),
            *upstream_body,
            "case {i}: {client_body}"
        );
    }

    // Every one of them is accounted with what the upstream reported.
    let page = send(
        Method::GET,
        &format!("{}/metrics", proxy.url),
        None,
        Vec::new(),
        &[],
    )
    .await
    .body;
    let n = cases.len() as u64;
    for (kind, each) in [("input", 11), ("output", 5), ("cached", 2)] {
        assert_eq!(
            metric(
                &page,
                &format!(r#"switchyard_tokens_total{{route="m",channel="oa",kind="{kind}"}}"#)
            ),
            each * n,
            "{kind}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_metrics_page_names_no_token_and_a_protected_one_needs_its_credential() {
    let up = MockUpstream::start().await.unwrap();
    let yaml = format!(
        "channels:\n{}routes:\n  - model_pattern: m\n    members:\n      - {{ channel: oa, upstream_model: up }}\ntokens:\n  - name: alice-at-acme\n    token: {TOKEN}\n",
        channel("oa", &up.base_url(), &["ka"]),
    );
    let scrape = |proxy: &Proxy, credential: Option<&'static str>| {
        let url = format!("{}/metrics", proxy.url);
        async move { send(Method::GET, &url, credential, Vec::new(), &[]).await }
    };
    // By default: open, the usage counted by route, channel and kind, no token named.
    let open = start(&yaml).await;
    let reply = post(&open, "/v1/chat/completions", CHAT).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let input = reply.json()["usage"]["prompt_tokens"].as_u64().unwrap();
    let page = scrape(&open, None).await;
    assert_eq!(page.status, 200);
    assert!(!page.body.contains("alice-at-acme"), "{}", page.body);
    assert!(!page.body.contains("token=\""), "{}", page.body);
    let series = r#"switchyard_tokens_total{route="m",channel="oa",kind="input"}"#;
    assert_eq!(metric(&page.body, series), input);

    // Opted in: the page needs the credential, and then names the token.
    let protected = start(&yaml).await;
    protected.state.protect_metrics("scrape-secret");
    let reply = post(&protected, "/v1/chat/completions", CHAT).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    for credential in [None, Some("scrape-secreT"), Some(TOKEN)] {
        let refused = scrape(&protected, credential).await;
        assert_eq!(refused.status, 401, "{credential:?}");
        assert!(!refused.body.contains("switchyard_"), "{}", refused.body);
        assert_eq!(
            refused.json()["error"]["code"],
            "invalid_metrics_credential"
        );
    }
    let page = scrape(&protected, Some("scrape-secret")).await;
    assert_eq!(page.status, 200);
    let series =
        r#"switchyard_tokens_total{route="m",channel="oa",token="alice-at-acme",kind="input"}"#;
    assert_eq!(metric(&page.body, series), input);
}
