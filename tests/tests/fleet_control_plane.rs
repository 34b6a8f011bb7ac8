//! The control plane and the data plane together, as real processes: what is
//! written through the control plane's REST API is served by proxies that follow its gRPC
//! snapshot stream; changes reach them promptly; they outlive the control plane (in memory, and
//! across their own restart from `SWITCHYARD_SNAPSHOT_CACHE`) and follow it again when it is
//! back; explain on the control plane names the member a proxy really used.
//!
//! Each test has its own database (`#[sqlx::test]` creates it from `DATABASE_URL`; the control
//! plane applies the migrations itself, as in production), its own ports (every process listens
//! on 127.0.0.1:0 and the test reads the address from its "listening" log line; a restarted
//! control plane reuses the addresses of the first one) and its own mock upstreams. Every wait
//! polls for a condition with a generous deadline; every process is killed on drop.
// Helpers outside #[test] fns are test code too: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use switchyard_e2e::control::{
    assert_served_by, base, chat_for, database_url, http_call, metric_sum, unique, Bins,
    ControlPlane, Proxy, Upstream, MODEL, PATIENCE, POLL, PROMPTLY,
};
use switchyard_e2e::traffic::{settle, Traffic};
use switchyard_mock_upstream::MockUpstream;

const BINS: Bins = switchyard_e2e::bins!();

/// A file removed on drop.
struct TempFile(PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
        let _ = std::fs::remove_file(format!("{}.tmp", self.0.display()));
    }
}

// ---------------------------------------------------------------------------------------------
// Tests

#[sqlx::test(migrations = false)]
async fn a_route_made_through_rest_is_served_by_a_connected_proxy(
    _pool: PgPoolOptions,
    opts: PgConnectOptions,
) {
    let cp = ControlPlane::start(BINS, &database_url(&opts)).await;
    let base = base(&cp).await;
    let proxy = Proxy::start_ready(&cp, None).await;

    // The token was created through REST a moment ago: once the proxy's snapshot holds it, the
    // request is served by the only member.
    let reply = proxy
        .chat_until(&base.token, PROMPTLY, "the route and token", |r| {
            r.status != 401 && r.status != 404
        })
        .await;
    assert_served_by(&reply, &base.a);
    base.a.assert_last_request(&base.token);
    assert_eq!(base.a.mock.hits(), 1);

    // Only tokens of the control plane are accepted.
    let stranger = proxy.chat("sk-not-a-switchyard-token").await;
    assert_eq!(stranger.status, 401, "{}", stranger.body);
    assert_eq!(stranger.error_code(), "invalid_api_key");
    assert_eq!(base.a.mock.hits(), 1);
}

#[sqlx::test(migrations = false)]
async fn rest_changes_reach_the_proxy_promptly(_pool: PgPoolOptions, opts: PgConnectOptions) {
    let cp = ControlPlane::start(BINS, &database_url(&opts)).await;
    let base = base(&cp).await;
    let proxy = Proxy::start_ready(&cp, None).await;
    let first = proxy
        .chat_until(&base.token, PROMPTLY, "the first route", |r| {
            r.status == 200
        })
        .await;
    assert_served_by(&first, &base.a);

    // A second channel, as a member in a higher tier: the proxy moves to it.
    let b = Upstream::create(&cp, "chan-b").await;
    b.member(&cp, base.route, 10, true).await;
    let moved = proxy
        .chat_until(&base.token, PROMPTLY, "the higher-priority member", |r| {
            r.channel() == b.name
        })
        .await;
    assert_served_by(&moved, &b);
    b.assert_last_request(&base.token);

    // The operator disables that channel: back to `a`, and `b` hears nothing more.
    cp.patch(
        &format!("/api/v1/channels/{}", b.channel_id),
        json!({"status": "disabled"}),
    )
    .await;
    let back = proxy
        .chat_until(&base.token, PROMPTLY, "the disabled channel", |r| {
            r.channel() == base.a.name
        })
        .await;
    assert_served_by(&back, &base.a);
    let b_hits = b.mock.hits();
    for _ in 0..5 {
        assert_served_by(&proxy.chat(&base.token).await, &base.a);
    }
    assert_eq!(b.mock.hits(), b_hits);

    // `a`'s member disabled too: nothing can serve.
    cp.patch(
        &format!("/api/v1/members/{}", base.member_a),
        json!({"enabled": false}),
    )
    .await;
    let none = proxy
        .chat_until(&base.token, PROMPTLY, "no eligible member", |r| {
            r.status == 503
        })
        .await;
    assert_eq!(none.error_code(), "no_eligible_member", "{}", none.body);

    // Re-enabled channel `b`: served again, from `b`.
    cp.patch(
        &format!("/api/v1/channels/{}", b.channel_id),
        json!({"status": "enabled"}),
    )
    .await;
    let again = proxy
        .chat_until(&base.token, PROMPTLY, "the re-enabled channel", |r| {
            r.status == 200
        })
        .await;
    assert_served_by(&again, &b);

    // The route deleted: the model is gone.
    let deleted = cp
        .call("DELETE", &format!("/api/v1/routes/{}", base.route), None)
        .await;
    assert!(
        deleted.status == 200 || deleted.status == 204,
        "{}",
        deleted.body
    );
    let gone = proxy
        .chat_until(&base.token, PROMPTLY, "the deleted route", |r| {
            r.status == 404
        })
        .await;
    assert_eq!(gone.error_code(), "model_not_found", "{}", gone.body);

    // The token revoked: refused.
    let token_id = cp.call("GET", "/api/v1/tokens", None).await.json()["data"][0]["id"]
        .as_i64()
        .unwrap();
    cp.patch(
        &format!("/api/v1/tokens/{token_id}"),
        json!({"enabled": false}),
    )
    .await;
    let refused = proxy
        .chat_until(&base.token, PROMPTLY, "the revoked token", |r| {
            r.status == 401
        })
        .await;
    assert_eq!(refused.error_code(), "invalid_api_key", "{}", refused.body);
}

#[sqlx::test(migrations = false)]
async fn the_proxy_outlives_the_control_plane_and_follows_it_after_a_restart(
    _pool: PgPoolOptions,
    opts: PgConnectOptions,
) {
    let mut cp = ControlPlane::start(BINS, &database_url(&opts)).await;
    let base = base(&cp).await;
    let proxy = Proxy::start_ready(&cp, None).await;
    let first = proxy
        .chat_until(&base.token, PROMPTLY, "the first route", |r| {
            r.status == 200
        })
        .await;
    assert_served_by(&first, &base.a);

    // The control plane stops gracefully (SIGTERM ends the snapshot streams).
    let status = cp.process.terminate().await;
    assert!(status.success(), "control plane exit: {status:?}");
    assert_eq!(
        http_call(cp.http, "GET", "/healthz", None, &[])
            .await
            .ok()
            .map(|r| r.status),
        None,
        "the control plane still answers"
    );

    // The proxy keeps serving its last snapshot, and says it is ready.
    for _ in 0..10 {
        assert_served_by(&proxy.chat(&base.token).await, &base.a);
    }
    assert_eq!(proxy.status("/readyz").await, 200);
    base.a.assert_last_request(&base.token);

    // Back on the same database and addresses: a change made after the restart reaches the
    // proxy through its reconnected stream.
    let cp = cp.restart().await;
    let b = Upstream::create(&cp, "chan-b").await;
    b.member(&cp, base.route, 10, true).await;
    let moved = proxy
        .chat_until(
            &base.token,
            PATIENCE,
            "a change made after the control plane restarted",
            |r| r.channel() == b.name,
        )
        .await;
    assert_served_by(&moved, &b);
    b.assert_last_request(&base.token);
}

#[sqlx::test(migrations = false)]
async fn a_restarted_proxy_serves_from_its_snapshot_cache_while_the_control_plane_is_down(
    _pool: PgPoolOptions,
    opts: PgConnectOptions,
) {
    let cache = TempFile(std::env::temp_dir().join(format!("{}.json", unique("cache"))));
    let mut cp = ControlPlane::start(BINS, &database_url(&opts)).await;
    let base = base(&cp).await;
    let mut first_proxy = Proxy::start_ready(&cp, Some(&cache.0)).await;
    let served = first_proxy
        .chat_until(&base.token, PROMPTLY, "the first route", |r| {
            r.status == 200
        })
        .await;
    assert_served_by(&served, &base.a);

    // The proxy wrote what it serves to its cache (owner-only: it holds credentials).
    let deadline = Instant::now() + PROMPTLY;
    loop {
        let revision = std::fs::read(&cache.0)
            .ok()
            .and_then(|bytes| serde_json::from_slice::<Value>(&bytes).ok())
            .and_then(|cached| cached["revision"].as_u64());
        if revision.is_some_and(|r| r >= base.revision) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the snapshot cache never reached revision {} (has {revision:?})",
            base.revision
        );
        tokio::time::sleep(POLL).await;
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&cache.0).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "snapshot cache mode {mode:o}");
    }

    // The control plane dies (SIGKILL), then the proxy (SIGKILL).
    cp.process.kill();
    first_proxy.process.kill();

    // Without the cache, a proxy cannot be ready now: nothing to serve.
    let mut uncached = Proxy::start(&cp, None).await;
    assert_eq!(uncached.status("/healthz").await, 200);
    assert_ne!(
        uncached.status("/readyz").await,
        200,
        "ready without any snapshot"
    );
    assert!(uncached.process.is_running());
    drop(uncached);

    // With it, the restarted proxy is ready and serves the cached routes, channel and token.
    let proxy = Proxy::start_ready(&cp, Some(&cache.0)).await;
    for _ in 0..5 {
        assert_served_by(&proxy.chat(&base.token).await, &base.a);
    }
    base.a.assert_last_request(&base.token);

    // The control plane returns: the proxy (which started from the cached revision) follows a
    // change made now.
    let cp = cp.restart().await;
    let b = Upstream::create(&cp, "chan-b").await;
    b.member(&cp, base.route, 10, true).await;
    let moved = proxy
        .chat_until(
            &base.token,
            PATIENCE,
            "a change made after the control plane came back",
            |r| r.channel() == b.name,
        )
        .await;
    assert_served_by(&moved, &b);
}

#[sqlx::test(migrations = false)]
async fn explain_names_the_member_the_proxy_used(_pool: PgPoolOptions, opts: PgConnectOptions) {
    let cp = ControlPlane::start(BINS, &database_url(&opts)).await;
    let base = base(&cp).await;
    // A second member, in a higher tier but disabled: `a` is the only eligible member.
    let b = Upstream::create(&cp, "chan-b").await;
    let (member_b, revision) = b.member(&cp, base.route, 10, false).await;
    let mut proxy = Proxy::start_ready(&cp, None).await;

    for (expected, other, upstream) in [
        (base.member_a, member_b, &base.a),
        (member_b, base.member_a, &b),
    ] {
        let revision = if expected == base.member_a {
            revision
        } else {
            // Swap: `b` enabled, then `a` disabled; again exactly one eligible member.
            cp.patch(
                &format!("/api/v1/members/{member_b}"),
                json!({"enabled": true}),
            )
            .await;
            cp.patch(
                &format!("/api/v1/members/{}", base.member_a),
                json!({"enabled": false}),
            )
            .await
        };
        let explained = cp.explain_at(MODEL, revision).await;
        assert_eq!(explained["outcome"], "selected", "{explained}");
        assert_eq!(explained["route"]["id"], base.route, "{explained}");
        let candidates = explained["candidates"].as_array().unwrap();
        assert_eq!(candidates.len(), 2, "{explained}");
        let eligible: Vec<&Value> = candidates
            .iter()
            .filter(|c| c["eligible"] == true)
            .collect();
        assert_eq!(eligible.len(), 1, "{explained}");
        let excluded = candidates.iter().find(|c| c["member_id"] == other).unwrap();
        assert_eq!(
            excluded["reasons"],
            json!(["member_disabled"]),
            "{explained}"
        );

        // The proxy (once its snapshot has the same change) serves that very member.
        let reply = proxy
            .chat_until(&base.token, PROMPTLY, "the only eligible member", |r| {
                r.status == 200 && r.channel() == upstream.name
            })
            .await;
        assert_served_by(&reply, upstream);
        let request_id = reply.header("x-switchyard-request-id").unwrap();
        let used = proxy.final_member(&request_id).await;
        assert_eq!(used, expected, "the proxy used member {used}");
        assert_eq!(
            explained["member_id"], used,
            "explain selected {} but the proxy used member {used}: {explained}",
            explained["member_id"]
        );
        assert_eq!(explained["channel_id"], upstream.channel_id, "{explained}");
        assert_eq!(eligible[0]["member_id"], used, "{explained}");
        assert_eq!(
            eligible[0]["channel"],
            upstream.name.as_str(),
            "{explained}"
        );
        assert_eq!(
            eligible[0]["upstream_model"],
            upstream.upstream_model.as_str(),
            "{explained}"
        );
        assert_eq!(eligible[0]["probability"], 1.0, "{explained}");
        upstream.assert_last_request(&base.token);
    }
}

/// Usage accounting end to end: requests in each of the three protocols, to upstreams of each
/// of the three protocols, plain and streamed — and an OpenAI stream whose client did not ask
/// for usage (no `stream_options`, LangChain's default), which used to count 0 tokens towards an
/// OpenAI upstream; what `GET /api/v1/usage` finally answers is exactly what the upstreams'
/// answers reported (requests, input, output and cached tokens), and the cost is exactly the
/// price of that usage where a price matches (cached input at its own price, or at the input
/// price when it has none) and `null` — unpriced, not free — where none does.
#[sqlx::test(migrations = false)]
async fn usage_totals_match_what_the_upstreams_reported_in_every_protocol(
    _pool: PgPoolOptions,
    opts: PgConnectOptions,
) {
    use switchyard_mock_upstream::{Behavior, Matcher};

    let cp = ControlPlane::start(BINS, &database_url(&opts)).await;
    // One mock speaks all three protocols; its answers report 3 cached tokens each.
    let mock = MockUpstream::start().await.unwrap();
    mock.on(Matcher::any(), Behavior::ok().cached_tokens(3));
    let models = ["usage-openai", "usage-anthropic", "usage-gemini"];
    for (provider, model) in ["openai", "anthropic", "gemini"].into_iter().zip(models) {
        let base_url = match provider {
            "openai" => format!("{}/v1", mock.base_url()),
            _ => mock.base_url(),
        };
        let (channel, _) = cp
            .create(
                "/api/v1/channels",
                json!({"name": format!("usage-{provider}"), "provider": provider,
                       "base_url": base_url}),
            )
            .await;
        let channel_id = channel["id"].as_i64().unwrap();
        cp.create(
            &format!("/api/v1/channels/{channel_id}/credentials"),
            json!({"secret": format!("sk-usage-{provider}-0123456789")}),
        )
        .await;
        // OpenAI and Anthropic members are priced (patterns that match their upstream model);
        // Gemini's is not.
        let price = match provider {
            "openai" => Some(json!({"channel_id": channel_id, "model_pattern": "up-*",
                "input_per_million": "2.5", "output_per_million": 10,
                "cached_input_per_million": "1.25"})),
            "anthropic" => Some(
                json!({"channel_id": channel_id, "model_pattern": "up-anthropic",
                "input_per_million": 3, "output_per_million": "15"}),
            ),
            _ => None,
        };
        if let Some(price) = price {
            cp.create("/api/v1/prices", price).await;
        }
        let (route, _) = cp
            .create("/api/v1/routes", json!({"model_pattern": model}))
            .await;
        cp.create(
            &format!("/api/v1/routes/{}/members", route["id"]),
            json!({"channel_id": channel_id, "upstream_model": format!("up-{provider}")}),
        )
        .await;
    }
    let (token, revision) = cp.create("/api/v1/tokens", json!({"name": "app"})).await;
    let token = token["token"].as_str().unwrap().to_owned();
    let proxy = Proxy::start_ready(&cp, None).await;
    // The token (and every route before it) has reached the proxy.
    proxy.wait_revision(revision).await;

    let bearer = format!("Bearer {token}");
    // `Some(asked)`: a stream whose client asked for usage or not.
    let openai = |model: &str, stream: Option<bool>| {
        let mut body =
            json!({"model": model, "messages": [{"role": "user", "content": "hello usage"}]});
        if let Some(asked) = stream {
            body["stream"] = json!(true);
            if asked {
                body["stream_options"] = json!({"include_usage": true});
            }
        }
        (
            "/v1/chat/completions".to_owned(),
            body,
            "authorization",
            bearer.clone(),
        )
    };
    let anthropic = |model: &str, stream: bool| {
        let body = json!({"model": model, "max_tokens": 64, "stream": stream,
                          "messages": [{"role": "user", "content": "hello usage"}]});
        ("/v1/messages".to_owned(), body, "x-api-key", token.clone())
    };
    let gemini = |model: &str, stream: bool| {
        let path = if stream {
            format!("/v1beta/models/{model}:streamGenerateContent?alt=sse")
        } else {
            format!("/v1beta/models/{model}:generateContent")
        };
        let body = json!({"contents": [{"role": "user", "parts": [{"text": "hello usage"}]}]});
        (path, body, "x-goog-api-key", token.clone())
    };
    let mut sent = 0;
    for model in models {
        let requests = [
            openai(model, None),
            openai(model, Some(true)),
            openai(model, Some(false)),
            anthropic(model, false),
            anthropic(model, true),
            gemini(model, false),
            gemini(model, true),
        ];
        for (path, body, header, key) in requests {
            // The proxy may not hold the last route yet: retry until it serves it.
            let deadline = Instant::now() + PROMPTLY;
            loop {
                let reply = http_call(
                    proxy.addr,
                    "POST",
                    &path,
                    Some(&body.to_string()),
                    &[(header, &key)],
                )
                .await
                .unwrap();
                if reply.status == 200 {
                    assert!(!reply.body.contains("error"), "{path}: {}", reply.body);
                    break;
                }
                assert!(
                    reply.status == 404 && Instant::now() < deadline,
                    "{path} {body}: {} {}",
                    reply.status,
                    reply.body
                );
                tokio::time::sleep(POLL).await;
            }
            sent += 1;
        }
    }

    let reported = mock.reported_usage();
    assert_eq!(reported.answers, sent, "every answer reported its usage");
    assert_eq!(reported.cached_tokens, 3 * sent);
    let want = (
        reported.answers as i64,
        reported.input_tokens as i64,
        reported.output_tokens as i64,
        reported.cached_tokens as i64,
    );
    let deadline = Instant::now() + PATIENCE;
    loop {
        let reply = cp
            .call(
                "GET",
                "/api/v1/usage?from=2000-01-01T00:00:00Z&to=2100-01-01T00:00:00Z&group_by=route",
                None,
            )
            .await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        let usage = reply.json();
        let t = &usage["total"];
        let total = (
            t["requests"].as_i64().unwrap(),
            t["input_tokens"].as_i64().unwrap(),
            t["output_tokens"].as_i64().unwrap(),
            t["cached_tokens"].as_i64().unwrap(),
        );
        if total == want {
            // Every route's share arrived too: seven requests each (three protocols, two modes,
            // and the OpenAI stream that did not ask for usage).
            let groups = usage["groups"].as_array().unwrap();
            // Micro-USD per million tokens: input, cached input, output.
            let prices = [
                Some((2_500_000u128, 1_250_000u128, 10_000_000u128)),
                Some((3_000_000, 3_000_000, 15_000_000)),
                None,
            ];
            for (model, price) in models.into_iter().zip(prices) {
                let group = groups
                    .iter()
                    .find(|g| g["key"] == model)
                    .unwrap_or_else(|| panic!("no usage for {model}: {usage}"));
                assert_eq!(group["requests"], 7, "{usage}");
                let figure = |name: &str| u128::from(group[name].as_u64().unwrap());
                let (input, cached, output) = (
                    figure("input_tokens"),
                    figure("cached_tokens"),
                    figure("output_tokens"),
                );
                match price {
                    Some((per_input, per_cached, per_output)) => {
                        let pico = (input - cached) * per_input
                            + cached * per_cached
                            + output * per_output;
                        assert_eq!(
                            group["cost_usd"],
                            json!(switchyard_engine::limit::format_pico_usd(pico)),
                            "{model}: {usage}"
                        );
                        assert_eq!(group["unpriced_requests"], 0, "{model}");
                    }
                    None => {
                        assert_eq!(
                            group["cost_usd"],
                            Value::Null,
                            "{model}: unpriced, not free"
                        );
                        assert_eq!(group["unpriced_requests"], 7, "{model}");
                    }
                }
            }
            break;
        }
        assert!(
            Instant::now() < deadline,
            "usage total {total:?}, the upstreams reported {want:?}: {usage}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A shadow rule made through REST, served by two proxy processes that follow the control
/// plane over gRPC: every client gets the live answer and nothing of the shadow, and the report
/// the control plane aggregates from the proxies' usage batches says what the two mock members
/// were scripted to do (the target slower, failing about 30 %, with other words).
#[sqlx::test(migrations = false)]
async fn a_shadow_rule_through_two_proxy_processes_reports_what_the_mocks_did(
    _pool: PgPoolOptions,
    opts: PgConnectOptions,
) {
    let cp = ControlPlane::start(BINS, &database_url(&opts)).await;
    let mut channels = Vec::new();
    for (name, url) in [
        ("live", "mock://sim?content=the%20live%20answer%20is%20here"),
        (
            "cand",
            "mock://sim?latency_ms=300&failure_rate=0.3&content=a%20different%20reply%20entirely",
        ),
    ] {
        let (channel, _) = cp
            .create(
                "/api/v1/channels",
                json!({"name": name, "provider": "mock", "base_url": url}),
            )
            .await;
        let id = channel["id"].as_i64().unwrap();
        cp.create(
            "/api/v1/prices",
            json!({"channel_id": id, "model_pattern": "*", "input_per_million": "1",
                   "output_per_million": "2"}),
        )
        .await;
        channels.push(id);
    }
    let (route, _) = cp
        .create("/api/v1/routes", json!({"model_pattern": MODEL}))
        .await;
    cp.create(
        &format!("/api/v1/routes/{}/members", route["id"]),
        json!({"channel_id": channels[0], "upstream_model": "live-model"}),
    )
    .await;
    let (token, _) = cp.create("/api/v1/tokens", json!({"name": "app"})).await;
    let token = token["token"].as_str().unwrap().to_owned();
    let (rule, _) = cp
        .create(
            "/api/v1/shadows",
            json!({"name": "trial", "model_pattern": MODEL, "target_channel_id": channels[1],
                   "target_model": "cand-model", "sample_percent": 50, "max_rps": 1000}),
        )
        .await;
    let rule = rule["id"].as_i64().unwrap();

    let proxies = [
        Proxy::start_ready(&cp, None).await,
        Proxy::start_ready(&cp, None).await,
    ];
    for proxy in &proxies {
        proxy
            .chat_until(&token, PROMPTLY, "the route, token and rule", |r| {
                r.status == 200
            })
            .await;
    }
    const REQUESTS: usize = 120;
    let mut client_ms = Vec::with_capacity(REQUESTS);
    for i in 0..REQUESTS {
        let sent = Instant::now();
        let reply = proxies[i % 2].chat(&token).await;
        client_ms.push(sent.elapsed().as_millis());
        // The client always gets the live answer, whole, and nothing of the shadow.
        assert_eq!(reply.status, 200, "{}", reply.body);
        assert_eq!(
            reply.json()["choices"][0]["message"]["content"],
            "the live answer is here"
        );
        assert_eq!(reply.channel(), "live");
        assert!(
            !reply.head.to_ascii_lowercase().contains("shadow"),
            "{}",
            reply.head
        );
        assert!(!reply.body.contains("different reply"), "{}", reply.body);
    }
    // Printed, never asserted: the client did not wait for the 300 ms target.
    client_ms.sort_unstable();
    eprintln!(
        "client latency through real proxies with the rule: median {} ms, max {} ms",
        client_ms[REQUESTS / 2],
        client_ms[REQUESTS - 1]
    );

    // Every copy sent and compared on both proxies.
    let deadline = Instant::now() + PATIENCE;
    while metric_sum(&proxies, "switchyard_shadow_pending").await > 0 {
        assert!(Instant::now() < deadline, "shadow copies still pending");
        tokio::time::sleep(POLL).await;
    }
    let ok = metric_sum(
        &proxies,
        "switchyard_shadow_requests_total{rule=\"trial\",outcome=\"success\"}",
    )
    .await;
    let failed = metric_sum(
        &proxies,
        "switchyard_shadow_requests_total{rule=\"trial\",outcome=\"failure\"}",
    )
    .await;
    let sampled = ok + failed;
    // About half of the requests (and the warm-up ones) were sampled: a wide band.
    assert!((30..=100).contains(&sampled), "{sampled} sampled at 50 %");
    assert!(failed > 0 && ok > 0, "{ok} succeeded, {failed} failed");

    // The comparisons travel with the usage batches over gRPC: the report catches up.
    let deadline = Instant::now() + PATIENCE;
    let report = loop {
        let reply = cp
            .call("GET", &format!("/api/v1/shadows/{rule}/report"), None)
            .await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        let report = reply.json();
        if report["pairs"] == sampled {
            break report;
        }
        assert!(
            Instant::now() < deadline,
            "the report holds {} pairs, the proxies compared {sampled}",
            report["pairs"]
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(report["live"]["requests"], sampled, "{report}");
    assert_eq!(report["live"]["succeeded"], sampled, "{report}");
    assert_eq!(report["shadow_side"]["succeeded"], ok, "{report}");
    let live_p50 = report["live"]["latency_p50_ms"].as_u64().unwrap();
    let shadow_p50 = report["shadow_side"]["latency_p50_ms"].as_u64().unwrap();
    assert!(
        shadow_p50 >= 300 && live_p50 < shadow_p50,
        "{live_p50} vs {shadow_p50}"
    );
    assert!(report["live"]["cost_per_1000_usd"].is_string(), "{report}");
    assert!(
        report["shadow_side"]["cost_per_1000_usd"].is_string(),
        "{report}"
    );
    let agreement = &report["agreement"];
    assert_eq!(agreement["compared"], ok, "{report}");
    assert_eq!(agreement["same_finish_reason"], 1.0, "{report}");
    assert_eq!(agreement["mean_similarity"], 0.0, "{report}");
    assert_eq!(report["stopped_reason"], Value::Null, "{report}");
}

/// `n` overlapping chats for `model` on each proxy (on both proxies together, each started
/// 100 ms after the one before: a proxy reserves concurrency slots from the fleet one claim at
/// a time, so simultaneous arrivals beyond the first wait for no claim); the statuses, per proxy.
async fn burst(proxies: &[Proxy], token: &str, model: &str, n: usize) -> Vec<Vec<u16>> {
    let mut tasks: Vec<Vec<_>> = proxies.iter().map(|_| Vec::new()).collect();
    for _ in 0..n {
        for (proxy, calls) in proxies.iter().zip(&mut tasks) {
            let (addr, token, model) = (proxy.addr, token.to_owned(), model.to_owned());
            calls.push(tokio::spawn(async move {
                chat_for(addr, &token, &model).await.status
            }));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut out = Vec::new();
    for calls in tasks {
        let mut statuses = Vec::new();
        for call in calls {
            statuses.push(call.await.unwrap());
        }
        out.push(statuses);
    }
    out
}

/// A limit changed through the admin API while its window is open binds on every proxy of a
/// fleet (two proxy processes sharing one Redis) as soon as the proxy has the new snapshot
/// (documented: a new revision normally arrives within a second): a day limit lowered below
/// what was used refuses within one allowance per proxy, raised admits at once, deleted admits
/// at once; a concurrency limit lowered refuses the requests beyond it, raised or deleted
/// admits them all — none of them waits for the window's end or a restart.
#[sqlx::test(migrations = false)]
async fn a_limit_patched_or_deleted_mid_window_binds_on_every_proxy_at_once(
    _pool: PgPoolOptions,
    opts: PgConnectOptions,
) {
    let redis = switchyard_e2e::redis_url();
    let prefix = unique("live-limits");
    let cp = ControlPlane::start(BINS, &database_url(&opts)).await;
    let mut routes = Vec::new();
    for (name, url, model) in [
        ("fast", "mock://sim", "fast-model"),
        ("slow", "mock://sim?latency_ms=1500", "slow-model"),
    ] {
        let (channel, _) = cp
            .create(
                "/api/v1/channels",
                json!({"name": name, "provider": "mock", "base_url": url}),
            )
            .await;
        let (route, _) = cp
            .create("/api/v1/routes", json!({"model_pattern": model}))
            .await;
        cp.create(
            &format!("/api/v1/routes/{}/members", route["id"]),
            json!({"channel_id": channel["id"], "upstream_model": "m"}),
        )
        .await;
        routes.push(route["id"].as_i64().unwrap());
    }
    let (token, _) = cp.create("/api/v1/tokens", json!({"name": "app"})).await;
    let token = token["token"].as_str().unwrap().to_owned();
    let (daily, _) = cp
        .create(
            "/api/v1/limits",
            json!({"scope": "route", "scope_id": routes[0], "metric": "requests",
                   "window": "day", "value": 50}),
        )
        .await;
    let daily = format!("/api/v1/limits/{}", daily["id"]);
    let (slots, _) = cp
        .create(
            "/api/v1/limits",
            json!({"scope": "route", "scope_id": routes[1], "metric": "concurrent",
                   "value": 10}),
        )
        .await;
    let slots = format!("/api/v1/limits/{}", slots["id"]);

    let mut proxies = Vec::new();
    for _ in 0..2 {
        let proxy = Proxy::start_with(&cp, None, Some((&redis, &prefix))).await;
        proxy.wait_ready().await;
        proxies.push(proxy);
    }
    // Each proxy sees the other's heartbeat: allowances are shared among the live proxies.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    for proxy in &proxies {
        for _ in 0..4 {
            let reply = chat_for(proxy.addr, &token, "fast-model").await;
            assert_eq!(reply.status, 200, "{}", reply.body);
        }
    }
    // What a proxy may still admit after its limit is lowered: the allowance it already holds
    // from the fleet under the old value (shared by two proxies). A claim asks for two
    // allowances; one made due while another is on its way is sent when that one lands, so a
    // proxy may hold up to three unused (the documented bound).
    let held = |old_value| 3 * switchyard_state::allowance(old_value, 2, 1);

    // Lowered from 50 to 3 with 8 used: refused on both proxies.
    let revision = cp.patch(&daily, json!({"value": 3})).await;
    for proxy in &proxies {
        proxy.wait_revision(revision).await;
        let mut admitted = 0;
        let refusal = loop {
            let reply = chat_for(proxy.addr, &token, "fast-model").await;
            if reply.status == 429 {
                break reply;
            }
            assert_eq!(reply.status, 200, "{}", reply.body);
            admitted += 1;
            assert!(
                admitted <= held(50),
                "lowered to 3 with 8 used, a proxy admitted {admitted} more"
            );
        };
        assert_eq!(
            refusal.error_code(),
            "rate_limit_exceeded",
            "{}",
            refusal.body
        );
        assert!(
            refusal.body.contains("limit of 3 requests per day"),
            "{}",
            refusal.body
        );
        for _ in 0..3 {
            assert_eq!(chat_for(proxy.addr, &token, "fast-model").await.status, 429);
        }
    }
    // Raised to 1000: admitted at once, on both.
    let revision = cp.patch(&daily, json!({"value": 1000})).await;
    for proxy in &proxies {
        proxy.wait_revision(revision).await;
        let reply = chat_for(proxy.addr, &token, "fast-model").await;
        assert_eq!(reply.status, 200, "raised to 1000: {}", reply.body);
    }
    // Lowered again, then deleted: admitted at once.
    let revision = cp.patch(&daily, json!({"value": 1})).await;
    for proxy in &proxies {
        proxy.wait_revision(revision).await;
        let mut refused = false;
        for _ in 0..=held(1000) {
            if chat_for(proxy.addr, &token, "fast-model").await.status == 429 {
                refused = true;
                break;
            }
        }
        assert!(refused, "lowered to 1, never refused");
    }
    let deleted = cp.call("DELETE", &daily, None).await;
    assert_eq!(deleted.status, 204, "{}", deleted.body);
    let revision = deleted.revision();
    for proxy in &proxies {
        proxy.wait_revision(revision).await;
        let reply = chat_for(proxy.addr, &token, "fast-model").await;
        assert_eq!(reply.status, 200, "the limit was deleted: {}", reply.body);
    }

    // Concurrency: three at once on each proxy fit the 10 slots.
    for statuses in burst(&proxies, &token, "slow-model", 3).await {
        assert_eq!(statuses, [200, 200, 200]);
    }
    // Lowered to 1: the fleet admits at most the limit plus one allowance per proxy, and each
    // proxy refuses some of its three.
    let revision = cp.patch(&slots, json!({"value": 1})).await;
    for proxy in &proxies {
        proxy.wait_revision(revision).await;
    }
    let statuses = burst(&proxies, &token, "slow-model", 3).await;
    let admitted = statuses.iter().flatten().filter(|s| **s == 200).count();
    assert!(admitted <= 3, "{statuses:?}");
    for on_proxy in &statuses {
        assert!(on_proxy.contains(&429), "lowered to 1 slot: {statuses:?}");
        assert!(
            on_proxy.iter().all(|s| *s == 200 || *s == 429),
            "{statuses:?}"
        );
    }
    // Raised to 10: all admitted again.
    let revision = cp.patch(&slots, json!({"value": 10})).await;
    for proxy in &proxies {
        proxy.wait_revision(revision).await;
    }
    for statuses in burst(&proxies, &token, "slow-model", 3).await {
        assert_eq!(statuses, [200, 200, 200], "raised to 10");
    }
    // Lowered to 1 and deleted: all admitted.
    cp.patch(&slots, json!({"value": 1})).await;
    let deleted = cp.call("DELETE", &slots, None).await;
    assert_eq!(deleted.status, 204, "{}", deleted.body);
    let revision = deleted.revision();
    for proxy in &proxies {
        proxy.wait_revision(revision).await;
    }
    for statuses in burst(&proxies, &token, "slow-model", 3).await {
        assert_eq!(statuses, [200, 200, 200], "the limit was deleted");
    }
}

/// A price patched through the admin API while requests flow through two proxies prices every
/// request each proxy serves once it has the new snapshot (documented: normally within a second)
/// at the new price; deleted, what follows is unpriced — `null` cost, not 0. The control plane's
/// usage report says so per token: each phase of the traffic, on each proxy, has its own.
#[sqlx::test(migrations = false)]
async fn a_price_patched_or_deleted_mid_traffic_prices_what_follows_on_every_proxy(
    _pool: PgPoolOptions,
    opts: PgConnectOptions,
) {
    let cp = ControlPlane::start(BINS, &database_url(&opts)).await;
    let base = base(&cp).await;
    let (price, _) = cp
        .create(
            "/api/v1/prices",
            json!({"channel_id": base.a.channel_id, "model_pattern": "*",
                   "input_per_million": "2", "output_per_million": "8"}),
        )
        .await;
    let price = format!("/api/v1/prices/{}", price["id"]);
    const PHASES: [&str; 5] = ["old", "changing", "new", "deleting", "unpriced"];
    let mut tokens = Vec::new();
    let mut revision = 0;
    for phase in PHASES {
        let mut per_proxy = Vec::new();
        for i in 0..2 {
            let (token, at) = cp
                .create("/api/v1/tokens", json!({"name": format!("{phase}-{i}")}))
                .await;
            per_proxy.push(token["token"].as_str().unwrap().to_owned());
            revision = at;
        }
        tokens.push(per_proxy);
    }
    let proxies = [
        Proxy::start_ready(&cp, None).await,
        Proxy::start_ready(&cp, None).await,
    ];
    for proxy in &proxies {
        proxy.wait_revision(revision).await;
    }

    let traffic = Traffic::start(&proxies, tokens);
    traffic.more(5).await;
    // Patched mid-traffic: the requests sent once both proxies hold it are at the new price.
    traffic.enter(1).await;
    let revision = cp
        .patch(
            &price,
            json!({"input_per_million": "5", "output_per_million": "20"}),
        )
        .await;
    settle(&proxies, &traffic, revision).await;
    traffic.enter(2).await;
    traffic.more(5).await;
    // Deleted mid-traffic: what follows is unpriced.
    traffic.enter(3).await;
    let deleted = cp.call("DELETE", &price, None).await;
    assert_eq!(deleted.status, 204, "{}", deleted.body);
    settle(&proxies, &traffic, deleted.revision()).await;
    traffic.enter(4).await;
    traffic.more(5).await;
    let answers = traffic.stop().await;
    for sent in answers.iter().flatten() {
        assert_eq!(sent.channel, base.a.name, "{}", sent.body);
    }
    // Each answer is one call the mock recorded.
    assert_eq!(
        base.a.mock.hits(),
        answers.iter().map(Vec::len).sum::<usize>()
    );

    // Every answer reaches the usage report, under its phase's and proxy's token.
    let sent = |phase: usize, proxy: usize| {
        answers[proxy].iter().filter(|s| s.phase == phase).count() as u64
    };
    let deadline = Instant::now() + PATIENCE;
    let usage = loop {
        let reply = cp
            .call(
                "GET",
                "/api/v1/usage?from=2000-01-01T00:00:00Z&to=2100-01-01T00:00:00Z&group_by=token",
                None,
            )
            .await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        let usage = reply.json();
        let reported = |name: &str| {
            usage["groups"]
                .as_array()
                .unwrap()
                .iter()
                .find(|g| g["token"] == name)
                .map_or(0, |g| g["requests"].as_u64().unwrap())
        };
        let complete = PHASES.iter().enumerate().all(|(phase, name)| {
            (0..2).all(|proxy| reported(&format!("{name}-{proxy}")) == sent(phase, proxy))
        });
        if complete {
            break usage;
        }
        assert!(
            Instant::now() < deadline,
            "the usage report never caught up with what was sent: {usage}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let group = |name: String| {
        usage["groups"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["token"] == name.as_str())
            .unwrap_or_else(|| panic!("no usage for {name}: {usage}"))
            .clone()
    };
    // The figures priced are the ones the mock reported.
    let reported = base.a.mock.reported_usage();
    assert_eq!(
        (
            usage["total"]["input_tokens"].as_u64().unwrap(),
            usage["total"]["output_tokens"].as_u64().unwrap()
        ),
        (reported.input_tokens, reported.output_tokens),
        "{usage}"
    );
    // Micro-USD per million tokens (input, output) times tokens: pico-USD.
    let priced = |group: &Value, (input, output): (u128, u128)| {
        let tokens = |field: &str| u128::from(group[field].as_u64().unwrap());
        json!(switchyard_engine::limit::format_pico_usd(
            tokens("input_tokens") * input + tokens("output_tokens") * output
        ))
    };
    for proxy in 0..2 {
        let old = group(format!("old-{proxy}"));
        assert_eq!(
            old["cost_usd"],
            priced(&old, (2_000_000, 8_000_000)),
            "{old}"
        );
        assert_eq!(old["unpriced_requests"], 0, "{old}");
        let changing = group(format!("changing-{proxy}"));
        assert_eq!(changing["unpriced_requests"], 0, "{changing}");
        let new = group(format!("new-{proxy}"));
        assert_eq!(
            new["cost_usd"],
            priced(&new, (5_000_000, 20_000_000)),
            "proxy {proxy} did not price at the patched price: {new}"
        );
        assert_eq!(new["unpriced_requests"], 0, "{new}");
        let unpriced = group(format!("unpriced-{proxy}"));
        assert_eq!(
            unpriced["cost_usd"],
            Value::Null,
            "proxy {proxy}: unpriced, not free: {unpriced}"
        );
        assert_eq!(
            unpriced["unpriced_requests"], unpriced["requests"],
            "{unpriced}"
        );
    }
}

/// A shadow rule disabled, then deleted, through the admin API while requests flow through two
/// proxies: once each proxy has the change (documented: normally within a second) and the
/// copies it had already queued are sent, the target's mock receives no further copy from
/// either; re-enabled, both copy again. Clients are served by the live member throughout.
#[sqlx::test(migrations = false)]
async fn a_shadow_rule_disabled_or_deleted_mid_traffic_stops_copies_from_every_proxy(
    _pool: PgPoolOptions,
    opts: PgConnectOptions,
) {
    let cp = ControlPlane::start(BINS, &database_url(&opts)).await;
    let base = base(&cp).await;
    let target = Upstream::create(&cp, "shadow-target").await;
    let (rule, revision) = cp
        .create(
            "/api/v1/shadows",
            json!({"name": "live-trial", "model_pattern": MODEL,
                   "target_channel_id": target.channel_id,
                   "target_model": target.upstream_model, "sample_percent": 100,
                   "max_rps": 1000}),
        )
        .await;
    let rule = format!("/api/v1/shadows/{}", rule["id"]);
    let proxies = [
        Proxy::start_ready(&cp, None).await,
        Proxy::start_ready(&cp, None).await,
    ];
    for proxy in &proxies {
        proxy.wait_revision(revision).await;
    }
    let traffic = Traffic::start(&proxies, vec![vec![base.token.clone(); 2]]);
    let since = traffic.counts();
    assert_copying(&proxies, &target, &[0.0, 0.0], 0, &base.token).await;

    let revision = cp.patch(&rule, json!({"enabled": false})).await;
    let (copied, hits) = assert_copies_stop(&proxies, &traffic, &target, revision).await;
    // Enabled again: both copy again (the rule follows the admin API both ways).
    cp.patch(&rule, json!({"enabled": true})).await;
    assert_copying(&proxies, &target, &copied, hits, &base.token).await;
    let deleted = cp.call("DELETE", &rule, None).await;
    assert_eq!(deleted.status, 204, "{}", deleted.body);
    assert_copies_stop(&proxies, &traffic, &target, deleted.revision()).await;

    traffic.assert_served_since(&since, &base.a);
    traffic.stop().await;
}

/// A member disabled, its channel disabled, and the member deleted, each through the admin API
/// while requests flow through two proxies: once each proxy has the change (documented:
/// normally within a second), no request reaches that member's mock from either proxy, the
/// other member serves, and no client request fails meanwhile; re-enabled, it serves again.
#[sqlx::test(migrations = false)]
async fn a_member_or_channel_disabled_or_deleted_mid_traffic_gets_nothing_from_every_proxy(
    _pool: PgPoolOptions,
    opts: PgConnectOptions,
) {
    let cp = ControlPlane::start(BINS, &database_url(&opts)).await;
    let base = base(&cp).await;
    // `b` in a higher tier than `a`: it serves while it is eligible.
    let b = Upstream::create(&cp, "chan-b").await;
    let (member_b, revision) = b.member(&cp, base.route, 10, true).await;
    let member_b = format!("/api/v1/members/{member_b}");
    let channel_b = format!("/api/v1/channels/{}", b.channel_id);
    let proxies = [
        Proxy::start_ready(&cp, None).await,
        Proxy::start_ready(&cp, None).await,
    ];
    let traffic = Traffic::start(&proxies, vec![vec![base.token.clone(); 2]]);

    assert_only(&proxies, &traffic, revision, &b, &base.a).await;
    b.assert_last_request(&base.token);

    let revision = cp.patch(&member_b, json!({"enabled": false})).await;
    assert_only(&proxies, &traffic, revision, &base.a, &b).await;
    base.a.assert_last_request(&base.token);
    let revision = cp.patch(&member_b, json!({"enabled": true})).await;
    assert_only(&proxies, &traffic, revision, &b, &base.a).await;

    let revision = cp.patch(&channel_b, json!({"status": "disabled"})).await;
    assert_only(&proxies, &traffic, revision, &base.a, &b).await;
    let revision = cp.patch(&channel_b, json!({"status": "enabled"})).await;
    assert_only(&proxies, &traffic, revision, &b, &base.a).await;

    let deleted = cp.call("DELETE", &member_b, None).await;
    assert_eq!(deleted.status, 204, "{}", deleted.body);
    assert_only(&proxies, &traffic, deleted.revision(), &base.a, &b).await;

    // No client request failed, before, during or after any change.
    traffic.stop().await;
}

/// Once every proxy serves from `revision` (and no request sent before is in flight), every
/// answer on both proxies comes from `serving`, and `shut`'s mock hears nothing more.
async fn assert_only(
    proxies: &[Proxy],
    traffic: &Traffic,
    revision: u64,
    serving: &Upstream,
    shut: &Upstream,
) {
    settle(proxies, traffic, revision).await;
    let since = traffic.counts();
    let hits = shut.mock.hits();
    traffic.more(20).await;
    traffic.assert_served_since(&since, serving);
    assert_eq!(
        shut.mock.hits(),
        hits,
        "{} still receives requests after revision {revision}",
        shut.name
    );
}

/// Copies of the rule `live-trial` a proxy sent and had answered.
async fn copies(proxy: &Proxy) -> f64 {
    proxy
        .sample("switchyard_shadow_requests_total{rule=\"live-trial\",outcome=\"success\"}")
        .await
        .unwrap_or(0.0)
}

/// Each proxy sends the target more copies than `copied` (its count before), and the target's
/// mock receives more than `hits`: the chat as the target's member would be sent.
async fn assert_copying(
    proxies: &[Proxy],
    target: &Upstream,
    copied: &[f64],
    hits: usize,
    token: &str,
) {
    for (proxy, before) in proxies.iter().zip(copied) {
        let deadline = Instant::now() + PROMPTLY;
        while copies(proxy).await <= *before {
            assert!(
                Instant::now() < deadline,
                "proxy {} sends the target no copy",
                proxy.addr
            );
            tokio::time::sleep(POLL).await;
        }
    }
    assert!(
        target.mock.hits() > hits,
        "the target's mock received nothing"
    );
    target.assert_last_request(token);
}

/// Once every proxy serves from `revision` and has sent the copies it had queued, neither sends
/// the target another while traffic flows; each proxy's copies and the target's hits then.
async fn assert_copies_stop(
    proxies: &[Proxy],
    traffic: &Traffic,
    target: &Upstream,
    revision: u64,
) -> (Vec<f64>, usize) {
    settle(proxies, traffic, revision).await;
    let drained = || async {
        let deadline = Instant::now() + PROMPTLY;
        while metric_sum(proxies, "switchyard_shadow_pending").await > 0 {
            assert!(Instant::now() < deadline, "shadow copies still pending");
            tokio::time::sleep(POLL).await;
        }
    };
    drained().await;
    let hits = target.mock.hits();
    let mut copied = Vec::new();
    for proxy in proxies {
        copied.push(copies(proxy).await);
    }
    traffic.more(20).await;
    drained().await;
    assert_eq!(
        target.mock.hits(),
        hits,
        "the target still receives copies after revision {revision}"
    );
    for (proxy, before) in proxies.iter().zip(&copied) {
        assert_eq!(
            copies(proxy).await,
            *before,
            "proxy {} still copies",
            proxy.addr
        );
    }
    (copied, hits)
}
