//! Shadow traffic: a sample of the requests a shadow rule matches is copied to the rule's target
//! once the client's answer is complete, and the two answers are compared.
//!
//! A request a rule may want keeps a [`Candidate`] in its trail; once the request has finished
//! (a plain answer when it is sent, a stream when it ends) the candidate is offered to the rules:
//! the rule matches, the sample draw hits,
//! the rule is not stopped, its spend cap for the day has room and its per-proxy
//! requests-per-second bucket has a token; then the copy goes on its rule's bounded queue
//! ([`queue`]: a full queue drops the copy and counts it). Nothing on the request path waits for
//! a shadow.
//!
//! A background task ([`run`]) takes copies off the queues, the rules taking turns, each rule at
//! most [`queue::RULE_MAX_IN_FLIGHT`] calls at a time and the proxy at most
//! [`queue::MAX_IN_FLIGHT`], so one slow or hanging target never holds another rule's copies. A
//! copy whose rule, by its turn, is gone from the current configuration, changed, disabled,
//! expired or stopped is dropped unsent. Each call is bounded by the request timeout and goes
//! through the same wire plan and [`Attempt`] as live traffic (translated when the target speaks
//! another protocol), but never through the failover loop: a
//! shadow call reports nothing to the state store (no cooldown, breaker, health or in-flight
//! count), takes no limit and adds nothing to the client's usage. Its outcome goes to the
//! comparison ([`compare`]), the `switchyard_shadow_requests_total` metric and, in a fleet, the
//! usage batches (`UsageBatch.shadows`) the control plane aggregates per rule and minute.
//!
//! Chat completions, messages, Gemini generate and Responses requests (not `background`) are
//! shadowed, streamed or not; embeddings, images, audio and count-tokens never. The sample draw
//! is made when the request arrives (from the request's seed, the same draws the offer makes), so
//! only a sampled request keeps a copy of itself. A sampled stream keeps the chunks the client
//! got ([`Gathered`]: shared bytes, no copy, at most
//! [`MAX_GATHERED`](crate::record::MAX_GATHERED) bytes) and the shadow stream's are kept the
//! same way; both are read back into text, finish reason and tool calls ([`StreamDigester`]) on
//! the background task, never on the request path. A longer stream is compared on status,
//! latency, tokens and cost only.

mod queue;
mod rules;

use std::sync::{Arc, Weak};

use bytes::Bytes;
use http::HeaderMap;
use serde_json::Value;
use switchyard_engine::{Channel, CredentialId, ShadowRule, ShadowTarget, SplitMix64};
use switchyard_proto::{latency_bucket, ShadowCounts};
use switchyard_provider::{ChatRequest, Protocol, SseDecoder, StreamDigester, Usage, UsageScanner};
use tokio::time::{Duration, Instant};

use self::rules::{draws, sampled};
pub use self::rules::{Job, Live, ShadowQueue, Shadows};

use crate::attempt::{next_data, Attempt, Outcome};
use crate::endpoint::Endpoint;
use crate::record::{Finished, Gathered};
use crate::request::Inspected;
use crate::snapshot::View;
use crate::upstream::{ChannelRuntime, MOCK_CREDENTIAL};
use crate::wire::{plan, ClientRequest};
use crate::AppState;

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
        let now = crate::unix_ms();
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
    pub fn offer(self, state: &AppState, finished: Finished) {
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
        let shadows = &state.shadows;
        shadows.offer(&state.metrics, rules, &self.inspected.model, self.seed, job);
    }
}

/// Whether a request of this kind can be shadowed at all: chat (every protocol) and
/// Responses requests, streamed or not, except background Responses.
pub fn eligible(endpoint: Endpoint, inspected: &Inspected) -> bool {
    !inspected.background && (endpoint.is_chat() || endpoint == Endpoint::Responses)
}

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

/// The credential a shadow call uses: the channel's first enabled one this proxy can resolve
/// (the mock credential when there is none).
fn shadow_credential(channel: &Channel, runtime: &ChannelRuntime) -> CredentialId {
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
        .then(|| UsageScanner::new(job.endpoint.protocol()));
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

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
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

/// What is compared of one answer (in the client's protocol; a translated shadow answer has been
/// translated back into it).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Facts {
    pub text: String,
    pub finish_reason: Option<String>,
    /// Tool calls in order: name, and whether its arguments are valid JSON.
    pub tools: Vec<(String, bool)>,
}

fn str_of(v: &Value) -> Option<String> {
    v.as_str().map(str::to_owned)
}

/// Arguments as a JSON string (OpenAI) must parse; as an object (Anthropic, Gemini) they are.
fn args_valid(v: &Value) -> bool {
    match v {
        Value::String(s) => serde_json::from_str::<Value>(s).is_ok(),
        Value::Object(_) => true,
        _ => false,
    }
}

/// What is compared of one side: its plain answer, or its stream read back.
fn content(endpoint: Endpoint, answer: Option<&[u8]>, stream: Option<&[Bytes]>) -> Option<Facts> {
    match (answer, stream) {
        (Some(answer), _) => facts(endpoint, answer),
        (None, Some(chunks)) => stream_facts(endpoint, chunks),
        (None, None) => None,
    }
}

/// Reads a stream of `endpoint`'s protocol (in chunks as they went out); `None` when it held
/// no answer. A Responses stream's `response.completed` event carries the whole response.
pub fn stream_facts(endpoint: Endpoint, chunks: &[Bytes]) -> Option<Facts> {
    let protocol = match endpoint {
        Endpoint::Responses => return responses_stream_facts(chunks),
        Endpoint::ChatCompletions => Protocol::OpenAi,
        Endpoint::Messages => Protocol::Anthropic,
        Endpoint::GeminiGenerate => Protocol::Gemini,
        _ => return None,
    };
    let mut digester = StreamDigester::new(protocol);
    for chunk in chunks {
        digester.push(chunk);
    }
    let digest = digester.finish();
    // A stream without a finish reason held no whole answer.
    let finish_reason = Some(digest.finish_reason?);
    Some(Facts {
        text: digest.text,
        finish_reason,
        tools: digest
            .tools
            .into_iter()
            .map(|(name, args)| {
                // No argument deltas at all: a call without arguments.
                let valid = args.trim().is_empty() || serde_json::from_str::<Value>(&args).is_ok();
                (name, valid)
            })
            .collect(),
    })
}

fn responses_stream_facts(chunks: &[Bytes]) -> Option<Facts> {
    let mut decoder = SseDecoder::new();
    let mut events = Vec::new();
    for chunk in chunks {
        decoder.push_into(chunk, &mut events);
    }
    events.extend(decoder.finish());
    events.iter().rev().find_map(|event| {
        let v: Value = serde_json::from_str(&event.data).ok()?;
        (v.get("type")?.as_str()? == "response.completed")
            .then(|| v.get("response").and_then(response_facts))
            .flatten()
    })
}

/// Reads an answer of `endpoint`'s protocol; `None` when it is not one.
pub fn facts(endpoint: Endpoint, body: &[u8]) -> Option<Facts> {
    let v: Value = serde_json::from_slice(body).ok()?;
    match endpoint {
        Endpoint::ChatCompletions => chat_completion_facts(&v),
        Endpoint::Messages => message_facts(&v),
        Endpoint::GeminiGenerate => gemini_facts(&v),
        Endpoint::Responses => response_facts(&v),
        _ => None,
    }
}

/// An OpenAI chat completion: its first choice's message.
fn chat_completion_facts(v: &Value) -> Option<Facts> {
    let mut f = Facts::default();
    let choice = v.get("choices")?.get(0)?;
    f.finish_reason = choice.get("finish_reason").and_then(str_of);
    let message = choice.get("message")?;
    f.text = message.get("content").and_then(str_of).unwrap_or_default();
    for call in message
        .get("tool_calls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let function = call.get("function")?;
        f.tools.push((
            function.get("name").and_then(str_of).unwrap_or_default(),
            function.get("arguments").is_some_and(args_valid),
        ));
    }
    Some(f)
}

/// An Anthropic message: its text and tool-use blocks.
fn message_facts(v: &Value) -> Option<Facts> {
    let mut f = Facts {
        finish_reason: v.get("stop_reason").and_then(str_of),
        ..Facts::default()
    };
    for block in v.get("content")?.as_array()? {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => f.text.push_str(block.get("text")?.as_str()?),
            Some("tool_use") => f.tools.push((
                block.get("name").and_then(str_of).unwrap_or_default(),
                block.get("input").is_some_and(args_valid),
            )),
            _ => {}
        }
    }
    Some(f)
}

/// A Gemini answer: its first candidate's text and function-call parts.
fn gemini_facts(v: &Value) -> Option<Facts> {
    let mut f = Facts::default();
    let candidate = v.get("candidates")?.get(0)?;
    f.finish_reason = candidate.get("finishReason").and_then(str_of);
    for part in candidate
        .get("content")
        .and_then(|c| c.get("parts"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if let Some(text) = part.get("text").and_then(Value::as_str) {
            f.text.push_str(text);
        }
        if let Some(call) = part.get("functionCall") {
            f.tools.push((
                call.get("name").and_then(str_of).unwrap_or_default(),
                call.get("args").is_none_or(args_valid),
            ));
        }
    }
    Some(f)
}

/// A Responses answer: its message items' text and its function calls.
fn response_facts(v: &Value) -> Option<Facts> {
    let mut f = Facts {
        finish_reason: v.get("status").and_then(str_of),
        ..Facts::default()
    };
    for item in v.get("output")?.as_array()? {
        match item.get("type").and_then(Value::as_str) {
            Some("message") => {
                for part in item
                    .get("content")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    if let Some(text) = part.get("text").and_then(Value::as_str) {
                        f.text.push_str(text);
                    }
                }
            }
            Some("function_call") => f.tools.push((
                item.get("name").and_then(str_of).unwrap_or_default(),
                item.get("arguments").is_some_and(args_valid),
            )),
            _ => {}
        }
    }
    Some(f)
}

/// Whether the request asked for JSON output (OpenAI `response_format`, Responses
/// `text.format`, Gemini `responseMimeType`; Anthropic has no JSON mode).
pub fn json_mode_asked(endpoint: Endpoint, body: &[u8]) -> bool {
    let Ok(v) = serde_json::from_slice::<Value>(body) else {
        return false;
    };
    let json_type = |t: Option<&Value>| {
        matches!(
            t.and_then(Value::as_str),
            Some("json_object" | "json_schema")
        )
    };
    match endpoint {
        Endpoint::ChatCompletions => json_type(v.pointer("/response_format/type")),
        Endpoint::Responses => json_type(v.pointer("/text/format/type")),
        Endpoint::GeminiGenerate => {
            v.pointer("/generationConfig/responseMimeType")
                .and_then(Value::as_str)
                == Some("application/json")
        }
        _ => false,
    }
}

/// How one pair's answers agree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Comparison {
    pub same_finish_reason: bool,
    pub same_tool_names: bool,
    pub shadow_tool_args_valid: bool,
    pub json_mode_asked: bool,
    pub shadow_json_valid: bool,
    /// Shadow text length / live text length (characters), in thousandths, at most 10 000.
    pub length_ratio_milli: u64,
    /// [`similarity`] in thousandths.
    pub similarity_milli: u64,
}

pub fn compare(live: &Facts, shadow: &Facts, json_mode: bool) -> Comparison {
    let live_len = live.text.chars().count() as u64;
    let shadow_len = shadow.text.chars().count() as u64;
    let length_ratio_milli = match (live_len, shadow_len) {
        (0, 0) => 1000,
        (0, _) => 10_000,
        (l, s) => (s * 1000 / l).min(10_000),
    };
    Comparison {
        same_finish_reason: live.finish_reason == shadow.finish_reason,
        same_tool_names: live
            .tools
            .iter()
            .map(|t| &t.0)
            .eq(shadow.tools.iter().map(|t| &t.0)),
        shadow_tool_args_valid: shadow.tools.iter().all(|t| t.1),
        json_mode_asked: json_mode,
        shadow_json_valid: json_mode && serde_json::from_str::<Value>(shadow.text.trim()).is_ok(),
        length_ratio_milli,
        similarity_milli: (similarity(&live.text, &shadow.text) * 1000.0).round() as u64,
    }
}

/// Text similarity, 0 to 1: the Jaccard index of the two texts' sets of lowercase word tokens
/// (runs of letters and digits). Two empty texts are identical (1).
pub fn similarity(a: &str, b: &str) -> f64 {
    fn words(text: &str) -> std::collections::HashSet<String> {
        text.split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
            .map(str::to_lowercase)
            .collect()
    }
    let (a, b) = (words(a), words(b));
    if a.is_empty() && b.is_empty() {
        return 1.0;
    }
    let common = a.intersection(&b).count();
    let all = a.len() + b.len() - common;
    common as f64 / all as f64
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::rules::Offer;
    use super::*;
    use crate::record::MAX_GATHERED;

    #[test]
    fn similarity_is_the_jaccard_index_of_word_sets() {
        assert_eq!(similarity("", ""), 1.0);
        assert_eq!(similarity("The cat sat", "the CAT sat"), 1.0);
        assert_eq!(similarity("a b", "c d"), 0.0);
        assert!((similarity("a b c", "a b d") - 0.5).abs() < 1e-9);
    }

    #[test]
    fn openai_and_anthropic_answers_are_read_and_compared() {
        let openai = br#"{"choices":[{"finish_reason":"tool_calls","message":{"content":"hi there",
            "tool_calls":[{"function":{"name":"get","arguments":"{\"a\":1}"}}]}}]}"#;
        let f = facts(Endpoint::ChatCompletions, openai).unwrap();
        assert_eq!(f.text, "hi there");
        assert_eq!(f.finish_reason.as_deref(), Some("tool_calls"));
        assert_eq!(f.tools, vec![("get".to_owned(), true)]);
        let broken = br#"{"choices":[{"finish_reason":"tool_calls","message":{"content":"hi",
            "tool_calls":[{"function":{"name":"get","arguments":"{nope"}}]}}]}"#;
        let g = facts(Endpoint::ChatCompletions, broken).unwrap();
        let c = compare(&f, &g, false);
        assert!(c.same_finish_reason && c.same_tool_names && !c.shadow_tool_args_valid);
        assert_eq!(c.length_ratio_milli, 250);
        assert_eq!(c.similarity_milli, 500);
        let anthropic =
            br#"{"stop_reason":"end_turn","content":[{"type":"text","text":"{\"x\":1}"}]}"#;
        let a = facts(Endpoint::Messages, anthropic).unwrap();
        assert_eq!(a.finish_reason.as_deref(), Some("end_turn"));
        assert!(compare(&a, &a, true).shadow_json_valid);
    }

    #[test]
    fn json_mode_is_read_from_each_protocols_field() {
        assert!(json_mode_asked(
            Endpoint::ChatCompletions,
            br#"{"response_format":{"type":"json_object"}}"#
        ));
        assert!(!json_mode_asked(Endpoint::ChatCompletions, b"{}"));
        assert!(json_mode_asked(
            Endpoint::GeminiGenerate,
            br#"{"generationConfig":{"responseMimeType":"application/json"}}"#
        ));
    }

    #[test]
    fn streams_of_each_protocol_are_read_back_as_their_plain_answers_are() {
        let chunks = |s: &str| {
            vec![
                Bytes::copy_from_slice(&s.as_bytes()[..7]),
                Bytes::copy_from_slice(&s.as_bytes()[7..]),
            ]
        };
        let openai = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi there\"}}]}\n\ndata: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"t\",\"function\":{\"name\":\"get\",\"arguments\":\"{nope\"}}]}}]}\n\ndata: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\ndata: [DONE]\n\n";
        let f = stream_facts(Endpoint::ChatCompletions, &chunks(openai)).unwrap();
        assert_eq!(f.text, "hi there");
        assert_eq!(f.finish_reason.as_deref(), Some("tool_calls"));
        assert_eq!(f.tools, vec![("get".to_owned(), false)]);
        // A stream cut before its finish holds no answer.
        let cut = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n";
        assert_eq!(stream_facts(Endpoint::ChatCompletions, &chunks(cut)), None);
        // A Responses stream: its completed event's response, read as a plain one.
        let completed = serde_json::json!({"type": "response.completed", "response": {
            "status": "completed", "output": [{"type": "message", "content": [
                {"type": "output_text", "text": "done here"}]}]}});
        let responses = format!("event: response.created\ndata: {{\"type\":\"response.created\"}}\n\nevent: response.completed\ndata: {completed}\n\n");
        let plain = facts(
            Endpoint::Responses,
            completed["response"].to_string().as_bytes(),
        );
        let streamed = stream_facts(Endpoint::Responses, &chunks(&responses));
        assert!(plain.is_some());
        assert_eq!(streamed, plain);
        assert_eq!(streamed.unwrap().text, "done here");
        // Not a shadowed endpoint: nothing.
        assert_eq!(stream_facts(Endpoint::Embeddings, &chunks(openai)), None);
    }

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
