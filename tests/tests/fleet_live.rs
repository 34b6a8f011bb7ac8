//! Cache rules and guardrails changed through the control plane's admin API while requests flow
//! through two proxy processes (sharing one Redis, as a fleet does): each change binds on every
//! proxy as soon as that proxy has the new snapshot revision (documented: normally within a
//! second), and no client request fails meanwhile.
//!
//! Each test has its own database (`#[sqlx::test]` creates it from `DATABASE_URL`), its own
//! Redis key prefix, ports and mock upstream. Every wait polls for a condition with a generous
//! deadline; every process is killed on drop.
// Helpers outside #[test] fns are test code too: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashSet;
use std::time::Instant;

use serde_json::{json, Value};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use switchyard_e2e::control::{
    base, chat_for, database_url, unique, Base, Bins, ControlPlane, Proxy, Upstream, MODEL,
    PATIENCE,
};
use switchyard_e2e::fleet::cleanup;
use switchyard_e2e::traffic::{settle, Sent, Traffic};

const BINS: Bins = switchyard_e2e::bins!();

/// A control plane with [`base`]'s channel, route and token, and two proxies following it that
/// share state and the response cache in Redis under a key prefix of their own (removed on
/// drop).
struct Live {
    proxies: [Proxy; 2],
    base: Base,
    cp: ControlPlane,
    redis: String,
    prefix: String,
}

impl Live {
    /// Once both proxies have the base's revision. A cache lookup may wait for Redis as long as
    /// a loaded machine needs (the default of 50 ms would make a slow `GET` a bypass, which
    /// these tests would take for a rule not applied).
    async fn start(opts: &PgConnectOptions, tag: &str) -> Live {
        let redis = switchyard_e2e::redis_url();
        let prefix = unique(tag);
        let cp = ControlPlane::start(BINS, &database_url(opts)).await;
        let base = base(&cp).await;
        let env = [("SWITCHYARD_CACHE_TIMEOUT_MS", "10000")];
        let shared = Some((redis.as_str(), prefix.as_str()));
        let proxies = [
            Proxy::start_env(&cp, None, shared, &env).await,
            Proxy::start_env(&cp, None, shared, &env).await,
        ];
        for proxy in &proxies {
            proxy.wait_ready().await;
            proxy.wait_revision(base.revision).await;
        }
        Live {
            proxies,
            base,
            cp,
            redis,
            prefix,
        }
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        // The proxies first: nothing writes under the prefix once it is cleaned.
        for proxy in &mut self.proxies {
            proxy.process.kill();
        }
        cleanup(&self.redis, &self.prefix);
        cleanup(&self.redis, &format!("{}:cache", self.prefix));
    }
}

// ---------------------------------------------------------------------------------------------
// Cache rules

/// What every proxy's answers do while a cache rule is in a given state.
fn assert_each(answers: &[Vec<Sent>], what: &str, ok: impl Fn(&Sent) -> bool) {
    for (proxy, answers) in answers.iter().enumerate() {
        assert!(!answers.is_empty(), "proxy {proxy}: no answer");
        for sent in answers {
            assert!(
                ok(sent),
                "proxy {proxy}, {what}: {} cache {:?} age {:?} {}",
                sent.status,
                sent.cache,
                sent.age,
                sent.body
            );
        }
    }
}

/// Once every proxy serves from `revision`: waits until each proxy answers identical requests
/// from the cache alone — twenty answers in a row on each, every one a hit, and the upstream
/// called by neither meanwhile (a miss stores its answer in the background, so the first hits
/// may take a few requests).
async fn assert_hits(proxies: &[Proxy], traffic: &Traffic, upstream: &Upstream, revision: u64) {
    settle(proxies, traffic, revision).await;
    let deadline = Instant::now() + PATIENCE;
    loop {
        let (since, calls) = (traffic.counts(), upstream.mock.hits());
        traffic.more(20).await;
        let answers = traffic.since(&since);
        if upstream.mock.hits() == calls && answers.iter().flatten().all(|s| s.cache == "hit") {
            assert_each(&answers, "a hit", |s| s.status == 200);
            return;
        }
        assert!(
            Instant::now() < deadline,
            "revision {revision}: the proxies never answer from the cache alone: {:?}",
            answers
                .iter()
                .map(|a| a.iter().map(|s| s.cache.as_str()).collect::<Vec<_>>())
                .collect::<Vec<_>>()
        );
    }
}

/// Once every proxy serves from `revision`: no rule applies on either (no cache header), and
/// every answer is a fresh one from the upstream (the mock numbers its answers' ids) — never
/// one stored before the change.
async fn assert_uncached(proxies: &[Proxy], traffic: &Traffic, upstream: &Upstream, revision: u64) {
    settle(proxies, traffic, revision).await;
    let since = traffic.counts();
    traffic.more(10).await;
    let answers = traffic.since(&since);
    assert_each(&answers, "no rule", |s| {
        s.status == 200 && s.cache.is_empty() && s.channel == upstream.name
    });
    let mut seen: HashSet<String> = traffic
        .since(&vec![0; proxies.len()])
        .iter()
        .zip(&since)
        .flat_map(|(all, since)| all[..*since].iter().map(answer_id))
        .collect();
    for sent in answers.iter().flatten() {
        let id = answer_id(sent);
        assert!(seen.insert(id.clone()), "answer {id} was served before");
    }
}

/// The `id` of a chat answer.
fn answer_id(sent: &Sent) -> String {
    let answer: Value = serde_json::from_str(&sent.body).unwrap();
    answer["id"].as_str().unwrap().to_owned()
}

/// A cache rule created while identical requests flow through two proxies (each with its own
/// token) makes them hits on both, the upstream no longer called; disabled, every answer comes
/// from the upstream again although the stored answer is still fresh; enabled, hits again; its
/// scope patched from route to token, each proxy's token misses once (the two no longer share
/// the answer) and then hits; its TTL lowered, an answer older than the new TTL is no longer
/// served; deleted, every answer comes from the upstream again. Each change binds on both
/// proxies once they have its revision, and no client request fails.
#[sqlx::test(migrations = false)]
async fn a_cache_rule_created_patched_or_deleted_mid_traffic_binds_on_every_proxy(
    _pool: PgPoolOptions,
    opts: PgConnectOptions,
) {
    let live = Live::start(&opts, "live-cache").await;
    let (proxies, base, cp) = (&live.proxies[..], &live.base, &live.cp);
    let (second, revision) = cp.create("/api/v1/tokens", json!({"name": "app-2"})).await;
    let second = second["token"].as_str().unwrap().to_owned();
    for proxy in proxies {
        proxy.wait_revision(revision).await;
    }
    let traffic = Traffic::start(proxies, vec![vec![base.token.clone(), second]]);
    let upstream = &base.a;
    traffic.more(3).await;
    assert_each(&traffic.since(&[0, 0]), "no rule yet", |s| {
        s.status == 200 && s.cache.is_empty()
    });

    // Created mid-traffic: identical requests are hits on both proxies (route scope: the two
    // tokens share one answer).
    let (rule, revision) = cp
        .create(
            "/api/v1/cache_rules",
            json!({"name": "live", "model_pattern": MODEL, "endpoints": ["chat_completions"],
                   "ttl_seconds": 300, "scope": "route"}),
        )
        .await;
    let rule = format!("/api/v1/cache_rules/{}", rule["id"]);
    assert_hits(proxies, &traffic, upstream, revision).await;

    // Disabled: the stored answer (fresh for minutes yet) is served by neither.
    let revision = cp.patch(&rule, json!({"enabled": false})).await;
    assert_uncached(proxies, &traffic, upstream, revision).await;
    let revision = cp.patch(&rule, json!({"enabled": true})).await;
    assert_hits(proxies, &traffic, upstream, revision).await;

    // Token scope: the shared answer no longer serves either token; each proxy's token gets
    // its own (a miss, then hits).
    let before = traffic.counts();
    let revision = cp.patch(&rule, json!({"scope": "token"})).await;
    assert_hits(proxies, &traffic, upstream, revision).await;
    for (proxy, answers) in traffic.since(&before).iter().enumerate() {
        assert!(
            answers.iter().any(|s| s.cache == "miss"),
            "proxy {proxy} still serves the answer its token shared under route scope"
        );
    }

    // TTL lowered to 1 s once the stored answers are 2 s old or more: none of them is served
    // any more, only answers younger than the new TTL.
    aged(&traffic, 2).await;
    let revision = cp.patch(&rule, json!({"ttl_seconds": 1})).await;
    settle(proxies, &traffic, revision).await;
    let since = traffic.counts();
    traffic.more(20).await;
    assert_each(&traffic.since(&since), "TTL 1 s", |s| {
        s.status == 200 && (s.cache == "miss" || (s.cache == "hit" && s.age == Some(0)))
    });

    // Back to 300 s, then deleted: a stored answer still fresh is served by neither.
    let revision = cp.patch(&rule, json!({"ttl_seconds": 300})).await;
    assert_hits(proxies, &traffic, upstream, revision).await;
    let deleted = cp.call("DELETE", &rule, None).await;
    assert_eq!(deleted.status, 204, "{}", deleted.body);
    assert_uncached(proxies, &traffic, upstream, deleted.revision()).await;

    traffic.stop().await;
}

/// Waits until each proxy has served a hit at least `seconds` old.
async fn aged(traffic: &Traffic, seconds: u64) {
    let since = traffic.counts();
    let deadline = Instant::now() + PATIENCE;
    loop {
        traffic.more(1).await;
        let old_enough = traffic
            .since(&since)
            .iter()
            .all(|a| a.iter().any(|s| s.age.is_some_and(|age| age >= seconds)));
        if old_enough {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no hit {seconds} s old on every proxy"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Guardrails

/// What the background traffic says: a ticket number the rule's pattern matches.
const MATCHING: &str = "please look at ticket SY-4242 for me";

/// Once every proxy serves from `revision`: each refuses the matching requests (400
/// `guardrail_blocked`, naming the rule) and the upstream hears none of them; a request that
/// does not match is still served on each.
async fn assert_refused(
    proxies: &[Proxy],
    traffic: &Traffic,
    upstream: &Upstream,
    token: &str,
    revision: u64,
) {
    settle(proxies, traffic, revision).await;
    let (since, calls) = (traffic.counts(), upstream.mock.hits());
    traffic.more(10).await;
    assert_each(&traffic.since(&since), "blocked", |s| {
        s.status == 400 && s.code == "guardrail_blocked" && s.body.contains("tickets")
    });
    assert_eq!(
        upstream.mock.hits(),
        calls,
        "a blocked request reached the upstream after revision {revision}"
    );
    for proxy in proxies {
        let reply = chat_for(proxy.addr, token, MODEL).await;
        assert_eq!(
            reply.status, 200,
            "a request without a ticket: {}",
            reply.body
        );
    }
}

/// Once every proxy serves from `revision`: each serves the matching requests from the
/// upstream.
async fn assert_admitted(
    proxies: &[Proxy],
    traffic: &Traffic,
    upstream: &Upstream,
    revision: u64,
    what: &str,
) {
    settle(proxies, traffic, revision).await;
    let (since, calls) = (traffic.counts(), upstream.mock.hits());
    traffic.more(10).await;
    let answers = traffic.since(&since);
    assert_each(&answers, what, |s| {
        s.status == 200 && s.channel == upstream.name
    });
    // Each answer was a call; the first on each proxy may have reached the upstream before
    // `calls` was read.
    let served: usize = answers.iter().map(Vec::len).sum();
    assert!(
        upstream.mock.hits() + proxies.len() >= calls + served,
        "{what}: {served} answers, {} upstream calls",
        upstream.mock.hits() - calls
    );
}

/// A guardrail that blocks a pattern, created while matching requests flow through two
/// proxies, refuses them on both; patched to shadow mode, admitted on both; back to enforce,
/// refused; its action patched to log, admitted; back to block, refused; disabled, admitted;
/// enabled, refused; deleted, admitted. Each change binds on both proxies once they have its
/// revision; nothing else fails meanwhile.
#[sqlx::test(migrations = false)]
async fn a_guardrail_created_patched_or_deleted_mid_traffic_binds_on_every_proxy(
    _pool: PgPoolOptions,
    opts: PgConnectOptions,
) {
    let live = Live::start(&opts, "live-guard").await;
    let (proxies, base, cp) = (&live.proxies[..], &live.base, &live.cp);
    let traffic = Traffic::saying(proxies, vec![vec![base.token.clone(); 2]], MATCHING);
    let upstream = &base.a;
    traffic.more(3).await;

    let (rule, revision) = cp
        .create(
            "/api/v1/guardrails",
            json!({"name": "tickets", "scope": "route", "scope_id": base.route,
                   "stage": "request", "action": "block",
                   "checks": {"patterns": [{"regex": "SY-[0-9]{4}", "label": "TICKET"}]}}),
        )
        .await;
    let rule = format!("/api/v1/guardrails/{}", rule["id"]);
    let token = base.token.as_str();
    assert_refused(proxies, &traffic, upstream, token, revision).await;

    for (admit, refuse) in [
        (json!({"mode": "shadow"}), json!({"mode": "enforce"})),
        (json!({"action": "log"}), json!({"action": "block"})),
        (json!({"enabled": false}), json!({"enabled": true})),
    ] {
        let revision = cp.patch(&rule, admit.clone()).await;
        assert_admitted(proxies, &traffic, upstream, revision, &admit.to_string()).await;
        let revision = cp.patch(&rule, refuse).await;
        assert_refused(proxies, &traffic, upstream, token, revision).await;
    }

    let deleted = cp.call("DELETE", &rule, None).await;
    assert_eq!(deleted.status, 204, "{}", deleted.body);
    assert_admitted(proxies, &traffic, upstream, deleted.revision(), "deleted").await;

    // Every answer, all along, was served or refused by the rule: nothing failed otherwise.
    let answers = traffic.finish().await;
    assert_each(&answers, "served or blocked", |s| {
        s.status == 200 || (s.status == 400 && s.code == "guardrail_blocked")
    });
}
