//! The script a mock upstream follows: which requests a rule matches ([`Matcher`]), what it does
//! to them ([`Behavior`]), and the record of what was received ([`RecordedRequest`]).

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use bytes::Bytes;
use serde::Serialize;

use switchyard_sim::ToolCall;

/// Selects requests. Every field that is set must match; [`Matcher::any`] matches everything.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Matcher {
    #[serde(skip_serializing_if = "Option::is_none")]
    path: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    credential: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    model: Option<String>,
}

impl Matcher {
    /// Matches every request.
    pub fn any() -> Self {
        Self::default()
    }

    /// Matches requests to exactly this path (query string ignored), e.g. `/v1/chat/completions`.
    pub fn path(path: &str) -> Self {
        Self::any().and_path(path)
    }

    /// Also requires this path.
    pub fn and_path(mut self, path: &str) -> Self {
        self.path = Some(path.to_owned());
        self
    }

    /// Also requires this credential: the token of `Authorization: Bearer X`, `x-api-key: X`,
    /// `api-key: X` (Azure), `x-goog-api-key: X` or the `?key=X` query parameter (Gemini).
    pub fn credential(mut self, credential: &str) -> Self {
        self.credential = Some(credential.to_owned());
        self
    }

    /// Also requires this model (the body's `"model"`, the `model` field of a multipart form,
    /// the `{model}` of a Gemini path `/v1beta/models/{model}:method`, or the `{deployment}` of
    /// an Azure path `/openai/deployments/{deployment}/...`).
    pub fn model(mut self, model: &str) -> Self {
        self.model = Some(model.to_owned());
        self
    }

    /// Whether `request` is selected by this matcher.
    pub fn matches(&self, request: &RecordedRequest) -> bool {
        fn field(want: &Option<String>, have: Option<&str>) -> bool {
            want.as_deref().is_none_or(|w| have == Some(w))
        }
        field(&self.path, Some(&request.path))
            && field(&self.credential, request.credential.as_deref())
            && field(&self.model, request.model.as_deref())
    }
}

/// What the mock does with a matched request. Built from [`Behavior::ok`] or
/// [`Behavior::status`] and refined with the chained methods.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Behavior {
    pub(crate) status: Option<u16>,
    pub(crate) body: Option<String>,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) latency: Duration,
    pub(crate) hang: bool,
    pub(crate) malformed: bool,
    pub(crate) empty_completion: bool,
    pub(crate) text: Option<String>,
    pub(crate) tool_calls: Vec<ToolCall>,
    pub(crate) cached_tokens: u64,
    pub(crate) stream: Option<StreamShape>,
    pub(crate) cut_before_first_byte: bool,
    pub(crate) cut_after_chunks: Option<usize>,
    /// Bedrock's ConverseStream only: after this many events, an exception message (its name)
    /// ends the stream.
    pub(crate) exception_after_chunks: Option<(usize, String)>,
    pub(crate) times: Option<usize>,
}

/// A forced SSE answer: `chunks` content events, `gap` between consecutive events.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct StreamShape {
    pub chunks: usize,
    pub gap: Duration,
}

impl Behavior {
    /// The default OK answer of the requested endpoint.
    pub fn ok() -> Self {
        Self {
            status: None,
            body: None,
            headers: Vec::new(),
            latency: Duration::ZERO,
            hang: false,
            malformed: false,
            empty_completion: false,
            text: None,
            tool_calls: Vec::new(),
            cached_tokens: 0,
            stream: None,
            cut_before_first_byte: false,
            cut_after_chunks: None,
            exception_after_chunks: None,
            times: None,
        }
    }

    /// Answers with this status. A non-2xx status carries an error body in the shape of the
    /// request path's protocol (OpenAI; Anthropic on `/v1/messages*`; Gemini on `/v1beta/*`);
    /// a 2xx status carries the default OK answer.
    pub fn status(status: u16) -> Self {
        Self {
            status: Some(status),
            ..Self::ok()
        }
    }

    /// Replaces the body verbatim.
    pub fn body(mut self, body: impl Into<String>) -> Self {
        self.body = Some(body.into());
        self
    }

    /// Adds a response header (invalid names or values are logged and skipped).
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Adds `Retry-After: secs`.
    pub fn retry_after(self, secs: u64) -> Self {
        self.header("retry-after", secs.to_string())
    }

    /// Waits this long before sending the response headers.
    pub fn latency(mut self, latency: Duration) -> Self {
        self.latency = latency;
        self
    }

    /// Never answers: holds the connection until the client gives up or the mock stops.
    pub fn hang(mut self) -> Self {
        self.hang = true;
        self
    }

    /// 200 with `content-type: application/json` and a body that is not JSON.
    pub fn malformed(mut self) -> Self {
        self.malformed = true;
        self
    }

    /// 200 with an answer that says nothing, in the protocol's shape: OpenAI
    /// `choices[0].message.content == ""`, Anthropic `content: []`, Gemini `parts: []`. Text and
    /// tool calls set by other refinements are dropped.
    pub fn empty_completion(mut self) -> Self {
        self.empty_completion = true;
        self
    }

    /// The assistant text of chat, completions, responses, messages and Gemini answers, instead of
    /// [`sim::DEFAULT_CONTENT`](crate::sim::DEFAULT_CONTENT). With [`tool_call`](Self::tool_call)
    /// it is the text said before the calls (without it, a tool-calling answer has no text).
    pub fn text(mut self, text: impl Into<String>) -> Self {
        self.text = Some(text.into());
        self
    }

    /// Answers with a call of tool `name` with `arguments` (JSON text, e.g.
    /// `r#"{"city":"Paris"}"#`), in the request's protocol: OpenAI `message.tool_calls` with
    /// `finish_reason: "tool_calls"`, Anthropic a `tool_use` block with
    /// `stop_reason: "tool_use"`, Gemini a `functionCall` part. Call it again for parallel calls.
    /// Streams carry the arguments in pieces (OpenAI `function.arguments` deltas, Anthropic
    /// `input_json_delta`s); Gemini sends each call whole.
    pub fn tool_call(mut self, name: impl Into<String>, arguments: impl Into<String>) -> Self {
        self.tool_calls.push(ToolCall::new(name, arguments));
        self
    }

    /// Reports `n` prompt tokens as read from the prompt cache, in each protocol's own field:
    /// OpenAI `usage.prompt_tokens_details.cached_tokens`, Anthropic
    /// `usage.cache_read_input_tokens`, Gemini `usageMetadata.cachedContentTokenCount`.
    pub fn cached_tokens(mut self, n: u64) -> Self {
        self.cached_tokens = n;
        self
    }

    /// Answers as SSE whatever the request asked, in the protocol of the path, with `chunks`
    /// content events and `gap` between events. Without it, streaming follows the request's
    /// `"stream": true`, or Gemini's `:streamGenerateContent` (3 chunks, no gap).
    pub fn stream(mut self, chunks: usize, gap: Duration) -> Self {
        self.stream = Some(StreamShape { chunks, gap });
        self
    }

    /// Closes the connection before any response byte is sent.
    pub fn cut_before_first_byte(mut self) -> Self {
        self.cut_before_first_byte = true;
        self
    }

    /// Answers as SSE, sends the headers and the first `n` events, then drops the connection
    /// abruptly (no terminating event, no clean end of the chunked body).
    pub fn cut_after_chunks(mut self, n: usize) -> Self {
        self.cut_after_chunks = Some(n);
        self
    }

    /// Bedrock's ConverseStream only: sends the first `n` events, then an exception message
    /// (`:message-type: exception`, `:exception-type: exception`, e.g. `throttlingException`,
    /// payload `{"message": ...}`) that ends the stream, as Bedrock reports a failure mid-stream.
    pub fn exception_after_chunks(mut self, n: usize, exception: &str) -> Self {
        self.exception_after_chunks = Some((n, exception.to_owned()));
        self
    }

    /// The rule answers `n` requests, then is exhausted and no longer matches.
    pub fn times(mut self, n: usize) -> Self {
        self.times = Some(n);
        self
    }
}

/// One request as the mock received it.
#[derive(Clone, Debug)]
pub struct RecordedRequest {
    pub method: String,
    /// HTTP/1.1, or HTTP/2 on a TLS connection that chose it.
    pub version: http::Version,
    /// Path without the query string.
    pub path: String,
    /// The query string (without `?`), when there is one.
    pub query: Option<String>,
    /// From `Authorization: Bearer X`, `x-api-key: X`, `api-key: X` (Azure), `x-goog-api-key: X`
    /// or `?key=X`.
    pub credential: Option<String>,
    /// Every request header (e.g. `anthropic-version`).
    pub headers: http::HeaderMap,
    pub body: Bytes,
    /// The body's `"model"`, or the model of a Gemini path or the deployment of an Azure path,
    /// when there is one.
    pub model: Option<String>,
}

impl RecordedRequest {
    /// The value of query parameter `name` (not percent-decoded), e.g. Gemini's `alt` or `key`.
    pub fn query_param(&self, name: &str) -> Option<&str> {
        self.query
            .as_deref()?
            .split('&')
            .find_map(|pair| match pair.split_once('=') {
                Some((k, v)) if k == name => Some(v),
                None if pair == name => Some(""),
                _ => None,
            })
    }

    /// The body parsed as JSON, or `Null` when it is not JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }
}

/// A rule and how often it has answered.
#[derive(Debug)]
struct Rule {
    matcher: Matcher,
    behavior: Behavior,
    used: usize,
}

impl Rule {
    fn has_uses_left(&self) -> bool {
        self.behavior.times.is_none_or(|n| self.used < n)
    }
}

/// A rule as reported by the control API.
#[derive(Debug, Serialize)]
pub struct RuleReport {
    pub index: usize,
    pub matcher: Matcher,
    pub used: usize,
    pub remaining: Option<usize>,
}

/// Exact counters, kept even when old requests fall out of the bounded record.
#[derive(Debug, Default, Serialize)]
pub struct HitCounts {
    pub total: usize,
    pub by_path: BTreeMap<String, usize>,
    pub by_credential: BTreeMap<String, usize>,
    pub by_model: BTreeMap<String, usize>,
    /// Requests served by the default answer (no rule matched).
    pub unmatched: usize,
}

/// Rules, counters and the request record, behind the server's mutex.
#[derive(Debug)]
pub(crate) struct Script {
    rules: Vec<Rule>,
    counts: HitCounts,
    record: VecDeque<RecordedRequest>,
    record_limit: usize,
    reported_usage: ReportedUsage,
}

impl Script {
    pub(crate) fn new(record_limit: usize) -> Self {
        Self {
            rules: Vec::new(),
            counts: HitCounts::default(),
            record: VecDeque::new(),
            record_limit,
            reported_usage: ReportedUsage::default(),
        }
    }

    pub(crate) fn add_rule(&mut self, matcher: Matcher, behavior: Behavior) -> usize {
        self.rules.push(Rule {
            matcher,
            behavior,
            used: 0,
        });
        self.rules.len() - 1
    }

    /// Records `request` and returns the behaviour of the first matching rule with uses left
    /// (consuming one use), or `None` for the default answer.
    pub(crate) fn answer(&mut self, request: &RecordedRequest) -> Option<Behavior> {
        self.record(request);
        let rule = self
            .rules
            .iter_mut()
            .find(|r| r.has_uses_left() && r.matcher.matches(request));
        match rule {
            Some(rule) => {
                rule.used += 1;
                Some(rule.behavior.clone())
            }
            None => {
                self.counts.unmatched += 1;
                None
            }
        }
    }

    /// Counts and records `request` without consulting the rules (a request the mock refuses
    /// before any rule could apply, as the real upstream would).
    pub(crate) fn record(&mut self, request: &RecordedRequest) {
        let counts = &mut self.counts;
        counts.total += 1;
        *counts.by_path.entry(request.path.clone()).or_default() += 1;
        if let Some(c) = &request.credential {
            *counts.by_credential.entry(c.clone()).or_default() += 1;
        }
        if let Some(m) = &request.model {
            *counts.by_model.entry(m.clone()).or_default() += 1;
        }
        if self.record_limit > 0 {
            if self.record.len() >= self.record_limit {
                self.record.pop_front();
            }
            self.record.push_back(request.clone());
        }
    }

    pub(crate) fn add_reported_usage(&mut self, usage: ReportedUsage) {
        self.reported_usage.add(usage);
    }

    pub(crate) fn reported_usage(&self) -> ReportedUsage {
        self.reported_usage
    }

    pub(crate) fn hits(&self) -> usize {
        self.counts.total
    }

    pub(crate) fn counts(&self) -> &HitCounts {
        &self.counts
    }

    pub(crate) fn hits_matching(&self, matcher: &Matcher) -> usize {
        self.record.iter().filter(|r| matcher.matches(r)).count()
    }

    pub(crate) fn requests(&self) -> Vec<RecordedRequest> {
        self.record.iter().cloned().collect()
    }

    pub(crate) fn rule_reports(&self) -> Vec<RuleReport> {
        self.rules
            .iter()
            .enumerate()
            .map(|(index, r)| RuleReport {
                index,
                matcher: r.matcher.clone(),
                used: r.used,
                remaining: r.behavior.times.map(|n| n.saturating_sub(r.used)),
            })
            .collect()
    }

    pub(crate) fn reset(&mut self) {
        self.rules.clear();
        self.counts = HitCounts::default();
        self.record.clear();
        self.reported_usage = ReportedUsage::default();
    }
}

/// Token usage the mock's answers reported, summed (see [`crate::MockUpstream::reported_usage`]).
/// `input_tokens` counts the cached ones too, whatever the protocol's own field says (Anthropic's
/// `input_tokens` leaves out `cache_read_input_tokens`): the one meaning a gateway reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReportedUsage {
    /// Answers that carried a usage block.
    pub answers: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cached_tokens: u64,
}

impl ReportedUsage {
    pub(crate) fn of(answer: &switchyard_sim::Answer) -> Self {
        Self {
            answers: 1,
            input_tokens: answer.input_tokens(),
            output_tokens: answer.output_tokens(),
            cached_tokens: answer.cached_tokens,
        }
    }

    pub(crate) fn add(&mut self, other: ReportedUsage) {
        self.answers += other.answers;
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.cached_tokens += other.cached_tokens;
    }
}

/// What the mock's realtime sessions received, oldest first.
#[derive(Debug, Clone, Default)]
pub struct RealtimeLog {
    /// Sessions opened.
    pub sessions: usize,
    /// The `type` of every client event received.
    pub events: Vec<String>,
    /// The close code of every close frame a client sent.
    pub closes: Vec<u16>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(path: &str, credential: Option<&str>, model: Option<&str>) -> RecordedRequest {
        RecordedRequest {
            method: "POST".into(),
            version: http::Version::HTTP_11,
            path: path.into(),
            query: None,
            credential: credential.map(Into::into),
            headers: http::HeaderMap::new(),
            body: Bytes::new(),
            model: model.map(Into::into),
        }
    }

    #[test]
    fn matcher_requires_every_field_it_sets() {
        let r = request("/v1/chat/completions", Some("sk-a"), Some("gpt"));
        assert!(Matcher::any().matches(&r));
        assert!(Matcher::path("/v1/chat/completions").matches(&r));
        assert!(!Matcher::path("/v1/embeddings").matches(&r));
        assert!(Matcher::path("/v1/chat/completions")
            .credential("sk-a")
            .model("gpt")
            .matches(&r));
        assert!(!Matcher::any().credential("sk-b").matches(&r));
        assert!(!Matcher::any()
            .model("gpt")
            .matches(&request("/x", None, None)));
    }

    #[test]
    fn first_matching_rule_with_uses_left_answers() {
        let mut script = Script::new(10);
        script.add_rule(Matcher::any(), Behavior::status(429).times(2));
        script.add_rule(Matcher::any(), Behavior::status(500));
        let r = request("/v1/models", None, None);
        let statuses: Vec<_> = (0..4)
            .map(|_| script.answer(&r).and_then(|b| b.status))
            .collect();
        assert_eq!(statuses, [Some(429), Some(429), Some(500), Some(500)]);
        assert_eq!(script.rule_reports()[0].remaining, Some(0));
        assert_eq!(script.hits(), 4);
    }

    #[test]
    fn record_is_bounded_but_counts_are_exact() {
        let mut script = Script::new(2);
        for _ in 0..5 {
            assert!(script.answer(&request("/a", Some("k"), None)).is_none());
        }
        assert_eq!(script.hits(), 5);
        assert_eq!(script.counts().by_credential["k"], 5);
        assert_eq!(script.counts().unmatched, 5);
        assert_eq!(script.requests().len(), 2);
        script.reset();
        assert_eq!(script.hits(), 0);
        assert!(script.requests().is_empty());
    }
}
