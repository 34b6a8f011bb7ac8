//! `switchyard-load report DIR`: the benchmark summary from the files `scripts/load` writes:
//! `pids.json` (`{"proxy": PID, "mock": PID}`), `idle.json` (`{"proxy": kB, "mock": kB}`),
//! `{direct,proxy}_c{1,64}.json` (`run` outputs) and `hold_{direct,proxy}_N.json` (`hold`
//! outputs; their `rss_kb_peak` is the mock's for direct holds, the proxy's for proxied ones),
//! `translated_c*`, `stream_{passthrough,translated}_c1`, and when present `before_c*` (an
//! earlier proxy build), `fleet_c*` (a fleet-mode proxy reporting usage), `fixed_{direct,nginx,
//! proxy}_c*` (the nginx reference, with `cpu` per request; at c=1 in rounds, `fixed_*_c1_rN`;
//! `fixed_cache_hit_c*`: the proxy answering every request from its response cache) and
//! `miss_{off,memory,redis_off,redis}_c*` (every request a different body: a cache-enabled route
//! whose every request misses, against the same route without a rule, per cache store).

use std::path::Path;

use serde_json::{json, Value};

fn read(dir: &Path, name: &str) -> Option<Value> {
    let text = std::fs::read_to_string(dir.join(name)).ok()?;
    serde_json::from_str(&text).ok()
}

fn num(v: &Value, pointer: &str) -> Option<f64> {
    v.pointer(pointer).and_then(Value::as_f64)
}

fn diff(proxy: &Value, direct: &Value, pointer: &str) -> Value {
    match (num(proxy, pointer), num(direct, pointer)) {
        (Some(p), Some(d)) => json!(((p - d) * 1000.0).round() / 1000.0),
        _ => Value::Null,
    }
}

pub fn report(dir: &Path) -> Result<Value, String> {
    if !dir.is_dir() {
        return Err(format!("{}: not a directory", dir.display()));
    }
    let pids = read(dir, "pids.json").unwrap_or(Value::Null);
    let proxy_pid = pids.get("proxy").map(|p| p.to_string()).unwrap_or_default();
    let mock_pid = pids.get("mock").map(|p| p.to_string()).unwrap_or_default();
    let idle = read(dir, "idle.json").unwrap_or(Value::Null);
    let closed = closed_loop(dir, &proxy_pid);
    Ok(json!({
        "nginx_reference": nginx_reference(dir),
        "added_latency_ms": closed.added,
        "translation": translation(dir),
        "compared": compared(dir),
        "response_cache_miss": cache_miss(dir),
        "runs": closed.runs,
        "throughput_at_saturation_rps": {
            "direct": read(dir, "direct_c64.json").map(|r| r["throughput_rps"].clone()),
            "proxy": read(dir, "proxy_c64.json").map(|r| r["throughput_rps"].clone()),
        },
        "rss_kb": {
            "proxy_idle": idle.get("proxy").cloned().unwrap_or(Value::Null),
            "proxy_under_load_peak": closed.proxy_peak_rss,
            "mock_idle": idle.get("mock").cloned().unwrap_or(Value::Null),
        },
        "stream_holds": holds(dir, &mock_pid, &proxy_pid)?,
    }))
}

/// The closed-loop runs direct and through the proxy (`{direct,proxy}_c{1,64}`).
struct ClosedLoop {
    /// The latency the proxy adds over the direct call, per concurrency.
    added: serde_json::Map<String, Value>,
    /// Each run's throughput, latency and errors.
    runs: serde_json::Map<String, Value>,
    /// The proxy's peak RSS over its runs.
    proxy_peak_rss: Option<f64>,
}

fn closed_loop(dir: &Path, proxy_pid: &str) -> ClosedLoop {
    let mut closed = ClosedLoop {
        added: serde_json::Map::new(),
        runs: serde_json::Map::new(),
        proxy_peak_rss: None,
    };
    for c in ["1", "64"] {
        let direct = read(dir, &format!("direct_c{c}.json"));
        let proxy = read(dir, &format!("proxy_c{c}.json"));
        if let (Some(direct), Some(proxy)) = (&direct, &proxy) {
            closed.added.insert(
                format!("c{c}"),
                json!({
                    "p50": diff(proxy, direct, "/latency_ms/p50"),
                    "p90": diff(proxy, direct, "/latency_ms/p90"),
                    "p99": diff(proxy, direct, "/latency_ms/p99"),
                }),
            );
        }
        for (name, run) in [("direct", &direct), ("proxy", &proxy)] {
            if let Some(run) = run {
                closed.runs.insert(
                    format!("{name}_c{c}"),
                    json!({
                        "throughput_rps": run["throughput_rps"],
                        "latency_ms": run["latency_ms"],
                        "errors": run["errors"],
                    }),
                );
            }
        }
        if let Some(peak) = proxy
            .as_ref()
            .and_then(|p| num(p, &format!("/rss_kb/{proxy_pid}/peak")))
        {
            closed.proxy_peak_rss = Some(closed.proxy_peak_rss.map_or(peak, |m| m.max(peak)));
        }
    }
    closed
}

/// The stream holds (`hold_direct_N` as the baseline, `hold_proxy_N`), ordered by N, direct
/// first; the RSS peak is the mock's for direct holds, the proxy's for proxied ones.
fn holds(dir: &Path, mock_pid: &str, proxy_pid: &str) -> Result<Vec<Value>, String> {
    let mut entries: Vec<(u64, String)> = std::fs::read_dir(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .filter_map(|name| {
            let n = name
                .strip_prefix("hold_direct_")
                .or_else(|| name.strip_prefix("hold_proxy_"))?
                .strip_suffix(".json")?
                .parse()
                .ok()?;
            Some((n, name))
        })
        .collect();
    entries.sort();
    let mut holds = Vec::new();
    for (_, name) in entries {
        if let Some(h) = read(dir, &name) {
            let (via, rss_pid) = if name.starts_with("hold_direct_") {
                ("direct", mock_pid)
            } else {
                ("proxy", proxy_pid)
            };
            holds.push(json!({
                "via": via,
                "streams": h["streams"],
                "completed": h["completed"],
                "errors": h["errors"],
                "stalled_streams": h["stalled_streams"],
                "stall_threshold_ms": h["stall_threshold_ms"],
                "max_gap_ms": h["max_gap_ms"],
                "peak_open_streams": h["peak_open_streams"],
                "ttfb_ms_p50": h.pointer("/ttfb_ms/p50").cloned().unwrap_or(Value::Null),
                "ttfb_ms_p99": h.pointer("/ttfb_ms/p99").cloned().unwrap_or(Value::Null),
                "rss_kb_peak": h.pointer(&format!("/rss_kb/{rss_pid}/peak")).cloned().unwrap_or(Value::Null),
            }));
        }
    }
    Ok(holds)
}

/// Translation (OpenAI in, Anthropic out) against passthrough through the same proxy, and the
/// cost per chunk of a translated 200-chunk stream.
fn translation(dir: &Path) -> serde_json::Map<String, Value> {
    let mut translation = serde_json::Map::new();
    for c in ["1", "64"] {
        if let (Some(translated), Some(proxy)) = (
            read(dir, &format!("translated_c{c}.json")),
            read(dir, &format!("proxy_c{c}.json")),
        ) {
            translation.insert(
                format!("added_over_passthrough_c{c}_ms"),
                json!({
                    "p50": diff(&translated, &proxy, "/latency_ms/p50"),
                    "p99": diff(&translated, &proxy, "/latency_ms/p99"),
                    "throughput_rps": translated["throughput_rps"],
                }),
            );
        }
    }
    if let (Some(translated), Some(passthrough)) = (
        read(dir, "stream_translated_c1.json"),
        read(dir, "stream_passthrough_c1.json"),
    ) {
        let per_chunk_us = diff(&translated, &passthrough, "/latency_ms/p50")
            .as_f64()
            .map(|ms| (ms * 1000.0 / 200.0 * 100.0).round() / 100.0);
        translation.insert(
            "stream_200_chunks_ms".into(),
            json!({
                "passthrough_p50": passthrough.pointer("/latency_ms/p50"),
                "translated_p50": translated.pointer("/latency_ms/p50"),
                "added_per_chunk_us_p50": per_chunk_us,
            }),
        );
    }
    translation
}

/// The same proxy binary against an earlier build (`before_c*`, LOAD_BEFORE_PROXY_BIN), and the
/// proxy in fleet mode with usage reporting (`fleet_c*`) against standalone: each as what the
/// first adds over the second, in the same run.
fn compared(dir: &Path) -> serde_json::Map<String, Value> {
    let mut compared = serde_json::Map::new();
    for (label, run, baseline) in [
        ("proxy_over_before", "proxy", "before"),
        ("fleet_with_usage_over_standalone", "fleet", "proxy"),
    ] {
        for c in ["1", "64"] {
            if let (Some(run), Some(base)) = (
                read(dir, &format!("{run}_c{c}.json")),
                read(dir, &format!("{baseline}_c{c}.json")),
            ) {
                compared.insert(
                    format!("{label}_c{c}"),
                    json!({
                        "added_p50_ms": diff(&run, &base, "/latency_ms/p50"),
                        "added_p99_ms": diff(&run, &base, "/latency_ms/p99"),
                        "throughput_rps": run["throughput_rps"],
                        "baseline_throughput_rps": base["throughput_rps"],
                        "errors": run["errors"],
                    }),
                );
            }
        }
    }
    compared
}

/// What a response cache miss costs: a route with a cache rule whose every request has a body of
/// its own (so every request misses, is sent upstream and its answer stored) against the same
/// requests on a route without a rule, through the same proxy — in memory (`miss_memory` over
/// `miss_off`) and with Redis as the store (`miss_redis` over `miss_redis_off`, a proxy whose
/// state is in Redis too); and the same misses sent with `Cache-Control: no-store`
/// (`*_nostore`: looked up, never stored), the lookup's share of that cost.
fn cache_miss(dir: &Path) -> serde_json::Map<String, Value> {
    let mut out = serde_json::Map::new();
    let cpu = |run: &Value| num(run, "/cpu/total_us_per_request");
    for (store, run, baseline) in [
        ("memory", "miss_memory", "miss_off"),
        ("redis", "miss_redis", "miss_redis_off"),
        ("memory_lookup", "miss_memory_nostore", "miss_off"),
        ("redis_lookup", "miss_redis_nostore", "miss_redis_off"),
    ] {
        for c in ["1", "64"] {
            let (Some(run), Some(base)) = (
                read(dir, &format!("{run}_c{c}.json")),
                read(dir, &format!("{baseline}_c{c}.json")),
            ) else {
                continue;
            };
            let added_cpu = match (cpu(&run), cpu(&base)) {
                (Some(r), Some(b)) => json!(((r - b) * 100.0).round() / 100.0),
                _ => Value::Null,
            };
            out.insert(
                format!("{store}_c{c}"),
                json!({
                    "added_p50_ms": diff(&run, &base, "/latency_ms/p50"),
                    "added_p99_ms": diff(&run, &base, "/latency_ms/p99"),
                    "cpu_us_per_request": cpu(&run),
                    "baseline_cpu_us_per_request": cpu(&base),
                    "added_cpu_us_per_request": added_cpu,
                    "throughput_rps": run["throughput_rps"],
                    "baseline_throughput_rps": base["throughput_rps"],
                    "errors": run["errors"],
                }),
            );
        }
    }
    out
}

/// The proxy against nginx as a plain reverse proxy, both in front of the same fixed-answer
/// upstream in the same run (`fixed_{direct,nginx,proxy}_c*`): throughput at c=64, CPU per
/// request, and the latency each adds over the direct call at c=1; each as proxy ÷ nginx.
fn nginx_reference(dir: &Path) -> Value {
    let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => json!((a / b * 100.0).round() / 100.0),
        _ => Value::Null,
    };
    let mut out = serde_json::Map::new();
    if let (Some(nginx), Some(proxy)) = (
        read(dir, "fixed_nginx_c64.json"),
        read(dir, "fixed_proxy_c64.json"),
    ) {
        let (n, p) = (
            num(&nginx, "/throughput_rps"),
            num(&proxy, "/throughput_rps"),
        );
        out.insert(
            "c64_throughput_rps".into(),
            json!({"nginx": n, "proxy": p, "proxy_over_nginx": ratio(p, n),
                   "direct": read(dir, "fixed_direct_c64.json").map(|r| r["throughput_rps"].clone())}),
        );
        let cpu = |run: &Value, field: &str| num(run, &format!("/cpu/{field}_us_per_request"));
        let times = |run: &Value| json!({"user": cpu(run, "user"), "system": cpu(run, "system"), "total": cpu(run, "total")});
        out.insert(
            "c64_cpu_us_per_request".into(),
            json!({
                "nginx": times(&nginx),
                "proxy": times(&proxy),
                "proxy_over_nginx": ratio(cpu(&proxy, "total"), cpu(&nginx, "total")),
            }),
        );
        // The proxy's bare stack (LOAD_BARE), the earlier build on the same upstream
        // (LOAD_BEFORE_PROXY_BIN), the cache's hits and the fleet proxy as operators run it
        // (LOAD_FLEET), when measured.
        for who in WHO_ELSE {
            if let Some(run) = read(dir, &format!("fixed_{who}_c64.json")) {
                let rps = num(&run, "/throughput_rps");
                out.insert(
                    format!("c64_{who}"),
                    json!({
                        "throughput_rps": rps,
                        "throughput_over_nginx": ratio(rps, n),
                        "cpu_us_per_request": times(&run),
                        format!("{who}_over_nginx"): ratio(cpu(&run, "total"), cpu(&nginx, "total")),
                    }),
                );
            }
        }
    }
    let rounds = c1_rounds(dir);
    if !rounds.is_empty() {
        let median_of =
            |who: &str, q: &str| median(rounds.iter().filter_map(|r| r.get(who)?.get(q)?.as_f64()));
        let added = |who: &str| {
            rounds
                .iter()
                .any(|r| r.get(who).is_some())
                .then(|| json!({"p50": median_of(who, "p50"), "p99": median_of(who, "p99")}))
        };
        out.insert(
            "c1_added_us".into(),
            json!({
                "nginx": added("nginx"),
                "proxy": added("proxy"),
                "p50_proxy_over_nginx": ratio(median_of("proxy", "p50"), median_of("nginx", "p50")),
                "bare": added("bare"),
                "p50_bare_over_nginx": ratio(median_of("bare", "p50"), median_of("nginx", "p50")),
                "before": added("before"),
                "p50_before_over_nginx": ratio(median_of("before", "p50"), median_of("nginx", "p50")),
                "fleet": added("fleet"),
                "p50_fleet_over_nginx": ratio(median_of("fleet", "p50"), median_of("nginx", "p50")),
                "cache_hit": added("cache_hit"),
                "p50_cache_hit_over_nginx": ratio(median_of("cache_hit", "p50"), median_of("nginx", "p50")),
                "rounds": rounds,
            }),
        );
    }
    Value::Object(out)
}

/// The rows of the nginx comparison besides nginx and the proxy: its bare stack, the earlier
/// build, the proxy answering from its response cache, the fleet proxy (limits and request log).
const WHO_ELSE: [&str; 4] = ["bare", "before", "cache_hit", "fleet"];

/// The latency each of nginx, the proxy and [`WHO_ELSE`] adds over the direct call at c=1,
/// in µs, for each round `scripts/load` ran (`fixed_*_c1.json`, then `fixed_*_c1_r2.json`, …),
/// each against its own round's direct run.
fn c1_rounds(dir: &Path) -> Vec<Value> {
    let mut rounds = Vec::new();
    for round in 1.. {
        let tag = if round == 1 {
            String::new()
        } else {
            format!("_r{round}")
        };
        let Some(direct) = read(dir, &format!("fixed_direct_c1{tag}.json")) else {
            break;
        };
        let mut added = serde_json::Map::new();
        for who in ["nginx", "proxy"].into_iter().chain(WHO_ELSE) {
            if let Some(run) = read(dir, &format!("fixed_{who}_c1{tag}.json")) {
                let us = |q: &str| {
                    diff(&run, &direct, &format!("/latency_ms/{q}"))
                        .as_f64()
                        .map(|ms| (ms * 1000.0).round())
                };
                added.insert(who.into(), json!({"p50": us("p50"), "p99": us("p99")}));
            }
        }
        rounds.push(Value::Object(added));
    }
    rounds
}

/// The median of `values` (the mean of the middle two for an even count); `None` for none.
fn median(values: impl Iterator<Item = f64>) -> Option<f64> {
    let mut values: Vec<f64> = values.collect();
    values.sort_by(f64::total_cmp);
    let n = values.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(values[n / 2]),
        _ => Some((values[n / 2 - 1] + values[n / 2]) / 2.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_of_odd_and_even_counts() {
        assert_eq!(median([3.0, 1.0, 2.0].into_iter()), Some(2.0));
        assert_eq!(median([4.0, 1.0, 3.0, 2.0].into_iter()), Some(2.5));
        assert_eq!(median(std::iter::empty()), None);
    }

    /// Each round's added latency is taken against its own direct run, and the summary is the
    /// median over the rounds: a round whose direct run drifted moves only its own figure.
    #[test]
    fn c1_latency_is_added_per_round_and_summarised_by_the_median() {
        let dir =
            std::env::temp_dir().join(format!("switchyard-load-report-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let write = |name: &str, p50_ms: f64| {
            let run = json!({"latency_ms": {"p50": p50_ms, "p99": p50_ms * 2.0}});
            std::fs::write(dir.join(name), run.to_string()).unwrap();
        };
        // Round 1: direct 0.100 ms, nginx +20 µs, proxy +30 µs; round 2 drifted by +50 µs on
        // every run; round 3: nginx +10, proxy +60.
        // The fleet proxy (limits, request log): +25, +25, +30 µs.
        for (tag, direct, nginx, proxy, fleet) in [
            ("", 0.100, 0.120, 0.130, 0.125),
            ("_r2", 0.150, 0.170, 0.190, 0.175),
            ("_r3", 0.100, 0.110, 0.160, 0.130),
        ] {
            write(&format!("fixed_direct_c1{tag}.json"), direct);
            write(&format!("fixed_nginx_c1{tag}.json"), nginx);
            write(&format!("fixed_proxy_c1{tag}.json"), proxy);
            write(&format!("fixed_fleet_c1{tag}.json"), fleet);
        }
        let summary = nginx_reference(&dir);
        std::fs::remove_dir_all(&dir).unwrap();
        let c1 = &summary["c1_added_us"];
        assert_eq!(c1["rounds"].as_array().unwrap().len(), 3);
        assert_eq!(c1["rounds"][1]["proxy"]["p50"], 40.0);
        assert_eq!(c1["nginx"]["p50"], 20.0);
        assert_eq!(c1["proxy"]["p50"], 40.0);
        assert_eq!(c1["p50_proxy_over_nginx"], 2.0);
        assert_eq!(c1["fleet"]["p50"], 25.0);
        assert_eq!(c1["p50_fleet_over_nginx"], 1.25);
        assert!(c1["before"].is_null());
        assert!(c1["bare"].is_null());
    }

    /// A miss's cost is each cache-enabled run against the same proxy's run without a rule, per
    /// store; a store not measured has no row; the cache-hit rows sit beside nginx's.
    #[test]
    fn the_cache_rows_compare_like_with_like() {
        let dir = std::env::temp_dir().join(format!(
            "switchyard-load-report-cache-{}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let write = |name: &str, p50: f64, cpu: f64| {
            let run = json!({"latency_ms": {"p50": p50, "p99": p50 * 2.0}, "throughput_rps": 10.0,
                "errors": 0, "cpu": {"total_us_per_request": cpu}});
            std::fs::write(dir.join(name), run.to_string()).unwrap();
        };
        write("miss_off_c64.json", 1.0, 40.0);
        write("miss_memory_c64.json", 1.25, 46.5);
        write("miss_memory_nostore_c64.json", 1.125, 43.0);
        write("fixed_direct_c1.json", 0.100, 0.0);
        write("fixed_nginx_c1.json", 0.120, 0.0);
        write("fixed_cache_hit_c1.json", 0.110, 0.0);
        write("fixed_nginx_c64.json", 1.0, 10.0);
        write("fixed_proxy_c64.json", 1.0, 15.0);
        write("fixed_cache_hit_c64.json", 1.0, 12.0);
        let summary = report(&dir).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        let miss = &summary["response_cache_miss"];
        assert_eq!(miss["memory_c64"]["added_p50_ms"], 0.25, "{miss}");
        assert_eq!(
            miss["memory_c64"]["added_cpu_us_per_request"], 6.5,
            "{miss}"
        );
        assert_eq!(
            miss["memory_lookup_c64"]["added_cpu_us_per_request"], 3.0,
            "the lookup alone, against the same route without a rule: {miss}"
        );
        assert_eq!(miss["memory_lookup_c64"]["added_p50_ms"], 0.125, "{miss}");
        assert!(miss.get("redis_c64").is_none() && miss.get("memory_c1").is_none());
        assert!(miss.get("redis_lookup_c64").is_none());
        let nginx = &summary["nginx_reference"];
        assert_eq!(nginx["c1_added_us"]["cache_hit"]["p50"], 10.0, "{nginx}");
        assert_eq!(
            nginx["c1_added_us"]["p50_cache_hit_over_nginx"], 0.5,
            "{nginx}"
        );
        assert_eq!(
            nginx["c64_cache_hit"]["cache_hit_over_nginx"], 1.2,
            "{nginx}"
        );
    }

    /// The bare stack's rows sit beside the proxy's: per round at c=1, its median and its ratio
    /// to nginx, and its CPU per request at c=64 against nginx's.
    #[test]
    fn the_bare_stack_is_reported_beside_nginx() {
        let dir = std::env::temp_dir().join(format!(
            "switchyard-load-report-bare-{}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let write = |name: &str, run: Value| {
            std::fs::write(dir.join(name), run.to_string()).unwrap();
        };
        let at = |ms: f64| json!({"latency_ms": {"p50": ms, "p99": ms}});
        for (tag, nginx, bare) in [
            ("", 0.120, 0.110),
            ("_r2", 0.120, 0.130),
            ("_r3", 0.120, 0.115),
        ] {
            write(&format!("fixed_direct_c1{tag}.json"), at(0.100));
            write(&format!("fixed_nginx_c1{tag}.json"), at(nginx));
            write(&format!("fixed_proxy_c1{tag}.json"), at(0.140));
            write(&format!("fixed_bare_c1{tag}.json"), at(bare));
        }
        let c64 = |rps: f64, total: f64| {
            json!({"throughput_rps": rps, "cpu": {"user_us_per_request": 1.0,
                   "system_us_per_request": total - 1.0, "total_us_per_request": total}})
        };
        write("fixed_nginx_c64.json", c64(100.0, 10.0));
        write("fixed_proxy_c64.json", c64(80.0, 15.0));
        write("fixed_bare_c64.json", c64(99.0, 9.0));
        let summary = nginx_reference(&dir);
        std::fs::remove_dir_all(&dir).unwrap();
        let c1 = &summary["c1_added_us"];
        assert_eq!(c1["bare"]["p50"], 15.0, "{c1}");
        assert_eq!(c1["p50_bare_over_nginx"], 0.75, "{c1}");
        assert_eq!(c1["rounds"][1]["bare"]["p50"], 30.0, "{c1}");
        assert_eq!(summary["c64_bare"]["bare_over_nginx"], 0.9, "{summary}");
        assert_eq!(summary["c64_bare"]["throughput_rps"], 99.0, "{summary}");
        assert!(summary["c64_before"].is_null(), "{summary}");
    }
}
