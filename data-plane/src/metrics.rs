//! The proxy's own counters and histograms (plain atomics, through `switchyard-metrics`). Label
//! values are either fixed sets (endpoint, status class, outcome) or names from the configuration
//! (route patterns, channel names; token names only when the operator protects `/metrics` and
//! opts in), never request content, so every family is bounded by the snapshot.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

use switchyard_engine::fxhash::FxBuildHasher;
use switchyard_metrics::{Collect, Histogram, Writer};

use crate::endpoint::Endpoint;
use crate::upstream::TransportCause;

const CLASSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];

/// Attempt outcomes (a label of `switchyard_attempts_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptOutcome {
    Success,
    Retryable,
    Rejected,
    MemberSpecific,
    Transport,
    StreamBroken,
}

impl AttemptOutcome {
    pub fn label(self) -> &'static str {
        match self {
            AttemptOutcome::Success => "success",
            AttemptOutcome::Retryable => "retryable",
            AttemptOutcome::Rejected => "rejected",
            AttemptOutcome::MemberSpecific => "member_specific",
            AttemptOutcome::Transport => "transport",
            AttemptOutcome::StreamBroken => "stream_broken",
        }
    }
}

/// Upper bounds in microseconds (exposed in seconds: 5 ms to 30 s).
const LATENCY_BUCKETS: [u64; 12] = [
    5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000, 2_500_000, 5_000_000,
    10_000_000, 30_000_000,
];
/// The same, 25 µs to 10 ms.
const OVERHEAD_BUCKETS: [u64; 10] = [25, 50, 100, 150, 250, 500, 1_000, 2_500, 5_000, 10_000];

/// A counter family of this proxy. Label values come from the configuration (route patterns,
/// channel and token names) and fixed sets, never from what a client sends, so a fast non-keyed
/// hash is safe here.
pub type Family<const L: usize> = switchyard_metrics::Family<L, FxBuildHasher>;

/// A histogram family of this proxy (labels from the configuration, as [`Family`]'s).
pub type HistogramFamily<const L: usize, const N: usize> =
    switchyard_metrics::HistogramFamily<L, N, FxBuildHasher>;

pub struct Metrics {
    /// `endpoint`, `route` (pattern; empty before routing), final `channel` (empty when no
    /// attempt was made), status `code` class.
    pub requests: Family<4>,
    /// `channel`, `outcome`.
    pub attempts: Family<2>,
    /// `channel`, `cause` (`dns`, `refused`, `reset`, `tls`, `timeout`, `other`): attempts that
    /// failed in transport.
    pub transport_failures: Family<2>,
    /// `route`, `channel`, `kind` (`input`, `output`, `cached`): what `/metrics` shows by
    /// default.
    pub tokens: Family<3>,
    /// The same by `token` (name) as well: shown instead, and counted instead, once the
    /// operator opts in ([`Metrics::name_tokens`]). Token names often name people or customers.
    pub tokens_by_name: Family<4>,
    /// Whether token names are counted and shown.
    token_names: AtomicBool,
    /// `route`, `channel`: micro-USD of the priced requests (rounded up per request).
    pub spend: Family<2>,
    /// `team` (its name): the same for the requests of keys in a team (a key without a team
    /// is counted in `spend` only).
    pub team_spend: Family<1>,
    /// `scope` (kind), `metric`, `window`: requests refused by a hard limit.
    pub limit_refusals: Family<3>,
    /// `scope` (kind), `metric`, `window`: soft limits crossed (one per crossing request).
    pub soft_crossings: Family<3>,
    /// `rule` (shadow rule name), `outcome` (`success`, `failure`, `rps_capped`,
    /// `spend_capped`, `stopped`, `queue_full`): sampled requests and what became of them.
    pub shadow_requests: Family<2>,
    /// `route` (its pattern), `result` (`hit`, `miss`, `bypass`): requests of routes with a
    /// response cache rule.
    pub cache_requests: Family<2>,
    /// `rule` (its name), `event` (`looked_up`, `bypass`, `hit`, `would_hit`, `agreed`,
    /// `disagreed`): the semantic cache's lookups by meaning.
    pub semantic_cache: Family<2>,
    /// `rule` (guardrail name), `stage` (`request`, `response`), `outcome` (`pass`, `block`,
    /// `redact`, `log`, `would_block`, `would_redact`, `external_failure`): guardrail checks.
    pub guardrail_checks: Family<3>,
    /// Shadow copies dropped because the background queue was full.
    pub shadow_queue_drops: AtomicU64,
    pub failovers: AtomicU64,
    pub cooldowns: AtomicU64,
    pub breaker_trips: AtomicU64,
    pub credentials_disabled: AtomicU64,
    pub sticky_hits: AtomicU64,
    pub sticky_escapes: AtomicU64,
    /// `channel`, `model` (the serving member's upstream model, as configured; empty for a
    /// pass-through request): one series per route member at most.
    pub upstream_latency: HistogramFamily<2, 12>,
    /// `channel`, `model`, as `upstream_latency`: a stream's time from arrival to its first
    /// chunk, relayed to the client as it arrives.
    pub time_to_first_token: HistogramFamily<2, 12>,
    pub gateway_overhead: Histogram<10>,
    /// Realtime sessions open now.
    pub realtime_sessions: AtomicU64,
    /// `direction` (`client_to_upstream`, `upstream_to_client`): realtime frames relayed.
    pub realtime_frames: Family<1>,
}

/// The spend families: by route and channel, and by team.
fn spend_families() -> (Family<2>, Family<1>) {
    (
        Family::new(
            "switchyard_spend_micro_usd_total",
            "Cost of the priced requests in micro-USD (USD x 10^6), by route and final channel.",
            ["route", "channel"],
        ),
        Family::new(
            "switchyard_team_spend_micro_usd_total",
            "Cost of the priced requests of keys in a team in micro-USD (USD x 10^6), by team.",
            ["team"],
        ),
    )
}

/// The limit families: hard refusals and soft crossings.
fn limit_families() -> (Family<3>, Family<3>) {
    (
        Family::new(
            "switchyard_limit_refusals_total",
            "Requests refused by a hard limit, by scope kind, metric and window.",
            ["scope", "metric", "window"],
        ),
        Family::new(
            "switchyard_limit_soft_crossings_total",
            "Soft limits crossed (requests let through beyond them), by scope kind, metric and window.",
            ["scope", "metric", "window"],
        ),
    )
}

/// The latency histograms by channel and upstream model: per attempt, and time to first token.
fn latency_families() -> (HistogramFamily<2, 12>, HistogramFamily<2, 12>) {
    (
        HistogramFamily::new(
            "switchyard_upstream_latency_seconds",
            "Upstream latency per attempt (time to response headers, first byte for streams), by channel and upstream model.",
            ["channel", "model"],
            LATENCY_BUCKETS,
        ),
        HistogramFamily::new(
            "switchyard_time_to_first_token_seconds",
            "Streams: time from the request's arrival to its first chunk relayed to the client, by channel and upstream model.",
            ["channel", "model"],
            LATENCY_BUCKETS,
        ),
    )
}

impl Default for Metrics {
    fn default() -> Metrics {
        let (spend, team_spend) = spend_families();
        let (limit_refusals, soft_crossings) = limit_families();
        let (upstream_latency, time_to_first_token) = latency_families();
        Metrics {
            requests: Family::new(
                "switchyard_requests_total",
                "Requests served, by endpoint, route, final channel and status class.",
                ["endpoint", "route", "channel", "code"],
            ),
            attempts: Family::new(
                "switchyard_attempts_total",
                "Upstream attempts, by channel and outcome.",
                ["channel", "outcome"],
            ),
            transport_failures: Family::new(
                "switchyard_upstream_transport_failures_total",
                "Upstream attempts that failed in transport, by channel and cause (dns, refused, reset, tls, timeout, other).",
                ["channel", "cause"],
            ),
            tokens: Family::new(
                "switchyard_tokens_total",
                "Tokens read from upstream answers and streams, by route, channel and kind (input includes cached).",
                ["route", "channel", "kind"],
            ),
            tokens_by_name: Family::new(
                "switchyard_tokens_total",
                "Tokens read from upstream answers and streams, by route, channel, token and kind (input includes cached).",
                ["route", "channel", "token", "kind"],
            ),
            token_names: AtomicBool::new(false),
            spend,
            team_spend,
            limit_refusals,
            soft_crossings,
            shadow_requests: Family::new(
                "switchyard_shadow_requests_total",
                "Requests sampled by a shadow rule, by rule name and outcome (success, failure, rps_capped, spend_capped, stopped, queue_full).",
                ["rule", "outcome"],
            ),
            cache_requests: Family::new(
                "switchyard_cache_requests_total",
                "Requests covered by a response cache rule, by route and result (hit, miss, bypass).",
                ["route", "result"],
            ),
            semantic_cache: Family::new(
                "switchyard_semantic_cache_total",
                "Semantic cache lookups by rule name and event (looked_up, bypass, hit, would_hit, agreed, disagreed).",
                ["rule", "event"],
            ),
            guardrail_checks: Family::new(
                "switchyard_guardrail_checks_total",
                "Guardrail checks, by guardrail name, stage (request, response) and outcome (pass, block, redact, log, would_block, would_redact, external_failure).",
                ["rule", "stage", "outcome"],
            ),
            shadow_queue_drops: AtomicU64::new(0),
            failovers: AtomicU64::new(0),
            cooldowns: AtomicU64::new(0),
            breaker_trips: AtomicU64::new(0),
            credentials_disabled: AtomicU64::new(0),
            sticky_hits: AtomicU64::new(0),
            sticky_escapes: AtomicU64::new(0),
            upstream_latency,
            time_to_first_token,
            gateway_overhead: Histogram::new(OVERHEAD_BUCKETS),
            realtime_sessions: AtomicU64::new(0),
            realtime_frames: Family::new(
                "switchyard_realtime_frames_total",
                "Realtime API frames relayed, by direction (client_to_upstream, upstream_to_client).",
                ["direction"],
            ),
        }
    }
}

impl Metrics {
    pub fn request(&self, endpoint: Endpoint, route: &str, channel: &str, status: u16) {
        let class = CLASSES[usize::from((status / 100).clamp(1, 5)) - 1];
        self.requests
            .add([endpoint.label(), route, channel, class], 1);
    }

    pub fn attempt(&self, channel: &str, outcome: AttemptOutcome) {
        self.attempts.add([channel, outcome.label()], 1);
    }

    /// An attempt on `channel` failed in transport for `cause`.
    pub fn transport_failure(&self, channel: &str, cause: TransportCause) {
        self.transport_failures.add([channel, cause.as_str()], 1);
    }

    pub fn usage(
        &self,
        route: &str,
        channel: &str,
        token: &str,
        usage: &switchyard_provider::Usage,
    ) {
        for (kind, n) in [
            ("input", usage.input_tokens),
            ("output", usage.output_tokens),
            ("cached", usage.cached_tokens),
        ] {
            if n == 0 {
                continue;
            }
            if self.names_tokens() {
                self.tokens_by_name.add([route, channel, token, kind], n);
            } else {
                self.tokens.add([route, channel, kind], n);
            }
        }
    }

    /// From now on token names are counted (a `token` label on `switchyard_tokens_total`): only
    /// when the operator protects `/metrics` with a credential.
    pub fn name_tokens(&self) {
        self.token_names.store(true, Relaxed);
    }

    pub fn names_tokens(&self) -> bool {
        self.token_names.load(Relaxed)
    }

    /// A priced request's cost (pico-USD), counted in micro-USD rounded up, by route and
    /// channel, and by `team` when its key is in one.
    pub fn spend(&self, route: &str, channel: &str, team: Option<&str>, cost_pico: u128) {
        let micros = u64::try_from(cost_pico.div_ceil(1_000_000)).unwrap_or(u64::MAX);
        if micros > 0 {
            self.spend.add([route, channel], micros);
            if let Some(team) = team {
                self.team_spend.add([team], micros);
            }
        }
    }

    /// A limit refused a request (`refused`) or a soft one was crossed.
    pub fn limit(&self, key: &switchyard_engine::LimitKey, refused: bool) {
        let family = if refused {
            &self.limit_refusals
        } else {
            &self.soft_crossings
        };
        family.add(
            [key.scope.as_str(), key.metric.as_str(), key.window.as_str()],
            1,
        );
    }

    /// These families alone, as `/metrics` shows them.
    pub fn render(&self) -> String {
        switchyard_metrics::render(self)
    }
}

impl Collect for Metrics {
    fn collect(&self, w: &mut Writer<'_>) {
        self.requests.render(w);
        self.attempts.render(w);
        self.transport_failures.render(w);
        if self.names_tokens() {
            self.tokens_by_name.render(w);
        } else {
            self.tokens.render(w);
        }
        self.spend.render(w);
        self.team_spend.render(w);
        self.limit_refusals.render(w);
        self.soft_crossings.render(w);
        self.shadow_requests.render(w);
        self.realtime_frames.render(w);
        w.gauge(
            "switchyard_realtime_sessions",
            "Realtime API sessions open now.",
            self.realtime_sessions.load(Relaxed),
        );
        self.cache_requests.render(w);
        self.semantic_cache.render(w);
        self.guardrail_checks.render(w);
        for (name, help, value) in [
            (
                "switchyard_shadow_queue_drops_total",
                "Shadow copies dropped because the background shadow queue was full.",
                &self.shadow_queue_drops,
            ),
            (
                "switchyard_failovers_total",
                "Switches to another member within a request.",
                &self.failovers,
            ),
            (
                "switchyard_cooldowns_total",
                "Member cooldowns started or extended.",
                &self.cooldowns,
            ),
            (
                "switchyard_breaker_trips_total",
                "Channel breakers tripped.",
                &self.breaker_trips,
            ),
            (
                "switchyard_credentials_disabled_total",
                "Credentials disabled by keyword rules.",
                &self.credentials_disabled,
            ),
            (
                "switchyard_sticky_hits_total",
                "Requests served by their session's bound member.",
                &self.sticky_hits,
            ),
            (
                "switchyard_sticky_escapes_total",
                "Sticky bindings that could not be used.",
                &self.sticky_escapes,
            ),
        ] {
            w.counter(name, help, value.load(Relaxed));
        }
        self.upstream_latency.render(w);
        self.time_to_first_token.render(w);
        self.gateway_overhead.render(
            w,
            "switchyard_gateway_overhead_seconds",
            "Time the gateway itself added to a request (total minus upstream time).",
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposition_has_counters_and_cumulative_buckets() {
        let m = Metrics::default();
        m.request(Endpoint::ChatCompletions, "gpt-4o", "openai-a", 200);
        m.request(Endpoint::ChatCompletions, "gpt-4o", "openai-a", 201);
        m.attempt("openai-a", AttemptOutcome::Retryable);
        m.transport_failure("openai-a", TransportCause::Refused);
        m.usage(
            "gpt-4o",
            "openai-a",
            "app",
            &switchyard_provider::Usage {
                input_tokens: 10,
                output_tokens: 3,
                cached_tokens: 0,
            },
        );
        m.spend("gpt-4o", "openai-a", Some("research"), 1_500_000);
        m.spend("gpt-4o", "openai-a", None, 1_000_000);
        m.upstream_latency
            .observe_micros(["openai-a", "gpt-4o-2024"], 30_000);
        m.time_to_first_token
            .observe_micros(["openai-a", "gpt-4o-2024"], 200_000);
        m.gateway_overhead.observe_micros(40);
        m.gateway_overhead.observe_micros(120);
        let text = m.render();
        assert!(text.contains(
            "switchyard_requests_total{endpoint=\"chat_completions\",route=\"gpt-4o\",channel=\"openai-a\",code=\"2xx\"} 2"
        ));
        assert!(text
            .contains("switchyard_attempts_total{channel=\"openai-a\",outcome=\"retryable\"} 1"));
        assert!(text.contains(
            "switchyard_upstream_transport_failures_total{channel=\"openai-a\",cause=\"refused\"} 1"
        ));
        assert!(text.contains(
            "switchyard_tokens_total{route=\"gpt-4o\",channel=\"openai-a\",kind=\"input\"} 10"
        ));
        assert!(
            !text.contains("\"app\""),
            "no token name by default: {text}"
        );
        assert!(
            !text.contains("kind=\"cached\""),
            "zero counts are not series"
        );
        assert!(text.contains("switchyard_gateway_overhead_seconds_bucket{le=\"0.00005\"} 1"));
        assert!(text.contains("switchyard_gateway_overhead_seconds_bucket{le=\"0.00015\"} 2"));
        assert!(text.contains("switchyard_gateway_overhead_seconds_count 2"));
        assert!(text
            .contains("switchyard_spend_micro_usd_total{route=\"gpt-4o\",channel=\"openai-a\"} 3"));
        assert!(
            text.contains("switchyard_team_spend_micro_usd_total{team=\"research\"} 2"),
            "{text}"
        );
        assert!(text.contains(
            "switchyard_upstream_latency_seconds_bucket{channel=\"openai-a\",model=\"gpt-4o-2024\",le=\"0.05\"} 1"
        ), "{text}");
        assert!(text.contains(
            "switchyard_time_to_first_token_seconds_bucket{channel=\"openai-a\",model=\"gpt-4o-2024\",le=\"0.1\"} 0"
        ), "{text}");
        assert!(text.contains(
            "switchyard_time_to_first_token_seconds_count{channel=\"openai-a\",model=\"gpt-4o-2024\"} 1"
        ), "{text}");
    }

    #[test]
    fn token_names_are_counted_and_shown_only_once_opted_in() {
        let m = Metrics::default();
        let usage = switchyard_provider::Usage {
            input_tokens: 10,
            output_tokens: 0,
            cached_tokens: 0,
        };
        m.usage("r", "c", "alice", &usage);
        m.name_tokens();
        m.usage("r", "c", "alice", &usage);
        let text = m.render();
        assert!(text.contains(
            "switchyard_tokens_total{route=\"r\",channel=\"c\",token=\"alice\",kind=\"input\"} 10"
        ), "{text}");
        assert_eq!(
            text.matches("# TYPE switchyard_tokens_total").count(),
            1,
            "{text}"
        );
        assert!(
            !text.contains("switchyard_tokens_total{route=\"r\",channel=\"c\",kind"),
            "{text}"
        );
    }

    #[test]
    fn label_values_are_escaped() {
        let m = Metrics::default();
        m.attempt("a\"b\\c\nd", AttemptOutcome::Success);
        assert!(m
            .render()
            .contains(r#"switchyard_attempts_total{channel="a\"b\\c\nd",outcome="success"} 1"#));
    }
}
