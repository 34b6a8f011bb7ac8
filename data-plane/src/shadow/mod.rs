//! Shadow traffic: a sample of the requests a shadow rule matches is copied to the rule's target
//! once the client's answer is complete, and the two answers are compared.
//!
//! A request a rule may want keeps a [`Candidate`] in its trail; once the request has finished
//! (a plain answer when it is sent, a stream when it ends) the candidate is offered to the rules:
//! the rule matches, the sample draw hits, the rule is not stopped, its spend cap for the day has
//! room and its per-proxy requests-per-second bucket has a token (`rules`: each rule's state);
//! then the copy goes on its rule's bounded queue ([`queue`]: a full queue drops the copy and
//! counts it). Nothing on the request path waits for a shadow.
//!
//! A background task (`shadow_send`, above the proxy's state that holds these rules and queues)
//! takes copies off the queues, the rules taking turns, each rule at most
//! [`queue::RULE_MAX_IN_FLIGHT`] calls at a time and the proxy at most
//! [`queue::MAX_IN_FLIGHT`], so one slow or hanging target never holds another rule's copies. A
//! copy whose rule, by its turn, is gone from the current configuration, changed, disabled,
//! expired or stopped is dropped unsent. Each call is bounded by the request timeout and goes
//! through the same wire plan and [`Attempt`](crate::attempt::Attempt) as live traffic
//! (translated when the target speaks another protocol), but never through the failover loop: a
//! shadow call reports nothing to the state store (no cooldown, breaker, health or in-flight
//! count), takes no limit and adds nothing to the client's usage. Its outcome goes to the
//! comparison (`compare`), the `switchyard_shadow_requests_total` metric and, in a fleet, the
//! usage batches (`UsageBatch.shadows`) the control plane aggregates per rule and minute.
//!
//! Chat completions, messages, Gemini generate and Responses requests (not `background`) are
//! shadowed, streamed or not; embeddings, images, audio and count-tokens never. The sample draw
//! is made when the request arrives (from the request's seed, the same draws the offer makes), so
//! only a sampled request keeps a copy of itself. A sampled stream keeps the chunks the client
//! got ([`Gathered`]: shared bytes, no copy, at most [`MAX_GATHERED`] bytes) and the shadow
//! stream's are kept the same way; both are read back into text, finish reason and tool calls
//! ([`StreamDigester`](switchyard_provider::StreamDigester)) on the background task, never on the
//! request path. A longer stream is compared on status, latency, tokens and cost only.

pub(crate) mod compare;
mod queue;
pub(crate) mod rules;

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::HeaderMap;
use switchyard_engine::ShadowRule;
use switchyard_provider::Usage;
use switchyard_state::unix_ms;
use tokio::time::{Duration, Instant};

use self::rules::{draws, sampled, Job, Live, Shadows};

use crate::endpoint::Endpoint;
use crate::metrics::Metrics;
use crate::request::Inspected;
use crate::snapshot::View;

/// A request that may be shadowed, kept until it has finished (a stream: until its end).
pub struct Candidate {
    pub view: Arc<View>,
    pub endpoint: Endpoint,
    pub inspected: Inspected,
    pub body: Bytes,
    pub headers: HeaderMap,
    pub query: Option<String>,
    pub seed: u64,
    pub started: Instant,
    /// When the answer started (a committed stream's first chunk, or the whole plain answer).
    pub first_byte_ms: u64,
    pub answer: Option<Bytes>,
    /// A stream's chunks, gathered as they go out to the client.
    pub stream: Option<Arc<Gathered>>,
}

impl Candidate {
    /// Whether a rule of `view` samples this request now: its copy is kept only then. The
    /// draws are the ones [`Shadows`] makes when the request is offered (same seed, same order).
    pub fn wanted(view: &View, endpoint: Endpoint, inspected: &Inspected, seed: u64) -> bool {
        let now = unix_ms();
        let mut rng = draws(seed);
        eligible(endpoint, inspected)
            && view
                .snapshot
                .shadows()
                .iter()
                .filter(|r| r.applies(&inspected.model, now))
                .any(|r| sampled(r, &mut rng))
    }

    /// The request finished: offers it to the rules.
    pub fn offer(self, shadows: &Shadows, metrics: &Metrics, finished: Finished) {
        let live = Live {
            ok: finished.ok,
            first_byte_ms: self.first_byte_ms,
            total_ms: millis(self.started.elapsed()),
            usage: finished.usage,
            cost_pico: finished.cost_pico,
            answer: self.answer.clone(),
            stream: self.stream.as_ref().and_then(|g| g.take()),
        };
        let job = |rule: &ShadowRule| Job {
            rule: rule.clone(),
            view: Arc::clone(&self.view),
            endpoint: self.endpoint,
            inspected: self.inspected.clone(),
            body: self.body.clone(),
            headers: self.headers.clone(),
            query: self.query.clone(),
            live: live.clone(),
        };
        let rules = self.view.snapshot.shadows();
        shadows.offer(metrics, rules, &self.inspected.model, self.seed, job);
    }
}

/// What a finished request got (the trail's `on_finish` passes it): the live side of its
/// shadow copies.
#[derive(Debug, Clone, Copy)]
pub struct Finished {
    /// Answered below 400, and a stream completed.
    pub ok: bool,
    pub usage: Usage,
    /// Pico-USD; `None`: unpriced.
    pub cost_pico: Option<u128>,
}

/// The most bytes of one streamed answer kept for a comparison (each side).
pub const MAX_GATHERED: usize = 1 << 20;

/// The chunks of a streamed answer, kept for a shadow comparison: shared bytes, at most
/// [`MAX_GATHERED`] of them; a longer stream keeps nothing (and is not compared on content).
#[derive(Default)]
pub struct Gathered(Mutex<GatheredChunks>);

#[derive(Default)]
struct GatheredChunks {
    chunks: Vec<Bytes>,
    len: usize,
    overflow: bool,
}

impl Gathered {
    pub fn push(&self, chunk: &Bytes) {
        let mut g = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if g.overflow || chunk.is_empty() {
            return;
        }
        if g.len + chunk.len() > MAX_GATHERED {
            g.overflow = true;
            g.chunks = Vec::new();
            return;
        }
        g.len += chunk.len();
        g.chunks.push(chunk.clone());
    }

    /// A copy of the chunks (shared bytes), unless the stream was too long.
    pub fn copy(&self) -> Option<Vec<Bytes>> {
        let g = self.0.lock().unwrap_or_else(|e| e.into_inner());
        (!g.overflow).then(|| g.chunks.clone())
    }

    /// The chunks, unless the stream was too long.
    pub fn take(&self) -> Option<Vec<Bytes>> {
        let mut g = self.0.lock().unwrap_or_else(|e| e.into_inner());
        (!g.overflow).then(|| std::mem::take(&mut g.chunks))
    }
}

/// A duration in whole milliseconds (saturating).
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Whether a request of this kind can be shadowed at all: chat (every protocol) and
/// Responses requests, streamed or not, except background Responses.
pub fn eligible(endpoint: Endpoint, inspected: &Inspected) -> bool {
    !inspected.background && (endpoint.is_chat() || endpoint == Endpoint::Responses)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use switchyard_engine::{ShadowTarget, SplitMix64};

    use super::rules::Offer;
    use super::*;

    #[test]
    fn the_rps_bucket_holds_one_second_of_tokens() {
        let rule = ShadowRule {
            id: 1,
            name: "r".into(),
            model_pattern: "*".into(),
            target: ShadowTarget::Member(1),
            sample_basis_points: 10_000,
            max_rps: 3,
            max_daily_spend_micros: None,
            expires_at: None,
            error_rate_stop_per_mille: Some(500),
            error_rate_min_sample: 4,
            enabled: true,
            stopped: None,
        };
        let (shadows, _rx) = Shadows::new();
        let mut rng = SplitMix64::new(1);
        let offers: Vec<Offer> = (0..5).map(|_| shadows.decide(&rule, 0, &mut rng)).collect();
        assert_eq!(
            offers.iter().filter(|o| **o == Offer::Queued).count(),
            3,
            "{offers:?}"
        );
        // Two failures of four reach the 50 % threshold: the rule stops here.
        for ok in [true, false, true, false] {
            shadows.finished(&rule, ok, None);
        }
        assert_eq!(shadows.decide(&rule, 0, &mut rng), Offer::Stopped);
    }

    #[test]
    fn a_request_is_kept_exactly_when_the_offer_samples_it() {
        let yaml = "channels:\n  - { id: 1, name: sim, provider: mock }\nroutes:\n  - model_pattern: m\n    members:\n      - { id: 10, channel: sim }\nshadows:\n  - { name: a, model_pattern: m, target_member: 10, sample_percent: 30, max_rps: 100000 }\n  - { name: b, model_pattern: other, target_member: 10, sample_percent: 100, max_rps: 100000 }\n  - { name: c, model_pattern: '*', target_member: 10, sample_percent: 20, max_rps: 100000 }\n";
        let parts = crate::config::parse_yaml(yaml, 1).unwrap();
        let view = View::compile(Arc::new(switchyard_engine::Snapshot::new(parts)));
        let mut inspected = Inspected::default();
        inspected.model = "m".into();
        let (shadows, _rx) = Shadows::new();
        let (mut kept, mut agreed) = (0, 0);
        for seed in 0..2_000u64 {
            let wanted = Candidate::wanted(&view, Endpoint::ChatCompletions, &inspected, seed);
            // The offer's draws: one per rule that applies, in order.
            let mut rng = draws(seed);
            let offered = view
                .snapshot
                .shadows()
                .iter()
                .filter(|r| r.applies("m", 0))
                .map(|r| shadows.decide(r, 0, &mut rng))
                .fold(false, |any, o| any | (o != Offer::NotSampled));
            agreed += u32::from(wanted == offered);
            kept += u32::from(wanted);
        }
        assert_eq!(agreed, 2_000);
        // 1 - 0.7 * 0.8 = 44 % of the requests are sampled by one rule or both.
        assert!((780..=980).contains(&kept), "{kept}");
        // Never for an endpoint that is not shadowed, nor a background Responses request.
        assert!(!(0..200).any(|seed| Candidate::wanted(
            &view,
            Endpoint::Embeddings,
            &inspected,
            seed
        )));
        let mut background = inspected.clone();
        background.background = true;
        assert!(!(0..200).any(|seed| Candidate::wanted(
            &view,
            Endpoint::Responses,
            &background,
            seed
        )));
    }

    #[test]
    fn a_gathered_stream_longer_than_the_cap_keeps_nothing() {
        let g = Gathered::default();
        g.push(&Bytes::from_static(b"data: 1\n\n"));
        g.push(&Bytes::new());
        g.push(&Bytes::from_static(b"data: 2\n\n"));
        assert_eq!(g.take().unwrap().len(), 2);
        let g = Gathered::default();
        g.push(&Bytes::from(vec![b'x'; MAX_GATHERED]));
        assert_eq!(g.take().unwrap().len(), 1, "exactly the cap is kept");
        let g = Gathered::default();
        g.push(&Bytes::from(vec![b'x'; MAX_GATHERED]));
        g.push(&Bytes::from_static(b"y"));
        g.push(&Bytes::from_static(b"z"));
        assert_eq!(g.take(), None);
    }
}
