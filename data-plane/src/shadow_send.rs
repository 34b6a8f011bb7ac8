//! The shadow sender: takes the copies off the rules' queues ([`run`]), checks each is still
//! wanted, calls its rule's target (the same wire plan and attempt as live traffic, never the
//! failover loop) and records the pair: the rule's caps, the metric and, in a fleet, the usage
//! batches' shadow counts. It reads the whole proxy state (the current view, the upstream pool,
//! the seeds, usage), so it stands above it, beside `shadow`, whose rule state and queues the
//! proxy state holds.

use std::sync::{Arc, Weak};

use bytes::Bytes;
use switchyard_engine::{Channel, CredentialId, ShadowRule, ShadowTarget, SplitMix64};
use switchyard_proto::{latency_bucket, ShadowCounts};
use switchyard_provider::{ChatRequest, Usage};
use tokio::time::{Duration, Instant};

use crate::attempt::{next_data, Attempt, Outcome};
use crate::endpoint::Endpoint;
use crate::shadow::compare::{compare, content, json_mode_asked};
use crate::shadow::rules::{Job, ShadowQueue};
use crate::shadow::{millis, Gathered};
use crate::snapshot::View;
use crate::state::AppState;
use crate::upstream::{ChannelRuntime, MOCK_CREDENTIAL};
use crate::wire::{plan, ClientRequest};

/// Sends the queued copies until the queues close (the proxy's state is gone) or `shutdown`
/// fires. Holds only a weak reference to the state, so it never keeps the proxy alive.
pub async fn run(
    state: Weak<AppState>,
    queue: ShadowQueue,
    shutdown: tokio_util::sync::CancellationToken,
) {
    while !queue.closed() {
        while let Some((rule, job)) = queue.next() {
            let Some(state) = state.upgrade() else { return };
            let model = &job.inspected.model;
            let wanted =
                state
                    .shadows
                    .still_wanted(state.views.load().as_deref(), &job.rule, model);
            if !wanted {
                dropped(&state, &job);
                queue.done(rule);
                continue;
            }
            let queue = Arc::clone(&queue);
            tokio::spawn(async move {
                send(&state, job).await;
                queue.done(rule);
            });
        }
        tokio::select! {
            () = queue.changed() => {}
            () = shutdown.cancelled() => return,
        }
    }
}

/// A copy whose rule no longer wants it when its turn came: not sent, counted as `stopped`.
fn dropped(state: &AppState, job: &Job) {
    state
        .metrics
        .shadow_requests
        .add([&job.rule.name, "stopped"], 1);
    state.shadows.settled();
}

/// The target's channel and upstream model.
fn target<'v>(view: &'v View, rule: &'v ShadowRule) -> Option<(&'v Channel, &'v str)> {
    match &rule.target {
        ShadowTarget::Member(id) => {
            let (_, member) = view.snapshot.member(*id)?;
            Some((
                view.snapshot.channel(member.channel_id)?,
                member.upstream_model.as_str(),
            ))
        }
        ShadowTarget::Channel {
            channel_id,
            upstream_model,
        } => Some((view.snapshot.channel(*channel_id)?, upstream_model.as_str())),
    }
}

/// What one shadow call got.
struct ShadowSide {
    ok: bool,
    first_byte_ms: u64,
    total_ms: u64,
    usage: Usage,
    cost_pico: Option<u128>,
    answer: Option<Bytes>,
    /// A stream's chunks in the client's protocol (`None`: not a stream, or too long).
    stream: Option<Vec<Bytes>>,
}

impl ShadowSide {
    /// A shadow call that failed, or could not be made, `started` ago.
    fn failed(started: Instant) -> ShadowSide {
        ShadowSide {
            ok: false,
            first_byte_ms: millis(started.elapsed()),
            total_ms: millis(started.elapsed()),
            usage: Usage::default(),
            cost_pico: None,
            answer: None,
            stream: None,
        }
    }
}

/// Sends one copy to its rule's target (a credential of its channel, the same wire plan and
/// attempt as live traffic): what it got, or a failure when the target cannot be called.
async fn call(state: &AppState, job: &Job) -> ShadowSide {
    let started = Instant::now();
    let Some((channel, model)) = target(&job.view, &job.rule) else {
        return ShadowSide::failed(started);
    };
    let Some(runtime) = job.view.channel_runtime(channel.id) else {
        return ShadowSide::failed(started);
    };
    let Some(credential) = runtime.credential(shadow_credential(channel, runtime)) else {
        return ShadowSide::failed(started);
    };
    let chat = parse_chat(job);
    let client = ClientRequest {
        endpoint: job.endpoint,
        inspected: &job.inspected,
        body: &job.body,
        query: job.query.as_deref(),
        chat: chat.as_ref(),
    };
    let Ok(wire) = plan(&client, channel, model) else {
        return ShadowSide::failed(started);
    };
    let settings = &job.view.snapshot.settings;
    let attempt = Attempt {
        client: state.client(),
        endpoint: job.endpoint,
        inspected: &job.inspected,
        upstream_model: model,
        call: &wire,
        client_headers: &job.headers,
        channel,
        runtime,
        credential,
        first_byte_timeout: Duration::from_millis(settings.first_byte_timeout_ms),
        idle_timeout: Duration::from_millis(settings.stream_idle_timeout_ms),
        deadline: started + Duration::from_millis(settings.request_timeout_ms),
    };
    let mut rng = SplitMix64::new(state.next_seed());
    match attempt.run(&mut rng).await {
        Outcome::Committed(committed) => answered(job, channel, model, committed, started).await,
        Outcome::Failed(_) => ShadowSide::failed(started),
    }
}

/// The credential a shadow call (or a guardrail's moderation call) uses: the channel's first
/// enabled one this proxy can resolve (the mock credential when there is none).
pub(crate) fn shadow_credential(channel: &Channel, runtime: &ChannelRuntime) -> CredentialId {
    channel
        .credentials
        .iter()
        .filter(|c| c.enabled)
        .map(|c| c.id)
        .find(|id| runtime.credential(*id).is_some())
        .unwrap_or(MOCK_CREDENTIAL)
}

/// The copied request in neutral form, for a target of another protocol (`None` when it does
/// not parse: only a target of the client's protocol can take it then).
fn parse_chat(job: &Job) -> Option<ChatRequest> {
    if job.endpoint == Endpoint::Responses {
        ChatRequest::parse_responses(&job.body, &job.inspected.model, job.inspected.stream).ok()
    } else {
        ChatRequest::parse(
            job.endpoint.protocol(),
            &job.body,
            &job.inspected.model,
            job.inspected.stream,
        )
        .ok()
    }
}

/// What a committed shadow call got: a plain answer as it is, a stream once read to its end;
/// priced at the target's (channel, upstream model).
async fn answered(
    job: &Job,
    channel: &Channel,
    model: &str,
    mut committed: crate::attempt::Committed,
    started: Instant,
) -> ShadowSide {
    let settings = &job.view.snapshot.settings;
    let first_byte_ms = millis(started.elapsed());
    let (ok, usage, stream) = match committed.first_chunk.take() {
        None => (
            committed.response.status.is_success(),
            committed.usage.unwrap_or_default(),
            None,
        ),
        Some(first) => {
            let gathered = Gathered::default();
            let (ok, usage) = drain(job, &mut committed, first, started, settings, &gathered).await;
            (ok, usage, gathered.take())
        }
    };
    let cost_pico = job
        .view
        .snapshot
        .price(channel.id, model)
        .map(|p| p.cost_pico(usage.input_tokens, usage.output_tokens, usage.cached_tokens));
    ShadowSide {
        ok,
        first_byte_ms,
        total_ms: millis(started.elapsed()),
        usage,
        cost_pico,
        answer: committed.answer,
        stream,
    }
}

/// Reads a committed shadow stream to its end, its chunks in the client's protocol into
/// `gathered`: whether it completed, and the usage it reported.
async fn drain(
    job: &Job,
    committed: &mut crate::attempt::Committed,
    first: Bytes,
    started: Instant,
    settings: &switchyard_engine::Settings,
    gathered: &Gathered,
) -> (bool, Usage) {
    let deadline = started + Duration::from_millis(settings.request_timeout_ms);
    let idle = Duration::from_millis(settings.stream_idle_timeout_ms);
    let mut scanner = committed
        .translator
        .is_none()
        .then(|| job.endpoint.usage_scanner());
    if let Some(scanner) = scanner.as_mut() {
        scanner.push(&first);
    }
    // (A translated first chunk is in the client's protocol already.)
    gathered.push(&first);
    let completed = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(idle.min(left), next_data(&mut committed.response.body)).await {
            Ok(Ok(Some(chunk))) => match committed.translator.as_mut() {
                Some(translator) => {
                    let mut out = Vec::new();
                    translator.push(&chunk, &mut out);
                    gathered.push(&Bytes::from(out));
                }
                None => {
                    if let Some(scanner) = scanner.as_mut() {
                        scanner.push(&chunk);
                    }
                    gathered.push(&chunk);
                }
            },
            Ok(Ok(None)) => {
                if let Some(translator) = committed.translator.as_mut() {
                    let mut out = Vec::new();
                    translator.finish(&mut out);
                    gathered.push(&Bytes::from(out));
                }
                break committed
                    .translator
                    .as_ref()
                    .is_none_or(|translator| translator.upstream_done());
            }
            Ok(Err(())) | Err(_) => break false,
        }
    };
    let usage = match (&committed.translator, &scanner) {
        (Some(translator), _) => translator.usage(),
        (None, Some(scanner)) => scanner.usage(),
        (None, None) => Usage::default(),
    };
    (completed, usage)
}

async fn send(state: &AppState, job: Job) {
    // The call's own timeouts (connect, first byte, idle) hold inside; the request timeout
    // bounds it whole, so a call never holds its slot longer.
    let started = Instant::now();
    let timeout = Duration::from_millis(job.view.snapshot.settings.request_timeout_ms);
    let shadow = tokio::time::timeout(timeout, call(state, &job))
        .await
        .unwrap_or_else(|_| ShadowSide::failed(started));
    state
        .shadows
        .finished(&job.rule, shadow.ok, shadow.cost_pico);
    let outcome = if shadow.ok { "success" } else { "failure" };
    state
        .metrics
        .shadow_requests
        .add([&job.rule.name, outcome], 1);
    let counts = pair_counts(&job, &shadow);
    if let Some(usage) = &state.usage {
        usage.record_shadow(job.rule.id, &counts);
    }
    state.shadows.settled();
}

/// The comparison of one pair, as counts the control plane adds up.
fn pair_counts(job: &Job, shadow: &ShadowSide) -> ShadowCounts {
    let live = &job.live;
    let mut c = ShadowCounts {
        pairs: 1,
        live_ok: u64::from(live.ok),
        shadow_ok: u64::from(shadow.ok),
        live_input_tokens: live.usage.input_tokens,
        live_output_tokens: live.usage.output_tokens,
        shadow_input_tokens: shadow.usage.input_tokens,
        shadow_output_tokens: shadow.usage.output_tokens,
        live_cost_pico_usd: live
            .cost_pico
            .map_or(0, |c| u64::try_from(c).unwrap_or(u64::MAX)),
        shadow_cost_pico_usd: shadow
            .cost_pico
            .map_or(0, |c| u64::try_from(c).unwrap_or(u64::MAX)),
        live_unpriced: u64::from(live.cost_pico.is_none()),
        shadow_unpriced: u64::from(shadow.cost_pico.is_none()),
        ..ShadowCounts::default()
    };
    for (hist, ms) in [
        (&mut c.live_total_ms, live.total_ms),
        (&mut c.live_first_byte_ms, live.first_byte_ms),
        (&mut c.shadow_total_ms, shadow.total_ms),
        (&mut c.shadow_first_byte_ms, shadow.first_byte_ms),
    ] {
        if let Some(n) = hist.get_mut(latency_bucket(ms)) {
            *n += 1;
        }
    }
    if live.ok && shadow.ok {
        let a = content(job.endpoint, live.answer.as_deref(), live.stream.as_deref());
        let b = content(
            job.endpoint,
            shadow.answer.as_deref(),
            shadow.stream.as_deref(),
        );
        if let (Some(a), Some(b)) = (a, b) {
            let cmp = compare(&a, &b, json_mode_asked(job.endpoint, &job.body));
            c.compared = 1;
            c.same_finish_reason = u64::from(cmp.same_finish_reason);
            c.same_tool_names = u64::from(cmp.same_tool_names);
            c.shadow_tool_args_valid = u64::from(cmp.shadow_tool_args_valid);
            c.json_mode_asked = u64::from(cmp.json_mode_asked);
            c.shadow_json_valid = u64::from(cmp.shadow_json_valid);
            c.length_ratio_milli_sum = cmp.length_ratio_milli;
            c.similarity_milli_sum = cmp.similarity_milli;
        }
    }
    c
}
