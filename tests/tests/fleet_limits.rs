//! Limits held fleet-wide by three real data-plane processes sharing one Redis, under load from
//! several clients each: a requests-per-minute limit admits at most its value plus the documented
//! overshoot bound, a spend budget stops the token on every proxy within the bound, a limit
//! counting each end user separately holds per end user across the fleet, and with Redis
//! stopped mid-run no request fails for it while each proxy holds its share of the limit.
//!
//! The overshoot bound: while Redis is reachable, the fleet's admitted total over a window exceeds
//! a limit by at most the larger of 1 % of the limit and one allowance per proxy (an allowance is
//! a hundredth of each proxy's share of the limit, at least one request). A spend budget is
//! charged when each request ends, so requests in flight when it runs out add their own cost.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use switchyard_e2e::fleet::{free_port, http, unique, write_config, OwnRedis, Proxy, CHAT};
use switchyard_e2e::redis_url;
use switchyard_state::allowance;

const BIN: &str = env!("CARGO_BIN_EXE_e2e-data-plane");
const PROXIES: u32 = 3;
const CLIENTS_PER_PROXY: usize = 4;

fn config(limits: &str) -> String {
    format!(
        "channels:\n  - {{ id: 1, name: sim, provider: mock }}\nroutes:\n  - model_pattern: m\n    members:\n      - {{ channel: sim }}\nprices:\n  - {{ channel: sim, model_pattern: '*', input_per_million: 1, output_per_million: 1 }}\nlimits:\n{limits}"
    )
}

const MINUTE: Duration = Duration::from_secs(60);
const DAY: Duration = Duration::from_secs(86_400);

/// Sleeps into the next `window` (a UTC minute or day: both start on a multiple of their length
/// since the epoch) when less than `needed` is left of the current one, so a whole run is counted
/// in one window.
async fn within_one_window(window: Duration, needed: Duration) {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    let into = Duration::from_millis((now.as_millis() % window.as_millis()) as u64);
    let left = window - into;
    if left < needed {
        tokio::time::sleep(left + Duration::from_millis(200)).await;
    }
}

#[derive(Default, Debug, Clone, Copy)]
struct Tally {
    ok: u64,
    refused: u64,
    failed: u64,
    /// Micro-USD of the served requests ($1 per million tokens each way: one per token).
    spent: u64,
}

impl Tally {
    fn add(&mut self, other: Tally) {
        self.ok += other.ok;
        self.refused += other.refused;
        self.failed += other.failed;
        self.spent += other.spent;
    }
}

fn tokens_of(body: &str) -> u64 {
    let v: serde_json::Value = serde_json::from_str(body).unwrap_or_default();
    v["usage"]["prompt_tokens"].as_u64().unwrap_or(0)
        + v["usage"]["completion_tokens"].as_u64().unwrap_or(0)
}

/// `clients` clients per proxy, each sending one request after another until `until` or, with
/// `stop`, until a refusal with that code (other refusals are rate limits: the client waits a
/// little and goes on); a tally per proxy.
async fn load(
    proxies: &[Proxy],
    clients: usize,
    until: Instant,
    stop: Option<&'static str>,
) -> Vec<Tally> {
    let mut per_proxy = Vec::new();
    for proxy in proxies {
        let mut tasks = Vec::new();
        for _ in 0..clients {
            let url = proxy.url.clone();
            tasks.push(tokio::spawn(async move {
                let mut t = Tally::default();
                while Instant::now() < until {
                    match http(&url, "POST", "/v1/chat/completions", CHAT, &[]).await {
                        Ok(r) if r.status == 200 => {
                            t.ok += 1;
                            t.spent += tokens_of(&r.body);
                        }
                        Ok(r) if r.status == 429 => {
                            assert!(!r.header("retry-after").is_empty());
                            if let Some(code) = stop.filter(|c| r.body.contains(c)) {
                                assert_eq!(r.header("x-should-retry"), "false", "{code}");
                                t.refused += 1;
                                break;
                            }
                            assert!(r.body.contains("rate_limit_exceeded"), "{}", r.body);
                            if stop.is_some() {
                                tokio::time::sleep(Duration::from_millis(50)).await;
                            } else {
                                t.refused += 1;
                            }
                        }
                        Ok(r) => {
                            eprintln!("unexpected answer {}: {}", r.status, r.body);
                            t.failed += 1;
                        }
                        Err(e) => {
                            eprintln!("request failed: {e}");
                            t.failed += 1;
                        }
                    }
                }
                t
            }));
        }
        per_proxy.push(tasks);
    }
    let mut out = Vec::new();
    for tasks in per_proxy {
        let mut t = Tally::default();
        for task in tasks {
            t.add(task.await.unwrap());
        }
        out.push(t);
    }
    out
}

async fn fleet(config: &std::path::Path, redis: &str, prefix: &str) -> Vec<Proxy> {
    let mut proxies = Vec::new();
    for _ in 0..PROXIES {
        proxies.push(Proxy::start(BIN, config, redis, prefix).await);
    }
    // Every proxy sees the other two (their heartbeats) before the run: allowances are shared
    // among the live proxies.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    proxies
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_proxies_hold_a_600_per_minute_limit_within_the_bound() {
    const LIMIT: u64 = 600;
    let prefix = unique("limit-rpm");
    let path = write_config(
        "limit-rpm",
        &config(&format!(
            "  - {{ token: test, metric: requests, window: minute, value: {LIMIT} }}\n"
        )),
    );
    let proxies = fleet(&path, &redis_url(), &prefix).await;
    within_one_window(MINUTE, Duration::from_secs(30)).await;
    let tallies = load(
        &proxies,
        CLIENTS_PER_PROXY,
        Instant::now() + Duration::from_secs(12),
        None,
    )
    .await;
    let mut total = Tally::default();
    for t in &tallies {
        total.add(*t);
    }
    let bound = (LIMIT / 100).max(u64::from(PROXIES) * allowance(LIMIT, PROXIES, 1));
    eprintln!(
        "fleet rpm: limit {LIMIT}, admitted {} (overshoot {}), refused {}, failed {}, per proxy {:?}, bound {bound}",
        total.ok,
        total.ok as i64 - LIMIT as i64,
        total.refused,
        total.failed,
        tallies.iter().map(|t| t.ok).collect::<Vec<_>>()
    );
    assert_eq!(total.failed, 0);
    assert!(total.refused > 0, "the load went past the limit");
    assert!(
        total.ok <= LIMIT + bound,
        "admitted {} > {LIMIT} + {bound}",
        total.ok
    );
    assert!(
        total.ok + bound >= LIMIT,
        "admitted only {} of {LIMIT}: allowances held back more than the bound",
        total.ok
    );
    let _ = std::fs::remove_file(path);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spend_budget_stops_the_token_on_every_proxy_within_the_bound() {
    // 0.002 USD at 1 USD per million tokens: about 80 requests of the simulation's size.
    const BUDGET: u64 = 2_000;
    let prefix = unique("limit-spend");
    let path = write_config(
        "limit-spend",
        &config("  - { token: test, metric: spend, window: day, value: \"0.002\" }\n"),
    );
    let proxies = fleet(&path, &redis_url(), &prefix).await;
    within_one_window(DAY, Duration::from_secs(45)).await;
    let tallies = load(
        &proxies,
        CLIENTS_PER_PROXY,
        Instant::now() + Duration::from_secs(30),
        Some("budget_exceeded"),
    )
    .await;
    let mut total = Tally::default();
    for t in &tallies {
        total.add(*t);
    }
    let per_request = total.spent / total.ok.max(1);
    let clients = u64::from(PROXIES) * CLIENTS_PER_PROXY as u64;
    let bound = (BUDGET / 100).max(u64::from(PROXIES) * allowance(BUDGET, PROXIES, 1))
        + clients * per_request;
    eprintln!(
        "fleet spend: budget {BUDGET} micro-USD, spent {} ({} requests), refused {}, bound {bound}",
        total.spent, total.ok, total.refused
    );
    assert_eq!(total.failed, 0);
    assert_eq!(
        total.refused, clients,
        "every client on every proxy was stopped by the budget"
    );
    assert!(total.spent >= BUDGET, "refused before the budget was spent");
    assert!(
        total.spent <= BUDGET + bound,
        "spent {} > {BUDGET} + {bound}",
        total.spent
    );
    // Spent stays spent: a new request on each proxy is refused at once.
    for proxy in &proxies {
        let r = proxy.chat(&[]).await;
        assert_eq!(r.status, 429, "{}", r.body);
        assert_eq!(r.header("x-should-retry"), "false");
    }
    let _ = std::fs::remove_file(path);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_redis_stopped_no_request_fails_and_each_proxy_holds_its_share() {
    const LIMIT: u64 = 300;
    let mut server = OwnRedis::start(free_port());
    let redis = format!("redis://127.0.0.1:{}", server.port);
    let prefix = unique("limit-outage");
    let path = write_config(
        "limit-outage",
        &config(&format!(
            "  - {{ token: test, metric: requests, window: minute, value: {LIMIT} }}\n"
        )),
    );
    let proxies = Arc::new(fleet(&path, &redis, &prefix).await);
    within_one_window(MINUTE, Duration::from_secs(30)).await;
    // A little traffic while Redis is there, then Redis dies and the load goes on past the limit.
    let mut before = Vec::new();
    for proxy in proxies.iter() {
        let mut t = Tally::default();
        for _ in 0..10 {
            let r = proxy.chat(&[]).await;
            assert_eq!(r.status, 200, "{}", r.body);
            t.ok += 1;
        }
        before.push(t);
    }
    server.kill();
    let after = load(
        &proxies,
        CLIENTS_PER_PROXY,
        Instant::now() + Duration::from_secs(8),
        None,
    )
    .await;
    let share = LIMIT / u64::from(PROXIES);
    let slack = 2 * allowance(LIMIT, PROXIES, 1);
    for (i, (b, a)) in before.iter().zip(&after).enumerate() {
        let admitted = b.ok + a.ok;
        eprintln!(
            "proxy {i}: {} admitted before the outage, {} after, {} refused, {} failed (share {share})",
            b.ok, a.ok, a.refused, a.failed
        );
        assert_eq!(
            b.failed + a.failed,
            0,
            "a request failed because Redis was down"
        );
        assert!(a.refused > 0, "proxy {i} never reached its share");
        assert!(
            admitted <= share.max(b.ok) + slack,
            "proxy {i} admitted {admitted}, beyond its share {share}"
        );
        assert!(
            admitted + slack >= share,
            "proxy {i} admitted {admitted}, well short of its share {share}"
        );
    }
    drop(proxies);
    let _ = std::fs::remove_file(path);
}

/// `user`'s chat request (no user: a request naming none).
fn chat_as(user: Option<&str>) -> String {
    match user {
        Some(user) => format!(
            r#"{{"model":"m","user":"{user}","messages":[{{"role":"user","content":"hello"}}]}}"#
        ),
        None => CHAT.to_owned(),
    }
}

/// `clients` clients per proxy sending `user`'s requests until `until`: (admitted, refused,
/// failed) over the fleet.
async fn load_as(proxies: &[Proxy], clients: usize, until: Instant, user: &str) -> (u64, u64, u64) {
    let mut tasks = Vec::new();
    for proxy in proxies {
        for _ in 0..clients {
            let (url, body) = (proxy.url.clone(), chat_as(Some(user)));
            tasks.push(tokio::spawn(async move {
                let mut t = (0, 0, 0);
                while Instant::now() < until {
                    match http(&url, "POST", "/v1/chat/completions", &body, &[]).await {
                        Ok(r) if r.status == 200 => t.0 += 1,
                        Ok(r) if r.status == 429 => {
                            assert!(r.body.contains("its end user's limit"), "{}", r.body);
                            t.1 += 1;
                        }
                        _ => t.2 += 1,
                    }
                }
                t
            }));
        }
    }
    let mut total = (0, 0, 0);
    for task in tasks {
        let t = task.await.unwrap();
        total = (total.0 + t.0, total.1 + t.1, total.2 + t.2);
    }
    total
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_proxies_hold_an_each_end_user_limit_per_end_user_fleet_wide() {
    const LIMIT: u64 = 60;
    const FLEET: u32 = 2;
    let prefix = unique("limit-end-user");
    let path = write_config(
        "limit-end-user",
        &config(&format!(
            "  - {{ each_end_user: true, metric: requests, window: minute, value: {LIMIT} }}\n"
        )),
    );
    let mut proxies = Vec::new();
    for _ in 0..FLEET {
        proxies.push(Proxy::start(BIN, &path, &redis_url(), &prefix).await);
    }
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    within_one_window(MINUTE, Duration::from_secs(25)).await;
    // A unique end user per run: the shared counter is the fleet's, whatever ran before.
    let alice = unique("alice");
    let (ok, refused, failed) = load_as(
        &proxies,
        CLIENTS_PER_PROXY,
        Instant::now() + Duration::from_secs(8),
        &alice,
    )
    .await;
    // One allowance per proxy (1 % of 60 is less than one request).
    let bound = u64::from(FLEET) * allowance(LIMIT, FLEET, 1);
    eprintln!("fleet end user: limit {LIMIT}, admitted {ok}, refused {refused}, bound {bound}");
    assert_eq!(failed, 0);
    assert!(refused > 0, "the load went past the limit");
    assert!(ok <= LIMIT + bound, "admitted {ok} > {LIMIT} + {bound}");
    assert!(ok + bound >= LIMIT, "admitted only {ok} of {LIMIT}");
    // Another end user, and a request naming none, are admitted on every proxy all the while.
    let bob = unique("bob");
    for proxy in &proxies {
        for user in [Some(alice.as_str()), Some(bob.as_str()), None] {
            let r = http(
                &proxy.url,
                "POST",
                "/v1/chat/completions",
                &chat_as(user),
                &[],
            )
            .await
            .unwrap();
            let expected = if user == Some(alice.as_str()) {
                429
            } else {
                200
            };
            assert_eq!(r.status, expected, "{user:?}: {}", r.body);
        }
    }
    let _ = std::fs::remove_file(path);
}
