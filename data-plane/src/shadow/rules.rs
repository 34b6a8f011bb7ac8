//! Each shadow rule's state on this proxy: the sample draw, the requests-per-second bucket,
//! the daily spend cap and the error-rate stop, and the queues of copies waiting to be sent
//! ([`Shadows`]). Below the proxy's shared state, which holds it: nothing here calls a request
//! phase or the sender.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::HeaderMap;
use switchyard_engine::{RandomSource, ShadowRule, SplitMix64, StopReason};
use switchyard_provider::Usage;
use switchyard_state::unix_ms;
use tokio::time::Instant;

use super::queue::Queue;

use crate::endpoint::Endpoint;
use crate::metrics::Metrics;
use crate::request::Inspected;
use crate::snapshot::View;

/// The live side of a pair, as the client got it.
#[derive(Debug, Clone)]
pub struct Live {
    pub ok: bool,
    /// Until the answer started (a plain answer: all of it).
    pub first_byte_ms: u64,
    pub total_ms: u64,
    pub usage: Usage,
    /// Pico-USD; `None`: unpriced.
    pub cost_pico: Option<u128>,
    /// The plain answer's body (shared bytes), when it was a JSON answer.
    pub answer: Option<Bytes>,
    /// A stream's chunks as the client got them (`None`: not a stream, or too long).
    pub stream: Option<Vec<Bytes>>,
}

/// One copy to send.
pub struct Job {
    pub(crate) rule: ShadowRule,
    pub(crate) view: Arc<View>,
    pub(crate) endpoint: Endpoint,
    pub(crate) inspected: Inspected,
    pub(crate) body: Bytes,
    pub(crate) headers: HeaderMap,
    pub(crate) query: Option<String>,
    pub(crate) live: Live,
}

/// A rule's state on this proxy.
pub(super) struct RuleState {
    /// The rule as it was when this state began: a changed rule starts afresh.
    rule: ShadowRule,
    tokens: f64,
    refilled: Instant,
    /// The UTC day (days since the epoch) `spent_pico` counts.
    day: u64,
    spent_pico: u128,
    /// Shadow calls finished and failed since the rule (re)started here.
    sent: u64,
    failed: u64,
    stopped: Option<StopReason>,
}

impl RuleState {
    fn new(rule: &ShadowRule, now: Instant) -> RuleState {
        RuleState {
            rule: rule.clone(),
            tokens: f64::from(rule.max_rps),
            refilled: now,
            day: 0,
            spent_pico: 0,
            sent: 0,
            failed: 0,
            stopped: None,
        }
    }

    /// A token of the requests-per-second bucket (capacity: one second's worth).
    fn take_token(&mut self, now: Instant) -> bool {
        let rate = f64::from(self.rule.max_rps);
        let elapsed = now.saturating_duration_since(self.refilled).as_secs_f64();
        self.tokens = (self.tokens + elapsed * rate).min(rate);
        self.refilled = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    fn spent_today(&mut self, day: u64) -> u128 {
        if self.day != day {
            self.day = day;
            self.spent_pico = 0;
        }
        self.spent_pico
    }
}

/// What [`Shadows::offer`] decided for one rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offer {
    NotSampled,
    Queued,
    RpsCapped,
    SpendCapped,
    Stopped,
    QueueFull,
}

/// The copies waiting for the sender, shared by the state's [`Shadows`] and the sender.
pub type ShadowQueue = Arc<Queue<Job>>;

/// The proxy's shadow traffic: the queues and each rule's caps.
pub struct Shadows {
    queue: Arc<Queue<Job>>,
    rules: Mutex<HashMap<i64, RuleState>>,
    /// Copies queued or being sent, not yet recorded.
    pending: std::sync::atomic::AtomicU64,
}

fn day_of(unix_ms: u64) -> u64 {
    unix_ms / 86_400_000
}

impl Shadows {
    /// The shadow state and its queues (for the sender, [`super::run`]; they close when the state
    /// is dropped).
    pub fn new() -> (Shadows, ShadowQueue) {
        let queue = Arc::new(Queue::default());
        (
            Shadows {
                queue: Arc::clone(&queue),
                rules: Mutex::new(HashMap::new()),
                pending: std::sync::atomic::AtomicU64::new(0),
            },
            queue,
        )
    }

    /// Whether a copy of `rule` taken off the queue may still be sent: the proxy's current
    /// configuration holds the rule unchanged, enabled, unexpired and not stopped (there or by
    /// this proxy's own error-rate stop).
    pub(crate) fn still_wanted(&self, view: Option<&View>, rule: &ShadowRule, model: &str) -> bool {
        let current = view.and_then(|v| v.snapshot.shadows().iter().find(|r| r.id == rule.id));
        current.is_some_and(|current| {
            current == rule
                && current.applies(model, unix_ms())
                && self.with_rule(rule, |s| s.stopped.is_none())
        })
    }

    fn with_rule<T>(&self, rule: &ShadowRule, f: impl FnOnce(&mut RuleState) -> T) -> T {
        let mut rules = self.rules.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let entry = rules
            .entry(rule.id)
            .or_insert_with(|| RuleState::new(rule, now));
        if entry.rule != *rule {
            *entry = RuleState::new(rule, now);
        }
        f(entry)
    }

    /// Offers a finished request of `model` to every rule of its view's `rules` that matches it
    /// (the request's `seed` draws the samples); `job` makes the copy a queued rule sends. Never
    /// waits.
    pub(super) fn offer(
        &self,
        metrics: &Metrics,
        rules: &[ShadowRule],
        model: &str,
        seed: u64,
        job: impl Fn(&ShadowRule) -> Job,
    ) {
        let now_ms = unix_ms();
        self.forget_removed(rules);
        let mut rng = draws(seed);
        for rule in rules {
            if !rule.applies(model, now_ms) {
                continue;
            }
            let offer = self.decide(rule, now_ms, &mut rng);
            let offer = if offer == Offer::Queued {
                // Counted before the send, so a worker's decrement never comes first.
                self.pending
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                match self.queue.push(rule.id, job(rule)) {
                    Ok(()) => Offer::Queued,
                    Err(_) => {
                        self.pending
                            .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
                        metrics
                            .shadow_queue_drops
                            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        Offer::QueueFull
                    }
                }
            } else {
                offer
            };
            let outcome = match offer {
                Offer::NotSampled | Offer::Queued => continue,
                Offer::RpsCapped => "rps_capped",
                Offer::SpendCapped => "spend_capped",
                Offer::Stopped => "stopped",
                Offer::QueueFull => "queue_full",
            };
            metrics.shadow_requests.add([&rule.name, outcome], 1);
        }
    }

    /// Shadow copies queued or being sent whose comparison is not recorded yet.
    pub fn pending(&self) -> u64 {
        self.pending.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// One copy is done with (sent and recorded, or dropped unsent).
    pub(crate) fn settled(&self) {
        self.pending
            .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Drops the state of rules no longer in the snapshot (only when there is some).
    fn forget_removed(&self, rules: &[ShadowRule]) {
        let mut states = self.rules.lock().unwrap_or_else(|e| e.into_inner());
        if states.len() > rules.len() {
            states.retain(|id, _| rules.iter().any(|r| r.id == *id));
        }
    }

    /// The sample draw and the caps, for one rule.
    pub(super) fn decide(
        &self,
        rule: &ShadowRule,
        now_ms: u64,
        rng: &mut impl RandomSource,
    ) -> Offer {
        if !sampled(rule, rng) {
            return Offer::NotSampled;
        }
        self.with_rule(rule, |s| {
            if s.stopped.is_some() {
                return Offer::Stopped;
            }
            if let Some(cap) = rule.max_daily_spend_micros {
                if s.spent_today(day_of(now_ms)) >= u128::from(cap) * 1_000_000 {
                    return Offer::SpendCapped;
                }
            }
            if !s.take_token(Instant::now()) {
                return Offer::RpsCapped;
            }
            Offer::Queued
        })
    }

    /// A shadow call finished: its cost counts toward the day's cap and its outcome toward the
    /// error-rate stop.
    pub(crate) fn finished(&self, rule: &ShadowRule, ok: bool, cost_pico: Option<u128>) {
        let day = day_of(unix_ms());
        self.with_rule(rule, |s| {
            let spent = s.spent_today(day);
            s.spent_pico = spent.saturating_add(cost_pico.unwrap_or(0));
            s.sent += 1;
            s.failed += u64::from(!ok);
            if let Some(rate) = rule.error_rate_stop_per_mille {
                if s.stopped.is_none()
                    && s.sent >= u64::from(rule.error_rate_min_sample)
                    && s.failed * 1000 >= u64::from(rate) * s.sent
                {
                    s.stopped = Some(StopReason::ErrorRate);
                    tracing::warn!(
                        rule = %rule.name,
                        sent = s.sent,
                        failed = s.failed,
                        "shadow rule stopped: the target's error rate passed its threshold"
                    );
                }
            }
        });
    }
}

/// The sample draws of a request: one per rule that applies, in the snapshot's order.
pub(super) fn draws(seed: u64) -> SplitMix64 {
    SplitMix64::new(seed ^ 0x5AD0_5AD0_5AD0_5AD0)
}

/// One rule's sample draw.
pub(super) fn sampled(rule: &ShadowRule, rng: &mut impl RandomSource) -> bool {
    rng.next_u64() % 10_000 < u64::from(rule.sample_basis_points)
}

impl Drop for Shadows {
    fn drop(&mut self) {
        self.queue.close();
    }
}
