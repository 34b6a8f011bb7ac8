//! The proxy phase: the failover loop, written once: ask the engine, try the member (re-sending
//! on the same channel with the next credential), classify, report to the state store, and ask
//! the engine again with what was tried excluded — until success, a non-retryable outcome, the
//! budget or the deadline.
//!
//! The loop works on the request's context ([`Ctx`]: the request as received, its constraint,
//! its trail) and on its own rounds' state, [`Failover`], in three steps:
//! [`Failover::next_pick`], [`Failover::try_channel`], [`Failover::report`]. What a failure does
//! to shared state (cooldowns, breaker counts, the keyword rule) is the store's decision
//! (`StateStore::report_failure`, `StateStore::ban_keyword`); the loop acts on the effects.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::response::Response;
use http::HeaderMap;
use switchyard_engine::{
    select, Candidate, Channel, ChannelId, CredentialId, Decision, HealthView, Member, MemberId,
    Outcome as Selection, Provider, RandomSource, Reason, RetryBudget, Route, SplitMix64, Sticky,
};
use switchyard_provider::{Protocol, TranslateError};
use switchyard_state::{
    unix_ms, AttemptFailure, AttemptSuccess, FailurePolicy, InFlightGuard, KeywordBan, LimitRequest,
};
use tokio::time::Instant;
use tracing::field::Empty;
use tracing::{Instrument, Span};

use crate::admission::{topping_up, upstream_limits, Held, TOP_UP_POLL, TOP_UP_WAIT};
use crate::attempt::{Answer, Attempt, AttemptError, Committed, Failed, Outcome, Scope};
use crate::context::Ctx;
use crate::endpoint::Endpoint;
use crate::errors::{mask_key_like, GatewayError};
use crate::metrics::AttemptOutcome;
use crate::record::{AttemptLog, StreamSlot, Trail};
use crate::relay::{relay, StreamOwner};
use crate::snapshot::View;
use crate::state::AppState;
use crate::upstream::{
    returnable, ChannelRuntime, CredentialRuntime, TransportCause, MOCK_CREDENTIAL,
};
use crate::wire::{feature_index, plan, Call};

/// The selected member as this proxy can try it.
pub(crate) struct Picked<'s> {
    pub member: &'s Member,
    pub channel: &'s Channel,
    pub canary: bool,
    pub credentials: Vec<CredentialId>,
}

/// The engine's decision for one pick, with its selected member as this proxy can try it
/// (`None` when nothing was selected, or the selected member's channel is missing).
struct Decided<'s> {
    decision: Decision<'s>,
    picked: Option<Picked<'s>>,
}

/// The selected member with the credentials this proxy can use: its channel's enabled ones the
/// store has not disabled and this proxy can resolve (the mock credential for a provider that
/// needs none). `None` when the snapshot lacks the member's channel.
pub(crate) fn as_picked<'s>(
    view: &'s View,
    selected: &Candidate<'s>,
    health: &dyn HealthView,
) -> Option<Picked<'s>> {
    let channel = selected.channel?;
    let runtime = view.channel_runtime(channel.id);
    let mut credentials: Vec<CredentialId> = channel
        .credentials
        .iter()
        .filter(|cred| cred.enabled && !health.credential_disabled(cred.id))
        .filter(|cred| runtime.is_some_and(|rt| rt.credential(cred.id).is_some()))
        .map(|cred| cred.id)
        .collect();
    if !channel.provider.needs_credential() && credentials.is_empty() {
        credentials.push(MOCK_CREDENTIAL);
    }
    Some(Picked {
        member: selected.member,
        channel,
        canary: selected.canary,
        credentials,
    })
}

/// Nothing eligible: was it only because no member's protocol can express the request? Then
/// the protocol (its index in [`Protocol::ALL`]) whose missing feature the client is told.
fn untranslatable(rejected: &[Candidate<'_>], client: Protocol) -> Option<usize> {
    let unsupported = |c: &Candidate<'_>| c.reasons.contains(Reason::ProtocolUnsupported);
    if rejected.is_empty() || !rejected.iter().all(unsupported) {
        return None;
    }
    rejected
        .iter()
        .find_map(|c| c.channel.map(|ch| feature_index(ch, client)))
}

fn sticky_label(sticky: Option<Sticky>) -> Option<&'static str> {
    Some(match sticky? {
        Sticky::Disabled => return None,
        Sticky::NoSession => "no_session",
        Sticky::Pinned => "pinned",
        Sticky::Unbound => "unbound",
        Sticky::Expired { .. } => "expired",
        Sticky::Hit { .. } => "hit",
        Sticky::Escaped { .. } => "escaped",
    })
}

/// One attempt's trace span, a child of the request's (disabled unless traces are exported): a
/// GenAI client span named `{operation} {upstream model}`, with the upstream's host and port.
/// Ids and the channel's name only: never the credential itself. The answer's id, model and
/// finish reasons are recorded by the attempt when it reads a whole answer.
fn attempt_span(
    picked: &Picked<'_>,
    runtime: &ChannelRuntime,
    endpoint: Endpoint,
    credential_id: CredentialId,
) -> Span {
    if !crate::telemetry::enabled() {
        return Span::none();
    }
    let operation = endpoint.genai_operation();
    let model = picked.member.upstream_model.as_str();
    let server = runtime.server();
    tracing::info_span!(
        "attempt",
        otel.name = format!("{operation} {model}"),
        otel.kind = "client",
        otel.status_code = Empty,
        member_id = picked.member.id,
        channel_id = picked.channel.id,
        channel = picked.channel.name.as_str(),
        upstream_model = model,
        gen_ai.operation.name = operation,
        gen_ai.provider.name = genai_provider(picked.channel.provider),
        gen_ai.request.model = model,
        gen_ai.response.id = Empty,
        gen_ai.response.model = Empty,
        gen_ai.usage.input_tokens = Empty,
        gen_ai.usage.output_tokens = Empty,
        server.address = server.as_ref().map(|(host, _)| host.as_str()),
        server.port = server.as_ref().map(|(_, port)| i64::from(*port)),
        credential_id,
        canary = picked.canary,
        http.response.status_code = Empty,
        error.type = Empty,
        latency_ms = Empty,
    )
}

/// The OpenTelemetry GenAI `gen_ai.provider.name` of a channel's provider.
fn genai_provider(provider: Provider) -> &'static str {
    match provider {
        Provider::Openai => "openai",
        Provider::Azure => "azure.ai.openai",
        Provider::Anthropic => "anthropic",
        Provider::Gemini => "gcp.gemini",
        Provider::Vertex => "gcp.vertex_ai",
        Provider::Bedrock => "aws.bedrock",
        Provider::Mock => "switchyard.mock",
    }
}

fn record_attempt(span: &Span, log: &AttemptLog) {
    if span.is_disabled() {
        return;
    }
    if let Some(status) = log.status {
        span.record("http.response.status_code", i64::from(status));
    }
    if let Some(error) = log.error {
        span.record("error.type", error.as_str());
        span.record("otel.status_code", "ERROR");
    }
    span.record("latency_ms", log.latency_ms);
}

/// Backoff before re-send `n` (1-based): 25 ms doubling to 400 ms, times a jitter in [0.5, 1].
fn backoff(n: u32, rng: &mut impl RandomSource) -> Duration {
    let base = 25u64 << n.saturating_sub(1).min(4);
    Duration::from_micros((base as f64 * 1000.0 * (0.5 + 0.5 * rng.next_f64())) as u64)
}

/// The pause before re-send `n`, or `None` when it would not end before the deadline (`left`
/// is what remains of the request's budget): a re-send never sleeps past the deadline.
fn pause_before(n: u32, left: Duration, rng: &mut impl RandomSource) -> Option<Duration> {
    let pause = backoff(n, rng);
    (left > pause).then_some(pause)
}

/// The failover loop (its state machine is drawn in docs/src/concepts/inside-planes.md): pick a
/// member, try its channel (credential rotation, re-sends), report the failure, pick again —
/// until an answer is committed, the budget or deadline runs out, or nothing is left to pick.
pub async fn proxy(state: &Arc<AppState>, ctx: &mut Ctx<'_>) -> Response {
    let mut failover = Failover::new(state, ctx);
    loop {
        failover.await_upstream_top_up().await;
        let pick = match failover.next_pick() {
            Next::Try(pick) => pick,
            Next::Skip => continue,
            Next::Exhausted => break,
            Next::Fail(e) => return failover.fail(e),
        };
        match failover.try_channel(&pick).await {
            Tried::Committed(response) => return response,
            Tried::Failed(failed) => {
                if !failover.report(&pick, failed) {
                    break;
                }
            }
            Tried::NotSent => break,
        }
    }
    failover.exhausted()
}

/// The proxy phase's own state: everything the rounds share beyond the request's context (what
/// was tried and what had no room go into the context's constraint, each attempt into its
/// trail). It lives for the loop only.
struct Failover<'c, 'a> {
    state: &'c Arc<AppState>,
    view: &'a View,
    ctx: &'c mut Ctx<'a>,
    protocol: Protocol,
    retry_allowed: bool,
    deadline: Instant,
    first_byte_timeout: Duration,
    idle_timeout: Duration,
    rng: SplitMix64,
    /// The last upstream answer: what the client gets when every attempt failed.
    last: Option<Answer>,
    /// The last failure, for the gateway's own error when no upstream answered.
    last_error: Option<AttemptError>,
    /// The last failed attempt's transport cause, named in that error's message.
    last_cause: Option<TransportCause>,
    /// The channel and status when the last upstream answer refused the gateway's credential
    /// (401/403): the client then gets `upstream_auth_failed`, not that answer.
    last_refusal: Option<Refusal>,
    /// The channel of the previous pick (moving to another one spends a cross-channel round).
    prev_channel: Option<ChannelId>,
    rounds_used: u32,
    /// Channels whose failure has counted toward their breaker in this request (once each).
    counted_channels: Vec<ChannelId>,
    /// Credentials the keyword rule disabled during this request (skipped at once, before the
    /// store's view says so).
    disabled_here: Vec<CredentialId>,
    /// The upstream limits taken for the member being tried: the trail keeps them when it
    /// serves, a failure releases them.
    upstream_held: Option<Held>,
    /// Until when this request waits for a member's upstream allowance to be topped up (set at
    /// its first wait: [`TOP_UP_WAIT`] in all).
    top_up_until: Option<Instant>,
}

/// Whether a member's upstream limits have room for a request.
enum UpstreamRoom {
    Room,
    /// Only this proxy's allowance is used up; the fleet, as last seen, has room.
    ToppingUp,
    Full,
}

/// What [`Failover::next_pick`] decided.
enum Next<'a> {
    /// Try this member's channel.
    Try(Pick<'a>),
    /// The member picked cannot be tried here; it is excluded, pick again.
    Skip,
    /// Nothing more to try: the exhaustion answer.
    Exhausted,
    /// The request cannot be served at all (before any attempt, or a malformed translation).
    Fail(GatewayError),
}

/// What [`Failover::try_channel`] ended with.
enum Tried {
    /// An answer is on its way to the client.
    Committed(Response),
    /// The member failed: the last failure of its sends.
    Failed(Failed),
    /// Nothing was sent (deadline, no usable credential left).
    NotSent,
}

impl<'c, 'a> Failover<'c, 'a> {
    fn new(state: &'c Arc<AppState>, ctx: &'c mut Ctx<'a>) -> Failover<'c, 'a> {
        let view: &'a View = ctx.view;
        let settings = &view.snapshot.settings;
        Failover {
            state,
            view,
            protocol: ctx.endpoint.protocol(),
            retry_allowed: ctx
                .endpoint
                .retry_allowed(&ctx.headers, ctx.inspected.background),
            deadline: ctx.started + Duration::from_millis(settings.request_timeout_ms),
            first_byte_timeout: Duration::from_millis(settings.first_byte_timeout_ms),
            idle_timeout: Duration::from_millis(settings.stream_idle_timeout_ms),
            rng: SplitMix64::new(ctx.seed),
            ctx,
            last: None,
            last_error: None,
            last_cause: None,
            last_refusal: None,
            prev_channel: None,
            rounds_used: 0,
            counted_channels: Vec::new(),
            disabled_here: Vec::new(),
            upstream_held: None,
            top_up_until: None,
        }
    }

    /// Marks the route's members whose channel or own upstream limits have no room for this
    /// request as `rate_limited` for the engine (only when the snapshot has such limits). A member
    /// lacking room only because this proxy's allowance awaits its top-up is left unmarked while
    /// the request may still wait for it: returns whether there is such a member.
    fn mark_rate_limited(&mut self, now: u64) -> bool {
        if !self.view.snapshot.has_upstream_limits() {
            return false;
        }
        let Some(route) = self.ctx.route else {
            return false;
        };
        let waiting = self.top_up_open();
        let mut topping = false;
        for member in &route.members {
            // Once without room, a member stays skipped for the rest of this request.
            if self.ctx.constraint.rate_limited.contains(&member.id) {
                continue;
            }
            match self.upstream_room(member.channel_id, member.id, now) {
                UpstreamRoom::Room => {}
                UpstreamRoom::ToppingUp
                    if waiting && !self.ctx.constraint.attempted.contains(&member.id) =>
                {
                    topping = true;
                }
                UpstreamRoom::ToppingUp | UpstreamRoom::Full => {
                    self.ctx.constraint.rate_limited.push(member.id);
                }
            }
        }
        topping
    }

    /// Whether this request may still wait for an upstream allowance's top-up.
    fn top_up_open(&self) -> bool {
        self.top_up_until.is_none_or(|until| Instant::now() < until)
    }

    /// While a member of the route lacks upstream room only because this proxy's allowance is
    /// being topped up from the fleet (the claim is on its way), waits for it (at most
    /// [`TOP_UP_WAIT`] per request, like a client's own limits): such a member is not out of
    /// room and must not be skipped as `rate_limited`.
    async fn await_upstream_top_up(&mut self) {
        while self.mark_rate_limited(unix_ms()) {
            let until = *self
                .top_up_until
                .get_or_insert_with(|| Instant::now() + TOP_UP_WAIT);
            if Instant::now() >= until {
                break;
            }
            tokio::time::sleep(TOP_UP_POLL).await;
        }
    }

    /// Whether a member's channel and own limits have room for this request (taking nothing).
    fn upstream_room(&self, channel: ChannelId, member: MemberId, now: u64) -> UpstreamRoom {
        let limits = upstream_limits(&self.view.snapshot, channel, member);
        if limits.is_empty() {
            return UpstreamRoom::Room;
        }
        let request = LimitRequest {
            limits: &limits,
            tokens: self.ctx.estimate,
        };
        match self.state.store.limit_room(&request, now) {
            Ok(()) => UpstreamRoom::Room,
            Err(r)
                if limits
                    .get(r.index)
                    .is_some_and(|l| topping_up(l, r.retry_after_ms)) =>
            {
                UpstreamRoom::ToppingUp
            }
            Err(_) => UpstreamRoom::Full,
        }
    }

    /// The trail's final attempt: its channel, upstream model and that pair's price.
    fn set_final(&mut self, channel: &Channel, member: &Member) {
        name_final(&mut self.ctx.trail, self.view, channel, member);
    }

    /// Takes the picked member's upstream limits; `false` when another request took the room
    /// first (the member is then `rate_limited` for the next pick, unless only this proxy's
    /// allowance awaits its top-up).
    fn take_upstream(&mut self, channel: ChannelId, member: MemberId, now: u64) -> bool {
        let snapshot = &*self.view.snapshot;
        if !snapshot.has_upstream_limits() {
            return true;
        }
        let limits = upstream_limits(snapshot, channel, member);
        if limits.is_empty() {
            return true;
        }
        match Held::take(&self.state.store, limits, self.ctx.estimate, now).1 {
            Ok(held) => {
                self.upstream_held = Some(held);
                true
            }
            // Another request took the last of this proxy's allowance: the next round waits
            // for its top-up (while the request may) rather than skipping the member.
            Err(refused) if refused.topping_up() && self.top_up_open() => false,
            Err(_) => {
                self.ctx.constraint.rate_limited.push(member);
                false
            }
        }
    }

    fn fail(self, e: GatewayError) -> Response {
        // No upstream reached: the message names the last attempt's cause.
        let e = e.caused_by(self.last_cause);
        self.ctx.trail.error_code = Some(e.code());
        e.into_response(self.protocol)
    }

    /// Asks the engine for the next member (what was tried is excluded) and checks it can be
    /// tried here: a credential this proxy can resolve, a compiled runtime, a translation, and a
    /// cross-channel round left when it is on another channel.
    /// The members without upstream room were marked just before, as the round began
    /// ([`Failover::await_upstream_top_up`]).
    fn next_pick(&mut self) -> Next<'a> {
        let now = unix_ms();
        let Some(Decided { decision, picked }) = self.decide(now) else {
            return Next::Fail(GatewayError::not_ready());
        };
        if self.ctx.trail.attempts.is_empty() {
            self.note_route(&decision);
        }
        let (Some(picked), Some(budget), Some(route)) = (picked, decision.budget, decision.route)
        else {
            if !self.ctx.trail.attempts.is_empty() {
                return Next::Exhausted;
            }
            return Next::Fail(self.unservable(&decision));
        };
        if picked.credentials.is_empty() {
            // The engine saw a usable credential that this proxy cannot resolve (unset env).
            self.ctx.constraint.attempted.push(picked.member.id);
            self.last_error = Some(AttemptError::CredentialUnresolved);
            self.last_cause = None;
            return Next::Skip;
        }
        // Only a member this proxy can call takes its upstream limits' room.
        if !self.take_upstream(picked.channel.id, picked.member.id, now) {
            return Next::Skip;
        }
        if !self.spend_round(picked.channel.id, &budget) {
            return Next::Exhausted;
        }
        self.prepare(picked, route, &budget)
    }

    /// The engine's decision, taken under the store's health view, with the selected member as
    /// this proxy can try it; `None` when the store has no view to decide on.
    fn decide(&mut self, now: u64) -> Option<Decided<'a>> {
        let view: &'a View = self.view;
        let snapshot = &*view.snapshot;
        let model = self.ctx.inspected.model.as_str();
        let constraint = &self.ctx.constraint;
        let rng = &mut self.rng;
        // The store lends its health view to a callback only: the decision comes out through
        // this one slot.
        let mut decided = None;
        self.state.store.with_view(&mut |health| {
            let decision = select(snapshot, health, constraint, model, now, &mut *rng);
            let picked = decision
                .selected()
                .and_then(|selected| as_picked(view, selected, health));
            decided = Some(Decided { decision, picked });
        });
        decided
    }

    /// The request's first decision names its route and sticky-session outcome (in the trail,
    /// and the sticky hit and escape counters).
    fn note_route(&mut self, decision: &Decision<'_>) {
        self.ctx.trail.route = decision.route.map(|r| (r.id, r.model_pattern.clone()));
        self.ctx.trail.sticky = sticky_label(decision.sticky);
        let metrics = &self.state.metrics;
        match decision.sticky {
            Some(Sticky::Hit { .. }) => metrics.sticky_hits.fetch_add(1, Relaxed),
            Some(Sticky::Escaped { .. }) => metrics.sticky_escapes.fetch_add(1, Relaxed),
            _ => 0,
        };
    }

    /// Why no member can serve the request at all (nothing was attempted): a feature no
    /// member's protocol can express, an unknown or forbidden model, upstream limits without
    /// room, or no eligible member.
    fn unservable(&self, decision: &Decision<'_>) -> GatewayError {
        unservable(decision, self.ctx, self.protocol)
    }

    /// Cross-channel rounds: a pick on another channel than the previous one spends one;
    /// `false` when none is left. Every pick after a failed member counts as a failover.
    fn spend_round(&mut self, channel: ChannelId, budget: &RetryBudget) -> bool {
        if let Some(prev) = self.prev_channel {
            if prev != channel {
                if self.rounds_used >= budget.cross_channel_rounds() {
                    return false;
                }
                self.rounds_used += 1;
            }
            self.state.metrics.failovers.fetch_add(1, Relaxed);
        }
        true
    }

    /// What trying the picked member needs: its failure policy, its channel's runtime, the
    /// request's wire plan for it and the sends allowed. A member with no compiled runtime, or
    /// that a stale view offered without a translation, is skipped; a request the translation
    /// finds malformed fails.
    fn prepare(&mut self, picked: Picked<'a>, route: &'a Route, budget: &RetryBudget) -> Next<'a> {
        let view: &'a View = self.view;
        let settings = &view.snapshot.settings;
        let policy = FailurePolicy {
            fault_protection: settings.fault_protection_enabled,
            cooldown_ms: u64::from(budget.cooldown_seconds) * 1000,
            breaker_threshold: settings.breaker_failure_threshold,
        };
        let Some(runtime) = view.channel_runtime(picked.channel.id) else {
            self.ctx.constraint.attempted.push(picked.member.id);
            return Next::Skip;
        };
        let call = match plan(
            &self.ctx.client_request(),
            picked.channel,
            &picked.member.upstream_model,
        ) {
            Ok(call) => call,
            Err(TranslateError::Malformed(message)) => {
                return Next::Fail(GatewayError::InvalidRequest(message));
            }
            Err(TranslateError::Unsupported(_)) => {
                // The engine already skips these members; a stale view may not have.
                self.ctx.constraint.attempted.push(picked.member.id);
                return Next::Skip;
            }
        };
        let sends = if self.retry_allowed {
            1 + budget.channel_retry_times
        } else {
            1
        };
        Next::Try(Pick {
            picked,
            route,
            runtime,
            call,
            policy,
            sends,
        })
    }

    /// Sends to the picked member: up to `sends` times on its channel, rotating through the
    /// credentials still usable, with a backoff between re-sends, while failures stay on the
    /// same channel ([`Scope::SameChannel`]). A success is committed here (the store learns it,
    /// the sticky session is bound, a stream gets its relay).
    async fn try_channel(&mut self, pick: &Pick<'a>) -> Tried {
        let picked = &pick.picked;
        let guard = InFlightGuard::acquire(&self.state.store, picked.channel.id);
        let start = (self.rng.next_u64() % picked.credentials.len() as u64) as usize;
        let mut failure: Option<Failed> = None;
        for send in 0..pick.sends {
            if send > 0 && !self.pause_before_resend(send).await {
                break;
            }
            let Some(credential_id) = self.credential(picked, start + send as usize) else {
                break;
            };
            let Some(credential) = pick.runtime.credential(credential_id) else {
                break;
            };
            if Instant::now() >= self.deadline {
                break;
            }
            let (result, latency_ms) = self.send(pick, credential_id, credential).await;
            match result {
                Outcome::Committed(committed) => {
                    return Tried::Committed(self.commit(pick, committed, latency_ms, guard));
                }
                Outcome::Failed(failed) => {
                    self.note_failure(pick, credential_id, &failed);
                    // A refused credential: the channel's next one may be good (key rotation).
                    let rotate =
                        self.last_refusal.is_some() && self.credential(picked, 0).is_some();
                    let again = failed.scope() == Scope::SameChannel || rotate;
                    failure = Some(failed);
                    if !again {
                        break;
                    }
                }
            }
        }
        drop(guard);
        match failure {
            Some(failed) => Tried::Failed(failed),
            None => Tried::NotSent,
        }
    }

    /// Sleeps the backoff before re-send `n`; `false`, without sleeping, when the pause would
    /// not end before the deadline.
    async fn pause_before_resend(&mut self, n: u32) -> bool {
        let left = self.deadline.saturating_duration_since(Instant::now());
        let Some(pause) = pause_before(n, left, &mut self.rng) else {
            return false;
        };
        tokio::time::sleep(pause).await;
        true
    }

    /// One send to the picked member with one credential, in the attempt's own span; the
    /// attempt is logged in the trail. Its outcome, and its latency in milliseconds.
    async fn send(
        &mut self,
        pick: &Pick<'a>,
        credential_id: CredentialId,
        credential: &CredentialRuntime,
    ) -> (Outcome, f64) {
        let picked = &pick.picked;
        let sent_at = Instant::now();
        let attempt = Attempt {
            client: self.state.client(),
            endpoint: self.ctx.endpoint,
            inspected: &self.ctx.inspected,
            upstream_model: &picked.member.upstream_model,
            call: &pick.call,
            client_headers: &self.ctx.headers,
            channel: picked.channel,
            runtime: pick.runtime,
            credential,
            first_byte_timeout: self.first_byte_timeout,
            idle_timeout: self.idle_timeout,
            deadline: self.deadline,
        };
        let span = attempt_span(picked, pick.runtime, self.ctx.endpoint, credential_id);
        // Boxed: the attempt's future (about 1.4 KB: the exchange, the answer's check) is moved
        // once, into its box, and this future and the failover's above it stay small, so the
        // copies made as each is awaited are small too. Without trace export the span is
        // disabled and entering it does nothing: the box is awaited without the span's wrapper.
        let running = Box::pin(attempt.run(&mut self.rng));
        let result = if span.is_disabled() {
            running.await
        } else {
            running.instrument(span.clone()).await
        };
        let elapsed = sent_at.elapsed();
        let latency_ms = self.log_attempt(picked, credential_id, &result, elapsed, &span);
        (result, latency_ms)
    }

    /// An attempt's time counts as upstream time; its log joins the trail and its span. Returns
    /// its latency in milliseconds.
    fn log_attempt(
        &mut self,
        picked: &Picked<'_>,
        credential_id: CredentialId,
        result: &Outcome,
        elapsed: Duration,
        span: &Span,
    ) -> f64 {
        let micros = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
        self.ctx.trail.upstream_micros = self.ctx.trail.upstream_micros.saturating_add(micros);
        self.state.metrics.upstream_latency.observe_micros(
            [&picked.channel.name, &picked.member.upstream_model],
            micros,
        );
        let latency_ms = elapsed.as_secs_f64() * 1000.0;
        let (status, error, cause) = match result {
            Outcome::Committed(committed) => (Some(committed.response.status.as_u16()), None, None),
            Outcome::Failed(failed) => (failed.status, Some(failed.error), failed.cause),
        };
        if matches!(result, Outcome::Failed(_)) {
            self.last_cause = cause;
        }
        if let Some(cause) = cause {
            let channel = picked.channel.name.as_str();
            self.state.metrics.transport_failure(channel, cause);
        }
        let log = AttemptLog {
            member_id: picked.member.id,
            channel_id: picked.channel.id,
            credential_id,
            status,
            error,
            cause,
            latency_ms,
        };
        record_attempt(span, &log);
        self.ctx.trail.attempts.push(log);
        latency_ms
    }

    /// A failed send: counted for its channel, its auto-ban keyword applied, its answer kept as
    /// the last upstream answer and its error as the last error.
    fn note_failure(&mut self, pick: &Pick<'a>, credential_id: CredentialId, failed: &Failed) {
        self.state
            .metrics
            .attempt(&pick.picked.channel.name, failed.outcome());
        if let Some(keyword) = failed.ban_keyword {
            self.ban(pick, credential_id, keyword);
        }
        if let Some(answer) = failed.answer.clone() {
            let status = answer.status.as_u16();
            self.last_refusal = None;
            if matches!(status, 401 | 403) {
                let said = mask_key_like(&switchyard_provider::error_message(&answer.body));
                self.credential_refused(pick, credential_id, status, &said);
                self.last_refusal = Some(Refusal {
                    channel: pick.picked.channel.name.clone(),
                    status,
                    said,
                });
            }
            self.last = Some(answer);
        }
        self.last_error = Some(failed.error);
    }

    /// The upstream refused the channel's credential (401/403): the gateway's configuration, not
    /// the client's key. The credential is skipped for the rest of this request (the next send
    /// on the channel rotates to another), and the operator is told once per credential and
    /// snapshot revision, with the upstream's own words.
    fn credential_refused(
        &mut self,
        pick: &Pick<'a>,
        credential_id: CredentialId,
        status: u16,
        said: &str,
    ) {
        if !self.disabled_here.contains(&credential_id) {
            self.disabled_here.push(credential_id);
        }
        let channel = pick.picked.channel;
        let revision = self.view.snapshot.revision;
        if self
            .state
            .first_refusal(revision, channel.id, credential_id)
        {
            tracing::warn!(
                channel = %channel.name,
                credential_id,
                status,
                upstream_message = %said,
                "the upstream refused this channel's credential; fix it in the channel's configuration (said once per credential)"
            );
        }
    }

    /// The credential of send `n` (counting from the random start): the channel's usable
    /// credentials in rotation, without those disabled during this request.
    fn credential(&self, picked: &Picked<'_>, n: usize) -> Option<CredentialId> {
        let usable = || {
            picked
                .credentials
                .iter()
                .copied()
                .filter(|c| !self.disabled_here.contains(c))
        };
        let count = usable().count();
        usable().nth(n % count.max(1))
    }

    /// An auto-ban keyword matched: the store applies the keyword rule.
    fn ban(&mut self, pick: &Pick<'a>, credential_id: CredentialId, keyword: &'static str) {
        let channel = pick.picked.channel;
        let ban = self.state.store.ban_keyword(
            channel.id,
            credential_id,
            channel.credentials.len(),
            keyword,
            &pick.policy,
            unix_ms(),
        );
        match ban {
            KeywordBan::Ignored => return,
            KeywordBan::CredentialDisabled => {
                self.disabled_here.push(credential_id);
                self.state
                    .metrics
                    .credentials_disabled
                    .fetch_add(1, Relaxed);
            }
            KeywordBan::BreakerTripped => {
                self.state.metrics.breaker_trips.fetch_add(1, Relaxed);
                self.ctx.trail.breaker_tripped = true;
            }
        }
        tracing::warn!(channel = %channel.name, credential_id, keyword, "auto-ban keyword matched");
    }

    /// A committed answer: the store learns the success, the session is bound to the member,
    /// and the response (a stream through its relay, which owns the in-flight guard) is built.
    fn commit(
        &mut self,
        pick: &Pick<'a>,
        mut committed: Committed,
        latency_ms: f64,
        guard: InFlightGuard,
    ) -> Response {
        let picked = &pick.picked;
        let state = self.state;
        let settings = &self.view.snapshot.settings;
        let now = unix_ms();
        learn_success(state, self.view, picked, latency_ms, now);
        let sticky_on = pick.route.sticky_session.unwrap_or(settings.sticky_enabled);
        if let (true, false, Some(key)) = (
            sticky_on,
            self.ctx.constraint.is_pinned(),
            self.ctx.constraint.session_key.as_deref(),
        ) {
            let ttl = u64::from(settings.sticky_ttl_minutes) * 60_000;
            state
                .store
                .bind_sticky(pick.route.id, key, picked.member.id, ttl, now);
        }
        self.set_final(picked.channel, picked.member);
        self.ctx.trail.upstream_held = self.upstream_held.take();
        self.ctx.trail.usage = committed.usage;
        self.ctx.trail.answer = committed.answer.take();
        let Some(first) = committed.first_chunk.take() else {
            // A whole answer: nothing outlives the request. The channel's in-flight count is
            // given back as the guard drops, when the answer is committed.
            drop(guard);
            return committed_response(committed, |body, _, _| body);
        };
        // A stream: its owner holds the in-flight count and its state until the stream ends.
        let owner = StreamOwner {
            state: state.clone(),
            member: picked.member.id,
            channel: picked.channel.id,
            upstream_model: picked.member.upstream_model.clone(),
            channel_name: picked.channel.name.clone(),
            policy: pick.policy,
            protocol: self.protocol,
            endpoint: self.ctx.endpoint,
            request_id: self.ctx.request_id.to_owned(),
            _in_flight: guard,
            slot: StreamSlot::new(),
        };
        self.ctx.trail.stream = Some(owner.slot.clone());
        let idle = self.idle_timeout;
        committed_response(committed, |upstream, translator, strip_usage_chunk| {
            relay(first, upstream, idle, owner, translator, strip_usage_chunk)
        })
    }

    /// The member failed: the store cools it and counts its channel (at most once per request;
    /// the store decides whether the failure counts at all), and the next pick excludes it.
    /// `false` when the loop must stop (no retry allowed, or the deadline passed).
    fn report(&mut self, pick: &Pick<'a>, failed: Failed) -> bool {
        let picked = &pick.picked;
        let channel = picked.channel;
        let first_for_channel = !self.counted_channels.contains(&channel.id);
        let reported = self.state.store.report_failure(
            &AttemptFailure {
                member: picked.member.id,
                channel: channel.id,
                upstream_model: &picked.member.upstream_model,
                kind: failed.kind(),
                retry_after_ms: failed.retry_after_ms,
            },
            &pick.policy,
            first_for_channel,
            unix_ms(),
        );
        if let Some(until) = reported.member.cooled_until {
            self.state.metrics.cooldowns.fetch_add(1, Relaxed);
            if failed.error == AttemptError::ModelNotFound {
                self.cool_model_everywhere(channel.id, &picked.member.upstream_model, until);
            }
        }
        if let Some(channel_effect) = reported.channel {
            self.counted_channels.push(channel.id);
            if channel_effect.tripped {
                self.state.metrics.breaker_trips.fetch_add(1, Relaxed);
                self.ctx.trail.breaker_tripped = true;
                tracing::warn!(
                    channel = %channel.name,
                    consecutive_failures = channel_effect.consecutive_failures,
                    "channel breaker tripped"
                );
            }
        }
        self.ctx.constraint.attempted.push(picked.member.id);
        self.ctx.constraint.prefer_channel =
            (failed.scope() == Scope::PreferChannel).then_some(channel.id);
        self.prev_channel = Some(channel.id);
        self.set_final(channel, picked.member);
        // Nothing was served under the member's upstream limits.
        self.upstream_held = None;
        self.retry_allowed && Instant::now() < self.deadline
    }

    /// The upstream said it has no such model: that (channel, upstream model) is unusable for
    /// every route, so each other member naming it cools down as long as the one that failed
    /// (an alias route does not rediscover it with a failed request of its own). Rare, so a scan.
    fn cool_model_everywhere(&self, channel: ChannelId, model: &str, until: u64) {
        let siblings = self.view.snapshot.routes().iter().flat_map(|r| &r.members);
        for member in siblings.filter(|m| m.channel_id == channel && m.upstream_model == model) {
            self.state.store.extend_cooldown(member.id, until);
        }
    }

    /// Every attempt failed: the last upstream answer, not a generic error.
    fn exhausted(mut self) -> Response {
        if let Some(Refusal {
            channel,
            status,
            said,
        }) = self.last_refusal.take()
        {
            // Never the upstream's 401/403: the client would take it for its own key's.
            return self.fail(GatewayError::UpstreamAuthFailed {
                channel,
                status,
                said,
            });
        }
        match self.last.take() {
            Some(answer) => answer_response(answer),
            None => {
                let e = self
                    .last_error
                    .map_or(GatewayError::UpstreamUnreachable, AttemptError::exhausted);
                self.fail(e)
            }
        }
    }
}

/// A member served: counted, and the store learns it (health, a canary's promotion).
pub(crate) fn learn_success(
    state: &AppState,
    view: &View,
    picked: &Picked<'_>,
    latency_ms: f64,
    now: u64,
) {
    state
        .metrics
        .attempt(&picked.channel.name, AttemptOutcome::Success);
    let effect = state.store.record_success(
        &AttemptSuccess {
            member: picked.member.id,
            channel: picked.channel.id,
            upstream_model: &picked.member.upstream_model,
            latency_ms,
            canary: picked.canary,
            promote_after: view.snapshot.settings.stable_first_promote_requests,
        },
        now,
    );
    if effect.promoted {
        tracing::info!(
            member_id = picked.member.id,
            "canary member promoted to stable"
        );
    }
}

/// The trail's final attempt: its channel, upstream model and that pair's price.
pub(crate) fn name_final(trail: &mut Trail, view: &View, channel: &Channel, member: &Member) {
    trail.final_channel = Some(channel.name.clone());
    trail.final_model = Some(member.upstream_model.clone());
    trail.price = view
        .snapshot
        .price(channel.id, &member.upstream_model)
        .cloned();
}

/// Why no member can serve the request of `ctx` at all (nothing was attempted): a feature no
/// member's protocol can express, an unknown or forbidden model, upstream limits without room,
/// or no eligible member.
pub(crate) fn unservable(
    decision: &Decision<'_>,
    ctx: &Ctx<'_>,
    protocol: Protocol,
) -> GatewayError {
    let model = ctx.inspected.model.as_str();
    // The candidates' reasons explain a decision that selected nobody; a selected member whose
    // channel is missing explains nothing more.
    let rejected: &[Candidate<'_>] = if decision.selected().is_none() {
        &decision.candidates
    } else {
        &[]
    };
    if let Some(target) = untranslatable(rejected, protocol) {
        let feature = ctx.unsupported[target]
            .clone()
            .unwrap_or_else(|| "this request".to_owned());
        return GatewayError::ProtocolUnsupported {
            feature,
            model: model.to_owned(),
        };
    }
    let any_for = |reason: Reason| rejected.iter().any(|c| c.reasons.contains(reason));
    let model = model.to_owned();
    match decision.outcome {
        Selection::ModelNotFound => GatewayError::ModelNotFound { model },
        Selection::ModelNotAllowed => GatewayError::ModelNotAllowed { model },
        _ if any_for(Reason::RateLimited) => GatewayError::UpstreamsRateLimited { model },
        _ => GatewayError::NoEligibleMember {
            model,
            // Channels sent without their secrets (no fleet token) are named in the 503.
            secrets_withheld: any_for(Reason::SecretsWithheld),
        },
    }
}

/// An upstream's refusal of the gateway's credential (401/403): its channel, its status and
/// what it said (key-like runs masked).
struct Refusal {
    channel: String,
    status: u16,
    said: String,
}

/// A member the engine picked, with what trying it needs. Not part of the request's context: it
/// lives for one round (a failover picks again), and its call is planned for this member alone.
struct Pick<'a> {
    picked: Picked<'a>,
    route: &'a Route,
    runtime: &'a ChannelRuntime,
    call: Call,
    policy: FailurePolicy,
    /// Sends allowed on the channel (1 + `channel_retry_times`, or 1 when retries are off).
    sends: u32,
}

/// Headers the gateway adds to an answer (its request id twice, route, channel, attempts and
/// the six rate-limit headers): the client's map is made this much larger than the upstream's
/// at once instead of growing while they are added.
const GATEWAY_HEADERS: usize = 11;

/// The upstream's returnable headers, in a map with room for the gateway's own.
fn copy_headers(from: &HeaderMap, to: &mut HeaderMap) {
    to.reserve(from.len() + GATEWAY_HEADERS);
    for (name, value) in from {
        if returnable(name) {
            to.append(name.clone(), value.clone());
        }
    }
}

fn answer_response(answer: Answer) -> Response {
    let mut response = Response::new(Body::from(answer.body));
    *response.status_mut() = answer.status;
    copy_headers(&answer.headers, response.headers_mut());
    response
}

/// The client's response from a committed answer: the upstream's status and headers, and the
/// body `body` makes of the upstream's (given the stream's translator and usage-chunk flag).
fn committed_response(
    committed: Committed,
    body: impl FnOnce(Body, Option<Box<switchyard_provider::StreamTranslator>>, bool) -> Body,
) -> Response {
    let Committed {
        response: upstream,
        translator,
        strip_usage_chunk,
        ..
    } = committed;
    let mut response = Response::new(body(upstream.body, translator, strip_usage_chunk));
    *response.status_mut() = upstream.status;
    copy_headers(&upstream.headers, response.headers_mut());
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A source that always answers `value`.
    struct Fixed(u64);

    impl RandomSource for Fixed {
        fn next_u64(&mut self) -> u64 {
            self.0
        }
    }

    /// Draws at the two ends of the jitter range.
    const LOWEST: u64 = 0;
    const HIGHEST: u64 = u64::MAX;

    #[test]
    fn backoff_doubles_from_25_ms_to_400_ms_with_jitter_in_half_to_full() {
        for (n, base_ms) in [
            (1, 25),
            (2, 50),
            (3, 100),
            (4, 200),
            (5, 400),
            (6, 400),
            (40, 400),
        ] {
            let base = Duration::from_millis(base_ms);
            assert_eq!(backoff(n, &mut Fixed(LOWEST)), base / 2, "re-send {n}");
            let high = backoff(n, &mut Fixed(HIGHEST));
            assert!(
                high <= base && high > base * 99 / 100,
                "re-send {n}: {high:?}"
            );
        }
        // Jitter spreads the pauses: different draws, different pauses.
        let mut rng = SplitMix64::new(7);
        let pauses: std::collections::BTreeSet<Duration> =
            (0..50).map(|_| backoff(3, &mut rng)).collect();
        assert!(pauses.len() > 40, "{pauses:?}");
        assert!(pauses
            .iter()
            .all(|p| *p >= Duration::from_millis(50) && *p < Duration::from_millis(100)));
    }

    #[test]
    fn a_pause_that_would_end_past_the_deadline_is_not_taken() {
        let full = Duration::from_millis(25);
        assert_eq!(
            pause_before(1, Duration::from_secs(10), &mut Fixed(HIGHEST)),
            Some(backoff(1, &mut Fixed(HIGHEST)))
        );
        // The longest pause of re-send 1 is 25 ms: it must end before the deadline, not on it.
        assert_eq!(pause_before(1, full, &mut Fixed(HIGHEST)), None);
        assert_eq!(pause_before(1, full, &mut Fixed(LOWEST)), Some(full / 2));
        assert_eq!(pause_before(1, full / 2, &mut Fixed(LOWEST)), None);
        assert_eq!(
            pause_before(5, Duration::from_millis(150), &mut Fixed(LOWEST)),
            None
        );
        assert_eq!(pause_before(1, Duration::ZERO, &mut Fixed(LOWEST)), None);
    }
}
