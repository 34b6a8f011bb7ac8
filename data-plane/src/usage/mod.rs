//! Usage accounting (fleet mode): every finished request adds its token usage to an in-memory
//! aggregate per (minute, token, team, route, channel, upstream model), and a background task
//! reports the aggregates to the control plane in batches over gRPC (`ReportUsage`), which
//! stores them in Postgres by minute (`GET /api/v1/usage` on the control plane).
//!
//! [`UsageReporter::record`] never waits on the network: it takes one short lock on one of 16
//! shards. When the control plane is away, usage keeps aggregating (at most
//! [`UsageConfig::max_keys`] distinct keys; requests with a new key beyond that are dropped and
//! counted in `switchyard_usage_dropped_requests_total`) and the unacknowledged batch is resent
//! with the same id until the control plane answers, which applies each batch id once. At
//! shutdown what is pending is sent once more (bounded). The buffer is `buffer`'s, the sending
//! `report`'s; the wire types and the bounds a record keeps are `switchyard_proto`'s.

mod buffer;
mod report;

use std::sync::Arc;

use switchyard_metrics::{Collect, Writer};
use switchyard_proto::usage::MAX_TOKENS_PER_REQUEST;
use switchyard_proto::{WatchAuth, WatchError};
use switchyard_provider::Usage;
use tokio_util::sync::CancellationToken;

pub use self::buffer::{
    TrialCounts, UsageBuffer, UsageConfig, UsageCounts, UsageKey, MAX_SHADOW_KEYS, SHARDS,
};
pub use self::report::{report_usage, UsageClient, CALL_TIMEOUT, MAX_RETRY_BACKOFF};

// What the provider crate lets one request report is what the control plane accepts per request.
const _: () = assert!(switchyard_provider::MAX_REQUEST_TOKENS == MAX_TOKENS_PER_REQUEST);

/// The proxy's usage accounting: the hot-path [`record`](UsageReporter::record) and the
/// background reporting task.
#[derive(Debug)]
pub struct UsageReporter {
    buffer: Arc<UsageBuffer>,
}

impl UsageReporter {
    /// Starts reporting to the control plane at `endpoint` (with the snapshot stream's TLS and
    /// fleet token) on the current tokio runtime. The task ends after its final flush once
    /// `shutdown` is cancelled; its handle says when.
    pub fn start(
        endpoint: String,
        auth: WatchAuth,
        config: UsageConfig,
        shutdown: CancellationToken,
    ) -> Result<(Arc<UsageReporter>, tokio::task::JoinHandle<()>), WatchError> {
        // Parse the endpoint now, so a bad one fails at start rather than in the task.
        UsageClient::new(&endpoint, &auth)?;
        let reporter = Arc::new(UsageReporter::unstarted(&config));
        let buffer = Arc::clone(&reporter.buffer);
        let task = tokio::spawn(async move {
            if let Err(error) = report_usage(buffer, endpoint, auth, config, shutdown).await {
                tracing::error!(error = %error, "usage reporting stopped");
            }
        });
        Ok((reporter, task))
    }

    /// A reporter whose usage nobody sends (tests read it with [`take_batch`](Self::take_batch)).
    pub fn unstarted(config: &UsageConfig) -> UsageReporter {
        UsageReporter {
            buffer: Arc::new(UsageBuffer::new(config)),
        }
    }

    /// Counts one finished request and its token usage under `key`. Cheap and never blocks on
    /// I/O; call it once per request that reached a channel (with zero usage when the upstream
    /// reported none). `usage.input_tokens` includes the cached tokens, as
    /// [`switchyard_provider::Usage`] defines it. Each figure is capped at the per-request bound
    /// the control plane accepts (the provider crate already keeps upstream figures within it).
    /// `cost_pico`: the request's cost in pico-USD, `None` when no price matched its usage.
    pub fn record(&self, key: UsageKey, usage: Usage, cost_pico: Option<u128>) {
        self.buffer.add(
            key,
            UsageCounts {
                requests: 1,
                input_tokens: usage.input_tokens.min(MAX_TOKENS_PER_REQUEST),
                output_tokens: usage.output_tokens.min(MAX_TOKENS_PER_REQUEST),
                cached_tokens: usage.cached_tokens.min(MAX_TOKENS_PER_REQUEST),
                cost_pico_usd: cost_pico.map_or(0, |c| u64::try_from(c).unwrap_or(u64::MAX)),
                unpriced_requests: u64::from(cost_pico.is_none()),
                ..UsageCounts::default()
            },
        );
    }

    /// Adds one request answered from the response cache: a request with no tokens and no
    /// cost, and what the answer it served had used (`saved`) and cost (`saved_cost_pico`,
    /// `None`: unpriced, counted as nothing saved).
    pub fn record_hit(&self, key: UsageKey, saved: Usage, saved_cost_pico: Option<u128>) {
        self.buffer.add(
            key,
            UsageCounts {
                requests: 1,
                cache_hits: 1,
                saved_input_tokens: saved.input_tokens.min(MAX_TOKENS_PER_REQUEST),
                saved_output_tokens: saved.output_tokens.min(MAX_TOKENS_PER_REQUEST),
                saved_cost_pico_usd: saved_cost_pico
                    .map_or(0, |c| u64::try_from(c).unwrap_or(u64::MAX)),
                ..UsageCounts::default()
            },
        );
    }

    /// Adds one shadowed pair's comparison for `rule` (sent with the next batch). Never blocks
    /// on I/O; a full buffer of shadow keys drops it.
    pub fn record_shadow(&self, rule: i64, counts: &switchyard_proto::ShadowCounts) {
        if !self.buffer.add_shadow(rule, counts) {
            tracing::debug!(
                rule,
                "shadow comparison dropped: too many pending shadow keys"
            );
        }
    }

    /// Adds one finished request's row to the request log (sent with the next batch). Never
    /// blocks on I/O; a full log drops the row (counted in
    /// `switchyard_request_log_dropped_rows_total`).
    pub fn record_request(&self, row: switchyard_proto::v1::RequestLogRecord) {
        if !self.buffer.add_log(row) {
            tracing::debug!("request-log row dropped: too many rows pending");
        }
    }

    /// Adds a semantic cache rule's counts (sent with the next batch); a full buffer of keys
    /// drops them.
    pub fn record_trial(&self, rule: i64, counts: &TrialCounts) {
        if !self.buffer.add_trial(rule, counts) {
            tracing::debug!(rule, "semantic trial counts dropped: too many pending keys");
        }
    }

    /// Adds what `guardrail` did for one request or answer (sent with the next batch). Never
    /// blocks on I/O; a full buffer of guardrail keys drops it.
    pub fn record_guardrail(&self, guardrail: i64, report: &switchyard_proto::v1::GuardrailRecord) {
        if !self.buffer.add_guardrail(guardrail, report) {
            tracing::debug!(
                guardrail,
                "guardrail report dropped: too many pending guardrail keys"
            );
        }
    }

    /// A hard limit refused a request: told once per limit and window (with the next batch)
    /// so the control plane can notify that it started refusing. Never blocks on I/O.
    pub fn record_refusing(
        &self,
        key: switchyard_engine::LimitKey,
        window_start: u64,
        at: u64,
        id_of: impl FnOnce() -> Option<i64>,
    ) {
        self.buffer.add_refusing(key, window_start, at, id_of);
    }

    /// Distinct keys waiting to be reported.
    pub fn pending_keys(&self) -> usize {
        self.buffer.pending_keys()
    }

    /// Takes the next batch out of the buffer (what the background task sends).
    pub fn take_batch(&self) -> Option<switchyard_proto::v1::UsageBatch> {
        self.buffer.take_batch()
    }
}

/// `switchyard_usage_*` families for `/metrics`.
impl Collect for UsageReporter {
    fn collect(&self, w: &mut Writer<'_>) {
        self.buffer.collect(w);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    #[test]
    fn record_counts_the_request_and_its_tokens() {
        let reporter = UsageReporter::unstarted(&UsageConfig::default());
        let key = UsageKey {
            token: "app".into(),
            team: Some("research".into()),
            route: "gpt-*".into(),
            channel: "openai".into(),
            model: "gpt-4o-mini".into(),
        };
        let usage = |i, o, c| Usage {
            input_tokens: i,
            output_tokens: o,
            cached_tokens: c,
        };
        reporter.record(key.clone(), usage(100, 20, 50), Some(1_500_000));
        reporter.record(key.clone(), usage(1, 2, 0), None);
        reporter.record(key, usage(0, 0, 0), Some(2));
        assert_eq!(reporter.pending_keys(), 1);
        let batch = reporter.take_batch().unwrap();
        let r = &batch.records[0];
        assert_eq!(
            (r.requests, r.input_tokens, r.output_tokens, r.cached_tokens),
            (3, 101, 22, 50)
        );
        assert_eq!(
            (r.cost_pico_usd, r.unpriced_requests),
            (1_500_002, 1),
            "priced costs add up exactly; the unpriced request is counted, not priced at 0"
        );
        assert_eq!((r.token.as_str(), r.team.as_str()), ("app", "research"));
        assert_eq!(
            (r.route.as_str(), r.channel.as_str(), r.model.as_str()),
            ("gpt-*", "openai", "gpt-4o-mini")
        );
        assert_eq!(r.bucket_start_unix_s % 60, 0);
    }

    #[tokio::test]
    async fn an_unparseable_endpoint_fails_at_start() {
        let result = UsageReporter::start(
            "not a uri".into(),
            WatchAuth::default(),
            UsageConfig::default(),
            CancellationToken::new(),
        );
        assert!(result.is_err());
    }
}
